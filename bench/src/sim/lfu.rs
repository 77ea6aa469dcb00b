//! LFU with aging: every missed unit is admitted; when the SSD is full the
//! resident unit with the lowest count is evicted, ties going to the least
//! recently referenced. Counts belong to resident units only (an admitted
//! unit starts at 1, a hit adds 1, an evicted unit's count is forgotten:
//! in-cache LFU). Every `16 × capacity` references, hits and misses alike,
//! every count is halved (rounding down), so popularity that is no longer
//! renewed fades and a new hot set can displace an old one; without aging
//! a unit that was once very hot would stay forever. The order lives in a
//! B-tree keyed by (count, last reference), O(log capacity) per reference;
//! a halving rebuilds it, O(capacity log capacity) every 16 × capacity
//! references.

use std::collections::BTreeSet;

use super::{Ledger, Trace};

/// References between two halvings, per unit of capacity.
pub const AGING_PERIOD_PER_UNIT: u64 = 16;

/// Run LFU with `capacity` (≥ 1) units over `trace`, halving every
/// `AGING_PERIOD_PER_UNIT × capacity` references.
pub(crate) fn run(capacity: u64, trace: &Trace, led: &mut Ledger) {
    run_aging(
        capacity,
        Some(capacity.saturating_mul(AGING_PERIOD_PER_UNIT)),
        trace,
        led,
    );
}

/// Run LFU halving every `period` references (never with `None`).
pub(crate) fn run_aging(capacity: u64, period: Option<u64>, trace: &Trace, led: &mut Ledger) {
    let n = trace.units.len();
    // (count, last reference) of each resident unit; u64::MAX: not resident.
    let mut count = vec![u64::MAX; n];
    let mut last = vec![0u64; n];
    let mut order: BTreeSet<(u64, u64, usize)> = BTreeSet::new();
    let mut since_aging = 0u64;
    for (seq, r) in trace.refs.iter().enumerate() {
        let seq = seq as u64;
        let x = r.id;
        let hit = count[x] != u64::MAX;
        led.access(r, hit);
        if hit {
            order.remove(&(count[x], last[x], x));
            count[x] = count[x].saturating_add(1);
        } else {
            if order.len() as u64 >= capacity {
                if let Some((_, _, v)) = order.pop_first() {
                    count[v] = u64::MAX;
                    led.evict(v);
                }
            }
            led.admit(r);
            count[x] = 1;
        }
        last[x] = seq;
        order.insert((count[x], last[x], x));
        since_aging += 1;
        if period.is_some_and(|p| since_aging >= p) {
            since_aging = 0;
            order = order
                .into_iter()
                .map(|(c, t, id)| {
                    count[id] = c / 2;
                    (c / 2, t, id)
                })
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::{ledger, reads, trace};
    use crate::sim::{simulate, PolicyKind, SimConfig};

    const U: u64 = 1 << 20;

    fn lfu(cap: u64, seq: &[u64]) -> u64 {
        let cfg = SimConfig {
            unit: U,
            capacity_units: cap,
        };
        simulate(PolicyKind::Lfu, &cfg, &reads(seq, U)).read_hit_bytes / U
    }

    #[test]
    fn sim_lfu_evicts_the_least_frequent_then_the_least_recent() {
        // cap 2: 1 miss {1:1}, 1 hit {1:2}, 1 hit {1:3}, 2 miss {1:3, 2:1},
        // 3 miss evicts 2 {1:3, 3:1}, 2 miss evicts 3 {1:3, 2:1}, 1 hit,
        // 2 hit: 4 hits.
        assert_eq!(lfu(2, &[1, 1, 1, 2, 3, 2, 1, 2]), 4);
        // Ties go to the least recent: 3 evicts 1 (both at 1, 1 older),
        // 2 hits, 1 evicts 3 (count 1 against 2's 2).
        assert_eq!(lfu(2, &[1, 2, 3, 2, 1]), 1);
    }

    /// Phase one makes 0 and 1 very hot; phase two cycles 2 and 3 only.
    fn phase_change() -> Vec<u64> {
        let mut seq = Vec::new();
        for _ in 0..50 {
            seq.extend([0, 1]);
        }
        for _ in 0..100 {
            seq.extend([2, 3]);
        }
        seq
    }

    #[test]
    fn sim_lfu_with_aging_adapts_after_a_phase_change() {
        let t = trace(&reads(&phase_change(), U), U);
        // Without aging 0 and 1 end phase one at 50 each: the first new
        // reference evicts 0 (the older of the tie), then 2 and 3 keep
        // evicting each other under 1's 50. Phase one's 98 hits only.
        let mut led = ledger(&t, 2);
        run_aging(2, None, &t, &mut led);
        assert_eq!(led.finish(PolicyKind::Lfu, 2).read_hit_bytes, 98 * U);
        // With aging (halving after every 32nd reference) 1 ends phase one
        // at 16 and is halved to 8, 4, 2, 1 after references 127, 159, 191
        // and 223, the newcomer admitted there to 0 each time. Reference
        // 224 (unit 2) evicts that 0, and 225 (unit 3) evicts 1 (count 1,
        // older than 2's): references 226..299 all hit, 74 more.
        let mut led = ledger(&t, 2);
        run(2, &t, &mut led);
        assert_eq!(led.finish(PolicyKind::Lfu, 2).read_hit_bytes, (98 + 74) * U);
    }
}
