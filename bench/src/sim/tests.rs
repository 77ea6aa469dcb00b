//! Tests across the simulators: the trace reduction, the shared accounting,
//! the optimum against an exhaustive search and against every policy, the
//! curve; and helpers the policies' own tests share.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::workload::{Scramble, Zipf};

const U: u64 = 1 << 20;

/// Whole-unit reads of `units`, all at time 0.
pub(crate) fn reads(units: &[u64], unit: u64) -> Vec<Access> {
    units
        .iter()
        .map(|&u| Access {
            t_ns: 0,
            offset: u * unit,
            len: unit,
            write: false,
        })
        .collect()
}

/// Whole-unit references `(unit, write)`, all at time 0.
pub(crate) fn whole(refs: &[(u64, bool)], unit: u64) -> Vec<Access> {
    refs.iter()
        .map(|&(u, write)| Access {
            t_ns: 0,
            offset: u * unit,
            len: unit,
            write,
        })
        .collect()
}

pub(crate) fn trace(acc: &[Access], unit: u64) -> Trace {
    Trace::new(unit, acc)
}

pub(crate) fn ledger(t: &Trace, capacity: u64) -> Ledger {
    Ledger::new(t, capacity)
}

#[test]
fn sim_requests_split_into_one_reference_per_unit() {
    let acc = [
        Access {
            t_ns: 5,
            offset: U - 4096,
            len: U + 8192,
            write: true,
        },
        Access {
            t_ns: 6,
            offset: 3 * U,
            len: 0,
            write: false,
        },
        Access {
            t_ns: 7,
            offset: U,
            len: 512,
            write: false,
        },
        // Running off the end of the address space is clipped, not a panic.
        Access {
            t_ns: 8,
            offset: u64::MAX - 10,
            len: 100,
            write: false,
        },
    ];
    let t = Trace::new(U, &acc);
    let got: Vec<(u64, u64, bool, bool)> = t
        .refs
        .iter()
        .map(|r| (t.units[r.id], r.bytes, r.write, r.whole))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 4096, true, false),
            (1, U, true, true),
            (2, 4096, true, false),
            (1, 512, false, false),
            (u64::MAX / U, 10, false, false),
        ]
    );
    assert_eq!(t.refs[3].id, t.refs[1].id);
    // A unit of 0 bytes is 1 byte.
    assert_eq!(Trace::new(0, &acc[..1]).refs.len(), (U + 8192) as usize);
}

#[test]
fn sim_policy_names_round_trip() {
    for k in PolicyKind::ALL {
        assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
        assert_eq!(k.to_string(), k.name());
    }
    assert_eq!("ARC".parse::<PolicyKind>(), Ok(PolicyKind::Arc));
    let e = "mru".parse::<PolicyKind>().unwrap_err();
    assert!(
        e.to_string()
            .contains("lru, lfu, arc, smq, popular, optimal"),
        "{e}"
    );
}

#[test]
fn sim_shares_divide_bytes_and_survive_empty_traces() {
    let r = SimResult {
        policy: PolicyKind::Lru,
        capacity_units: 1,
        read_bytes: 300,
        read_hit_bytes: 150,
        write_bytes: 100,
        write_hit_bytes: 50,
        promoted_bytes: 200,
        demoted_bytes: 200,
        ssd_write_bytes: 250,
    };
    assert_eq!(r.read_hit_share(), 0.5);
    assert_eq!(r.hit_share(), 0.5);
    assert_eq!(r.migration_per_host_byte(), 1.0);
    for k in PolicyKind::ALL {
        let e = simulate(
            k,
            &SimConfig {
                unit: U,
                capacity_units: 4,
            },
            &[],
        );
        assert_eq!((e.hit_share(), e.read_hit_share()), (0.0, 0.0));
        assert_eq!(e.migration_per_host_byte(), 0.0);
    }
}

