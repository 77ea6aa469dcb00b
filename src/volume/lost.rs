//! Blocks lost with a dead SSD, and the salvage that records them.
//!
//! When a volume is opened without its SSD (`tierd serve --ssd-lost`), the
//! data whose newest version was only on the SSD is gone. Each such 4 KiB
//! block is recorded here, by its number in the volume, and reads I/O
//! error from then on, so no reader ever takes older data or zeros for it.
//! A lost block is an unwritten block that reads EIO instead of zeros:
//! - a write of the whole block makes it written again, and its data wins:
//!   a mark speaks only for unwritten blocks. The mark is cleared at the
//!   flush after the write, once the write's record is durable (cleared
//!   sooner, a crash could leave the block neither written nor marked, and
//!   it would read zeros no write wrote);
//! - a discard or write-zeroes of the whole block clears the mark, so the
//!   block reads zeros as after any discard;
//! - a write of part of it I/O errors (the rest of the block is not known).
//!
//! The marks are kept as runs of block numbers, in memory and as one record
//! in the metadata store ([`LOST_KEY`]): a loss is usually a few large runs,
//! and the record changes only at a salvage and at discards that touch it.
//!
//! [`salvage`] runs when the volume opens without its SSD, before anything
//! is served. It records every block whose only newest copy was on the SSD
//! (an SSD extent's blocks with no clean HDD copy, an HDD extent's blocks
//! in the write log), flushes that record, and only then rewrites the
//! mappings: an SSD extent with an HDD copy moves to that copy, one
//! without is unmapped, and an HDD extent drops its logged blocks. A crash
//! in between is safe: the marks are durable before any block stops being
//! written, and the next open with the SSD lost salvages what is left.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use super::extent::{Loc, LogPos, Mapping};
use super::geometry::{Tier, BLOCK_SIZE};
use super::map::ExtentMap;
use super::{Volume, VolumeError, VolumeResult};
use crate::store::MetaStore;

/// The metadata-store key of the lost blocks' runs.
pub(super) const LOST_KEY: &str = "lost-blocks";

/// The record's format version.
const LOST_VERSION: u8 = 1;

