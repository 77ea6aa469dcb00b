//! The planner's view of the volume ([`Candidate`]s): built from the
//! extents that can move, so a round's work follows the SSD's size and
//! what was touched, not the volume's size.
//!
//! An extent on the HDD that nobody touched recently has score, recurrence
//! and coverage 0 and is idle: no promotion rule takes it, unless a pin
//! puts it on the SSD or its zone is busy (neighbourhood prefetch). So the
//! candidates are the SSD's extents, the mapped extents pinned to the SSD,
//! the mapped extents the heat map tracks as covered or in use (one whose
//! heat only decays has effective heat 0: only a promotion score of 0
//! takes it, and then all tracked extents are in), and the mapped extents
//! of busy zones; the plan made from them is the plan every mapped extent
//! would give. [`all_candidates`] still lists every mapped extent,
//! for operator requests that want them all (`tierctl top`, draining the
//! HDD).

use std::collections::HashSet;

use super::policy::{Candidate, PolicyConfig};
use super::zones::Zones;
use crate::heat::{ExtentHeat, HeatMap};
use crate::volume::{pin_in, pinned_ranges, Loc, Pin, Tier, Volume};

/// A candidate of `extent` at `loc`, with its heat (`None`: untracked,
/// never touched as far as heat knows) and pin.
fn candidate(
    extent: u64,
    loc: Loc,
    clean: bool,
    heat: Option<&ExtentHeat>,
    pins: &[Pin],
) -> Candidate {
    Candidate {
        extent,
        tier: loc.tier,
        slot: loc.slot,
        score: heat.map_or(0.0, |h| h.score),
        recurrence: heat.map_or(0.0, |h| h.recurrence),
        coverage: heat.map_or(0, |h| h.coverage),
        pin: pin_in(pins, extent),
        active: heat.is_some_and(|h| h.active),
        clean,
    }
}

/// The planner's candidates, in extent order: every extent on the SSD, and
/// the mapped extents pinned to the SSD or touched recently (covered in the
/// coverage windows, or in use). With `policy`, also those of its busy
/// zones (`zone-extents` above 0) and of the zones a set is arriving in,
/// `following` among them (the zones the last round found arriving, as the
/// planner is handed them: a zone followed through past half up is
/// arriving by that alone, and its untouched extents were left out, so the
/// prefetch stopped with them still on the HDD), and, with a
/// `promote-min-score` of 0, every mapped extent heat tracks (one whose
/// coverage expired has effective heat 0, which only such a score
/// promotes). Costs the SSD's extents, the heat map's entries, the pinned
/// extents and the busy zones, never the volume's size.
pub fn candidates(
    vol: &Volume,
    heat: &HeatMap,
    policy: Option<&PolicyConfig>,
    following: &HashSet<u64>,
) -> Vec<Candidate> {
    let pins = vol.pins();
    let blocks = vol.geometry().blocks_per_extent();
    let extents = vol.geometry().logical_extents();
    let touched = heat.touched();
    let heat_of = |e: u64| {
        touched
            .binary_search_by_key(&e, |(x, _)| *x)
            .ok()
            .map(|i| &touched[i].1)
    };
    let ssd = vol.ssd_extents();
    let on_ssd = |e: u64| ssd.binary_search_by_key(&e, |(x, _, _)| *x).is_ok();
    let mut out: Vec<Candidate> = ssd
        .iter()
        .map(|(e, loc, clean)| candidate(*e, *loc, *clean, heat_of(*e), &pins))
        .collect();
    let mapped = |e: u64| {
        vol.mapping(e)
            .map(|m| candidate(e, m.loc, m.shadow_clean(blocks), heat_of(e), &pins))
    };
    // Off the SSD, an extent neither covered nor in use has effective heat
    // 0 and no part in its zone's activity: most entries, whose heat is
    // only decaying, need no look at the map.
    let any_heat = policy.is_some_and(|c| c.promote_min_score <= 0.0);
    let wanted = |h: &ExtentHeat| any_heat || h.coverage > 0 || h.active;
    out.extend(
        touched
            .iter()
            .filter(|(e, h)| wanted(h) && !on_ssd(*e))
            .filter_map(|(e, _)| mapped(*e)),
    );
    for r in pinned_ranges(&pins, Tier::Ssd, extents) {
        out.extend(
            r.filter(|e| !on_ssd(*e) && !heat_of(*e).is_some_and(wanted))
                .filter_map(mapped),
        );
    }
    out.sort_unstable_by_key(|c| c.extent);
    if let Some(cfg) = policy.filter(|c| c.zone_extents > 0) {
        // The zones follow from the touched extents alone, all of which are
        // in by now; the untouched extents of the busy ones join them.
        let zones = Zones::find(cfg, &out, following);
        let more: Vec<Candidate> = zones
            .busy_extents(extents)
            .filter(|e| out.binary_search_by_key(e, |c| c.extent).is_err())
            .filter_map(mapped)
            .collect();
        if !more.is_empty() {
            out.extend(more);
            out.sort_unstable_by_key(|c| c.extent);
        }
    }
    out
}

