//! A simplified dm-cache `smq` (stochastic multiqueue) policy, after the
//! original 2015 design (smq v1.0.0, Linux 4.2; Joe Thornber), driven by
//! the trace's time. It owns the hotspot queue, the clean and dirty cache
//! queues, the periodic ticks and the promotion rule.
//!
//! **What is kept from v1.**
//! - *Queues*: 64 levels, each an LRU list (oldest at the front). A hit
//!   requeue of `k` levels swaps: the unit goes to the back of level
//!   `min(63, level + k)` and the oldest entry of that level comes down to
//!   the back of the unit's old level, so level populations stay fixed and
//!   no hit counts are kept (`k = 0` just moves it to the back of its
//!   level). Periodic redistribution sets a target count per level and,
//!   walking up from level 0, pulls the oldest entries of higher levels
//!   down into a level short of its target and pushes a level's newest
//!   surplus up to the front of the next.
//! - *Hotspot queue*: tracks regions of [`HOTSPOT_UNITS`] units, cached or
//!   not, in `max(C/4, 1024)` slots for a capacity of `C` units; a new
//!   region enters at level 0, recycling the oldest region of the lowest
//!   level when every slot is taken. **Every** reference (hit or miss, as
//!   in v1) touches its region: the first touch in a tick moves it up by
//!   the level jump (1, 2 or 4, see below), later ones in the same tick by
//!   0. Redistributed every tick: `min(slots/64, C/16)` regions spread over
//!   the top 8 levels, the rest over the 56 below.
//! - *Cache*: a clean and a dirty queue over the resident units (a unit is
//!   dirty once written while resident, [`crate::sim`]'s accounting; it
//!   moves to the dirty queue's back at the same level). A hit requeues the
//!   unit one level up, at most once per cache period. Promoted units enter
//!   at level 0 (v1's `init_entry`). Both queues are redistributed every
//!   cache period, evenly over the 64 levels.
//! - *Statistics*: the hotspot queue counts a touch in levels ≥ 48 as a
//!   hit, any other touch or a new region as a miss; the cache counts a hit
//!   in levels ≥ 48 as a hit, any other hit or a miss as a miss.
//!   Confidence = hits / (hits + misses) of the hotspot queue: POOR below
//!   1/16, FAIR below 1/8, else WELL.
//! - *Promotion (v1's thresholds, not v2's)*: every tick, threshold =
//!   `table[16 × hits / (hits + misses)]` of the cache statistics with
//!   `table = {1,1,1,2,4,6,7,8,7,6,4,4,3,3,2,2,1}` when the cache is full,
//!   32 while it has free units; divided by 4 when the hotspot confidence
//!   is POOR, by 2 when FAIR. A missed read is promoted when its region's
//!   hotspot level (after this touch) is ≥ `64 − threshold`, a write when
//!   it is ≥ `64 − threshold + 2`; a write covering the whole unit is
//!   promoted at once while the cache has a free unit (fast promote). The
//!   level jump is 4 when the hotspot confidence is POOR, 2 when FAIR, 1
//!   when WELL. Before the first tick both promote levels are 64: only fast
//!   promotes happen. (v2 forces the threshold to 64, promoting on every
//!   miss of a confident hotspot queue; this module does not model v2.)
//! - *Time*: one tick per second of trace time from the first reference
//!   (all ticks due are run before a reference). Each tick: clear the
//!   hotspot hit bits, update the promote levels (from the statistics so
//!   far), then the hotspot period (1 s): update the level jump,
//!   redistribute the hotspot queue, reset its statistics. Every 10th tick
//!   from the first (v1's 10 s cache period): clear the cache hit bits,
//!   redistribute the clean and dirty queues, reset the cache statistics.
//!
//! **Simplifications** (each one a choice of this simulator, not smq's):
//! 1. Promotion and demotion happen on the miss itself, with no migration
//!    bandwidth limit and no "can migrate" refusal (v1 migrates on the
//!    miss path too, but the target may refuse when migrations are busy).
//! 2. No sentinels (v1 keeps writeback and demote sentinels, flipped every
//!    10 s and 60 s, so that demotion prefers entries not requeued for a
//!    period). Requeues and new entries go to the back of their level.
//! 3. The victim when a promotion finds the cache full: the oldest clean
//!    unit of the lowest populated level in the bottom half (levels
//!    0..31), as v2's demotion does; if there is none, the oldest dirty unit
//!    of the lowest level of the bottom half (written back, then dropped:
//!    its demotion is counted); then the same over the top half. v1 only
//!    demoted clean units (refusing the promotion otherwise) and relied on
//!    background writeback, which is not modelled: dirty units stay dirty
//!    until evicted.
//! 4. Regions are always [`HOTSPOT_UNITS`] units (smq halves the hotspot
//!    block while the slots would cover more than the origin device, whose
//!    size a trace does not give).
//! 5. Ticks with no reference between them change nothing after the first
//!    20 (the statistics are reset within one cache period and
//!    redistribution of a redistributed queue moves nothing), so a long
//!    idle gap runs 20 ticks and skips the rest: exact, not an
//!    approximation.
//! 6. A unit promoted again starts with its hit bit clear (v1 keeps hit
//!    bits per cache slot, so a new entry may inherit one).
//!
//! **Scale.** v1's rule depends on size: below 128 units fewer than 8
//! regions fit the top hotspot levels, so the highest levels stay empty
//! after each redistribution; once the cache is full a read is promoted
//! only when the cache's measured hit share (hits in its top quarter of
//! levels) is middling, where the table is largest. smq was built for
//! caches of thousands of blocks; small capacities promote little.
//!
//! Cost: O(1) per hit, O(levels) per promotion, O(levels² + entries) per
//! redistribution.

