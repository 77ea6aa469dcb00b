//! Heat: how often, and how densely, each extent is used.
//!
//! Memory and work follow the extents in use, not the volume's size: the
//! map keeps state only for the extents touched within its horizon (a
//! sparse table, [`table`]), and an extent whose score and recurrence have
//! decayed to zero, whose coverage windows are empty and which is idle is
//! forgotten at the next tick; an extent the map does not track reads as
//! never touched (score, recurrence and coverage 0, not in use). A cap
//! ([`HeatConfig::max_tracked`]) bounds the table: at a tick that finds more
//! entries than the cap, the coldest are dropped (see [`HeatMap::tick`]).
//!
//! On the I/O path recording costs, per extent a request touches, one short
//! lock of one of 64 shards, a hash lookup and a few bit operations; it
//! allocates only at an extent's first touch (or its first touch after its
//! coverage windows expired). A periodic [`HeatMap::tick`], whose cost
//! follows the entries in the table, folds the requests into an
//! exponentially decaying score (configurable half-life) and ages the block
//! bitmaps, so the policy sees, per extent, a score and a *coverage*: how
//! many distinct 4 KiB blocks were touched in the last one or two windows.
//! Dense activity (many blocks) predicts more reads nearby; one stray hot
//! block does not earn an extent a place on the SSD.
//!
//! It also keeps, per extent, when it was last touched (to the tick): an
//! extent untouched for [`HeatConfig::idle_after`] is *idle*, and idle data
//! gives way to data in use whatever their scores say. A score measures how
//! often an extent was used, but that rate depends on where it lived: a
//! working set on the SSD is read forty times as often as the same set on
//! the HDD, so frequency alone holds a new set back behind the old one for
//! minutes (issue "Placement that follows the user").
//!
//! Long sequential streams earn no heat at all (see [`IoHint`]): a backup or
//! a scan must not flush the SSD; [`stream`] works out, per connection,
//! which requests belong to such a stream.

use std::collections::hash_map;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::units::{ByteSize, InvalidKey};

pub mod stream;
mod table;

use crate::units::IoHint;
pub use stream::{StreamDetector, VolumeStreams};
use table::{Entry, Shard, Table, NO_BITS};

/// Heat knobs: the `[heat]` table of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct HeatConfig {
    /// Record heat at all (off: no promotion ever happens; for measuring
    /// what heat tracking costs).
    pub enabled: bool,
    /// Half-life of an extent's score.
    #[serde(with = "crate::units::duration_secs")]
    pub half_life: Duration,
    /// Length of a block-coverage window; coverage spans the current and the
    /// previous window.
    #[serde(with = "crate::units::duration_secs")]
    pub coverage_window: Duration,
    /// A stream longer than this many contiguous bytes is sequential: it earns
    /// no heat.
    pub sequential_cutoff: ByteSize,
    /// An extent not touched for this long is idle: it gives way to any
    /// extent in use, and its zone no longer counts as in use.
    #[serde(with = "crate::units::duration_secs")]
    pub idle_after: Duration,
    /// An extent used often is idle sooner: once it has gone this many of
    /// its own mean intervals between requests without one (its rate read
    /// from its score), though never before 2 s nor after `idle-after`. 0:
    /// every extent is idle after `idle-after`.
    pub idle_after_missed: f32,
    /// Extents whose heat is kept at most. An extent is tracked from its
    /// first touch until its heat has decayed away (about ten half-lives
    /// after its last touch); past the cap the coldest are forgotten at the
    /// next tick, idle extents before extents in use, lowest score first
    /// (`HeatMap::dropped` counts them). About 120 bytes per extent touched
    /// in the last two coverage windows (1 MiB extents) and 30 to 55 per
    /// extent whose heat only decays.
    pub max_tracked: u64,
}

/// The default of [`HeatConfig::max_tracked`]: 4 Mi extents, 4 TiB of
/// 1 MiB extents touched within a score's lifetime (minutes), more than an
/// SSD of a few TiB holds plus what an HDD's random reads reach meanwhile.
pub const DEFAULT_MAX_TRACKED: u64 = 4 << 20;

/// An extent is in use for at least this many ticks (seconds) after its
/// last touch, however often it was used: stamps are whole seconds, so one
/// silent stamp may be a request that fell just either side of a tick.
pub const MIN_IDLE_TICKS: u64 = 2;

