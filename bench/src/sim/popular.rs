//! The popularity oracle: the best a placement can do that knows how often
//! each unit will be read, but not when. It reads the whole trace first,
//! ranks the units by read bytes (ties: the unit referenced first), and
//! keeps the top `capacity` of them on the SSD from their first reference
//! to the end; every other unit stays on the HDD. Nothing is ever evicted.
//!
//! Why it is here: for a trace whose references are independent draws
//! from a fixed popularity (the independent reference model, which the
//! generated `zipf` trace is), keeping the most popular units is the best
//! any online policy can do on average (Aho, Denning and Ullman's A0), so
//! its read-hit share is the ceiling for LRU, ARC, smq or tierd on such a
//! trace, below the offline optimum, which also knows the order. On a
//! trace whose popularity moves (`shift`) it is no ceiling: an adaptive
//! policy can beat a fixed set there.
//!
//! A unit's first reference is a miss like every policy's (the oracle
//! starts cold too), after which it is admitted with the usual copy, or
//! without one for a whole-unit write (the module docs of [`crate::sim`]).

use super::{Ledger, Trace};

/// Run the oracle with `capacity` (≥ 1) units over `trace`.
pub(crate) fn run(capacity: u64, trace: &Trace, led: &mut Ledger) {
    let chosen = top_by_reads(capacity, trace);
    for r in &trace.refs {
        let hit = led.is_resident(r.id);
        led.access(r, hit);
        if !hit && chosen[r.id] {
            led.admit(r);
        }
    }
}

/// Which units (by dense id) are among the `capacity` with the most read
/// bytes; a unit never read is never chosen.
fn top_by_reads(capacity: u64, trace: &Trace) -> Vec<bool> {
    let mut read = vec![0u64; trace.units.len()];
    for r in trace.refs.iter().filter(|r| !r.write) {
        read[r.id] += r.bytes;
    }
    // Dense ids follow first reference, so a stable sort by read bytes
    // breaks ties by first reference.
    let mut order: Vec<usize> = (0..read.len()).filter(|&id| read[id] > 0).collect();
    order.sort_by_key(|&id| std::cmp::Reverse(read[id]));
    let mut chosen = vec![false; read.len()];
    let keep = usize::try_from(capacity).unwrap_or(usize::MAX);
    for &id in order.iter().take(keep) {
        chosen[id] = true;
    }
    chosen
}

#[cfg(test)]
mod tests {
    use crate::sim::tests::{reads, whole};
    use crate::sim::{simulate, PolicyKind, SimConfig};

    const U: u64 = 1 << 20;

    fn popular(cap: u64, acc: &[crate::sim::Access]) -> crate::sim::SimResult {
        simulate(
            PolicyKind::Popular,
            &SimConfig {
                unit: U,
                capacity_units: cap,
            },
            acc,
        )
    }

    #[test]
    fn sim_popular_keeps_the_most_read_units_and_never_evicts() {
        // Reads: 1 five times, 2 three times, 3 twice, 4 once. Capacity 2
        // keeps 1 and 2: hits are every read of them but the first.
        let seq = [3, 1, 2, 1, 4, 2, 1, 3, 1, 2, 1];
        let r = popular(2, &reads(&seq, U));
        assert_eq!(r.read_hit_bytes, (4 + 2) * U);
        assert_eq!(r.promoted_bytes, 2 * U);
        assert_eq!(r.demoted_bytes, 0);
    }

    #[test]
    fn sim_popular_ranks_by_reads_not_writes() {
        // Unit 1 is written often and read once; unit 2 read twice.
        let acc = whole(
            &[
                (1, true),
                (1, true),
                (1, true),
                (1, false),
                (2, false),
                (2, false),
            ],
            U,
        );
        let r = popular(1, &acc);
        // Only 2 is kept: its second read hits, unit 1's writes all miss.
        assert_eq!(r.read_hit_bytes, U);
        assert_eq!(r.write_hit_bytes, 0);
        assert_eq!(r.promoted_bytes, U);
    }

    #[test]
    fn sim_popular_is_beaten_by_lru_when_popularity_moves() {
        // Phase one reads 1 and 2, phase two reads 3 and 4, each many
        // times; capacity 2. A fixed pair serves one phase, LRU both.
        let mut seq = Vec::new();
        for _ in 0..10 {
            seq.extend([1, 2]);
        }
        for _ in 0..10 {
            seq.extend([3, 4]);
        }
        let acc = reads(&seq, U);
        let fixed = popular(2, &acc);
        let lru = simulate(
            PolicyKind::Lru,
            &SimConfig {
                unit: U,
                capacity_units: 2,
            },
            &acc,
        );
        assert_eq!(fixed.read_hit_bytes, 18 * U);
        assert_eq!(lru.read_hit_bytes, 36 * U);
    }
}
