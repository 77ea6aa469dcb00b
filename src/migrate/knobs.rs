//! The migrator's knobs: [`MigrateConfig`], the `[migrate]` table of the
//! configuration (the placement policy's keys flattened into it), and
//! [`DurabilityConfig`], the `[durability]` table (the copies the migrator
//! keeps for the SSD's sake), with their defaults and the check of values
//! that parse but make no sense.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::policy::{PolicyConfig, NOT_NEGATIVE};
use crate::units::{ByteSize, InvalidKey};

/// Migration knobs: the `[migrate]` table of the configuration, the
/// policy's keys flattened into it. Unknown keys are refused: serde checks
/// what neither this struct nor the flattened policy takes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct MigrateConfig {
    /// Run the background migrator at all.
    pub enabled: bool,
    /// Admission at the miss: while the volume's data fits the HDD with
    /// room to spare (every SSD extent can keep a clean HDD copy), a read
    /// that misses flash brings its extent up right after it is answered
    /// (`migrate::admit`), at once while such copies pay for themselves in
    /// HDD time and on shown reuse otherwise (the volume's ledger). The
    /// background policy then makes no read-driven promotions of its own
    /// (hot, near) and keeps the reserve, write-back, cleaning and pins; on
    /// a fuller volume admission stands aside and heat decides.
    pub admission: bool,
    /// The share of a busy HDD's time admissions may take (0 to 1): they
    /// take all the time the HDD has no user and at most this share of
    /// the time it has, so a workload that keeps the HDD busy runs at
    /// least `1 - share` of the HDD's own speed. 1: no limit.
    pub admission_share: f64,
    /// The share of a busy HDD's time the background policy's promotions
    /// (and the swaps that make room for them) may take beyond the HDD
    /// time the SSD saves the users (0 to 1; `volume::budget`): a
    /// workload that keeps the HDD busy runs at least `1 - share` of the
    /// HDD's own speed while promotions do not pay. 1 (the default): no
    /// budget. Off by default because the investment a short busy spell
    /// never pays back is what makes a region read again fast a few
    /// seconds later (docs/tiering.md, "Promotions pay their way").
    pub promote_share: f64,
    /// Time between planning rounds.
    #[serde(with = "crate::units::duration_secs")]
    pub interval: Duration,
    /// Background copy bandwidth cap in bytes/s (0: unlimited).
    pub bandwidth: ByteSize,
    /// Reserve refills may go faster: up to this many times the recent
    /// foreground write rate, when that exceeds `bandwidth`.
    pub reserve_boost: f64,
    /// The reserve keeps room for this long of the recent foreground write
    /// rate; only the rest may be lent to promotions.
    #[serde(with = "crate::units::duration_secs")]
    pub reserve_horizon: Duration,
    /// Foreground requests in flight at or above which migration waits.
    pub busy_inflight: usize,
    /// Smoothed latency of foreground HDD reads at or above which migration
    /// waits and sequential writes to HDD data take the write log (0:
    /// never).
    #[serde(with = "crate::units::duration_secs")]
    pub busy_latency: Duration,
    /// Longest wait for foreground I/O to calm down before one batch.
    #[serde(with = "crate::units::duration_secs")]
    pub max_backoff: Duration,
    /// Speculative moves (neighbourhood prefetch, reserve refills above
    /// the floor) run only once the HDD has served no foreground request
    /// for this long; until then they wait for a later round (0: never
    /// wait). A guess must not slow down a user of the HDD.
    #[serde(with = "crate::units::duration_secs")]
    pub speculative_idle: Duration,
    /// Moves carried out together (one sync and one flush; neighbouring
    /// slots copied with one large read and write).
    pub batch: usize,
    /// How often heat scores are saved to the metadata store.
    #[serde(with = "crate::units::duration_secs")]
    pub heat_save_interval: Duration,
    /// The placement policy.
    #[serde(flatten)]
    pub policy: PolicyConfig,
}

impl Default for MigrateConfig {
    fn default() -> Self {
        MigrateConfig {
            enabled: true,
            admission: true,
            admission_share: 0.05,
            promote_share: 1.0,
            interval: Duration::from_secs(1),
            bandwidth: ByteSize(128 << 20),
            reserve_boost: 2.0,
            reserve_horizon: Duration::from_secs(60),
            busy_inflight: 16,
            busy_latency: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            speculative_idle: Duration::from_millis(250),
            batch: 32,
            heat_save_interval: Duration::from_secs(300),
            policy: PolicyConfig::default(),
        }
    }
}

impl MigrateConfig {
    /// Check values that parse but make no sense, the policy's included;
    /// the error names the key (`migrate.batch`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if self.interval.is_zero() {
            return Err(InvalidKey::new("migrate.interval", "must be above zero"));
        }
        self.policy.validate()?;
        for (key, share) in [
            ("migrate.admission-share", self.admission_share),
            ("migrate.promote-share", self.promote_share),
        ] {
            if !(0.0..=1.0).contains(&share) {
                return Err(InvalidKey::new(key, "must be between 0 and 1"));
            }
        }
        if !self.reserve_boost.is_finite() || self.reserve_boost < 0.0 {
            return Err(InvalidKey::new("migrate.reserve-boost", NOT_NEGATIVE));
        }
        if self.batch == 0 || self.batch > 1024 {
            return Err(InvalidKey::new(
                "migrate.batch",
                "must be between 1 and 1024",
            ));
        }
        Ok(())
    }
}

/// The `[durability]` table: what the migrator does so an SSD failure
/// costs less (docs/reliability.md, "Bounding what an SSD failure loses").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DurabilityConfig {
    /// Longest any data keeps its only copy on the SSD while the HDD has
    /// free slots: an SSD extent without an HDD copy gets one, a stale
    /// copy is brought up to date, the write log's blocks are written
    /// back, each before its data has been SSD-only this long (in the
    /// HDD's idle time while it has any, paced and yielding to users
    /// otherwise). `0s`: no bound (the default). Live.
    #[serde(with = "crate::units::duration_secs")]
    pub ssd_exposure: Duration,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            ssd_exposure: Duration::ZERO,
        }
    }
}

/// Shortest bound `durability.ssd-exposure` takes: the migrator looks once
/// a round (a second by default) and a copy takes time of its own.
pub const MIN_SSD_EXPOSURE: Duration = Duration::from_secs(2);

impl DurabilityConfig {
    /// Check values that parse but make no sense; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        let d = self.ssd_exposure;
        if !d.is_zero() && d < MIN_SSD_EXPOSURE {
            return Err(InvalidKey::new(
                "durability.ssd-exposure",
                "must be 0s (no bound) or at least 2s",
            ));
        }
        Ok(())
    }
}