use std::collections::HashMap;
use std::ops::Range;

use super::list::{Lists, NIL};
use super::{Ledger, Ref, Trace};

/// Levels of every queue.
pub const LEVELS: usize = 64;
/// Units per hotspot region.
pub const HOTSPOT_UNITS: u64 = 16;
/// Trace time per tick, ns.
pub const TICK_NS: u64 = 1_000_000_000;
/// Ticks per cache period (v1: 10 s).
pub const CACHE_PERIOD_TICKS: u64 = 10;
/// v1's promote-threshold table, indexed by 16 × the cache hit share.
pub const PROMOTE_TABLE: [usize; 17] = [1, 1, 1, 2, 4, 6, 7, 8, 7, 6, 4, 4, 3, 3, 2, 2, 1];
/// Levels at and above this count as hits in the statistics.
const HIT_LEVEL: usize = LEVELS * 3 / 4;
/// Top levels of the hotspot queue that hold about what the cache could.
const TOP_LEVELS: usize = 8;
/// Idle ticks after which further idle ticks change nothing.
const IDLE_TICKS: u64 = 2 * CACHE_PERIOD_TICKS;
/// The cache queues' first list (clean; dirty is `DIRTY..DIRTY + LEVELS`).
const CLEAN: usize = 0;
const DIRTY: usize = LEVELS;
/// "Never" for hit stamps.
const NEVER: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    hits: u64,
    misses: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Confidence {
    Poor,
    Fair,
    Well,
}

