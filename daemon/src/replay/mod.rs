//! `tierd trace replay`: a recorded trace played through a running daemon
//! over NBD, open loop, on the real clock, laid into the volume as the
//! bench lays it (docs/trace.md, "Replaying through the daemon").
//!
//! The steps, one file each: the trace is read and fitted here; `fill`
//! lays the volume out (`bulk` moves the bytes); `send` plays the requests
//! on their schedule over connections of the replayer's own client
//! (`nbd`); `report` turns the times and the daemon's counters (read over
//! `control`) into the bench's figures; `data` says what every written
//! byte is and, for `--verify`, what the footprint must hold afterwards;
//! `progress` tells it on stderr.

mod bulk;
mod control;
mod data;
mod fill;
mod nbd;
mod progress;
mod report;
mod send;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use parking_lot::Mutex;
use tierd::nbd::client::Target;
use tierd::nbd::proto;
use tierd::trace::import::{self, Format};

use crate::trace_cmd::FormatArg;
use tierd::trace::{Op, Record};
use tierd::units::human_bytes;
use tierd::volume::Tier;
use tierd_bench::replay::{fit, Layout};

use bulk::Job;
use data::{Checked, Expect, Model, FILL};
use progress::{Progress, Unit};
use report::{Counters, Measured, Report};
use send::{Req, Timing};

/// What `tierd trace replay` was asked (its flags).
#[derive(clap::Args)]
pub struct Options {
    /// The trace (any supported format).
    pub trace: PathBuf,
    /// The daemon's NBD address (nbd://HOST[:PORT][/EXPORT] or
    /// nbd+unix:///EXPORT?socket=PATH).
    #[arg(long, value_name = "URL")]
    pub nbd: String,
    /// Replay this many times faster than recorded.
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub speed: f64,
    /// NBD connections the requests are spread over (by the trace's own
    /// connection when it has several, else round-robin).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub connections: usize,
    /// Share of the volume's extents holding data before the replay (the
    /// trace's footprint among them), more than 0 and at most 1.
    #[arg(long, value_name = "F", default_value_t = 0.7)]
    pub fill: f64,
    /// The daemon's control socket [default: $TIERD_CONTROL, else
    /// tierd-data/control.sock or /run/tierd/control.sock].
    #[arg(long, value_name = "SOCKET")]
    pub control: Option<PathBuf>,
    /// Overwrite a volume that holds data (it is trimmed whole, then
    /// filled: everything on it is lost).
    #[arg(long)]
    pub force: bool,
    /// After the replay, read the trace's extents (and some filler) back
    /// and check every byte whose last writer is known.
    #[arg(long)]
    pub verify: bool,
    #[command(flatten)]
    pub format: FormatArg,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The trace as read: the reads, writes, trims and zeroes, and the
/// flushes (time, connection) apart, as the bench's fitting takes them.
struct Loaded {
    format: String,
    source: String,
    name: String,
    records: Vec<Record>,
    flushes: Vec<(u64, u16)>,
}

fn load(path: &Path, format: Option<Format>) -> anyhow::Result<Loaded> {
    let what = || format!("reading the trace {}", path.display());
    let input = import::open_with_stats(path, format).with_context(what)?;
    let bar = Progress::new(&format!("reading {}", path.display()), Unit::Wait, 0);
    let mut records = Vec::new();
    let mut flushes = Vec::new();
    for r in input.records {
        let r = r.with_context(what)?;
        match r.op {
            Op::Flush => flushes.push((r.t_ns, r.conn)),
            _ if r.len == 0 => {}
            _ => records.push(r),
        }
    }
    bar.finish(&format!(
        "{} requests and {} flushes",
        records.len(),
        flushes.len()
    ));
    Ok(Loaded {
        format: input.format.name().to_string(),
        source: input.header.source,
        name: path
            .file_stem()
            .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned()),
        records,
        flushes,
    })
}