impl Default for HeatConfig {
    fn default() -> Self {
        HeatConfig {
            enabled: true,
            half_life: Duration::from_secs(60),
            coverage_window: Duration::from_secs(60),
            sequential_cutoff: ByteSize(4 << 20),
            idle_after: Duration::from_secs(10),
            idle_after_missed: 10.0,
            max_tracked: DEFAULT_MAX_TRACKED,
        }
    }
}

impl HeatConfig {
    /// Check values that parse but make no sense; the error names the key
    /// (`heat.half-life`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        for (key, d) in [
            ("heat.half-life", self.half_life),
            ("heat.coverage-window", self.coverage_window),
            ("heat.idle-after", self.idle_after),
        ] {
            if d.is_zero() {
                return Err(InvalidKey::new(
                    key,
                    "half-life, coverage-window and idle-after must be above zero",
                ));
            }
        }
        if !(self.idle_after_missed.is_finite() && self.idle_after_missed >= 0.0) {
            return Err(InvalidKey::new(
                "heat.idle-after-missed",
                "must be a number of requests of 0 or more",
            ));
        }
        if !(1..=1 << 32).contains(&self.max_tracked) {
            return Err(InvalidKey::new(
                "heat.max-tracked",
                "must be between 1 and 4294967296 extents",
            ));
        }
        Ok(())
    }
}

/// One tracked extent's heat, as [`HeatMap::touched`] lists it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExtentHeat {
    /// Decayed score as of the last tick ([`HeatMap::score`]).
    pub score: f32,
    /// Decayed count of the distinct seconds with hits
    /// ([`HeatMap::recurrence`]).
    pub recurrence: f32,
    /// Distinct blocks touched in the coverage windows
    /// ([`HeatMap::coverage`]).
    pub coverage: u32,
    /// Touched within `idle-after` as of the last tick
    /// ([`HeatMap::is_active`]).
    pub active: bool,
}

/// Per-extent heat of a whole volume, kept for the extents in use.
pub struct HeatMap {
    cfg: HeatConfig,
    /// The sequential cutoff in force (bytes); starts at the
    /// configuration's and may change live.
    cutoff: AtomicU64,
    /// The entries.
    table: Table,
    /// Extents of the volume: touches past its end are ignored.
    extents: u64,
    /// Bitmap words per coverage window of one extent.
    words: usize,
    block_size: u64,
    extent_size: u64,
    /// Entries kept after a tick at most.
    max_tracked: usize,
    /// Entries in the table.
    tracked: AtomicUsize,
    /// Entries dropped, or not made, because the table was full.
    dropped: AtomicU64,
    /// Requests that earned no heat because they were sequential.
    bypassed: AtomicU64,
    /// Ticks so far.
    ticks: AtomicU64,
    /// Stamp of the last tick (whole seconds since `origin`, plus one).
    now: AtomicU32,
    times: Mutex<Times>,
}

struct Times {
    origin: Duration,
    last_tick: Duration,
    last_rotation: Duration,
}

/// A saved score.
type Saved = (u32, f32);

/// `old` decayed, plus `add`; tiny results are zero (so entries expire).
fn fold(old: f32, add: f32, decay: f32) -> f32 {
    let new = old * decay + add;
    if new < 1e-3 {
        0.0
    } else {
        new
    }
}

impl HeatMap {
    /// Heat for `extents` extents of `extent_size` bytes tracked per
    /// `block_size` block, starting at time `now`. Costs nothing per
    /// extent: entries are made as extents are touched.
    pub fn new(
        cfg: HeatConfig,
        extents: u64,
        extent_size: u64,
        block_size: u64,
        now: Duration,
    ) -> Self {
        let block_size = block_size.max(1);
        let words = ((extent_size / block_size) as usize).div_ceil(64).max(1);
        HeatMap {
            cutoff: AtomicU64::new(cfg.sequential_cutoff.0),
            max_tracked: usize::try_from(cfg.max_tracked.max(1)).unwrap_or(usize::MAX),
            cfg,
            table: Table::new(),
            extents,
            words,
            block_size,
            extent_size: extent_size.max(1),
            tracked: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            now: AtomicU32::new(Self::stamp(Duration::ZERO)),
            times: Mutex::new(Times {
                origin: now,
                last_tick: now,
                last_rotation: now,
            }),
        }
    }

