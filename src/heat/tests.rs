//! Tests of the heat map: scores, recurrence, coverage, idleness and
//! snapshots, the sparse table's life cycle and cap, and its answers
//! against the dense map it replaced.

use super::*;

const MIB: u64 = 1 << 20;

fn map() -> HeatMap {
    HeatMap::new(HeatConfig::default(), 8, MIB, 4096, Duration::ZERO)
}

#[test]
fn recurrence_counts_the_seconds_an_extent_comes_back_in_not_its_requests() {
    let m = map();
    let h = IoHint::default();
    // Extent 0: a run of ten requests within one second (two ticks in
    // that second). Extent 1: one request in each of three seconds.
    for i in 0..10 {
        m.record(i * 8192, 8192, h);
    }
    m.record(MIB, 4096, h);
    m.tick(Duration::from_millis(300));
    m.tick(Duration::from_millis(600));
    m.record(MIB + 4096, 4096, h);
    m.tick(Duration::from_millis(1300));
    m.record(MIB + 8192, 4096, h);
    m.tick(Duration::from_millis(2300));
    assert!(m.score(0) > 9.0, "{}", m.score(0));
    assert!((m.recurrence(0) - 1.0).abs() < 0.05, "{}", m.recurrence(0));
    assert!(m.recurrence(1) > 2.9, "{}", m.recurrence(1));
    // A restored score stands for at most two visits.
    let r = map();
    assert_eq!(r.restore(&m.snapshot()), 2);
    assert!((r.recurrence(0) - 2.0).abs() < 0.1);
}

#[test]
fn scores_accumulate_and_halve_each_half_life() {
    let h = map();
    for _ in 0..8 {
        assert!(h.record(MIB + 10, 100, IoHint::default()));
    }
    h.tick(Duration::from_secs(1));
    assert_eq!(h.score(1), 8.0);
    assert_eq!(h.score(0), 0.0);
    h.tick(Duration::from_secs(61));
    assert!((h.score(1) - 4.0).abs() < 1e-3, "{}", h.score(1));
}

#[test]
fn coverage_counts_distinct_blocks_across_extents() {
    let h = map();
    // 3 blocks at the end of extent 0 and 2 at the start of extent 1.
    h.record(MIB - 3 * 4096, 5 * 4096, IoHint::default());
    h.record(MIB - 4096, 1, IoHint::default());
    assert_eq!(h.coverage(0), 3);
    assert_eq!(h.coverage(1), 2);
    // A whole extent.
    h.record(2 * MIB, MIB, IoHint::default());
    assert_eq!(h.coverage(2), 256);
    // Coverage survives one rotation, not two.
    h.tick(Duration::from_secs(60));
    assert_eq!(h.coverage(2), 256);
    h.tick(Duration::from_secs(120));
    assert_eq!(h.coverage(2), 0);
}

#[test]
fn sequential_streams_earn_nothing() {
    let h = map();
    let hint = IoHint { seq_run: 8 * MIB };
    assert!(!h.record(0, MIB, hint));
    h.tick(Duration::from_secs(1));
    assert_eq!(h.score(0), 0.0);
    assert_eq!(h.coverage(0), 0);
    assert_eq!(h.bypassed(), 1);
}

#[test]
fn an_extent_untouched_for_idle_after_is_idle() {
    let h = map();
    assert!(!h.active_all()[2], "never touched");
    assert_eq!(h.idle_secs(2), None);
    h.record(2 * MIB, 4096, IoHint::default());
    h.tick(Duration::from_secs(1));
    assert!(h.active_all()[2]);
    assert_eq!(h.idle_secs(2), Some(0));
    // Touched again at 5 s: idle counts from there.
    h.tick(Duration::from_secs(4));
    h.record(2 * MIB, 4096, IoHint::default());
    h.tick(Duration::from_secs(5));
    h.tick(Duration::from_secs(14));
    assert_eq!(h.idle_secs(2), Some(9));
    assert!(h.active_all()[2]);
    h.tick(Duration::from_secs(15));
    assert!(!h.active_all()[2], "10 s without a touch");
    assert_eq!(h.active_all(), vec![false; 8]);
    // Its score is still there: idle is about recency, not frequency.
    assert!(h.score(2) > 1.0);
    h.clear(2);
    assert_eq!(h.idle_secs(2), None);
}