/// Check the options that need nothing but themselves.
fn check(o: &Options) -> anyhow::Result<()> {
    if !(o.speed.is_finite() && o.speed > 0.0) {
        bail!(
            "--speed {}: give how many times faster than recorded to replay, a positive number",
            o.speed
        );
    }
    if !(1..=256).contains(&o.connections) {
        bail!("--connections {}: give 1 to 256", o.connections);
    }
    if !(o.fill > 0.0 && o.fill <= 1.0) {
        bail!(
            "--fill {}: give the share of the volume that holds data before the replay, more than 0 and at most 1",
            o.fill
        );
    }
    Ok(())
}

/// Run `tierd trace replay`.
pub fn run(o: &Options) -> anyhow::Result<()> {
    check(o)?;
    let target = Target::parse(&o.nbd).context("--nbd")?;
    let loaded = load(&o.trace, o.format.format)?;
    let (probe, export) = nbd::connect(&target)?;
    probe.close();
    let ctl = control::Control::find(o.control.clone())?;
    let status = ctl.status()?;
    if status.capacity_bytes != export.size {
        bail!(
            "the daemon at {} has a volume of {} bytes but {target} serves {} bytes: point --control at the socket of the daemon serving {target}",
            ctl.path().display(),
            status.capacity_bytes,
            export.size
        );
    }
    let es = status.extent_size.max(1);
    let extents = status.capacity_bytes / es;
    let ssd_slots = status
        .tiers
        .iter()
        .find(|t| t.tier == Tier::Ssd)
        .map_or(0, |t| t.capacity_bytes / es);
    let base = ssd_slots.min(extents);
    let trace_name = loaded.name.clone();
    let n_flushes = loaded.flushes.len() as u64;
    let fitted = fit(
        trace_name,
        loaded.source.clone(),
        loaded.records,
        n_flushes,
        es,
        base * es,
        u64::MAX,
    )?;
    let layout = Layout::new(extents, ssd_slots, fitted.extents, o.fill)
        .with_context(|| format!("the volume {target} is too small for the trace"))?;
    if fitted.records.len() + loaded.flushes.len() >= u32::MAX as usize {
        bail!(
            "the trace has more than {} requests, more than the replayer numbers",
            u32::MAX - 1
        );
    }
    let (reqs, spread_by) = schedule(&fitted.records, &loaded.flushes, o.speed, o.connections);
    check_ops(&reqs, &export)?;
    fill::refuse_data(&target, &status, &layout, o.force)?;
    eprintln!(
        "tierd: replaying {} ({} requests over {:.1} s at {}x) into {target}: extents [0, {}) of {} hold data (fill {:.3}), the trace's {} extents ({}) at [{}, {})",
        o.trace.display(),
        reqs.len(),
        reqs.last().map_or(0, |r| r.due_ns) as f64 / 1e9,
        o.speed,
        layout.filled,
        layout.extents,
        layout.fill(),
        layout.footprint,
        human_bytes(layout.footprint * es),
        layout.base,
        layout.base + layout.footprint
    );
    let prepared = fill::prepare(&target, &export, &ctl, &status, &layout, o.force)?;
    let before = ctl.status()?;
    let timing = send::replay(&target, &export, &reqs, o.connections)?;
    let after = ctl.status()?;
    let measured = Measured::of(&reqs, &timing);
    let counters = Counters::between(&before, &after);
    let verify = match o.verify {
        true => Some(verify(&target, &export, &reqs, &timing, &layout, es)?),
        false => None,
    };
    let report = Report {
        trace: o.trace.display().to_string(),
        format: loaded.format,
        source: loaded.source,
        nbd: target.to_string(),
        speed: o.speed,
        connections: o.connections,
        spread_by,
        duration_s: reqs.last().map_or(0, |r| r.due_ns) as f64 / 1e9,
        fill: layout.fill(),
        layout: serde_json::json!({
            "extent_size": es,
            "extents": layout.extents,
            "ssd_slots": ssd_slots,
            "base": layout.base,
            "footprint": layout.footprint,
            "filled": layout.filled,
        }),
        prepared: serde_json::to_value(&prepared)?,
        requests: measured.counts.requests,
        errors: measured.counts.errors,
        read_mean_us: measured.read.mean_us,
        read_p50_us: measured.read.p50_us,
        read_p99_us: measured.read.p99_us,
        write_mean_us: measured.write.mean_us,
        write_p50_us: measured.write.p50_us,
        write_p99_us: measured.write.p99_us,
        issue_late_p50_us: measured.issue_late.p50_us,
        issue_late_p99_us: measured.issue_late.p99_us,
        issue_late_max_us: measured.issue_late.max_us,
        socket_wait_p99_us: measured.socket_wait.p99_us,
        read_hit_share: counters.read_hit_share,
        hdd_busy_s: counters.hdd_busy_s,
        moved_bytes: counters.promoted_bytes + counters.demoted_bytes,
        measured,
        counters,
        verify,
    };
    if o.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    if let Some(why) = &timing.failure {
        bail!("the replay stopped early: {why}");
    }
    if report.errors > 0 {
        bail!(
            "{} of {} requests failed or were never answered",
            report.errors,
            report.requests
        );
    }
    if let Some(v) = report.verify.as_ref().filter(|v| v.wrong > 0) {
        bail!(
            "verification failed: {} sectors differ from what was written ({})",
            v.wrong,
            v.first_wrong.as_deref().unwrap_or("")
        );
    }
    Ok(())
}