impl Stats {
    fn level_accessed(&mut self, level: usize) {
        if level >= HIT_LEVEL {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }

    fn assess(&self) -> Confidence {
        let total = self.hits + self.misses;
        // Fixed point with 8 fraction bits, as smq.
        let c = (self.hits << 8).checked_div(total).unwrap_or(0);
        if c < 1 << 4 {
            Confidence::Poor
        } else if c < 1 << 5 {
            Confidence::Fair
        } else {
            Confidence::Well
        }
    }
}

/// Level of `n` in the queue whose lists start at `base`.
fn level(l: &Lists, base: usize, n: usize) -> usize {
    l.owner(n).map_or(0, |o| o - base)
}

/// Requeue `n` (in the queue at `base`) `extra` levels up, swapping with
/// the oldest entry of its new level.
fn requeue(l: &mut Lists, base: usize, n: usize, extra: usize) {
    let old = level(l, base, n);
    l.remove(n);
    let mut new = old;
    if extra > 0 && old < LEVELS - 1 {
        new = (old + extra).min(LEVELS - 1);
        if let Some(d) = l.pop_front(base + new) {
            l.push_back(base + old, d);
        }
    }
    l.push_back(base + new, n);
}

/// The oldest entry of the lowest populated level in `levels`.
fn peek(l: &Lists, base: usize, levels: Range<usize>) -> Option<usize> {
    levels.into_iter().find_map(|lv| l.front(base + lv))
}

/// `n` entries spread evenly over `levels`, the lowest taking the remainder.
fn spread(t: &mut [usize; LEVELS], n: usize, levels: Range<usize>) {
    let k = levels.len();
    if k == 0 {
        return;
    }
    for (i, lv) in levels.enumerate() {
        t[lv] = n / k + usize::from(i < n % k);
    }
}

/// Target entries per level: `in_top` over the top `top` levels, the rest
/// of `total` over the levels below.
fn targets(total: usize, top: usize, in_top: usize) -> [usize; LEVELS] {
    let mut t = [0; LEVELS];
    spread(&mut t, in_top, LEVELS - top..LEVELS);
    spread(&mut t, total.saturating_sub(in_top), 0..LEVELS - top);
    t
}

/// Move entries between levels towards `t`.
fn redistribute(l: &mut Lists, base: usize, t: &[usize; LEVELS]) {
    for (lv, &target) in t.iter().enumerate().take(LEVELS - 1) {
        let mut src = lv + 1;
        while l.len(base + lv) < target {
            while src < LEVELS && l.len(base + src) == 0 {
                src += 1;
            }
            let Some(e) = (src < LEVELS).then(|| l.pop_front(base + src)).flatten() else {
                break;
            };
            l.push_back(base + lv, e);
        }
        while l.len(base + lv) > target {
            let Some(e) = l.pop_back(base + lv) else {
                break;
            };
            l.push_front(base + lv + 1, e);
        }
    }
}

fn queue_len(l: &Lists, base: usize) -> usize {
    (0..LEVELS).map(|lv| l.len(base + lv)).sum()
}

struct Smq<'a> {
    led: &'a mut Ledger,
    capacity: u64,
    held: u64,
    /// Clean levels `CLEAN..`, dirty levels `DIRTY..`, over unit ids.
    cache: Lists,
    /// Cache period in which each unit was last requeued by a hit.
    cache_hit: Vec<u64>,
    cache_period: u64,
    cache_stats: Stats,
    /// Region of each unit id.
    region: Vec<usize>,
    /// Slot of each region (NIL: untracked) and region of each slot.
    slot: Vec<usize>,
    slot_region: Vec<usize>,
    max_slots: usize,
    /// The hotspot queue over slots.
    hot: Lists,
    /// Tick in which each slot was last moved up.
    hot_hit: Vec<u64>,
    hot_in_top: usize,
    hot_stats: Stats,
    level_jump: usize,
    read_promote: usize,
    write_promote: usize,
    tick: u64,
    t0: Option<u64>,
    /// Idle ticks run before skipping the rest.
    idle_ticks: u64,
}

impl<'a> Smq<'a> {
    fn new(capacity: u64, trace: &Trace, led: &'a mut Ledger) -> Self {
        let mut regions: HashMap<u64, usize> = HashMap::new();
        let region = trace
            .units
            .iter()
            .map(|u| {
                let n = regions.len();
                *regions.entry(u / HOTSPOT_UNITS).or_insert(n)
            })
            .collect();
        let max_slots = (capacity / 4).max(1024);
        let in_top = (max_slots / LEVELS as u64).min(capacity / HOTSPOT_UNITS);
        let n = trace.units.len();
        Smq {
            led,
            capacity,
            held: 0,
            cache: Lists::new(n, 2 * LEVELS),
            cache_hit: vec![NEVER; n],
            cache_period: 0,
            cache_stats: Stats::default(),
            region,
            slot: vec![NIL; regions.len()],
            slot_region: Vec::new(),
            max_slots: usize::try_from(max_slots).unwrap_or(usize::MAX),
            hot: Lists::new(0, LEVELS),
            hot_hit: Vec::new(),
            hot_in_top: usize::try_from(in_top).unwrap_or(usize::MAX),
            hot_stats: Stats::default(),
            level_jump: 1,
            read_promote: LEVELS,
            write_promote: LEVELS,
            tick: 0,
            t0: None,
            idle_ticks: IDLE_TICKS,
        }
    }

    /// Run the ticks due by `t_ns`.
    fn advance(&mut self, t_ns: u64) {
        let t0 = *self.t0.get_or_insert(t_ns);
        let due = t_ns.saturating_sub(t0) / TICK_NS;
        if due <= self.tick {
            return;
        }
        let idle = due - self.tick;
        for _ in 0..idle.min(self.idle_ticks) {
            self.run_tick();
        }
        // The rest would change nothing (simplification 5).
        self.tick = due;
    }

