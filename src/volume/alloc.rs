//! The slot allocator: free slots per tier, and slots freed but held in
//! quarantine until the next metadata flush.
//!
//! A freed slot must not be reused before the unmapping that freed it is
//! durable: otherwise a crash could revive the old mapping over a slot that
//! now holds another extent's data.
//!
//! Free slots cost a bit each (a volume of 16 M slots keeps 2 MiB, not
//! 64 MiB of slot numbers). Three orders, for three kinds of taker:
//! - **New data** on the HDD takes the first free slot at or after a goal
//!   the volume derives from the extent's neighbours (the slot its
//!   nearest mapped predecessor's distance points at: the volume's order
//!   kept on the disk), else the lowest free slot: a stream of new data
//!   that spills to the HDD lands in address order, as fast as the disk
//!   streams, and several streams at once each stay in order rather than
//!   take turns at the lowest slot (four 256 KiB streams at QD 4 took
//!   every fourth slot each, one positioning per extent: the landing
//!   suite's spill ran at 0.86x the pure HDD on hdd-7200). Handing new
//!   data the last slot given back, as this once did, turned a trimmed
//!   region's slots around, and a sequential write into it went down the
//!   disk backwards, one seek an extent (0.75x).
//! - **Moves and the write log** take the slot given back last, while one
//!   is left (then the lowest): a demotion swapped for a promotion lands
//!   where the promoted extent was, next to the data around it, instead of
//!   far away at the lowest free slot (which cost the zipf suite's full
//!   working set 44 % of its IOPS in longer seeks).
//! - **A batch of moves to the HDD** takes a run of neighbouring free
//!   slots (the run round the slot given back last if it is long enough,
//!   else the next run from where the last one ended), so the batch's
//!   copies go down in merged writes. Slots given back one by one are
//!   scattered, and a victim written to one costs a positioning: a moved
//!   70/30 set came up in 48–51 s that way, in 40–43 s with runs and the
//!   copies users wait for written whole (`moves::AwaitedCopies`;
//!   benchmarks/daemon-shift.sh).

use parking_lot::Mutex;

use super::extent::Loc;
use super::geometry::Tier;

/// Free-slot bookkeeping for both tiers.
pub struct Allocator {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Free slots per tier.
    free: [Free; 2],
    /// Freed since the last metadata flush.
    quarantine: Vec<Loc>,
    /// Tiers that hand out no slot (an SSD being replaced).
    closed: [bool; 2],
}

/// Slots given back kept as hints for moves, at most (256 KiB): a trim of
/// a terabyte gives back a million slots, and a move wants one of the last.
const RECENT_MAX: usize = 1 << 16;

/// How far past a new extent's goal a free slot is looked for, in bitmap
/// words (64 slots each): 4,096 slots, 4 GiB of 1 MiB extents; further
/// than that the goal says nothing a lowest slot would not.
pub const GOAL_WORDS: usize = 64;

/// One tier's free slots.
struct Free {
    /// One bit per slot, set while it is free.
    bits: Vec<u64>,
    /// Slots given back, the last on top; an entry whose bit is clear was
    /// taken since (by new data) and is skipped.
    recent: Vec<u32>,
    /// No bit of `bits` is set below this word.
    cursor: usize,
    /// Bits set in `bits`.
    count: u32,
    /// The slot a search for a free run starts at (where the last run
    /// taken ended: next fit, so runs are handed out round the disk rather
    /// than searched for from its start every time).
    next_fit: u32,
}