/// The requests to send, in due order, each on its connection: spread by
/// the trace's own connection (in the order they first appear, modulo the
/// connections) when it has several, else round-robin.
fn schedule(
    records: &[Record],
    flushes: &[(u64, u16)],
    speed: f64,
    conns: usize,
) -> (Vec<Req>, &'static str) {
    let mut all: Vec<(u64, Op, u64, u32, bool, u16)> = records
        .iter()
        .map(|r| (r.t_ns, r.op, r.offset, r.len, r.fua, r.conn))
        .chain(flushes.iter().map(|&(t, c)| (t, Op::Flush, 0, 0, false, c)))
        .collect();
    all.sort_by_key(|r| r.0);
    let mut slots: HashMap<u16, usize> = HashMap::new();
    for r in &all {
        let n = slots.len();
        slots.entry(r.5).or_insert(n % conns);
    }
    let by_conn = slots.len() > 1;
    let reqs = all
        .iter()
        .enumerate()
        .map(|(i, &(t, op, offset, len, fua, conn))| Req {
            due_ns: (t as f64 / speed).round() as u64,
            op,
            offset,
            len,
            fua,
            slot: match by_conn {
                true => slots.get(&conn).copied().unwrap_or(0),
                false => i % conns,
            },
        })
        .collect();
    (
        reqs,
        if by_conn {
            "trace-connection"
        } else {
            "round-robin"
        },
    )
}

/// Refuse a trace with requests the server does not take.
fn check_ops(reqs: &[Req], export: &nbd::Export) -> anyhow::Result<()> {
    for (op, flag, name) in [
        (Op::Trim, proto::FLAG_SEND_TRIM, "TRIM"),
        (Op::Zero, proto::FLAG_SEND_WRITE_ZEROES, "WRITE_ZEROES"),
        (Op::Flush, proto::FLAG_SEND_FLUSH, "FLUSH"),
    ] {
        let n = reqs.iter().filter(|r| r.op == op).count();
        if n > 0 && !export.has(flag) {
            bail!("the trace has {n} {name} requests but the server does not take {name}");
        }
    }
    Ok(())
}

/// Filler extents checked by `--verify` besides the footprint.
const VERIFY_FILLER: u64 = 16;