/// Every mapped extent as a candidate, in extent order: a walk of the whole
/// extent map, for operator requests that list or move them all
/// (`tierctl top`, draining the HDD), not for a planning round.
pub fn all_candidates(vol: &Volume, heat: &HeatMap) -> Vec<Candidate> {
    let pins = vol.pins();
    let touched = heat.touched();
    let mut t = touched.iter().peekable();
    vol.mapped_extents()
        .into_iter()
        .map(|(e, loc, clean)| {
            while t.next_if(|(x, _)| *x < e).is_some() {}
            let h = t.peek().filter(|(x, _)| *x == e).map(|(_, h)| h);
            candidate(e, loc, clean, h, &pins)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::clock::ManualClock;
    use crate::device::{BlockDevice, MemDevice};
    use crate::heat::HeatConfig;
    use crate::migrate::policy::{plan, plan_round, PlanInput};
    use crate::store::{MemStore, MetaStore};
    use crate::volume::{Devices, FormatOptions, VolumeOptions};

    const EXTENT: u64 = 64 << 10;

    fn volume(clock: &Arc<ManualClock>) -> Volume {
        let devices = Devices {
            ssd: Arc::new(MemDevice::new((1 << 20) + 48 * EXTENT)) as Arc<dyn BlockDevice>,
            hdd: Arc::new(MemDevice::new((1 << 20) + 600 * EXTENT)) as Arc<dyn BlockDevice>,
        };
        let store: Arc<dyn MetaStore> = Arc::new(MemStore::new());
        let format = FormatOptions {
            extent_size: EXTENT,
            reserve: Some(4 * EXTENT),
            force: false,
        };
        Volume::format(&devices, store.as_ref(), &format).unwrap();
        let opts = VolumeOptions {
            heat: HeatConfig {
                half_life: Duration::from_secs(10),
                coverage_window: Duration::from_secs(10),
                sequential_cutoff: crate::units::ByteSize(1 << 40),
                ..HeatConfig::default()
            },
            clock: clock.clone(),
            ..Default::default()
        };
        Volume::open_with(devices, store, opts).unwrap()
    }

    /// The planner's candidates leave out only extents no rule moves: the
    /// plans made from them are the plans every mapped extent gives.
    /// What the planner is given for `candidates` of `vol` in these tests.
    fn plan_input(vol: &Volume, candidates: Vec<Candidate>, admission: bool) -> PlanInput {
        PlanInput {
            candidates,
            ssd_free: u64::from(vol.free_slots(Tier::Ssd)),
            reserve: 4,
            blocks_per_extent: vol.geometry().blocks_per_extent(),
            group: 4,
            protect: 0,
            shadows: true,
            admission,
            following: HashSet::new(),
        }
    }

    /// [`plan_input`] with the zones an earlier round found arriving.
    fn following_input(
        vol: &Volume,
        candidates: Vec<Candidate>,
        following: &HashSet<u64>,
    ) -> PlanInput {
        PlanInput {
            following: following.clone(),
            ..plan_input(vol, candidates, true)
        }
    }

    #[test]
    fn the_plan_from_the_candidates_is_the_plan_from_every_extent() {
        let clock = Arc::new(ManualClock::new());
        let vol = volume(&clock);
        let heat = vol.heat();
        let extents = vol.geometry().logical_extents();
        let mut rng = rand::rngs::StdRng::seed_from_u64(28);
        // Data everywhere but a few holes: the SSD fills, the rest spills.
        let data = vec![7u8; 4096];
        for e in 0..extents {
            if e % 11 != 5 {
                vol.write(e * EXTENT, &data, false).unwrap();
            }
        }
        vol.pin(300 * EXTENT, 6 * EXTENT, Some(Tier::Ssd)).unwrap();
        vol.pin(302 * EXTENT, EXTENT, None).unwrap();
        vol.pin(EXTENT, 2 * EXTENT, Some(Tier::Hdd)).unwrap();
        let zoned = PolicyConfig {
            zone_extents: 8,
            zone_min_active: 2,
            max_moves: 1000,
            ..PolicyConfig::default()
        };
        let mut buf = vec![0u8; 8 * 4096];
        let mut compared = 0;
        // The zones a round with admission found arriving, handed to the
        // next (as the migrator does), and how often there were any.
        let mut following: HashSet<u64> = HashSet::new();
        let mut followed = 0;
        // The writes' heat is gone after a hundred seconds or so (ten
        // half-lives); the reads keep some extents tracked.
        for second in 0..260u64 {
            let mut moves = Vec::new();
            // A working set that keeps coming back (zones 20..24), a hot
            // set that moves every minute, a wandering hot spot, and a
            // scatter of single reads.
            for _ in 0..rng.gen_range(0..16) {
                let (e, len) = match rng.gen_range(0..4) {
                    0 => (rng.gen_range(160..192), 4096),
                    1 => (400 + (second / 60) * 7 + rng.gen_range(0..3), 8 * 4096),
                    2 => ((second * 3 + rng.gen_range(0..4)) % extents, 4096),
                    _ => (rng.gen_range(0..extents), 4096),
                };
                let off = e * EXTENT + rng.gen_range(0..8) * 4096;
                vol.read(off, &mut buf[..len]).unwrap();
            }
            clock.advance(Duration::from_secs(1));
            heat.tick(vol.clock().now());
            if second < 130 || second % 5 != 4 {
                continue;
            }
            let any_score = PolicyConfig {
                promote_min_score: 0.0,
                ..zoned
            };
            for (cfg, admission) in [
                (zoned, false),
                (PolicyConfig::default(), false),
                (zoned, true),
                (any_score, false),
            ] {
                let none = HashSet::new();
                let some = candidates(&vol, &heat, Some(&cfg), &none);
                let all = all_candidates(&vol, &heat);
                assert!(some.windows(2).all(|w| w[0].extent < w[1].extent));
                assert!(some.iter().all(|c| all.contains(c)), "{second}");
                assert!(some.len() < all.len(), "{} of {}", some.len(), all.len());
                let input = |candidates| plan_input(&vol, candidates, admission);
                let want = plan(&cfg, &input(all));
                assert_eq!(plan(&cfg, &input(some)), want, "second {second}");
                compared += usize::from(!want.is_empty());
                if !admission && cfg == zoned {
                    moves = want;
                }
            }
            // With admission, each round handed the last one's arrivals:
            // a zone followed past half up lists its untouched extents too.
            let some = candidates(&vol, &heat, Some(&zoned), &following);
            let all = all_candidates(&vol, &heat);
            let (want, arrivals) = plan_round(&zoned, &following_input(&vol, all, &following));
            let (got, _) = plan_round(&zoned, &following_input(&vol, some, &following));
            assert_eq!(got, want, "second {second}, following {following:?}");
            followed += usize::from(!following.is_empty());
            following = arrivals;
            // Carry the plan out, so the next comparison starts elsewhere.
            for m in moves {
                crate::migrate::copy::migrate_batch(
                    &vol,
                    &[(m.extent, m.reason)],
                    m.to,
                    &mut |_| {},
                )
                .unwrap();
            }
        }
        assert!(compared > 10, "plans that move something: {compared}");
        assert!(followed > 0, "no round followed an arrival");
    }

    /// An extent whose coverage expired has effective heat 0: left out,
    /// unless a promotion score of 0 could take it.
    #[test]
    fn extents_only_decaying_are_in_only_for_a_promotion_score_of_zero() {
        let clock = Arc::new(ManualClock::new());
        let vol = volume(&clock);
        let heat = vol.heat();
        let data = vec![7u8; 4096];
        for e in 0..100 {
            vol.write(e * EXTENT, &data, false).unwrap();
        }
        // Room on the SSD.
        vol.discard(0, 30 * EXTENT, false, false, false).unwrap();
        vol.flush().unwrap();
        let hdd = (30..100)
            .find(|e| vol.mapping(*e).is_some_and(|m| m.loc.tier == Tier::Hdd))
            .unwrap();
        let mut buf = vec![0u8; 4096];
        for _ in 0..40 {
            vol.read(hdd * EXTENT, &mut buf).unwrap();
            clock.advance(Duration::from_secs(1));
            heat.tick(vol.clock().now());
        }
        // Twenty-five seconds later: coverage gone, idle, still coming back.
        for _ in 0..25 {
            clock.advance(Duration::from_secs(1));
            heat.tick(vol.clock().now());
        }
        assert_eq!((heat.coverage(hdd), heat.is_active(hdd)), (0, false));
        assert!(heat.recurrence(hdd) >= 1.9 && heat.score(hdd) > 0.0);
        let input = |candidates| plan_input(&vol, candidates, false);
        let any = PolicyConfig {
            promote_min_score: 0.0,
            ..PolicyConfig::default()
        };
        let want = plan(&any, &input(all_candidates(&vol, &heat)));
        assert!(want.iter().any(|m| m.extent == hdd && m.to == Tier::Ssd));
        assert_eq!(
            plan(
                &any,
                &input(candidates(&vol, &heat, Some(&any), &HashSet::new()))
            ),
            want
        );
        let cfg = PolicyConfig::default();
        let some = candidates(&vol, &heat, Some(&cfg), &HashSet::new());
        assert!(some.iter().all(|c| c.extent != hdd));
        let want = plan(&cfg, &input(all_candidates(&vol, &heat)));
        assert_eq!(plan(&cfg, &input(some)), want);
    }
}
