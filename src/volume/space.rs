//! Space: slot allocation for new extents (dropping shadows when nothing
//! else is free), discard and zeroing, and flush — the point where freed
//! slots and log places become reusable — and a clean close.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::extent::Loc;
use super::geometry::{Tier, BLOCK_SIZE};
use super::io::{InFlight, Piece};
use super::stats::Stats;
use super::{io_err, Volume, VolumeError, VolumeResult};

/// How far back [`Volume::hdd_goal`] looks for a neighbour on the HDD, in
/// extents (4 GiB of 1 MiB extents: past a reserve's worth of new data that
/// went to the SSD).
const GOAL_LOOKBACK: u64 = 4096;

/// SSD extents with a clean HDD copy demoted at once (one flush) when a new
/// extent finds the SSD without a free slot, at the start of a burst; each
/// further time within the burst takes twice as many ([`EvictRun`]).
const EVICT_FOR_NEW: usize = 16;

/// A pause in evictions for new data this long ends a burst: the next
/// takes [`EVICT_FOR_NEW`] again.
const EVICT_BURST_GAP: Duration = Duration::from_secs(1);

/// How many clean SSD extents the next eviction for new data takes. The
/// flush that makes their slots reusable costs about the same however many
/// leave (a sync of both devices and the metadata store; on image files
/// through the daemon tens of milliseconds), so a burst of new data that
/// keeps finding the SSD full doubles its batch each time, up to the
/// reserve: a long burst pays a few flushes instead of one per 16 MiB,
/// and a short one evicts no more than it needs.
#[derive(Debug, Default)]
pub(crate) struct EvictRun {
    /// When the last eviction for new data was (clock nanoseconds).
    last_ns: AtomicU64,
    /// Its batch.
    batch: AtomicUsize,
}

impl EvictRun {
    /// The batch for an eviction at `now`, at most `cap` (at least
    /// [`EVICT_FOR_NEW`]).
    pub(crate) fn next(&self, now: Duration, cap: usize) -> usize {
        let now_ns = now.as_nanos() as u64;
        let last = self.last_ns.swap(now_ns, Ordering::Relaxed);
        let prev = self.batch.load(Ordering::Relaxed);
        let in_burst = prev > 0 && now_ns.saturating_sub(last) < EVICT_BURST_GAP.as_nanos() as u64;
        let batch = if in_burst {
            prev.saturating_mul(2).min(cap.max(EVICT_FOR_NEW))
        } else {
            EVICT_FOR_NEW
        };
        self.batch.store(batch, Ordering::Relaxed);
        batch
    }
}

impl Volume {
    /// A free slot for a new extent: on the SSD while it has one (the
    /// reserve exists to take exactly these writes), else on the HDD; an
    /// extent pinned to the HDD starts there. With no free SSD slot, idle
    /// SSD extents with a clean HDD copy leave it first (the reserve lent
    /// to promotions comes back). With no free slot at all, slots
    /// waiting for a flush are freed by one, and then shadows are dropped:
    /// their slots belong to the capacity, never lost to it.
    pub(crate) fn allocate(&self, extent: u64) -> VolumeResult<Loc> {
        let order = match (self.evacuating(), self.pin_of(extent)) {
            (Some(Tier::Ssd), _) | (None, Some(Tier::Hdd)) => [Tier::Hdd, Tier::Ssd],
            _ => [Tier::Ssd, Tier::Hdd],
        };
        if order[0] == Tier::Ssd
            && self.alloc.free_count(Tier::Ssd) == 0
            && self.clean_shadows.load(Ordering::Relaxed)
        {
            // The reserve was lent to promotions: take it back for new data
            // at once, from idle extents whose clean HDD copy makes leaving
            // a mapping change (the flush makes their slots reusable). Data
            // in use stays: a long write of new data spills to the HDD
            // rather than push out the working set.
            let batch = self
                .evict_run
                .next(self.clock.now(), self.geo.reserve_extents as usize);
            if self.evict_clean_where(batch, Some(extent), true)? > 0 {
                self.flush()?;
            }
        }
        // Where on the HDD it belongs, looked up once, and only when it may
        // go there (the SSD comes first and has a free slot otherwise).
        let goal = (order[0] == Tier::Hdd || self.alloc.free_count(Tier::Ssd) == 0)
            .then(|| self.hdd_goal(extent))
            .flatten();
        let mut got = self.take_new_slot(&order, goal)?;
        if got.is_none() && (self.alloc.quarantined() > 0 || self.log.quarantined() > 0) {
            // Freed slots become reusable once their unmapping is durable.
            self.flush()?;
            got = self.take_new_slot(&order, goal)?;
        }
        if got.is_none() && self.drop_shadows(1, Some(extent))? > 0 {
            self.flush()?;
            got = self.take_new_slot(&order, goal)?;
        }
        let loc = got.ok_or(VolumeError::NoSpace)?;
        self.new_data_now();
        Stats::add(&self.stats.allocations[loc.tier.index()], 1);
        if loc.tier == Tier::Hdd && order[0] == Tier::Ssd {
            Stats::add(&self.stats.spills, 1);
        }
        if loc.tier == Tier::Ssd {
            self.admission.arrived(extent, super::admit::Class::Small);
        }
        Ok(loc)
    }

