//! Moving extents between tiers with a crash-safe copy protocol.
//!
//! The copy protocol for one extent, from slot A to a new slot B:
//! 1. allocate B on the destination tier;
//! 2. copy the extent's written blocks A → B, paced, without holding the
//!    extent's lock (foreground I/O keeps going to A);
//! 3. make B durable (sync the destination device);
//! 4. under the extent's write lock, if no write, zero or trim touched the
//!    extent since step 2 began (its generation is unchanged), point the
//!    mapping at B and record it in the metadata store — otherwise give B
//!    back and start again (a bounded number of times);
//! 5. flush, which makes the new mapping durable;
//! 6. only then free A.
//!
//! [`Volume::migrate_batch`] runs the same protocol for many extents at once
//! (one destination sync, one flush, copies of neighbouring slots merged into
//! one large read and write) so a migrating HDD streams instead of seeking.
//!
//! A crash before step 5 completes leaves the durable mapping at A, which
//! still holds the latest acknowledged data; after it, at B, which does. B is
//! never referenced durably before it holds the data, and A is never reused
//! before nothing durable refers to it.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::extent::{Loc, Written};
use super::failpoint::{self, stopped, MoveStep};
use super::geometry::{Tier, BLOCK_SIZE};
use super::stats::Stats;
use super::{io_err, Volume, VolumeError, VolumeResult};
use crate::units::Reason;

/// Bytes copied per device I/O during a migration.
const COPY_CHUNK: u64 = 1 << 20;
/// Most bytes one merged copy reads at once (neighbouring slots).
pub const MERGE_MAX: u64 = 4 << 20;
/// Attempts before a migration racing foreground writes gives up.
const ATTEMPTS: usize = 3;

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
pub(crate) struct Item {
    pub(crate) extent: u64,
    reason: Reason,
    src: Loc,
    dst: Loc,
    written: Written,
    /// Its generation when the copy began.
    gen: u32,
}

impl Volume {
    /// Move one extent to tier `to` with the crash-safe copy protocol,
    /// retrying a few times if foreground writes keep changing it.
    /// `pace(bytes)` is called before each copy (it may sleep).
    /// With the `failpoints` feature, [`Volume::arm_crash_after`] makes the
    /// next call stop after a step, as a crash would.
    pub fn migrate_extent(
        &self,
        extent: u64,
        to: Tier,
        reason: Reason,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<MoveOutcome> {
        let crash = self.failpoint.take();
        for _ in 0..ATTEMPTS {
            let out = self.migrate_inner(&[(extent, reason)], to, pace, crash)?;
            match out.first() {
                Some((_, MoveOutcome::Raced)) => continue,
                Some((_, o)) => return Ok(*o),
                None => return Ok(MoveOutcome::Skipped),
            }
        }
        Ok(MoveOutcome::Raced)
    }

    /// Move many extents to tier `to` in one pass of the copy protocol: every
    /// copy, one sync of the destination, every commit, one flush, then the
    /// sources are freed. Copies between neighbouring source and destination
    /// slots are merged. An extent a foreground write changed meanwhile is
    /// left in place (`Raced`; a later round retries). A device or store
    /// error fails the extents not yet committed. Failpoints as for
    /// [`Volume::migrate_extent`].
    pub fn migrate_batch(
        &self,
        extents: &[(u64, Reason)],
        to: Tier,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
        let crash = self.failpoint.take();
        self.migrate_inner(extents, to, pace, crash)
    }

    fn migrate_inner(
        &self,
        extents: &[(u64, Reason)],
        to: Tier,
        pace: &mut dyn FnMut(u64),
        crash: failpoint::Armed,
    ) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
        let stop = |s: MoveStep| crash.hits(s);
        let mut out = Vec::with_capacity(extents.len());
        // 1. Snapshot each extent and take destination slots.
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
        if items.is_empty() {
            return Ok(out);
        }
        if stop(MoveStep::Allocated) {
            return Ok(stopped(out, items.iter(), MoveStep::Allocated));
        }
        // 2. Copy, without the extents' locks.
        let mut copied = vec![0u64; items.len()];
        if let Err(e) = self.copy_items(&items, &mut copied, pace) {
            self.free_dsts(&items);
            Stats::add(&self.stats.migration_errors, items.len() as u64);
            return Err(e);
        }
        if stop(MoveStep::Copied) {
            return Ok(stopped(out, items.iter(), MoveStep::Copied));
        }
        // 3. Make the copies durable.
        let dev = self.devices.get(to);
        if let Err(e) = dev.sync() {
            self.free_dsts(&items);
            Stats::add(&self.stats.migration_errors, items.len() as u64);
            Stats::add(&self.stats.dev_errors[to.index()], 1);
            return Err(io_err(dev.as_ref())(e));
        }
        if stop(MoveStep::Synced) {
            return Ok(stopped(out, items.iter(), MoveStep::Synced));
        }
        // 4. Commit each mapping unless a foreground write changed it.
        let mut committed: Vec<(usize, &Item)> = Vec::with_capacity(items.len());
        let mut failure = None;
        for (k, it) in items.iter().enumerate() {
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
                    committed.push((k, it));
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
        if stop(MoveStep::Committed) {
            return Ok(stopped(
                out,
                committed.iter().map(|(_, i)| *i),
                MoveStep::Committed,
            ));
        }
        // 5. Make the new mappings durable.
        if let Err(e) = self.flush() {
            // The new mappings are live but not yet durable: the sources may
            // be reused only after a later flush succeeds.
            for (_, it) in &committed {
                self.alloc.free_deferred(it.src);
            }
            Stats::add(&self.stats.migration_errors, committed.len() as u64);
            return Err(e);
        }
        if stop(MoveStep::Flushed) {
            return Ok(stopped(
                out,
                committed.iter().map(|(_, i)| *i),
                MoveStep::Flushed,
            ));
        }
        // 6. Free the sources.
        let at = self.clock.unix_secs();
        let mut moves = self.moves.lock();
        for (k, it) in &committed {
            self.alloc.free_now(it.src);
            self.stats.migrated(to, it.reason, copied[*k]);
            moves.insert(
                it.extent,
                MoveRecord {
                    at,
                    from: it.src.tier,
                    to,
                    reason: it.reason,
                },
            );
            out.push((it.extent, MoveOutcome::Moved(copied[*k])));
        }
        drop(moves);
        match failure {
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
