//! What a replay reports, in the bench's terms: read and write latency
//! (mean, p50, p99, from the moment each request was due to its reply,
//! less the replayer's own lateness), how late the replayer sent requests
//! and how long they waited for the daemon's socket, and from
//! the daemon's counters before and after: the SSD's share of read bytes,
//! the HDD's busy seconds, the bytes migration moved. As JSON (`--json`)
//! or as text.

use serde::Serialize;
use tierd::control::{Status, TierStatus};
use tierd::trace::Op;
use tierd::units::human_bytes;
use tierd::volume::Tier;

use super::send::{Req, Timing};

/// Mean and quantiles of a set of durations, in µs.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Spread {
    /// How many.
    pub n: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Spread {
    /// Of `ns` (nanoseconds; sorted here). Quantiles by nearest rank.
    pub fn of(mut ns: Vec<u64>) -> Spread {
        if ns.is_empty() {
            return Spread::default();
        }
        ns.sort_unstable();
        let n = ns.len();
        let rank = |q: f64| ns[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3;
        Spread {
            n: n as u64,
            mean_us: ns.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1e3,
            p50_us: rank(0.5),
            p99_us: rank(0.99),
            max_us: ns[n - 1] as f64 / 1e3,
        }
    }
}

/// The daemon's counters over the replay.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Counters {
    /// SSD share of the bytes read (`None`: nothing read from a device).
    pub read_hit_share: Option<f64>,
    /// SSD share of the bytes users wrote.
    pub write_ssd_share: Option<f64>,
    /// HDD busy seconds.
    pub hdd_busy_s: f64,
    /// SSD busy seconds.
    pub ssd_busy_s: f64,
    /// What the HDD's seconds are: `model` (the modelled drive's own
    /// work, `--hdd-model`) or `device` (time with an operation in
    /// flight); the SSD's are its model's too when it has one.
    pub busy_source: &'static str,
    /// Bytes copied to the SSD.
    pub promoted_bytes: u64,
    /// Bytes copied to the HDD (demotions and write-back).
    pub demoted_bytes: u64,
}

fn tier(s: &Status, t: Tier) -> Option<&TierStatus> {
    s.tiers.iter().find(|x| x.tier == t)
}

fn share(a: u64, b: u64) -> Option<f64> {
    (a + b > 0).then(|| a as f64 / (a + b) as f64)
}

impl Counters {
    /// What changed from `before` to `after`.
    pub fn between(before: &Status, after: &Status) -> Counters {
        let d = |t: Tier, f: fn(&TierStatus) -> u64| {
            let get = |s: &Status| tier(s, t).map_or(0, f);
            get(after).saturating_sub(get(before))
        };
        // A tier on a model counts the modelled drive's work, else the
        // time it had an operation in flight.
        let model = |s: &Status, t: Tier| tier(s, t).and_then(|x| x.model_busy_secs);
        let on_model = |t: Tier| model(before, t).is_some() && model(after, t).is_some();
        let busy = |t: Tier| {
            let get = |s: &Status| match on_model(t) {
                true => model(s, t).unwrap_or(0.0),
                false => tier(s, t).map_or(0.0, |x| x.busy_secs),
            };
            (get(after) - get(before)).max(0.0)
        };
        let (m0, m1) = (&before.migration, &after.migration);
        Counters {
            read_hit_share: share(
                d(Tier::Ssd, |t| t.read_hit_bytes),
                d(Tier::Hdd, |t| t.read_hit_bytes),
            ),
            write_ssd_share: share(
                d(Tier::Ssd, |t| t.write_landed_bytes),
                d(Tier::Hdd, |t| t.write_landed_bytes),
            ),
            hdd_busy_s: busy(Tier::Hdd),
            ssd_busy_s: busy(Tier::Ssd),
            busy_source: if on_model(Tier::Hdd) {
                "model"
            } else {
                "device"
            },
            promoted_bytes: m1.promoted_bytes.saturating_sub(m0.promoted_bytes),
            demoted_bytes: m1.demoted_bytes.saturating_sub(m0.demoted_bytes),
        }
    }
}

/// Requests by op, answered, failed.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Counts {
    /// All requests.
    pub requests: u64,
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Trims.
    pub trims: u64,
    /// Write-zeroes.
    pub zeroes: u64,
    /// Flushes.
    pub flushes: u64,
    /// Answered (successfully or not).
    pub answered: u64,
    /// Answered with an error, or never answered.
    pub errors: u64,
}

