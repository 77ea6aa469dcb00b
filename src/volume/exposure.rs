//! Exposure: the data whose only copy is on the SSD, and how long the
//! oldest of it has been so — what an SSD failure would lose now.
//!
//! What counts, per mapping ([`ssd_only_sectors_with`]):
//! - an extent on the SSD without an HDD shadow: every written block;
//! - an extent on the SSD with a shadow: its written blocks the shadow
//!   holds stale (a clean shadow: nothing);
//! - an extent on the HDD: the sectors of its blocks in the write log (a
//!   block logged in part counts the 512-byte sectors the log holds).
//!
//! Unwritten blocks read as zeros and count nothing. The map keeps the sum
//! as it keeps its other counts (on the store-back under the extent's
//! lock). The age is kept per extent, in memory, by [`Since`]: the time
//! its first SSD-only write landed since it was last clean (or its shadow
//! was dropped), forgotten when a clean HDD copy covers it again. Only the
//! change between "nothing exposed" and "something exposed" touches it, so
//! a write to data already exposed pays nothing. After a restart the times
//! are not known: data exposed when the volume opened counts from the open,
//! and [`Exposure::oldest_at_open`] says the true age is longer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::extent::{Mapping, Written, SECTOR};
use super::geometry::Tier;
use super::Volume;
use crate::clock::Clock;

/// Sectors in a 4 KiB block.
const SECTORS_PER_BLOCK: u64 = 8;

/// Bytes in a block.
const BLOCK: u64 = SECTORS_PER_BLOCK * SECTOR;

/// Shards of [`Since`]: enough that the writers that expose extents rarely
/// meet on one.
const SHARDS: usize = 16;

/// How much data has its only copy on the SSD ([`Volume::exposure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exposure {
    /// Bytes whose only copy is on the SSD.
    pub bytes: u64,
    /// How long ago the oldest of them became SSD-only, on the volume's
    /// clock; `None` when nothing is.
    pub oldest: Option<Duration>,
    /// The oldest was already SSD-only when the volume opened: its time is
    /// not kept across a restart, so `oldest` counts from the open and the
    /// true age is longer.
    pub oldest_at_open: bool,
}

/// Blocks of `blocks` written in `written` and set in `stale` (both
/// bitmaps word by word: no walk over the blocks).
pub(crate) fn written_and_stale(written: &Written, stale: &Written, blocks: u32) -> u64 {
    let words = (blocks as usize).div_ceil(64);
    let word = |w: &Written, i: usize| -> u64 {
        match w {
            Written::Full => u64::MAX,
            Written::Partial(v) => v.get(i).copied().unwrap_or(0),
        }
    };
    (0..words)
        .map(|i| {
            let mask = if i + 1 == words && !blocks.is_multiple_of(64) {
                (1u64 << (blocks % 64)) - 1
            } else {
                u64::MAX
            };
            u64::from((word(written, i) & word(stale, i) & mask).count_ones())
        })
        .sum()
}

/// [`ssd_only_sectors_with`], counting the stale blocks itself.
#[cfg(test)]
fn ssd_only_sectors(m: &Mapping, blocks: u32) -> u64 {
    let stale = m
        .shadow
        .as_ref()
        .map_or(0, |s| written_and_stale(&m.written, &s.stale, blocks));
    ssd_only_sectors_with(m, blocks, stale)
}

/// The 512-byte sectors of `m` whose only copy is on the SSD (see the
/// module's documentation), given `stale`: how many of `m`'s written blocks
/// its shadow holds stale (0 without a shadow), which the map's counts
/// compute anyway.
pub(crate) fn ssd_only_sectors_with(m: &Mapping, blocks: u32, stale: u64) -> u64 {
    match m.loc.tier {
        Tier::Ssd => match &m.shadow {
            None => u64::from(m.written.count(blocks)) * SECTORS_PER_BLOCK,
            Some(_) => stale * SECTORS_PER_BLOCK,
        },
        Tier::Hdd => m
            .logged
            .iter()
            .map(|l| u64::from(l.sectors.count_ones()))
            .sum(),
    }
}

/// Bytes of `sectors` sectors.
pub(crate) fn sector_bytes(sectors: u64) -> u64 {
    sectors * SECTOR
}

/// Per exposed extent: the clock time (ns) it became exposed, and whether
/// it was so when the volume opened.
type Shard = Mutex<HashMap<u64, (u64, bool)>>;

/// When each exposed extent became exposed.
pub(crate) struct Since {
    shards: Box<[Shard]>,
    clock: Arc<dyn Clock>,
    /// The volume is loading its map: what is exposed now was before.
    loading: AtomicBool,
}

impl Since {
    /// An empty record on `clock`, loading until [`Since::loaded`].
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Since {
        Since {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            clock,
            loading: AtomicBool::new(true),
        }
    }

    fn shard(&self, extent: u64) -> &Shard {
        &self.shards[extent as usize % SHARDS]
    }

    /// The map is loaded: exposures from now on are new writes.
    pub(crate) fn loaded(&self) {
        self.loading.store(false, Ordering::Release);
    }