#[test]
fn sim_no_ssd_means_no_hits_and_no_copies() {
    let acc = whole(&[(1, false), (1, true), (1, false)], U);
    for k in PolicyKind::ALL {
        let cfg = SimConfig {
            unit: U,
            capacity_units: 0,
        };
        let r = simulate(k, &cfg, &acc);
        assert_eq!((r.read_bytes, r.write_bytes), (2 * U, U), "{k}");
        assert_eq!(
            r.read_hit_bytes + r.write_hit_bytes + r.ssd_write_bytes,
            0,
            "{k}"
        );
        assert_eq!(r.promoted_bytes + r.demoted_bytes, 0, "{k}");
    }
}

/// The most read hits any strategy gets: every admit / evict / bypass
/// choice at every reference to a unit that is not resident, by dynamic
/// programming over (position, resident set). `refs`: (unit < 16, write).
fn brute_force(refs: &[(usize, bool)], capacity: u32) -> u64 {
    let units = refs.iter().map(|r| r.0 + 1).max().unwrap_or(0);
    let masks = 1usize << units;
    // best[mask]: most read hits from position i on, holding `mask`.
    let mut best = vec![0u64; masks];
    for &(x, write) in refs.iter().rev() {
        let b = 1usize << x;
        let mut now = vec![0u64; masks];
        for (mask, slot) in now.iter_mut().enumerate() {
            if mask.count_ones() > capacity {
                continue;
            }
            *slot = if mask & b != 0 {
                u64::from(!write) + best[mask]
            } else {
                let mut v = best[mask];
                if mask.count_ones() < capacity {
                    v = v.max(best[mask | b]);
                }
                for y in 0..units {
                    if mask & (1 << y) != 0 {
                        v = v.max(best[(mask & !(1 << y)) | b]);
                    }
                }
                v
            };
        }
        best = now;
    }
    best[0]
}

/// Random references over `units` units: reads whole units (so read-hit
/// bytes count read hits), writes whole or partial.
fn random_refs(rng: &mut StdRng, n: usize, units: usize) -> (Vec<(usize, bool)>, Vec<Access>) {
    let mut refs = Vec::new();
    let mut acc = Vec::new();
    for i in 0..n {
        let x = rng.gen_range(0..units);
        let write = rng.gen_bool(0.3);
        let len = if write && rng.gen_bool(0.5) { 4096 } else { U };
        refs.push((x, write));
        acc.push(Access {
            t_ns: i as u64 * 400_000_000,
            offset: x as u64 * U,
            len,
            write,
        });
    }
    (refs, acc)
}