/// Runs of lost blocks: start → end (exclusive), in volume block numbers.
#[derive(Default)]
pub(crate) struct LostBlocks {
    /// Whether any block is lost: the I/O paths' one check when none is.
    any: AtomicBool,
    runs: RwLock<BTreeMap<u64, u64>>,
    /// Runs written whole since the last flush: their marks go at the
    /// next one ([`LostBlocks::take_written`], [`LostBlocks::written_flushed`]).
    written: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl LostBlocks {
    /// The runs a store record holds (none for an empty record).
    pub(super) fn decode(raw: &[u8]) -> VolumeResult<Self> {
        let bad = |why: &str| VolumeError::Corrupt(format!("{LOST_KEY}: {why}"));
        let Some((&version, rest)) = raw.split_first() else {
            return Ok(Self::default());
        };
        if version != LOST_VERSION {
            return Err(bad(&format!("unknown version {version}")));
        }
        if !rest.len().is_multiple_of(16) {
            return Err(bad("length is not a whole number of runs"));
        }
        let mut runs = BTreeMap::new();
        let mut prev_end = 0u64;
        for pair in rest.chunks_exact(16) {
            let (a, b) = pair.split_at(8);
            let start = u64::from_le_bytes(a.try_into().map_err(|_| bad("short run"))?);
            let end = u64::from_le_bytes(b.try_into().map_err(|_| bad("short run"))?);
            if end <= start || (!runs.is_empty() && start < prev_end) {
                return Err(bad("runs overlap or are out of order"));
            }
            runs.insert(start, end);
            prev_end = end;
        }
        Ok(LostBlocks {
            any: AtomicBool::new(!runs.is_empty()),
            runs: RwLock::new(runs),
            written: Default::default(),
        })
    }

    /// The store record of the runs.
    pub(super) fn encode(&self) -> Vec<u8> {
        let runs = self.runs.read();
        let mut out = Vec::with_capacity(1 + runs.len() * 16);
        out.push(LOST_VERSION);
        for (s, e) in runs.iter() {
            out.extend_from_slice(&s.to_le_bytes());
            out.extend_from_slice(&e.to_le_bytes());
        }
        out
    }

    /// Whether any block is lost.
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The first lost block in `start..end`, if any.
    pub(crate) fn first_in(&self, start: u64, end: u64) -> Option<u64> {
        if !self.any() || start >= end {
            return None;
        }
        let runs = self.runs.read();
        // The run that starts at or before `start` may reach into it.
        if let Some((_, &e)) = runs.range(..=start).next_back() {
            if e > start {
                return Some(start);
            }
        }
        runs.range(start..end).next().map(|(&s, _)| s)
    }

    /// The lost runs overlapping `start..end`, clipped to it.
    pub(crate) fn runs_in(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        if !self.any() || start >= end {
            return Vec::new();
        }
        let runs = self.runs.read();
        let from = runs.range(..=start).next_back().map_or(start, |(&s, _)| s);
        runs.range(from..end)
            .filter(|(_, &e)| e > start)
            .map(|(&s, &e)| (s.max(start), e.min(end)))
            .collect()
    }

    /// The lost runs overlapping `start..end`, clipped to it, without the
    /// blocks written whole since the last flush (they read their data).
    pub(crate) fn unwritten_runs_in(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut runs = self.runs_in(start, end);
        let written = self.written.lock().clone();
        for (ws, we) in written {
            runs = runs
                .into_iter()
                .flat_map(|(s, e)| {
                    let mut out = Vec::with_capacity(2);
                    if s < ws.min(e) {
                        out.push((s, ws.min(e)));
                    }
                    if we.max(s) < e {
                        out.push((we.max(s), e));
                    }
                    out
                })
                .collect();
        }
        runs
    }

    /// How many blocks are marked lost.
    pub(crate) fn count(&self) -> u64 {
        self.runs.read().iter().map(|(s, e)| e - s).sum()
    }

    /// Blocks `start..end` were written whole: their marks go once the
    /// write's record is flushed.
    pub(super) fn note_written(&self, start: u64, end: u64) {
        if self.first_in(start, end).is_some() {
            self.written.lock().push((start, end));
        }
    }

    /// The runs written whole so far, taken by a flush before it flushes
    /// the store (their records are in it).
    pub(super) fn take_written(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.written.lock())
    }

    /// The flush that took `runs` failed: they wait for the next.
    pub(super) fn written_unflushed(&self, runs: Vec<(u64, u64)>) {
        self.written.lock().extend(runs);
    }

    /// Mark `start..end` lost.
    pub(super) fn insert(&self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut runs = self.runs.write();
        let (mut s, mut e) = (start, end);
        // Merge with every run that overlaps or touches.
        let from = runs.range(..=s).next_back().map_or(s, |(&rs, _)| rs);
        let touching: Vec<(u64, u64)> = runs
            .range(from..=e)
            .filter(|(_, &re)| re >= s)
            .map(|(&rs, &re)| (rs, re))
            .collect();
        for (rs, re) in touching {
            runs.remove(&rs);
            s = s.min(rs);
            e = e.max(re);
        }
        runs.insert(s, e);
        self.any.store(true, Ordering::Release);
    }

    /// Clear `start..end`; whether anything was lost there.
    pub(super) fn remove(&self, start: u64, end: u64) -> bool {
        if !self.any() || start >= end {
            return false;
        }
        let mut runs = self.runs.write();
        let from = runs.range(..=start).next_back().map_or(start, |(&s, _)| s);
        let hit: Vec<(u64, u64)> = runs
            .range(from..end)
            .filter(|(_, &e)| e > start)
            .map(|(&s, &e)| (s, e))
            .collect();
        for &(s, e) in &hit {
            runs.remove(&s);
            if s < start {
                runs.insert(s, start);
            }
            if e > end {
                runs.insert(end, e);
            }
        }
        self.any.store(!runs.is_empty(), Ordering::Release);
        !hit.is_empty()
    }
}

