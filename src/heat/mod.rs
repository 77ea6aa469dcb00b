//! Heat: how often, and how densely, each extent is used.
//!
//! On the I/O path recording costs a few relaxed atomic operations and no
//! allocation or lock: one `fetch_add` on the extent's hit counter and one
//! `fetch_or` per 64 blocks on its touched-block bitmap. A periodic
//! [`HeatMap::tick`] folds the hit counters into an exponentially decaying
//! score (configurable half-life) and ages the block bitmaps, so the policy
//! sees, per extent, a score and a *coverage*: how many distinct 4 KiB blocks
//! were touched in the last one or two windows. Dense activity (many blocks)
//! predicts more reads nearby; one stray hot block does not earn an extent a
//! place on the SSD.
//!
//! It also keeps, per extent, when it was last touched (to the tick): an
//! extent untouched for [`HeatConfig::idle_after`] is *idle*, and idle data
//! gives way to data in use whatever their scores say. A score measures how
//! often an extent was used, but that rate depends on where it lived: a
//! working set on the SSD is read forty times as often as the same set on
//! the HDD, so frequency alone holds a new set back behind the old one for
//! minutes (issue "Placement that follows the user").
//!
//! Long sequential streams earn no heat at all (see [`IoHint`]): a backup or
//! a scan must not flush the SSD; [`stream`] works out, per connection,
//! which requests belong to such a stream.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::units::{ByteSize, InvalidKey};

pub mod stream;

use crate::units::IoHint;
pub use stream::{StreamDetector, VolumeStreams};

/// Heat knobs: the `[heat]` table of the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct HeatConfig {
    /// Record heat at all (off: no promotion ever happens; for measuring
    /// what heat tracking costs).
    pub enabled: bool,
    /// Half-life of an extent's score.
    #[serde(with = "crate::units::duration_secs")]
    pub half_life: Duration,
    /// Length of a block-coverage window; coverage spans the current and the
    /// previous window.
    #[serde(with = "crate::units::duration_secs")]
    pub coverage_window: Duration,
    /// A stream longer than this many contiguous bytes is sequential: it earns
    /// no heat.
    pub sequential_cutoff: ByteSize,
    /// An extent not touched for this long is idle: it gives way to any
    /// extent in use, and its zone no longer counts as in use.
    #[serde(with = "crate::units::duration_secs")]
    pub idle_after: Duration,
}

impl Default for HeatConfig {
    fn default() -> Self {
        HeatConfig {
            enabled: true,
            half_life: Duration::from_secs(60),
            coverage_window: Duration::from_secs(60),
            sequential_cutoff: ByteSize(4 << 20),
            idle_after: Duration::from_secs(10),
        }
    }
}

impl HeatConfig {
    /// Check values that parse but make no sense; the error names the key
    /// (`heat.half-life`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        for (key, d) in [
            ("heat.half-life", self.half_life),
            ("heat.coverage-window", self.coverage_window),
            ("heat.idle-after", self.idle_after),
        ] {
            if d.is_zero() {
                return Err(InvalidKey::new(
                    key,
                    "half-life, coverage-window and idle-after must be above zero",
                ));
            }
        }
        Ok(())
    }
}

/// Per-extent heat of a whole volume.
pub struct HeatMap {
    cfg: HeatConfig,
    /// The sequential cutoff in force (bytes); starts at the
    /// configuration's and may change live.
    cutoff: AtomicU64,
    /// Requests since the last tick, per extent.
    hits: Box<[AtomicU32]>,
    /// Decayed score per extent, as f32 bits (written by `tick` only).
    scores: Box<[AtomicU32]>,
    /// Decayed count of the distinct seconds with hits, per extent, as f32
    /// bits (written by `tick` only): how often the extent came back, not
    /// how many requests one visit made.
    recurrence: Box<[AtomicU32]>,
    /// Touched-block bitmaps: `words` per extent, current window.
    cur: Box<[AtomicU64]>,
    /// The previous window.
    prev: Box<[AtomicU64]>,
    /// Tick (whole seconds since `origin`, plus one) at which each extent's
    /// hits were last folded in; 0: not touched since the map was made.
    last: Box<[AtomicU32]>,
    words: usize,
    block_size: u64,
    extent_size: u64,
    /// Requests that earned no heat because they were sequential.
    bypassed: AtomicU64,
    /// Ticks so far.
    ticks: AtomicU64,
    times: Mutex<Times>,
}

struct Times {
    origin: Duration,
    last_tick: Duration,
    last_rotation: Duration,
}

/// A saved score.
type Saved = (u32, f32);

