//! Counters the volume keeps for metrics and status: device I/O per tier,
//! where reads were served, allocations and spills, migrations.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::units::{Reason, REASONS};

use super::geometry::Tier;

/// Monotonic counters; all relaxed atomics.
#[derive(Default, Debug)]
pub struct Stats {
    /// Device read operations per tier.
    pub dev_reads: [AtomicU64; 2],
    /// Device bytes read per tier.
    pub dev_read_bytes: [AtomicU64; 2],
    /// Device write operations per tier.
    pub dev_writes: [AtomicU64; 2],
    /// Device bytes written per tier.
    pub dev_write_bytes: [AtomicU64; 2],
    /// Device errors per tier.
    pub dev_errors: [AtomicU64; 2],
    /// Logical read pieces served from each tier.
    pub read_hits: [AtomicU64; 2],
    /// Logical bytes read from each tier: from the extent's home, or from
    /// the SSD for blocks in the write log (unwritten blocks count for the
    /// home).
    pub read_hit_bytes: [AtomicU64; 2],
    /// Bytes of users' writes that reached each tier (the SSD: an SSD
    /// extent or the write log; the HDD: in place), padding included.
    pub write_landed_bytes: [AtomicU64; 2],
    /// Reads (or parts of reads) the SSD failed that the extent's clean
    /// HDD copy served instead.
    pub read_from_copy: AtomicU64,
    /// Logical read pieces of unmapped space (zeros, no device I/O).
    pub read_unmapped: AtomicU64,
    /// Their bytes.
    pub read_unmapped_bytes: AtomicU64,
    /// Reads handed out as pages without a copy ([`Volume::read_to_pipe`](super::Volume::read_to_pipe)).
    pub spliced_reads: AtomicU64,
    /// Their bytes.
    pub spliced_read_bytes: AtomicU64,
    /// New extents allocated per tier.
    pub allocations: [AtomicU64; 2],
    /// New extents that went to the HDD because the SSD was full.
    pub spills: AtomicU64,
    /// Completed migrations per destination tier and reason.
    pub migrations: [[AtomicU64; REASONS.len()]; 2],
    /// Bytes copied by migrations per destination tier.
    pub migrated_bytes: [AtomicU64; 2],
    /// Migrations abandoned because the extent changed during the copy.
    pub migration_aborts: AtomicU64,
    /// Migrations that failed on an error.
    pub migration_errors: AtomicU64,
    /// Writes to HDD extents that landed in the SSD write log.
    pub log_writes: AtomicU64,
    /// Bytes of those writes.
    pub log_write_bytes: AtomicU64,
    /// Writes to HDD extents that went to the HDD because the log was full.
    pub log_full: AtomicU64,
    /// Writes that found the log full and waited for room
    /// (`Volume::await_log_room`).
    pub log_waits: AtomicU64,
    /// Their time waiting, ns on the volume's clock.
    pub log_wait_ns: AtomicU64,
    /// Of those, the ones no room came for in time (they went in place,
    /// and count in `log_full` too).
    pub log_wait_timeouts: AtomicU64,
    /// Time moves and write-backs spent making their copies and mappings
    /// durable (the destination's sync, the metadata flush), ns on the
    /// volume's I/O clock: the fixed part of a batch's cost.
    pub move_sync_ns: AtomicU64,
    /// Blocks written back from the log to their HDD extents.
    pub written_back_blocks: AtomicU64,
    /// Demotions that wrote nothing: the extent's shadow was clean.
    pub free_demotions: AtomicU64,
    /// Extents brought up by a read that missed flash.
    pub admissions: AtomicU64,
    /// Missed extents not noted because enough were waiting.
    pub admissions_dropped: AtomicU64,
    /// Admissions given up: no SSD extent could leave for free.
    pub admissions_no_room: AtomicU64,
    /// Sequential misses only remembered (a scan's first pass).
    pub admissions_scanned: AtomicU64,
    /// Misses left for later because admissions had spent their share of
    /// a busy HDD's time.
    pub admissions_paced: AtomicU64,
    /// Promotions, prefetches and their swaps' demotions left for a later
    /// round because the promotions' budget of HDD time was spent
    /// (`migrate.promote-share`).
    pub promotions_paced: AtomicU64,
    /// Blocks a demotion did not have to write thanks to its shadow.
    pub shadow_saved_blocks: AtomicU64,
    /// Blocks a promotion copied again at its commit because a write
    /// reached them during the copy (instead of failing the promotion).
    pub recopied_blocks: AtomicU64,
    /// Shadows dropped because the HDD needed their slots.
    pub shadows_dropped: AtomicU64,
    /// SSD extents given a clean HDD copy in idle time (pre-cleaning).
    pub precleaned: AtomicU64,
    /// Bytes pre-cleaning wrote to the HDD.
    pub precleaned_bytes: AtomicU64,
}

impl Stats {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Read a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub(crate) fn migrated(&self, to: Tier, reason: Reason, bytes: u64) {
        let r = REASONS.iter().position(|x| *x == reason).unwrap_or(0);
        Self::add(&self.migrations[to.index()][r], 1);
        Self::add(&self.migrated_bytes[to.index()], bytes);
    }

    /// Completed migrations to a tier for a reason.
    pub fn migrations_to(&self, to: Tier, reason: Reason) -> u64 {
        let r = REASONS.iter().position(|x| *x == reason).unwrap_or(0);
        Self::get(&self.migrations[to.index()][r])
    }
}
