//! The volume's narrow move API: the steps of relocating extents between
//! tiers, each a typestate ([`Reserved`] → [`Copied`] → [`Synced`] →
//! [`Committed`] → [`Flushed`]) that only the previous step hands out, so a
//! caller cannot take them out of order. The protocol that strings them
//! together, with its retries and its test-only crash points, is
//! `migrate::copy`; the volume keeps what must hold whatever the caller
//! does: extent locks, generations, the allocator and the store.
//!
//! The steps for one extent, from slot A to a new slot B:
//! 1. allocate B on the destination tier ([`Volume::reserve_moves`]);
//! 2. copy the extent's written blocks A → B, paced, without holding the
//!    extent's lock (foreground I/O keeps going to A) ([`Volume::copy_moves`]);
//! 3. make B durable (sync the destination device) ([`Volume::sync_moves`]);
//! 4. under the extent's write lock, if no write, zero or trim touched the
//!    extent since step 2 began (its generation is unchanged), point the
//!    mapping at B and record it in the metadata store — otherwise give B
//!    back ([`Volume::commit_moves`]);
//! 5. flush, which makes the new mapping durable ([`Volume::flush_moves`]);
//! 6. only then free A ([`Volume::release_moves`]).
//!
//! Many extents go through the steps together (one destination sync, one
//! flush, copies of neighbouring slots merged into one large read and
//! write) so a migrating HDD streams instead of seeking.
//!
//! A crash before step 5 completes leaves the durable mapping at A, which
//! still holds the latest acknowledged data; after it, at B, which does. B is
//! never referenced durably before it holds the data, and A is never reused
//! before nothing durable refers to it. Dropping a token between steps is
//! what a crash does: its destination slots stay taken until the volume is
//! opened again.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::error::io_err;
use super::extent::{Loc, LogPos, Mapping, Shadow, Written};
use super::geometry::{Tier, BLOCK_SIZE};
use super::stats::Stats;
use super::{Volume, VolumeError, VolumeResult};
use crate::units::Reason;

mod copying;
mod rewrite;

pub use copying::AwaitedCopies;

use rewrite::through_clean_gaps;

/// Bytes copied per device I/O during a migration.
const COPY_CHUNK: u64 = 1 << 20;
/// Logged blocks from which an extent's write-back reads and rewrites the
/// span between its first and last logged block instead of writing each.
const SPAN_MIN: usize = 8;
/// Most bytes one merged copy reads at once (neighbouring slots). While the
/// foreground reads the HDD at random, each copy waits its turn behind the
/// queued reads and pays a seek: 8 MiB rather than 4 brought a moved
/// working set up in 22 s instead of 29 (benchmarks/daemon-shift.sh).
pub const MERGE_MAX: u64 = 8 << 20;

/// The last move of an extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    /// When (clock's Unix seconds).
    pub at: u64,
    /// From tier.
    pub from: Tier,
    /// To tier.
    pub to: Tier,
    /// Why.
    pub reason: Reason,
}

/// Steps of the move protocol (after which a test can simulate a crash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStep {
    /// Destination slot taken.
    Allocated,
    /// Data copied.
    Copied,
    /// Destination synced.
    Synced,
    /// Mapping switched and written to the store (not yet flushed).
    Committed,
    /// Mapping flushed (source not yet freed).
    Flushed,
}

impl MoveStep {
    /// Every step, in the order a move takes them.
    pub const ALL: [MoveStep; 5] = [
        MoveStep::Allocated,
        MoveStep::Copied,
        MoveStep::Synced,
        MoveStep::Committed,
        MoveStep::Flushed,
    ];
}

/// What a migration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveOutcome {
    /// Moved; bytes copied.
    Moved(u64),
    /// Nothing to do: unmapped, or already on the destination tier.
    Skipped,
    /// No free slot on the destination tier.
    NoRoom,
    /// The extent kept changing during the copy; left where it is.
    Raced,
    /// Stopped after a step, as a test's failpoint asked (a simulated
    /// crash; only with the `failpoints` feature).
    #[cfg(feature = "failpoints")]
    Stopped(MoveStep),
}

