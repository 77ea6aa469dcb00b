//! Tests of the placement policy: promotions, swaps and their margins,
//! the reserve and its cover, pins, zones and prefetch, recency.

use super::*;

fn c(extent: u64, tier: Tier, score: f32) -> Candidate {
    Candidate {
        extent,
        tier,
        score,
        recurrence: score,
        coverage: 256,
        pin: None,
        slot: extent as u32,
        active: true,
        clean: false,
    }
}

fn input(candidates: Vec<Candidate>, ssd_free: u64, reserve: u64) -> PlanInput {
    PlanInput {
        candidates,
        ssd_free,
        reserve,
        blocks_per_extent: 256,
        group: 1,
        protect: 0,
        shadows: false,
        admission: false,
        following: HashSet::new(),
    }
}

#[test]
fn with_admission_on_heat_promotes_nothing_but_the_reserve_is_kept() {
    let cfg = PolicyConfig::default();
    let mut hot = c(1, Tier::Hdd, 20.0);
    hot.recurrence = 10.0;
    let mut inp = input(vec![hot, c(2, Tier::Ssd, 0.5)], 0, 1);
    inp.admission = true;
    let p = plan(&cfg, &inp);
    assert!(p.iter().all(|m| m.to == Tier::Hdd), "{p:?}");
    assert!(
        p.iter()
            .any(|m| m.extent == 2 && m.reason == Reason::Reserve),
        "{p:?}"
    );
    inp.admission = false;
    assert!(plan(&cfg, &inp)
        .iter()
        .any(|m| m.extent == 1 && m.to == Tier::Ssd));
}

#[test]
fn promotes_into_free_space_above_the_reserve() {
    let cfg = PolicyConfig::default();
    let p = plan(
        &cfg,
        &input(
            vec![
                c(1, Tier::Hdd, 10.0),
                c(2, Tier::Hdd, 1.0),
                c(3, Tier::Hdd, 20.0),
            ],
            3,
            1,
        ),
    );
    // The two hottest, copied in source-slot order.
    assert_eq!(
        p,
        vec![
            Move {
                extent: 1,
                to: Tier::Ssd,
                reason: Reason::Hot,
                speculative: false
            },
            Move {
                extent: 3,
                to: Tier::Ssd,
                reason: Reason::Hot,
                speculative: false
            },
        ]
    );
}

#[test]
fn restores_the_reserve_coldest_first() {
    let cfg = PolicyConfig::default();
    let p = plan(
        &cfg,
        &input(
            vec![
                c(1, Tier::Ssd, 5.0),
                c(2, Tier::Ssd, 0.0),
                c(3, Tier::Ssd, 1.0),
            ],
            0,
            2,
        ),
    );
    assert_eq!(
        p,
        vec![
            Move {
                extent: 2,
                to: Tier::Hdd,
                reason: Reason::Reserve,
                speculative: true
            },
            Move {
                extent: 3,
                to: Tier::Hdd,
                reason: Reason::Reserve,
                speculative: true
            },
        ]
    );
}

#[test]
fn swaps_only_past_the_hysteresis_margin() {
    let cfg = PolicyConfig::default();
    // Full SSD (free == reserve): 10 vs cold 6 → 10 > 6*1.5+1 = 10? no.
    let p = plan(
        &cfg,
        &input(vec![c(1, Tier::Ssd, 6.0), c(2, Tier::Hdd, 10.0)], 1, 1),
    );
    assert!(p.is_empty(), "{p:?}");
    let p = plan(
        &cfg,
        &input(vec![c(1, Tier::Ssd, 6.0), c(2, Tier::Hdd, 10.5)], 1, 1),
    );
    // A free (reserve) slot: promote into it first, then refill it.
    assert_eq!(
        p,
        vec![
            Move {
                extent: 2,
                to: Tier::Ssd,
                reason: Reason::Hot,
                speculative: false
            },
            Move {
                extent: 1,
                to: Tier::Hdd,
                reason: Reason::Cold,
                speculative: false
            },
        ]
    );
    // No free slot at all: the demotion goes first.
    let p = plan(
        &cfg,
        &input(vec![c(1, Tier::Ssd, 6.0), c(2, Tier::Hdd, 10.5)], 0, 0),
    );
    assert_eq!(p[0].extent, 1);
    assert_eq!(p[0].to, Tier::Hdd);
}