/// Touch `extent` `per_sec` times in each second from `from` to `to`
/// (exclusive), ticking once a second.
fn steady(h: &HeatMap, extent: u64, per_sec: u64, from: u64, to: u64) {
    for s in from..to {
        for i in 0..per_sec {
            h.record(extent * MIB + (i % 256) * 4096, 4096, IoHint::default());
        }
        h.tick(Duration::from_secs(s + 1));
    }
}

#[test]
fn an_extent_used_often_is_idle_once_it_misses_its_requests() {
    let h = map();
    // Extent 1: 20 requests a second for a minute; extent 2: one request
    // every 2 s. Then both stop at 60 s.
    for s in 0..60u64 {
        for _ in 0..20 {
            h.record(MIB, 4096, IoHint::default());
        }
        if s % 2 == 0 {
            h.record(2 * MIB, 4096, IoHint::default());
        }
        h.tick(Duration::from_secs(s + 1));
    }
    // A minute at 20 a second scores about 20 × 60 / ln 2 / 2 (half way
    // to the steady score): 10 missed requests take well under 2 s, so
    // it is idle after the floor of 2 silent seconds.
    h.tick(Duration::from_secs(61));
    assert!(h.is_active(1), "one silent second is not enough");
    h.tick(Duration::from_secs(62));
    assert!(!h.is_active(1), "2 s at 20 a second is 40 missed requests");
    // One request every 2 s: ten missed ones take over 10 s, so
    // `idle-after` decides.
    h.tick(Duration::from_secs(68));
    assert!(h.is_active(2));
    h.tick(Duration::from_secs(69));
    assert!(!h.is_active(2), "10 s after its last touch at 59 s");
}

#[test]
fn a_newly_used_extent_is_not_idle_before_its_rate_is_known() {
    let h = map();
    // 20 requests a second for 2 s only: its score (40) stands for less
    // than one request a second, so it keeps the full `idle-after`.
    steady(&h, 3, 20, 0, 2);
    h.tick(Duration::from_secs(10));
    assert!(h.is_active(3));
    // Turned off, every extent waits the full `idle-after`.
    let cfg = HeatConfig {
        idle_after_missed: 0.0,
        ..HeatConfig::default()
    };
    let g = HeatMap::new(cfg, 8, MIB, 4096, Duration::ZERO);
    steady(&g, 1, 50, 0, 60);
    g.tick(Duration::from_secs(69));
    assert!(g.is_active(1));
    g.tick(Duration::from_secs(70));
    assert!(!g.is_active(1));
    assert!(HeatConfig {
        idle_after_missed: -1.0,
        ..HeatConfig::default()
    }
    .validate()
    .is_err());
}

#[test]
fn snapshot_roundtrip() {
    let h = map();
    h.record(3 * MIB, 1, IoHint::default());
    h.tick(Duration::from_secs(1));
    let snap = h.snapshot();
    let g = map();
    assert_eq!(g.restore(&snap), 1);
    assert_eq!(g.score(3), 1.0);
    assert_eq!(g.restore(b"garbage"), 0);
}

fn cfg_with(max_tracked: u64) -> HeatConfig {
    HeatConfig {
        max_tracked,
        ..HeatConfig::default()
    }
}