    fn run_tick(&mut self) {
        self.tick += 1;
        // End of the hotspot period's tick: hit bits clear (the stamp is
        // the tick), promote levels from the statistics so far.
        let full = self.held >= self.capacity;
        let mut threshold = if full {
            let s = self.cache_stats;
            let total = s.hits + s.misses;
            let i = (s.hits << 4).checked_div(total).unwrap_or(0);
            PROMOTE_TABLE[usize::try_from(i).unwrap_or(16).min(16)]
        } else {
            LEVELS / 2
        };
        let conf = self.hot_stats.assess();
        match conf {
            Confidence::Poor => threshold /= 4,
            Confidence::Fair => threshold /= 2,
            Confidence::Well => {}
        }
        self.read_promote = LEVELS - threshold;
        self.write_promote = LEVELS - threshold + 2;
        // The hotspot period (1 s).
        self.level_jump = match conf {
            Confidence::Poor => 4,
            Confidence::Fair => 2,
            Confidence::Well => 1,
        };
        let t = targets(queue_len(&self.hot, 0), TOP_LEVELS, self.hot_in_top);
        redistribute(&mut self.hot, 0, &t);
        self.hot_stats = Stats::default();
        // The cache period.
        if (self.tick - 1).is_multiple_of(CACHE_PERIOD_TICKS) {
            self.cache_period += 1;
            for base in [CLEAN, DIRTY] {
                let t = targets(queue_len(&self.cache, base), 0, 0);
                redistribute(&mut self.cache, base, &t);
            }
            self.cache_stats = Stats::default();
        }
    }

    /// Touch the region of unit `id`; its hotspot level afterwards.
    fn touch_region(&mut self, id: usize) -> usize {
        let region = self.region[id];
        let s = self.slot[region];
        if s != NIL {
            self.hot_stats.level_accessed(level(&self.hot, 0, s));
            let extra = if self.hot_hit[s] == self.tick {
                0
            } else {
                self.hot_hit[s] = self.tick;
                self.level_jump
            };
            requeue(&mut self.hot, 0, s, extra);
            return level(&self.hot, 0, s);
        }
        self.hot_stats.misses += 1;
        let s = if self.slot_region.len() < self.max_slots {
            let s = self.slot_region.len();
            self.slot_region.push(NIL);
            self.hot_hit.push(NEVER);
            self.hot.grow(s + 1);
            s
        } else {
            match peek(&self.hot, 0, 0..LEVELS) {
                Some(s) => {
                    self.hot.remove(s);
                    self.slot[self.slot_region[s]] = NIL;
                    self.hot_hit[s] = NEVER;
                    s
                }
                None => return 0,
            }
        };
        self.slot_region[s] = region;
        self.slot[region] = s;
        self.hot.push_back(0, s);
        0
    }

    /// The unit to demote (simplification 3).
    fn victim(&self) -> Option<usize> {
        for half in [0..LEVELS / 2, LEVELS / 2..LEVELS] {
            for base in [CLEAN, DIRTY] {
                if let Some(v) = peek(&self.cache, base, half.clone()) {
                    return Some(v);
                }
            }
        }
        None
    }

    fn reference(&mut self, r: &Ref) {
        self.advance(r.t_ns);
        let x = r.id;
        let hs_level = self.touch_region(x);
        if let Some(o) = self.cache.owner(x) {
            let base = if o >= DIRTY { DIRTY } else { CLEAN };
            self.cache_stats.level_accessed(o - base);
            if self.cache_hit[x] != self.cache_period {
                self.cache_hit[x] = self.cache_period;
                requeue(&mut self.cache, base, x, 1);
            }
            self.led.access(r, true);
            if base == CLEAN && self.led.is_dirty(x) {
                let lv = level(&self.cache, CLEAN, x);
                self.cache.move_to_back(DIRTY + lv, x);
            }
            return;
        }
        self.cache_stats.misses += 1;
        self.led.access(r, false);
        let free = self.held < self.capacity;
        let promote = if r.write {
            (free && r.fast()) || hs_level >= self.write_promote
        } else {
            hs_level >= self.read_promote
        };
        if !promote {
            return;
        }
        if !free {
            let Some(v) = self.victim() else {
                return;
            };
            self.cache.remove(v);
            self.held -= 1;
            self.led.evict(v);
        }
        self.led.admit(r);
        self.held += 1;
        self.cache_hit[x] = NEVER;
        let base = if self.led.is_dirty(x) { DIRTY } else { CLEAN };
        self.cache.push_back(base, x);
    }
}

