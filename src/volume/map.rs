//! The extent map in memory: one packed word per logical extent behind the
//! extent's own lock, a side table for the mappings a word cannot hold, and
//! the counts and the SSD's owners kept as the map changes.
//!
//! Most mapped extents are *plain*: every block written, no second copy, no
//! logged blocks. Tier and slot then fit in a word, which shares its eight
//! bytes with the extent's generation counter, so an extent costs twelve
//! bytes (its four-byte lock, [`super::lock`], and its word) however large
//! the volume. A mapping that is plain but for one run of written blocks
//! (an extent with one write in it, or written from one point on) keeps
//! that run in the run table ([`super::runs`]: eight bytes an entry where
//! few extents have one, four bytes an extent where many do). A mapping with any
//! other written-block bitmap, a shadow or logged blocks lives in the side
//! table, sharded by extent, and its word says which: what costs more is
//! what is used. A never-written extent costs its twelve bytes and nothing
//! else.
//!
//! The guards keep the old interface of a lock over an `Option<Mapping>`:
//! a read guard lends the mapping (decoded from the word, or shared with the
//! side table without a copy); a write guard owns it while held and stores
//! it back, re-packed, when dropped, still under the lock. The store-back
//! also keeps the usage counts [`Volume::usage`](super::Volume::usage)
//! reports, the data only on the SSD and since when each extent has had
//! some ([`super::exposure`]), and the owner of every SSD slot, so none of
//! them needs a scan of the volume.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::exposure::{ssd_only_sectors_with, written_and_stale, Since};
use super::extent::{Loc, Mapping, Written};
use super::geometry::Tier;
use super::lock::{RawLock, ReadGuard, WriteGuard};
use super::runs::RunTable;
use crate::clock::Clock;

/// The low 32 bits: the slot.
const SLOT_MASK: u64 = 0xffff_ffff;
/// Set for an HDD slot.
const HDD: u64 = 1 << 32;
/// Set for a mapped extent.
const MAPPED: u64 = 1 << 33;
/// Set when the mapping is in the side table.
const EXTRA: u64 = 1 << 34;
/// Set when the mapping is plain but for its written blocks, which are
/// one run, kept in the run table.
const RUN: u64 = 1 << 35;
/// The bits that say where the extent is (the rest is its generation).
const MAPPING_MASK: u64 = (1 << GEN_SHIFT) - 1;
/// The generation's first bit.
const GEN_SHIFT: u32 = 40;
/// One generation step.
const GEN_ONE: u64 = 1 << GEN_SHIFT;

/// Side-table shards: enough that the I/O threads rarely meet on one.
const SHARDS: usize = 64;

/// A side-table entry: the mapping, shared with the read guards that lend
/// it (an `Option` so that a guard can lend it as the lock's old content).
type Shared = Arc<Option<Mapping>>;

/// Usage counts, kept as mappings change.
#[derive(Default)]
struct Counts {
    mapped: [AtomicI64; 2],
    logged: AtomicI64,
    shadows: AtomicI64,
    shadow_clean: AtomicI64,
    shadow_stale: AtomicI64,
    clean_extents: AtomicI64,
    ssd_only: AtomicI64,
}

/// What one mapping adds to [`Counts`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    mapped: [i64; 2],
    logged: i64,
    shadows: i64,
    shadow_clean: i64,
    shadow_stale: i64,
    /// An SSD extent whose shadow holds every written block: it leaves by
    /// a mapping change.
    clean_extents: i64,
    /// Sectors whose only copy is on the SSD.
    ssd_only: i64,
}