    /// `extent` has data only on the SSD from now (it had none); called
    /// under the extent's exclusive lock.
    pub(crate) fn exposed(&self, extent: u64) {
        let at = self.clock.now().as_nanos() as u64;
        let at_open = self.loading.load(Ordering::Acquire);
        self.shard(extent).lock().insert(extent, (at, at_open));
    }

    /// `extent` has no data only on the SSD any more; called under the
    /// extent's exclusive lock.
    pub(crate) fn covered(&self, extent: u64) {
        self.shard(extent).lock().remove(&extent);
    }

    /// How long ago the oldest exposure began, and whether it began when
    /// the volume opened; `None` without one.
    pub(crate) fn oldest(&self) -> Option<(Duration, bool)> {
        // At equal times an exposure from the open ranks first: its true
        // age is longer.
        let (at, not_at_open) = self
            .shards
            .iter()
            .filter_map(|s| s.lock().values().map(|(t, o)| (*t, !*o)).min())
            .min()?;
        let age = self.clock.now().saturating_sub(Duration::from_nanos(at));
        Some((age, !not_at_open))
    }

    /// Extents exposed for at least `age`, oldest first, at most `max`;
    /// with the oldest's age.
    pub(crate) fn older_than(&self, age: Duration, max: usize) -> Vec<(u64, Duration)> {
        let now = self.clock.now().as_nanos() as u64;
        let age = age.as_nanos() as u64;
        let mut out: Vec<(u64, u64)> = Vec::new();
        for s in self.shards.iter() {
            out.extend(
                s.lock()
                    .iter()
                    .filter(|(_, (at, _))| now.saturating_sub(*at) >= age)
                    .map(|(e, (at, _))| (*e, *at)),
            );
        }
        if out.len() > max {
            out.select_nth_unstable_by_key(max, |(e, at)| (*at, *e));
            out.truncate(max);
        }
        out.sort_unstable_by_key(|(e, at)| (*at, *e));
        out.into_iter()
            .map(|(e, at)| (e, Duration::from_nanos(now.saturating_sub(at))))
            .collect()
    }

    /// Extents recorded as exposed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

impl Volume {
    /// How much data has its only copy on the SSD, and how long ago the
    /// oldest of it became so (no scan of the map for the bytes; the age
    /// looks at the exposed extents only).
    pub fn exposure(&self) -> Exposure {
        let bytes = sector_bytes(self.map.counts().ssd_only_sectors);
        let oldest = if bytes > 0 {
            self.map.exposed_since().oldest()
        } else {
            None
        };
        Exposure {
            bytes,
            oldest: oldest.map(|(age, _)| age),
            oldest_at_open: oldest.is_some_and(|(_, at_open)| at_open),
        }
    }
}

/// Byte ranges of the volume whose newest data is only on the SSD
/// ([`Volume::ssd_only_ranges`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SsdOnlyRanges {
    /// `(offset, len)` runs, in order, at most the number asked for.
    pub runs: Vec<(u64, u64)>,
    /// Bytes in every run of the range asked about, listed or not.
    pub bytes: u64,
    /// More runs than were asked for: `runs` stops early.
    pub truncated: bool,
}

/// Whether block `b` of `m` has its newest data only on the SSD (a block
/// logged in part counts whole).
fn ssd_only_block(m: &Mapping, b: u32) -> bool {
    match m.loc.tier {
        Tier::Ssd => m.written.get(b) && m.shadow.as_ref().is_none_or(|s| s.stale.get(b)),
        Tier::Hdd => m.logged_entry(b).is_some(),
    }
}

impl Volume {
    /// The byte ranges of `offset..offset + len` whose newest data is only
    /// on the SSD, in 4 KiB blocks (a block logged in part counts whole):
    /// what an SSD failure loses (reads of them get EIO once it has
    /// failed). At most `max_runs` runs are listed; the byte count covers
    /// the whole range. Walks the mappings of the range.
    pub fn ssd_only_ranges(&self, offset: u64, len: u64, max_runs: usize) -> SsdOnlyRanges {
        let es = self.geo.extent_size;
        let bpe = self.geo.blocks_per_extent();
        let end = offset.saturating_add(len).min(self.size());
        let mut out = SsdOnlyRanges::default();
        if offset >= end {
            return out;
        }
        let mut run: Option<(u64, u64)> = None;
        let push = |out: &mut SsdOnlyRanges, r: (u64, u64)| {
            if out.runs.len() < max_runs {
                out.runs.push(r);
            } else {
                out.truncated = true;
            }
        };
        for e in offset / es..end.div_ceil(es) {
            let Some(m) = self.mapping(e) else {
                continue;
            };
            for b in 0..bpe {
                let lo = (e * es + u64::from(b) * BLOCK).max(offset);
                let hi = (e * es + u64::from(b + 1) * BLOCK).min(end);
                if lo >= hi || !ssd_only_block(&m, b) {
                    continue;
                }
                out.bytes += hi - lo;
                run = match run {
                    Some((at, n)) if at + n == lo => Some((at, n + hi - lo)),
                    Some(r) => {
                        push(&mut out, r);
                        Some((lo, hi - lo))
                    }
                    None => Some((lo, hi - lo)),
                };
            }
        }
        if let Some(r) = run {
            push(&mut out, r);
        }
        out
    }

