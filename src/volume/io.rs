//! The volume's read paths and allocation status, split per extent and
//! served under that extent's lock, and what the write paths (`write`) and
//! space management (`space`) share with them: request pieces, the
//! in-flight count, where each block's newest data is.
//!
//! Locking: plain I/O to blocks that already hold data takes the extent's
//! read lock, so requests to one extent run in parallel. Anything that
//! changes the extent's mapping or written-block bitmap (first write to a
//! block, allocation, discard) takes the write lock, so the zero padding of a
//! partly written 4 KiB block never races another write to that block.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use smallvec::SmallVec;

use super::extent::{LogPos, Logged, Mapping, Written};
use super::geometry::{Tier, BLOCK_SIZE};
use super::stats::Stats;
use super::{io_err, Volume, VolumeError, VolumeResult};
use crate::units::IoHint;

/// Counts a foreground request in progress for as long as it lives.
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    pub(crate) fn new(c: &'a AtomicUsize) -> Self {
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
///
/// It also holds the latency at which the HDD counts as busy with users
/// (`migrate.busy-latency`, pushed by the migrator; 0: never).
pub(crate) struct Latency {
    mean_us: AtomicU64,
    last_ms: AtomicU64,
    busy_us: AtomicU64,
    /// Since when (ms) the mean has stayed at the threshold or above
    /// (`u64::MAX`: it is below).
    busy_since_ms: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            mean_us: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            busy_us: AtomicU64::new(DEFAULT_BUSY.as_micros() as u64),
            busy_since_ms: AtomicU64::new(u64::MAX),
        }
    }
}

/// [`Latency`]'s busy threshold until the migrator sets one: the default
/// `migrate.busy-latency`.
const DEFAULT_BUSY: Duration = Duration::from_millis(100);