#[test]
fn sparse_activity_counts_less() {
    let cfg = PolicyConfig::default();
    let mut sparse = c(1, Tier::Hdd, 8.0);
    sparse.coverage = 1;
    // Effective 1.0 < promote-min-score 2.0.
    assert!(plan(&cfg, &input(vec![sparse], 10, 1)).is_empty());
    sparse.coverage = 8;
    assert_eq!(plan(&cfg, &input(vec![sparse], 10, 1)).len(), 1);
}

#[test]
fn pins_win_and_pinned_extents_stay() {
    let cfg = PolicyConfig::default();
    let mut a = c(1, Tier::Ssd, 0.0);
    a.pin = Some(Tier::Ssd);
    let mut b = c(2, Tier::Ssd, 100.0);
    b.pin = Some(Tier::Hdd);
    let mut d = c(3, Tier::Hdd, 0.0);
    d.pin = Some(Tier::Ssd);
    let p = plan(&cfg, &input(vec![a, b, d], 0, 1));
    // b leaves (pin), d arrives (pin) using b's slot, then the reserve
    // needs one more slot but a is pinned: nothing else to demote.
    assert_eq!(
        p,
        vec![
            Move {
                extent: 2,
                to: Tier::Hdd,
                reason: Reason::Pin,
                speculative: false
            },
            Move {
                extent: 3,
                to: Tier::Ssd,
                reason: Reason::Pin,
                speculative: false
            },
        ]
    );
}

fn touched(extent: u64, tier: Tier, score: f32, coverage: u32) -> Candidate {
    Candidate {
        coverage,
        active: coverage > 0,
        ..c(extent, tier, score)
    }
}

#[test]
fn a_busy_zone_brings_its_neighbours_in_place_of_idle_data() {
    let cfg = PolicyConfig::default();
    // Zone 1 (extents 64..128): four extents touched a few times each
    // (below the promotion score), two untouched. Zone 3: SSD data nobody touches.
    // Zone 4: an SSD extent touched once (its zone is in use).
    let mut v = vec![
        touched(64, Tier::Hdd, 3.0, 1),
        touched(70, Tier::Hdd, 3.0, 1),
        touched(80, Tier::Hdd, 3.0, 1),
        touched(90, Tier::Hdd, 3.0, 1),
        touched(100, Tier::Hdd, 0.0, 0),
        touched(101, Tier::Hdd, 0.0, 0),
        touched(200, Tier::Ssd, 0.0, 0),
        touched(201, Tier::Ssd, 0.0, 0),
        touched(256, Tier::Ssd, 0.1, 1),
        // A zone with three touched extents only: not busy.
        touched(320, Tier::Hdd, 1.0, 1),
        touched(321, Tier::Hdd, 1.0, 1),
        touched(322, Tier::Hdd, 1.0, 1),
        touched(323, Tier::Hdd, 0.0, 0),
    ];
    for (k, x) in v.iter_mut().enumerate() {
        x.slot = k as u32;
    }
    // No free slot, no reserve: two swaps, the idle zone's extents out.
    let p = plan(&cfg, &input(v.clone(), 0, 0));
    let up: Vec<u64> = p
        .iter()
        .filter(|m| m.to == Tier::Ssd)
        .map(|m| m.extent)
        .collect();
    let down: Vec<u64> = p
        .iter()
        .filter(|m| m.to == Tier::Hdd)
        .map(|m| m.extent)
        .collect();
    assert!(p
        .iter()
        .filter(|m| m.to == Tier::Ssd)
        .all(|m| m.reason == Reason::Near));
    assert_eq!(down, vec![200, 201], "{p:?}");
    assert_eq!(up.len(), 2);
    // Touched extents come before untouched ones.
    assert!(up.iter().all(|e| [64, 70, 80, 90].contains(e)), "{up:?}");
    assert!(!up.contains(&320) && !down.contains(&256));
    // Free space above the reserve: every extent of the busy zone, and
    // nothing of the quiet one.
    let p = plan(&cfg, &input(v.clone(), 10, 0));
    let mut up: Vec<u64> = p.iter().map(|m| m.extent).collect();
    up.sort();
    assert_eq!(up, vec![64, 70, 80, 90, 100, 101]);
    // Four neighbouring touched extents (a sequential stream's start)
    // are one run: not a busy zone.
    let run: Vec<Candidate> = (0..6u64)
        .map(|e| {
            touched(
                128 + e,
                Tier::Hdd,
                if e < 4 { 1.0 } else { 0.0 },
                u32::from(e < 4),
            )
        })
        .collect();
    assert!(plan(&cfg, &input(run, 10, 0)).is_empty());
    // With admission at the miss on, a zone busy by its runs but not read
    // nearly whole (four of 64 extents touched) brings nothing up: the
    // misses place their own data.
    let mut adm = input(v.clone(), 10, 0);
    adm.admission = true;
    let p = plan(&cfg, &adm);
    assert!(p.iter().all(|m| m.to == Tier::Hdd), "{p:?}");
    // Prefetch off.
    let off = PolicyConfig {
        zone_extents: 0,
        ..cfg
    };
    assert!(plan(&off, &input(v, 10, 0)).is_empty());
}