/// Run smq with `capacity` (≥ 1) units over `trace`.
pub(crate) fn run(capacity: u64, trace: &Trace, led: &mut Ledger) {
    let mut s = Smq::new(capacity, trace, led);
    for r in &trace.refs {
        s.reference(r);
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::sim::tests::{ledger, trace};
    use crate::sim::{simulate, Access, PolicyKind, SimConfig, SimResult};

    const U: u64 = 1 << 20;
    const S: u64 = TICK_NS;

    fn at(t_ns: u64, unit: u64, len: u64, write: bool) -> Access {
        Access {
            t_ns,
            offset: unit * U,
            len,
            write,
        }
    }

    fn smq(cap: u64, acc: &[Access]) -> SimResult {
        let cfg = SimConfig {
            unit: U,
            capacity_units: cap,
        };
        simulate(PolicyKind::Smq, &cfg, acc)
    }

    #[test]
    fn sim_smq_promotes_a_region_only_when_touched_again_after_a_tick() {
        // Capacity 64: 1024 hotspot slots, 4 regions' worth in the top
        // levels. Before the first tick the promote level is 64: the three
        // touches of region 0 (units 0, 0, 1) promote nothing. Tick 1 finds
        // the hotspot confidence POOR (no touch in levels >= 48), so
        // threshold 32 / 4 = 8 (read promote level 56) and level jump 4;
        // redistribution lifts the lone region to level 56. At 1.5 s its
        // first touch of the tick takes it to 60: unit 0 is promoted; 1.6 s
        // hits it; unit 2 (same region, no further jump) is promoted too;
        // unit 16's region is new (level 0) and is not.
        let acc = [
            at(0, 0, U, false),
            at(S / 10, 0, U, false),
            at(S / 5, 1, U, false),
            at(15 * S / 10, 0, U, false),
            at(16 * S / 10, 0, U, false),
            at(17 * S / 10, 2, U, false),
            at(18 * S / 10, 16, U, false),
        ];
        let r = smq(64, &acc);
        assert_eq!(r.read_hit_bytes, U);
        assert_eq!(r.promoted_bytes, 2 * U);
    }

    #[test]
    fn sim_smq_never_promotes_regions_touched_once() {
        // Every second, 20 regions never seen before, then unit 0. After
        // tick 1 region 0, the newest, is redistributed to level 59; its
        // touch in second 1 (+4) promotes it and it hits in seconds 2..20.
        // A region's first touch leaves it at level 0, below any promote
        // level: none of the 420 others is ever promoted.
        let mut acc = Vec::new();
        for s in 0..=20u64 {
            for j in 0..20 {
                acc.push(at(s * S, 16 * (1 + 20 * s + j), U, false));
            }
            acc.push(at(s * S + S / 2, 0, U, false));
        }
        let r = smq(64, &acc);
        assert_eq!(r.read_hit_bytes, 19 * U);
        assert_eq!(r.promoted_bytes, U);
    }

    #[test]
    fn sim_smq_fast_promotes_whole_unit_writes_while_it_has_room() {
        // Before the first tick only fast promotes happen: the whole-unit
        // writes to 0 and 1 land on the SSD uncopied (dirty); the SSD is
        // then full, so the whole write to 2 is not promoted; nor is the
        // partial write to 5; the read of 0 hits.
        let acc = [
            at(0, 0, U, true),
            at(1, 1, U, true),
            at(2, 2, U, true),
            at(3, 5, 4096, true),
            at(4, 0, U, false),
        ];
        let r = smq(2, &acc);
        assert_eq!((r.read_hit_bytes, r.write_hit_bytes), (U, 0));
        assert_eq!((r.promoted_bytes, r.demoted_bytes), (0, 0));
        assert_eq!(r.ssd_write_bytes, 2 * U);
    }

    #[test]
    fn sim_smq_promote_levels_follow_the_v1_table() {
        let t = trace(&[at(0, 0, U, false)], U);
        let mut led = ledger(&t, 4);
        let mut s = Smq::new(4, &t, &mut led);
        let mut check = |held: u64, cache: (u64, u64), hot: (u64, u64), read: usize| {
            s.held = held;
            s.cache_stats = Stats {
                hits: cache.0,
                misses: cache.1,
            };
            s.hot_stats = Stats {
                hits: hot.0,
                misses: hot.1,
            };
            s.tick = 1; // not a cache period: the cache statistics stay
            s.run_tick();
            assert_eq!((s.read_promote, s.write_promote), (read, read + 2));
        };
        // Room in the cache: threshold 32, /2 when FAIR, /4 when POOR.
        check(3, (0, 0), (1, 4), 32);
        check(3, (0, 0), (1, 9), 48);
        check(3, (0, 0), (1, 17), 56);
        // Full: table[16 × 7/16 = 7] = 8; table[16] = 1; table[3] = 2,
        // which POOR confidence divides to 0: nothing is promoted.
        check(4, (7, 9), (1, 4), 56);
        check(4, (5, 0), (1, 4), 63);
        check(4, (3, 13), (0, 5), 64);
    }

    #[test]
    fn sim_smq_queues_swap_on_hit_and_redistribute_to_targets() {
        let mut l = Lists::new(8, LEVELS);
        for n in 0..4 {
            l.push_back(0, n);
        }
        l.push_back(1, 4);
        l.push_back(1, 5);
        // 2 goes up a level, swapping with 4, the oldest there.
        requeue(&mut l, 0, 2, 1);
        assert_eq!((level(&l, 0, 2), level(&l, 0, 4)), (1, 0));
        assert_eq!(l.back(0), Some(4));
        assert_eq!(l.back(1), Some(2));
        // A jump past the top stops at 63; 0 levels: to the back.
        requeue(&mut l, 0, 5, 100);
        assert_eq!(level(&l, 0, 5), 63);
        requeue(&mut l, 0, 0, 0);
        assert_eq!(l.back(0), Some(0));
        // 6 entries, 4 of them in the top 8 levels.
        let t = targets(6, 8, 4);
        assert_eq!(&t[..3], &[1, 1, 0]);
        assert_eq!(&t[56..61], &[1, 1, 1, 1, 0]);
        redistribute(&mut l, 0, &t);
        let per: Vec<usize> = (0..LEVELS).map(|lv| l.len(lv)).collect();
        assert_eq!(per, t.to_vec());
        // The oldest stay low: level 0 keeps 1 (the oldest of level 0).
        assert_eq!(l.front(0), Some(1));
        // Evenly over 64 levels, the remainder low.
        let t = targets(130, 0, 0);
        assert_eq!((t[0], t[1], t[2], t[63]), (3, 3, 2, 2));
    }

    #[test]
    fn sim_smq_demotes_clean_before_dirty_and_the_bottom_half_first() {
        let t = trace(&(0..4).map(|u| at(0, u, U, false)).collect::<Vec<_>>(), U);
        let mut led = ledger(&t, 4);
        let mut s = Smq::new(4, &t, &mut led);
        s.cache.push_back(CLEAN + 40, 0);
        s.cache.push_back(DIRTY + 3, 1);
        s.cache.push_back(CLEAN + 10, 2);
        s.cache.push_back(CLEAN + 10, 3);
        let mut order = Vec::new();
        while let Some(v) = s.victim() {
            s.cache.remove(v);
            order.push(v);
        }
        assert_eq!(order, vec![2, 3, 1, 0]);
    }

    #[test]
    fn sim_smq_skipping_idle_ticks_changes_nothing() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut t_ns = 0;
        let mut acc = Vec::new();
        for _ in 0..6000 {
            t_ns += if rng.gen_bool(0.01) {
                rng.gen_range(30..400) * S
            } else {
                rng.gen_range(0..S / 5)
            };
            // A hot set of 32 regions, twice the SSD, over 5000 cold units.
            let u = if rng.gen_bool(0.8) {
                rng.gen_range(0..512)
            } else {
                rng.gen_range(0..5000)
            };
            acc.push(at(t_ns, u, U / 2, rng.gen_bool(0.2)));
        }
        let t = trace(&acc, U);
        let run_with = |idle: u64| {
            let mut led = ledger(&t, 256);
            let mut s = Smq::new(256, &t, &mut led);
            s.idle_ticks = idle;
            for r in &t.refs {
                s.reference(r);
            }
            led.finish(PolicyKind::Smq, 256)
        };
        let skipping = run_with(IDLE_TICKS);
        // Not a quiet run: the SSD filled and units were demoted.
        assert!(skipping.read_hit_bytes > 0 && skipping.promoted_bytes > 256 * U);
        assert_eq!(skipping, run_with(u64::MAX));
    }
}
