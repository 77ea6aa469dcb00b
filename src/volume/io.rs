//! The volume's I/O paths: read, write, discard/zero, flush and allocation
//! status, split per extent and served under that extent's lock.
//!
//! Locking: plain I/O to blocks that already hold data takes the extent's
//! read lock, so requests to one extent run in parallel. Anything that
//! changes the extent's mapping or written-block bitmap (first write to a
//! block, allocation, discard) takes the write lock, so the zero padding of a
//! partly written 4 KiB block never races another write to that block.

use std::sync::atomic::Ordering;

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use super::extent::{Loc, Mapping, Written};
use super::geometry::{Tier, BLOCK_SIZE};
use super::stats::Stats;
use super::{io_err, Volume, VolumeError, VolumeResult};
use crate::units::IoHint;

/// Counts a foreground request in progress for as long as it lives.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn new(c: &'a AtomicUsize) -> Self {
        c.fetch_add(1, Ordering::Relaxed);
        InFlight(c)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A smoothed latency of foreground HDD reads, for the migrator's backoff:
/// an exponentially weighted mean (weight 1/8 per sample) in microseconds
/// and the time of the last sample. Updated with relaxed atomics; a lost
/// update between two racing samples only makes the mean a little older.
#[derive(Default)]
pub(crate) struct Latency {
    mean_us: AtomicU64,
    last_ms: AtomicU64,
}

impl Latency {
    fn sample(&self, took: Duration, now: Duration) {
        let us = took.as_micros().min(u128::from(u32::MAX)) as u64;
        let old = self.mean_us.load(Ordering::Relaxed);
        let new = if old == 0 { us } else { old - old / 8 + us / 8 };
        self.mean_us.store(new.max(1), Ordering::Relaxed);
        self.last_ms
            .store(now.as_millis() as u64, Ordering::Relaxed);
    }

    /// The mean, unless the last sample is older than `fresh` at `now`.
    pub(crate) fn get(&self, now: Duration, fresh: Duration) -> Option<Duration> {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let mean = self.mean_us.load(Ordering::Relaxed);
        (mean > 0 && now.saturating_sub(last) <= fresh).then(|| Duration::from_micros(mean))
    }
}

/// One run of an allocation-status answer ([`Volume::block_status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocRun {
    /// Length of the run in bytes (never 0).
    pub len: u64,
    /// The run is not allocated (no slot holds it).
    pub hole: bool,
    /// The run reads as zeros.
    pub zero: bool,
}

/// One extent's share of a request.
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// Logical extent index.
    extent: u64,
    /// Offset inside the extent.
    start: u64,
    /// Bytes.
    len: u64,
    /// Offset inside the request.
    at: u64,
}