impl Tally {
    fn of(m: Option<&Mapping>, blocks: u32) -> Tally {
        let Some(m) = m else {
            return Tally::default();
        };
        let mut t = Tally::default();
        t.mapped[m.loc.tier.index()] = 1;
        t.logged = m.logged.len() as i64;
        // Written blocks the shadow holds stale, counted once for the
        // shadow counts and the exposure alike (word by word).
        let stale = m
            .shadow
            .as_ref()
            .map_or(0, |s| written_and_stale(&m.written, &s.stale, blocks));
        if m.shadow.is_some() {
            t.shadows = 1;
            let written = i64::from(m.written.count(blocks));
            t.shadow_stale = stale as i64;
            t.shadow_clean = written - stale as i64;
            t.clean_extents = i64::from(stale == 0);
        }
        t.ssd_only = ssd_only_sectors_with(m, blocks, stale) as i64;
        t
    }
}

/// The usage counts of a map (see [`super::Usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MapCounts {
    pub(crate) mapped: [u64; 2],
    pub(crate) logged: u64,
    pub(crate) shadows: u64,
    pub(crate) shadow_clean: u64,
    pub(crate) shadow_stale: u64,
    /// SSD extents whose shadow is clean.
    pub(crate) clean_extents: u64,
    /// Sectors (512 bytes) whose only copy is on the SSD.
    pub(crate) ssd_only_sectors: u64,
}

/// The extent map of a volume.
pub(crate) struct ExtentMap {
    /// Per extent: its lock, which guards the mapping bits of its word.
    locks: Box<[RawLock]>,
    /// Per extent: its word (mapping and generation); the generation
    /// changes under the shared lock too, by atomic adds. Apart from the
    /// locks so that neither pads the other.
    words: Box<[AtomicU64]>,
    extras: Box<[Mutex<HashMap<u64, Shared>>]>,
    /// The written run of each [`RUN`] extent, `first | length << 16`
    /// (an extent with one write in it, the most common partial extent: a
    /// filesystem's metadata block, one block per extent of a scattered
    /// fill; in the side table it cost about 160 bytes).
    runs: RunTable,
    /// Per SSD slot: the extent mapped there, plus one (0: none).
    ssd_owner: Box<[AtomicU64]>,
    counts: Counts,
    /// Since when each extent has had data only on the SSD.
    since: Since,
    blocks: u32,
}

/// Where a mapping's word sends the rest of it.
enum Form {
    /// Nowhere: the word holds it all (or the extent is unmapped).
    Word,
    /// The run table holds its written run.
    Run(u32),
    /// The side table holds it.
    Extra,
}

/// The word of a mapping: its place, and where the rest of it is (plain:
/// in the word; plain but for one run of written blocks: the run table;
/// anything else: the side table).
fn pack(m: &Mapping) -> (u64, Form) {
    let tier = if m.loc.tier == Tier::Hdd { HDD } else { 0 };
    let word = MAPPED | tier | u64::from(m.loc.slot);
    if m.shadow.is_some() || !m.logged.is_empty() {
        return (word | EXTRA, Form::Extra);
    }
    if matches!(m.written, Written::Full) {
        return (word, Form::Word);
    }
    match m.written.one_run() {
        // Never 0 in the table: no blocks written is 0xffff (no run
        // starts there with length 0 otherwise), which decodes as none.
        Some((_, 0)) => (word | RUN, Form::Run(0xffff)),
        Some((first, len)) if first <= 0xffff && len <= 0xffff => {
            (word | RUN, Form::Run(first | len << 16))
        }
        _ => (word | EXTRA, Form::Extra),
    }
}

/// The mapping a word holds by itself (mapped, not in the side table).
fn unpack(word: u64) -> Mapping {
    let tier = if word & HDD != 0 {
        Tier::Hdd
    } else {
        Tier::Ssd
    };
    Mapping::plain(
        Loc {
            tier,
            slot: (word & SLOT_MASK) as u32,
        },
        Written::Full,
    )
}

