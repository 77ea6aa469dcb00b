//! Trace replays (`tierd bench --trace FILE`): each trace played, at each
//! SSD size asked for, on every executed target of a fresh test bed
//! ([`crate::bed`]: the hybrid at the stated fill, the pure SSD, the pure
//! HDD and three caches that pay for their copies on the same drives),
//! judged by what users wait for and what the HDD spends: read and write
//! latency (mean, p50, p99), the HDD's head time for users and copies
//! alike, SSD bytes written per host byte, bytes moved between the tiers,
//! read-hit share. Beside them, the textbook counters (LRU, LFU, ARC,
//! smq-like, the popularity oracle, the optimum: free admission, no device
//! time) give read-hit shares at the hybrid's room, and a chart each of
//! read latency and of read-hit share against SSD size.

use serde::{Deserialize, Serialize};

use super::{Bench, Chart, Goal, Panel};
use crate::bed::{is_cache, ssd_for_room, Bed};
use crate::replay::{self, Raw};
use crate::sim::{curve, simulate, PolicyKind, SimConfig};
use crate::target::{IoKind, Measurement, OpLatency, Usage};
use tierd::units::REASONS;
use tierd::volume::{Stats, Tier};

/// What a trace replay measured on one target, beside its point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceDetail {
    /// The share of the hybrid's volume that held data before the run.
    pub fill: f64,
    /// The SSD's size (the caches' and the hybrid's).
    pub ssd_size: u64,
    /// The hybrid's room for data on it (its SSD less the reserve).
    pub room_bytes: u64,
    /// The reads' latency.
    pub read: Option<OpLatency>,
    /// The writes' latency.
    pub write: Option<OpLatency>,
    /// Seconds the HDD worked (head time: users' requests and copies).
    pub hdd_busy_s: f64,
    /// Seconds the SSD worked.
    pub ssd_busy_s: f64,
    /// Bytes written to the SSD per byte the host read or wrote.
    pub ssd_write_per_host_byte: f64,
    /// Bytes copied between the tiers.
    pub moved_bytes: u64,
    /// Read bytes the SSD served, of all read bytes.
    pub read_hit_share: f64,
    /// Write bytes that landed on flash, of all write bytes.
    pub write_ssd_share: f64,
}

/// Share `a / (a + b)`, 0 when both are 0.
fn share(a: u64, b: u64) -> f64 {
    if a + b == 0 {
        0.0
    } else {
        a as f64 / (a + b) as f64
    }
}

/// A room share as a case suffix: `0.25` -> `room-0.25`.
fn room_name(r: f64) -> String {
    format!("room-{}", (r * 1000.0).round() / 1000.0)
}

impl Bench {
    /// The SSD sizes a trace of `footprint` extents replays on: one per
    /// room asked for (with the room), or `--ssd-size`.
    pub(crate) fn trace_sizes(&self, footprint: u64) -> Vec<(Option<f64>, u64)> {
        let es = self.extent_size;
        if self.opts.trace_rooms.is_empty() {
            return vec![(None, self.opts.ssd_size)];
        }
        self.opts
            .trace_rooms
            .iter()
            .map(|&r| {
                let room = (r * footprint as f64).ceil() as u64;
                (Some(r), ssd_for_room(room, es, self.opts.hdd_size))
            })
            .collect()
    }