#[test]
fn promotions_borrow_the_reserve_unless_writes_need_it() {
    let cfg = PolicyConfig::default();
    let v = vec![
        c(1, Tier::Ssd, 0.0),
        c(2, Tier::Ssd, 0.0),
        c(3, Tier::Hdd, 10.0),
        c(4, Tier::Hdd, 9.0),
    ];
    // Free == reserve == 2, nothing protected: both promotions first
    // (into lent slots), then their victims refill the reserve.
    let p = plan(&cfg, &input(v.clone(), 2, 2));
    let kinds: Vec<(u64, Tier, Reason)> = p.iter().map(|m| (m.extent, m.to, m.reason)).collect();
    assert_eq!(
        kinds,
        vec![
            (3, Tier::Ssd, Reason::Hot),
            (4, Tier::Ssd, Reason::Hot),
            (1, Tier::Hdd, Reason::Cold),
            (2, Tier::Hdd, Reason::Cold),
        ]
    );
    // Recent writes need the whole reserve: nothing is lent, so each
    // swap's demotion goes first.
    let mut inp = input(v.clone(), 2, 2);
    inp.protect = 2;
    let p = plan(&cfg, &inp);
    assert_eq!(p[0].to, Tier::Hdd, "{p:?}");
    // promote-borrow = 0: the same.
    let no = PolicyConfig {
        promote_borrow: 0.0,
        ..cfg
    };
    let p = plan(&no, &input(v.clone(), 2, 2));
    assert_eq!(p[0].to, Tier::Hdd, "{p:?}");
    // A budget that the promotions fill: the refill waits for a later
    // round (the reserve stays lent meanwhile).
    let tight = PolicyConfig {
        max_moves: 2,
        ..cfg
    };
    let p = plan(&tight, &input(v, 2, 2));
    assert!(p.iter().all(|m| m.to == Tier::Ssd), "{p:?}");
}

#[test]
fn a_coverage_window_ending_does_not_trigger_swaps() {
    let cfg = PolicyConfig::default();
    // The SSD extent's blocks were last touched two windows ago: its
    // coverage (and so its effective heat) just dropped to zero, while
    // its score is as high as the HDD extent's.
    let mut ssd = c(1, Tier::Ssd, 6.0);
    ssd.coverage = 0;
    let hdd = c(2, Tier::Hdd, 6.0);
    assert!(plan(&cfg, &input(vec![ssd, hdd], 0, 0)).is_empty());
    // A clearly hotter HDD extent still wins.
    let hotter = c(2, Tier::Hdd, 12.0);
    assert_eq!(plan(&cfg, &input(vec![ssd, hotter], 0, 0)).len(), 2);
}

fn idle(mut c: Candidate) -> Candidate {
    c.active = false;
    c
}

