//! S3-FIFO (Yang et al., SOSP 2023): a small FIFO (a tenth of the SSD) takes
//! every read miss; a unit read again while there moves on to the main
//! FIFO, one never read again leaves first and is remembered in a ghost
//! FIFO (as many ids as the SSD holds units); a miss the ghost remembers
//! goes straight to main. Main is a CLOCK with a 2-bit count. Write misses
//! are not admitted (tierd lands writes on flash without the unit). The
//! same order as tierd's admission at the miss (`volume::admit`), so the
//! two can be compared.

use super::{Ledger, Trace};
use std::collections::{HashSet, VecDeque};

/// Run S3-FIFO with `capacity` (≥ 1) units over `trace`.
pub(crate) fn run(capacity: u64, trace: &Trace, led: &mut Ledger) {
    let n = trace.units.len();
    let cap = capacity as usize;
    let small_cap = (cap / 10).max(1);
    let mut freq = vec![0u8; n];
    let mut small: VecDeque<usize> = VecDeque::new();
    let mut main: VecDeque<usize> = VecDeque::new();
    let mut ghost: VecDeque<usize> = VecDeque::new();
    let mut ghost_set: HashSet<usize> = HashSet::new();
    for r in &trace.refs {
        let hit = led.is_resident(r.id);
        led.access(r, hit);
        if hit {
            freq[r.id] = (freq[r.id] + 1).min(3);
            continue;
        }
        if r.write {
            continue;
        }
        while small.len() + main.len() >= cap {
            if small.len() >= small_cap || main.is_empty() {
                let Some(v) = small.pop_front() else { break };
                if freq[v] > 0 {
                    freq[v] = 0;
                    main.push_back(v);
                } else {
                    led.evict(v);
                    if ghost_set.insert(v) {
                        ghost.push_back(v);
                    }
                    while ghost.len() > cap {
                        if let Some(g) = ghost.pop_front() {
                            ghost_set.remove(&g);
                        }
                    }
                }
            } else {
                let Some(v) = main.pop_front() else { break };
                if freq[v] > 0 {
                    freq[v] -= 1;
                    main.push_back(v);
                } else {
                    led.evict(v);
                }
            }
        }
        led.admit(r);
        freq[r.id] = 0;
        if ghost_set.remove(&r.id) {
            main.push_back(r.id);
        } else {
            small.push_back(r.id);
        }
    }
}
