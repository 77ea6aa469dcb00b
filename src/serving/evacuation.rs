//! What draining a tier (`tierctl evacuate`) moves: the one definition the
//! plan, the progress, the summary, `status` and `--json` all count by.
//! Draining moves the tier's data, its mapped extents (the count `status`
//! shows for the tier), to the other tier as far as that has free slots,
//! pinned or not; what needs no move is counted apart: the SSD's write-log
//! segments (written back into the HDD extents they belong to) and the
//! HDD's clean copies of SSD extents (dropped).

use super::live::Live;
use crate::control::EvacuationStatus;
use crate::volume::{pinned_ranges, Tier, Volume};

/// What draining `tier` would move and leave, now (not started: `active`
/// false; [`super::settings::Settings::evacuation`] adds the start).
pub fn plan(live: &Live, tier: Tier) -> EvacuationStatus {
    let vol = &live.volume;
    let other = match tier {
        Tier::Ssd => Tier::Hdd,
        Tier::Hdd => Tier::Ssd,
    };
    // One snapshot, so the parts agree with what `status` counts.
    let u = vol.usage();
    let data = u.mapped[tier.index()];
    let (log_segments, shadow_extents) = match tier {
        Tier::Ssd => (u64::from(u.log.segments), 0),
        Tier::Hdd => (0, u.shadows),
    };
    // The migrator moves at most as many extents as the other tier has
    // free slots.
    let would_remain = data.saturating_sub(u64::from(vol.free_slots(other)));
    EvacuationStatus {
        tier,
        started_extents: data,
        remaining_extents: data,
        would_remain_extents: would_remain,
        data_extents: data,
        pinned_extents: pinned_to(vol, tier),
        log_segments,
        shadow_extents,
        extent_size: vol.geometry().extent_size,
        active: false,
        // Moves in flight hold destination slots already: wait for them;
        // the write log and the copies must be gone too.
        done: data <= would_remain
            && log_segments == 0
            && shadow_extents == 0
            && live.migrator.progress().queued == 0,
    }
}

/// Extents on `tier` that a pin keeps there: draining moves them anyway.
fn pinned_to(vol: &Volume, tier: Tier) -> u64 {
    let extents = vol.geometry().logical_extents();
    pinned_ranges(&vol.pins(), tier, extents)
        .into_iter()
        .flatten()
        .filter(|&e| vol.tier_of(e) == Some(tier))
        .count() as u64
}