#[test]
fn data_in_use_displaces_idle_data_whatever_the_scores() {
    let cfg = PolicyConfig::default();
    // The old set: on the SSD with a high score from when it was read
    // at SSD speed, idle now. The new set: on the HDD, in use, with the
    // few hits it earns at HDD speed.
    let old = idle(c(1, Tier::Ssd, 500.0));
    let new = c(2, Tier::Hdd, 3.0);
    let p = plan(&cfg, &input(vec![old, new], 0, 0));
    assert_eq!(
        p,
        vec![
            Move {
                extent: 1,
                to: Tier::Hdd,
                reason: Reason::Idle,
                speculative: false
            },
            Move {
                extent: 2,
                to: Tier::Ssd,
                reason: Reason::Hot,
                speculative: false
            },
        ]
    );
    // Once swapped, the old set cannot come back by its score while
    // the new one is in use: no ping-pong.
    let back = plan(
        &cfg,
        &input(
            vec![idle(c(1, Tier::Hdd, 500.0)), c(2, Tier::Ssd, 3.0)],
            0,
            0,
        ),
    );
    assert!(back.is_empty(), "{back:?}");
    // Both in use: the score and the margin decide, as before.
    let both = plan(
        &cfg,
        &input(vec![c(1, Tier::Ssd, 500.0), c(2, Tier::Hdd, 3.0)], 0, 0),
    );
    assert!(both.is_empty(), "{both:?}");
    // Idle victims with a clean HDD copy go first (they leave for
    // free), even when colder unclean ones exist.
    let mut clean = idle(c(3, Tier::Ssd, 50.0));
    clean.clean = true;
    let p = plan(
        &cfg,
        &input(vec![idle(c(1, Tier::Ssd, 5.0)), clean, new], 0, 0),
    );
    assert_eq!(p[0].extent, 3, "{p:?}");
}

#[test]
fn clean_copies_cover_the_reserve() {
    let cfg = PolicyConfig::default();
    let clean = |e, active| Candidate {
        clean: true,
        active,
        ..c(e, Tier::Ssd, 1.0)
    };
    // Reserve 2, nothing free; two SSD extents with clean copies, one
    // idle: covered, nothing moves (an idle one demoted now would come
    // back by a copy if read again).
    let p = plan(
        &cfg,
        &input(
            vec![clean(1, false), clean(2, true), c(3, Tier::Ssd, 0.5)],
            0,
            2,
        ),
    );
    assert!(p.is_empty(), "{p:?}");
    // One clean extent covers one slot; the other is copied out, from
    // the extents without a clean copy.
    let p = plan(
        &cfg,
        &input(
            vec![clean(1, false), c(2, Tier::Ssd, 3.0), c(3, Tier::Ssd, 0.5)],
            0,
            2,
        ),
    );
    assert_eq!(
        p,
        vec![Move {
            extent: 3,
            to: Tier::Hdd,
            reason: Reason::Reserve,
            speculative: true
        }]
    );
    // Without clean copies the coldest are copied out, as before.
    let p = plan(
        &cfg,
        &input(vec![c(1, Tier::Ssd, 2.0), c(3, Tier::Ssd, 0.5)], 0, 1),
    );
    assert_eq!(p[0].extent, 3);
}