impl ExtentMap {
    /// An empty map of `extents` extents with `blocks` blocks each, over an
    /// SSD of `ssd_slots` slots, timing exposures on `clock` (every one
    /// counted as from the open until [`ExtentMap::loaded`]).
    pub(crate) fn new(
        extents: u64,
        ssd_slots: u32,
        blocks: u32,
        clock: Arc<dyn Clock>,
    ) -> ExtentMap {
        ExtentMap {
            locks: (0..extents).map(|_| RawLock::new()).collect(),
            words: (0..extents).map(|_| AtomicU64::new(0)).collect(),
            extras: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            runs: RunTable::new(extents),
            ssd_owner: (0..ssd_slots).map(|_| AtomicU64::new(0)).collect(),
            counts: Counts::default(),
            since: Since::new(clock),
            blocks,
        }
    }

    /// The map is loaded: data exposed from now on was written now.
    pub(crate) fn loaded(&self) {
        self.since.loaded();
    }

    /// Since when the exposed extents have been exposed.
    pub(crate) fn exposed_since(&self) -> &Since {
        &self.since
    }

    /// Extents in the map.
    pub(crate) fn len(&self) -> u64 {
        self.words.len() as u64
    }

    fn shard(&self, extent: u64) -> &Mutex<HashMap<u64, Shared>> {
        &self.extras[extent as usize % SHARDS]
    }

    /// The mapping of a [`RUN`] word, its run looked up (left in the
    /// table: a write guard's store-back overwrites it, or takes it out if
    /// the mapping no longer has one run).
    fn run_mapping(&self, extent: u64, word: u64) -> Option<Mapping> {
        let run = self.runs.get(extent)?;
        let mut m = unpack(word);
        m.written = Written::of_run(run & 0xffff, run >> 16, self.blocks);
        Some(m)
    }