/// What a move does to an extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// Bring it to the SSD: its blocks from wherever their newest data is
    /// (the HDD or the write log) into a new SSD slot; the HDD slot stays as
    /// a clean shadow while the HDD has room to spare.
    Ssd,
    /// Take it to the HDD: into its shadow, writing only the stale blocks,
    /// or into a new HDD slot.
    Hdd,
    /// Write its logged blocks back from the SSD write log into its HDD
    /// slot, in block order, and free their log places.
    WriteBack,
    /// Pre-clean an SSD extent with no HDD copy: copy it into a new HDD
    /// slot that becomes its clean shadow, so a later demotion is a mapping
    /// change. The extent stays on the SSD.
    Clean,
    /// Bring an SSD extent's stale shadow up to date: write the blocks
    /// written on the SSD since into the shadow, which is clean again. The
    /// extent stays on the SSD (a write-back cache's cleaning; a later
    /// demotion is a mapping change).
    Refresh,
}

impl Goal {
    /// The goal that puts an extent on `tier`.
    pub fn of(tier: Tier) -> Goal {
        match tier {
            Tier::Ssd => Goal::Ssd,
            Tier::Hdd => Goal::Hdd,
        }
    }

    /// The tier the extent is on afterwards.
    pub fn tier(self) -> Tier {
        match self {
            Goal::Ssd => Tier::Ssd,
            Goal::Hdd | Goal::WriteBack | Goal::Clean | Goal::Refresh => Tier::Hdd,
        }
    }
}

/// One device-to-device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CopyRun {
    from: Tier,
    src: u64,
    to: Tier,
    dst: u64,
    len: u64,
}

/// Add a copy of `len` bytes to `runs`, merged into the last run when it
/// continues it on both devices (up to [`COPY_CHUNK`]).
fn push_run(runs: &mut Vec<CopyRun>, len: u64, from: Tier, src: u64, to: Tier, dst: u64) {
    if let Some(r) = runs.last_mut() {
        if r.from == from
            && r.to == to
            && r.src + r.len == src
            && r.dst + r.len == dst
            && r.len + len <= COPY_CHUNK
        {
            r.len += len;
            return;
        }
    }
    runs.push(CopyRun {
        from,
        src,
        to,
        dst,
        len,
    });
}

/// Something a move gives up once its new mapping is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    Slot(Loc),
    Log(LogPos),
}

/// One extent of a migration in progress.
struct Item {
    extent: u64,
    reason: Reason,
    /// The mapping when the move began.
    before: Mapping,
    /// Its generation then.
    gen: u32,
    /// The new slot taken for it, if it needs one.
    fresh: Option<Loc>,
    /// What to copy.
    runs: Vec<CopyRun>,
    /// The mapping to install.
    after: Mapping,
    /// What to give up after the flush.
    release: Vec<Release>,
    /// Blocks its shadow saved from being written.
    saved: u64,
    /// A promotion watching the extent's writes (`Volume::watch`): a write
    /// during the copy is re-copied at the commit instead of failing it.
    watched: bool,
    /// Whether the promotion keeps the HDD slot as a shadow.
    keep: bool,
    /// The copy writes into a slot the extent's mapping owns (its own live
    /// slot for a write-back, its shadow for a demotion): it runs under the
    /// extent's read lock, so no foreground change of the mapping overlaps
    /// it (which could write those places, or drop the shadow and give its
    /// slot to another extent before the copy writes into it).
    in_place: bool,
}

/// Step 1 done: destination slots taken, sources in slot order.
#[must_use = "a move dropped between steps leaves its destinations taken until reopen"]
pub(crate) struct Reserved {
    to: Tier,
    items: Vec<Item>,
}

/// Step 2 done: data copied.
#[must_use = "a move dropped between steps leaves its destinations taken until reopen"]
pub(crate) struct Copied {
    to: Tier,
    items: Vec<Item>,
    copied: Vec<u64>,
}

/// Step 3 done: the destination device synced.
#[must_use = "a move dropped between steps leaves its destinations taken until reopen"]
pub(crate) struct Synced {
    to: Tier,
    items: Vec<Item>,
    copied: Vec<u64>,
}

/// Step 4 done: the mappings that did not race point at their destinations
/// (not yet durable).
#[must_use = "a move dropped between steps leaves its sources taken until reopen"]
pub(crate) struct Committed {
    to: Tier,
    items: Vec<(Item, u64)>,
    failure: Option<VolumeError>,
}