/// With admission at the miss, an arriving zone comes up in slot order, its
/// untouched extents among the touched ones (one pass, merged HDD reads),
/// and with too little room for all, the busiest zone's extents in order
/// (busiest by runs in use, `Zones::in_use`) are the ones chosen; without
/// admission, extents in use go first.
#[test]
fn an_arriving_zone_comes_up_in_slot_order() {
    let cfg = PolicyConfig {
        zone_extents: 8,
        zone_min_active: 3,
        ..PolicyConfig::default()
    };
    // Zone 0: 0..8 on the HDD, 2 and 5 untouched (six of eight read).
    let zone = |base: u64| -> Vec<Candidate> {
        (base..base + 8)
            .map(|e| {
                let mut x = if e % 8 == 2 || e % 8 == 5 {
                    touched(e, Tier::Hdd, 0.0, 0)
                } else {
                    touched(e, Tier::Hdd, 1.0, 1)
                };
                x.slot = e as u32;
                x
            })
            .collect()
    };
    let up = |inp: &PlanInput| -> Vec<u64> {
        plan(&cfg, inp)
            .iter()
            .filter(|m| m.to == Tier::Ssd && m.reason == Reason::Near)
            .map(|m| m.extent)
            .collect()
    };
    let mut adm = input(zone(0), 10, 0);
    adm.admission = true;
    assert_eq!(up(&adm), (0..8).collect::<Vec<_>>());
    // Two zones arriving, room for five above the reserve: zone 0 as
    // above (three runs in use: the busier), zone 1 with only extent 9
    // untouched. Zone 0's extents in order, 2 among them, not the touched
    // extents first.
    let mut two = zone(0);
    let mut z1: Vec<Candidate> = (8..16).map(|e| touched(e, Tier::Hdd, 1.0, 1)).collect();
    z1[1] = touched(9, Tier::Hdd, 0.0, 0);
    for x in z1.iter_mut() {
        x.slot = x.extent as u32;
    }
    two.extend(z1);
    let mut adm = input(two.clone(), 5, 0);
    adm.admission = true;
    assert_eq!(up(&adm), vec![0, 1, 2, 3, 4]);
    // Without admission (every busy zone prefetched), extents in use first.
    let plain = input(two, 5, 0);
    assert_eq!(up(&plain), vec![0, 1, 3, 4, 6]);
}

/// A set arriving over neighbouring zones is found from the first zone
/// read nearly whole outwards: a neighbour with a quarter of its extents
/// touched, mostly on the HDD, arrives with it (its untouched extents are
/// looked up as candidates, it is not busy for that), a zone beyond a gap
/// does not; and a zone found so stays followed while any touched extent
/// of it is on the HDD.
#[test]
fn an_arrival_grows_into_neighbouring_zones() {
    let cfg = PolicyConfig {
        zone_extents: 8,
        zone_min_active: 3,
        ..PolicyConfig::default()
    };
    let hdd = |e: u64| touched(e, Tier::Hdd, 1.0, 1);
    // Zone 0: six of eight; zone 1: two of eight; zone 2: one; zone 3: two,
    // touched earlier in the windows but idle now (no sweep).
    let mut v: Vec<Candidate> = [0, 1, 3, 4, 6, 7, 9, 13, 18, 25, 30]
        .into_iter()
        .map(|e| if e >= 24 { idle(hdd(e)) } else { hdd(e) })
        .collect();
    let zones = Zones::find(&cfg, &v, &HashSet::new());
    assert_eq!(zones.arriving(), &HashSet::from([0, 1]));
    assert!(zones.is_busy(0) && !zones.is_busy(9));
    let listed: Vec<u64> = zones.busy_extents(64).collect();
    assert_eq!(listed, (0..16).collect::<Vec<_>>());
    // Zone 1 mostly up (two of its three touched extents on the SSD, and
    // zone 0 gone idle): followed, it stays while its other is on the HDD.
    v.retain(|c| c.extent >= 8);
    v[0].tier = Tier::Ssd;
    v.push(touched(10, Tier::Ssd, 1.0, 1));
    assert!(Zones::find(&cfg, &v, &HashSet::new()).arriving().is_empty());
    let followed = Zones::find(&cfg, &v, &HashSet::from([1]));
    assert_eq!(followed.arriving(), &HashSet::from([1]));
    v[1].tier = Tier::Ssd;
    assert!(Zones::find(&cfg, &v, &HashSet::from([1]))
        .arriving()
        .is_empty());
}