impl Free {
    /// Every one of `slots` slots free.
    fn all(slots: u32) -> Free {
        let n = slots as usize;
        let mut bits = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            if let Some(last) = bits.last_mut() {
                *last = (1u64 << (n % 64)) - 1;
            }
        }
        Free {
            bits,
            recent: Vec::new(),
            cursor: 0,
            count: slots,
            next_fit: 0,
        }
    }

    /// Mark `slot` in use (at open); false if it was not free.
    fn take(&mut self, slot: u32) -> bool {
        let (w, bit) = ((slot / 64) as usize, 1u64 << (slot % 64));
        match self.bits.get_mut(w) {
            Some(word) if *word & bit != 0 => {
                *word &= !bit;
                self.count -= 1;
                true
            }
            _ => false,
        }
    }

    /// The slot given back last that is still free, else the lowest.
    fn pop_recent(&mut self) -> Option<u32> {
        while let Some(slot) = self.recent.pop() {
            if self.take(slot) {
                return Some(slot);
            }
        }
        self.pop_lowest()
    }

    /// The lowest free slot.
    fn pop_lowest(&mut self) -> Option<u32> {
        while let Some(word) = self.bits.get_mut(self.cursor) {
            if *word != 0 {
                let b = word.trailing_zeros();
                *word &= !(1u64 << b);
                self.count -= 1;
                return Some(self.cursor as u32 * 64 + b);
            }
            self.cursor += 1;
        }
        None
    }

    /// The first free slot at or after `goal` within `words` bitmap words
    /// of it, taken.
    fn pop_from(&mut self, goal: u32, words: usize) -> Option<u32> {
        let first = (goal / 64) as usize;
        let last = first.saturating_add(words).min(self.bits.len());
        for w in first..last {
            let mut word = self.bits[w];
            if w == first {
                // Only bits at or after the goal's.
                word &= u64::MAX << (goal % 64);
            }
            if word != 0 {
                let b = word.trailing_zeros();
                self.bits[w] &= !(1u64 << b);
                self.count -= 1;
                return Some(w as u32 * 64 + b);
            }
        }
        None
    }

    /// Whether `slot` is free.
    fn is_free(&self, slot: u32) -> bool {
        self.bits
            .get((slot / 64) as usize)
            .is_some_and(|w| w & (1u64 << (slot % 64)) != 0)
    }

    /// The free run around `slot` (free itself): its first slot and its
    /// length, looking at most `cap` slots each way.
    fn run_around(&self, slot: u32, cap: u32) -> (u32, u32) {
        let mut lo = slot;
        while slot - lo < cap && lo > 0 && self.is_free(lo - 1) {
            lo -= 1;
        }
        let mut hi = slot + 1;
        while hi - slot < cap && self.is_free(hi) {
            hi += 1;
        }
        (lo, hi - lo)
    }

    /// The first run of at least `min` free slots at or after slot
    /// `self.next_fit` (then from the start, up to it): its first slot.
    fn find_run(&self, min: u32) -> Option<u32> {
        if self.count < min {
            return None;
        }
        let end = u32::try_from(self.bits.len() * 64).unwrap_or(u32::MAX);
        let from = self.next_fit.min(end);
        self.scan(from, end, min)
            .or_else(|| self.scan(0, from, min))
    }

    /// The first run of `min` free slots within `[lo, hi)`. Whole words
    /// (all free or all taken) are stepped over at once, so a search costs
    /// about a bitmap's words, not its bits.
    fn scan(&self, lo: u32, hi: u32, min: u32) -> Option<u32> {
        let (mut start, mut len, mut s) = (lo, 0u32, lo);
        while s < hi {
            let word = self.bits[(s / 64) as usize];
            let (free, step) = if s % 64 == 0 && s + 64 <= hi && (word == 0 || word == u64::MAX) {
                (word != 0, 64)
            } else {
                (word & (1u64 << (s % 64)) != 0, 1)
            };
            if free {
                if len == 0 {
                    start = s;
                }
                len += step;
            } else {
                len = 0;
            }
            s += step;
            if len >= min {
                return Some(start);
            }
        }
        None
    }

    /// Up to `want` free slots in one run, taken: the run around the slot
    /// given back last when it holds `min` (or `want`, if fewer), else the
    /// first run that long from where the last search ended. Empty when no
    /// free run is that long.
    fn pop_run(&mut self, want: u32, min: u32) -> Vec<u32> {
        let min = min.min(want).max(1);
        let hint = loop {
            match self.recent.last() {
                Some(&s) if self.is_free(s) => break Some(s),
                Some(_) => {
                    self.recent.pop();
                }
                None => break None,
            }
        };
        let start = match hint.map(|s| self.run_around(s, want)) {
            Some((lo, len)) if len >= min => lo,
            _ => match self.find_run(min) {
                Some(s) => s,
                None => return Vec::new(),
            },
        };
        let mut got = Vec::with_capacity(want as usize);
        let mut s = start;
        while got.len() < want as usize && self.take(s) {
            got.push(s);
            s += 1;
        }
        self.next_fit = s;
        got
    }

    /// Free `slot` again (a slot given back twice counts once).
    fn push(&mut self, slot: u32) {
        let (w, bit) = ((slot / 64) as usize, 1u64 << (slot % 64));
        if let Some(word) = self.bits.get_mut(w) {
            debug_assert!(*word & bit == 0, "slot {slot} given back while free");
            if *word & bit == 0 {
                *word |= bit;
                self.count += 1;
            }
            self.cursor = self.cursor.min(w);
            self.recent.push(slot);
            if self.recent.len() > RECENT_MAX {
                // Only the latest are worth keeping (a move wants a slot
                // near what just left); older hints go, and so do those new
                // data took since.
                self.recent.drain(..RECENT_MAX / 2);
                let bits = &self.bits;
                self.recent
                    .retain(|s| bits[(s / 64) as usize] & (1u64 << (s % 64)) != 0);
            }
        }
    }

    fn len(&self) -> u32 {
        self.count
    }
}

