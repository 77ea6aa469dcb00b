//! The copying half of a move: the device-to-device copies of step 2
//! (neighbouring runs merged, in-place copies under the extent's read
//! lock, a write-back of many logged blocks as one span), and the re-copy
//! of blocks a promotion's commit finds written meanwhile.

use std::sync::atomic::Ordering;

use super::super::error::io_err;
use super::super::extent::Mapping;
use super::super::geometry::{Tier, BLOCK_SIZE};
use super::super::stats::Stats;
use super::super::{Volume, VolumeResult};
use super::{CopyRun, Goal, Item, COPY_CHUNK, MERGE_MAX, SPAN_MIN};
use crate::volume::extent::Written;

thread_local! {
    static AWAITED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the copies made on this thread, while it lives, as ones users
/// wait for: a set arriving, and the victims making room for it. Their
/// HDD writes go whole, up to [`MERGE_MAX`], where other copies write
/// [`COPY_CHUNK`] at a time with a turn for the users' requests between.
/// A moved 70/30 set came up in 40–43 s instead of 48–51 with these
/// copies written whole (benchmarks/daemon-shift.sh: the drive gathers a stream's writes
/// only two chunks at a time, and each turn given between them costs a
/// positioning), while written whole for every copy, the users' reads
/// waiting behind a refill's writes cost a replayed trace 10 % on its
/// mean read (umass-financial1 at a quarter of its footprint).
#[must_use = "the mark holds only while the guard lives"]
pub struct AwaitedCopies(bool);

impl AwaitedCopies {
    /// Mark this thread's copies as awaited until the guard drops.
    pub fn enter() -> AwaitedCopies {
        AwaitedCopies(AWAITED.with(|c| c.replace(true)))
    }

    fn now() -> bool {
        AWAITED.with(std::cell::Cell::get)
    }
}

impl Drop for AwaitedCopies {
    fn drop(&mut self) {
        AWAITED.with(|c| c.set(self.0));
    }
}

impl Volume {
    /// Write back the logged blocks of `m` as one span: read the HDD from
    /// its first to its last logged block, lay the logged blocks over it,
    /// write the span back — one seek and two streaming transfers instead
    /// of a seek per block. Returns the bytes written.
    fn span_write_back(
        &self,
        m: &Mapping,
        buf: &mut Vec<u8>,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<u64> {
        let Some(first) = m.logged.first() else {
            return Ok(0);
        };
        let lo = u64::from(first.block) * BLOCK_SIZE;
        let len = span_len(m);
        let at = self.geo.slot_offset(m.loc.slot) + lo;
        pace(len);
        buf.resize(len as usize, 0);
        let (ssd, hdd) = (self.devices.get(Tier::Ssd), self.devices.get(Tier::Hdd));
        let count = |t: Tier, read: bool, n: usize| {
            let i = t.index();
            if read {
                Stats::add(&self.stats.dev_reads[i], 1);
                Stats::add(&self.stats.dev_read_bytes[i], n as u64);
            } else {
                Stats::add(&self.stats.dev_writes[i], 1);
                Stats::add(&self.stats.dev_write_bytes[i], n as u64);
            }
        };
        let fail = |t: Tier| {
            let dev = self.devices.get(t).clone();
            move |e| {
                Stats::add(&self.stats.dev_errors[t.index()], 1);
                io_err(dev.as_ref())(e)
            }
        };
        hdd.read_at(buf, at).map_err(fail(Tier::Hdd))?;
        count(Tier::Hdd, true, buf.len());
        for l in &m.logged {
            // The whole block, or the sectors of a block logged in part.
            let o = u64::from(l.block) * BLOCK_SIZE - lo;
            for (s0, s1) in l.sector_runs() {
                let part = &mut buf[(o + s0) as usize..(o + s1) as usize];
                ssd.read_at(part, self.log_offset(l.at) + s0)
                    .map_err(fail(Tier::Ssd))?;
                count(Tier::Ssd, true, part.len());
            }
        }
        pace(0);
        hdd.write_at(buf, at).map_err(fail(Tier::Hdd))?;
        count(Tier::Hdd, false, buf.len());
        self.dirty[Tier::Hdd.index()].store(true, Ordering::Release);
        Ok(len)
    }

    /// A promotion's commit found the extent written during the copy (`m`
    /// now, blocks `touched`): copy those blocks from their newest place to
    /// the destination and shape the move anew from `m`. Runs under the
    /// extent's write lock; the flush of step 5 makes the copies durable
    /// before the new mapping. Returns the bytes copied.
    pub(super) fn recopy(
        &self,
        it: &mut Item,
        m: &Mapping,
        touched: &Written,
    ) -> VolumeResult<u64> {
        let Some(dst) = it.fresh else {
            return Ok(0);
        };
        let blocks = self.geo.blocks_per_extent();
        let mut buf = vec![0u8; BLOCK_SIZE as usize];
        let mut n = 0;
        for b in (0..blocks).filter(|b| touched.get(*b)) {
            let Some((tier, at)) = self.block_source(m, b) else {
                continue;
            };
            let r = CopyRun {
                from: tier,
                src: at,
                to: dst.tier,
                dst: self.geo.slot_offset(dst.slot) + u64::from(b) * BLOCK_SIZE,
                len: BLOCK_SIZE,
            };
            // Under the extent's lock: no turn is handed over.
            self.copy_piece(r, &mut buf, &mut |_| {})?;
            n += BLOCK_SIZE;
            for (s0, s1, at) in self.logged_sectors(m, b) {
                let r = CopyRun {
                    from: Tier::Ssd,
                    src: at,
                    to: dst.tier,
                    dst: self.geo.slot_offset(dst.slot) + u64::from(b) * BLOCK_SIZE + s0,
                    len: s1 - s0,
                };
                let mut part = vec![0u8; (s1 - s0) as usize];
                self.copy_piece(r, &mut part, &mut |_| {})?;
                n += s1 - s0;
            }
        }
        it.before = m.clone();
        it.release.clear();
        it.saved = 0;
        let keep = it.keep;
        self.shape(it, Goal::Ssd, keep);
        Ok(n)
    }

    /// Copy every item's runs; runs that continue each other on either
    /// device (neighbouring slots, neighbouring blocks) are merged, up to
    /// [`MERGE_MAX`] bytes: read in one read where their sources continue
    /// each other, written in one write where their destinations do. The
    /// HDD's side is what a merge saves: each HDD request waits behind the
    /// users' queued ones and pays a seek, where flash costs little wherever
    /// the other side lands. A merge that needed both sides contiguous read
    /// a moved working set 1.2 MiB per HDD read (the free SSD slots it
    /// filled were scattered; benchmarks/daemon-shift.sh, 685 reads for
    /// 811 MiB). Copies into shadows merge with each other the same way
    /// ([`Volume::copy_shadow_group`]).
    pub(super) fn copy_items(
        &self,
        items: &[Item],
        copied: &mut [u64],
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        let mut cur: Option<Gather> = None;
        let mut buf = Vec::new();
        let mut nop = |_: u64| {};
        // Flash-to-flash runs of promotions (blocks from the write log),
        // copied after every other run: between a promotion's runs from
        // the HDD they would end each merged HDD read, so an extent with a
        // few logged blocks was read from the HDD in as many pieces (a
        // 70/30 working set's new extents, benchmarks/daemon-shift.sh).
        // After is also where they belong: a block logged in part has its
        // sectors from the log laid over what the HDD slot gave.
        let mut late: Vec<CopyRun> = Vec::new();
        let mut k = 0;
        while k < items.len() {
            let it = &items[k];
            if !it.in_place {
                for r in &it.runs {
                    copied[k] += r.len;
                    if r.from == Tier::Ssd && r.to == Tier::Ssd {
                        late.push(*r);
                        continue;
                    }
                    self.gather_run(&mut cur, r, &mut buf, &mut *pace)?;
                }
                k += 1;
                continue;
            }
            if let Some(c) = cur.take() {
                self.run_gather(c, &mut buf, &mut *pace)?;
            }
            if it.before.loc.tier == Tier::Ssd {
                k = self.copy_shadow_group(items, k, copied, &mut buf, &mut *pace)?;
                continue;
            }
            // A write-back into the extent's own HDD slot.
            // Paced before the lock, never under it: a pacing wait
            // under the extent's read lock would hold its writers for
            // the wait (on the virtual clock, forever: the blocked
            // writer keeps the turn the wait needs).
            // The bucket caps the bytes copied from tier to tier: a
            // span write-back copies its logged blocks, as writing them
            // one by one would; re-reading and re-writing the HDD
            // around them is how it writes them (one seek and two
            // streaming transfers where the blocks would cost a seek
            // each), not more copying. Charged the span's length, the
            // cheaper way was paced up to 32 times as hard: a full
            // volume's log drained at a tenth of the cap on an idle
            // HDD (benchmarks/daemon-log-drain.sh).
            k += 1;
            let span = it.before.logged.len() >= SPAN_MIN;
            pace(it.runs.iter().map(|r| r.len).sum());
            let guard = self.map.at(it.extent).read();
            if guard.as_ref() != Some(&it.before) {
                // Changed since the snapshot: its commit will see it.
                continue;
            }
            if span {
                copied[k - 1] += self.span_write_back(&it.before, &mut buf, &mut nop)?;
                continue;
            }
            let mut one: Option<Gather> = None;
            for r in &it.runs {
                copied[k - 1] += r.len;
                self.gather_run(&mut one, r, &mut buf, &mut nop)?;
            }
            if let Some(c) = one {
                self.run_gather(c, &mut buf, &mut nop)?;
            }
            drop(guard);
        }
        if let Some(c) = cur.take() {
            self.run_gather(c, &mut buf, &mut *pace)?;
        }
        for r in &late {
            self.gather_run(&mut cur, r, &mut buf, &mut *pace)?;
        }
        if let Some(c) = cur {
            self.run_gather(c, &mut buf, &mut *pace)?;
        }
        Ok(())
    }

    /// Copy the items from `items[first]` on that write into the shadows of
    /// SSD extents and whose copies merge on the HDD (shadows next to each
    /// other, each written whole where it is stale: see `through_clean_gaps`)
    /// as one group: paced once for all of it before any lock is taken,
    /// then each item's read lock held until the group's writes are done,
    /// so no foreground change of a mapping (which could drop a shadow and
    /// give its slot to another extent) overlaps a write into its shadow.
    /// Only the first lock is waited for: with one held, a lock not free at
    /// once ends the merge there (the copies so far are written and their
    /// locks let go first), so a thread never waits for a lock while it
    /// holds another. Returns the index after the group.
    fn copy_shadow_group(
        &self,
        items: &[Item],
        first: usize,
        copied: &mut [u64],
        buf: &mut Vec<u8>,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<usize> {
        // The group: following items into shadows while their runs merge.
        let mut end = first + 1;
        {
            let mut dry: Option<Gather> = None;
            for (j, it) in items.iter().enumerate().skip(first) {
                if !it.in_place || it.before.loc.tier != Tier::Ssd {
                    break;
                }
                let mut joins = true;
                for r in &it.runs {
                    match dry.as_mut() {
                        Some(c) if c.takes(r) => c.push(r),
                        Some(_) => {
                            joins = false;
                            break;
                        }
                        None => dry = Some(Gather::of(r)),
                    }
                }
                if !joins && j > first {
                    break;
                }
                end = j + 1;
            }
        }
        pace(
            items[first..end]
                .iter()
                .flat_map(|it| it.runs.iter())
                .map(|r| r.len)
                .sum(),
        );
        let mut nop = |_: u64| {};
        let mut held = Vec::new();
        let mut cur: Option<Gather> = None;
        for (j, it) in items.iter().enumerate().take(end).skip(first) {
            let lock = self.map.at(it.extent);
            let guard = if held.is_empty() {
                lock.read()
            } else if let Some(g) = lock.try_read() {
                g
            } else {
                if let Some(c) = cur.take() {
                    self.run_gather(c, buf, &mut nop)?;
                }
                held.clear();
                self.map.at(it.extent).read()
            };
            if guard.as_ref() != Some(&it.before) {
                // Changed since the snapshot: its commit will see it.
                continue;
            }
            for r in &it.runs {
                copied[j] += r.len;
                self.gather_run(&mut cur, r, buf, &mut nop)?;
            }
            held.push(guard);
        }
        if let Some(c) = cur {
            self.run_gather(c, buf, &mut nop)?;
        }
        drop(held);
        Ok(end)
    }

    /// Add `r` to the copy `cur` gathers if it takes it; else copy `cur`
    /// (pacing it with `pace`) and start a new one with `r`.
    fn gather_run(
        &self,
        cur: &mut Option<Gather>,
        r: &CopyRun,
        buf: &mut Vec<u8>,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        match cur.as_mut() {
            Some(c) if c.takes(r) => c.push(r),
            _ => {
                if let Some(c) = cur.replace(Gather::of(r)) {
                    self.run_gather(c, buf, pace)?;
                }
            }
        }
        Ok(())
    }

    /// Pace `g`'s bytes, then copy it through `buf`.
    fn run_gather(
        &self,
        g: Gather,
        buf: &mut Vec<u8>,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        pace(g.len());
        buf.resize(g.len() as usize, 0);
        self.copy_gather(&g, buf, pace)
    }

    /// One device-to-device copy through `buf` (of the run's length),
    /// counted: one read, then writes of at most [`COPY_CHUNK`], each after
    /// `pace(0)` — a turn for foreground I/O between them (on the virtual
    /// clock this is also where the read's device time elapses before the
    /// write is queued, so the write does not hold the destination ahead of
    /// foreground requests; on the real clock it costs nothing).
    fn copy_piece(
        &self,
        r: CopyRun,
        buf: &mut [u8],
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        self.copy_gather(&Gather::of(&r), buf, pace)
    }

    /// `g`'s pieces read into `buf` (of its length), one read for each
    /// run of pieces whose sources continue each other, then written, one
    /// write of at most [`COPY_CHUNK`] after `pace(0)` at a time (see
    /// [`Volume::copy_piece`]; whole, for copies to the HDD users wait for:
    /// [`AwaitedCopies`]) for each run whose destinations do; counted.
    fn copy_gather(
        &self,
        g: &Gather,
        buf: &mut [u8],
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        let (sdev, ddev) = (self.devices.get(g.from), self.devices.get(g.to));
        for (at, off, len) in g.spans(|p| Some(p.src)) {
            let part = &mut buf[off as usize..(off + len) as usize];
            sdev.read_at(part, at).map_err(|e| {
                Stats::add(&self.stats.dev_errors[g.from.index()], 1);
                io_err(sdev.as_ref())(e)
            })?;
            Stats::add(&self.stats.dev_reads[g.from.index()], 1);
            Stats::add(&self.stats.dev_read_bytes[g.from.index()], len);
        }
        let piece = match g.to {
            Tier::Hdd if AwaitedCopies::now() => MERGE_MAX,
            _ => COPY_CHUNK,
        };
        for (at, off, len) in g.spans(|p| p.dst) {
            let part = &buf[off as usize..(off + len) as usize];
            for (k, chunk) in part.chunks(piece as usize).enumerate() {
                pace(0);
                ddev.write_at(chunk, at + k as u64 * piece).map_err(|e| {
                    Stats::add(&self.stats.dev_errors[g.to.index()], 1);
                    io_err(ddev.as_ref())(e)
                })?;
                self.dirty[g.to.index()].store(true, Ordering::Release);
                Stats::add(&self.stats.dev_writes[g.to.index()], 1);
                Stats::add(
                    &self.stats.dev_write_bytes[g.to.index()],
                    chunk.len() as u64,
                );
            }
        }
        Ok(())
    }
}

/// Bytes between two source runs that one read of `from` reads through
/// (and drops) rather than reading the runs apart. On the HDD, a megabyte:
/// its transfer (7-14 ms at 75-150 MB/s on a 5400 rpm disk) costs about
/// what the repositioning for a second read does (a short seek and half a
/// turn, 8 ms), and a second read also waits its turn behind the users'
/// queued reads again. A flash device pays no repositioning: nothing.
fn read_through(from: Tier) -> u64 {
    match from {
        Tier::Hdd => COPY_CHUNK,
        Tier::Ssd => 0,
    }
}

/// Runs of a copy merged into one pass: `pieces` in order, laid end to
/// end in one buffer. A piece without a destination is a gap on the source
/// read through and dropped.
struct Gather {
    from: Tier,
    to: Tier,
    pieces: Vec<Piece>,
}

#[derive(Clone, Copy)]
struct Piece {
    src: u64,
    dst: Option<u64>,
    len: u64,
}

impl Gather {
    fn of(r: &CopyRun) -> Gather {
        Gather {
            from: r.from,
            to: r.to,
            pieces: vec![Piece {
                src: r.src,
                dst: Some(r.dst),
                len: r.len,
            }],
        }
    }

    /// Bytes of the buffer (gaps included).
    fn len(&self) -> u64 {
        self.pieces.iter().map(|p| p.len).sum()
    }

    /// The gap on the source before `r` if it continues the last piece's
    /// source at or within [`read_through`] bytes past its end.
    fn source_gap(&self, r: &CopyRun) -> Option<u64> {
        let last = self.pieces.last()?;
        let end = last.src + last.len;
        (r.src >= end && r.src - end <= read_through(r.from)).then(|| r.src - end)
    }

    /// Whether `r` joins this copy: the same devices, its source or its
    /// destination continuing the last piece's, and the whole within
    /// [`MERGE_MAX`].
    fn takes(&self, r: &CopyRun) -> bool {
        let Some(last) = self.pieces.last() else {
            return false;
        };
        if self.from != r.from || self.to != r.to {
            return false;
        }
        let gap = self.source_gap(r);
        let dst_on = last.dst.is_some_and(|d| d + last.len == r.dst);
        (gap.is_some() || dst_on) && self.len() + gap.unwrap_or(0) + r.len <= MERGE_MAX
    }

    /// Append `r` (which [`Gather::takes`]): the gap before it read
    /// through, and one piece with the last where both sides continue.
    fn push(&mut self, r: &CopyRun) {
        let gap = self.source_gap(r).unwrap_or(0);
        if gap > 0 {
            let src = r.src - gap;
            self.pieces.push(Piece {
                src,
                dst: None,
                len: gap,
            });
        }
        if let Some(last) = self.pieces.last_mut() {
            if last.src + last.len == r.src && last.dst.is_some_and(|d| d + last.len == r.dst) {
                last.len += r.len;
                return;
            }
        }
        self.pieces.push(Piece {
            src: r.src,
            dst: Some(r.dst),
            len: r.len,
        });
    }

    /// `(device offset, buffer offset, length)` of the runs of pieces that
    /// continue each other on the side `at` picks (pieces it gives no
    /// offset are skipped and end a run).
    fn spans(&self, at: impl Fn(&Piece) -> Option<u64>) -> Vec<(u64, u64, u64)> {
        let mut out: Vec<(u64, u64, u64)> = Vec::new();
        let mut off = 0;
        let mut open = false;
        for p in &self.pieces {
            match at(p) {
                Some(a) => match out.last_mut() {
                    Some(s) if open && s.0 + s.2 == a => s.2 += p.len,
                    _ => {
                        out.push((a, off, p.len));
                        open = true;
                    }
                },
                None => open = false,
            }
            off += p.len;
        }
        out
    }
}

/// Bytes from the first to the last logged block of `m` (what a span
/// write-back reads and writes).
pub(super) fn span_len(m: &Mapping) -> u64 {
    match (m.logged.first(), m.logged.last()) {
        (Some(first), Some(last)) => {
            u64::from(last.block + 1) * BLOCK_SIZE - u64::from(first.block) * BLOCK_SIZE
        }
        _ => 0,
    }
}