#[test]
fn a_zone_swept_at_the_hdds_pace_is_arriving() {
    // Zones of 8 extents. Zone 2: a quarter of it (two extents) touched
    // and in use now, on the HDD, with no arriving neighbour: a sweep, a
    // set read at the HDD's pace, arriving. The same two touched earlier
    // in the windows but idle now are not; nor are two in use of which
    // more than half are on the SSD already; nor is one alone.
    let cfg = PolicyConfig {
        zone_extents: 8,
        zone_min_active: 3,
        ..PolicyConfig::default()
    };
    let hdd = |e: u64| touched(e, Tier::Hdd, 1.0, 1);
    let none = HashSet::new();
    let swept = vec![hdd(17), hdd(21)];
    assert_eq!(
        Zones::find(&cfg, &swept, &none).arriving(),
        &HashSet::from([2])
    );
    let earlier: Vec<Candidate> = swept.iter().cloned().map(idle).collect();
    assert!(Zones::find(&cfg, &earlier, &none).arriving().is_empty());
    let up = vec![
        hdd(17),
        touched(21, Tier::Ssd, 1.0, 1),
        touched(22, Tier::Ssd, 1.0, 1),
    ];
    assert!(Zones::find(&cfg, &up, &none).arriving().is_empty());
    assert!(Zones::find(&cfg, &[hdd(17)], &none).arriving().is_empty());
    // Not busy for that: without admission a sweep prefetches nothing.
    assert!(!Zones::find(&cfg, &swept, &none).is_busy(17));
    let mut adm = input(
        vec![hdd(17), hdd(21), touched(18, Tier::Hdd, 0.0, 0)],
        10,
        0,
    );
    assert!(plan(&cfg, &adm).is_empty());
    adm.admission = true;
    let p = plan(&cfg, &adm);
    let mut up: Vec<u64> = p.iter().map(|m| m.extent).collect();
    up.sort();
    assert_eq!(up, vec![17, 18, 21], "{p:?}");
    assert!(p.iter().all(|m| m.reason == Reason::Near));
}

#[test]
fn a_zone_mostly_in_use_stays_busy_for_its_last_extents() {
    // Zones of 8 extents, busy at 3 runs. Zone 0: extents 0..7 in use
    // (on the SSD, one run) and extent 7 on the HDD, untouched: the
    // zone is busy by its share of extents in use (at least three
    // quarters), so 7 comes up.
    let cfg = PolicyConfig {
        zone_extents: 8,
        zone_min_active: 3,
        ..PolicyConfig::default()
    };
    let mut v: Vec<Candidate> = (0..7).map(|e| touched(e, Tier::Ssd, 3.0, 1)).collect();
    v.push(touched(7, Tier::Hdd, 0.0, 0));
    let p = plan(&cfg, &input(v.clone(), 10, 0));
    assert_eq!(
        p,
        vec![Move {
            extent: 7,
            to: Tier::Ssd,
            reason: Reason::Near,
            speculative: false
        }]
    );
    // With admission at the miss on, a zone whose set is mostly up keeps
    // to admission: its hole is not prefetched.
    let mut adm = input(v.clone(), 10, 0);
    adm.admission = true;
    assert!(plan(&cfg, &adm).is_empty());
    // A set arriving (the same zone read nearly whole, its extents still
    // on the HDD) comes up in zone order, the untouched extent with it.
    let mut arriving: Vec<Candidate> = (0..7).map(|e| touched(e, Tier::Hdd, 1.0, 1)).collect();
    arriving.push(touched(7, Tier::Hdd, 0.0, 0));
    for (k, x) in arriving.iter_mut().enumerate() {
        x.slot = k as u32;
    }
    let mut adm = input(arriving, 10, 0);
    adm.admission = true;
    let up: Vec<u64> = plan(&cfg, &adm)
        .iter()
        .filter(|m| m.to == Tier::Ssd && m.reason == Reason::Near)
        .map(|m| m.extent)
        .collect();
    assert_eq!(up.len(), 8, "{up:?}");
    assert!(up.contains(&7));
    // A zone found arriving in an earlier round is followed through: most
    // of what was read is up by now (five of seven), two touched extents
    // and the untouched one are still on the HDD. Unfollowed, admission
    // brings them up one by one; followed, they come up together.
    let mut half: Vec<Candidate> = (0..7)
        .map(|e| touched(e, if e < 5 { Tier::Ssd } else { Tier::Hdd }, 1.0, 1))
        .collect();
    half.push(touched(7, Tier::Hdd, 0.0, 0));
    for (k, x) in half.iter_mut().enumerate() {
        x.slot = k as u32;
    }
    let mut adm = input(half.clone(), 10, 0);
    adm.admission = true;
    assert!(plan(&cfg, &adm).is_empty());
    adm.following = HashSet::from([0]);
    let up: Vec<u64> = plan(&cfg, &adm)
        .iter()
        .filter(|m| m.to == Tier::Ssd && m.reason == Reason::Near)
        .map(|m| m.extent)
        .collect();
    assert_eq!(up, vec![5, 6, 7]);
    // The round hands the zone on to the next as still arriving.
    assert_eq!(plan_round(&cfg, &adm).1, HashSet::from([0]));
    // Once every touched extent is up, the zone is no longer followed.
    for x in half.iter_mut().take(7) {
        x.tier = Tier::Ssd;
    }
    let zones = Zones::find(&cfg, &half, &HashSet::from([0]));
    assert!(zones.arriving().is_empty());
    // Five in use of eight (under three quarters, one run): not busy.
    let mut few: Vec<Candidate> = (0..5).map(|e| touched(e, Tier::Ssd, 1.0, 1)).collect();
    few.push(touched(7, Tier::Hdd, 0.0, 0));
    assert!(plan(&cfg, &input(few, 10, 0)).is_empty());
}

