//! Laying the volume out before a replay, as the bench does
//! ([`tierd_bench::replay::Layout`]): refuse a volume that holds data
//! (unless forced: then trim it whole first), write extents
//! `[0, filled)` in address order with migration paused (the SSD part
//! first, so a fill in address order puts exactly the first SSD-slots
//! extents on the SSD and the footprint on the HDD), flush, resume
//! migration and wait until the daemon has restored its SSD reserve and
//! written its log back and its migrator is quiet.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tierd::control::{MigrateAction, Status, Where};
use tierd::nbd::client::Target;
use tierd::nbd::proto;
use tierd::units::human_bytes;
use tierd::volume::Tier;
use tierd_bench::replay::Layout;

use super::bulk::{self, Job};
use super::control::Control;
use super::data::{pattern, FILL};
use super::nbd::{self, Export};
use super::progress::{Progress, Unit};

/// Connections and requests in flight on each while filling.
const FILL_CONNS: usize = 4;
const FILL_DEPTH: usize = 4;
/// Bytes per fill write (whole extents, at most the server's largest
/// request).
const FILL_WRITE: u64 = 4 << 20;
/// How often the settling wait asks for the status.
const POLL: Duration = Duration::from_millis(500);
/// The migrator counts as quiet when it moved nothing for this long.
const QUIET_FOR: Duration = Duration::from_secs(3);
/// Longest the wait for the daemon to settle may take.
const SETTLE_LIMIT: Duration = Duration::from_secs(3600);

/// What laying the volume out did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Prepared {
    /// Bytes of filler and footprint written.
    pub fill_bytes: u64,
    /// Seconds the fill took.
    pub fill_secs: f64,
    /// Seconds the daemon then took to settle.
    pub settle_secs: f64,
    /// The volume held data and was trimmed whole first (`--force`).
    pub cleared: bool,
    /// Footprint extents on the HDD when the replay starts.
    pub footprint_on_hdd: u64,
}

/// Extents mapped on either tier.
pub fn mapped_extents(s: &Status) -> u64 {
    s.tiers.iter().map(|t| t.extents).sum()
}

/// Refuse a volume that holds data, unless `force`.
pub fn refuse_data(
    target: &Target,
    status: &Status,
    layout: &Layout,
    force: bool,
) -> anyhow::Result<()> {
    let mapped = mapped_extents(status);
    if mapped > 0 && !force {
        bail!(
            "the volume at {target} already holds data ({mapped} extents, {}): the replay writes filler over its first {} and trims the rest, destroying what is there; replay on a new volume, or give --force to overwrite it",
            human_bytes(mapped * status.extent_size),
            human_bytes(layout.filled * status.extent_size)
        );
    }
    Ok(())
}

/// Lay the volume out for `layout`; `status` is the daemon's before.
pub fn prepare(
    target: &Target,
    export: &Export,
    ctl: &Control,
    status: &Status,
    layout: &Layout,
    force: bool,
) -> anyhow::Result<Prepared> {
    let es = status.extent_size;
    let mapped = mapped_extents(status);
    let cleared = mapped > 0;
    refuse_data(target, status, layout, force)?;
    if cleared {
        clear(target, export, ctl, mapped)?;
    }
    let started = Instant::now();
    let paused = Paused::new(ctl, status.migration.paused)?;
    let ssd_part = (0, layout.base.min(layout.filled));
    let hdd_part = (layout.base, layout.filled);
    let total = (ssd_part.1 - ssd_part.0 + hdd_part.1 - hdd_part.0) * es;
    let bar = Progress::new(
        &format!("filling extents [0, {}) with data", layout.filled),
        Unit::Bytes,
        total,
    );
    let payload = |j: &Job, buf: &mut [u8]| pattern(buf, j.offset, FILL);
    // The SSD part first and whole: then every extent of the HDD part
    // finds the SSD full and goes to the HDD.
    for (from, to) in [ssd_part, hdd_part] {
        let jobs = writes(from * es, to * es, es, export.max_request);
        bulk::run(
            target,
            FILL_CONNS,
            FILL_DEPTH,
            &jobs,
            &payload,
            &|_, _| {},
            &bar,
        )
        .context("filling the volume")?;
    }
    let secs = started.elapsed().as_secs_f64();
    bar.finish(&format!(
        "{} in {secs:.1} s ({}/s)",
        human_bytes(total),
        human_bytes((total as f64 / secs.max(1e-3)) as u64)
    ));
    flush(target).context("flushing the fill")?;
    let fill_secs = started.elapsed().as_secs_f64();
    // Without a migrator at work nothing restores the reserve or writes
    // the log back: wait only for what can settle.
    let stuck = paused.was_paused || !status.migration.running;
    drop(paused);
    let s = Instant::now();
    settle(ctl, stuck)?;
    let settle_secs = s.elapsed().as_secs_f64();
    let map = ctl.placement(layout.base * es, layout.footprint * es)?;
    let footprint_on_hdd = map
        .runs
        .iter()
        .filter(|r| r.at == Where::Hdd)
        .map(|r| r.len / es)
        .sum();
    Ok(Prepared {
        fill_bytes: total,
        fill_secs,
        settle_secs,
        cleared,
        footprint_on_hdd,
    })
}