impl Volume {
    pub(crate) fn check(&self, offset: u64, len: u64) -> VolumeResult<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size() => Ok(()),
            _ => Err(VolumeError::OutOfRange {
                offset,
                len,
                size: self.size(),
            }),
        }
    }

    fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> {
        let es = self.geo.extent_size;
        let end = offset + len;
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let start = pos % es;
            let n = (es - start).min(end - pos);
            let p = Piece {
                extent: pos / es,
                start,
                len: n,
                at: pos - offset,
            };
            pos += n;
            Some(p)
        })
    }

    fn slot_lock(&self, extent: u64) -> &parking_lot::RwLock<Option<Mapping>> {
        // Callers only pass extents of checked ranges.
        &self.map[extent as usize]
    }

    /// Read `buf.len()` bytes at `offset`. Unmapped space and unwritten
    /// blocks read as zeros without touching a device.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> VolumeResult<()> {
        self.read_hinted(offset, buf, IoHint::default())
    }

    /// [`Volume::read`] with the protocol layer's stream hint (for heat).
    pub fn read_hinted(&self, offset: u64, buf: &mut [u8], hint: IoHint) -> VolumeResult<()> {
        // With waiting allowed the shared path always answers.
        self.read_into(offset, buf, hint, true).unwrap_or_else(|| {
            Err(VolumeError::Io {
                device: "volume".into(),
                source: std::io::Error::other("a blocking read gave no answer"),
            })
        })
    }

    /// [`Volume::read_hinted`] without waiting: `None` when any part would
    /// wait (an extent being changed, data not in the page cache); nothing
    /// is then recorded and the caller takes the blocking path. Lets the NBD
    /// server answer cached reads on its own thread, without a hand-off.
    pub fn read_nowait(
        &self,
        offset: u64,
        buf: &mut [u8],
        hint: IoHint,
    ) -> Option<VolumeResult<()>> {
        self.read_into(offset, buf, hint, false)
    }

    /// The read path of both [`Volume::read_hinted`] (`wait`) and
    /// [`Volume::read_nowait`]: unmapped space and unwritten blocks read as
    /// zeros without touching a device. Without `wait`, `None` means some
    /// part would have waited. Heat and counters are recorded only for a
    /// read that completed.
    fn read_into(
        &self,
        offset: u64,
        buf: &mut [u8],
        hint: IoHint,
        wait: bool,
    ) -> Option<VolumeResult<()>> {
        if let Err(e) = self.check(offset, buf.len() as u64) {
            return Some(Err(e));
        }
        let _inflight = InFlight::new(&self.inflight);
        let (mut hits, mut ops, mut bytes, mut unmapped) = ([0u64; 2], [0u64; 2], [0u64; 2], 0u64);
        for p in self.pieces(offset, buf.len() as u64) {
            let dst = &mut buf[p.at as usize..(p.at + p.len) as usize];
            let lock = self.slot_lock(p.extent);
            let guard = if wait { lock.read() } else { lock.try_read()? };
            let Some(m) = guard.as_ref() else {
                unmapped += 1;
                dst.fill(0);
                continue;
            };
            let t = m.loc.tier.index();
            hits[t] += 1;
            let dev = self.devices.get(m.loc.tier);
            let base = self.geo.slot_offset(m.loc.slot);
            let timed = wait && m.loc.tier == Tier::Hdd;
            let mut read = |part: &mut [u8], at: u64| -> Option<VolumeResult<()>> {
                let t0 = if timed {
                    self.clock.now()
                } else {
                    Duration::ZERO
                };
                let r = if wait {
                    dev.read_at(part, base + at)
                } else {
                    dev.read_at_nowait(part, base + at)?
                };
                if timed {
                    let t1 = self.clock.now();
                    self.hdd_latency.sample(t1.saturating_sub(t0), t1);
                }
                if let Err(e) = r {
                    Stats::add(&self.stats.dev_errors[t], 1);
                    return Some(Err(io_err(dev.as_ref())(e)));
                }
                ops[t] += 1;
                bytes[t] += part.len() as u64;
                Some(Ok(()))
            };
            if let Written::Full = m.written {
                if let Err(e) = read(dst, p.start)? {
                    return Some(Err(e));
                }
                continue;
            }
            let (first, last) = block_span(p.start, p.len);
            for (b, n, written) in m.written.runs(first, last) {
                let lo = (u64::from(b) * BLOCK_SIZE).max(p.start);
                let hi = (u64::from(b + n) * BLOCK_SIZE).min(p.start + p.len);
                let part = &mut dst[(lo - p.start) as usize..(hi - p.start) as usize];
                if !written {
                    part.fill(0);
                } else if let Err(e) = read(part, lo)? {
                    return Some(Err(e));
                }
            }
        }
        self.heat.record(offset, buf.len() as u64, hint);
        for t in 0..2 {
            Stats::add(&self.stats.read_hits[t], hits[t]);
            Stats::add(&self.stats.dev_reads[t], ops[t]);
            Stats::add(&self.stats.dev_read_bytes[t], bytes[t]);
        }
        Stats::add(&self.stats.read_unmapped, unmapped);
        Some(Ok(()))
    }

    /// [`Volume::write_hinted`] without waiting, for writes into blocks that
    /// already hold data (no allocation, no metadata change, no FUA) whose
    /// device write goes straight into the page cache. `None`: take the
    /// blocking path (nothing was written).
    pub fn write_nowait(&self, offset: u64, data: &[u8], hint: IoHint) -> Option<VolumeResult<()>> {
        if let Err(e) = self.check(offset, data.len() as u64) {
            return Some(Err(e));
        }
        // One extent only: a multi-extent write could stop half done.
        let mut pieces = self.pieces(offset, data.len() as u64);
        let p = pieces.next()?;
        if pieces.next().is_some() {
            return None;
        }
        let _inflight = InFlight::new(&self.inflight);
        let (first, last) = block_span(p.start, p.len);
        let guard = self.slot_lock(p.extent).try_read()?;
        let m = guard.as_ref()?;
        if !m.written.all(first, last) {
            return None;
        }
        let dev = self.devices.get(m.loc.tier);
        let i = m.loc.tier.index();
        let r = self.shared_write(p.extent, || {
            dev.write_at_nowait(data, self.geo.slot_offset(m.loc.slot) + p.start)
        })?;
        if let Err(e) = r {
            Stats::add(&self.stats.dev_errors[i], 1);
            return Some(Err(io_err(dev.as_ref())(e)));
        }
        Stats::add(&self.stats.dev_writes[i], 1);
        Stats::add(&self.stats.dev_write_bytes[i], data.len() as u64);
        self.dirty[i].store(true, Ordering::Release);
        drop(guard);
        self.heat.record(offset, data.len() as u64, hint);
        Some(Ok(()))
    }

    /// Write `data` at `offset`; with `fua`, durable before returning.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> VolumeResult<()> {
        self.write_hinted(offset, data, fua, IoHint::default())
    }

    /// [`Volume::write`] with the protocol layer's stream hint (for heat).
    pub fn write_hinted(
        &self,
        offset: u64,
        data: &[u8],
        fua: bool,
        hint: IoHint,
    ) -> VolumeResult<()> {
        self.check(offset, data.len() as u64)?;
        let _inflight = InFlight::new(&self.inflight);
        self.heat.record(offset, data.len() as u64, hint);
        for p in self.pieces(offset, data.len() as u64) {
            self.write_piece(p, &data[p.at as usize..(p.at + p.len) as usize])?;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn write_piece(&self, p: Piece, data: &[u8]) -> VolumeResult<()> {
        let (first, last) = block_span(p.start, p.len);
        {
            // Fast path: every block already holds data.
            let guard = self.slot_lock(p.extent).read();
            if let Some(m) = guard.as_ref() {
                if m.written.all(first, last) {
                    return self.shared_write(p.extent, || self.device_write(m.loc, p.start, data));
                }
            }
        }
        let mut guard = self.slot_lock(p.extent).write();
        self.bump(p.extent);
        let (mut m, fresh) = match guard.take() {
            Some(m) => (m, false),
            None => {
                let loc = self.allocate(p.extent)?;
                let written = Written::empty(self.geo.blocks_per_extent());
                (Mapping { loc, written }, true)
            }
        };
        // Blocks written for the first time are padded with zeros so their
        // unwritten bytes keep reading as zeros.
        let end = p.start + p.len;
        let head = if m.written.get(first) {
            0
        } else {
            p.start % BLOCK_SIZE
        };
        let tail = if m.written.get(last) || end.is_multiple_of(BLOCK_SIZE) {
            0
        } else {
            BLOCK_SIZE - end % BLOCK_SIZE
        };
        let result = if head == 0 && tail == 0 {
            self.device_write(m.loc, p.start, data)
        } else {
            let mut buf = vec![0u8; (head + p.len + tail) as usize];
            buf[head as usize..(head + p.len) as usize].copy_from_slice(data);
            self.device_write(m.loc, p.start - head, &buf)
        };
        if let Err(e) = result {
            if fresh {
                self.alloc.free_now(m.loc);
            } else {
                *guard = Some(m);
            }
            return Err(e);
        }
        if m.written.all(first, last) {
            *guard = Some(m);
            return Ok(());
        }
        let before = m.written.clone();
        m.written
            .set_range(first, last, true, self.geo.blocks_per_extent());
        if let Err(e) = self.store.put_extent(p.extent, &m.encode()) {
            if fresh {
                self.alloc.free_now(m.loc);
            } else {
                m.written = before;
                *guard = Some(m);
            }
            return Err(e.into());
        }
        self.meta_dirty.store(true, Ordering::Release);
        *guard = Some(m);
        Ok(())
    }

    /// A data write under the extent's *read* lock (`write`), with the
    /// extent's generation bumped before and after it. Before: a migration
    /// copying the extent sees the change and does not commit a stale copy.
    /// After, still under the lock: a migration takes its snapshot under a
    /// read lock too, so it may have read the generation between the first
    /// bump and the data write, then copied the block before the write
    /// reached it; the second bump fails its commit.
    fn shared_write<T>(&self, extent: u64, write: impl FnOnce() -> T) -> T {
        self.bump(extent);
        let r = write();
        self.bump(extent);
        r
    }

    fn bump(&self, extent: u64) {
        if let Some(g) = self.gens.get(extent as usize) {
            g.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn device_write(&self, loc: Loc, start: u64, data: &[u8]) -> VolumeResult<()> {
        let dev = self.devices.get(loc.tier);
        let i = loc.tier.index();
        if let Err(e) = dev.write_at(data, self.geo.slot_offset(loc.slot) + start) {
            Stats::add(&self.stats.dev_errors[i], 1);
            return Err(io_err(dev.as_ref())(e));
        }
        Stats::add(&self.stats.dev_writes[i], 1);
        Stats::add(&self.stats.dev_write_bytes[i], data.len() as u64);
        self.dirty[i].store(true, Ordering::Release);
        Ok(())
    }

    /// A free slot for a new extent: on the SSD while it has one (the
    /// reserve exists to take exactly these writes), else on the HDD; an
    /// extent pinned to the HDD starts there.
    fn allocate(&self, extent: u64) -> VolumeResult<Loc> {
        let order = match self.pin_of(extent) {
            Some(Tier::Hdd) => [Tier::Hdd, Tier::Ssd],
            _ => [Tier::Ssd, Tier::Hdd],
        };
        let mut got = self.alloc.alloc(&order);
        if got.is_none() && self.alloc.quarantined() > 0 {
            // Freed slots become reusable once their unmapping is durable.
            self.flush()?;
            got = self.alloc.alloc(&order);
        }
        let loc = got.ok_or(VolumeError::NoSpace)?;
        Stats::add(&self.stats.allocations[loc.tier.index()], 1);
        if loc.tier == Tier::Hdd && order[0] == Tier::Ssd {
            Stats::add(&self.stats.spills, 1);
        }
        Ok(loc)
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
        let _inflight = InFlight::new(&self.inflight);
        for p in self.pieces(offset, len) {
            self.discard_piece(p, zero, keep_allocated)?;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn discard_piece(&self, p: Piece, zero: bool, keep_allocated: bool) -> VolumeResult<()> {
        let mut guard = self.slot_lock(p.extent).write();
        let Some(mut m) = guard.take() else {
            return Ok(());
        };
        self.bump(p.extent);
        let whole = p.len == self.geo.extent_size;
        let blocks = self.geo.blocks_per_extent();
        let before = m.written.clone();
        if !whole || keep_allocated {
            let end = p.start + p.len;
            let full_first = p.start.div_ceil(BLOCK_SIZE);
            let full_end = end / BLOCK_SIZE;
            let head_end = end.min(full_first * BLOCK_SIZE);
            let tail_start = head_end.max(full_end * BLOCK_SIZE);
            for (lo, hi) in [(p.start, head_end), (tail_start, end)] {
                let block = (lo / BLOCK_SIZE) as u32;
                if zero && lo < hi && m.written.get(block) {
                    let zeros = vec![0u8; (hi - lo) as usize];
                    if let Err(e) = self.device_write(m.loc, lo, &zeros) {
                        *guard = Some(m);
                        return Err(e);
                    }
                }
            }
            if full_first < full_end {
                m.written
                    .set_range(full_first as u32, (full_end - 1) as u32, false, blocks);
            }
        }
        let unmap = !keep_allocated && (whole || m.written.is_empty());
        let stored = if unmap {
            self.store.remove_extent(p.extent)
        } else if m.written != before {
            self.store.put_extent(p.extent, &m.encode())
        } else {
            *guard = Some(m);
            return Ok(());
        };
        if let Err(e) = stored {
            m.written = before;
            *guard = Some(m);
            return Err(e.into());
        }
        self.meta_dirty.store(true, Ordering::Release);
        if unmap {
            self.alloc.free_deferred(m.loc);
            self.heat.clear(p.extent);
        } else {
            *guard = Some(m);
        }
        Ok(())
    }

    /// Make every acknowledged write durable: data on both devices first,
    /// then the metadata that points at it. Slots freed before the flush
    /// become reusable after it.
    pub fn flush(&self) -> VolumeResult<()> {
        let _serial = self.flush_lock.lock();
        let quarantine = self.alloc.take_quarantine();
        let result = self.flush_inner(!quarantine.is_empty());
        self.alloc.settle(quarantine, result.is_ok());
        result
    }

    fn flush_inner(&self, force_meta: bool) -> VolumeResult<()> {
        for tier in Tier::ALL {
            if self.dirty[tier.index()].swap(false, Ordering::AcqRel) {
                let dev = self.devices.get(tier);
                if let Err(e) = dev.sync() {
                    self.dirty[tier.index()].store(true, Ordering::Release);
                    return Err(io_err(dev.as_ref())(e));
                }
            }
        }
        if self.meta_dirty.swap(false, Ordering::AcqRel) || force_meta {
            if let Err(e) = self.store.flush() {
                self.meta_dirty.store(true, Ordering::Release);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Allocation runs from `offset`, covering at most `len` bytes in at most
    /// `max_runs` runs. Unmapped extents are holes reading as zeros; unwritten
    /// blocks of mapped extents read as zeros but are allocated.
    pub fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> VolumeResult<Vec<AllocRun>> {
        self.check(offset, len)?;
        let max_runs = max_runs.max(1);
        let mut runs: Vec<AllocRun> = Vec::new();
        let push = |runs: &mut Vec<AllocRun>, len: u64, hole: bool, zero: bool| -> bool {
            if let Some(r) = runs.last_mut() {
                if r.hole == hole && r.zero == zero {
                    r.len += len;
                    return true;
                }
            }
            if runs.len() == max_runs {
                return false;
            }
            runs.push(AllocRun { len, hole, zero });
            true
        };
        'outer: for p in self.pieces(offset, len) {
            let guard = self.slot_lock(p.extent).read();
            match guard.as_ref() {
                None => {
                    if !push(&mut runs, p.len, true, true) {
                        break;
                    }
                }
                Some(m) => {
                    let (first, last) = block_span(p.start, p.len);
                    for (b, n, written) in m.written.runs(first, last) {
                        let lo = (u64::from(b) * BLOCK_SIZE).max(p.start);
                        let hi = (u64::from(b + n) * BLOCK_SIZE).min(p.start + p.len);
                        if !push(&mut runs, hi - lo, false, !written) {
                            break 'outer;
                        }
                    }
                }
            }
        }
        Ok(runs)
    }
}

/// First and last block touched by `len > 0` bytes at `start`.
fn block_span(start: u64, len: u64) -> (u32, u32) {
    (
        (start / BLOCK_SIZE) as u32,
        ((start + len - 1) / BLOCK_SIZE) as u32,
    )
}