    /// The configuration the map was made with (the sequential cutoff in
    /// force is [`HeatMap::sequential_cutoff`]).
    pub fn config(&self) -> &HeatConfig {
        &self.cfg
    }

    /// Bytes a stream must have run before its requests earn no heat.
    pub fn sequential_cutoff(&self) -> u64 {
        self.cutoff.load(Ordering::Relaxed)
    }

    /// Change the sequential cutoff live.
    pub fn set_sequential_cutoff(&self, bytes: u64) {
        self.cutoff.store(bytes, Ordering::Relaxed);
    }

    /// Whether a request with this hint is part of a long sequential stream.
    pub fn is_sequential(&self, hint: IoHint) -> bool {
        hint.seq_run > self.cutoff.load(Ordering::Relaxed)
    }

    /// Record one request over `[offset, offset+len)` (already range-checked).
    /// Returns false when the request earned no heat (sequential).
    pub fn record(&self, offset: u64, len: u64, hint: IoHint) -> bool {
        if len == 0 || !self.cfg.enabled {
            return true;
        }
        if self.is_sequential(hint) {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let es = self.extent_size;
        let end = offset.saturating_add(len);
        let mut pos = offset;
        while pos < end {
            let extent = pos / es;
            let stop = end.min((extent + 1).saturating_mul(es));
            if extent >= self.extents {
                break;
            }
            let first = (pos % es) / self.block_size;
            let last = (stop - 1) % es / self.block_size;
            self.touch(extent, first, last);
            pos = stop;
        }
        true
    }

    /// One request's hit on `extent`, blocks `first..=last`.
    fn touch(&self, extent: u64, first: u64, last: u64) {
        let words = self.words;
        let (shard, key) = Table::split(extent);
        let mut guard = self.table.lock(shard);
        let Shard {
            entries,
            slab,
            free,
        } = &mut *guard;
        let e = match entries.entry(key) {
            hash_map::Entry::Occupied(o) => o.into_mut(),
            hash_map::Entry::Vacant(v) => {
                if !self.make_room() {
                    return;
                }
                v.insert(Entry::EMPTY)
            }
        };
        e.hits = e.hits.saturating_add(1);
        if e.bits == NO_BITS {
            e.bits = Shard::take_place(slab, free, words);
        }
        let base = e.bits as usize * 2 * words;
        let Some((cur, prev)) = slab
            .get_mut(base..base + 2 * words)
            .map(|w| w.split_at_mut(words))
        else {
            return;
        };
        let mut b = first;
        while b <= last {
            let word = (b / 64) as usize;
            let hi = last.min((word as u64) * 64 + 63);
            let count = hi - b + 1;
            let mask = if count == 64 {
                u64::MAX
            } else {
                ((1u64 << count) - 1) << (b % 64)
            };
            if let (Some(w), Some(p)) = (cur.get_mut(word), prev.get(word)) {
                e.coverage += (mask & !(*w | *p)).count_ones();
                *w |= mask;
            }
            b = hi + 1;
        }
    }

    /// Count a new entry in, unless the table is past its cap by more than
    /// an eighth (it is trimmed to the cap at each tick; between ticks a
    /// new extent may overshoot it that far): then the touch is not
    /// tracked, and counted as dropped.
    fn make_room(&self) -> bool {
        let hard = self.max_tracked.saturating_add(self.max_tracked / 8);
        if self.tracked.load(Ordering::Relaxed) >= hard {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.tracked.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Ticks since the last touch within which an extent is in use, at
    /// most (`idle-after`).
    fn idle_ticks(&self) -> u64 {
        self.cfg.idle_after.as_secs().max(1)
    }

    /// The score at or above which an extent is idle after
    /// [`MIN_IDLE_TICKS`] ticks: `idle-after-missed` requests at the rate
    /// the score stands for. A steady rate of `r` requests a second folds
    /// into a score of `r × half-life / ln 2`, so an extent scored `s` is
    /// read `s × ln 2 / half-life` times a second, and `missed / rate`
    /// seconds without a request mean it is no longer used (a Poisson
    /// stream misses `missed` mean intervals in a row with chance
    /// `e^-missed`). The score as of the last tick has decayed since the
    /// last touch, so the rate is read low and the extent stays in use the
    /// longer: the error is on the safe side.
    fn idle_score(cfg: &HeatConfig) -> f32 {
        let hl = cfg.half_life.as_secs_f32();
        cfg.idle_after_missed * hl / std::f32::consts::LN_2
    }

    /// Ticks without a touch after which an extent scored `score` is idle.
    fn idle_ticks_for(&self, score: f32) -> u64 {
        let max = self.idle_ticks();
        let k = Self::idle_score(&self.cfg);
        if k <= 0.0 || score <= 0.0 {
            return max;
        }
        // `as` saturates: a tiny score gives u64::MAX, clamped to `max`.
        ((k / score).ceil() as u64).clamp(MIN_IDLE_TICKS.min(max), max)
    }

    fn in_use(&self, last: u32, score: f32, now: u32) -> bool {
        last != 0 && u64::from(now.saturating_sub(last)) < self.idle_ticks_for(score)
    }

    /// Fold hits into scores with the decay for the time since the last
    /// tick, and rotate coverage windows when due. Costs one pass over the
    /// table's entries, which drops those with nothing left: score and
    /// recurrence decayed to zero, both coverage windows empty, idle. If
    /// more than `max-tracked` entries remain, the coldest are dropped down
    /// to the cap: idle entries before entries in use, then the lowest
    /// score, then the lowest recurrence, then the highest extent.
    pub fn tick(&self, now: Duration) {
        let mut t = self.times.lock();
        let elapsed = now.saturating_sub(t.last_tick);
        t.last_tick = now;
        let decay =
            0.5f64.powf(elapsed.as_secs_f64() / self.cfg.half_life.as_secs_f64().max(1e-9)) as f32;
        let stamp = Self::stamp(now.saturating_sub(t.origin));
        self.ticks.fetch_add(1, Ordering::Relaxed);
        let rotate = now.saturating_sub(t.last_rotation) >= self.cfg.coverage_window;
        if rotate {
            t.last_rotation = now;
        }
        let words = self.words;
        let mut removed = 0usize;
        for (_, mut guard) in self.table.each() {
            let Shard {
                entries,
                slab,
                free,
            } = &mut *guard;
            entries.retain(|_, e| {
                let hits = std::mem::take(&mut e.hits);
                // A second with hits that the extent had none in before: it
                // came back (ticks may come faster than one a second).
                let back = hits > 0 && std::mem::replace(&mut e.last, stamp) != stamp;
                if hits > 0 || e.score != 0.0 || e.recurrence != 0.0 {
                    e.score = fold(e.score, hits as f32, decay);
                    e.recurrence = fold(e.recurrence, if back { 1.0 } else { 0.0 }, decay);
                }
                if rotate && e.bits != NO_BITS {
                    let base = e.bits as usize * 2 * words;
                    if let Some(w) = slab.get_mut(base..base + 2 * words) {
                        let (cur, prev) = w.split_at_mut(words);
                        prev.copy_from_slice(cur);
                        cur.fill(0);
                        e.coverage = prev.iter().map(|w| w.count_ones()).sum();
                    }
                    if e.coverage == 0 {
                        Shard::release(slab, free, e, words);
                    }
                }
                let keep = e.score != 0.0
                    || e.recurrence != 0.0
                    || e.bits != NO_BITS
                    || self.in_use(e.last, e.score, stamp);
                if !keep {
                    removed += 1;
                }
                keep
            });
            guard.shrink(words);
        }
        self.tracked.fetch_sub(removed, Ordering::Relaxed);
        // The new time only once every entry is folded: a reader meanwhile
        // sees an entry's fresh touch as in use, never a pending one as
        // idle.
        self.now.store(stamp, Ordering::Relaxed);
        drop(t);
        if self.tracked() > self.max_tracked {
            self.trim(self.max_tracked);
        }
    }

    /// Drop the coldest entries until at most `cap` remain (the order is
    /// [`HeatMap::tick`]'s); entries touched since the last tick stay.
    fn trim(&self, cap: usize) {
        let now = self.now.load(Ordering::Relaxed);
        let mut all: Vec<(bool, f32, f32, u64)> = Vec::with_capacity(self.tracked());
        for (shard, guard) in self.table.each() {
            all.extend(guard.entries.iter().map(|(k, e)| {
                (
                    self.in_use(e.last, e.score, now),
                    e.score,
                    e.recurrence,
                    Table::join(shard, *k),
                )
            }));
        }
        let n = all.len().saturating_sub(cap);
        if n == 0 {
            return;
        }
        let colder = |a: &(bool, f32, f32, u64), b: &(bool, f32, f32, u64)| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                .then(a.2.total_cmp(&b.2))
                .then(b.3.cmp(&a.3))
        };
        all.select_nth_unstable_by(n - 1, colder);
        all.truncate(n);
        all.sort_unstable_by_key(|x| Table::split(x.3));
        let words = self.words;
        let mut dropped = 0;
        for group in all.chunk_by(|a, b| Table::split(a.3).0 == Table::split(b.3).0) {
            let Some(first) = group.first() else { continue };
            let mut guard = self.table.lock(Table::split(first.3).0);
            let Shard {
                entries,
                slab,
                free,
            } = &mut *guard;
            for x in group {
                let key = Table::split(x.3).1;
                if entries.get(&key).is_some_and(|e| e.hits == 0) {
                    if let Some(mut e) = entries.remove(&key) {
                        Shard::release(slab, free, &mut e, words);
                        dropped += 1;
                    }
                }
            }
        }
        self.tracked.fetch_sub(dropped, Ordering::Relaxed);
        self.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
    }

    /// Ticks so far (each one may change which extents are idle).
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    fn stamp(since_origin: Duration) -> u32 {
        u32::try_from(since_origin.as_secs())
            .unwrap_or(u32::MAX - 1)
            .saturating_add(1)
    }

    /// Extents whose heat the map keeps now.
    pub fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }

    /// Extents whose heat was dropped, or never kept, because the table
    /// was full (`heat.max-tracked`), since the map was made.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Bytes the table holds (entries, bitmaps, spare capacity).
    pub fn memory_bytes(&self) -> usize {
        self.table.each().map(|(_, s)| s.bytes()).sum()
    }

    /// `f` of an extent's entry, if the map tracks it.
    fn with<T>(&self, extent: u64, f: impl FnOnce(&Entry) -> T) -> Option<T> {
        if extent >= self.extents {
            return None;
        }
        let (shard, key) = Table::split(extent);
        let guard = self.table.lock(shard);
        guard.entries.get(&key).map(f)
    }

    /// Seconds between the last tick and the last tick at which the extent
    /// had hits (`None`: not touched since the map was made or restored, or
    /// forgotten since: its heat decayed away while it was idle).
    pub fn idle_secs(&self, extent: u64) -> Option<u32> {
        let l = self.with(extent, |e| e.last)?;
        if l == 0 {
            return None;
        }
        Some(self.now.load(Ordering::Relaxed).saturating_sub(l))
    }

    /// Whether an extent was touched within `idle-after` (as of the last
    /// tick): in use. Idle extents give way to extents in use.
    pub fn is_active(&self, extent: u64) -> bool {
        let now = self.now.load(Ordering::Relaxed);
        self.with(extent, |e| self.in_use(e.last, e.score, now))
            .unwrap_or(false)
    }

    /// For every extent of the volume, [`HeatMap::is_active`]: a vector as
    /// long as the volume, for the tests that compare with a dense map;
    /// callers use [`HeatMap::touched`] or [`HeatMap::is_active`].
    #[cfg(test)]
    pub(crate) fn active_all(&self) -> Vec<bool> {
        let mut out = vec![false; usize::try_from(self.extents).unwrap_or(0)];
        for (e, h) in self.touched() {
            if h.active {
                if let Some(x) = out.get_mut(e as usize) {
                    *x = true;
                }
            }
        }
        out
    }

    /// Every extent the map tracks, in extent order, with its heat as of
    /// the last tick (an extent not listed has none: score, recurrence and
    /// coverage 0, idle). Costs a pass over the entries, one shard lock at
    /// a time.
    pub fn touched(&self) -> Vec<(u64, ExtentHeat)> {
        let now = self.now.load(Ordering::Relaxed);
        let mut out = Vec::with_capacity(self.tracked());
        for (shard, guard) in self.table.each() {
            out.extend(guard.entries.iter().map(|(k, e)| {
                (
                    Table::join(shard, *k),
                    ExtentHeat {
                        score: e.score,
                        recurrence: e.recurrence,
                        coverage: e.coverage,
                        active: self.in_use(e.last, e.score, now),
                    },
                )
            }));
        }
        out.sort_unstable_by_key(|(e, _)| *e);
        out
    }

    /// Decayed count of the distinct seconds in which an extent was
    /// touched, as of the last tick (with the score's half-life): about 1
    /// after one visit however many requests it made, growing only when
    /// the extent is used again later.
    pub fn recurrence(&self, extent: u64) -> f32 {
        self.with(extent, |e| e.recurrence).unwrap_or(0.0)
    }

    /// Decayed score of an extent as of the last tick.
    pub fn score(&self, extent: u64) -> f32 {
        self.with(extent, |e| e.score).unwrap_or(0.0)
    }

    /// Distinct blocks of an extent touched in the current and previous
    /// coverage windows.
    pub fn coverage(&self, extent: u64) -> u32 {
        self.with(extent, |e| e.coverage).unwrap_or(0)
    }

    /// Forget an extent's heat (it was trimmed away): its hits, score,
    /// coverage and last touch. Its recurrence stays to decay as before
    /// (the entry goes once it has).
    pub fn clear(&self, extent: u64) {
        if extent >= self.extents {
            return;
        }
        let (shard, key) = Table::split(extent);
        let mut guard = self.table.lock(shard);
        let Shard {
            entries,
            slab,
            free,
        } = &mut *guard;
        let Some(e) = entries.get_mut(&key) else {
            return;
        };
        e.hits = 0;
        e.score = 0.0;
        e.last = 0;
        Shard::release(slab, free, e, self.words);
        if e.recurrence == 0.0 {
            entries.remove(&key);
            self.tracked.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Requests that earned no heat because they were sequential.
    pub fn bypassed(&self) -> u64 {
        self.bypassed.load(Ordering::Relaxed)
    }

    /// Encode the non-zero scores for saving, in extent order (the `HEAT1`
    /// format: `HEAT1`, then a little-endian `u32` extent and `f32` score
    /// per extent).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut saved: Vec<Saved> = Vec::new();
        for (shard, guard) in self.table.each() {
            saved.extend(guard.entries.iter().filter_map(|(k, e)| {
                let extent = u32::try_from(Table::join(shard, *k)).ok()?;
                (e.score > 0.0).then_some((extent, e.score))
            }));
        }
        saved.sort_unstable_by_key(|(e, _)| *e);
        let mut out = Vec::with_capacity(5 + saved.len() * 8);
        out.extend_from_slice(b"HEAT1");
        for (e, v) in saved {
            out.extend_from_slice(&e.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Load scores saved by [`HeatMap::snapshot`]; returns how many were
    /// loaded. Unknown or damaged snapshots load nothing (heat is advisory).
    /// Past `max-tracked`, the lowest scores are dropped.
    pub fn restore(&self, bytes: &[u8]) -> usize {
        let Some(body) = bytes.strip_prefix(b"HEAT1") else {
            return 0;
        };
        if body.len() % 8 != 0 {
            return 0;
        }
        let saved = body.chunks_exact(8).map(|c| {
            (
                u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                f32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            )
        });
        let mut n = 0;
        for (i, v) in saved {
            if u64::from(i) >= self.extents || !v.is_finite() || v <= 0.0 {
                continue;
            }
            let (shard, key) = Table::split(u64::from(i));
            let mut guard = self.table.lock(shard);
            let e = guard.entries.entry(key).or_insert_with(|| {
                self.tracked.fetch_add(1, Ordering::Relaxed);
                Entry::EMPTY
            });
            e.score = v;
            // Not saved: a score this high was most likely earned over
            // more than one visit, up to the two that show reuse.
            e.recurrence = v.min(2.0);
            n += 1;
        }
        if self.tracked() > self.max_tracked {
            self.trim(self.max_tracked);
        }
        n
    }
}

#[cfg(test)]
mod tests;