/// Read the footprint back (and a few filler extents, and one past the
/// fill) and compare with what the requests wrote.
fn verify(
    target: &Target,
    export: &nbd::Export,
    reqs: &[Req],
    t: &Timing,
    layout: &Layout,
    es: u64,
) -> anyhow::Result<Checked> {
    let (lo, hi) = (layout.base * es, (layout.base + layout.footprint) * es);
    let mut model = Model::new(lo, hi - lo);
    let mut order: Vec<usize> = (0..reqs.len()).filter(|&i| t.sent[i] != u64::MAX).collect();
    order.sort_by_key(|&i| t.sent[i]);
    for i in order {
        let r = &reqs[i];
        let ok = t.answered[i] != u64::MAX && t.errno[i] == 0;
        let to = match r.op {
            Op::Write if ok => Expect::Data(i as u32 + 1),
            Op::Zero if ok => Expect::Zeros,
            Op::Read | Op::Flush => continue,
            _ => Expect::Unknown,
        };
        model.apply(r.offset, u64::from(r.len), to, t.sent[i], t.answered[i]);
    }
    // The footprint, some filler spread over the rest of the fill, and
    // one extent past it (unmapped: zeros).
    let mut extents: Vec<u64> = (layout.base..layout.base + layout.footprint).collect();
    let step = (layout.filled / VERIFY_FILLER).max(1);
    extents.extend(
        (0..layout.filled)
            .step_by(step as usize)
            .filter(|e| !(layout.base..layout.base + layout.footprint).contains(e)),
    );
    if layout.filled < layout.extents {
        extents.push(layout.filled);
    }
    let mut jobs = Vec::new();
    for e in extents {
        jobs.extend(
            nbd::pieces(e * es, es, export.max_request.min(1 << 20)).map(|(offset, len)| Job {
                cmd: proto::CMD_READ,
                offset,
                len,
            }),
        );
    }
    let total = jobs.iter().map(|j| u64::from(j.len)).sum();
    let bar = Progress::new("--verify: reading the data back", Unit::Bytes, total);
    let checked = Mutex::new(Checked::default());
    let expect = |at: u64| {
        if (lo..hi).contains(&at) {
            model.expect(at)
        } else if at / es < layout.filled {
            Expect::Data(FILL)
        } else {
            Expect::Zeros
        }
    };
    bulk::run(
        target,
        2,
        4,
        &jobs,
        &|_, _| {},
        &|j, got| {
            let mut c = Checked::default();
            c.compare(got, j.offset, expect);
            checked.lock().merge(c);
        },
        &bar,
    )
    .context("reading the data back")?;
    let c = checked.into_inner();
    bar.finish(&format!(
        "{} sectors compared, {} wrong",
        c.sectors, c.wrong
    ));
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t_ns: u64, conn: u16) -> Record {
        Record {
            t_ns,
            offset: 0,
            len: 4096,
            conn,
            op: Op::Read,
            fua: false,
        }
    }

    #[test]
    fn one_connection_goes_round_robin_and_several_keep_their_own() {
        let one = [rec(0, 0), rec(10, 0), rec(20, 0)];
        let (r, how) = schedule(&one, &[(15, 0)], 2.0, 2);
        assert_eq!(how, "round-robin");
        let got: Vec<_> = r.iter().map(|r| (r.due_ns, r.op, r.slot)).collect();
        assert_eq!(
            got,
            vec![
                (0, Op::Read, 0),
                (5, Op::Read, 1),
                (8, Op::Flush, 0),
                (10, Op::Read, 1)
            ]
        );
        let many = [rec(0, 7), rec(1, 3), rec(2, 9), rec(3, 7)];
        let (r, how) = schedule(&many, &[], 1.0, 2);
        assert_eq!(how, "trace-connection");
        let slots: Vec<_> = r.iter().map(|r| r.slot).collect();
        assert_eq!(slots, vec![0, 1, 0, 0]);
    }
}