/// At open: forget the marks of blocks that are written (written whole
/// after the loss; the flush that was to clear their marks did not come),
/// and record that in the store. Left in the store, such a mark would
/// outlive a later discard of the block, which only records marks it
/// finds in memory. The mapping that says "written" is durable, but the
/// data it names may sit unsynced in the OS cache after a kill: `sync`
/// (the devices in use) runs before the new record is put, so a power cut
/// after the open's store flush cannot bring back the block's older bytes
/// in place of its error.
pub(super) fn drop_written(
    map: &ExtentMap,
    store: &dyn MetaStore,
    lost: &LostBlocks,
    blocks: u32,
    sync: impl FnOnce() -> VolumeResult<()>,
) -> VolumeResult<()> {
    if !lost.any() {
        return Ok(());
    }
    let bpe = u64::from(blocks);
    let mut written: Vec<(u64, u64)> = Vec::new();
    for (s, e) in lost.runs_in(0, u64::MAX) {
        for extent in s / bpe..e.div_ceil(bpe) {
            let guard = map.at(extent).read();
            let Some(m) = guard.as_ref() else { continue };
            let base = extent * bpe;
            for b in s.max(base)..e.min(base + bpe) {
                if m.written.get((b - base) as u32) {
                    match written.last_mut() {
                        Some((_, end)) if *end == b => *end += 1,
                        _ => written.push((b, b + 1)),
                    }
                }
            }
        }
    }
    let mut changed = false;
    for (s, e) in written {
        changed |= lost.remove(s, e);
    }
    if changed {
        sync()?;
        store.put(LOST_KEY, &lost.encode())?;
    }
    Ok(())
}

/// What a salvage did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Salvaged {
    /// SSD extents that moved to their HDD copy.
    pub moved: u64,
    /// SSD extents unmapped (no HDD copy at all).
    pub unmapped: u64,
    /// HDD extents whose write-log blocks were dropped.
    pub unlogged: u64,
    /// Blocks newly marked lost.
    pub lost_blocks: u64,
}

/// The blocks of `m` whose newest data is on the SSD alone (block numbers
/// inside the extent, ascending).
fn ssd_only_blocks(m: &Mapping, blocks: u32) -> Vec<u32> {
    (0..blocks)
        .filter(|&b| match m.loc.tier {
            Tier::Ssd => m.written.get(b) && m.shadow.as_ref().is_none_or(|s| s.stale.get(b)),
            Tier::Hdd => m.logged_entry(b).is_some(),
        })
        .collect()
}

/// Salvage a volume whose SSD is lost (see the module docs). Runs at open,
/// before the allocator and the write log are built: `owner` (the slots in
/// use) and `log_in_use` (the write log's places) are brought up to date.
pub(super) fn salvage(
    map: &ExtentMap,
    store: &dyn MetaStore,
    lost: &LostBlocks,
    blocks: u32,
    owner: &mut [Vec<bool>; 2],
    log_in_use: &mut Vec<LogPos>,
) -> VolumeResult<Salvaged> {
    let mut out = Salvaged::default();
    let mut touched = map.ssd_extents();
    touched.extend(map.extra_extents());
    touched.sort_unstable();
    touched.dedup();
    // 1. The marks, durable before any mapping changes.
    let bpe = u64::from(blocks);
    let before = lost.count();
    let mut work: Vec<(u64, Vec<u32>)> = Vec::new();
    for extent in touched {
        let guard = map.at(extent).read();
        let Some(m) = guard.as_ref() else { continue };
        if m.loc.tier == Tier::Hdd && m.logged.is_empty() {
            continue;
        }
        let gone = ssd_only_blocks(m, blocks);
        drop(guard);
        // Consecutive blocks go in as one run.
        let mut i = 0;
        while i < gone.len() {
            let mut j = i + 1;
            while j < gone.len() && gone[j] == gone[j - 1] + 1 {
                j += 1;
            }
            let at = extent * bpe + u64::from(gone[i]);
            lost.insert(at, at + (j - i) as u64);
            i = j;
        }
        work.push((extent, gone));
    }
    if work.is_empty() {
        return Ok(out);
    }
    out.lost_blocks = lost.count() - before;
    store.put(LOST_KEY, &lost.encode())?;
    store.flush()?;
    // 2. The mappings, with nothing left on the SSD.
    for (extent, gone) in work {
        let mut guard = map.at(extent).write();
        let Some(mut m) = guard.take() else { continue };
        for &b in &gone {
            m.written.set_range(b, b, false, blocks);
        }
        match m.loc.tier {
            Tier::Ssd => {
                owner[Tier::Ssd.index()][m.loc.slot as usize] = false;
                match m.shadow.take() {
                    Some(s) => {
                        m.loc = Loc {
                            tier: Tier::Hdd,
                            slot: s.slot,
                        };
                        store.put_extent(extent, &m.encode())?;
                        *guard = Some(m);
                        out.moved += 1;
                    }
                    None => {
                        store.remove_extent(extent)?;
                        out.unmapped += 1;
                    }
                }
            }
            Tier::Hdd => {
                m.logged.clear();
                store.put_extent(extent, &m.encode())?;
                *guard = Some(m);
                out.unlogged += 1;
            }
        }
    }
    // The write log's segments were SSD slots: all of them are gone.
    for p in log_in_use.drain(..) {
        if let Some(o) = owner[Tier::Ssd.index()].get_mut(p.slot as usize) {
            *o = false;
        }
    }
    store.flush()?;
    Ok(out)
}

