//! The volume's write paths: in place under the extent's shared lock when
//! nothing about the mapping changes, else under its write lock — first
//! writes (zero padding of partial blocks), writes to HDD extents that land
//! in the SSD write log, and shadows marked stale.

use std::sync::atomic::Ordering;

use super::extent::{sectors_of, Loc, LogPos, Logged, Mapping, Written, ALL_SECTORS, SECTOR};
use super::geometry::{Tier, BLOCK_SIZE};
use super::io::{block_span, InFlight, Piece};
use super::stats::Stats;
use super::{io_err, Volume, VolumeResult};
use crate::units::IoHint;

/// SSD extents with clean shadows demoted at once when the write log needs
/// a segment and the SSD has no free slot: one flush buys this many.
const EVICT_BATCH: usize = 4;

impl Volume {
    /// A write-log place; a new segment is first detached from zero-copy
    /// reads of its slot's previous owner (if that fails, the log is full).
    fn log_place(&self) -> Option<LogPos> {
        self.log.acquire(&self.alloc, |slot| {
            match self.forget_slot(Tier::Ssd, slot) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("the write log cannot take a segment: {e}");
                    false
                }
            }
        })
    }

    /// [`Volume::write_hinted`] without waiting, for writes into blocks that
    /// already hold data in place (no allocation, no metadata change, no
    /// FUA) whose device write goes straight into the page cache. `None`:
    /// take the blocking path (nothing was written).
    pub fn write_nowait(&self, offset: u64, data: &[u8], hint: IoHint) -> Option<VolumeResult<()>> {
        if let Err(e) = self.check(offset, data.len() as u64) {
            return Some(Err(e));
        }
        if self.is_held(offset, data.len() as u64) {
            return None;
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
        let way = self.log_way(&p, m, hint);
        if !writes_in_place(m, first, last, way) || (way == LogWay::Full && self.log_pressing()) {
            // A full log while write-back runs beside users: the blocking
            // path may wait for room (it waits at no other time).
            return None;
        }
        let dev = self.devices.get(m.loc.tier);
        let i = m.loc.tier.index();
        let r = self.shared_write(p.extent, (first, last), || {
            dev.write_at_nowait(data, self.geo.slot_offset(m.loc.slot) + p.start)
        })?;
        if m.loc.tier == Tier::Hdd {
            self.hdd_foreground_now();
        }
        if let Err(e) = r {
            Stats::add(&self.stats.dev_errors[i], 1);
            return Some(Err(io_err(dev.as_ref())(e)));
        }
        Stats::add(&self.stats.dev_writes[i], 1);
        Stats::add(&self.stats.dev_write_bytes[i], data.len() as u64);
        Stats::add(&self.stats.write_landed_bytes[i], data.len() as u64);
        self.dirty[i].store(true, Ordering::Release);
        self.count_log_full(way);
        drop(guard);
        self.heat.record(offset, data.len() as u64, hint);
        Some(Ok(()))
    }

    /// What the write log does with a write to `m`, decided once per
    /// write: the log takes it (`Take`), would but has no room (`Full`), or
    /// it is none of the log's business (`No`: an SSD extent, the log off,
    /// a long sequential stream while the HDD can stream it — those go to
    /// the HDD at its streaming speed and keep the log for random writes;
    /// while users' reads queue on the HDD ([`Volume::hdd_congested`]) a
    /// stream's writes would wait in that queue and cost the reads a seek
    /// each way, so the log takes them and write-back sends them down in
    /// order later — an extent pinned to the HDD, or,
    /// when the log has room, a write covering part of a block whose data
    /// is on the HDD: logging it would first read the rest of the block off
    /// the HDD, two reads for a write neither edge of which is 4 KiB
    /// aligned, as Iometer's 512-byte-aligned 8 KiB writes are, slower than
    /// the write it saves).
    /// The cheap checks come first; the room check takes the log's lock.
    /// A stream's write that this leaves to the HDD is noted as one
    /// ([`Volume::hdd_stream_idle`]).
    fn log_way(&self, p: &Piece, m: &Mapping, hint: IoHint) -> LogWay {
        let way = self.log_way_quiet(p, m, hint);
        if way != LogWay::Take && m.loc.tier == Tier::Hdd && self.heat.is_sequential(hint) {
            self.hdd_stream_now();
        }
        way
    }

    /// [`Volume::log_way`] without noting a stream's write.
    pub(super) fn log_way_quiet(&self, p: &Piece, m: &Mapping, hint: IoHint) -> LogWay {
        let stream = m.loc.tier == Tier::Hdd && self.heat.is_sequential(hint);
        if m.loc.tier != Tier::Hdd
            || !self.log_enabled.load(Ordering::Relaxed)
            || self.evacuating() == Some(Tier::Ssd)
            || (stream && !self.hdd_congested())
            || self.pin_of(p.extent) == Some(Tier::Hdd)
        {
            LogWay::No
        } else if !self.log_room() {
            LogWay::Full
        } else if partial_on_hdd(m, p.start, p.len) {
            LogWay::No
        } else {
            LogWay::Take
        }
    }

    /// Whether the write log may find a place: a free one, room for a
    /// segment, or clean shadows to evict for one.
    pub(super) fn log_room(&self) -> bool {
        self.log.may_take(&self.alloc)
            || (self.log.may_grow() && self.clean_shadows.load(Ordering::Relaxed))
    }

    /// Count a write the write log would have taken but had no room for
    /// ([`Stats::log_full`]).
    fn count_log_full(&self, way: LogWay) {
        if way == LogWay::Full {
            Stats::add(&self.stats.log_full, 1);
        }
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
        if !data.is_empty() {
            self.wait_unheld(offset, data.len() as u64);
        }
        let _inflight = InFlight::new(&self.inflight);
        let mut logged = true;
        let notes = self.admission_notes(hint);
        for p in self.pieces(offset, data.len() as u64) {
            // Only while write-back runs beside users may room come: one
            // atomic load on every other write.
            if self.log_pressing() {
                self.await_log_room(&p, hint);
            }
            let wrote = self.write_piece(p, &data[p.at as usize..(p.at + p.len) as usize], hint)?;
            logged &= wrote == Wrote::Logged;
            // A write that found its extent on the HDD missed flash too:
            // admission brings the extent up (with what the log took). Not
            // one that allocated it there: new data lands on the HDD only
            // when the SSD has no free slot (`Volume::allocate`), nothing
            // of it was ever on flash to miss, and admitting it would evict
            // older data for it — one copy each way and two flushes per
            // spilled extent, for data nobody has read (a fill past the SSD
            // queued an admission for nearly every extent it wrote).
            if let Some(kind) = notes.filter(|_| {
                wrote != Wrote::Allocated
                    && self
                        .slot_lock(p.extent)
                        .try_read()
                        .is_some_and(|g| g.as_ref().is_some_and(|m| m.loc.tier == Tier::Hdd))
            }) {
                self.note_miss(p.extent, kind);
            }
        }
        // A write the SSD log took earns no heat: it needs no promotion to
        // run at flash speed (and promoting on write heat would put
        // migration copies in front of the very writes the log absorbs).
        // Reads of the extent still earn heat; writes elsewhere do.
        if !logged {
            self.heat.record(offset, data.len() as u64, hint);
        }
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    /// Write one extent's piece; what became of it ([`Wrote`]).
    fn write_piece(&self, p: Piece, data: &[u8], hint: IoHint) -> VolumeResult<Wrote> {
        let (first, last) = block_span(p.start, p.len);
        // Whether the blocks may be in an SSD extent's shadow still clean
        // (the only case `stale_first` acts on; it takes the write lock to
        // look, and a write to an HDD extent with logged blocks, every
        // write once a full log has left a few in each extent, paid that
        // lock for nothing). A mapping changed meanwhile takes the write
        // path below, which handles every case.
        let mut shadowed = true;
        {
            // Fast paths under the shared lock: every block already holds
            // data where this write goes, so the mapping does not change.
            let guard = self.slot_lock(p.extent).read();
            if let Some(m) = guard.as_ref() {
                shadowed = m.loc.tier == Tier::Ssd && m.shadow.is_some();
                let way = self.log_way(&p, m, hint);
                if writes_in_place(m, first, last, way) {
                    let t0 = (way == LogWay::Full).then(|| self.clock.io_now());
                    let r = self.shared_write(p.extent, (first, last), || {
                        self.device_write(m.loc, p.start, data)
                    });
                    if r.is_ok() {
                        self.count_log_full(way);
                        if let Some(t0) = t0 {
                            self.note_inplace_write(t0, self.clock.io_now());
                        }
                    }
                    return r.map(|()| Wrote::Elsewhere);
                }
                let places: Option<Vec<(Tier, u64)>> = (first..=last)
                    .map(|b| {
                        let l = m.logged_entry(b)?;
                        let (mask, _) = block_cover(b, p.start, p.len);
                        // A block logged in part takes the write in place
                        // only within the sectors it holds.
                        (l.is_whole()
                            || mask & !l.sectors == 0 && covers_aligned(b, p.start, p.len))
                        .then(|| (Tier::Ssd, self.log_offset(l.at)))
                    })
                    .collect();
                if let Some(places) = places {
                    return self
                        .shared_write(p.extent, (first, last), || {
                            self.write_blocks(&places, first, p.start, data)
                        })
                        .map(|()| Wrote::Logged);
                }
            }
        }
        if shadowed && self.stale_first(p.extent, first, last)? {
            // The blocks are stale now: write them in place under the
            // shared lock, unless the mapping changed meanwhile.
            let guard = self.slot_lock(p.extent).read();
            if let Some(m) = guard.as_ref() {
                let way = self.log_way(&p, m, hint);
                if writes_in_place(m, first, last, way) {
                    return self
                        .shared_write(p.extent, (first, last), || {
                            self.device_write(m.loc, p.start, data)
                        })
                        .map(|()| Wrote::Elsewhere);
                }
            }
        }
        let mut guard = self.slot_lock(p.extent).write();
        self.bump(p.extent);
        let r = match guard.take() {
            None => {
                let loc = self.allocate(p.extent)?;
                let m = Mapping::plain(loc, Written::empty(self.geo.blocks_per_extent()));
                self.write_locked(&mut guard, p, data, m, true)
                    .map(|()| Wrote::Allocated)
            }
            Some(m) if m.loc.tier == Tier::Hdd => {
                let way = self.log_way(&p, &m, hint);
                self.count_log_full(way);
                self.write_logged(&mut guard, p, data, m, way == LogWay::Take)
                    .map(|all| if all { Wrote::Logged } else { Wrote::Elsewhere })
            }
            Some(m) => self
                .write_locked(&mut guard, p, data, m, false)
                .map(|()| Wrote::Elsewhere),
        };
        // Even a failed write may have reached some blocks.
        self.touch(p.extent, first, last);
        if r.is_ok() {
            self.lost_written(p.extent, p.start, p.len);
        }
        r
    }

    /// A write into written blocks of an SSD extent whose shadow still has
    /// some of them clean: mark them stale first, a record and no data,
    /// under the write lock held only for that; `true` if they are stale
    /// now. The data then goes in place under the shared lock, so writes
    /// into one shadowed extent (a sequential stream at queue depth 4 puts
    /// four into each extent) run side by side instead of one after the
    /// other under the write lock. Stale before the data is written is the
    /// safe order: stale only says the HDD copy may be out of date, and
    /// shadows are trusted only after a clean shutdown anyway. The
    /// generation bump makes a move that copied the shadow's stale blocks
    /// meanwhile answer `Raced`.
    fn stale_first(&self, extent: u64, first: u32, last: u32) -> VolumeResult<bool> {
        let mut guard = self.slot_lock(extent).write();
        let Some(m) = guard.as_mut() else {
            return Ok(false);
        };
        if m.loc.tier != Tier::Ssd || !m.written.all(first, last) || !m.logged.is_empty() {
            return Ok(false);
        }
        match m.shadow.as_ref() {
            None => return Ok(false),
            Some(s) if s.stale.all(first, last) => return Ok(true),
            Some(_) => {}
        }
        let before = m.clone();
        if let Some(s) = m.shadow.as_mut() {
            s.stale
                .set_range(first, last, true, self.geo.blocks_per_extent());
        }
        self.bump(extent);
        if let Err(e) = self.store.put_extent(extent, &m.encode()) {
            *m = before;
            return Err(e.into());
        }
        self.mark_meta_dirty();
        Ok(true)
    }

    /// Read the newest data of block `b` of `m` into `out` (4 KiB), or zeros.
    /// A lost block's content is not known: a write of part of it fails.
    fn read_block(&self, extent: u64, m: &Mapping, b: u32, out: &mut [u8]) -> VolumeResult<()> {
        match self.block_source(m, b) {
            None => {
                self.check_lost(extent, b, b)?;
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
                self.overlay_logged(m, b, out)
            }
        }
    }

    /// `data` (at `start` in the extent) widened to whole blocks
    /// `first..=last`, the partial head and tail blocks filled with their
    /// current content (`keep(b)`: the destination already holds it, no
    /// need to read), or `None` when `data` is block aligned.
    fn widen(
        &self,
        extent: u64,
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
            self.read_block(extent, m, first, &mut buf[..BLOCK_SIZE as usize])?;
        }
        if tail && !(head && first == last) {
            let n = buf.len();
            self.read_block(extent, m, last, &mut buf[n - BLOCK_SIZE as usize..])?;
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
        // Data write and record under the gate: a flush never persists the
        // record without the data (see `flush_inner`).
        let _gate = self.meta_gate.read();
        let result = match self.widen(p.extent, &m, p.start, data, in_slot) {
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
        self.mark_meta_dirty();
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
    ) -> VolumeResult<bool> {
        let (first, last) = block_span(p.start, p.len);
        let mut targets = Vec::with_capacity((last - first + 1) as usize);
        let mut taken = Vec::new();
        let mut full = false;
        let mut evicted = false;
        let give_back = |taken: &[LogPos]| {
            for at in taken {
                self.log.release_now(*at, &self.alloc);
            }
        };
        for b in first..=last {
            let at = match m.logged_at(b) {
                Some(at) => Some(at),
                None if use_log && !full => {
                    let mut got = self.log_place();
                    if got.is_none() && !evicted && self.log.may_grow() {
                        // The reserve was lent to promotions: take it back
                        // now, from extents whose shadow makes leaving free.
                        evicted = true;
                        let freed = self.evict_clean(EVICT_BATCH, Some(p.extent)).and_then(|n| {
                            if n > 0 {
                                self.flush().map(|()| true)
                            } else {
                                Ok(false)
                            }
                        });
                        match freed {
                            Ok(true) => got = self.log_place(),
                            Ok(false) => {}
                            Err(e) => {
                                // The mapping goes back as it was, and the
                                // places taken for this write with it.
                                give_back(&taken);
                                *guard = Some(m);
                                return Err(e);
                            }
                        }
                    }
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
        let base = self.geo.slot_offset(m.loc.slot);
        let devs: Vec<(Tier, u64)> = (first..=last)
            .zip(&targets)
            .map(|(b, t)| match t {
                Some(at) => (Tier::Ssd, self.log_offset(*at)),
                None => (Tier::Hdd, base + u64::from(b) * BLOCK_SIZE),
            })
            .collect();
        // Whether a block needs no widening: its destination holds the rest
        // of it already (an HDD slot, a whole logged block), or it is logged
        // in part and the write covers whole sectors of it: the log place
        // then takes just those sectors.
        let keep = |b: u32| match targets[(b - first) as usize] {
            Some(_) => match m.logged_entry(b) {
                Some(l) if l.is_whole() => true,
                _ => m.written.get(b) && covers_aligned(b, p.start, p.len),
            },
            None => m.written.get(b),
        };
        let (s0, e0) = (p.start, p.start + p.len);
        let widened: Vec<bool> = (first..=last)
            .map(|b| {
                (b == first && !s0.is_multiple_of(BLOCK_SIZE)
                    || b == last && !e0.is_multiple_of(BLOCK_SIZE))
                    && !keep(b)
            })
            .collect();
        // As in `write_locked`: no flush past this point until the record.
        let _gate = self.meta_gate.read();
        let t0 = full.then(|| self.clock.io_now());
        let result = match self.widen(p.extent, &m, p.start, data, keep) {
            Ok(None) => self.write_blocks(&devs, first, p.start, data),
            Ok(Some((lo, buf))) => self.write_blocks(&devs, first, lo, &buf),
            Err(e) => Err(e),
        };
        if let (Some(t0), true) = (t0, result.is_ok()) {
            // A write the log wanted, in place (in part): what waiting
            // for room is measured against (`Volume::await_log_room`).
            self.note_inplace_write(t0, self.clock.io_now());
        }
        if let Err(e) = result {
            give_back(&taken);
            *guard = Some(m);
            return Err(e);
        }
        if m.written.all(first, last) && targets.iter().all(Option::is_none) {
            // In place into written blocks (the log full or not asked):
            // the mapping stays as it was, no copy of it to compare.
            *guard = Some(m);
            return Ok(false);
        }
        let before = m.clone();
        let blocks = self.geo.blocks_per_extent();
        m.written.set_range(first, last, true, blocks);
        for (b, at) in (first..=last).zip(targets.iter()) {
            if let Some(at) = at {
                // What the place holds now: the whole block when the write
                // covered it or was widened to it, else the sectors it
                // held and those written.
                let (mask, _) = block_cover(b, p.start, p.len);
                let mask = if widened[(b - first) as usize] {
                    ALL_SECTORS
                } else {
                    mask
                };
                match m.logged.binary_search_by_key(&b, |l| l.block) {
                    Ok(i) => m.logged[i].sectors |= mask,
                    Err(i) => m.logged.insert(
                        i,
                        Logged {
                            block: b,
                            at: *at,
                            sectors: mask,
                        },
                    ),
                }
            }
        }
        let all_logged = targets.iter().all(Option::is_some);
        if m == before {
            *guard = Some(m);
            return Ok(all_logged);
        }
        if let Err(e) = self.store.put_extent(p.extent, &m.encode()) {
            give_back(&taken);
            *guard = Some(before);
            return Err(e.into());
        }
        self.mark_meta_dirty();
        if !taken.is_empty() {
            Stats::add(&self.stats.log_writes, 1);
            Stats::add(&self.stats.log_write_bytes, data.len() as u64);
        }
        *guard = Some(m);
        Ok(all_logged)
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
    pub(crate) fn shared_write<T>(
        &self,
        extent: u64,
        blocks: (u32, u32),
        write: impl FnOnce() -> T,
    ) -> T {
        self.bump(extent);
        let r = write();
        self.touch(extent, blocks.0, blocks.1);
        self.bump(extent);
        r
    }

    pub(crate) fn bump(&self, extent: u64) {
        self.map.bump(extent);
    }

    pub(crate) fn device_write(&self, loc: Loc, start: u64, data: &[u8]) -> VolumeResult<()> {
        self.raw_write(loc.tier, self.geo.slot_offset(loc.slot) + start, data)
    }

    /// Write `data` at device offset `at` of a tier, counted.
    pub(crate) fn raw_write(&self, tier: Tier, at: u64, data: &[u8]) -> VolumeResult<()> {
        let dev = self.devices.get(tier);
        let i = tier.index();
        let t0 = self.clock.io_now();
        let r = dev.write_at(data, at);
        if tier == Tier::Hdd {
            self.hdd_foreground_done(t0);
        }
        if let Err(e) = r {
            Stats::add(&self.stats.dev_errors[i], 1);
            return Err(io_err(dev.as_ref())(e));
        }
        Stats::add(&self.stats.dev_writes[i], 1);
        Stats::add(&self.stats.dev_write_bytes[i], data.len() as u64);
        if crate::device::IoClass::current() == crate::device::IoClass::Foreground {
            Stats::add(&self.stats.write_landed_bytes[i], data.len() as u64);
        }
        self.dirty[i].store(true, Ordering::Release);
        Ok(())
    }
}

/// What became of one extent's piece of a write
/// ([`Volume::write_piece`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrote {
    /// All of it went to the SSD write log.
    Logged,
    /// The extent was unmapped: this write allocated its slot.
    Allocated,
    /// Anything else: in place, or in part to the HDD.
    Elsewhere,
}

/// What the write log does with a write ([`Volume::log_way`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogWay {
    Take,
    Full,
    No,
}

/// Whether a write of `len` bytes at `start` in the HDD extent `m` covers
/// part of a block (its first or its last) whose data is on the HDD: one
/// written and not in the write log. Logging such a write would need that
/// block's other bytes read off the HDD first.
///
/// A write whose ends fall on sector boundaries is not partial so: the log
/// takes part of a block by its sectors ([`Logged::sectors`]).
pub(super) fn partial_on_hdd(m: &Mapping, start: u64, len: u64) -> bool {
    let end = start + len;
    if start.is_multiple_of(SECTOR) && end.is_multiple_of(SECTOR) {
        return false;
    }
    let (first, last) = block_span(start, len);
    let on_hdd = |b: u32| m.written.get(b) && m.logged_entry(b).is_none_or(|l| !l.is_whole());
    (!start.is_multiple_of(BLOCK_SIZE) && on_hdd(first))
        || (!end.is_multiple_of(BLOCK_SIZE) && on_hdd(last))
}

/// The sectors of block `b` that `len` bytes at `start` (in the extent)
/// cover whole, and whether the bytes they touch in it are sector aligned.
fn block_cover(b: u32, start: u64, len: u64) -> (u8, bool) {
    let base = u64::from(b) * BLOCK_SIZE;
    let lo = start.max(base) - base;
    let hi = (start + len).min(base + BLOCK_SIZE) - base;
    sectors_of(lo, hi)
}

/// Whether the bytes of the write in block `b` start and end on sector
/// boundaries.
fn covers_aligned(b: u32, start: u64, len: u64) -> bool {
    block_cover(b, start, len).1
}

/// Whether a write to blocks `first..=last` of `m` goes to its slot with no
/// change of the mapping: every block written there, none newer in the log
/// (none within the logged span, below), a shadow already stale there, and
/// not a write the log takes.
fn writes_in_place(m: &Mapping, first: u32, last: u32, way: LogWay) -> bool {
    m.written.all(first, last)
        && outside_logged_span(m, first, last)
        && m.shadow.as_ref().is_none_or(|s| s.stale.all(first, last))
        && way != LogWay::Take
}

/// Whether blocks `first..=last` lie outside the span from `m`'s first
/// logged block to its last. Such a write may go in place under the
/// extent's shared lock: a write-back, which holds that lock too while it
/// copies (and copies only while the mapping is its snapshot's), writes the
/// HDD slot only within that span — a span write-back rereads and rewrites
/// all of it, so a write in place inside the span could be overwritten
/// with the older data the span read, and takes the write lock instead.
/// Once the log is full, nearly every HDD extent holds a few logged blocks,
/// and requiring none sent every write to them under the write lock, one
/// at a time, where the log off writes them side by side.
fn outside_logged_span(m: &Mapping, first: u32, last: u32) -> bool {
    match (m.logged.first(), m.logged.last()) {
        (Some(lo), Some(hi)) => last < lo.block || first > hi.block,
        _ => true,
    }
}