/// Writes of whole extents covering `[from, to)`, each at most
/// [`FILL_WRITE`] and the server's largest request.
fn writes(from: u64, to: u64, es: u64, max_request: u32) -> Vec<Job> {
    let per = (FILL_WRITE / es).max(1) * es;
    let mut jobs = Vec::new();
    let mut at = from;
    while at < to {
        let n = per.min(to - at);
        jobs.extend(nbd::pieces(at, n, max_request).map(|(offset, len)| Job {
            cmd: proto::CMD_WRITE,
            offset,
            len,
        }));
        at += n;
    }
    jobs
}

/// One FLUSH on a connection of its own.
fn flush(target: &Target) -> anyhow::Result<()> {
    let job = Job {
        cmd: proto::CMD_FLUSH,
        offset: 0,
        len: 0,
    };
    let quiet = Progress::new("flushing", Unit::Wait, 0);
    let r = bulk::run(target, 1, 1, &[job], &|_, _| {}, &|_, _| {}, &quiet);
    quiet.finish(if r.is_ok() { "done" } else { "failed" });
    r
}

/// Trim the whole volume and flush (`--force` on a volume with data).
fn clear(target: &Target, export: &Export, ctl: &Control, mapped: u64) -> anyhow::Result<()> {
    const PIECE: u64 = 1 << 30;
    let jobs: Vec<Job> = (0..export.size.div_ceil(PIECE))
        .map(|i| Job {
            cmd: proto::CMD_TRIM,
            offset: i * PIECE,
            len: PIECE.min(export.size - i * PIECE) as u32,
        })
        .collect();
    let bar = Progress::new(
        &format!("--force: trimming the volume ({mapped} extents held data)"),
        Unit::Bytes,
        export.size,
    );
    bulk::run(target, 2, 4, &jobs, &|_, _| {}, &|_, _| {}, &bar).context("trimming the volume")?;
    bar.finish("done");
    flush(target).context("flushing the trim")?;
    let left = mapped_extents(&ctl.status()?);
    if left > 0 {
        bail!("trimming the whole volume left {left} extents mapped; cannot lay it out");
    }
    Ok(())
}

/// Migration paused while it lives (unless it was paused already, which
/// it leaves as it was).
struct Paused<'a> {
    ctl: &'a Control,
    was_paused: bool,
}

impl<'a> Paused<'a> {
    fn new(ctl: &'a Control, was_paused: bool) -> anyhow::Result<Paused<'a>> {
        if !was_paused {
            ctl.migrate(MigrateAction::Pause)
                .context("pausing migration for the fill")?;
        }
        Ok(Paused { ctl, was_paused })
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if !self.was_paused {
            if let Err(e) = self.ctl.migrate(MigrateAction::Resume) {
                eprintln!(
                    "tierd: warning: could not resume migration after the fill ({e:#}); run `tierctl --control {} migrate resume`",
                    self.ctl.path().display()
                );
            }
        }
    }
}

/// Why the daemon is not settled yet (`None`: settled).
fn unsettled(s: &Status, moved_lately: bool, migration_paused: bool) -> Option<String> {
    let mut why = Vec::new();
    // The reserve is whole once free slots and SSD extents with clean HDD
    // copies (which leave by a mapping change) cover it: while the data
    // fits the HDD, the daemon keeps it so rather than empty.
    let covered = s.reserve.covered_bytes.max(s.reserve.ssd_free_bytes);
    if !migration_paused && covered < s.reserve.target_bytes {
        why.push(format!(
            "reserve covered {} of {}",
            human_bytes(covered),
            human_bytes(s.reserve.target_bytes)
        ));
    }
    if !migration_paused && s.write_log.dirty_bytes > 0 {
        why.push(format!(
            "{} in the write log",
            human_bytes(s.write_log.dirty_bytes)
        ));
    }
    if moved_lately || s.migration.progress.queued > 0 {
        why.push("migration moving".into());
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// What the migrator has done so far: moves, and extents given clean
/// copies in idle time (a used disk that had idle time has them all, as
/// the bench's fill settles).
fn moved(s: &Status) -> u64 {
    s.migration.promoted_bytes + s.migration.demoted_bytes + s.shadows.precleaned
}

/// Wait until the reserve is back, the write log written back and the
/// migrator quiet for [`QUIET_FOR`].
fn settle(ctl: &Control, migration_paused: bool) -> anyhow::Result<()> {
    let bar = Progress::new(
        "waiting for the daemon to restore its SSD reserve and settle",
        Unit::Wait,
        0,
    );
    if migration_paused {
        bar.message("migration is paused or off on the daemon: the reserve is not restored".into());
    }
    let start = Instant::now();
    let mut last = ctl.status()?;
    let mut still_since = Instant::now();
    loop {
        std::thread::sleep(POLL);
        let s = ctl.status()?;
        if moved(&s) != moved(&last) {
            still_since = Instant::now();
        }
        let moving = still_since.elapsed() < QUIET_FOR;
        let ssd = s.tiers.iter().find(|t| t.tier == Tier::Ssd);
        match unsettled(&s, moving, migration_paused) {
            None => {
                bar.finish(&format!(
                    "settled in {:.1} s (SSD free {}, {} moved since start)",
                    start.elapsed().as_secs_f64(),
                    human_bytes(ssd.map_or(0, |t| t.free_bytes)),
                    human_bytes(moved(&s))
                ));
                return Ok(());
            }
            Some(why) if start.elapsed() > SETTLE_LIMIT => {
                bar.finish("gave up");
                bail!(
                    "the daemon did not settle after the fill within {} s: {why}",
                    SETTLE_LIMIT.as_secs()
                );
            }
            Some(why) => bar.message(why),
        }
        last = s;
    }
}
