//! The recorder's series: their descriptions and [`collect`], which copies
//! the live state into them right before a scrape.

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge};

use super::super::live::Live;
use crate::units::REASONS;
use crate::volume::{Stats, Tier};

/// Describe every series (once, at install).
pub(super) fn describe() {
    describe_counter!(
        "tierd_nbd_requests_total",
        "NBD requests completed, by command and result"
    );
    describe_counter!(
        "tierd_nbd_request_bytes_total",
        "Payload bytes of completed NBD read and write requests"
    );
    describe_histogram!(
        "tierd_nbd_request_duration_seconds",
        metrics::Unit::Seconds,
        "Time from dispatch to completion of an NBD request, by command"
    );
    describe_gauge!("tierd_nbd_connections", "Open NBD connections");
    describe_gauge!(
        "tierd_inflight_requests",
        "Foreground volume requests in progress"
    );
    describe_counter!("tierd_device_io_total", "Device operations by tier and op");
    describe_counter!(
        "tierd_device_io_bytes_total",
        "Device bytes transferred by tier and op"
    );
    describe_counter!("tierd_device_errors_total", "Device I/O errors by tier");
    describe_counter!(
        "tierd_read_hits_total",
        "Logical read pieces served by each tier"
    );
    describe_counter!(
        "tierd_read_unmapped_total",
        "Logical read pieces of unmapped space (zeros without device I/O)"
    );
    describe_counter!(
        "tierd_read_hit_bytes_total",
        "Logical bytes read from extents on each tier (the SSD hit ratio by bytes is ssd / (ssd + hdd))"
    );
    describe_counter!(
        "tierd_write_landed_bytes_total",
        "Bytes of users' writes that reached each tier (ssd: SSD extents and the write log; hdd: in place)"
    );
    describe_counter!(
        "tierd_read_unmapped_bytes_total",
        "Logical bytes read from unmapped space"
    );
    describe_counter!(
        "tierd_zero_copy_reads_total",
        "Reads sent without the server copying their data (nbd-zero-copy)"
    );
    describe_counter!("tierd_zero_copy_read_bytes_total", "Bytes of those reads");
    describe_counter!("tierd_allocations_total", "New extents allocated per tier");
    describe_counter!(
        "tierd_spills_total",
        "New extents placed on the HDD because the SSD was full"
    );
    describe_counter!(
        "tierd_sequential_bypass_total",
        "Requests that earned no heat because they belonged to a sequential stream"
    );
    describe_counter!(
        "tierd_migrations_total",
        "Completed extent migrations by direction and reason"
    );
    describe_counter!(
        "tierd_migrated_bytes_total",
        "Bytes copied by migrations by direction"
    );
    describe_counter!(
        "tierd_migration_aborts_total",
        "Migrations abandoned because the extent kept changing"
    );
    describe_counter!("tierd_migration_errors_total", "Migrations that failed");
    describe_counter!("tierd_migration_rounds_total", "Migration planning rounds");
    describe_gauge!("tierd_migration_paused", "1 while migration is paused");
    describe_gauge!(
        "tierd_migration_budget_bytes_per_second",
        "The copy budget in force (0: unlimited): migrate.bandwidth, or half a remote capacity tier's measured bandwidth when less"
    );
    describe_gauge!(
        "tierd_capacity_link_rtt_seconds",
        "A remote capacity tier's measured round trip (absent for a local HDD)"
    );
    describe_gauge!(
        "tierd_capacity_link_bandwidth_bytes_per_second",
        "A remote capacity tier's measured bandwidth (absent for a local HDD)"
    );
    describe_gauge!("tierd_volume_capacity_bytes", "Logical size of the volume");
    describe_gauge!("tierd_tier_capacity_bytes", "Data slots of a tier in bytes");
    describe_gauge!("tierd_tier_used_bytes", "Bytes of mapped extents on a tier");
    describe_gauge!("tierd_tier_free_bytes", "Bytes of free slots on a tier");
    describe_gauge!("tierd_extents", "Mapped extents per tier");
    describe_gauge!(
        "tierd_quarantined_extents",
        "Freed slots waiting for a metadata flush before reuse"
    );
    describe_gauge!(
        "tierd_reserve_target_bytes",
        "SSD bytes the migrator keeps free (live target)"
    );
    describe_gauge!(
        "tierd_reserve_format_bytes",
        "SSD reserve fixed when the volume was formatted"
    );
    describe_gauge!("tierd_pins", "Pin entries in force");
    describe_gauge!(
        "tierd_write_log_bytes",
        "SSD bytes lent to the write log (writes to HDD extents land there)"
    );
    describe_gauge!(
        "tierd_write_log_capacity_bytes",
        "Most SSD bytes the write log may take (the reserve)"
    );
    describe_gauge!(
        "tierd_write_log_dirty_bytes",
        "Bytes whose newest data is in the write log: the write-back backlog"
    );
    describe_counter!(
        "tierd_write_log_writes_total",
        "Writes to HDD extents that landed in the SSD write log"
    );
    describe_counter!(
        "tierd_write_log_full_total",
        "Writes to HDD extents that went to the HDD because the write log was full"
    );
    describe_counter!(
        "tierd_write_log_waits_total",
        "Writes that found the write log full and waited for room (those that got none in time also count in tierd_write_log_full_total)"
    );
    describe_counter!(
        "tierd_write_log_wait_seconds_total",
        "Whole seconds writes spent waiting for room in the write log"
    );
    describe_counter!(
        "tierd_written_back_bytes_total",
        "Bytes written back from the write log to the HDD"
    );
    describe_gauge!(
        "tierd_shadow_bytes",
        "HDD copies kept by SSD extents: clean (demotion is free) or stale (written back on demotion)"
    );
    describe_counter!(
        "tierd_free_demotions_total",
        "Demotions that wrote no data: the extent's HDD shadow was clean"
    );
    describe_counter!(
        "tierd_admissions_total",
        "Requests that missed flash, by what admission at the miss did: admitted (extent brought up), remembered (a scan's first pass), dropped (enough waiting), no_room (nothing could leave), paced (the HDD's users needed the time)"
    );
    describe_counter!(
        "tierd_shadows_dropped_total",
        "Shadows dropped because the HDD needed their slots"
    );
    describe_counter!(
        "tierd_promotions_paced_total",
        "Placement moves left for a later round: the promotions' HDD time budget was spent"
    );
    describe_counter!(
        "tierd_precleaned_extents_total",
        "SSD extents given a clean HDD copy in idle time (pre-cleaning)"
    );
    describe_gauge!(
        "tierd_build_info",
        "Always 1; the version of the running tierd in its labels"
    );
    describe_gauge!(
        "tierd_hot_bytes",
        "Bytes of extents whose heat makes them promotion candidates, by the tier they are on (their sum is the working set)"
    );
    describe_gauge!(
        "tierd_active_bytes",
        "Bytes of extents touched within heat.idle-after"
    );
    describe_gauge!(
        "tierd_heat_tracked_extents",
        "Extents whose heat is kept (touched recently; at most heat.max-tracked)"
    );
    describe_counter!(
        "tierd_heat_dropped_total",
        "Extents whose heat was dropped, or never kept, because the heat table was full (heat.max-tracked)"
    );
    describe_gauge!(
        "tierd_tier_usable_bytes",
        "Bytes a tier may fill with data: its slots, on the SSD less the reserve target"
    );
    describe_counter!(
        "tierd_migration_planned_total",
        "Moves the migration policy asked for"
    );
    describe_gauge!(
        "tierd_migration_queued_moves",
        "Moves of the current round's plan not yet tried"
    );
    describe_gauge!(
        "tierd_migration_more_waiting",
        "1 when the latest plan filled a round (max-moves): more moves are waiting"
    );
    describe_gauge!(
        "tierd_migration_backing_off",
        "1 while migration waits for busy foreground I/O"
    );
    describe_gauge!(
        "tierd_migration_bandwidth_bytes_per_second",
        "The configured migration bandwidth (0: unlimited)"
    );
    describe_gauge!(
        "tierd_degraded",
        "1 while the daemon is degraded (tierctl status says why)"
    );
    describe_gauge!(
        "tierd_health_problems",
        "Problems that make the daemon degraded"
    );
    describe_gauge!(
        "tierd_metadata_flush_age_seconds",
        "Seconds since the metadata store was last flushed"
    );
    describe_gauge!(
        "tierd_only_copy_bytes",
        "Bytes whose only copy is on the tier (tier=ssd: SSD extents without a clean HDD copy, write-log data not written back)"
    );
    describe_gauge!(
        "tierd_only_copy_oldest_seconds",
        "Seconds since the oldest data whose only copy is on the tier became so (0: none; data so at the open counts from the open)"
    );
    describe_gauge!(
        "tierd_only_copy_bound_seconds",
        "The bound on how long data may have its only copy on the tier (durability.ssd-exposure; 0: no bound)"
    );
    describe_gauge!(
        "tierd_lost_bytes",
        "Bytes lost with a dead tier (tier=ssd: the volume was opened without its SSD) that read as I/O errors until rewritten whole or discarded"
    );
    describe_counter!(
        "tierd_reads_from_copy_total",
        "Reads (or parts of reads) the SSD failed that an extent's clean HDD copy served instead"
    );
}

