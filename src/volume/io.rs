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

use super::extent::{Loc, LogPos, Logged, Mapping, Written};
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
            let mut read = |part: &mut [u8], tier: Tier, at: u64| -> Option<VolumeResult<()>> {
                let dev = self.devices.get(tier);
                let timed = wait && tier == Tier::Hdd;
                let t0 = if timed {
                    self.clock.now()
                } else {
                    Duration::ZERO
                };
                let r = if wait {
                    dev.read_at(part, at)
                } else {
                    dev.read_at_nowait(part, at)?
                };
                if timed {
                    let t1 = self.clock.now();
                    self.hdd_latency.sample(t1.saturating_sub(t0), t1);
                }
                let i = tier.index();
                if let Err(e) = r {
                    Stats::add(&self.stats.dev_errors[i], 1);
                    return Some(Err(io_err(dev.as_ref())(e)));
                }
                ops[i] += 1;
                bytes[i] += part.len() as u64;
                Some(Ok(()))
            };
            if matches!(m.written, Written::Full) && m.logged.is_empty() {
                let at = self.geo.slot_offset(m.loc.slot) + p.start;
                if let Err(e) = read(dst, m.loc.tier, at)? {
                    return Some(Err(e));
                }
                continue;
            }
            let (first, last) = block_span(p.start, p.len);
            for run in self.block_runs(m, first, last) {
                let lo = (u64::from(run.first) * BLOCK_SIZE).max(p.start);
                let hi = (u64::from(run.first + run.count) * BLOCK_SIZE).min(p.start + p.len);
                let part = &mut dst[(lo - p.start) as usize..(hi - p.start) as usize];
                match run.src {
                    None => part.fill(0),
                    Some((tier, at)) => {
                        let skip = lo - u64::from(run.first) * BLOCK_SIZE;
                        if let Err(e) = read(part, tier, at + skip)? {
                            return Some(Err(e));
                        }
                    }
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
    /// already hold data in place (no allocation, no metadata change, no
    /// FUA) whose device write goes straight into the page cache. `None`:
    /// take the blocking path (nothing was written).
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
        if !self.writes_in_place(p.extent, m, first, last, hint) {
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

    /// Whether a write to blocks `first..=last` of `m` goes to its slot with
    /// no change of the mapping: every block written there, none newer in
    /// the log, a shadow already stale there, and not a write the log takes.
    fn writes_in_place(
        &self,
        extent: u64,
        m: &Mapping,
        first: u32,
        last: u32,
        hint: IoHint,
    ) -> bool {
        m.written.all(first, last)
            && m.logged.is_empty()
            && m.shadow.as_ref().is_none_or(|s| s.stale.all(first, last))
            && !(m.loc.tier == Tier::Hdd && self.wants_log(extent, hint))
    }

    /// Whether a write to an HDD extent should land in the SSD write log: the
    /// log is on and may have room, the extent is not pinned to the HDD, and
    /// the write is not part of a long sequential stream (those go to the
    /// HDD at its streaming speed and keep the log for random writes).
    fn wants_log(&self, extent: u64, hint: IoHint) -> bool {
        self.log_enabled.load(Ordering::Relaxed)
            && !self.heat.is_sequential(hint)
            && self.log.may_take(&self.alloc)
            && self.pin_of(extent) != Some(Tier::Hdd)
    }

    /// Write `data` at `offset`; with `fua`, durable before returning.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> VolumeResult<()> {
        self.write_hinted(offset, data, fua, IoHint::default())
    }

    /// [`Volume::write`] with the protocol layer's stream hint (for heat and
    /// the write log).
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
            self.write_piece(p, &data[p.at as usize..(p.at + p.len) as usize], hint)?;
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn write_piece(&self, p: Piece, data: &[u8], hint: IoHint) -> VolumeResult<()> {
        let (first, last) = block_span(p.start, p.len);
        {
            // Fast paths under the shared lock: every block already holds
            // data where this write goes, so the mapping does not change.
            let guard = self.slot_lock(p.extent).read();
            if let Some(m) = guard.as_ref() {
                if self.writes_in_place(p.extent, m, first, last, hint) {
                    return self.shared_write(p.extent, || self.device_write(m.loc, p.start, data));
                }
                let places: Option<Vec<(Tier, u64)>> = (first..=last)
                    .map(|b| m.logged_at(b).map(|at| (Tier::Ssd, self.log_offset(at))))
                    .collect();
                if let Some(places) = places {
                    return self.shared_write(p.extent, || {
                        self.write_blocks(&places, first, p.start, data)
                    });
                }
            }
        }
        let mut guard = self.slot_lock(p.extent).write();
        self.bump(p.extent);
        let Some(m) = guard.take() else {
            let loc = self.allocate(p.extent)?;
            let m = Mapping::plain(loc, Written::empty(self.geo.blocks_per_extent()));
            return self.write_locked(&mut guard, p, data, m, true);
        };
        if m.loc.tier == Tier::Hdd {
            let use_log = self.wants_log(p.extent, hint);
            return self.write_logged(&mut guard, p, data, m, use_log);
        }
        self.write_locked(&mut guard, p, data, m, false)
    }

    /// Read the newest data of block `b` of `m` into `out` (4 KiB), or zeros.
    fn read_block(&self, m: &Mapping, b: u32, out: &mut [u8]) -> VolumeResult<()> {
        match self.block_source(m, b) {
            None => {
                out.fill(0);
                Ok(())
            }
            Some((tier, at)) => {
                let dev = self.devices.get(tier);
                dev.read_at(out, at).map_err(|e| {
                    Stats::add(&self.stats.dev_errors[tier.index()], 1);
                    io_err(dev.as_ref())(e)
                })?;
                Stats::add(&self.stats.dev_reads[tier.index()], 1);
                Stats::add(&self.stats.dev_read_bytes[tier.index()], out.len() as u64);
                Ok(())
            }
        }
    }

    /// `data` (at `start` in the extent) widened to whole blocks
    /// `first..=last`, the partial head and tail blocks filled with their
    /// current content (`keep(b)`: the destination already holds it, no
    /// need to read), or `None` when `data` is block aligned.
    fn widen(
        &self,
        m: &Mapping,
        start: u64,
        data: &[u8],
        keep: impl Fn(u32) -> bool,
    ) -> VolumeResult<Option<(u64, Vec<u8>)>> {
        let end = start + data.len() as u64;
        let (first, last) = block_span(start, data.len() as u64);
        let head = !start.is_multiple_of(BLOCK_SIZE) && !keep(first);
        let tail = !end.is_multiple_of(BLOCK_SIZE) && !keep(last);
        if !head && !tail {
            return Ok(None);
        }
        let lo = if head {
            u64::from(first) * BLOCK_SIZE
        } else {
            start
        };
        let hi = if tail {
            u64::from(last + 1) * BLOCK_SIZE
        } else {
            end
        };
        let mut buf = vec![0u8; (hi - lo) as usize];
        if head {
            self.read_block(m, first, &mut buf[..BLOCK_SIZE as usize])?;
        }
        if tail && !(head && first == last) {
            let n = buf.len();
            self.read_block(m, last, &mut buf[n - BLOCK_SIZE as usize..])?;
        }
        buf[(start - lo) as usize..(end - lo) as usize].copy_from_slice(data);
        Ok(Some((lo, buf)))
    }

    /// A write under the extent's write lock into the extent's own slot
    /// (`fresh`: just allocated), for an extent with nothing in the log (an
    /// SSD extent or a new one). Blocks written for the first time are
    /// padded with zeros so their unwritten bytes keep reading as zeros; a
    /// shadow is marked stale there.
    fn write_locked(
        &self,
        guard: &mut Option<Mapping>,
        p: Piece,
        data: &[u8],
        mut m: Mapping,
        fresh: bool,
    ) -> VolumeResult<()> {
        let (first, last) = block_span(p.start, p.len);
        let blocks = self.geo.blocks_per_extent();
        let in_slot = |b: u32| m.written.get(b);
        let result = match self.widen(&m, p.start, data, in_slot) {
            Ok(None) => self.device_write(m.loc, p.start, data),
            Ok(Some((lo, buf))) => self.device_write(m.loc, lo, &buf),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            if fresh {
                self.alloc.free_now(m.loc);
            } else {
                *guard = Some(m);
            }
            return Err(e);
        }
        let before = m.clone();
        m.written.set_range(first, last, true, blocks);
        if let Some(s) = m.shadow.as_mut() {
            s.stale.set_range(first, last, true, blocks);
        }
        if m == before && !fresh {
            *guard = Some(m);
            return Ok(());
        }
        if let Err(e) = self.store.put_extent(p.extent, &m.encode()) {
            if fresh {
                self.alloc.free_now(m.loc);
            } else {
                *guard = Some(before);
            }
            return Err(e.into());
        }
        self.meta_dirty.store(true, Ordering::Release);
        *guard = Some(m);
        Ok(())
    }

    /// A write to an HDD extent under its write lock. Blocks already in the
    /// SSD write log are written there; with `use_log` the others take a new
    /// log place while the log has one; the rest go to the HDD in place.
    /// The HDD copy of a logged block is written by write-back alone, so a
    /// write-back copy never races a foreground write into the same place.
    /// Partial blocks are merged with their current content.
    fn write_logged(
        &self,
        guard: &mut Option<Mapping>,
        p: Piece,
        data: &[u8],
        mut m: Mapping,
        use_log: bool,
    ) -> VolumeResult<()> {
        let (first, last) = block_span(p.start, p.len);
        let mut targets = Vec::with_capacity((last - first + 1) as usize);
        let mut taken = Vec::new();
        let mut full = false;
        for b in first..=last {
            let at = match m.logged_at(b) {
                Some(at) => Some(at),
                None if use_log && !full => {
                    let got = self.log.acquire(&self.alloc);
                    full = got.is_none();
                    taken.extend(got);
                    got
                }
                None => None,
            };
            targets.push(at);
        }
        if full {
            Stats::add(&self.stats.log_full, 1);
        }
        let give_back = |taken: &[LogPos]| {
            for at in taken {
                self.log.release_now(*at, &self.alloc);
            }
        };
        let base = self.geo.slot_offset(m.loc.slot);
        let devs: Vec<(Tier, u64)> = (first..=last)
            .zip(&targets)
            .map(|(b, t)| match t {
                Some(at) => (Tier::Ssd, self.log_offset(*at)),
                None => (Tier::Hdd, base + u64::from(b) * BLOCK_SIZE),
            })
            .collect();
        let keep = |b: u32| match targets[(b - first) as usize] {
            Some(_) => m.logged_at(b).is_some(),
            None => m.written.get(b),
        };
        let result = match self.widen(&m, p.start, data, keep) {
            Ok(None) => self.write_blocks(&devs, first, p.start, data),
            Ok(Some((lo, buf))) => self.write_blocks(&devs, first, lo, &buf),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            give_back(&taken);
            *guard = Some(m);
            return Err(e);
        }
        let before = m.clone();
        let blocks = self.geo.blocks_per_extent();
        m.written.set_range(first, last, true, blocks);
        for (b, at) in (first..=last).zip(targets.iter()) {
            if let Some(at) = at {
                if let Err(i) = m.logged.binary_search_by_key(&b, |l| l.block) {
                    m.logged.insert(i, Logged { block: b, at: *at });
                }
            }
        }
        if m == before {
            *guard = Some(m);
            return Ok(());
        }
        if let Err(e) = self.store.put_extent(p.extent, &m.encode()) {
            give_back(&taken);
            *guard = Some(before);
            return Err(e.into());
        }
        self.meta_dirty.store(true, Ordering::Release);
        if !taken.is_empty() {
            Stats::add(&self.stats.log_writes, 1);
            Stats::add(&self.stats.log_write_bytes, data.len() as u64);
        }
        *guard = Some(m);
        Ok(())
    }

    /// Write `data`, which starts at byte `at` of the extent inside block
    /// `first`, to blocks `first..` at the device places `devs` (one per
    /// block), one device write per run of neighbouring places.
    fn write_blocks(
        &self,
        devs: &[(Tier, u64)],
        first: u32,
        at: u64,
        data: &[u8],
    ) -> VolumeResult<()> {
        let end = at + data.len() as u64;
        let mut k = 0;
        while k < devs.len() {
            let mut n = 1;
            while k + n < devs.len()
                && devs[k + n].0 == devs[k].0
                && devs[k + n].1 == devs[k].1 + n as u64 * BLOCK_SIZE
            {
                n += 1;
            }
            let b0 = u64::from(first) + k as u64;
            let lo = (b0 * BLOCK_SIZE).max(at);
            let hi = ((b0 + n as u64) * BLOCK_SIZE).min(end);
            let dev_at = devs[k].1 + (lo - b0 * BLOCK_SIZE);
            self.raw_write(
                devs[k].0,
                dev_at,
                &data[(lo - at) as usize..(hi - at) as usize],
            )?;
            k += n;
        }
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
        self.raw_write(loc.tier, self.geo.slot_offset(loc.slot) + start, data)
    }

    /// Write `data` at device offset `at` of a tier, counted.
    fn raw_write(&self, tier: Tier, at: u64, data: &[u8]) -> VolumeResult<()> {
        let dev = self.devices.get(tier);
        let i = tier.index();
        if let Err(e) = dev.write_at(data, at) {
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
    /// extent pinned to the HDD starts there. With no free slot, slots
    /// waiting for a flush are freed by one, and then shadows are dropped:
    /// their slots belong to the capacity, never lost to it.
    fn allocate(&self, extent: u64) -> VolumeResult<Loc> {
        let order = match self.pin_of(extent) {
            Some(Tier::Hdd) => [Tier::Hdd, Tier::Ssd],
            _ => [Tier::Ssd, Tier::Hdd],
        };
        let mut got = self.alloc.alloc(&order);
        if got.is_none() && (self.alloc.quarantined() > 0 || self.log.quarantined() > 0) {
            // Freed slots become reusable once their unmapping is durable.
            self.flush()?;
            got = self.alloc.alloc(&order);
        }
        if got.is_none() && self.drop_shadows(1, Some(extent))? > 0 {
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

    /// Drop up to `max` shadows (the HDD copies SSD extents keep), coolest
    /// extents' last (they are the likeliest to be demoted, which a shadow
    /// makes free), skipping `except` and any extent busy right now. Their
    /// slots are free after the next flush. Returns how many were dropped.
    pub fn drop_shadows(&self, max: usize, except: Option<u64>) -> VolumeResult<usize> {
        if max == 0 {
            return Ok(0);
        }
        let mut with: Vec<(f32, u64)> = self
            .map
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i as u64) != except)
            .filter_map(|(i, e)| {
                let g = e.try_read()?;
                g.as_ref()?.shadow.as_ref()?;
                Some((self.heat.score(i as u64), i as u64))
            })
            .collect();
        with.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut dropped = 0;
        for (_, extent) in with {
            if dropped == max {
                break;
            }
            let Some(mut guard) = self.map[extent as usize].try_write() else {
                continue;
            };
            let Some(m) = guard.as_mut() else { continue };
            let Some(s) = m.shadow.take() else { continue };
            if let Err(e) = self.store.put_extent(extent, &m.encode()) {
                m.shadow = Some(s);
                return Err(e.into());
            }
            self.bump(extent);
            self.meta_dirty.store(true, Ordering::Release);
            self.alloc.free_deferred(Loc {
                tier: Tier::Hdd,
                slot: s.slot,
            });
            Stats::add(&self.stats.shadows_dropped, 1);
            dropped += 1;
        }
        Ok(dropped)
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
        let before = m.clone();
        let mut dropped = Vec::new();
        if !whole || keep_allocated {
            let end = p.start + p.len;
            let full_first = p.start.div_ceil(BLOCK_SIZE);
            let full_end = end / BLOCK_SIZE;
            let head_end = end.min(full_first * BLOCK_SIZE);
            let tail_start = head_end.max(full_end * BLOCK_SIZE);
            for (lo, hi) in [(p.start, head_end), (tail_start, end)] {
                let block = (lo / BLOCK_SIZE) as u32;
                if !(zero && lo < hi) {
                    continue;
                }
                let zeros = vec![0u8; (hi - lo) as usize];
                // The zeros go where the block's newest data is.
                let r = match (m.logged_at(block), m.written.get(block)) {
                    (Some(at), _) => {
                        self.raw_write(Tier::Ssd, self.log_offset(at) + lo % BLOCK_SIZE, &zeros)
                    }
                    (None, true) => {
                        if let Some(s) = m.shadow.as_mut() {
                            s.stale.set_range(block, block, true, blocks);
                        }
                        self.device_write(m.loc, lo, &zeros)
                    }
                    (None, false) => Ok(()),
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
        self.meta_dirty.store(true, Ordering::Release);
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
        self.alloc.settle(quarantine, result.is_ok());
        self.log.settle(places, result.is_ok(), &self.alloc);
        result
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

/// Blocks `first..first + count` of an extent, whose newest data is
/// contiguous at one device offset (`src`), or reads as zeros (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: u32,
    pub(crate) count: u32,
    pub(crate) src: Option<(Tier, u64)>,
}

impl Volume {
    /// Where the newest data of block `b` of mapping `m` is (tier, device
    /// offset), if it is written.
    pub(crate) fn block_source(&self, m: &Mapping, b: u32) -> Option<(Tier, u64)> {
        if let Some(at) = m.logged_at(b) {
            return Some((Tier::Ssd, self.log_offset(at)));
        }
        m.written.get(b).then(|| {
            (
                m.loc.tier,
                self.geo.slot_offset(m.loc.slot) + u64::from(b) * BLOCK_SIZE,
            )
        })
    }

    /// Device offset of a log place.
    pub(crate) fn log_offset(&self, at: LogPos) -> u64 {
        self.geo.slot_offset(at.slot) + u64::from(at.index) * BLOCK_SIZE
    }

    /// Blocks `first..=last` of `m` in maximal runs with one contiguous
    /// source each.
    pub(crate) fn block_runs(&self, m: &Mapping, first: u32, last: u32) -> Vec<Run> {
        let mut out: Vec<Run> = Vec::new();
        for b in first..=last {
            let src = self.block_source(m, b);
            if let Some(r) = out.last_mut() {
                let next = match (r.src, src) {
                    (None, None) => true,
                    (Some((t0, a0)), Some((t1, a1))) => {
                        t0 == t1 && a0 + u64::from(r.count) * BLOCK_SIZE == a1
                    }
                    _ => false,
                };
                if next {
                    r.count += 1;
                    continue;
                }
            }
            out.push(Run {
                first: b,
                count: 1,
                src,
            });
        }
        out
    }
}

/// First and last block touched by `len > 0` bytes at `start`.
fn block_span(start: u64, len: u64) -> (u32, u32) {
    (
        (start / BLOCK_SIZE) as u32,
        ((start + len - 1) / BLOCK_SIZE) as u32,
    )
}