impl HeatMap {
    /// Heat for `extents` extents of `extent_size` bytes tracked per
    /// `block_size` block, starting at time `now`.
    pub fn new(
        cfg: HeatConfig,
        extents: u64,
        extent_size: u64,
        block_size: u64,
        now: Duration,
    ) -> Self {
        let words = ((extent_size / block_size) as usize).div_ceil(64);
        let n = extents as usize;
        let atomics32 = |n: usize| (0..n).map(|_| AtomicU32::new(0)).collect::<Box<[_]>>();
        let atomics64 = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        HeatMap {
            cutoff: AtomicU64::new(cfg.sequential_cutoff.0),
            cfg,
            hits: atomics32(n),
            scores: atomics32(n),
            recurrence: atomics32(n),
            cur: atomics64(n * words),
            prev: atomics64(n * words),
            last: atomics32(n),
            words,
            block_size,
            extent_size,
            bypassed: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            times: Mutex::new(Times {
                origin: now,
                last_tick: now,
                last_rotation: now,
            }),
        }
    }

    /// The configuration the map was made with (the sequential cutoff in
    /// force is [`HeatMap::sequential_cutoff`]).
    pub fn config(&self) -> &HeatConfig {
        &self.cfg
    }

    /// Bytes a stream must have run before its requests earn no heat.
    pub fn sequential_cutoff(&self) -> u64 {
        self.cutoff.load(Ordering::Relaxed)
    }

    /// Change the sequential cutoff live.
    pub fn set_sequential_cutoff(&self, bytes: u64) {
        self.cutoff.store(bytes, Ordering::Relaxed);
    }

    /// Whether a request with this hint is part of a long sequential stream.
    pub fn is_sequential(&self, hint: IoHint) -> bool {
        hint.seq_run > self.cutoff.load(Ordering::Relaxed)
    }

    /// Record one request over `[offset, offset+len)` (already range-checked).
    /// Returns false when the request earned no heat (sequential).
    pub fn record(&self, offset: u64, len: u64, hint: IoHint) -> bool {
        if len == 0 || !self.cfg.enabled {
            return true;
        }
        if self.is_sequential(hint) {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let extent = (pos / self.extent_size) as usize;
            let ext_end = ((extent as u64) + 1) * self.extent_size;
            let stop = end.min(ext_end);
            if let Some(h) = self.hits.get(extent) {
                h.fetch_add(1, Ordering::Relaxed);
            }
            let first = (pos % self.extent_size) / self.block_size;
            let last = (stop - 1) % self.extent_size / self.block_size;
            let base = extent * self.words;
            let mut b = first;
            while b <= last {
                let word = (b / 64) as usize;
                let hi = last.min((word as u64) * 64 + 63);
                let count = hi - b + 1;
                let mask = if count == 64 {
                    u64::MAX
                } else {
                    ((1u64 << count) - 1) << (b % 64)
                };
                if let Some(w) = self.cur.get(base + word) {
                    w.fetch_or(mask, Ordering::Relaxed);
                }
                b = hi + 1;
            }
            pos = stop;
        }
        true
    }

    /// Fold hits into scores with the decay for the time since the last
    /// tick, and rotate coverage windows when due.
    pub fn tick(&self, now: Duration) {
        let mut t = self.times.lock();
        let elapsed = now.saturating_sub(t.last_tick);
        t.last_tick = now;
        let decay =
            0.5f64.powf(elapsed.as_secs_f64() / self.cfg.half_life.as_secs_f64().max(1e-9)) as f32;
        let stamp = Self::stamp(now.saturating_sub(t.origin));
        self.ticks.fetch_add(1, Ordering::Relaxed);
        for (((h, s), r), l) in self
            .hits
            .iter()
            .zip(self.scores.iter())
            .zip(self.recurrence.iter())
            .zip(self.last.iter())
        {
            let hits = h.swap(0, Ordering::Relaxed);
            // A second with hits that the extent had none in before: it
            // came back (ticks may come faster than one a second).
            let back = hits > 0 && l.swap(stamp, Ordering::Relaxed) != stamp;
            let old = f32::from_bits(s.load(Ordering::Relaxed));
            let old_r = f32::from_bits(r.load(Ordering::Relaxed));
            if hits == 0 && old == 0.0 && old_r == 0.0 {
                continue;
            }
            let fold = |old: f32, add: f32| {
                let new = old * decay + add;
                if new < 1e-3 {
                    0.0
                } else {
                    new
                }
            };
            s.store(fold(old, hits as f32).to_bits(), Ordering::Relaxed);
            r.store(
                fold(old_r, if back { 1.0 } else { 0.0 }).to_bits(),
                Ordering::Relaxed,
            );
        }
        if now.saturating_sub(t.last_rotation) >= self.cfg.coverage_window {
            t.last_rotation = now;
            for (c, p) in self.cur.iter().zip(self.prev.iter()) {
                p.store(c.swap(0, Ordering::Relaxed), Ordering::Relaxed);
            }
        }
    }