    /// A free slot from the first tier of `order` that has one, for a move:
    /// the slot given back last, if any (see [`super::alloc`]).
    pub(crate) fn take_slot(&self, order: &[Tier]) -> VolumeResult<Option<Loc>> {
        self.detached(self.alloc.alloc(order))
    }

    /// Up to `wanted` free slots on `tier` for a batch of moves. On the
    /// HDD they neighbour each other where free runs allow
    /// ([`Volume::take_run`]): the batch's copies are then written in
    /// merged writes, where slots given back one by one (scattered over
    /// the disk) cost a positioning per extent. The rest are single slots
    /// ([`Volume::take_slot`]). Fewer when the tier runs out (or a slot
    /// cannot be detached: logged; the moves without one end as NoRoom).
    pub(crate) fn take_slots(&self, tier: Tier, wanted: usize) -> Vec<Loc> {
        let mut dsts = Vec::with_capacity(wanted);
        while tier == Tier::Hdd && wanted > dsts.len() + 1 {
            let want = u32::try_from(wanted - dsts.len()).unwrap_or(u32::MAX);
            match self.take_run(tier, want) {
                Ok(run) if run.is_empty() => break,
                Ok(run) => dsts.extend(run),
                Err(e) => {
                    tracing::warn!("no slots for a batch of moves: {e}");
                    break;
                }
            }
        }
        while dsts.len() < wanted {
            match self.take_slot(&[tier]) {
                Ok(Some(d)) => dsts.push(d),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("no slot for a move: {e}");
                    break;
                }
            }
        }
        dsts
    }

    /// Up to `want` free slots on `tier` in one run of neighbouring slots
    /// for a batch of moves ([`Allocator::alloc_run`](super::alloc::Allocator::alloc_run)), at least a merged
    /// write's worth of them where the batch is that large; empty when no
    /// free run is long enough. Each is detached as
    /// [`Volume::take_slot`]'s is.
    fn take_run(&self, tier: Tier, want: u32) -> VolumeResult<Vec<Loc>> {
        let min = (super::moves::MERGE_MAX / self.geo.extent_size).max(1);
        let min = u32::try_from(min).unwrap_or(u32::MAX);
        let got = self.alloc.alloc_run(tier, want, min);
        let mut out = Vec::with_capacity(got.len());
        let mut left = got.into_iter();
        for loc in left.by_ref() {
            match self.detached(Some(loc)) {
                Ok(Some(l)) => out.push(l),
                Ok(None) => {}
                Err(e) => {
                    // The slots not yet detached go back unused.
                    for l in out.into_iter().chain(left) {
                        self.alloc.free_now(l);
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    /// [`Volume::take_slot`] for new data: on the SSD the lowest free slot,
    /// on the HDD the first free one from `hdd_goal`, else the lowest.
    fn take_new_slot(&self, order: &[Tier], hdd_goal: Option<u32>) -> VolumeResult<Option<Loc>> {
        self.detached(self.alloc.alloc_new(order, hdd_goal))
    }

    /// Where new data `extent` belongs on the HDD: as far past its nearest
    /// HDD-mapped predecessor's slot (within [`GOAL_LOOKBACK`] extents) as
    /// it is past that extent in the volume. The volume's order is kept on
    /// the disk, so a stream continues where it left off, and streams
    /// written at once in different parts of the volume each get their
    /// own run of slots instead of taking turns at the lowest (which gives
    /// every stream one positioning per extent). `None` with no such
    /// neighbour.
    fn hdd_goal(&self, extent: u64) -> Option<u32> {
        let from = extent.saturating_sub(GOAL_LOOKBACK);
        (from..extent).rev().find_map(|p| {
            let loc = self.map.loc(p)?;
            (loc.tier == Tier::Hdd)
                .then(|| u32::try_from(u64::from(loc.slot) + (extent - p)).ok())
                .flatten()
        })
    }

    /// `got`, detached from pages that zero-copy reads of its previous
    /// owner may still hold
    /// ([`BlockDevice::forget`](crate::device::BlockDevice::forget)): every
    /// slot handed out for new contents comes through here.
    fn detached(&self, got: Option<Loc>) -> VolumeResult<Option<Loc>> {
        let Some(loc) = got else {
            return Ok(None);
        };
        match self.forget_slot(loc.tier, loc.slot) {
            Ok(()) => Ok(Some(loc)),
            Err(e) => {
                self.alloc.free_now(loc);
                Err(e)
            }
        }
    }

    /// [`BlockDevice::forget`](crate::device::BlockDevice::forget) a whole
    /// slot.
    pub(crate) fn forget_slot(&self, tier: Tier, slot: u32) -> VolumeResult<()> {
        let dev = self.devices.get(tier);
        dev.forget(self.geo.slot_offset(slot), self.geo.extent_size)
            .map_err(io_err(dev.as_ref()))
    }

    /// SSD extents other than `except` that `pick` chooses, coldest first
    /// (hottest first with `hottest`); extents busy right now are skipped.
    fn extents_by_heat(
        &self,
        except: Option<u64>,
        hottest: bool,
        pick: impl Fn(u64, &super::Mapping, bool) -> bool,
    ) -> Vec<u64> {
        // Idle extents rank below every extent in use, then by score.
        // Every caller looks for SSD extents: the SSD's owners, not a scan
        // of the volume.
        let mut found: Vec<((bool, f32), u64)> = self
            .map
            .ssd_extents()
            .into_iter()
            .filter(|i| Some(*i) != except)
            .filter_map(|i| {
                let g = self.map.at(i).try_read()?;
                let key = (self.heat.is_active(i), self.heat.score(i));
                pick(i, g.as_ref()?, key.0).then_some((key, i))
            })
            .collect();
        let order = |a: &(bool, f32), b: &(bool, f32)| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1));
        // Stable: equal heat keeps extent order either way.
        if hottest {
            found.sort_by(|a, b| order(&b.0, &a.0));
        } else {
            found.sort_by(|a, b| order(&a.0, &b.0));
        }
        found.into_iter().map(|(_, e)| e).collect()
    }

    /// Up to `max` SSD extents holding data and no HDD copy, coldest first:
    /// the ones pre-cleaning gives a copy next.
    pub fn unshadowed_ssd_extents(&self, max: usize) -> Vec<u64> {
        let blocks = self.geo.blocks_per_extent();
        let mut found = self.extents_by_heat(None, false, |_, m, _| {
            m.loc.tier == Tier::Ssd && m.shadow.is_none() && m.written.count(blocks) > 0
        });
        found.truncate(max);
        found
    }

    /// Drop up to `max` shadows (the HDD copies SSD extents keep), coolest
    /// extents' last (they are the likeliest to be demoted, which a shadow
    /// makes free), skipping `except` and any extent busy right now. Their
    /// slots are free after the next flush. Returns how many were dropped.
    pub fn drop_shadows(&self, max: usize, except: Option<u64>) -> VolumeResult<usize> {
        if max == 0 {
            return Ok(0);
        }
        let with = self.extents_by_heat(except, true, |_, m, _| m.shadow.is_some());
        let mut dropped = 0;
        for extent in with {
            if dropped == max {
                break;
            }
            let Some(mut guard) = self.slot_lock(extent).try_write() else {
                continue;
            };
            let Some(m) = guard.as_mut() else { continue };
            let Some(s) = m.shadow.take() else { continue };
            if let Err(e) = self.store.put_extent(extent, &m.encode()) {
                m.shadow = Some(s);
                return Err(e.into());
            }
            self.bump(extent);
            self.mark_meta_dirty();
            self.alloc.free_deferred(Loc {
                tier: Tier::Hdd,
                slot: s.slot,
            });
            Stats::add(&self.stats.shadows_dropped, 1);
            dropped += 1;
        }
        Ok(dropped)
    }

    /// Demote up to `max` SSD extents whose shadow is clean, coldest first,
    /// by a mapping change alone (no data is written: the shadow holds every
    /// block), skipping `except` and extents busy right now. Their SSD slots
    /// are free after the next flush. This is how the reserve is taken back
    /// at once when writes need it: what promotions borrowed came with a
    /// shadow. Returns how many were demoted.
    pub fn evict_clean(&self, max: usize, except: Option<u64>) -> VolumeResult<usize> {
        self.evict_clean_where(max, except, false)
    }

    /// [`Volume::evict_clean`], taking only idle extents (untouched for
    /// `heat.idle-after`) when `idle_only`: new data may push out data
    /// nobody uses, never data in use.
    fn evict_clean_where(
        &self,
        max: usize,
        except: Option<u64>,
        idle_only: bool,
    ) -> VolumeResult<usize> {
        if max == 0 {
            return Ok(0);
        }
        let blocks = self.geo.blocks_per_extent();
        let clean = |m: &super::Mapping| m.shadow_clean(blocks);
        if idle_only && self.heat.ticks() == self.no_idle_clean.load(Ordering::Relaxed) {
            // None was found since the heat last changed.
            return Ok(0);
        }
        let found = self.extents_by_heat(except, false, |e, m, active| {
            clean(m) && self.pin_of(e) != Some(Tier::Ssd) && !(idle_only && active)
        });
        if found.is_empty() && idle_only {
            self.no_idle_clean
                .store(self.heat.ticks(), Ordering::Relaxed);
            return Ok(0);
        }
        if found.is_empty() {
            // Until a promotion leaves a shadow again, writes need not look.
            self.clean_shadows.store(false, Ordering::Relaxed);
            return Ok(0);
        }
        let mut done = 0;
        for extent in found {
            if done == max {
                break;
            }
            if self.demote_clean(extent, crate::units::Reason::Reserve)? {
                done += 1;
            }
        }
        Ok(done)
    }

    /// Demote SSD extent `extent` by a mapping change alone, if its HDD
    /// shadow is clean and nobody holds it right now: the shadow becomes
    /// its home, the SSD slot is free after the next flush. Returns whether
    /// it left.
    pub(crate) fn demote_clean(
        &self,
        extent: u64,
        reason: crate::units::Reason,
    ) -> VolumeResult<bool> {
        let blocks = self.geo.blocks_per_extent();
        let Some(lock) = self.map.get(extent) else {
            return Ok(false);
        };
        let Some(mut guard) = lock.try_write() else {
            return Ok(false);
        };
        let Some(m) = guard.as_mut() else {
            return Ok(false);
        };
        if m.loc.tier != Tier::Ssd || !m.shadow_clean(blocks) {
            return Ok(false);
        }
        let Some(s) = m.shadow.as_ref() else {
            return Ok(false);
        };
        let ssd = m.loc;
        // Every written block is one the clean copy saved from being written.
        let saved = u64::from(m.written.count(blocks));
        let home = super::Mapping::plain(
            Loc {
                tier: Tier::Hdd,
                slot: s.slot,
            },
            m.written.clone(),
        );
        self.store.put_extent(extent, &home.encode())?;
        *m = home;
        drop(guard);
        self.bump(extent);
        self.mark_meta_dirty();
        self.alloc.free_deferred(ssd);
        self.stats.migrated(Tier::Hdd, reason, 0);
        Stats::add(&self.stats.free_demotions, 1);
        Stats::add(&self.stats.shadow_saved_blocks, saved);
        self.moves.lock().insert(
            extent,
            super::MoveRecord {
                at: self.clock.unix_secs(),
                from: Tier::Ssd,
                to: Tier::Hdd,
                reason,
            },
        );
        Ok(true)
    }

    /// Discard (`zero == false`) or zero (`zero == true`) a range. Whole
    /// extents are unmapped unless `keep_allocated`; whole blocks are marked
    /// unwritten (they read as zeros); partial blocks are overwritten with
    /// zeros when zeroing. Never slow: at most two partial blocks per extent
    /// are written.
    pub fn discard(
        &self,
        offset: u64,
        len: u64,
        zero: bool,
        keep_allocated: bool,
        fua: bool,
    ) -> VolumeResult<()> {
        self.check(offset, len)?;
        if len > 0 {
            self.wait_unheld(offset, len);
        }
        let _inflight = InFlight::new(&self.inflight);
        for p in self.pieces(offset, len) {
            self.discard_piece(p, zero, keep_allocated)?;
        }
        self.forget_lost(offset, len)?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn discard_piece(&self, p: Piece, zero: bool, keep_allocated: bool) -> VolumeResult<()> {
        let mut guard = self.slot_lock(p.extent).write();
        let Some(mut m) = guard.take() else {
            // Zeros in part of a lost block would leave the rest unknown:
            // refused, as a partial write is.
            if zero {
                for (lo, hi) in partial_ends(p.start, p.len) {
                    if lo < hi {
                        let b = (lo / BLOCK_SIZE) as u32;
                        self.check_lost(p.extent, b, b)?;
                    }
                }
            }
            return Ok(());
        };
        self.bump(p.extent);
        {
            let (first, last) = super::io::block_span(p.start, p.len);
            self.touch(p.extent, first, last);
        }
        let whole = p.len == self.geo.extent_size;
        let blocks = self.geo.blocks_per_extent();
        let before = m.clone();
        let mut dropped = Vec::new();
        if !whole || keep_allocated {
            let end = p.start + p.len;
            let full_first = p.start.div_ceil(BLOCK_SIZE);
            let full_end = end / BLOCK_SIZE;
            for (lo, hi) in partial_ends(p.start, p.len) {
                let block = (lo / BLOCK_SIZE) as u32;
                if !(zero && lo < hi) {
                    continue;
                }
                let zeros = vec![0u8; (hi - lo) as usize];
                // The zeros go where the block's newest data is.
                let r = match (m.logged_entry(block).copied(), m.written.get(block)) {
                    (Some(l), _) if l.is_whole() => {
                        self.raw_write(Tier::Ssd, self.log_offset(l.at) + lo % BLOCK_SIZE, &zeros)
                    }
                    // Logged in part: the sectors the log holds read from
                    // it, the others from the HDD slot; zeros in both.
                    (Some(l), _) => self
                        .raw_write(Tier::Ssd, self.log_offset(l.at) + lo % BLOCK_SIZE, &zeros)
                        .and_then(|()| self.device_write(m.loc, lo, &zeros)),
                    (None, true) => {
                        if let Some(s) = m.shadow.as_mut() {
                            s.stale.set_range(block, block, true, blocks);
                        }
                        self.device_write(m.loc, lo, &zeros)
                    }
                    // Unwritten: zeros already, unless the block is lost
                    // (then zeros in part of it are refused, as a partial
                    // write is).
                    (None, false) => self.check_lost(p.extent, block, block),
                };
                if let Err(e) = r {
                    *guard = Some(before);
                    return Err(e);
                }
            }
            if full_first < full_end {
                let (a, b) = (full_first as u32, (full_end - 1) as u32);
                m.written.set_range(a, b, false, blocks);
                m.logged.retain(|l| {
                    let hit = (a..=b).contains(&l.block);
                    if hit {
                        dropped.push(l.at);
                    }
                    !hit
                });
            }
        }
        let unmap = !keep_allocated && (whole || m.written.is_empty());
        let stored = if unmap {
            self.store.remove_extent(p.extent)
        } else if m != before {
            self.store.put_extent(p.extent, &m.encode())
        } else {
            *guard = Some(m);
            return Ok(());
        };
        if let Err(e) = stored {
            *guard = Some(before);
            return Err(e.into());
        }
        self.mark_meta_dirty();
        for at in dropped {
            self.log.release_deferred(at);
        }
        if unmap {
            for loc in m.slots() {
                self.alloc.free_deferred(loc);
            }
            for l in &m.logged {
                self.log.release_deferred(l.at);
            }
            self.heat.clear(p.extent);
        } else {
            *guard = Some(m);
        }
        Ok(())
    }

    /// Make every acknowledged write durable: data on both devices first,
    /// then the metadata that points at it. Slots and log places freed
    /// before the flush become reusable after it.
    pub fn flush(&self) -> VolumeResult<()> {
        let _serial = self.flush_lock.lock();
        let quarantine = self.alloc.take_quarantine();
        let places = self.log.take_quarantine();
        let result = self.flush_inner(!quarantine.is_empty() || !places.is_empty());
        self.flush_failed.store(result.is_err(), Ordering::Relaxed);
        self.alloc.settle(quarantine, result.is_ok());
        self.log.settle(places, result.is_ok(), &self.alloc);
        result
    }

    /// Whether the volume can take a flush within `within` (its flush lock
    /// comes free): a wedged flush, or a device that no longer answers a
    /// sync, says no. For a watchdog.
    pub fn responsive(&self, within: Duration) -> bool {
        self.flush_lock.try_lock_for(within).is_some()
    }

    /// How metadata flushes stand, for health reports.
    pub fn flush_state(&self) -> FlushState {
        let now = self.clock.now();
        let since = |a: &std::sync::atomic::AtomicU64| {
            now.saturating_sub(Duration::from_nanos(a.load(Ordering::Relaxed)))
        };
        let meta_dirty = self.meta_dirty.load(Ordering::Acquire);
        FlushState {
            since_meta_flush: since(&self.meta_flushed_at),
            dirty_for: if meta_dirty {
                since(&self.meta_dirty_at)
            } else {
                Duration::ZERO
            },
            meta_dirty,
            last_failed: self.flush_failed.load(Ordering::Relaxed),
        }
    }

    /// Flush, then record a clean shutdown: the shadows stay trusted at the
    /// next open. The last call on a volume; any write after it would need
    /// another `close`.
    pub fn close(&self) -> VolumeResult<()> {
        self.flush()?;
        let _serial = self.flush_lock.lock();
        self.store.put(super::CLEAN_KEY, b"1")?;
        self.store.flush()?;
        Ok(())
    }

    /// Sync every device written since its last sync.
    fn sync_dirty(&self) -> VolumeResult<()> {
        for tier in Tier::ALL {
            if self.dirty[tier.index()].swap(false, Ordering::AcqRel) {
                let dev = self.devices.get(tier);
                if let Err(e) = dev.sync() {
                    self.dirty[tier.index()].store(true, Ordering::Release);
                    return Err(io_err(dev.as_ref())(e));
                }
            }
        }
        Ok(())
    }

    /// Data first, then the metadata that points at it. A foreground write
    /// records its new mapping under the metadata gate, after its data
    /// write: the store is flushed under the gate held exclusively, and
    /// only once no data write landed since the last sync (else the sync
    /// runs again, the third time under the gate). So no record reaches
    /// the disk ahead of the data it points at, even for a write that ran
    /// while the sync did.
    fn flush_inner(&self, force_meta: bool) -> VolumeResult<()> {
        let dirty = || self.dirty.iter().any(|d| d.load(Ordering::Acquire));
        let mut attempt = 0;
        let _gate = loop {
            self.sync_dirty()?;
            let gate = self.meta_gate.write();
            if !dirty() {
                break gate;
            }
            attempt += 1;
            if attempt >= 2 {
                self.sync_dirty()?;
                break gate;
            }
        };
        // Under the gate: every write that took these has its record in
        // the store now.
        let lost_written = self.lost_written_take();
        if self.meta_dirty.swap(false, Ordering::AcqRel) || force_meta {
            if let Err(e) = self.store.flush() {
                self.mark_meta_dirty();
                self.lost_written_flushed(lost_written, false)?;
                return Err(e.into());
            }
            self.meta_flushed_at
                .store(self.clock.now().as_nanos() as u64, Ordering::Relaxed);
        }
        self.lost_written_flushed(lost_written, true)
    }
}

/// How metadata flushes stand ([`Volume::flush_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushState {
    /// Time since the metadata store was last flushed (or the volume opened).
    pub since_meta_flush: Duration,
    /// Metadata changed since that flush.
    pub meta_dirty: bool,
    /// How long it has been dirty (zero when clean).
    pub dirty_for: Duration,
    /// The latest flush failed.
    pub last_failed: bool,
}

/// The partial blocks at the two ends of `len` bytes at `start` (inside an
/// extent), as byte ranges: the head up to the first block boundary and
/// the tail from the last one; a range is empty where the end is aligned
/// (and the tail is empty when the head takes a range inside one block).
fn partial_ends(start: u64, len: u64) -> [(u64, u64); 2] {
    let end = start + len;
    let head_end = end.min(start.div_ceil(BLOCK_SIZE) * BLOCK_SIZE);
    let tail_start = head_end.max(end / BLOCK_SIZE * BLOCK_SIZE);
    [(start, head_end), (tail_start, end)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_doubles_its_evictions_up_to_the_cap_and_a_pause_starts_over() {
        let run = EvictRun::default();
        let ms = Duration::from_millis;
        let got: Vec<usize> = (0..6).map(|i| run.next(ms(100 * i), 256)).collect();
        assert_eq!(got, [16, 32, 64, 128, 256, 256]);
        // A second without one ends the burst.
        assert_eq!(run.next(ms(500 + 1000), 256), 16);
        assert_eq!(run.next(ms(1600), 256), 32);
        // A reserve smaller than the first batch still takes the first.
        let small = EvictRun::default();
        assert_eq!(small.next(ms(0), 4), 16);
        assert_eq!(small.next(ms(1), 4), 16);
    }
}