/// Copy the live state into the recorder (walks the extent map: call off
/// the async threads).
pub fn collect(live: &Live) {
    let vol = &live.volume;
    let s = vol.stats();
    let geo = *vol.geometry();
    let es = geo.extent_size;
    let usage = vol.usage();
    for t in Tier::ALL {
        let (i, tier) = (t.index(), t.name());
        for (op, n, b) in [
            ("read", &s.dev_reads[i], &s.dev_read_bytes[i]),
            ("write", &s.dev_writes[i], &s.dev_write_bytes[i]),
        ] {
            counter!("tierd_device_io_total", "tier" => tier, "op" => op).absolute(Stats::get(n));
            counter!("tierd_device_io_bytes_total", "tier" => tier, "op" => op)
                .absolute(Stats::get(b));
        }
        counter!("tierd_device_errors_total", "tier" => tier)
            .absolute(Stats::get(&s.dev_errors[i]));
        counter!("tierd_read_hits_total", "tier" => tier).absolute(Stats::get(&s.read_hits[i]));
        counter!("tierd_read_hit_bytes_total", "tier" => tier)
            .absolute(Stats::get(&s.read_hit_bytes[i]));
        counter!("tierd_write_landed_bytes_total", "tier" => tier)
            .absolute(Stats::get(&s.write_landed_bytes[i]));
        counter!("tierd_allocations_total", "tier" => tier).absolute(Stats::get(&s.allocations[i]));
        gauge!("tierd_tier_capacity_bytes", "tier" => tier)
            .set((u64::from(geo.slots(t)) * es) as f64);
        gauge!("tierd_tier_used_bytes", "tier" => tier).set((usage.mapped[i] * es) as f64);
        gauge!("tierd_tier_free_bytes", "tier" => tier).set((u64::from(usage.free[i]) * es) as f64);
        gauge!("tierd_extents", "tier" => tier).set(usage.mapped[i] as f64);
        let direction = match t {
            Tier::Ssd => "promote",
            Tier::Hdd => "demote",
        };
        for r in REASONS {
            counter!("tierd_migrations_total", "direction" => direction, "reason" => r.name())
                .absolute(s.migrations_to(t, r));
        }
        counter!("tierd_migrated_bytes_total", "direction" => direction)
            .absolute(Stats::get(&s.migrated_bytes[i]));
    }
    counter!("tierd_read_unmapped_total").absolute(Stats::get(&s.read_unmapped));
    counter!("tierd_read_unmapped_bytes_total").absolute(Stats::get(&s.read_unmapped_bytes));
    counter!("tierd_zero_copy_reads_total").absolute(Stats::get(&s.spliced_reads));
    counter!("tierd_zero_copy_read_bytes_total").absolute(Stats::get(&s.spliced_read_bytes));
    counter!("tierd_spills_total").absolute(Stats::get(&s.spills));
    counter!("tierd_sequential_bypass_total").absolute(live.heat.bypassed());
    counter!("tierd_migration_aborts_total").absolute(Stats::get(&s.migration_aborts));
    counter!("tierd_migration_errors_total").absolute(Stats::get(&s.migration_errors));
    counter!("tierd_migration_rounds_total").absolute(live.migrator.rounds());
    gauge!("tierd_migration_paused").set(if live.migrator.paused() { 1.0 } else { 0.0 });
    gauge!("tierd_volume_capacity_bytes").set(vol.size() as f64);
    gauge!("tierd_quarantined_extents").set(f64::from(usage.quarantined));
    gauge!("tierd_reserve_target_bytes").set((live.migrator.reserve_extents() * es) as f64);
    gauge!("tierd_reserve_format_bytes").set((u64::from(geo.reserve_extents) * es) as f64);
    gauge!("tierd_pins").set(vol.pins().len() as f64);
    let blk = crate::volume::BLOCK_SIZE;
    gauge!("tierd_write_log_bytes").set((u64::from(usage.log.segments) * es) as f64);
    gauge!("tierd_write_log_capacity_bytes").set((u64::from(usage.log.cap) * es) as f64);
    gauge!("tierd_write_log_dirty_bytes").set((usage.logged_blocks * blk) as f64);
    counter!("tierd_write_log_writes_total").absolute(Stats::get(&s.log_writes));
    counter!("tierd_write_log_full_total").absolute(Stats::get(&s.log_full));
    counter!("tierd_write_log_waits_total").absolute(Stats::get(&s.log_waits));
    counter!("tierd_write_log_wait_seconds_total")
        .absolute(Stats::get(&s.log_wait_ns) / 1_000_000_000);
    counter!("tierd_written_back_bytes_total").absolute(Stats::get(&s.written_back_blocks) * blk);
    gauge!("tierd_shadow_bytes", "state" => "clean").set((usage.shadow_clean_blocks * blk) as f64);
    gauge!("tierd_shadow_bytes", "state" => "stale").set((usage.shadow_stale_blocks * blk) as f64);
    let exposure = vol.exposure();
    // A tier's name is a label, never part of a metric's name.
    gauge!("tierd_only_copy_bytes", "tier" => "ssd").set(exposure.bytes as f64);
    gauge!("tierd_only_copy_oldest_seconds", "tier" => "ssd")
        .set(exposure.oldest.map_or(0.0, |d| d.as_secs_f64()));
    gauge!("tierd_only_copy_bound_seconds", "tier" => "ssd")
        .set(live.migrator.exposure_bound().as_secs_f64());
    counter!("tierd_reads_from_copy_total").absolute(Stats::get(&s.read_from_copy));
    gauge!("tierd_lost_bytes", "tier" => "ssd").set(vol.lost_bytes() as f64);
    counter!("tierd_free_demotions_total").absolute(Stats::get(&s.free_demotions));
    counter!("tierd_shadows_dropped_total").absolute(Stats::get(&s.shadows_dropped));
    for (outcome, n) in [
        ("admitted", &s.admissions),
        ("remembered", &s.admissions_scanned),
        ("dropped", &s.admissions_dropped),
        ("no_room", &s.admissions_no_room),
        ("paced", &s.admissions_paced),
    ] {
        counter!("tierd_admissions_total", "outcome" => outcome).absolute(Stats::get(n));
    }
    counter!("tierd_precleaned_extents_total").absolute(Stats::get(&s.precleaned));
    counter!("tierd_promotions_paced_total").absolute(Stats::get(&s.promotions_paced));
    gauge!("tierd_nbd_connections").set(live.probe.count() as f64);
    gauge!("tierd_inflight_requests").set(vol.inflight() as f64);
    gauge!("tierd_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    let w = live.working_set();
    gauge!("tierd_hot_bytes", "tier" => "ssd").set(w.hot_on_ssd_bytes as f64);
    gauge!("tierd_hot_bytes", "tier" => "hdd").set((w.hot_bytes - w.hot_on_ssd_bytes) as f64);
    gauge!("tierd_active_bytes").set(w.active_bytes as f64);
    gauge!("tierd_heat_tracked_extents").set(w.heat_tracked_extents as f64);
    counter!("tierd_heat_dropped_total").absolute(w.heat_dropped);
    gauge!("tierd_tier_usable_bytes", "tier" => "ssd").set(w.ssd_usable_bytes as f64);
    gauge!("tierd_tier_usable_bytes", "tier" => "hdd").set((u64::from(geo.hdd_slots) * es) as f64);
    let p = live.migrator.progress();
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    counter!("tierd_migration_planned_total").absolute(p.planned);
    gauge!("tierd_migration_queued_moves").set(p.queued as f64);
    gauge!("tierd_migration_more_waiting").set(flag(p.more_waiting));
    gauge!("tierd_migration_backing_off").set(flag(p.backing_off));
    gauge!("tierd_migration_bandwidth_bytes_per_second")
        .set(live.migrator.config().bandwidth.0 as f64);
    gauge!("tierd_migration_budget_bytes_per_second").set(p.budget as f64);
    if let Some(l) = &p.capacity_link {
        gauge!("tierd_capacity_link_rtt_seconds").set(l.rtt_secs);
        gauge!("tierd_capacity_link_bandwidth_bytes_per_second").set(l.bandwidth);
    }
    let h = live.health();
    gauge!("tierd_degraded").set(flag(!h.problems.is_empty()));
    gauge!("tierd_health_problems").set(h.problems.len() as f64);
    gauge!("tierd_metadata_flush_age_seconds").set(h.metadata_flush_age_secs);
}