/// The replay's own measurements.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Requests.
    pub counts: Counts,
    /// Reads, from when each was due (plus the replayer's own lateness)
    /// to its reply.
    pub read: Spread,
    /// Writes, likewise.
    pub write: Spread,
    /// Trims, write-zeroes and flushes, likewise.
    pub other: Spread,
    /// How late the replayer itself began sending each request.
    pub issue_late: Spread,
    /// How long each request waited for the daemon's socket to take it
    /// (the daemon not reading while it has its most in flight; part of
    /// the latency).
    pub socket_wait: Spread,
    /// Seconds from the start to the last reply.
    pub elapsed_s: f64,
}

impl Measured {
    /// From the requests and what happened to them.
    pub fn of(reqs: &[Req], t: &Timing) -> Measured {
        let mut c = Counts {
            requests: reqs.len() as u64,
            ..Counts::default()
        };
        let (mut read, mut write, mut other) = (Vec::new(), Vec::new(), Vec::new());
        let (mut late, mut wait) = (Vec::new(), Vec::new());
        let mut elapsed = 0u64;
        for (i, r) in reqs.iter().enumerate() {
            match r.op {
                Op::Read => c.reads += 1,
                Op::Write => c.writes += 1,
                Op::Trim => c.trims += 1,
                Op::Zero => c.zeroes += 1,
                Op::Flush => c.flushes += 1,
            }
            let (sent, answered) = (t.sent[i], t.answered[i]);
            // From when the request could have gone had the replayer been
            // on time: its due time plus the replayer's own lateness.
            let from = r.due_ns + t.late[i];
            if sent != u64::MAX {
                late.push(t.late[i]);
                wait.push(t.written[i].saturating_sub(from));
            }
            if answered == u64::MAX {
                c.errors += 1;
                continue;
            }
            c.answered += 1;
            elapsed = elapsed.max(answered);
            if t.errno[i] != 0 {
                c.errors += 1;
                continue;
            }
            let lat = answered.saturating_sub(from);
            match r.op {
                Op::Read => read.push(lat),
                Op::Write => write.push(lat),
                _ => other.push(lat),
            }
        }
        Measured {
            counts: c,
            read: Spread::of(read),
            write: Spread::of(write),
            other: Spread::of(other),
            issue_late: Spread::of(late),
            socket_wait: Spread::of(wait),
            elapsed_s: elapsed as f64 / 1e9,
        }
    }
}

/// Everything a replay reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The trace file.
    pub trace: String,
    /// Its format.
    pub format: String,
    /// What made it.
    pub source: String,
    /// The NBD address.
    pub nbd: String,
    /// Times faster than recorded.
    pub speed: f64,
    /// Connections.
    pub connections: usize,
    /// How requests were spread over them: `trace-connection` or
    /// `round-robin`.
    pub spread_by: &'static str,
    /// The trace's length at this speed, seconds.
    pub duration_s: f64,
    /// Share of the volume's extents holding data at the start.
    pub fill: f64,
    /// Where the data lies.
    pub layout: serde_json::Value,
    /// What laying it out did.
    pub prepared: serde_json::Value,
    /// Requests.
    pub requests: u64,
    /// Answered with an error, or never answered.
    pub errors: u64,
    /// Read latency.
    pub read_mean_us: f64,
    /// Median read latency.
    pub read_p50_us: f64,
    /// 99th percentile read latency.
    pub read_p99_us: f64,
    /// Write latency.
    pub write_mean_us: f64,
    /// Median write latency.
    pub write_p50_us: f64,
    /// 99th percentile write latency.
    pub write_p99_us: f64,
    /// Median lateness of sending against the schedule.
    pub issue_late_p50_us: f64,
    /// 99th percentile lateness.
    pub issue_late_p99_us: f64,
    /// Largest lateness.
    pub issue_late_max_us: f64,
    /// 99th percentile of the wait for the daemon's socket.
    pub socket_wait_p99_us: f64,
    /// SSD share of the bytes read.
    pub read_hit_share: Option<f64>,
    /// HDD busy seconds over the replay.
    pub hdd_busy_s: f64,
    /// Bytes migration moved over the replay (up and down).
    pub moved_bytes: u64,
    /// The replay in detail.
    pub measured: Measured,
    /// The daemon's counters in detail.
    pub counters: Counters,
    /// What `--verify` found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<super::data::Checked>,
}