    /// Replay one trace at every SSD size asked for and compare.
    pub(crate) fn replay_trace(&mut self, raw: &Raw) {
        let es = self.extent_size;
        let footprint = raw.footprint(es);
        let fill = self.opts.trace_fill();
        let sizes = self.trace_sizes(footprint);
        // Per target, (SSD GiB, read mean ms) and (SSD GiB, HDD busy s).
        let mut lat_curve: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut busy_curve: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut hit_points: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        let mut rooms: Vec<u64> = Vec::new();
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        for (room, ssd_size) in sizes {
            let case = match room {
                None => raw.name.clone(),
                Some(r) => format!("{}/{}", raw.name, room_name(r)),
            };
            self.progress(&format!(
                "trace {case}: building the test bed (SSD {} MiB, fill {fill})",
                ssd_size >> 20
            ));
            let bed = match Bed::build(&self.opts, ssd_size, footprint, fill) {
                Ok(b) => b,
                Err(e) => {
                    self.progress(&format!("trace {case}: {e}"));
                    continue;
                }
            };
            let trace = match raw.fit(es, bed.layout.base * es, self.opts.hdd_size) {
                Ok(t) => t,
                Err(e) => {
                    self.progress(&format!("trace {case}: {e}"));
                    continue;
                }
            };
            rooms.push(bed.room);
            let details = self.replay_on_bed(&case, &bed, &trace);
            for (name, d) in &details {
                let x = gib(d.ssd_size);
                let push = |c: &mut Vec<(String, Vec<(f64, f64)>)>, y: f64| match c
                    .iter_mut()
                    .find(|(n, _)| n == name)
                {
                    Some((_, v)) => v.push((x, y)),
                    None => c.push((name.clone(), vec![(x, y)])),
                };
                push(&mut lat_curve, d.read.map_or(0.0, |l| l.mean_us / 1000.0));
                push(&mut busy_curve, d.hdd_busy_s);
                if name == "hybrid" || is_cache(name) {
                    let y = 100.0 * d.read_hit_share;
                    let x = gib(d.room_bytes);
                    match hit_points.iter_mut().find(|(n, _)| n == name) {
                        Some((_, v)) => v.push((x, y)),
                        None => hit_points.push((name.clone(), vec![(x, y)])),
                    }
                }
            }
            self.verdicts(&case, &details);
            let hybrid = details
                .iter()
                .find(|(n, _)| n == "hybrid")
                .map(|(_, d)| d.clone());
            self.textbook(&case, &trace, bed.room, hybrid.as_ref());
        }
        if !lat_curve.is_empty() {
            self.charts.push(Chart {
                name: format!("trace-{}-latency", raw.name),
                title: format!(
                    "{}: mean read latency and HDD time against SSD size (fill {fill})",
                    raw.name
                ),
                x_label: "SSD GiB".into(),
                y_label: "mean read ms".into(),
                log_x: false,
                series: lat_curve,
                x_names: Vec::new(),
                below: vec![Panel {
                    y_label: "HDD busy s".into(),
                    y_max: None,
                    series: busy_curve,
                }],
            });
        }
        self.hit_chart(raw, &rooms, hit_points);
    }

    /// Replay `trace` on every target of `bed`; each target's point and
    /// findings; returns each target's detail.
    fn replay_on_bed(
        &mut self,
        case: &str,
        bed: &Bed,
        trace: &replay::Fitted,
    ) -> Vec<(String, TraceDetail)> {
        let suite = "trace";
        let (read_bytes, write_bytes) = trace.bytes();
        let host = (read_bytes + write_bytes).max(1);
        let mut out = Vec::new();
        for (i, t) in bed.targets.iter().enumerate() {
            let name = t.name();
            self.progress(&format!(
                "trace {case} on {name} ({} requests)",
                trace.records.len()
            ));
            let before = t.usage();
            let moves_before = t.volume().map(|v| Moves::of(v.stats()));
            let mig = if i == 0 {
                bed.migrator.as_deref()
            } else {
                None
            };
            let m = replay::execute(&bed.sched, t.as_ref(), trace, self.opts.trace_speed, mig);
            let u = t.usage().since(before);
            if let (Some(b), Some(v)) = (moves_before, t.volume()) {
                let moves = Moves::of(v.stats()).since(&b);
                self.finding(
                    suite,
                    &format!("{case}/{name}-moves"),
                    moves.total() as f64,
                    "moves",
                    moves.to_string(),
                );
            }
            let d = detail(bed, &m, &u, host);
            let spec = crate::workload::Spec::simple(
                share(read_bytes, write_bytes),
                1.0,
                0,
                trace.base,
                trace.extents * self.extent_size,
            );
            let mut p = super::point(self, suite, case, t.as_ref(), 0, &spec, &m);
            p.block = host / m.ops.max(1);
            p.trace = Some(d.clone());
            self.points.push(p);
            self.target_findings(case, name, &d, &u, trace);
            out.push((name.to_string(), d));
        }
        out
    }