/// Step 5 done: the new mappings are durable; the sources may be freed.
#[must_use = "a move dropped between steps leaves its sources taken until reopen"]
pub(crate) struct Flushed {
    to: Tier,
    items: Vec<(Item, u64)>,
    failure: Option<VolumeError>,
}

impl Reserved {
    /// Extents in this step.
    pub(crate) fn extents(&self) -> Vec<u64> {
        self.items.iter().map(|i| i.extent).collect()
    }

    /// Whether no extent is moving.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl Copied {
    /// Extents in this step.
    pub(crate) fn extents(&self) -> Vec<u64> {
        self.items.iter().map(|i| i.extent).collect()
    }
}

impl Synced {
    /// Extents in this step.
    pub(crate) fn extents(&self) -> Vec<u64> {
        self.items.iter().map(|i| i.extent).collect()
    }
}

impl Committed {
    /// Extents whose mapping was switched.
    pub(crate) fn extents(&self) -> Vec<u64> {
        self.items.iter().map(|(i, _)| i.extent).collect()
    }
}

impl Flushed {
    /// Extents whose new mapping is durable.
    pub(crate) fn extents(&self) -> Vec<u64> {
        self.items.iter().map(|(i, _)| i.extent).collect()
    }
}

impl Volume {
    /// New clean HDD copies of SSD extents the HDD can take now: its free
    /// slots beyond the reserve's and one (the room demotions need); none
    /// with shadows off. Pre-cleaning and the SSD exposure bound stop there.
    pub fn clean_copy_room(&self) -> u64 {
        if !self.shadows_enabled.load(Ordering::Relaxed) {
            return 0;
        }
        let spare = u64::from(self.reserve_target().max(1));
        u64::from(self.alloc.free_count(Tier::Hdd)).saturating_sub(spare + 1)
    }

