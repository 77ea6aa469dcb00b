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
use super::extent::{Loc, Written};
use super::geometry::{Tier, BLOCK_SIZE};
use super::stats::Stats;
use super::{Volume, VolumeError, VolumeResult};
use crate::units::Reason;

/// Bytes copied per device I/O during a migration.
const COPY_CHUNK: u64 = 1 << 20;
/// Most bytes one merged copy reads at once (neighbouring slots).
pub const MERGE_MAX: u64 = 4 << 20;

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

/// One extent of a migration in progress.
struct Item {
    extent: u64,
    reason: Reason,
    src: Loc,
    dst: Loc,
    written: Written,
    /// Its generation when the copy began.
    gen: u32,
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
    /// Step 1: snapshot each extent and take a destination slot on `to` for
    /// it. Extents with nothing to do, or no room, are answered at once.
    pub(crate) fn reserve_moves(
        &self,
        extents: &[(u64, Reason)],
        to: Tier,
    ) -> VolumeResult<(Reserved, Vec<(u64, MoveOutcome)>)> {
        let mut out = Vec::with_capacity(extents.len());
        let mut items: Vec<Item> = Vec::with_capacity(extents.len());
        for &(extent, reason) in extents {
            let (Some(lock), Some(gen)) = (
                self.map.get(extent as usize),
                self.gens.get(extent as usize),
            ) else {
                return Err(VolumeError::OutOfRange {
                    offset: extent.saturating_mul(self.geo.extent_size),
                    len: self.geo.extent_size,
                    size: self.size(),
                });
            };
            let guard = lock.read();
            match guard.as_ref() {
                None => out.push((extent, MoveOutcome::Skipped)),
                Some(m) if m.loc.tier == to => out.push((extent, MoveOutcome::Skipped)),
                Some(m) => items.push(Item {
                    extent,
                    reason,
                    src: m.loc,
                    dst: m.loc,
                    written: m.written.clone(),
                    gen: gen.load(Ordering::Acquire),
                }),
            }
        }
        items.sort_by_key(|i| (i.src.slot, i.extent));
        let mut dsts = Vec::with_capacity(items.len());
        while dsts.len() < items.len() {
            match self.alloc.alloc(&[to]) {
                Some(d) => dsts.push(d),
                None => break,
            }
        }
        for it in &items[dsts.len()..] {
            out.push((it.extent, MoveOutcome::NoRoom));
        }
        items.truncate(dsts.len());
        // Ascending destinations for ascending sources: both devices stream.
        dsts.sort_by_key(|d| d.slot);
        for (it, d) in items.iter_mut().zip(dsts) {
            it.dst = d;
        }
        Ok((Reserved { to, items }, out))
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
        if let Err(e) = dev.sync() {
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

    /// Step 4: commit each mapping unless a foreground write changed the
    /// extent since its snapshot (answered `Raced`, destination given back).
    /// A store error stops the commits there: the rest give their
    /// destinations back and the error is reported after step 6.
    pub(crate) fn commit_moves(&self, s: Synced) -> (Committed, Vec<(u64, MoveOutcome)>) {
        let mut out = Vec::new();
        let mut committed = Vec::with_capacity(s.items.len());
        let mut failure = None;
        for (it, copied) in s.items.into_iter().zip(s.copied) {
            if failure.is_some() {
                self.alloc.free_now(it.dst);
                continue;
            }
            let (lock, gen) = (
                &self.map[it.extent as usize],
                &self.gens[it.extent as usize],
            );
            let mut guard = lock.write();
            match guard.as_mut() {
                Some(m) if m.loc == it.src && gen.load(Ordering::Acquire) == it.gen => {
                    m.loc = it.dst;
                    if let Err(e) = self.store.put_extent(it.extent, &m.encode()) {
                        m.loc = it.src;
                        drop(guard);
                        self.alloc.free_now(it.dst);
                        Stats::add(&self.stats.migration_errors, 1);
                        failure = Some(VolumeError::from(e));
                        continue;
                    }
                    gen.fetch_add(1, Ordering::AcqRel);
                    drop(guard);
                    committed.push((it, copied));
                }
                _ => {
                    drop(guard);
                    self.alloc.free_now(it.dst);
                    Stats::add(&self.stats.migration_aborts, 1);
                    out.push((it.extent, MoveOutcome::Raced));
                }
            }
        }
        if !committed.is_empty() {
            self.meta_dirty.store(true, Ordering::Release);
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
    /// live but not yet durable: the sources are freed only after a later
    /// flush succeeds.
    pub(crate) fn flush_moves(&self, c: Committed) -> VolumeResult<Flushed> {
        if let Err(e) = self.flush() {
            for (it, _) in &c.items {
                self.alloc.free_deferred(it.src);
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

    /// Step 6: free the sources, count and record the moves. Returns the
    /// store error step 4 met, if any.
    pub(crate) fn release_moves(&self, f: Flushed) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
        let at = self.clock.unix_secs();
        let mut out = Vec::with_capacity(f.items.len());
        let mut moves = self.moves.lock();
        for (it, copied) in &f.items {
            self.alloc.free_now(it.src);
            self.stats.migrated(f.to, it.reason, *copied);
            moves.insert(
                it.extent,
                MoveRecord {
                    at,
                    from: it.src.tier,
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

    fn free_dsts(&self, items: &[Item]) {
        for it in items {
            self.alloc.free_now(it.dst);
        }
    }

    /// Copy every item's written blocks to its destination; runs of fully
    /// written extents in neighbouring slots on both tiers go as one read and
    /// one write of up to [`MERGE_MAX`] bytes.
    fn copy_items(
        &self,
        items: &[Item],
        copied: &mut [u64],
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        let es = self.geo.extent_size;
        let mut k = 0;
        while k < items.len() {
            let mut n = 1;
            if matches!(items[k].written, Written::Full) {
                while k + n < items.len()
                    && (n as u64 + 1) * es <= MERGE_MAX
                    && matches!(items[k + n].written, Written::Full)
                    && items[k + n].src.slot == items[k].src.slot + n as u32
                    && items[k + n].dst.slot == items[k].dst.slot + n as u32
                {
                    n += 1;
                }
            }
            if n == 1 {
                copied[k] = self.copy_slot(items[k].src, items[k].dst, &items[k].written, pace)?;
            } else {
                let len = n as u64 * es;
                pace(len);
                self.copy_range(items[k].src, items[k].dst, len)?;
                for c in &mut copied[k..k + n] {
                    *c = es;
                }
            }
            k += n;
        }
        Ok(())
    }

    /// Copy `len` bytes from slot `src` on to slot `dst` on, in one read and
    /// one write.
    fn copy_range(&self, src: Loc, dst: Loc, len: u64) -> VolumeResult<()> {
        let mut buf = vec![0u8; len as usize];
        self.copy_piece(src, dst, 0, &mut buf)?;
        self.dirty[dst.tier.index()].store(true, Ordering::Release);
        Ok(())
    }

    /// Copy the written blocks of slot `src` to slot `dst`.
    fn copy_slot(
        &self,
        src: Loc,
        dst: Loc,
        written: &Written,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<u64> {
        let mut buf = vec![0u8; COPY_CHUNK as usize];
        let mut copied = 0;
        let blocks = self.geo.blocks_per_extent();
        for (b, n, is_written) in written.runs(0, blocks - 1) {
            if !is_written {
                continue;
            }
            let (mut pos, end) = (u64::from(b) * BLOCK_SIZE, u64::from(b + n) * BLOCK_SIZE);
            while pos < end {
                let len = (end - pos).min(COPY_CHUNK);
                pace(len);
                self.copy_piece(src, dst, pos, &mut buf[..len as usize])?;
                pos += len;
                copied += len;
            }
        }
        self.dirty[dst.tier.index()].store(true, Ordering::Release);
        Ok(copied)
    }

    /// One device-to-device copy of `buf.len()` bytes at `at` into slot
    /// `src` and slot `dst`, through `buf`, counted.
    fn copy_piece(&self, src: Loc, dst: Loc, at: u64, buf: &mut [u8]) -> VolumeResult<()> {
        let (sdev, ddev) = (self.devices.get(src.tier), self.devices.get(dst.tier));
        sdev.read_at(buf, self.geo.slot_offset(src.slot) + at)
            .map_err(|e| {
                Stats::add(&self.stats.dev_errors[src.tier.index()], 1);
                io_err(sdev.as_ref())(e)
            })?;
        ddev.write_at(buf, self.geo.slot_offset(dst.slot) + at)
            .map_err(|e| {
                Stats::add(&self.stats.dev_errors[dst.tier.index()], 1);
                io_err(ddev.as_ref())(e)
            })?;
        let len = buf.len() as u64;
        Stats::add(&self.stats.dev_reads[src.tier.index()], 1);
        Stats::add(&self.stats.dev_read_bytes[src.tier.index()], len);
        Stats::add(&self.stats.dev_writes[dst.tier.index()], 1);
        Stats::add(&self.stats.dev_write_bytes[dst.tier.index()], len);
        Ok(())
    }
}