#[test]
fn a_burst_within_one_second_earns_no_promotion() {
    // Scores past the promotion mark, free room: the extent that came
    // back moves up, the one touched by a burst of requests in one
    // visit does not.
    let cfg = PolicyConfig::default();
    let burst = Candidate {
        recurrence: 1.0,
        ..c(1, Tier::Hdd, 6.0)
    };
    let back = Candidate {
        recurrence: 2.0,
        ..c(2, Tier::Hdd, 3.0)
    };
    let p = plan(&cfg, &input(vec![burst, back], 10, 0));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!((p[0].extent, p[0].reason), (2, Reason::Hot));
}

#[test]
fn a_scatter_of_single_touches_is_no_working_set() {
    // Zone 1: six extents touched in one or two visits each (uniform
    // random reads over a large region), two untouched, free room:
    // nothing is prefetched. The same zone whose extents keep coming
    // back is a working set.
    let cfg = PolicyConfig::default();
    let zone = |recurrence: f32| -> Vec<Candidate> {
        let mut v: Vec<Candidate> = [64, 66, 70, 80, 90, 100]
            .into_iter()
            .map(|e| Candidate {
                recurrence,
                ..touched(e, Tier::Hdd, 1.5, 1)
            })
            .collect();
        v.push(touched(101, Tier::Hdd, 0.0, 0));
        v.push(touched(102, Tier::Hdd, 0.0, 0));
        v
    };
    assert!(plan(&cfg, &input(zone(1.0), 100, 0)).is_empty());
    assert!(plan(&cfg, &input(zone(2.0), 100, 0)).is_empty());
    let p = plan(&cfg, &input(zone(3.0), 100, 0));
    assert_eq!(p.len(), 8, "{p:?}");
    assert!(p.iter().all(|m| m.reason == Reason::Near && !m.speculative));
}

#[test]
fn a_busy_zone_grows_into_active_neighbours_only() {
    // Zones of 4 extents, busy at 2 separate runs. Zone 1 (4..8) is
    // busy (runs at 4 and 6); zone 2 (8..12) has one touched extent, so
    // it joins; zone 3 (12..16) has none and stops the growth, so zone
    // 4 (16..20), touched once, stays out.
    let cfg = PolicyConfig {
        zone_extents: 4,
        zone_min_active: 2,
        ..PolicyConfig::default()
    };
    let v = vec![
        touched(4, Tier::Hdd, 3.0, 1),
        touched(5, Tier::Hdd, 0.0, 0),
        touched(6, Tier::Hdd, 3.0, 1),
        touched(9, Tier::Hdd, 3.0, 1),
        touched(10, Tier::Hdd, 0.0, 0),
        touched(13, Tier::Hdd, 0.0, 0),
        touched(17, Tier::Hdd, 1.0, 1),
        touched(18, Tier::Hdd, 0.0, 0),
    ];
    let p = plan(&cfg, &input(v, 20, 0));
    let mut up: Vec<u64> = p.iter().map(|m| m.extent).collect();
    up.sort();
    assert_eq!(up, vec![4, 5, 6, 9, 10], "{p:?}");
}