    /// The named findings of one target's replay.
    fn target_findings(
        &mut self,
        case: &str,
        name: &str,
        d: &TraceDetail,
        u: &Usage,
        trace: &replay::Fitted,
    ) {
        let suite = "trace";
        let what = format!(
            "{} requests over {:.0} s ({} replayed {}x faster), {} extents ({} MiB) touched; fill {:.2}, SSD {} MiB{}",
            trace.records.len(),
            trace.duration().as_secs_f64(),
            trace.source,
            self.opts.trace_speed,
            trace.extents,
            (trace.extents * self.extent_size) >> 20,
            d.fill,
            d.ssd_size >> 20,
            if is_cache(name) {
                "; a cache: its capacity is the HDD's alone"
            } else {
                ""
            }
        );
        for (k, kind) in [("read", d.read), ("write", d.write)] {
            if let Some(l) = kind {
                self.finding(
                    suite,
                    &format!("{case}/{name}-{k}-mean-us"),
                    l.mean_us,
                    "us",
                    format!("{} {k}s; {what}", l.count),
                );
                self.finding(
                    suite,
                    &format!("{case}/{name}-{k}-p99-us"),
                    l.p99_us,
                    "us",
                    format!("p50 {:.0} us", l.p50_us),
                );
            }
        }
        self.finding(
            suite,
            &format!("{case}/{name}-hdd-busy-s"),
            d.hdd_busy_s,
            "s",
            format!(
                "the HDD's head time, users' requests and copies; the SSD worked {:.1} s",
                d.ssd_busy_s
            ),
        );
        self.finding(
            suite,
            &format!("{case}/{name}-ssd-write-per-host-byte"),
            d.ssd_write_per_host_byte,
            "ratio",
            format!(
                "{} MiB written to the SSD, {} MiB moved between the tiers",
                u.ssd_written >> 20,
                u.moved >> 20
            ),
        );
        self.finding(
            suite,
            &format!("{case}/{name}-read-hit-share"),
            d.read_hit_share,
            "share",
            "read bytes served by the SSD (a block in the write log included)".into(),
        );
        if name == "hybrid" {
            self.finding(
                suite,
                &format!("{case}/hybrid-write-ssd-share"),
                d.write_ssd_share,
                "share",
                "write bytes that landed on flash (SSD extents and the write log)".into(),
            );
        }
    }

    /// The verdicts: the hybrid against the best executed cache and
    /// the pure drives, by time.
    fn verdicts(&mut self, case: &str, details: &[(String, TraceDetail)]) {
        let suite = "trace";
        let get = |n: &str| details.iter().find(|(k, _)| k == n).map(|(_, d)| d);
        let Some(h) = get("hybrid") else {
            return;
        };
        let caches: Vec<&TraceDetail> = details
            .iter()
            .filter(|(k, _)| is_cache(k))
            .map(|(_, d)| d)
            .collect();
        let best = |f: &dyn Fn(&TraceDetail) -> Option<f64>| {
            caches
                .iter()
                .filter_map(|d| f(d))
                .fold(f64::INFINITY, f64::min)
        };
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let read_mean = |d: &TraceDetail| d.read.map(|l| l.mean_us);
        let read_p99 = |d: &TraceDetail| d.read.map(|l| l.p99_us);
        let full = h.fill >= 0.999;
        let (mean_goal, p99_goal) = if full { (1.5, 1.5) } else { (1.0, 1.1) };
        if let Some(hm) = read_mean(h) {
            let b = best(&read_mean);
            self.finding_against(
                suite,
                &format!("{case}/hybrid-read-mean-vs-best-cache"),
                ratio(hm, b),
                "ratio",
                format!("{hm:.0} us against the best cache's {b:.0} us"),
                Goal::AtMost(mean_goal),
            );
        }
        if let Some(hp) = read_p99(h) {
            let b = best(&read_p99);
            self.finding_against(
                suite,
                &format!("{case}/hybrid-read-p99-vs-best-cache"),
                ratio(hp, b),
                "ratio",
                format!("{hp:.0} us against the best cache's {b:.0} us"),
                Goal::AtMost(p99_goal),
            );
        }
        if full {
            if let Some(hdd) = get("pure-hdd") {
                for (k, f) in [
                    ("mean", &read_mean as &dyn Fn(&TraceDetail) -> Option<f64>),
                    ("p99", &read_p99),
                ] {
                    if let (Some(a), Some(b)) = (f(h), f(hdd)) {
                        self.finding_against(
                            suite,
                            &format!("{case}/hybrid-read-{k}-vs-pure-hdd"),
                            ratio(a, b),
                            "ratio",
                            format!("{a:.0} us against the pure HDD's {b:.0} us"),
                            Goal::AtMost(1.0),
                        );
                    }
                }
            }
            return;
        }
        let b = best(&|d: &TraceDetail| Some(d.hdd_busy_s));
        self.finding_against(
            suite,
            &format!("{case}/hybrid-hdd-busy-vs-best-cache"),
            ratio(h.hdd_busy_s, b),
            "ratio",
            format!(
                "{:.1} s of HDD head time against the best cache's {b:.1} s",
                h.hdd_busy_s
            ),
            Goal::AtMost(1.0),
        );
        if h.write.is_some() {
            self.finding_against(
                suite,
                &format!("{case}/hybrid-write-on-flash"),
                h.write_ssd_share,
                "share",
                "write bytes that landed on flash".into(),
                Goal::AtLeast(0.95),
            );
            if let (Some(a), Some(s)) = (h.write, get("pure-ssd").and_then(|d| d.write)) {
                self.finding_against(
                    suite,
                    &format!("{case}/hybrid-write-mean-vs-pure-ssd"),
                    ratio(a.mean_us, s.mean_us),
                    "ratio",
                    format!(
                        "{:.0} us against the pure SSD's {:.0} us",
                        a.mean_us, s.mean_us
                    ),
                    Goal::AtMost(1.5),
                );
            }
        }
    }