    /// The lock of `extent`, if it is in the map.
    pub(crate) fn get(&self, extent: u64) -> Option<ExtentLock<'_>> {
        let i = usize::try_from(extent).ok()?;
        Some(ExtentLock {
            map: self,
            extent,
            lock: self.locks.get(i)?,
            word: self.words.get(i)?,
        })
    }

    /// The lock of `extent`, which the caller checked is in range.
    pub(crate) fn at(&self, extent: u64) -> ExtentLock<'_> {
        self.get(extent).unwrap_or_else(|| {
            panic!(
                "extent {extent} is beyond the map's {} (callers pass checked extents)",
                self.len()
            )
        })
    }

    /// The extent's generation: bumped before (and for writes under the
    /// shared lock, after) every change of its data or mapping, so that a
    /// migration can tell whether its copy is still current.
    pub(crate) fn gen(&self, extent: u64) -> Option<u32> {
        let word = self.words.get(extent as usize)?;
        Some((word.load(Ordering::Acquire) >> GEN_SHIFT) as u32)
    }

    /// Where `extent` is mapped, without its lock (one atomic load: a
    /// place changes only under the extent's exclusive lock, and the word
    /// holds it for side-table mappings too).
    pub(crate) fn loc(&self, extent: u64) -> Option<Loc> {
        let w = self.words.get(extent as usize)?.load(Ordering::Acquire);
        (w & MAPPED != 0).then_some(Loc {
            tier: if w & HDD != 0 { Tier::Hdd } else { Tier::Ssd },
            slot: (w & SLOT_MASK) as u32,
        })
    }

    /// The tier `extent` is mapped on, without its lock ([`Self::loc`]).
    pub(crate) fn tier(&self, extent: u64) -> Option<Tier> {
        self.loc(extent).map(|l| l.tier)
    }

    /// Bump `extent`'s generation (the add leaves the mapping bits alone,
    /// so it needs no lock of its own).
    pub(crate) fn bump(&self, extent: u64) {
        if let Some(word) = self.words.get(extent as usize) {
            word.fetch_add(GEN_ONE, Ordering::AcqRel);
        }
    }

    /// The usage counts.
    pub(crate) fn counts(&self) -> MapCounts {
        let get = |a: &AtomicI64| a.load(Ordering::Relaxed).max(0) as u64;
        MapCounts {
            mapped: [get(&self.counts.mapped[0]), get(&self.counts.mapped[1])],
            logged: get(&self.counts.logged),
            shadows: get(&self.counts.shadows),
            shadow_clean: get(&self.counts.shadow_clean),
            shadow_stale: get(&self.counts.shadow_stale),
            clean_extents: get(&self.counts.clean_extents),
            ssd_only_sectors: get(&self.counts.ssd_only),
        }
    }

    /// The extents on the SSD, in slot order (each once).
    pub(crate) fn ssd_extents(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .ssd_owner
            .iter()
            .filter_map(|o| match o.load(Ordering::Acquire) {
                0 => None,
                e => Some(e - 1),
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The extents whose mappings are in the side table.
    pub(crate) fn extra_extents(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .extras
            .iter()
            .flat_map(|s| s.lock().keys().copied().collect::<Vec<_>>())
            .collect();
        out.sort_unstable();
        out
    }

    /// Account for `extent` changing from `old` to `new`.
    fn account(&self, extent: u64, old: (Tally, Option<Loc>), new: (Tally, Option<Loc>)) {
        let c = &self.counts;
        let d = |a: &AtomicI64, o: i64, n: i64| {
            if o != n {
                a.fetch_add(n - o, Ordering::Relaxed);
            }
        };
        let ((o, ol), (n, nl)) = (old, new);
        d(&c.mapped[0], o.mapped[0], n.mapped[0]);
        d(&c.mapped[1], o.mapped[1], n.mapped[1]);
        d(&c.logged, o.logged, n.logged);
        d(&c.shadows, o.shadows, n.shadows);
        d(&c.shadow_clean, o.shadow_clean, n.shadow_clean);
        d(&c.shadow_stale, o.shadow_stale, n.shadow_stale);
        d(&c.clean_extents, o.clean_extents, n.clean_extents);
        d(&c.ssd_only, o.ssd_only, n.ssd_only);
        match (o.ssd_only > 0, n.ssd_only > 0) {
            (false, true) => self.since.exposed(extent),
            (true, false) => self.since.covered(extent),
            _ => {}
        }
        if ol == nl {
            return;
        }
        let me = extent + 1;
        if let Some(Loc {
            tier: Tier::Ssd,
            slot,
        }) = ol
        {
            if let Some(o) = self.ssd_owner.get(slot as usize) {
                // Only if still ours: the slot's next owner may have come
                // first (its lock is another extent's).
                let _ = o.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
        if let Some(Loc {
            tier: Tier::Ssd,
            slot,
        }) = nl
        {
            if let Some(o) = self.ssd_owner.get(slot as usize) {
                o.store(me, Ordering::Release);
            }
        }
    }
}

/// The lock of one extent, with the read and write guards of the old
/// `RwLock<Option<Mapping>>`.
#[derive(Clone, Copy)]
pub(crate) struct ExtentLock<'a> {
    map: &'a ExtentMap,
    extent: u64,
    lock: &'a RawLock,
    word: &'a AtomicU64,
}

impl<'a> ExtentLock<'a> {
    /// Wait for the shared lock.
    pub(crate) fn read(self) -> MapRead<'a> {
        self.lend(self.lock.read())
    }

    /// The shared lock if it is free of writers now.
    pub(crate) fn try_read(self) -> Option<MapRead<'a>> {
        self.lock.try_read().map(|g| self.lend(g))
    }

    /// Wait for the exclusive lock.
    pub(crate) fn write(self) -> MapWrite<'a> {
        self.own(self.lock.write())
    }

    /// The exclusive lock if it is free now.
    pub(crate) fn try_write(self) -> Option<MapWrite<'a>> {
        self.lock.try_write().map(|g| self.own(g))
    }

    fn lend(self, g: ReadGuard<'a>) -> MapRead<'a> {
        let word = self.word.load(Ordering::Acquire);
        let held = if word & MAPPED == 0 {
            Held::Inline(None)
        } else if word & RUN != 0 {
            Held::Inline(self.map.run_mapping(self.extent, word))
        } else if word & EXTRA == 0 {
            Held::Inline(Some(unpack(word)))
        } else {
            match self.map.shard(self.extent).lock().get(&self.extent) {
                Some(m) => Held::Shared(m.clone()),
                None => Held::Inline(None),
            }
        };
        MapRead { held, _lock: g }
    }

    fn own(self, g: WriteGuard<'a>) -> MapWrite<'a> {
        let word = self.word.load(Ordering::Acquire);
        let value = if word & MAPPED == 0 {
            None
        } else if word & RUN != 0 {
            self.map.run_mapping(self.extent, word)
        } else if word & EXTRA == 0 {
            Some(unpack(word))
        } else {
            let taken = self.map.shard(self.extent).lock().remove(&self.extent);
            // Readers drop their share before their lock: ours is the last
            // (a clone only if one was still on its way out).
            taken.and_then(|m| Arc::try_unwrap(m).unwrap_or_else(|m| (*m).clone()))
        };
        let blocks = self.map.blocks;
        let old = (
            Tally::of(value.as_ref(), blocks),
            value.as_ref().map(|m| m.loc),
        );
        MapWrite {
            map: self.map,
            extent: self.extent,
            value,
            old,
            changed: false,
            word: self.word,
            _lock: g,
        }
    }
}

enum Held {
    Inline(Option<Mapping>),
    Shared(Shared),
}

/// An extent's mapping under its shared lock.
pub(crate) struct MapRead<'a> {
    // Dropped before the lock, so a writer that comes next finds the side
    // table's entry unshared.
    held: Held,
    _lock: ReadGuard<'a>,
}

