//! The migrator's upkeep besides placement: draining a tier (`tierctl
//! evacuate`), writing the write log back to the HDD, pre-cleaning
//! (giving idle SSD extents a clean HDD copy, so the reserve later
//! refills by a mapping change), and keeping the SSD exposure bound
//! (`durability.ssd-exposure`: every SSD-only write gets an HDD copy in
//! time). Methods of [`Migrator`], called from its round.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::warn;

use super::super::candidates::{all_candidates, candidates};
use super::super::copy;
use super::super::knobs::MigrateConfig;
use super::super::policy::effective;
use super::{ssd_changes, Migrator, RoundReport, SPECULATIVE_BATCH};
use crate::units::Reason;
use crate::volume::{MoveOutcome, Tier, VolumeResult};

/// Pre-cleaning batches one round runs at most (besides its interval: a
/// clock that stands still while copies run does not hold the round).
const PRECLEAN_BATCHES: usize = 64;

/// Extents one look for pre-cleaning lists at most.
const PRECLEAN_LIST: usize = 1024;

/// Oldest a pre-cleaning list is used (heat changes the coldest-first
/// order; an extent copied or moved meanwhile is skipped by the copy).
const PRECLEAN_LIST_AGE: Duration = Duration::from_secs(10);

/// Longest pre-cleaning trusts that it found nothing to copy while the
/// SSD did not change (see `Migrator::preclean_none`).
const PRECLEAN_RELOOK: Duration = Duration::from_secs(300);

/// Exposed extents one round of the exposure bound lists at most.
const EXPOSURE_LIST: usize = 4096;

impl Migrator {
    /// Keep the SSD exposure bound (`durability.ssd-exposure`): give each
    /// extent whose data is SSD-only an HDD copy before it has been so for
    /// the bound. An SSD extent without a copy is pre-cleaned into a new
    /// HDD slot (while the HDD has one to spare), a stale copy is brought
    /// up to date, an HDD extent's logged blocks are written back.
    ///
    /// What is due (SSD-only for half the bound: the other half is the
    /// copy's, backing off included) goes now, in full batches once it
    /// has been exposed for three quarters of the bound, else a few
    /// extents at a time, each group after foreground I/O calms down (as
    /// any move yields). What is not yet due goes only while the HDD has
    /// no user, a few at a time, for up to a round's interval: copies are
    /// written in the HDD's idle time where it has any. All are paced by
    /// the migration bucket. An extent written while it is copied is left
    /// for the next round.
    pub(super) fn keep_exposure(&self, cfg: &MigrateConfig, report: &mut RoundReport) {
        let bound = self.exposure_bound();
        if bound.is_zero() {
            return;
        }
        let vol = &self.vol;
        let list = vol.exposed_to_cover(vol.clean_copy_room() > 0, EXPOSURE_LIST);
        if list.is_empty() {
            return;
        }
        let start = vol.clock().now();
        let mut k = 0;
        while k < list.len() {
            if self.paused() {
                return;
            }
            // The list was taken at `start`: ages grow as the round runs.
            let ran = vol.clock().now().saturating_sub(start);
            let age = list[k].1 + ran;
            let due = age >= bound / 2;
            let late = age >= bound * 3 / 4;
            if !due {
                let idle = vol.inflight() == 0 && self.hdd_free_of_users(cfg);
                if !idle || ran >= cfg.interval {
                    return;
                }
            }
            let most = if late {
                cfg.batch.max(1)
            } else {
                cfg.batch.clamp(1, SPECULATIVE_BATCH)
            };
            let chunk = &list[k..(k + most).min(list.len())];
            k += chunk.len();
            let (mut ssd, mut hdd): (Vec<(u64, Reason)>, Vec<u64>) = (Vec::new(), Vec::new());
            for &(e, _, tier) in chunk {
                match tier {
                    Tier::Hdd => hdd.push(e),
                    Tier::Ssd => ssd.push((e, Reason::Exposure)),
                }
            }
            if !late {
                self.back_off(
                    || {
                        vol.inflight() >= cfg.busy_inflight
                            || vol.hdd_congested()
                            || self.hdd_streaming(cfg)
                    },
                    cfg.max_backoff,
                );
            }
            let mut pace = |n: u64| {
                if !late {
                    self.yield_to_streams(cfg);
                }
                self.pace(&self.bucket, n);
            };
            let mut count = |what: &str, r: VolumeResult<Vec<(u64, MoveOutcome)>>, n| {
                tally(report, r, n, |r| &mut r.covered, what);
            };
            // Late: writes into these extents wait while they are copied,
            // so a busy extent's copy commits (else every write during a
            // copy abandons it, and an extent written without a pause
            // would stay SSD-only for good).
            let _held = if late {
                let all: Vec<u64> = ssd
                    .iter()
                    .map(|(e, _)| *e)
                    .chain(hdd.iter().copied())
                    .collect();
                Some(vol.hold_writes(&all))
            } else {
                None
            };
            if !ssd.is_empty() {
                let n = ssd.len();
                count(
                    "copying SSD extents to the HDD for the SSD exposure bound",
                    copy::clean_batch(vol, &ssd, &mut pace),
                    n,
                );
            }
            if !hdd.is_empty() {
                let n = hdd.len();
                count(
                    "write-back for the SSD exposure bound",
                    copy::write_back_batch(vol, &hdd, &mut pace),
                    n,
                );
            }
        }
    }