    /// Step 1: snapshot each extent and take a new slot for those that
    /// need one. Extents with nothing to do, or no room, are answered at
    /// once.
    pub(crate) fn reserve_moves(
        &self,
        extents: &[(u64, Reason)],
        goal: Goal,
    ) -> VolumeResult<(Reserved, Vec<(u64, MoveOutcome)>)> {
        let blocks = self.geo.blocks_per_extent();
        let mut out = Vec::with_capacity(extents.len());
        // A pre-clean takes an HDD slot only while the HDD keeps more free
        // than the reserve (the room demotions need), and never with
        // shadows switched off.
        let mut clean_room = usize::MAX;
        if goal == Goal::Clean {
            let room = self.clean_copy_room();
            clean_room = room as usize;
            if room == 0 {
                out.extend(extents.iter().map(|&(e, _)| (e, MoveOutcome::NoRoom)));
                return Ok((
                    Reserved {
                        to: Tier::Hdd,
                        items: Vec::new(),
                    },
                    out,
                ));
            }
        }
        let mut items: Vec<(Item, Option<Tier>)> = Vec::with_capacity(extents.len());
        for &(extent, reason) in extents {
            let Some(lock) = self.map.get(extent) else {
                return Err(VolumeError::OutOfRange {
                    offset: extent.saturating_mul(self.geo.extent_size),
                    len: self.geo.extent_size,
                    size: self.size(),
                });
            };
            // A promotion watches the extent's writes from before its
            // snapshot on: a write whose first bump the snapshot saw either
            // saw the watch (and marks its blocks) or finished its data
            // write before the watch began, so before the copy reads it.
            let watched = goal == Goal::Ssd;
            if watched {
                self.watch(extent);
            }
            let guard = lock.read();
            let Some(m) = guard.as_ref() else {
                drop(guard);
                if watched {
                    self.unwatch(extent);
                }
                out.push((extent, MoveOutcome::Skipped));
                continue;
            };
            let need = match (goal, m.loc.tier) {
                (Goal::Ssd, Tier::Hdd) => Some(Tier::Ssd),
                (Goal::Hdd, Tier::Ssd) if m.shadow.is_none() => Some(Tier::Hdd),
                (Goal::Hdd, Tier::Ssd) => None,
                (Goal::WriteBack, Tier::Hdd) if !m.logged.is_empty() => None,
                (Goal::Clean, Tier::Ssd) if m.shadow.is_none() && m.written.count(blocks) > 0 => {
                    Some(Tier::Hdd)
                }
                (Goal::Refresh, Tier::Ssd)
                    if m.shadow.as_ref().is_some_and(|s| !s.stale.is_empty()) =>
                {
                    None
                }
                _ => {
                    drop(guard);
                    if watched {
                        self.unwatch(extent);
                    }
                    out.push((extent, MoveOutcome::Skipped));
                    continue;
                }
            };
            items.push((
                Item {
                    extent,
                    reason,
                    before: m.clone(),
                    gen: self.map.gen(extent).unwrap_or(0),
                    fresh: None,
                    runs: Vec::new(),
                    after: m.clone(),
                    release: Vec::new(),
                    saved: 0,
                    watched: goal == Goal::Ssd && m.loc.tier == Tier::Hdd,
                    keep: false,
                    in_place: goal == Goal::WriteBack
                        || goal == Goal::Refresh
                        || (goal == Goal::Hdd && m.shadow.is_some()),
                },
                need,
            ));
        }
        // In source order; copies into shadows in their order, after the
        // others: the HDD side is what streams (neighbouring shadows are
        // written in one write, `Volume::copy_items`). From the SSD into
        // new HDD slots, in the volume's order: the slots are a run, so
        // the extents keep their order on the disk and a later read of
        // them streams too.
        items.sort_by_key(|(i, _)| {
            let into_shadow = matches!(goal, Goal::Hdd | Goal::Refresh);
            match &i.before.shadow {
                Some(s) if into_shadow => (1, u64::from(s.slot), i.extent),
                _ if goal.tier() == Tier::Hdd && i.before.loc.tier == Tier::Ssd => (0, i.extent, 0),
                _ => (0, u64::from(i.before.loc.slot), i.extent),
            }
        });
        // New slots, ascending for ascending sources: both devices stream.
        let wanted = items
            .iter()
            .filter(|(_, n)| n.is_some())
            .count()
            .min(clean_room);
        let mut dsts = self.take_slots(goal.tier(), wanted);
        dsts.sort_by_key(|d| std::cmp::Reverse(d.slot));
        // A promoted extent keeps its HDD slot as a shadow while the HDD has
        // more free slots than the reserve (the room demotions need).
        let spare = u64::from(self.reserve_target().max(1));
        let mut hdd_free = u64::from(self.alloc.free_count(Tier::Hdd));
        // A drained HDD keeps no copies.
        let shadows =
            self.shadows_enabled.load(Ordering::Relaxed) && self.evacuating() != Some(Tier::Hdd);
        let mut ready = Vec::with_capacity(items.len());
        for (mut it, need) in items {
            if need.is_some() {
                match dsts.pop() {
                    Some(d) => it.fresh = Some(d),
                    None => {
                        self.end_item(&it);
                        out.push((it.extent, MoveOutcome::NoRoom));
                        continue;
                    }
                }
            }
            // An admission keeps it while the HDD has any free slot: it is
            // how the admitted extent makes way again for free, and the
            // slot was the extent's own. On a full HDD the slot goes to
            // the victim the admission swaps with.
            let keep = goal == Goal::Ssd
                && shadows
                && (hdd_free > spare || (it.reason == Reason::Admit && hdd_free > 0));
            if keep {
                hdd_free = hdd_free.saturating_sub(1);
            }
            it.keep = keep;
            self.shape(&mut it, goal, keep);
            ready.push(it);
        }
        Ok((
            Reserved {
                to: goal.tier(),
                items: ready,
            },
            out,
        ))
    }

    /// The runs copying the blocks of SSD extent `m` that `pick` chooses to
    /// the same blocks of HDD slot `slot`, appended to `runs`; returns `m`
    /// with a clean shadow in that slot, the mapping once they are copied
    /// (`Goal::Clean` into a new slot, `Goal::Refresh` into its shadow).
    fn clean_shadow_runs(
        &self,
        m: &Mapping,
        slot: u32,
        pick: impl Fn(u32) -> bool,
        runs: &mut Vec<CopyRun>,
    ) -> Mapping {
        let blocks = self.geo.blocks_per_extent();
        let at = |s: u32, b: u32| self.geo.slot_offset(s) + u64::from(b) * BLOCK_SIZE;
        for b in (0..blocks).filter(|b| pick(*b)) {
            let (src, dst) = (at(m.loc.slot, b), at(slot, b));
            push_run(runs, BLOCK_SIZE, Tier::Ssd, src, Tier::Hdd, dst);
        }
        let mut after = m.clone();
        after.shadow = Some(Shadow {
            slot,
            stale: Written::empty(blocks),
        });
        after
    }