#[test]
fn entries_appear_on_record_and_vanish_once_their_heat_is_gone() {
    let h = HeatMap::new(HeatConfig::default(), 1 << 24, MIB, 4096, Duration::ZERO);
    assert_eq!(
        (h.tracked(), h.memory_bytes()),
        (0, 0),
        "nothing per extent"
    );
    for e in [5u64, 6, 1 << 23] {
        h.record(e * MIB, 4096, IoHint::default());
    }
    assert_eq!(h.tracked(), 3);
    h.tick(Duration::from_secs(1));
    let t: Vec<u64> = h.touched().iter().map(|(e, _)| *e).collect();
    assert_eq!(t, vec![5, 6, 1 << 23]);
    assert!(h.touched().iter().all(|(_, x)| x.active && x.coverage == 1));
    // Ten minutes later the scores have decayed to nothing, but the
    // previous coverage window still holds the blocks.
    h.tick(Duration::from_secs(700));
    assert_eq!(h.score(5), 0.0);
    assert_eq!(h.coverage(5), 1);
    assert_eq!(h.tracked(), 3);
    // The next window ends: nothing left, the entries go.
    h.tick(Duration::from_secs(760));
    assert_eq!(h.tracked(), 0);
    assert!(h.touched().is_empty());
    assert_eq!(h.idle_secs(5), None);
    assert_eq!(h.dropped(), 0);
}

#[test]
fn an_entry_keeps_its_score_after_its_coverage_expires() {
    let h = map();
    for _ in 0..100 {
        h.record(MIB, 4096, IoHint::default());
    }
    h.tick(Duration::from_secs(1));
    h.tick(Duration::from_secs(61));
    h.tick(Duration::from_secs(121));
    assert_eq!(h.coverage(1), 0);
    assert!(h.score(1) > 20.0, "{}", h.score(1));
    assert_eq!(h.tracked(), 1);
    assert_eq!(h.idle_secs(1), Some(120));
    // A new touch brings coverage back.
    h.record(MIB + 8192, 8192, IoHint::default());
    assert_eq!(h.coverage(1), 2);
}

#[test]
fn past_the_cap_the_coldest_entries_are_dropped_and_counted() {
    let h = HeatMap::new(cfg_with(8), 1000, MIB, 4096, Duration::ZERO);
    // Extent k gets k+1 requests.
    for k in 0..8u64 {
        for _ in 0..=k {
            h.record(k * MIB, 4096, IoHint::default());
        }
    }
    h.tick(Duration::from_secs(1));
    assert_eq!((h.tracked(), h.dropped()), (8, 0));
    // Half a minute later all eight are idle; a ninth extent is in use:
    // the idle one with the lowest score goes, not the new one whose
    // score is lower still.
    h.record(100 * MIB, 4096, IoHint::default());
    h.tick(Duration::from_secs(31));
    assert_eq!((h.tracked(), h.dropped()), (8, 1));
    assert_eq!(h.score(0), 0.0);
    assert!(h.score(1) > 0.0);
    assert_eq!(h.score(100), 1.0);
    assert!(h.is_active(100));
    // Between ticks new extents may overshoot the cap by an eighth;
    // past that, touches of new extents are not tracked.
    h.record(101 * MIB, 4096, IoHint::default());
    h.record(102 * MIB, 4096, IoHint::default());
    assert_eq!((h.tracked(), h.dropped()), (9, 2));
    h.tick(Duration::from_secs(32));
    assert_eq!(h.coverage(102), 0);
    assert_eq!(h.score(102), 0.0);
    assert_eq!((h.tracked(), h.dropped()), (8, 3));
    // Extents in use outlast idle ones whatever the scores.
    assert!(h.is_active(101) && h.score(101) == 1.0);
}