    /// One round of draining `from` (`tierctl evacuate`): its shadows go
    /// first when it is the HDD (copies on the tier being emptied); then its
    /// extents move to the other tier, up to `max-moves` and the room
    /// there, coldest first off the SSD (the hot data stays fast longest)
    /// and hottest first off the HDD (the SSD's room goes to it). Paced by
    /// the bandwidth budget and yielding to the foreground like any move.
    pub(super) fn evacuate(&self, from: Tier, cfg: &MigrateConfig, report: &mut RoundReport) {
        let vol = &self.vol;
        let to = match from {
            Tier::Ssd => Tier::Hdd,
            Tier::Hdd => Tier::Ssd,
        };
        if from == Tier::Hdd {
            let n = vol.usage().shadows as usize;
            if n > 0 {
                match vol.drop_shadows(n, None) {
                    Ok(d) => report.shadows_dropped += d,
                    Err(e) => warn!("dropping shadows off the drained HDD: {e}"),
                }
            }
        }
        let bpe = vol.geometry().blocks_per_extent();
        // Off the SSD: its extents, all among the planner's candidates. Off
        // the HDD: every extent on it, a walk of the whole map each round
        // while it drains.
        let all = match from {
            Tier::Ssd => candidates(vol, &self.heat, None, &HashSet::new()),
            Tier::Hdd => all_candidates(vol, &self.heat),
        };
        let mut on: Vec<(u64, f32)> = all
            .into_iter()
            .filter(|c| c.tier == from)
            .map(|c| (c.extent, effective(&cfg.policy, &c, bpe)))
            .collect();
        on.sort_by(|a, b| match from {
            Tier::Ssd => a.1.total_cmp(&b.1),
            Tier::Hdd => b.1.total_cmp(&a.1),
        });
        let room = vol.free_slots(to) as usize;
        let n = on.len().min(room).min(cfg.policy.max_moves.max(1));
        report.planned = n;
        report.truncated = n > 0 && on.len() > n;
        let p = &self.progress;
        p.planned.fetch_add(n as u64, Ordering::Relaxed);
        p.last_planned.store(n as u64, Ordering::Relaxed);
        p.queued.store(n as u64, Ordering::Relaxed);
        p.more_waiting.store(report.truncated, Ordering::Relaxed);
        for chunk in on[..n].chunks(cfg.batch.max(1)) {
            if self.paused() {
                break;
            }
            self.back_off(|| vol.inflight() >= cfg.busy_inflight, cfg.max_backoff);
            let batch: Vec<(u64, Reason)> =
                chunk.iter().map(|(e, _)| (*e, Reason::Evacuate)).collect();
            let mut pace = |n: u64| {
                self.pace(&self.bucket, n);
            };
            let result = copy::migrate_batch(vol, &batch, to, &mut pace);
            p.queued.fetch_sub(batch.len() as u64, Ordering::Relaxed);
            match result {
                Ok(outcomes) => {
                    for (_, o) in outcomes {
                        match o {
                            MoveOutcome::Moved(bytes) => {
                                report.moved += 1;
                                report.bytes += bytes;
                            }
                            MoveOutcome::Raced => report.raced += 1,
                            _ => report.skipped += 1,
                        }
                    }
                }
                Err(e) => {
                    report.errors += batch.len();
                    warn!(extents = batch.len(), %to, "evacuation move failed, extents left in place: {e}");
                }
            }
        }
    }