impl Allocator {
    /// An allocator whose free slots are those of `slots` not in `used`.
    pub fn new(slots: [u32; 2], used: impl Iterator<Item = Loc>) -> Self {
        let mut free = slots.map(Free::all);
        for loc in used {
            free[loc.tier.index()].take(loc.slot);
        }
        Allocator {
            inner: Mutex::new(Inner {
                free,
                quarantine: Vec::new(),
                closed: [false; 2],
            }),
        }
    }

    /// Take a free slot from the first tier of `order` that has one, for
    /// a move or the write log: the one given back last, if any is left.
    pub fn alloc(&self, order: &[Tier]) -> Option<Loc> {
        self.alloc_by(order, |_, free| free.pop_recent())
    }

    /// Take a free slot from the first tier of `order` that has one, for
    /// new data: on the HDD the first free slot at or after `hdd_goal`
    /// (within [`GOAL_WORDS`] words of it), else the lowest.
    pub fn alloc_new(&self, order: &[Tier], hdd_goal: Option<u32>) -> Option<Loc> {
        self.alloc_by(order, |tier, free| match (tier, hdd_goal) {
            (Tier::Hdd, Some(goal)) => free
                .pop_from(goal, GOAL_WORDS)
                .or_else(|| free.pop_lowest()),
            _ => free.pop_lowest(),
        })
    }

    /// Up to `want` free slots on `tier` for a batch of moves, in one run
    /// of neighbouring slots, ascending: the batch's copies are written in
    /// merged writes ([`super::moves::MERGE_MAX`]) where scattered slots
    /// cost a positioning each. The run around the slot given back last
    /// comes first when it holds `min` slots (a swap's victims land where
    /// the promoted extents left), else the next run of `min` from where
    /// the last ended. Empty if the tier is closed or has no such run (the
    /// caller takes single slots then).
    pub fn alloc_run(&self, tier: Tier, want: u32, min: u32) -> Vec<Loc> {
        let mut inner = self.inner.lock();
        if inner.closed[tier.index()] || want == 0 {
            return Vec::new();
        }
        inner.free[tier.index()]
            .pop_run(want, min)
            .into_iter()
            .map(|slot| Loc { tier, slot })
            .collect()
    }

    fn alloc_by(
        &self,
        order: &[Tier],
        pop: impl Fn(Tier, &mut Free) -> Option<u32>,
    ) -> Option<Loc> {
        let mut inner = self.inner.lock();
        order.iter().find_map(|&tier| {
            if inner.closed[tier.index()] {
                return None;
            }
            pop(tier, &mut inner.free[tier.index()]).map(|slot| Loc { tier, slot })
        })
    }

    /// Stop handing out `tier`'s slots if none of its `slots` is in use or
    /// in quarantine (checked and closed under one lock, so no allocation
    /// slips in between); `Err` with the count in use otherwise.
    pub fn close_if_empty(&self, tier: Tier, slots: u32) -> Result<(), u32> {
        let mut inner = self.inner.lock();
        // Quarantined slots are not free: they count as in use.
        let used = slots.saturating_sub(inner.free[tier.index()].len());
        if used > 0 {
            return Err(used);
        }
        inner.closed[tier.index()] = true;
        Ok(())
    }

    /// Hand out `tier`'s slots again.
    pub fn reopen(&self, tier: Tier) {
        self.inner.lock().closed[tier.index()] = false;
    }

    /// Return a slot that was never recorded as mapped: reusable at once.
    pub fn free_now(&self, loc: Loc) {
        self.inner.lock().free[loc.tier.index()].push(loc.slot);
    }

    /// Return a slot whose unmapping is not yet durable.
    pub fn free_deferred(&self, loc: Loc) {
        self.inner.lock().quarantine.push(loc);
    }

    /// Take the quarantined slots (at the start of a flush).
    pub fn take_quarantine(&self) -> Vec<Loc> {
        std::mem::take(&mut self.inner.lock().quarantine)
    }

    /// Make slots taken by [`Allocator::take_quarantine`] free (the flush
    /// succeeded), or put them back in quarantine (`durable == false`).
    pub fn settle(&self, locs: Vec<Loc>, durable: bool) {
        let mut inner = self.inner.lock();
        if durable {
            for loc in locs {
                inner.free[loc.tier.index()].push(loc.slot);
            }
        } else {
            inner.quarantine.extend(locs);
        }
    }