#[test]
fn snapshot_is_in_extent_order_and_restores_within_the_volume() {
    let h = HeatMap::new(HeatConfig::default(), 2000, MIB, 4096, Duration::ZERO);
    for (e, n) in [(1000u64, 3), (1, 1), (64, 2), (65, 5)] {
        for _ in 0..n {
            h.record(e * MIB, 1, IoHint::default());
        }
    }
    h.tick(Duration::from_secs(1));
    let snap = h.snapshot();
    let mut want = b"HEAT1".to_vec();
    for (e, v) in [(1u32, 1.0f32), (64, 2.0), (65, 5.0), (1000, 3.0)] {
        want.extend_from_slice(&e.to_le_bytes());
        want.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(snap, want);
    let g = HeatMap::new(HeatConfig::default(), 2000, MIB, 4096, Duration::ZERO);
    assert_eq!(g.restore(&snap), 4);
    assert_eq!(g.snapshot(), snap);
    assert_eq!((g.score(65), g.recurrence(65)), (5.0, 2.0));
    assert_eq!((g.coverage(65), g.idle_secs(65)), (0, None));
    // A smaller volume takes what lies within it.
    let small = HeatMap::new(HeatConfig::default(), 100, MIB, 4096, Duration::ZERO);
    assert_eq!(small.restore(&snap), 3);
    assert_eq!(small.score(1000), 0.0);
    // A cap keeps the highest scores.
    let capped = HeatMap::new(cfg_with(2), 2000, MIB, 4096, Duration::ZERO);
    assert_eq!(capped.restore(&snap), 4);
    assert_eq!(capped.tracked(), 2);
    assert_eq!((capped.score(65), capped.score(1000)), (5.0, 3.0));
    assert_eq!(capped.dropped(), 2);
}

#[test]
fn clear_forgets_all_but_recurrence() {
    let h = map();
    h.record(3 * MIB, 8192, IoHint::default());
    h.tick(Duration::from_secs(1));
    h.record(3 * MIB, 4096, IoHint::default());
    h.tick(Duration::from_secs(2));
    let r = h.recurrence(3);
    h.clear(3);
    assert_eq!((h.score(3), h.coverage(3), h.idle_secs(3)), (0.0, 0, None));
    assert!(!h.is_active(3));
    assert_eq!(h.recurrence(3), r);
    assert_eq!(h.tracked(), 1);
    // Never touched: nothing to clear, nothing made.
    h.clear(4);
    assert_eq!(h.tracked(), 1);
}

#[test]
fn max_tracked_is_validated() {
    let mut c = HeatConfig::default();
    assert!(c.validate().is_ok());
    c.max_tracked = 0;
    assert_eq!(c.validate().unwrap_err().key, "heat.max-tracked");
}

/// The dense map this one replaced, as the reference its answers must
/// match: every extent's state in arrays, every tick over all of them.
struct Dense {
    cfg: HeatConfig,
    hits: Vec<u32>,
    score: Vec<f32>,
    rec: Vec<f32>,
    last: Vec<u32>,
    cur: Vec<u64>,
    prev: Vec<u64>,
    words: usize,
    last_tick: Duration,
    last_rotation: Duration,
}

impl Dense {
    fn new(cfg: HeatConfig, n: usize, words: usize) -> Dense {
        Dense {
            cfg,
            hits: vec![0; n],
            score: vec![0.0; n],
            rec: vec![0.0; n],
            last: vec![0; n],
            cur: vec![0; n * words],
            prev: vec![0; n * words],
            words,
            last_tick: Duration::ZERO,
            last_rotation: Duration::ZERO,
        }
    }

    fn record(&mut self, offset: u64, len: u64, es: u64) {
        for b in offset / 4096..(offset + len).div_ceil(4096) {
            let e = (b * 4096 / es) as usize;
            if e >= self.hits.len() {
                break;
            }
            let first_of_extent = b * 4096 % es == 0 || b == offset / 4096;
            if first_of_extent {
                self.hits[e] += 1;
            }
            let i = (b * 4096 % es / 4096) as usize;
            self.cur[e * self.words + i / 64] |= 1 << (i % 64);
        }
    }

    fn tick(&mut self, now: Duration) {
        let elapsed = now - self.last_tick;
        self.last_tick = now;
        let decay = 0.5f64.powf(elapsed.as_secs_f64() / self.cfg.half_life.as_secs_f64()) as f32;
        let stamp = HeatMap::stamp(now);
        for e in 0..self.hits.len() {
            let hits = std::mem::take(&mut self.hits[e]);
            let back = hits > 0 && std::mem::replace(&mut self.last[e], stamp) != stamp;
            if hits == 0 && self.score[e] == 0.0 && self.rec[e] == 0.0 {
                continue;
            }
            self.score[e] = fold(self.score[e], hits as f32, decay);
            self.rec[e] = fold(self.rec[e], if back { 1.0 } else { 0.0 }, decay);
        }
        if now - self.last_rotation >= self.cfg.coverage_window {
            self.last_rotation = now;
            self.prev = std::mem::replace(&mut self.cur, vec![0; self.prev.len()]);
        }
    }

    fn clear(&mut self, e: usize) {
        (self.hits[e], self.score[e], self.last[e]) = (0, 0.0, 0);
        for w in e * self.words..(e + 1) * self.words {
            (self.cur[w], self.prev[w]) = (0, 0);
        }
    }

    fn coverage(&self, e: usize) -> u32 {
        (e * self.words..(e + 1) * self.words)
            .map(|w| (self.cur[w] | self.prev[w]).count_ones())
            .sum()
    }
}

#[test]
fn answers_as_the_dense_map_did() {
    use rand::{Rng, SeedableRng};
    let cfg = HeatConfig {
        half_life: Duration::from_secs(5),
        coverage_window: Duration::from_secs(7),
        idle_after: Duration::from_secs(3),
        ..HeatConfig::default()
    };
    let (n, es) = (150usize, 256 << 10);
    let sparse = HeatMap::new(cfg, n as u64, es, 4096, Duration::ZERO);
    let mut dense = Dense::new(cfg, n, 1);
    let mut rng = rand::rngs::StdRng::seed_from_u64(28);
    let mut now = Duration::ZERO;
    let (mut gone, mut peak) = (0, 0);
    for step in 0..20_000 {
        match rng.gen_range(0..100) {
            0..=79 => {
                // Mostly a few hot extents, sometimes anywhere.
                let e = if rng.gen_bool(0.7) {
                    rng.gen_range(0..8u64)
                } else {
                    rng.gen_range(0..n as u64 + 2)
                };
                let off = e * es + rng.gen_range(0..es);
                let len = rng.gen_range(1..3 * es);
                sparse.record(off, len, IoHint::default());
                dense.record(off, len, es);
            }
            80..=81 => {
                let e = rng.gen_range(0..n);
                sparse.clear(e as u64);
                dense.clear(e);
            }
            _ => {
                now += Duration::from_millis(rng.gen_range(100..20_000));
                sparse.tick(now);
                dense.tick(now);
                let idle = cfg.idle_after.as_secs();
                let stamp = HeatMap::stamp(now);
                let active = sparse.active_all();
                for (e, all_says) in active.iter().enumerate() {
                    let x = e as u64;
                    assert_eq!(sparse.score(x), dense.score[e], "score {e} step {step}");
                    assert_eq!(sparse.recurrence(x), dense.rec[e], "recurrence {e}");
                    assert_eq!(sparse.coverage(x), dense.coverage(e), "coverage {e}");
                    let l = dense.last[e];
                    let in_use = l != 0 && u64::from(stamp - l) < idle;
                    assert_eq!(sparse.is_active(x), in_use, "active {e}");
                    assert_eq!(*all_says, in_use);
                    match sparse.idle_secs(x) {
                        Some(s) => assert_eq!(s, stamp - l),
                        None => assert!(l == 0 || dense.score[e] == 0.0),
                    }
                }
                peak = peak.max(sparse.tracked());
                gone += n - sparse.tracked();
            }
        }
    }
    assert!(
        gone > 0 && peak > 40,
        "entries came and went: {gone} {peak}"
    );
    assert_eq!(sparse.dropped(), 0);
}