    /// Pre-cleaning: while the HDD has no user (reads the SSD serves alone
    /// do not count), no write arrives and nothing else moved this round,
    /// give the coldest SSD extents that have no HDD copy one
    /// (a clean shadow), batch after batch for up to a round's interval
    /// (and [`PRECLEAN_BATCHES`]), paced by the migration bucket; so the reserve later refills by dropping clean copies
    /// instead of writing them (bcache's idle writeback does the same for
    /// dirty data). The volume refuses once the HDD has no slots to spare.
    pub(super) fn preclean(&self, cfg: &MigrateConfig, report: &mut RoundReport) {
        let vol = &self.vol;
        // Batches of a few extents, one after the other for up to a round's
        // interval while the HDD stays free of users: the plan is made once
        // a round, not once for every four extents copied.
        let start = vol.clock().now();
        for _ in 0..PRECLEAN_BATCHES {
            if self.paused() || !self.preclean_batch(cfg, report) {
                return;
            }
            if vol.clock().now().saturating_sub(start) >= cfg.interval {
                return;
            }
        }
    }

    /// One batch of pre-cleaning; false when there was nothing to do or the
    /// HDD is not free for it.
    fn preclean_batch(&self, cfg: &MigrateConfig, report: &mut RoundReport) -> bool {
        let vol = &self.vol;
        if vol.log_usage().used > 0 || !self.hdd_free_of_users(cfg) {
            return false;
        }
        // The volume gives no copy with shadows off, or when the HDD has no
        // slot to spare beyond the reserve's and one (`Volume::reserve_moves`,
        // `Goal::Clean`): then there is no need to look.
        let spare = u64::from(vol.reserve_target().max(1));
        if !vol.shadows_enabled() || u64::from(vol.free_slots(Tier::Hdd)) <= spare + 1 {
            return false;
        }
        let (changes, now) = (ssd_changes(vol), vol.clock().now());
        if let Some((c, at)) = *self.preclean_none.lock() {
            if c == changes && now.saturating_sub(at) < PRECLEAN_RELOOK {
                return false;
            }
        }
        let want = cfg.batch.clamp(1, SPECULATIVE_BATCH);
        let batch: Vec<u64> = {
            let mut list = self.preclean_list.lock();
            if list.0.is_empty() || now.saturating_sub(list.1) >= PRECLEAN_LIST_AGE {
                *list = (vol.unshadowed_ssd_extents(PRECLEAN_LIST).into(), now);
            }
            let n = want.min(list.0.len());
            list.0.drain(..n).collect()
        };
        if batch.is_empty() {
            *self.preclean_none.lock() = Some((changes, now));
            return false;
        }
        let mut pace = |n: u64| {
            self.yield_to_streams(cfg);
            self.pace(&self.bucket, n);
        };
        match copy::preclean_batch(vol, &batch, &mut pace) {
            Ok(outcomes) => {
                for (_, o) in outcomes {
                    match o {
                        MoveOutcome::Moved(_) => report.precleaned += 1,
                        MoveOutcome::Raced => report.raced += 1,
                        _ => {}
                    }
                }
                true
            }
            Err(e) => {
                report.errors += batch.len();
                warn!(
                    extents = batch.len(),
                    "pre-cleaning failed, extents keep no HDD copy: {e}"
                );
                false
            }
        }
    }