#[test]
fn sim_optimal_agrees_with_exhaustive_search() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut cases = 0;
    for (units, cap, n, runs) in [
        (5, 2, 12, 600),
        (4, 1, 12, 200),
        (6, 3, 14, 200),
        (8, 2, 16, 100),
    ] {
        for _ in 0..runs {
            let (refs, acc) = random_refs(&mut rng, n, units);
            let best = brute_force(&refs, cap);
            let cfg = SimConfig {
                unit: U,
                capacity_units: u64::from(cap),
            };
            let opt = simulate(PolicyKind::Optimal, &cfg, &acc).read_hit_bytes / U;
            assert_eq!(opt, best, "units {units} cap {cap}: {refs:?}");
            for k in PolicyKind::ALL {
                let got = simulate(k, &cfg, &acc).read_hit_bytes / U;
                assert!(
                    got <= best,
                    "{k} beat the optimum: {got} > {best} on {refs:?}"
                );
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 1100);
}

/// A skewed trace with a moving hot set: 4 KiB reads (equal bytes, so
/// read-hit bytes count read hits) and writes of 4 KiB to 2 MiB, 10 ms
/// apart.
fn skewed(seed: u64, n: usize, units: u64) -> Vec<Access> {
    let mut rng = StdRng::seed_from_u64(seed);
    let z = Zipf::new(units, 0.9);
    let perm = Scramble::new(units);
    (0..n)
        .map(|i| {
            let shift = (i / (n / 3).max(1)) as u64 * units / 3;
            let u = (perm.chunk(z.sample(&mut rng)) + shift) % units;
            let write = rng.gen_bool(0.25);
            let (offset, len) = if write {
                (
                    u * U + rng.gen_range(0..U / 4096) * 4096,
                    4096 << rng.gen_range(0..10),
                )
            } else {
                (u * U + rng.gen_range(0..U / 4096) * 4096, 4096)
            };
            Access {
                t_ns: i as u64 * 10_000_000,
                offset,
                len,
                write,
            }
        })
        .collect()
}

#[test]
fn sim_optimal_beats_every_policy_and_byte_counts_agree() {
    let caps = [1, 4, 16, 64, 128, 400];
    for seed in 1..=3 {
        let acc = skewed(seed, 20_000, 300);
        let total_read: u64 = acc.iter().filter(|a| !a.write).map(|a| a.len).sum();
        let total_write: u64 = acc.iter().filter(|a| a.write).map(|a| a.len).sum();
        let all = curve(&PolicyKind::ALL, U, &caps, &acc);
        assert_eq!(all.len(), PolicyKind::ALL.len() * caps.len());
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r.policy, PolicyKind::ALL[i / caps.len()]);
            assert_eq!(r.capacity_units, caps[i % caps.len()]);
            assert_eq!((r.read_bytes, r.write_bytes), (total_read, total_write));
            assert!(r.read_hit_bytes <= r.read_bytes && r.write_hit_bytes <= r.write_bytes);
            assert!(r.ssd_write_bytes >= r.write_hit_bytes + r.promoted_bytes);
            assert_eq!(r.demoted_bytes % U, 0);
            // The same run alone gives the same result.
            let cfg = SimConfig {
                unit: U,
                capacity_units: r.capacity_units,
            };
            if i % 7 == 0 {
                assert_eq!(&simulate(r.policy, &cfg, &acc), r);
            }
            let opt = &all[(PolicyKind::ALL.len() - 1) * caps.len() + i % caps.len()];
            assert!(
                opt.read_hit_bytes >= r.read_hit_bytes,
                "seed {seed}: {} with {} units: {} > optimum {}",
                r.policy,
                r.capacity_units,
                r.read_hit_bytes,
                opt.read_hit_bytes
            );
        }
        // LRU (a stack algorithm) and the optimum only gain from a bigger SSD;
        // with every unit fitting, every policy but smq hits all re-reads.
        for k in [PolicyKind::Lru, PolicyKind::Optimal] {
            let row: Vec<u64> = all
                .iter()
                .filter(|r| r.policy == k)
                .map(|r| r.read_hit_bytes)
                .collect();
            assert!(row.windows(2).all(|w| w[0] <= w[1]), "{k}: {row:?}");
        }
        let fits: Vec<&SimResult> = all.iter().filter(|r| r.capacity_units == 400).collect();
        for r in [fits[1], fits[2], fits[5], fits[6]] {
            assert_eq!(r.read_hit_bytes, fits[0].read_hit_bytes, "{}", r.policy);
            assert_eq!(r.demoted_bytes, 0);
        }
    }
}

/// 1M references through every policy (run with `--release -- --ignored
/// --nocapture` to see the times).
#[test]
#[ignore]
fn sim_speed_one_million_references() {
    let acc = skewed(1, 1_000_000, 200_000);
    let start = std::time::Instant::now();
    let t = Trace::new(U, &acc);
    eprintln!(
        "reduction: {:.2} s, {} references",
        start.elapsed().as_secs_f64(),
        t.refs.len()
    );
    assert_eq!(t.refs.len(), acc.len() + extra_refs(&acc));
    for k in PolicyKind::ALL {
        let s = std::time::Instant::now();
        let r = run(k, 20_000, &t);
        eprintln!(
            "{k}: {:.2} s, read hit share {:.3}",
            s.elapsed().as_secs_f64(),
            r.read_hit_share()
        );
    }
    eprintln!(
        "reduction and all five: {:.2} s",
        start.elapsed().as_secs_f64()
    );
}

/// References beyond one per access (requests crossing a unit boundary).
fn extra_refs(acc: &[Access]) -> usize {
    acc.iter()
        .map(|a| {
            let first = a.offset / U;
            let last = (a.offset + a.len - 1) / U;
            (last - first) as usize
        })
        .sum()
}