    /// Work out what a move copies, installs and gives up.
    fn shape(&self, it: &mut Item, goal: Goal, keep_shadow: bool) {
        let m = it.before.clone();
        let m = &m;
        let blocks = self.geo.blocks_per_extent();
        let mut runs: Vec<CopyRun> = Vec::new();
        let block_at =
            |loc: Loc, b: u32| self.geo.slot_offset(loc.slot) + u64::from(b) * BLOCK_SIZE;
        match goal {
            Goal::Clean => {
                let Some(dst) = it.fresh else { return };
                let pick = |b| m.written.get(b);
                it.after = self.clean_shadow_runs(m, dst.slot, pick, &mut runs);
            }
            Goal::Ssd | Goal::Hdd if it.fresh.is_some() => {
                let dst = it.fresh.unwrap_or(m.loc);
                for b in 0..blocks {
                    if let Some((tier, at)) = self.block_source(m, b) {
                        push_run(&mut runs, BLOCK_SIZE, tier, at, dst.tier, block_at(dst, b));
                    }
                    // A block logged in part: its sectors in the log over
                    // what the HDD slot gave, copied after it.
                    for (s0, s1, at) in self.logged_sectors(m, b) {
                        push_run(
                            &mut runs,
                            s1 - s0,
                            Tier::Ssd,
                            at,
                            dst.tier,
                            block_at(dst, b) + s0,
                        );
                    }
                }
                let mut after = Mapping::plain(dst, m.written.clone());
                if keep_shadow && goal == Goal::Ssd {
                    let mut stale = Written::empty(blocks);
                    for l in &m.logged {
                        stale.set_range(l.block, l.block, true, blocks);
                    }
                    after.shadow = Some(Shadow {
                        slot: m.loc.slot,
                        stale,
                    });
                } else {
                    it.release.push(Release::Slot(m.loc));
                }
                it.release
                    .extend(m.logged.iter().map(|l| Release::Log(l.at)));
                it.after = after;
            }
            Goal::Hdd => {
                // Into the shadow: the stale blocks are written, and the
                // clean ones beside them (see `through_clean_gaps`).
                let Some(s) = &m.shadow else { return };
                let home = Loc {
                    tier: Tier::Hdd,
                    slot: s.slot,
                };
                let copy = through_clean_gaps(m, s, blocks);
                for b in 0..blocks {
                    if !m.written.get(b) {
                        continue;
                    }
                    if copy[b as usize] {
                        push_run(
                            &mut runs,
                            BLOCK_SIZE,
                            Tier::Ssd,
                            block_at(m.loc, b),
                            Tier::Hdd,
                            block_at(home, b),
                        );
                    } else {
                        it.saved += 1;
                    }
                }
                it.after = Mapping::plain(home, m.written.clone());
                it.release.push(Release::Slot(m.loc));
            }
            Goal::Ssd => {}
            Goal::Refresh => {
                // Into the shadow, in place: the stale blocks written there,
                // the shadow clean after the commit.
                let Some(s) = &m.shadow else { return };
                let copy = through_clean_gaps(m, s, blocks);
                let pick = |b: u32| copy[b as usize];
                it.after = self.clean_shadow_runs(m, s.slot, pick, &mut runs);
            }
            Goal::WriteBack => {
                for l in &m.logged {
                    if l.is_whole() {
                        push_run(
                            &mut runs,
                            BLOCK_SIZE,
                            Tier::Ssd,
                            self.log_offset(l.at),
                            Tier::Hdd,
                            block_at(m.loc, l.block),
                        );
                        continue;
                    }
                    // Only the sectors the log holds go home.
                    for (s0, s1) in l.sector_runs() {
                        push_run(
                            &mut runs,
                            s1 - s0,
                            Tier::Ssd,
                            self.log_offset(l.at) + s0,
                            Tier::Hdd,
                            block_at(m.loc, l.block) + s0,
                        );
                    }
                }
                it.after = Mapping::plain(m.loc, m.written.clone());
                it.release
                    .extend(m.logged.iter().map(|l| Release::Log(l.at)));
            }
        }
        it.runs = runs;
    }