    /// Ticks so far (each one may change which extents are idle).
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    fn stamp(since_origin: Duration) -> u32 {
        u32::try_from(since_origin.as_secs())
            .unwrap_or(u32::MAX - 1)
            .saturating_add(1)
    }

    /// Seconds between the last tick and the last tick at which the extent
    /// had hits (`None`: not touched since the map was made or restored).
    pub fn idle_secs(&self, extent: u64) -> Option<u32> {
        let l = self.last.get(extent as usize)?.load(Ordering::Relaxed);
        if l == 0 {
            return None;
        }
        let t = self.times.lock();
        Some(Self::stamp(t.last_tick.saturating_sub(t.origin)).saturating_sub(l))
    }

    /// For every extent, whether it was touched within `idle-after` (as of
    /// the last tick): in use. Idle extents give way to extents in use. One
    /// lock for the whole snapshot.
    pub fn active_all(&self) -> Vec<bool> {
        let now = {
            let t = self.times.lock();
            Self::stamp(t.last_tick.saturating_sub(t.origin))
        };
        let idle = self.cfg.idle_after.as_secs().max(1);
        self.last
            .iter()
            .map(|l| {
                let l = l.load(Ordering::Relaxed);
                l != 0 && u64::from(now.saturating_sub(l)) < idle
            })
            .collect()
    }

    /// Decayed count of the distinct seconds in which an extent was
    /// touched, as of the last tick (with the score's half-life): about 1
    /// after one visit however many requests it made, growing only when
    /// the extent is used again later.
    pub fn recurrence(&self, extent: u64) -> f32 {
        self.recurrence
            .get(extent as usize)
            .map(|s| f32::from_bits(s.load(Ordering::Relaxed)))
            .unwrap_or(0.0)
    }

    /// Decayed score of an extent as of the last tick.
    pub fn score(&self, extent: u64) -> f32 {
        self.scores
            .get(extent as usize)
            .map(|s| f32::from_bits(s.load(Ordering::Relaxed)))
            .unwrap_or(0.0)
    }

    /// Distinct blocks of an extent touched in the current and previous
    /// coverage windows.
    pub fn coverage(&self, extent: u64) -> u32 {
        let base = extent as usize * self.words;
        (0..self.words)
            .map(|i| {
                let c = self
                    .cur
                    .get(base + i)
                    .map(|w| w.load(Ordering::Relaxed))
                    .unwrap_or(0);
                let p = self
                    .prev
                    .get(base + i)
                    .map(|w| w.load(Ordering::Relaxed))
                    .unwrap_or(0);
                (c | p).count_ones()
            })
            .sum()
    }

    /// Forget an extent's heat (it was trimmed away).
    pub fn clear(&self, extent: u64) {
        let i = extent as usize;
        if let (Some(h), Some(s)) = (self.hits.get(i), self.scores.get(i)) {
            h.store(0, Ordering::Relaxed);
            s.store(0, Ordering::Relaxed);
        }
        if let Some(l) = self.last.get(i) {
            l.store(0, Ordering::Relaxed);
        }
        for w in 0..self.words {
            if let (Some(c), Some(p)) = (
                self.cur.get(i * self.words + w),
                self.prev.get(i * self.words + w),
            ) {
                c.store(0, Ordering::Relaxed);
                p.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Requests that earned no heat because they were sequential.
    pub fn bypassed(&self) -> u64 {
        self.bypassed.load(Ordering::Relaxed)
    }

    /// Encode the non-zero scores for saving.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"HEAT1");
        for (i, s) in self.scores.iter().enumerate() {
            let v = f32::from_bits(s.load(Ordering::Relaxed));
            if v > 0.0 {
                out.extend_from_slice(&(i as u32).to_le_bytes());
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Load scores saved by [`HeatMap::snapshot`]; returns how many were
    /// loaded. Unknown or damaged snapshots load nothing (heat is advisory).
    pub fn restore(&self, bytes: &[u8]) -> usize {
        let Some(body) = bytes.strip_prefix(b"HEAT1") else {
            return 0;
        };
        if body.len() % 8 != 0 {
            return 0;
        }
        let saved: Vec<Saved> = body
            .chunks_exact(8)
            .map(|c| {
                (
                    u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    f32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        let mut n = 0;
        for (i, v) in saved {
            if let (Some(s), Some(r)) =
                (self.scores.get(i as usize), self.recurrence.get(i as usize))
            {
                if v.is_finite() && v > 0.0 {
                    s.store(v.to_bits(), Ordering::Relaxed);
                    // Not saved: a score this high was most likely earned
                    // over more than one visit, up to the two that show
                    // reuse.
                    r.store(v.min(2.0).to_bits(), Ordering::Relaxed);
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
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
}
