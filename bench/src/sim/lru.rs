//! LRU: every missed unit is admitted; when the SSD is full the least
//! recently referenced resident unit is evicted. One list over the resident
//! units, O(1) per reference.

use super::list::Lists;
use super::{Ledger, Trace};

/// Run LRU with `capacity` (≥ 1) units over `trace`.
pub(crate) fn run(capacity: u64, trace: &Trace, led: &mut Ledger) {
    let mut q = Lists::new(trace.units.len(), 1);
    for r in &trace.refs {
        let hit = q.owner(r.id).is_some();
        led.access(r, hit);
        if !hit && q.len(0) as u64 >= capacity {
            if let Some(v) = q.pop_front(0) {
                led.evict(v);
            }
        }
        if !hit {
            led.admit(r);
        }
        q.move_to_back(0, r.id);
    }
}

#[cfg(test)]
mod tests {
    use crate::sim::tests::{reads, whole};
    use crate::sim::{simulate, PolicyKind, SimConfig};

    const U: u64 = 1 << 20;

    fn lru(cap: u64, acc: &[crate::sim::Access]) -> crate::sim::SimResult {
        simulate(
            PolicyKind::Lru,
            &SimConfig {
                unit: U,
                capacity_units: cap,
            },
            acc,
        )
    }

    #[test]
    fn sim_lru_cyclic_scan_of_capacity_plus_one_never_hits() {
        let seq: Vec<u64> = (0..50).map(|i| i % 5).collect();
        let r = lru(4, &reads(&seq, U));
        assert_eq!(r.read_hit_bytes, 0);
        assert_eq!(r.promoted_bytes, 50 * U);
        // One unit fewer and everything after the first pass hits.
        let seq: Vec<u64> = (0..50).map(|i| i % 4).collect();
        assert_eq!(lru(4, &reads(&seq, U)).read_hit_bytes, 46 * U);
    }

    #[test]
    fn sim_lru_evicts_the_least_recent() {
        // cap 2: 1 2 1 3 (evicts 2) 1 (hit) 2 (miss, evicts 3) 3 (miss, evicts 1) 2 (hit)
        let r = lru(2, &reads(&[1, 2, 1, 3, 1, 2, 3, 2], U));
        assert_eq!(r.read_hit_bytes, 3 * U);
        assert_eq!(r.promoted_bytes, 5 * U);
    }

    #[test]
    fn sim_lru_counts_dirty_evictions_and_fast_promotes() {
        // Whole-unit writes to 1 and 2 are admitted without a copy (dirty);
        // reading 3 evicts 1 (dirty: demoted), reading 1 evicts 2 (dirty).
        let acc = whole(
            &[(1, true), (2, true), (3, false), (1, false), (1, true)],
            U,
        );
        let r = lru(2, &acc);
        assert_eq!(r.write_bytes, 3 * U);
        assert_eq!(r.write_hit_bytes, U);
        assert_eq!(r.promoted_bytes, 2 * U);
        assert_eq!(r.demoted_bytes, 2 * U);
        // Two fast admissions, two copies, one write hit.
        assert_eq!(r.ssd_write_bytes, 5 * U);
    }
}