impl Volume {
    /// The volume block number of block `b` of `extent`.
    fn block_no(&self, extent: u64, b: u32) -> u64 {
        extent * u64::from(self.geo.blocks_per_extent()) + u64::from(b)
    }

    /// An error if a block of `extent` in `first..=last` is lost (checked
    /// where an unwritten block would read as zeros).
    pub(crate) fn check_lost(&self, extent: u64, first: u32, last: u32) -> VolumeResult<()> {
        if !self.lost.any() {
            return Ok(());
        }
        let start = self.block_no(extent, first);
        match self.lost.first_in(start, self.block_no(extent, last) + 1) {
            None => Ok(()),
            Some(block) => Err(VolumeError::Lost {
                offset: block * BLOCK_SIZE,
                device: self.devices.get(Tier::Ssd).name(),
            }),
        }
    }

    /// The lost runs among blocks `first..=last` of `extent`, as
    /// `(first, count)` inside the extent.
    pub(crate) fn lost_in(&self, extent: u64, first: u32, last: u32) -> Vec<(u32, u32)> {
        let base = self.block_no(extent, 0);
        self.lost
            .runs_in(base + u64::from(first), base + u64::from(last) + 1)
            .into_iter()
            .map(|(s, e)| ((s - base) as u32, (e - s) as u32))
            .collect()
    }

    /// Bytes lost with a dead SSD that still read as I/O errors.
    pub fn lost_bytes(&self) -> u64 {
        if !self.lost.any() {
            return 0;
        }
        let n: u64 = self
            .lost
            .unwritten_runs_in(0, u64::MAX)
            .iter()
            .map(|(s, e)| e - s)
            .sum();
        n * BLOCK_SIZE
    }