impl Report {
    /// The human-readable form.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let mut line = |k: &str, v: String| t.push_str(&format!("{k:<12} {v}\n"));
        let m = &self.measured;
        let c = &m.counts;
        line(
            "trace",
            format!("{} ({}, {})", self.trace, self.format, self.source),
        );
        line(
            "replay",
            format!(
                "{} requests over {:.1} s ({}x), {} connections ({}), to {}",
                c.requests, self.duration_s, self.speed, self.connections, self.spread_by, self.nbd
            ),
        );
        line(
            "layout",
            format!("fill {:.3}: {}", self.fill, compact(&self.layout)),
        );
        line("prepared", compact(&self.prepared));
        line(
            "requests",
            format!(
                "{} answered, {} errors; {} reads, {} writes, {} trims, {} zeroes, {} flushes; last reply at {:.1} s",
                c.answered, c.errors, c.reads, c.writes, c.trims, c.zeroes, c.flushes, m.elapsed_s
            ),
        );
        let spread = |s: &Spread| {
            format!(
                "mean {:.0} µs, p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({})",
                s.mean_us, s.p50_us, s.p99_us, s.max_us, s.n
            )
        };
        line("read", spread(&m.read));
        line("write", spread(&m.write));
        if m.other.n > 0 {
            line("other", spread(&m.other));
        }
        line("sent late", spread(&m.issue_late));
        line("socket wait", spread(&m.socket_wait));
        let k = &self.counters;
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
        line(
            "read-hit",
            format!("{} of read bytes from the SSD", opt(k.read_hit_share)),
        );
        line(
            "writes",
            format!(
                "{} of written bytes landed on the SSD",
                opt(k.write_ssd_share)
            ),
        );
        line(
            "busy",
            format!(
                "HDD {:.1} s, SSD {:.1} s ({})",
                k.hdd_busy_s, k.ssd_busy_s, k.busy_source
            ),
        );
        line(
            "moved",
            format!(
                "{} up, {} down",
                human_bytes(k.promoted_bytes),
                human_bytes(k.demoted_bytes)
            ),
        );
        if let Some(v) = &self.verify {
            line(
                "verify",
                format!(
                    "{} sectors compared, {} wrong, {} unknown{}",
                    v.sectors,
                    v.wrong,
                    v.unknown,
                    v.first_wrong
                        .as_ref()
                        .map_or(String::new(), |w| format!(" (first: {w})"))
                ),
            );
        }
        t
    }
}

/// `key value, key value` of a JSON object.
fn compact(v: &serde_json::Value) -> String {
    match v.as_object() {
        Some(o) => o
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        None => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let s = Spread::of((1..=100).map(|x| x * 1000).collect());
        assert_eq!(
            (s.n, s.p50_us, s.p99_us, s.max_us),
            (100, 50.0, 99.0, 100.0)
        );
        assert!((s.mean_us - 50.5).abs() < 1e-9);
        assert_eq!(Spread::of(Vec::new()).n, 0);
        assert_eq!(Spread::of(vec![7000]).p99_us, 7.0);
    }

    #[test]
    fn latency_counts_the_daemons_socket_wait_but_not_the_replayers_lateness() {
        let req = |due_ns, op| Req {
            due_ns,
            op,
            offset: 0,
            len: 4096,
            fua: false,
            slot: 0,
        };
        let reqs = [
            req(0, Op::Read),
            req(1_000, Op::Write),
            req(2_000, Op::Read),
        ];
        // The first read went 100 ns late by the replayer's fault; the
        // write waited 5,000 ns for the socket (the daemon not reading),
        // which held the second read back too; that one failed.
        let t = Timing {
            sent: vec![100, 1_000, 6_000],
            written: vec![110, 6_000, 6_010],
            late: vec![100, 0, 0],
            answered: vec![1_100, 9_000, 7_000],
            errno: vec![0, 0, 5],
            failure: None,
        };
        let m = Measured::of(&reqs, &t);
        assert_eq!(m.read.n, 1);
        assert_eq!(m.read.mean_us, 1.0, "1,100 - (0 + 100)");
        assert_eq!(
            m.write.mean_us, 8.0,
            "9,000 - 1,000: the socket wait counts"
        );
        assert_eq!(m.issue_late.max_us, 0.1);
        assert_eq!(m.socket_wait.max_us, 5.0);
        assert_eq!((m.counts.answered, m.counts.errors), (3, 1));
        assert_eq!(m.elapsed_s, 9e-6);
    }
}