    /// The textbook counters at the hybrid's room: read-hit shares with
    /// free admission and no device time.
    fn textbook(
        &mut self,
        case: &str,
        trace: &replay::Fitted,
        room: u64,
        hybrid: Option<&TraceDetail>,
    ) {
        let suite = "trace";
        let cfg = SimConfig {
            unit: self.extent_size,
            capacity_units: room.max(1),
        };
        let accesses = trace.accesses();
        let mut shares: Vec<(PolicyKind, f64)> = Vec::new();
        for kind in PolicyKind::ALL {
            let r = simulate(kind, &cfg, &accesses);
            self.finding(
                suite,
                &format!("{case}/{}-read-hit-share", kind.name()),
                r.read_hit_share(),
                "share",
                format!(
                    "textbook, at the hybrid's room ({} MiB), admission free: migration {:.3} bytes per host byte, {} MiB written to the SSD",
                    (room * self.extent_size) >> 20,
                    r.migration_per_host_byte(),
                    r.ssd_write_bytes >> 20
                ),
            );
            shares.push((kind, r.read_hit_share()));
        }
        // The hybrid beside them, as counts: clues, not verdicts.
        let Some(h) = hybrid else { return };
        let of = |k: PolicyKind| shares.iter().find(|(p, _)| *p == k).map_or(0.0, |x| x.1);
        let optimal = of(PolicyKind::Optimal);
        let best = [PolicyKind::Lru, PolicyKind::Arc, PolicyKind::Smq]
            .into_iter()
            .map(of)
            .fold(0.0, f64::max);
        self.finding(
            suite,
            &format!("{case}/hybrid-vs-optimal"),
            if optimal > 0.0 {
                h.read_hit_share / optimal
            } else {
                0.0
            },
            "ratio",
            format!("read-hit share against the offline optimum's {optimal:.3} (counts)"),
        );
        self.finding(
            suite,
            &format!("{case}/hybrid-minus-best-classic"),
            h.read_hit_share - best,
            "share",
            format!("against the best of LRU, ARC and smq-like, {best:.3} (counts)"),
        );
        let (r, w) = trace.bytes();
        self.finding(
            suite,
            &format!("{case}/hybrid-migration-per-host-byte"),
            h.moved_bytes as f64 / (r + w).max(1) as f64,
            "ratio",
            format!("{} MiB moved between the tiers", h.moved_bytes >> 20),
        );
    }