    /// The lost byte ranges `(offset, len)` overlapping `offset..offset +
    /// len`, at most `max_runs` of them, and whether more were left out.
    pub fn lost_ranges(&self, offset: u64, len: u64, max_runs: usize) -> (Vec<(u64, u64)>, bool) {
        let end = offset.saturating_add(len);
        let runs = self
            .lost
            .unwritten_runs_in(offset / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        let more = runs.len() > max_runs;
        let out = runs
            .into_iter()
            .take(max_runs)
            .map(|(s, e)| {
                let lo = (s * BLOCK_SIZE).max(offset);
                (lo, (e * BLOCK_SIZE).min(end) - lo)
            })
            .collect();
        (out, more)
    }

    /// A write of `start..start + len` into `extent` succeeded: the whole
    /// blocks it covers are no longer lost once its record is flushed.
    pub(crate) fn lost_written(&self, extent: u64, start: u64, len: u64) {
        if !self.lost.any() {
            return;
        }
        let (first, end) = (start.div_ceil(BLOCK_SIZE), (start + len) / BLOCK_SIZE);
        if first < end {
            let base = self.block_no(extent, 0);
            self.lost.note_written(base + first, base + end);
        }
    }

    /// Called by a flush under its gate, before the store is flushed: the
    /// marks of blocks written whole so far, to clear once it is.
    pub(crate) fn lost_written_take(&self) -> Vec<(u64, u64)> {
        if !self.lost.any() {
            return Vec::new();
        }
        self.lost.take_written()
    }

    /// The flush that took `runs` ended: clear their marks (recorded now,
    /// durable at the next flush) or, if it failed, keep them for the next.
    pub(crate) fn lost_written_flushed(&self, runs: Vec<(u64, u64)>, ok: bool) -> VolumeResult<()> {
        if runs.is_empty() {
            return Ok(());
        }
        if !ok {
            self.lost.written_unflushed(runs);
            return Ok(());
        }
        let mut changed = false;
        for (s, e) in runs {
            changed |= self.lost.remove(s, e);
        }
        if changed {
            self.store.put(LOST_KEY, &self.lost.encode())?;
            self.mark_meta_dirty();
        }
        Ok(())
    }

    /// The whole blocks of `offset..offset + len` were discarded or
    /// zeroed: they are no longer lost. Recorded in the store, durable at
    /// the next flush like the discard itself.
    pub(crate) fn forget_lost(&self, offset: u64, len: u64) -> VolumeResult<()> {
        let (first, end) = (offset.div_ceil(BLOCK_SIZE), (offset + len) / BLOCK_SIZE);
        if !self.lost.any() || first >= end || !self.lost.remove(first, end) {
            return Ok(());
        }
        self.store.put(LOST_KEY, &self.lost.encode())?;
        self.mark_meta_dirty();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(l: &LostBlocks) -> Vec<(u64, u64)> {
        l.runs.read().iter().map(|(&s, &e)| (s, e)).collect()
    }

    #[test]
    fn runs_merge_split_and_answer_lookups() {
        let l = LostBlocks::default();
        assert!(!l.any());
        assert_eq!(l.first_in(0, 100), None);
        l.insert(10, 20);
        l.insert(30, 40);
        l.insert(20, 25); // touches the first run: merged
        assert_eq!(runs(&l), vec![(10, 25), (30, 40)]);
        l.insert(24, 31); // bridges both
        assert_eq!(runs(&l), vec![(10, 40)]);
        assert_eq!(l.first_in(0, 10), None);
        assert_eq!(l.first_in(0, 11), Some(10));
        assert_eq!(l.first_in(15, 16), Some(15));
        assert_eq!(l.first_in(40, 50), None);
        assert_eq!(l.runs_in(5, 12), vec![(10, 12)]);
        assert!(l.remove(15, 18));
        assert_eq!(runs(&l), vec![(10, 15), (18, 40)]);
        assert!(!l.remove(15, 18));
        assert_eq!(l.count(), 27);
        assert!(l.remove(0, 100));
        assert!(!l.any());
        assert_eq!(l.count(), 0);
    }

    #[test]
    fn the_record_round_trips_and_damage_is_refused() {
        let l = LostBlocks::default();
        l.insert(3, 9);
        l.insert(1 << 40, (1 << 40) + 256);
        let back = LostBlocks::decode(&l.encode()).unwrap();
        assert_eq!(runs(&back), runs(&l));
        assert!(back.any());
        assert!(!LostBlocks::decode(&[]).unwrap().any());
        let mut bad = l.encode();
        bad.pop();
        assert!(LostBlocks::decode(&bad).is_err());
        let mut swapped = vec![LOST_VERSION];
        for v in [9u64, 3] {
            swapped.extend_from_slice(&v.to_le_bytes());
        }
        assert!(LostBlocks::decode(&swapped).is_err());
        assert!(LostBlocks::decode(&[7]).is_err());
    }
}