    /// Free slots on a tier (not counting quarantine).
    pub fn free_count(&self, tier: Tier) -> u32 {
        self.inner.lock().free[tier.index()].len()
    }

    /// Slots in quarantine.
    pub fn quarantined(&self) -> u32 {
        self.inner.lock().quarantine.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_preferred_tier_lowest_first_and_quarantines() {
        let used = [Loc {
            tier: Tier::Ssd,
            slot: 0,
        }];
        let a = Allocator::new([2, 3], used.into_iter());
        assert_eq!(a.free_count(Tier::Ssd), 1);
        let order = [Tier::Ssd, Tier::Hdd];
        assert_eq!(
            a.alloc(&order),
            Some(Loc {
                tier: Tier::Ssd,
                slot: 1
            })
        );
        assert_eq!(
            a.alloc(&order),
            Some(Loc {
                tier: Tier::Hdd,
                slot: 0
            })
        );
        a.free_deferred(Loc {
            tier: Tier::Ssd,
            slot: 1,
        });
        assert_eq!(a.alloc(&[Tier::Ssd]), None);
        let q = a.take_quarantine();
        a.settle(q, false);
        assert_eq!(a.quarantined(), 1);
        let q = a.take_quarantine();
        a.settle(q, true);
        assert_eq!(
            a.alloc(&[Tier::Ssd]),
            Some(Loc {
                tier: Tier::Ssd,
                slot: 1
            })
        );
    }

    #[test]
    fn new_data_takes_the_lowest_and_moves_the_last_given_back() {
        let used = [3, 64, 65].map(|slot| Loc {
            tier: Tier::Hdd,
            slot,
        });
        let a = Allocator::new([0, 130], used.into_iter());
        assert_eq!(a.free_count(Tier::Hdd), 127);
        let mut got: Vec<u32> = (0..5)
            .filter_map(|_| a.alloc(&[Tier::Hdd]).map(|l| l.slot))
            .collect();
        assert_eq!(got, vec![0, 1, 2, 4, 5]);
        a.free_now(Loc {
            tier: Tier::Hdd,
            slot: 1,
        });
        a.free_now(Loc {
            tier: Tier::Hdd,
            slot: 4,
        });
        got = (0..3)
            .filter_map(|_| a.alloc_new(&[Tier::Hdd], None).map(|l| l.slot))
            .collect();
        assert_eq!(got, vec![1, 4, 6], "new data: lowest first");
        for slot in [2, 5, 0] {
            a.free_now(Loc {
                tier: Tier::Hdd,
                slot,
            });
        }
        // New data takes 0; moves take 5, then 2 (the last given back that
        // is still free), then the lowest.
        assert_eq!(a.alloc_new(&[Tier::Hdd], None).map(|l| l.slot), Some(0));
        got = (0..3)
            .filter_map(|_| a.alloc(&[Tier::Hdd]).map(|l| l.slot))
            .collect();
        assert_eq!(got, vec![5, 2, 7], "moves: the last given back first");
        // Past the first word, and to the end.
        let rest: Vec<u32> = std::iter::from_fn(|| a.alloc(&[Tier::Hdd]).map(|l| l.slot)).collect();
        assert_eq!(rest.len(), 120);
        assert!(!rest.contains(&64) && !rest.contains(&65));
        assert_eq!(rest.last(), Some(&129));
        assert_eq!(a.free_count(Tier::Hdd), 0);
    }

    #[test]
    fn new_data_on_the_hdd_takes_the_first_free_slot_from_its_goal() {
        let used = [5, 6, 64].map(|slot| Loc {
            tier: Tier::Hdd,
            slot,
        });
        let a = Allocator::new([4, 200], used.into_iter());
        let hdd = |a: &Allocator, goal| a.alloc_new(&[Tier::Hdd], goal).map(|l| l.slot);
        assert_eq!(hdd(&a, Some(3)), Some(3), "a free goal");
        assert_eq!(hdd(&a, Some(5)), Some(7), "taken: the next free after it");
        assert_eq!(hdd(&a, Some(63)), Some(63));
        assert_eq!(hdd(&a, Some(64)), Some(65), "across a word");
        assert_eq!(hdd(&a, Some(500)), Some(0), "past the end: the lowest");
        assert_eq!(hdd(&a, None), Some(1), "no goal: the lowest");
        // The goal is the HDD's: the SSD hands out its lowest.
        assert_eq!(
            a.alloc_new(&[Tier::Ssd, Tier::Hdd], Some(3)),
            Some(Loc {
                tier: Tier::Ssd,
                slot: 0
            })
        );
        // Nothing free within GOAL_WORDS words of the goal: the lowest.
        let far = Allocator::new([0, 64 * (GOAL_WORDS as u32 + 2)], std::iter::empty());
        for _ in 0..64 * GOAL_WORDS as u32 {
            let _ = far.alloc_new(&[Tier::Hdd], Some(64));
        }
        assert_eq!(hdd(&far, Some(64)), Some(0));
        assert_eq!(hdd(&far, Some(64)), Some(1));
    }

    #[test]
    fn the_hints_for_moves_stay_bounded_and_keep_the_latest() {
        let n = 3 * RECENT_MAX as u32;
        let used = (0..n).map(|slot| Loc {
            tier: Tier::Hdd,
            slot,
        });
        let a = Allocator::new([0, n], used);
        for slot in 0..n {
            a.free_now(Loc {
                tier: Tier::Hdd,
                slot,
            });
        }
        assert!(a.inner.lock().free[Tier::Hdd.index()].recent.len() <= RECENT_MAX);
        assert_eq!(a.free_count(Tier::Hdd), n, "every slot free once");
        assert_eq!(a.alloc(&[Tier::Hdd]).map(|l| l.slot), Some(n - 1));
        assert_eq!(a.alloc_new(&[Tier::Hdd], None).map(|l| l.slot), Some(0));
    }

    #[test]
    fn a_batch_of_moves_takes_a_run_of_neighbouring_slots() {
        // Free: every other slot of the first word (scattered), a run of 5
        // at 70..75, and everything from 100 on.
        let used = (0..100u32)
            .filter(|s| (*s < 64 && s % 2 == 0) || (64..100).contains(s) && !(70..75).contains(s))
            .map(|slot| Loc {
                tier: Tier::Hdd,
                slot,
            });
        let a = Allocator::new([4, 300], used);
        let run = |a: &Allocator, want, min| -> Vec<u32> {
            a.alloc_run(Tier::Hdd, want, min)
                .iter()
                .map(|l| l.slot)
                .collect()
        };
        assert_eq!(run(&a, 8, 8), (100..108).collect::<Vec<_>>());
        // Next fit: the following run starts where the last ended.
        assert_eq!(run(&a, 3, 8), vec![108, 109, 110], "fewer than min: want");
        assert_eq!(run(&a, 4, 4), vec![111, 112, 113, 114]);
        // A run given back last is taken first when it is long enough.
        for slot in (40..50).step_by(2) {
            a.free_now(Loc {
                tier: Tier::Hdd,
                slot,
            });
        }
        // 39..50 is free now; the hint is 48, and 8 each way are looked at.
        assert_eq!(
            run(&a, 8, 8),
            (40..48).collect::<Vec<_>>(),
            "round the hint"
        );
        // Too short round the hint (48, 49): the next run of 8.
        assert_eq!(run(&a, 8, 8), (115..123).collect::<Vec<_>>());
        // Wrapping round: a search from the end finds the run at 70.
        let rest = run(&a, 300, 100);
        assert_eq!(rest.len(), 300 - 123, "the tail is one run");
        assert_eq!(run(&a, 5, 5), (70..75).collect::<Vec<_>>());
        assert!(run(&a, 4, 4).is_empty(), "no run of 4 is left");
        assert_eq!(run(&a, 4, 1), vec![48, 49], "what is left round the hint");
        let free = a.free_count(Tier::Hdd);
        a.close_if_empty(Tier::Ssd, 4).expect("the SSD is empty");
        assert!(a.alloc_run(Tier::Ssd, 2, 1).is_empty(), "a closed tier");
        assert_eq!(a.free_count(Tier::Hdd), free);
    }

    #[test]
    fn a_tier_closes_only_when_empty_and_then_hands_out_nothing() {
        let a = Allocator::new([2, 2], std::iter::empty());
        let got = a.alloc(&[Tier::Ssd]).expect("a slot");
        assert_eq!(a.close_if_empty(Tier::Ssd, 2), Err(1));
        a.free_deferred(got);
        assert_eq!(a.close_if_empty(Tier::Ssd, 2), Err(1), "quarantine counts");
        let q = a.take_quarantine();
        a.settle(q, true);
        assert_eq!(a.close_if_empty(Tier::Ssd, 2), Ok(()));
        assert_eq!(a.alloc(&[Tier::Ssd]), None);
        assert_eq!(
            a.alloc(&[Tier::Ssd, Tier::Hdd]).map(|l| l.tier),
            Some(Tier::Hdd)
        );
        a.reopen(Tier::Ssd);
        assert_eq!(a.alloc(&[Tier::Ssd]).map(|l| l.tier), Some(Tier::Ssd));
    }
}