    /// Step 2: copy, without the extents' locks. `pace(bytes)` is called
    /// before each copy (it may sleep). On error the destinations are given
    /// back.
    pub(crate) fn copy_moves(
        &self,
        r: Reserved,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<Copied> {
        let mut copied = vec![0u64; r.items.len()];
        if let Err(e) = self.copy_items(&r.items, &mut copied, pace) {
            self.free_dsts(&r.items);
            Stats::add(&self.stats.migration_errors, r.items.len() as u64);
            return Err(e);
        }
        Ok(Copied {
            to: r.to,
            items: r.items,
            copied,
        })
    }

    /// Step 3: make the copies durable. On error the destinations are given
    /// back.
    pub(crate) fn sync_moves(&self, c: Copied) -> VolumeResult<Synced> {
        let dev = self.devices.get(c.to);
        let t0 = self.clock.io_now();
        let synced = dev.sync();
        self.count_move_sync(t0);
        if let Err(e) = synced {
            self.free_dsts(&c.items);
            Stats::add(&self.stats.migration_errors, c.items.len() as u64);
            Stats::add(&self.stats.dev_errors[c.to.index()], 1);
            return Err(io_err(dev.as_ref())(e));
        }
        Ok(Synced {
            to: c.to,
            items: c.items,
            copied: c.copied,
        })
    }

    /// A move's sync or flush began at `t0` (`io_now`) and ended now.
    fn count_move_sync(&self, t0: std::time::Duration) {
        let took = self.clock.io_now().saturating_sub(t0);
        Stats::add(&self.stats.move_sync_ns, took.as_nanos() as u64);
    }

    /// Step 4: commit each mapping unless a foreground write changed the
    /// extent since its snapshot (answered `Raced`, new slot given back).
    /// A store error stops the commits there: the rest give their new slots
    /// back and the error is reported after step 6.
    pub(crate) fn commit_moves(&self, s: Synced) -> (Committed, Vec<(u64, MoveOutcome)>) {
        let mut out = Vec::new();
        let mut committed = Vec::with_capacity(s.items.len());
        let mut failure = None;
        for (it, copied) in s.items.into_iter().zip(s.copied) {
            if failure.is_some() {
                self.end_item(&it);
                continue;
            }
            let mut guard = self.map.at(it.extent).write();
            let touched = if it.watched {
                self.unwatch(it.extent)
            } else {
                None
            };
            let mut it = it;
            let mut copied = copied;
            let current = guard.as_ref().cloned();
            let fits = match (&current, &touched) {
                (Some(m), _) if *m == it.before && self.map.gen(it.extent) == Some(it.gen) => true,
                // Written meanwhile but still where the copy came from:
                // bring the written blocks over now, under the lock. Only
                // if every block no write touched still reads from where
                // the copy read it: a write-back on another thread moves
                // logged blocks to the HDD slot without a write, and gives
                // their log places back for other extents' writes.
                (Some(m), Some(t))
                    if m.loc == it.before.loc
                        && m.shadow.is_none()
                        && untouched_unmoved(&it.before, m, t, self.geo.blocks_per_extent()) =>
                {
                    match self.recopy(&mut it, m, t) {
                        Ok(n) => {
                            copied += n;
                            Stats::add(&self.stats.recopied_blocks, n / BLOCK_SIZE);
                            true
                        }
                        Err(e) => {
                            drop(guard);
                            self.free_fresh(&it);
                            Stats::add(&self.stats.migration_errors, 1);
                            failure = Some(e);
                            continue;
                        }
                    }
                }
                _ => false,
            };
            match guard.as_mut() {
                Some(m) if fits => {
                    if let Err(e) = self.store.put_extent(it.extent, &it.after.encode()) {
                        drop(guard);
                        self.free_fresh(&it);
                        Stats::add(&self.stats.migration_errors, 1);
                        failure = Some(VolumeError::from(e));
                        continue;
                    }
                    *m = it.after.clone();
                    self.map.bump(it.extent);
                    if m.loc.tier == Tier::Ssd && it.reason != Reason::Admit {
                        // Placed by another path: the admission order
                        // covers it too (an admission queues its own).
                        self.admission
                            .arrived(it.extent, super::admit::Class::Small);
                    }
                    if m.shadow.is_some() {
                        self.clean_shadows.store(true, Ordering::Relaxed);
                    }
                    drop(guard);
                    committed.push((it, copied));
                }
                _ => {
                    drop(guard);
                    self.free_fresh(&it);
                    Stats::add(&self.stats.migration_aborts, 1);
                    out.push((it.extent, MoveOutcome::Raced));
                }
            }
        }
        if !committed.is_empty() {
            self.mark_meta_dirty();
        }
        (
            Committed {
                to: s.to,
                items: committed,
                failure,
            },
            out,
        )
    }

    /// Step 5: make the new mappings durable. On error the new mappings are
    /// live but not yet durable: what they gave up is freed only after a
    /// later flush succeeds.
    pub(crate) fn flush_moves(&self, c: Committed) -> VolumeResult<Flushed> {
        let t0 = self.clock.io_now();
        let flushed = self.flush();
        self.count_move_sync(t0);
        if let Err(e) = flushed {
            for (it, _) in &c.items {
                for r in &it.release {
                    match *r {
                        Release::Slot(loc) => self.alloc.free_deferred(loc),
                        Release::Log(at) => self.log.release_deferred(at),
                    }
                }
            }
            Stats::add(&self.stats.migration_errors, c.items.len() as u64);
            return Err(e);
        }
        Ok(Flushed {
            to: c.to,
            items: c.items,
            failure: c.failure,
        })
    }

    /// Step 6: free what the moves gave up, count and record them. Returns
    /// the store error step 4 met, if any.
    pub(crate) fn release_moves(&self, f: Flushed) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
        let at = self.clock.unix_secs();
        let mut out = Vec::with_capacity(f.items.len());
        let mut moves = self.moves.lock();
        for (it, copied) in &f.items {
            for r in &it.release {
                match *r {
                    Release::Slot(loc) => self.alloc.free_now(loc),
                    Release::Log(at) => self.log.release_now(at, &self.alloc),
                }
            }
            if it.before.loc == it.after.loc
                && it.before.loc.tier == Tier::Ssd
                && it.after.shadow.as_ref().is_some_and(|s| s.stale.is_empty())
                && it
                    .before
                    .shadow
                    .as_ref()
                    .is_none_or(|s| !s.stale.is_empty())
            {
                // A pre-clean or a refresh: the extent did not move.
                Stats::add(&self.stats.precleaned, 1);
                Stats::add(&self.stats.precleaned_bytes, *copied);
                out.push((it.extent, MoveOutcome::Moved(*copied)));
                continue;
            }
            self.stats.migrated(f.to, it.reason, *copied);
            if it.reason == Reason::Writeback {
                Stats::add(
                    &self.stats.written_back_blocks,
                    it.before.logged.len() as u64,
                );
            } else if it.before.shadow.is_some() {
                Stats::add(&self.stats.shadow_saved_blocks, it.saved);
                if *copied == 0 {
                    Stats::add(&self.stats.free_demotions, 1);
                }
            }
            moves.insert(
                it.extent,
                MoveRecord {
                    at,
                    from: it.before.loc.tier,
                    to: f.to,
                    reason: it.reason,
                },
            );
            out.push((it.extent, MoveOutcome::Moved(*copied)));
        }
        drop(moves);
        match f.failure {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    fn free_fresh(&self, it: &Item) {
        if let Some(d) = it.fresh {
            self.alloc.free_now(d);
        }
    }

    /// Give up an item before its commit: its new slot back, its watch
    /// ended.
    fn end_item(&self, it: &Item) {
        self.free_fresh(it);
        if it.watched {
            self.unwatch(it.extent);
        }
    }

    fn free_dsts(&self, items: &[Item]) {
        for it in items {
            self.end_item(it);
        }
    }
}

/// Whether every block of `before` that `touched` does not name reads from
/// the same place in `now` (the same log entry, or none, and the same
/// written state): what a promotion copied of them is still theirs.
fn untouched_unmoved(before: &Mapping, now: &Mapping, touched: &Written, blocks: u32) -> bool {
    let moved = |a: &Mapping, b: &Mapping| {
        a.logged
            .iter()
            .any(|l| !touched.get(l.block) && b.logged_entry(l.block) != Some(l))
    };
    !moved(before, now)
        && !moved(now, before)
        && (0..blocks).all(|b| touched.get(b) || before.written.get(b) == now.written.get(b))
}