impl Deref for MapRead<'_> {
    type Target = Option<Mapping>;

    fn deref(&self) -> &Option<Mapping> {
        match &self.held {
            Held::Inline(m) => m,
            Held::Shared(m) => m,
        }
    }
}

/// An extent's mapping under its exclusive lock, stored back (packed, and
/// accounted) when the guard is dropped.
pub(crate) struct MapWrite<'a> {
    map: &'a ExtentMap,
    extent: u64,
    value: Option<Mapping>,
    old: (Tally, Option<Loc>),
    /// Lent mutably since taken (stored back even if unchanged).
    changed: bool,
    word: &'a AtomicU64,
    _lock: WriteGuard<'a>,
}

impl Deref for MapWrite<'_> {
    type Target = Option<Mapping>;

    fn deref(&self) -> &Option<Mapping> {
        &self.value
    }
}

impl DerefMut for MapWrite<'_> {
    fn deref_mut(&mut self) -> &mut Option<Mapping> {
        self.changed = true;
        &mut self.value
    }
}

impl Drop for MapWrite<'_> {
    fn drop(&mut self) {
        let value = self.value.take();
        let (word, form) = value.as_ref().map_or((0, Form::Word), pack);
        if self.changed {
            let new = (
                Tally::of(value.as_ref(), self.map.blocks),
                value.as_ref().map(|m| m.loc),
            );
            self.map.account(self.extent, self.old, new);
        }
        if !matches!(form, Form::Run(_)) && self.word.load(Ordering::Acquire) & RUN != 0 {
            // It had one run and has not now: out of the table (the word,
            // still the old one, is ours to read under the write lock).
            let _ = self.map.runs.take(self.extent);
        }
        match form {
            Form::Word => {}
            Form::Run(run) => {
                // In range: the map and the table cover the same extents.
                let _ = self.map.runs.insert(self.extent, run);
            }
            Form::Extra => {
                self.map
                    .shard(self.extent)
                    .lock()
                    .insert(self.extent, Arc::new(value));
            }
        }
        // Keep the generation, which may be bumped meanwhile; the mapping
        // bits change only under the exclusive lock, which we hold.
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some((w & !MAPPING_MASK) | word)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::volume::extent::Shadow;

    fn clock() -> Arc<dyn Clock> {
        Arc::new(ManualClock::new())
    }

    fn loc(tier: Tier, slot: u32) -> Loc {
        Loc { tier, slot }
    }

    #[test]
    fn an_extent_costs_twelve_bytes() {
        let map = ExtentMap::new(1000, 1, 256, clock());
        let per_extent = std::mem::size_of_val(&*map.locks) + std::mem::size_of_val(&*map.words);
        assert_eq!(per_extent, 12 * 1000);
    }

    #[test]
    fn plain_mappings_stay_in_the_word_one_runs_in_the_run_table_and_others_in_the_side_table() {
        let map = ExtentMap::new(8, 4, 256, clock());
        assert_eq!(*map.at(3).read(), None);
        *map.at(3).write() = Some(Mapping::plain(loc(Tier::Hdd, 7), Written::Full));
        assert!(map.extra_extents().is_empty(), "a plain mapping packs");
        assert_eq!(
            *map.at(3).read(),
            Some(Mapping::plain(loc(Tier::Hdd, 7), Written::Full))
        );
        // One run of written blocks: the run table, not the side table.
        let mut partial = Written::empty(256);
        partial.set_range(0, 9, true, 256);
        let m = Mapping::plain(loc(Tier::Ssd, 2), partial.clone());
        *map.at(5).write() = Some(m.clone());
        assert!(map.extra_extents().is_empty(), "one run packs beside");
        assert_eq!(map.runs.len(), 1);
        assert_eq!(*map.at(5).read(), Some(m.clone()));
        // A write guard taken and dropped unchanged keeps it.
        drop(map.at(5).write());
        assert_eq!(*map.at(5).read(), Some(m));
        // A second run: the side table.
        partial.set_range(20, 20, true, 256);
        let m = Mapping::plain(loc(Tier::Ssd, 2), partial);
        *map.at(5).write() = Some(m.clone());
        assert_eq!(map.extra_extents(), vec![5]);
        assert_eq!(map.runs.len(), 0);
        assert_eq!(*map.at(5).read(), Some(m));
        // Nothing written at all, and a run ending the extent.
        let empty = Mapping::plain(loc(Tier::Hdd, 1), Written::empty(256));
        *map.at(6).write() = Some(empty.clone());
        assert_eq!(*map.at(6).read(), Some(empty));
        assert_eq!(map.extra_extents(), vec![5], "no blocks written packs too");
        assert_eq!(map.runs.len(), 1);
        let tail = Mapping::plain(loc(Tier::Hdd, 1), Written::of_run(200, 56, 256));
        *map.at(6).write() = Some(tail.clone());
        assert_eq!(*map.at(6).read(), Some(tail));
        assert_eq!(map.extra_extents(), vec![5]);
        assert_eq!(
            (map.tier(5), map.tier(3), map.tier(4)),
            (Some(Tier::Ssd), Some(Tier::Hdd), None)
        );
        // Written in full, it packs again and leaves the side table.
        if let Some(m) = map.at(5).write().as_mut() {
            m.written.set_range(0, 255, true, 256);
        }
        assert!(map.extra_extents().is_empty());
        assert_eq!(
            *map.at(5).read(),
            Some(Mapping::plain(loc(Tier::Ssd, 2), Written::Full))
        );
        *map.at(5).write() = None;
        *map.at(6).write() = None;
        assert_eq!(map.runs.len(), 0);
        assert_eq!(*map.at(5).read(), None);
    }

    #[test]
    fn counts_and_ssd_owners_follow_every_change() {
        let map = ExtentMap::new(8, 4, 4, clock());
        *map.at(1).write() = Some(Mapping::plain(loc(Tier::Ssd, 0), Written::Full));
        *map.at(2).write() = Some(Mapping::plain(loc(Tier::Hdd, 0), Written::Full));
        let mut stale = Written::empty(4);
        stale.set_range(1, 1, true, 4);
        *map.at(4).write() = Some(Mapping {
            loc: loc(Tier::Ssd, 3),
            written: Written::Full,
            shadow: Some(Shadow { slot: 5, stale }),
            logged: Vec::new(),
        });
        let c = map.counts();
        assert_eq!(c.mapped, [2, 1]);
        assert_eq!((c.shadows, c.shadow_clean, c.shadow_stale), (1, 3, 1));
        assert_eq!(map.ssd_extents(), vec![1, 4]);
        // Extent 1 leaves slot 0 for the HDD; extent 6 takes slot 0 first.
        *map.at(6).write() = Some(Mapping::plain(loc(Tier::Ssd, 0), Written::Full));
        *map.at(1).write() = Some(Mapping::plain(loc(Tier::Hdd, 1), Written::Full));
        assert_eq!(map.ssd_extents(), vec![4, 6], "the new owner keeps it");
        *map.at(4).write() = None;
        let c = map.counts();
        assert_eq!(c.mapped, [1, 2]);
        assert_eq!((c.shadows, c.shadow_clean, c.shadow_stale), (0, 0, 0));
        assert_eq!(map.ssd_extents(), vec![6]);
    }

    #[test]
    fn ssd_only_data_and_its_time_follow_every_change() {
        let clock = Arc::new(ManualClock::new());
        let map = ExtentMap::new(8, 4, 4, clock.clone());
        *map.at(0).write() = Some(Mapping::plain(loc(Tier::Hdd, 0), Written::Full));
        map.loaded();
        assert_eq!(map.counts().ssd_only_sectors, 0);
        assert_eq!(map.exposed_since().oldest(), None);
        // New data on the SSD: exposed from now.
        clock.advance(std::time::Duration::from_secs(3));
        *map.at(1).write() = Some(Mapping::plain(loc(Tier::Ssd, 0), Written::Full));
        clock.advance(std::time::Duration::from_secs(4));
        assert_eq!(map.counts().ssd_only_sectors, 4 * 8);
        assert_eq!(
            map.exposed_since().oldest(),
            Some((std::time::Duration::from_secs(4), false))
        );
        // A clean HDD copy covers it; a write marking a block stale exposes
        // it again, from that write.
        let clean = Shadow {
            slot: 1,
            stale: Written::empty(4),
        };
        if let Some(m) = map.at(1).write().as_mut() {
            m.shadow = Some(clean);
        }
        assert_eq!(map.counts().ssd_only_sectors, 0);
        assert_eq!(map.exposed_since().oldest(), None);
        clock.advance(std::time::Duration::from_secs(10));
        if let Some(m) = map.at(1).write().as_mut() {
            if let Some(s) = m.shadow.as_mut() {
                s.stale.set_range(2, 2, true, 4);
            }
        }
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(map.counts().ssd_only_sectors, 8);
        // A later exposure does not make the oldest younger.
        *map.at(2).write() = Some(Mapping::plain(loc(Tier::Ssd, 2), Written::Full));
        assert_eq!(
            map.exposed_since().oldest(),
            Some((std::time::Duration::from_secs(1), false))
        );
        // Unmapped, it is gone; what is left is extent 2's.
        *map.at(1).write() = None;
        assert_eq!(map.counts().ssd_only_sectors, 4 * 8);
        assert_eq!(
            map.exposed_since().oldest(),
            Some((std::time::Duration::ZERO, false))
        );
    }

    #[test]
    fn a_bump_changes_the_generation_and_nothing_else() {
        let map = ExtentMap::new(2, 1, 256, clock());
        let m = Some(Mapping::plain(loc(Tier::Hdd, 9), Written::Full));
        *map.at(0).write() = m.clone();
        let g0 = map.gen(0);
        {
            let _held = map.at(0).read();
            map.bump(0);
        }
        assert_ne!(map.gen(0), g0);
        assert_eq!(*map.at(0).read(), m);
        // A store-back keeps the generation.
        let g1 = map.gen(0);
        *map.at(0).write() = None;
        assert_eq!(map.gen(0), g1);
        assert_eq!(map.gen(5), None);
    }
}