impl Latency {
    /// A read took `took`, ending at `now`. A sample more than `fresh`
    /// after the one before starts the busy run over: the reads in between
    /// were none, so the HDD did not stay queued ([`Latency::busy_for`]).
    pub(crate) fn sample(&self, took: Duration, now: Duration, fresh: Duration) {
        let us = took.as_micros().min(u128::from(u32::MAX)) as u64;
        let old = self.mean_us.load(Ordering::Relaxed);
        let new = if old == 0 { us } else { old - old / 8 + us / 8 };
        self.mean_us.store(new.max(1), Ordering::Relaxed);
        let now_ms = now.as_millis() as u64;
        let before = self.last_ms.swap(now_ms, Ordering::Relaxed);
        let gap = now_ms.saturating_sub(before) > fresh.as_millis() as u64;
        let busy = self.busy_us.load(Ordering::Relaxed);
        if busy > 0 && new >= busy {
            if gap {
                self.busy_since_ms.store(now_ms, Ordering::Relaxed);
            } else {
                let _ = self.busy_since_ms.compare_exchange(
                    u64::MAX,
                    now_ms,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        } else {
            self.busy_since_ms.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// How long the mean has stayed at the busy threshold or above, as of
    /// `now` (zero unless [`Latency::busy`]).
    pub(crate) fn busy_for(&self, now: Duration, fresh: Duration) -> Duration {
        let since = self.busy_since_ms.load(Ordering::Relaxed);
        if since == u64::MAX || !self.busy(now, fresh) {
            return Duration::ZERO;
        }
        now.saturating_sub(Duration::from_millis(since))
    }

    /// The mean, unless the last sample is older than `fresh` at `now`.
    pub(crate) fn get(&self, now: Duration, fresh: Duration) -> Option<Duration> {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        let mean = self.mean_us.load(Ordering::Relaxed);
        (mean > 0 && now.saturating_sub(last) <= fresh).then(|| Duration::from_micros(mean))
    }

    /// Set the busy threshold (zero: the HDD never counts as busy).
    pub(crate) fn set_busy(&self, d: Duration) {
        self.busy_us.store(
            d.as_micros().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
    }

    /// Whether the mean, fresh within `fresh` at `now`, is at the busy
    /// threshold or above it.
    pub(crate) fn busy(&self, now: Duration, fresh: Duration) -> bool {
        let busy = self.busy_us.load(Ordering::Relaxed);
        busy > 0
            && self
                .get(now, fresh)
                .is_some_and(|m| m >= Duration::from_micros(busy))
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
pub(crate) struct Piece {
    /// Logical extent index.
    pub(crate) extent: u64,
    /// Offset inside the extent.
    pub(crate) start: u64,
    /// Bytes.
    pub(crate) len: u64,
    /// Offset inside the request.
    pub(crate) at: u64,
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

    pub(crate) fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> {
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

    pub(crate) fn slot_lock(&self, extent: u64) -> super::map::ExtentLock<'_> {
        // Callers only pass extents of checked ranges.
        self.map.at(extent)
    }

    /// Read `buf.len()` bytes at `offset`. Unmapped space and unwritten
    /// blocks read as zeros without touching a device.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> VolumeResult<()> {
        self.read_hinted(offset, buf, IoHint::default())
    }

    /// [`Volume::read`] with the protocol layer's stream hint (for heat).
    pub fn read_hinted(&self, offset: u64, buf: &mut [u8], hint: IoHint) -> VolumeResult<()> {
        answered(self.read_into(offset, buf, hint, &mut Wait::Always))
    }

    /// [`Volume::read_hinted`] that goes down once: served without
    /// waiting where nothing has to wait; where something would (an
    /// extent being changed, data not in the page cache), `before_wait` is
    /// called first, once, and the read waits from there on, recording
    /// nothing twice. The NBD server's short reads come this way: it hands
    /// its socket to another thread in `before_wait`.
    pub fn read_or_wait(
        &self,
        offset: u64,
        buf: &mut [u8],
        hint: IoHint,
        before_wait: &mut dyn FnMut(),
    ) -> VolumeResult<()> {
        answered(self.read_into(offset, buf, hint, &mut Wait::After(before_wait)))
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
        self.read_into(offset, buf, hint, &mut Wait::Never)
    }

    /// Zero-copy read: move the `len` bytes at `offset` into `pipe` without
    /// copying them, when they are one contiguous range of a device that
    /// can splice ([`BlockDevice::read_to_pipe`]): inside one extent, every
    /// block written and none of them in the write log. Heat and counters
    /// are recorded as by [`Volume::read_hinted`]. `None` when that is not
    /// so (or the range is invalid): nothing was done, and the caller reads
    /// the usual way. On `Some(Err)` the pipe may hold part of the data.
    ///
    /// The extent's read lock is held while the pages are taken, so they
    /// are the extent's; a slot that later changes owner is forgotten first
    /// ([`Volume::take_slot`]), so they stay the extent's data for as long
    /// as the pipe's reader needs them.
    ///
    /// [`BlockDevice::read_to_pipe`]: crate::device::BlockDevice::read_to_pipe
    pub fn read_to_pipe(
        &self,
        offset: u64,
        len: u64,
        hint: IoHint,
        pipe: BorrowedFd<'_>,
    ) -> Option<VolumeResult<()>> {
        if len == 0 || self.check(offset, len).is_err() {
            return None;
        }
        let p = self.pieces(offset, len).next()?;
        if p.len != len {
            return None;
        }
        let _inflight = InFlight::new(&self.inflight);
        let guard = self.slot_lock(p.extent).read();
        let m = guard.as_ref()?;
        if !matches!(m.written, Written::Full) || !m.logged.is_empty() {
            return None;
        }
        let tier = m.loc.tier;
        let dev = self.devices.get(tier);
        let at = self.geo.slot_offset(m.loc.slot) + p.start;
        // Only HDD reads feed the migrator's backoff (as in `read_into`).
        let t0 = (tier == Tier::Hdd).then(|| self.clock.io_now());
        let reading = t0.and_then(|_| self.hdd_user_read());
        let r = dev.read_to_pipe(pipe, at, len as usize)?;
        drop(reading);
        drop(guard);
        let i = tier.index();
        if let Err(e) = r {
            Stats::add(&self.stats.dev_errors[i], 1);
            return Some(Err(io_err(dev.as_ref())(e)));
        }
        if let Some(io0) = t0 {
            self.sample_hdd_read(io0);
        }
        self.heat.record(offset, len, hint);
        if tier == Tier::Ssd {
            self.ledger.ssd_read();
        }
        if tier == Tier::Ssd && self.admission_enabled() {
            self.note_hit(p.extent);
        } else if tier == Tier::Hdd {
            if let Some(kind) = self.admission_notes(hint) {
                self.note_miss(p.extent, kind);
            }
        }
        Stats::add(&self.stats.read_hits[i], 1);
        Stats::add(&self.stats.read_hit_bytes[i], len);
        Stats::add(&self.stats.dev_reads[i], 1);
        Stats::add(&self.stats.dev_read_bytes[i], len);
        Stats::add(&self.stats.spliced_reads, 1);
        Stats::add(&self.stats.spliced_read_bytes, len);
        Some(Ok(()))
    }

    /// The read path of [`Volume::read_hinted`] ([`Wait::Always`]),
    /// [`Volume::read_nowait`] ([`Wait::Never`]) and
    /// [`Volume::read_or_wait`] ([`Wait::After`]): unmapped space and
    /// unwritten blocks read as zeros without touching a device. `None`
    /// means some part would have waited and `wait` is `Never`. Heat and
    /// counters are recorded only for a read that completed, and once.
    fn read_into(
        &self,
        offset: u64,
        buf: &mut [u8],
        hint: IoHint,
        wait: &mut Wait<'_>,
    ) -> Option<VolumeResult<()>> {
        if let Err(e) = self.check(offset, buf.len() as u64) {
            return Some(Err(e));
        }
        let _inflight = InFlight::new(&self.inflight);
        let (mut hits, mut ops, mut bytes, mut unmapped) = ([0u64; 2], [0u64; 2], [0u64; 2], 0u64);
        let (mut hit_bytes, mut unmapped_bytes) = ([0u64; 2], 0u64);
        // The extents this read found on the SSD and missed on the HDD,
        // recorded once it is done (a read that gives up records nothing).
        let (hits_on, misses_on) = (self.admission_enabled(), self.admission_notes(hint));
        let mut ssd_hits: SmallVec<[u64; 4]> = SmallVec::new();
        let mut misses: SmallVec<[u64; 4]> = SmallVec::new();
        for p in self.pieces(offset, buf.len() as u64) {
            let dst = &mut buf[p.at as usize..(p.at + p.len) as usize];
            let guard = if wait.waits() {
                self.slot_lock(p.extent).read()
            } else {
                match self.slot_lock(p.extent).try_read() {
                    Some(g) => g,
                    None if wait.start() => self.slot_lock(p.extent).read(),
                    None => return None,
                }
            };
            let Some(m) = guard.as_ref() else {
                let (first, last) = block_span(p.start, p.len);
                if let Err(e) = self.check_lost(p.extent, first, last) {
                    return Some(Err(e));
                }
                unmapped += 1;
                unmapped_bytes += p.len;
                dst.fill(0);
                continue;
            };
            let t = m.loc.tier.index();
            hits[t] += 1;
            if m.loc.tier == Tier::Ssd {
                ssd_hits.push(p.extent);
            } else if misses_on.is_some() && !matches!(wait, Wait::Never) {
                // Noted at the end if the read waited.
                misses.push(p.extent);
            }
            let mut read = |part: &mut [u8], tier: Tier, at: u64| -> Option<VolumeResult<()>> {
                let dev = self.devices.get(tier);
                let at_once = if wait.waits() {
                    None
                } else {
                    match dev.read_at_nowait(part, at) {
                        Some(r) => Some(r),
                        None if wait.start() => None,
                        None => return None,
                    }
                };
                let r = match at_once {
                    Some(r) => r,
                    None => {
                        // Only HDD reads that wait feed the migrator's backoff.
                        let timed = tier == Tier::Hdd;
                        let io0 = if timed {
                            self.clock.io_now()
                        } else {
                            Duration::ZERO
                        };
                        let reading = if timed { self.hdd_user_read() } else { None };
                        let r = dev.read_at(part, at);
                        drop(reading);
                        if timed {
                            self.sample_hdd_read(io0);
                        }
                        r
                    }
                };
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
                    // The SSD failed: its clean HDD copy, if it has one.
                    let (first, last) = block_span(p.start, p.len);
                    match self.hdd_copy_of(m, first, last) {
                        Some(copy) => {
                            if let Err(e) = read(dst, Tier::Hdd, copy + p.start)? {
                                return Some(Err(e));
                            }
                            Stats::add(&self.stats.read_from_copy, 1);
                        }
                        None => return Some(Err(e)),
                    }
                }
                hit_bytes[t] += p.len;
                continue;
            }
            let (first, last) = block_span(p.start, p.len);
            let parts: Vec<Logged> = m
                .logged
                .iter()
                .filter(|l| !l.is_whole() && (first..=last).contains(&l.block))
                .copied()
                .collect();
            for run in self.block_runs(m, first, last) {
                let lo = (u64::from(run.first) * BLOCK_SIZE).max(p.start);
                let hi = (u64::from(run.first + run.count) * BLOCK_SIZE).min(p.start + p.len);
                let part = &mut dst[(lo - p.start) as usize..(hi - p.start) as usize];
                // Bytes count for the tier that served them: a block in the
                // write log was read from the SSD, whatever the extent's home.
                hit_bytes[run.src.map_or(t, |(tier, _)| tier.index())] += part.len() as u64;
                match run.src {
                    None => {
                        if let Err(e) =
                            self.check_lost(p.extent, run.first, run.first + run.count - 1)
                        {
                            return Some(Err(e));
                        }
                        part.fill(0)
                    }
                    Some((tier, at)) => {
                        let skip = lo - u64::from(run.first) * BLOCK_SIZE;
                        if let Err(e) = read(part, tier, at + skip)? {
                            // The SSD failed: its clean HDD copy, if it
                            // has one (a block in the write log has none).
                            let copy = (tier == Tier::Ssd && m.loc.tier == Tier::Ssd)
                                .then(|| self.hdd_copy_of(m, run.first, run.first + run.count - 1))
                                .flatten();
                            let Some(copy) = copy else {
                                return Some(Err(e));
                            };
                            if let Err(e) = read(part, Tier::Hdd, copy + lo)? {
                                return Some(Err(e));
                            }
                            Stats::add(&self.stats.read_from_copy, 1);
                        }
                    }
                }
            }
            // Blocks logged in part: their sectors in the log over what the
            // HDD slot gave.
            for l in parts {
                let base = u64::from(l.block) * BLOCK_SIZE;
                for (s0, s1) in l.sector_runs() {
                    let lo = (base + s0).max(p.start);
                    let hi = (base + s1).min(p.start + p.len);
                    if lo >= hi {
                        continue;
                    }
                    let part = &mut dst[(lo - p.start) as usize..(hi - p.start) as usize];
                    if let Err(e) = read(part, Tier::Ssd, self.log_offset(l.at) + (lo - base))? {
                        return Some(Err(e));
                    }
                    let n = part.len() as u64;
                    hit_bytes[Tier::Hdd.index()] -= n;
                    hit_bytes[Tier::Ssd.index()] += n;
                }
            }
        }
        self.heat.record(offset, buf.len() as u64, hint);
        for t in 0..2 {
            Stats::add(&self.stats.read_hits[t], hits[t]);
            Stats::add(&self.stats.read_hit_bytes[t], hit_bytes[t]);
            Stats::add(&self.stats.dev_reads[t], ops[t]);
            Stats::add(&self.stats.dev_read_bytes[t], bytes[t]);
        }
        Stats::add(&self.stats.read_unmapped, unmapped);
        Stats::add(&self.stats.read_unmapped_bytes, unmapped_bytes);
        for e in ssd_hits {
            self.ledger.ssd_read();
            if hits_on {
                self.note_hit(e);
            }
        }
        if let Some(kind) = misses_on.filter(|_| wait.waits()) {
            for e in misses {
                self.note_miss(e, kind);
            }
        }
        Some(Ok(()))
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
            let (first, last) = block_span(p.start, p.len);
            // Blocks as (first, count, holds data); lost blocks are said to
            // hold data (never a hole or zeros: a reader must not skip them).
            let spans: Vec<(u32, u32, bool)> = match guard.as_ref() {
                None => vec![(first, last - first + 1, false)],
                Some(m) => m.written.runs(first, last),
            };
            let mapped = guard.is_some();
            drop(guard);
            for (b, n, written) in spans {
                let mut pieces = Vec::new();
                if written {
                    pieces.push((b, n, true));
                } else {
                    let mut at = b;
                    for (lb, ln) in self.lost_in(p.extent, b, b + n - 1) {
                        if lb > at {
                            pieces.push((at, lb - at, false));
                        }
                        pieces.push((lb, ln, true));
                        at = lb + ln;
                    }
                    if at < b + n {
                        pieces.push((at, b + n - at, false));
                    }
                }
                for (pb, pn, data) in pieces {
                    let lo = (u64::from(pb) * BLOCK_SIZE).max(p.start);
                    let hi = (u64::from(pb + pn) * BLOCK_SIZE).min(p.start + p.len);
                    let hole = !mapped && !data;
                    if !push(&mut runs, hi - lo, hole, !data) {
                        break 'outer;
                    }
                }
            }
        }
        Ok(runs)
    }
}

/// When a read may wait for an extent's lock or a device.
enum Wait<'a> {
    /// Never: the read answers `None` where it would.
    Never,
    /// Whenever it needs to.
    Always,
    /// Not until it must; then the hook is called, once, and the read
    /// waits from there on ([`Volume::read_or_wait`]).
    After(&'a mut dyn FnMut()),
    /// An `After` read that has started to wait.
    Waited,
}

impl Wait<'_> {
    /// Whether the read waits without trying first.
    fn waits(&self) -> bool {
        matches!(self, Wait::Always | Wait::Waited)
    }

    /// The read must wait now: whether it may (the hook told first).
    fn start(&mut self) -> bool {
        match self {
            Wait::Never => return false,
            Wait::Always | Wait::Waited => return true,
            Wait::After(before) => before(),
        }
        *self = Wait::Waited;
        true
    }
}

/// What a read that may wait answered (it always answers).
fn answered(r: Option<VolumeResult<()>>) -> VolumeResult<()> {
    r.unwrap_or_else(|| {
        Err(VolumeError::Io {
            device: "volume".into(),
            source: std::io::Error::other("a blocking read gave no answer"),
        })
    })
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
    /// The HDD offset of the slot holding a clean copy of blocks
    /// `first..=last` of SSD extent `m` (its shadow, none of them stale),
    /// for reads the SSD fails; `None` when it has no such copy.
    pub(crate) fn hdd_copy_of(&self, m: &Mapping, first: u32, last: u32) -> Option<u64> {
        if m.loc.tier != Tier::Ssd {
            return None;
        }
        let shadow = m.shadow.as_ref()?;
        (first..=last)
            .all(|b| !shadow.stale.get(b))
            .then(|| self.geo.slot_offset(shadow.slot))
    }

    /// Where the newest data of block `b` of mapping `m` is (tier, device
    /// offset), if it is written.
    /// A block logged in part reads from its HDD slot, with the log's
    /// sectors laid over it ([`Volume::overlay_logged`]).
    pub(crate) fn block_source(&self, m: &Mapping, b: u32) -> Option<(Tier, u64)> {
        if let Some(l) = m.logged_entry(b) {
            if l.is_whole() {
                return Some((Tier::Ssd, self.log_offset(l.at)));
            }
        }
        m.written.get(b).then(|| {
            (
                m.loc.tier,
                self.geo.slot_offset(m.loc.slot) + u64::from(b) * BLOCK_SIZE,
            )
        })
    }

    /// Lay the sectors block `b` of `m` holds in the log (if it is logged
    /// in part) over `out`, the block's 4 KiB as its HDD slot gave them.
    pub(crate) fn overlay_logged(&self, m: &Mapping, b: u32, out: &mut [u8]) -> VolumeResult<()> {
        let Some(l) = m.logged_entry(b).filter(|l| !l.is_whole()) else {
            return Ok(());
        };
        let dev = self.devices.get(Tier::Ssd);
        for (s0, s1) in l.sector_runs() {
            let part = &mut out[s0 as usize..s1 as usize];
            dev.read_at(part, self.log_offset(l.at) + s0).map_err(|e| {
                Stats::add(&self.stats.dev_errors[Tier::Ssd.index()], 1);
                io_err(dev.as_ref())(e)
            })?;
            Stats::add(&self.stats.dev_reads[Tier::Ssd.index()], 1);
            Stats::add(&self.stats.dev_read_bytes[Tier::Ssd.index()], s1 - s0);
        }
        Ok(())
    }

    /// The sectors block `b` of `m` holds in the log when it is logged in
    /// part: `(start, end, device offset)` runs, `start..end` inside the
    /// block, to lay over its HDD data.
    pub(crate) fn logged_sectors(&self, m: &Mapping, b: u32) -> Vec<(u64, u64, u64)> {
        match m.logged_entry(b) {
            Some(l) if !l.is_whole() => l
                .sector_runs()
                .into_iter()
                .map(|(s0, s1)| (s0, s1, self.log_offset(l.at) + s0))
                .collect(),
            _ => Vec::new(),
        }
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
pub(crate) fn block_span(start: u64, len: u64) -> (u32, u32) {
    (
        (start / BLOCK_SIZE) as u32,
        ((start + len - 1) / BLOCK_SIZE) as u32,
    )
}

#[cfg(test)]
mod latency_tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn busy_at_the_threshold_while_fresh_never_at_zero() {
        let l = Latency::default();
        let fresh = Duration::from_secs(1);
        assert!(!l.busy(Duration::ZERO, fresh), "no sample yet");
        l.sample(150 * MS, 1000 * MS, fresh);
        assert!(
            l.busy(1500 * MS, fresh),
            "150 ms against the 100 ms default"
        );
        assert!(!l.busy(2001 * MS, fresh), "the sample is stale");
        l.set_busy(200 * MS);
        assert!(!l.busy(1500 * MS, fresh), "below a raised threshold");
        l.set_busy(150 * MS);
        assert!(l.busy(1500 * MS, fresh), "at the threshold");
        l.set_busy(Duration::ZERO);
        assert!(!l.busy(1500 * MS, fresh), "zero: never busy");
        // The mean moves an eighth of the way per sample.
        l.set_busy(100 * MS);
        l.sample(10 * MS, 1600 * MS, fresh);
        assert_eq!(
            l.get(1600 * MS, fresh),
            Some(Duration::from_micros(132_500))
        );
        for _ in 0..10 {
            l.sample(10 * MS, 1600 * MS, fresh);
        }
        assert!(!l.busy(1600 * MS, fresh), "fast reads bring it down");
    }

    #[test]
    fn busy_for_counts_from_the_first_busy_sample_and_restarts_after_a_break() {
        let l = Latency::default();
        let fresh = Duration::from_secs(1);
        let s = |ms: u64| Duration::from_millis(ms);
        l.sample(s(500), s(1000), fresh);
        assert_eq!(l.busy_for(s(1000), fresh), Duration::ZERO);
        l.sample(s(500), s(1800), fresh);
        assert_eq!(l.busy_for(s(2500), fresh), s(1500));
        // Stale: not busy now, so not for any time.
        assert_eq!(l.busy_for(s(3000), fresh), Duration::ZERO);
        // A break (the mean falls below the threshold) starts it over.
        for t in 0..30 {
            l.sample(s(1), s(4000 + t), fresh);
        }
        assert!(!l.busy(s(4030), fresh));
        for t in 0..30 {
            l.sample(s(900), s(5000 + t), fresh);
        }
        let since = l.busy_for(s(6000), fresh);
        assert!(since > s(970) && since <= s(1000), "{since:?}");
        // A gap with no reads at all is a break too: a slow read long
        // after the last one starts the run over, though the mean never
        // fell below the threshold.
        l.sample(s(900), s(60_000), fresh);
        assert!(l.busy(s(60_000), fresh));
        assert_eq!(l.busy_for(s(60_500), fresh), s(500));
    }
}
