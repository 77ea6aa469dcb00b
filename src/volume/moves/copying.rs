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

    /// Copy every item's runs; runs that continue each other on the source
    /// device (neighbouring slots, neighbouring blocks) go as one read of up
    /// to [`MERGE_MAX`] bytes, written where each belongs (one write where
    /// the destinations continue each other too). The source is what a
    /// merge saves: a promotion's HDD reads wait behind the users' queued
    /// reads and pay a seek each, while its SSD writes cost little wherever
    /// they land; the free SSD slots a promotion fills are scattered once
    /// the slots of demoted extents are reused, so a merge that needed both
    /// sides contiguous read 1.2 MiB per HDD read for a moved working set
    /// (benchmarks/daemon-shift.sh, 685 reads for 811 MiB).
    pub(super) fn copy_items(
        &self,
        items: &[Item],
        copied: &mut [u64],
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        let mut cur: Option<Gather> = None;
        let mut buf = Vec::new();
        let go = |g: Gather, buf: &mut Vec<u8>, pace: &mut dyn FnMut(u64)| -> VolumeResult<()> {
            pace(g.len);
            buf.resize(g.len as usize, 0);
            self.copy_gather(&g, buf, pace)
        };
        let mut nop = |_: u64| {};
        for (k, it) in items.iter().enumerate() {
            let _held = if it.in_place {
                if let Some(c) = cur.take() {
                    go(c, &mut buf, &mut *pace)?;
                }
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
                let span = it.before.logged.len() >= SPAN_MIN;
                pace(it.runs.iter().map(|r| r.len).sum());
                let guard = self.map.at(it.extent).read();
                if guard.as_ref() != Some(&it.before) {
                    // Changed since the snapshot: its commit will see it.
                    continue;
                }
                if span {
                    copied[k] += self.span_write_back(&it.before, &mut buf, &mut nop)?;
                    continue;
                }
                Some(guard)
            } else {
                None
            };
            let pace: &mut dyn FnMut(u64) = if it.in_place { &mut nop } else { &mut *pace };
            for r in &it.runs {
                copied[k] += r.len;
                match cur.as_mut() {
                    Some(c)
                        if c.from == r.from
                            && c.to == r.to
                            && r.src >= c.src + c.len
                            && r.src - (c.src + c.len) <= read_through(r.from)
                            && r.src + r.len - c.src <= MERGE_MAX =>
                    {
                        c.push(r.src, r.dst, r.len);
                    }
                    _ => {
                        if let Some(c) = cur.replace(Gather::of(r)) {
                            go(c, &mut buf, &mut *pace)?;
                        }
                    }
                }
            }
            if it.in_place {
                if let Some(c) = cur.take() {
                    go(c, &mut buf, &mut *pace)?;
                }
            }
        }
        if let Some(c) = cur {
            go(c, &mut buf, &mut *pace)?;
        }
        Ok(())
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

    /// One read of `g`'s source span into `buf` (of its length), then its
    /// pieces written in order, each in writes of at most [`COPY_CHUNK`]
    /// after `pace(0)` (see [`Volume::copy_piece`]); counted.
    fn copy_gather(
        &self,
        g: &Gather,
        buf: &mut [u8],
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<()> {
        let (sdev, ddev) = (self.devices.get(g.from), self.devices.get(g.to));
        sdev.read_at(buf, g.src).map_err(|e| {
            Stats::add(&self.stats.dev_errors[g.from.index()], 1);
            io_err(sdev.as_ref())(e)
        })?;
        Stats::add(&self.stats.dev_reads[g.from.index()], 1);
        Stats::add(&self.stats.dev_read_bytes[g.from.index()], buf.len() as u64);
        let mut rest: &[u8] = buf;
        for &(dst, len) in &g.pieces {
            let (piece, tail) = rest.split_at((len as usize).min(rest.len()));
            rest = tail;
            // A gap read through between two pieces: not written anywhere.
            let Some(dst) = dst else { continue };
            for (k, chunk) in piece.chunks(COPY_CHUNK as usize).enumerate() {
                pace(0);
                let at = dst + k as u64 * COPY_CHUNK;
                ddev.write_at(chunk, at).map_err(|e| {
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

/// A copy of one source span read at once, whose pieces go to destinations
/// that need not continue each other: `pieces` are `(destination, length)`
/// in source order, their lengths adding up to `len`; a piece without a
/// destination is a gap read through.
struct Gather {
    from: Tier,
    src: u64,
    to: Tier,
    len: u64,
    pieces: Vec<(Option<u64>, u64)>,
}

impl Gather {
    fn of(r: &CopyRun) -> Gather {
        Gather {
            from: r.from,
            src: r.src,
            to: r.to,
            len: r.len,
            pieces: vec![(Some(r.dst), r.len)],
        }
    }

    /// Append `len` source bytes at `src` (at or past the span's end: what
    /// lies between is a gap) bound for `dst`: one piece with the last
    /// where both sides continue each other.
    fn push(&mut self, src: u64, dst: u64, len: u64) {
        let gap = src.saturating_sub(self.src + self.len);
        if gap > 0 {
            self.pieces.push((None, gap));
            self.len += gap;
        }
        self.len += len;
        match self.pieces.last_mut() {
            Some((Some(d), l)) if *d + *l == dst => *l += len,
            _ => self.pieces.push((Some(dst), len)),
        }
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