    /// Read-hit share against SSD size: the textbook curves, and the
    /// executed targets' points at the sizes replayed.
    fn hit_chart(&mut self, raw: &Raw, rooms: &[u64], executed: Vec<(String, Vec<(f64, f64)>)>) {
        let es = self.extent_size;
        if rooms.is_empty() {
            return;
        }
        let footprint = raw.footprint(es).max(1);
        let mut caps: Vec<u64> = [0.0625, 0.125, 0.25, 0.5, 1.0]
            .iter()
            .map(|f| ((footprint as f64 * f).round() as u64).max(1))
            .chain(rooms.iter().copied())
            .collect();
        caps.sort_unstable();
        caps.dedup();
        let Ok(trace) = raw.fit(es, 0, u64::MAX) else {
            return;
        };
        let accesses = trace.accesses();
        let gib = |units: u64| (units * es) as f64 / (1u64 << 30) as f64;
        let mut chart = Chart {
            name: format!("trace-{}", raw.name),
            title: format!(
                "{}: SSD read-hit share against SSD room (textbook counters: free admission)",
                raw.name
            ),
            x_label: "SSD GiB for data".into(),
            y_label: "read-hit share %".into(),
            log_x: false,
            series: Vec::new(),
            x_names: Vec::new(),
            below: Vec::new(),
        };
        for kind in PolicyKind::ALL {
            let pts: Vec<(f64, f64)> = curve(&[kind], es, &caps, &accesses)
                .iter()
                .map(|r| (gib(r.capacity_units), 100.0 * r.read_hit_share()))
                .collect();
            chart.series.push((kind.name().to_string(), pts));
        }
        // The executed targets (the hybrid, the caches), at the hybrid's
        // room for each SSD size.
        chart.series.extend(executed);
        self.charts.push(chart);
    }
}

/// The hybrid's moves by direction and reason, and the moves that cost
/// nothing or went by blocks.
#[derive(Debug, Clone, PartialEq)]
struct Moves {
    by_reason: [[u64; REASONS.len()]; 2],
    free_demotions: u64,
    written_back_blocks: u64,
    precleaned: u64,
}

impl Moves {
    fn of(s: &Stats) -> Moves {
        Moves {
            by_reason: [Tier::Ssd, Tier::Hdd].map(|t| REASONS.map(|r| s.migrations_to(t, r))),
            free_demotions: Stats::get(&s.free_demotions),
            written_back_blocks: Stats::get(&s.written_back_blocks),
            precleaned: Stats::get(&s.precleaned),
        }
    }

    fn since(&self, b: &Moves) -> Moves {
        let mut by_reason = self.by_reason;
        for (t, row) in by_reason.iter_mut().enumerate() {
            for (r, x) in row.iter_mut().enumerate() {
                *x -= b.by_reason[t][r];
            }
        }
        Moves {
            by_reason,
            free_demotions: self.free_demotions - b.free_demotions,
            written_back_blocks: self.written_back_blocks - b.written_back_blocks,
            precleaned: self.precleaned - b.precleaned,
        }
    }

    fn total(&self) -> u64 {
        self.by_reason.iter().flatten().sum()
    }
}

impl std::fmt::Display for Moves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (t, dir) in [(0, "up"), (1, "down")] {
            write!(f, "{dir}:")?;
            for (r, n) in REASONS.iter().zip(self.by_reason[t]) {
                if n > 0 {
                    write!(f, " {} {n}", r.name())?;
                }
            }
            write!(f, "; ")?;
        }
        write!(
            f,
            "{} of the demotions free, {} blocks written back, {} extents pre-cleaned",
            self.free_demotions, self.written_back_blocks, self.precleaned
        )
    }
}

fn detail(bed: &Bed, m: &Measurement, u: &Usage, host: u64) -> TraceDetail {
    TraceDetail {
        fill: bed.layout.fill(),
        ssd_size: bed.ssd_size,
        room_bytes: bed.room * bed.extent,
        read: m.op_latency(IoKind::Read),
        write: m.op_latency(IoKind::Write),
        hdd_busy_s: u.busy[1].as_secs_f64(),
        ssd_busy_s: u.busy[0].as_secs_f64(),
        ssd_write_per_host_byte: u.ssd_written as f64 / host as f64,
        moved_bytes: u.moved,
        read_hit_share: share(u.read_hit[0], u.read_hit[1]),
        write_ssd_share: share(u.landed[0], u.landed[1]),
    }
}