    /// The exposure bound's work list (`durability.ssd-exposure`): the
    /// exposed extents a copy can cover now, oldest first, at most `max`,
    /// each with how long it has been exposed and whether it lives on the
    /// HDD (its logged blocks go back) or on the SSD (a stale copy is
    /// brought up to date; one without a copy gets one only with
    /// `new_copies`, the HDD having a slot to spare). Extents that cannot be
    /// covered are left out before the list is cut, so they never crowd out
    /// those that can.
    pub fn exposed_to_cover(&self, new_copies: bool, max: usize) -> Vec<(u64, Duration, Tier)> {
        if self.map.counts().ssd_only_sectors == 0 {
            return Vec::new();
        }
        let all = self
            .map
            .exposed_since()
            .older_than(Duration::ZERO, usize::MAX);
        let mut out = Vec::with_capacity(all.len().min(max));
        for (e, age) in all {
            if out.len() >= max {
                break;
            }
            let Some(lock) = self.map.get(e) else {
                continue;
            };
            let tier = match lock.read().as_ref() {
                Some(m) if m.loc.tier == Tier::Hdd && !m.logged.is_empty() => Tier::Hdd,
                Some(m) if m.loc.tier == Tier::Ssd && (m.shadow.is_some() || new_copies) => {
                    Tier::Ssd
                }
                _ => continue,
            };
            out.push((e, age, tier));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::volume::extent::{Loc, LogPos, Logged, Shadow};

    fn on(tier: Tier, written: Written) -> Mapping {
        Mapping::plain(Loc { tier, slot: 0 }, written)
    }

    #[test]
    fn what_counts_as_ssd_only() {
        let blocks = 100;
        // On the SSD without a copy: every written block.
        assert_eq!(ssd_only_sectors(&on(Tier::Ssd, Written::Full), blocks), 800);
        let mut some = Written::empty(blocks);
        some.set_range(3, 7, true, blocks);
        assert_eq!(ssd_only_sectors(&on(Tier::Ssd, some.clone()), blocks), 40);
        // On the HDD with nothing logged: nothing.
        assert_eq!(ssd_only_sectors(&on(Tier::Hdd, Written::Full), blocks), 0);
        // With a shadow: the written blocks it holds stale.
        let mut m = on(Tier::Ssd, some.clone());
        m.shadow = Some(Shadow {
            slot: 1,
            stale: Written::empty(blocks),
        });
        assert_eq!(ssd_only_sectors(&m, blocks), 0, "a clean shadow");
        let mut stale = Written::empty(blocks);
        stale.set_range(6, 70, true, blocks);
        m.shadow = Some(Shadow { slot: 1, stale });
        assert_eq!(ssd_only_sectors(&m, blocks), 2 * 8, "blocks 6 and 7");
        m.written = Written::Full;
        assert_eq!(ssd_only_sectors(&m, blocks), 65 * 8);
        m.shadow = Some(Shadow {
            slot: 1,
            stale: Written::Full,
        });
        assert_eq!(ssd_only_sectors(&m, blocks), 800, "every block stale");
        // Logged blocks of an HDD extent, by the sectors the log holds.
        let mut h = on(Tier::Hdd, Written::Full);
        let at = LogPos { slot: 2, index: 0 };
        h.logged = vec![
            Logged::whole(1, at),
            Logged {
                block: 4,
                at,
                sectors: 0b0000_0110,
            },
        ];
        assert_eq!(ssd_only_sectors(&h, blocks), 10);
        assert_eq!(sector_bytes(10), 5120);
    }

    #[test]
    fn the_oldest_exposure_is_kept_until_it_is_covered() {
        let clock = Arc::new(ManualClock::new());
        let since = Since::new(clock.clone());
        since.exposed(7);
        since.loaded();
        assert_eq!(since.oldest(), Some((Duration::ZERO, true)));
        clock.advance(Duration::from_secs(5));
        since.exposed(3);
        clock.advance(Duration::from_secs(2));
        assert_eq!(since.oldest(), Some((Duration::from_secs(7), true)));
        since.covered(7);
        assert_eq!(since.oldest(), Some((Duration::from_secs(2), false)));
        since.exposed(9);
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            since.older_than(Duration::from_secs(1), 10),
            vec![(3, Duration::from_secs(3)), (9, Duration::from_secs(1))]
        );
        assert_eq!(since.older_than(Duration::from_secs(2), 10).len(), 1);
        assert_eq!(
            since.older_than(Duration::ZERO, 1),
            vec![(3, Duration::from_secs(3))]
        );
        since.covered(9);
        since.covered(3);
        assert_eq!(since.oldest(), None);
        assert_eq!(since.len(), 0);
    }
}