    /// Write logged blocks back from the SSD write log, in HDD order, so the
    /// log has room for the next burst: at once while the SSD drains (four
    /// batches a round); while the HDD serves no user (`speculative-idle`;
    /// a few extents at a time, so users coming back are seen soon); and
    /// beside users while the log is pressed ([`Migrator::write_back_pressed`]).
    /// Paced by the bucket.
    pub(super) fn write_back(&self, cfg: &MigrateConfig, report: &mut RoundReport) {
        let vol = &self.vol;
        let usage = vol.log_usage();
        if usage.used == 0 {
            vol.log_unpress();
            *self.pressed_end.lock() = None;
            return;
        }
        // Draining the SSD empties the log as fast as the budget allows.
        let urgent = vol.evacuating() == Some(Tier::Ssd);
        // Else while the HDD serves no user, and beside users while the
        // log is pressed (`write_back_pressed`).
        let idle = vol.inflight() == 0 && self.hdd_free_of_users(cfg);
        if !urgent && !idle {
            self.write_back_if_pressed(cfg, report);
            return;
        }
        // While the SSD drains, full batches; else a few extents at a time
        // (scattered 4 KiB blocks cost the HDD a seek each), each group only
        // while the HDD is still free of users, and no more than it takes
        // for the group's two syncs (the HDD's, the metadata's) to cost at
        // most a quarter of its time: on a disk, where each block is a
        // seek, that is the few; where the syncs cost more than the copies
        // (image files, a disk with a write cache), groups grow towards a
        // batch instead of paying two syncs for every four extents.
        let group = if urgent {
            cfg.batch.max(1)
        } else {
            self.write_back_group
                .load(Ordering::Relaxed)
                .clamp(1, cfg.batch.max(1))
        };
        let extents: Vec<u64> = vol
            .logged_extents()
            .into_iter()
            .map(|(e, _)| e)
            .take(cfg.batch.max(1) * if urgent { 4 } else { 1 })
            .collect();
        for batch in extents.chunks(group) {
            if self.paused() || (!urgent && !self.hdd_free_of_users(cfg)) {
                break;
            }
            self.back_off(|| vol.inflight() >= cfg.busy_inflight, cfg.max_backoff);
            // No wait for a user's stream that comes during the group
            // (`Migrator::hdd_streaming`): tried, it moved no verdict of the
            // trace grid and slowed the quick run's sequential writes
            // (docs/tiering.md, "Where the remaining stream writes wait").
            let mut pace = |n: u64| {
                self.pace(&self.reserve_bucket, n);
            };
            let t0 = vol.clock().io_now();
            let sync0 = vol.stats().move_sync_ns.load(Ordering::Relaxed);
            let result = copy::write_back_batch(vol, batch, &mut pace);
            if !urgent {
                let took = vol.clock().io_now().saturating_sub(t0).as_nanos() as u64;
                let syncs = vol.stats().move_sync_ns.load(Ordering::Relaxed) - sync0;
                if let Some(n) = write_back_group(batch.len(), took, syncs, cfg.batch) {
                    self.write_back_group.store(n, Ordering::Relaxed);
                }
            }
            tally(
                report,
                result,
                batch.len(),
                |r| &mut r.written_back,
                "write-back (the blocks stay in the log)",
            );
        }
    }
}

/// Count a batch of `n` extents into `report`: the extents done into the
/// counter `done` picks (and their bytes), the raced ones; a failed batch
/// counts its extents as errors and is logged as `what` failing.
pub(super) fn tally(
    report: &mut RoundReport,
    result: VolumeResult<Vec<(u64, MoveOutcome)>>,
    n: usize,
    done: fn(&mut RoundReport) -> &mut usize,
    what: &str,
) {
    match result {
        Ok(outcomes) => {
            for (_, o) in outcomes {
                match o {
                    MoveOutcome::Moved(bytes) => {
                        *done(report) += 1;
                        report.bytes += bytes;
                    }
                    MoveOutcome::Raced => report.raced += 1,
                    _ => {}
                }
            }
        }
        Err(e) => {
            report.errors += n;
            warn!(extents = n, "{what} failed: {e}");
        }
    }
}

/// The next idle write-back group's size, after a group of `n` extents took
/// `took` ns, `syncs` of them in its syncs: enough extents for the copies to
/// take three times the syncs, at least [`SPECULATIVE_BATCH`], at most
/// `batch`. `None` when the group tells nothing (empty, or all syncs).
fn write_back_group(n: usize, took: u64, syncs: u64, batch: usize) -> Option<usize> {
    let copies = took.saturating_sub(syncs);
    if n == 0 || copies == 0 {
        return None;
    }
    let per = copies as f64 / n as f64;
    let want = (3.0 * syncs as f64 / per).ceil() as usize;
    let batch = batch.max(1);
    Some(want.clamp(SPECULATIVE_BATCH.min(batch), batch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_grow_where_syncs_dominate_and_stay_small_where_copies_do() {
        // Image files: 4 extents copied in 2 ms, 8 ms of syncs: 3 x 8 ms of
        // copies is 48 extents, capped at a batch.
        assert_eq!(write_back_group(4, 10_000_000, 8_000_000, 32), Some(32));
        assert_eq!(write_back_group(4, 10_000_000, 8_000_000, 64), Some(48));
        // A disk: 4 extents' scattered blocks take 100 ms, the syncs 5 ms:
        // the few.
        assert_eq!(
            write_back_group(4, 105_000_000, 5_000_000, 32),
            Some(SPECULATIVE_BATCH)
        );
        // Between: 8 extents in 40 ms of copies, 10 ms of syncs: 6 -> 6.
        assert_eq!(write_back_group(8, 50_000_000, 10_000_000, 32), Some(6));
        // Nothing to learn from an empty group or one that only synced.
        assert_eq!(write_back_group(0, 1, 0, 32), None);
        assert_eq!(write_back_group(4, 5, 5, 32), None);
        // A batch smaller than the few is the most.
        assert_eq!(write_back_group(4, 10_000_000, 8_000_000, 2), Some(2));
    }
}
