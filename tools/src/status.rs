//! `tierctl status` as text.

use tierd::control::Status;

use crate::out::{human, say};

pub fn print(s: &Status) {
    say!(
        "volume {} (tierd {}), up {} s",
        s.volume_id,
        s.version,
        s.uptime_secs
    );
    say!(
        "capacity {} ({} bytes), extent size {}",
        human(s.capacity_bytes),
        s.capacity_bytes,
        human(s.extent_size)
    );
    say!(
        "{:<4} {:>12} {:>12} {:>12} {:>8} {:>10} {:>10} {:>7}",
        "tier",
        "capacity",
        "used",
        "free",
        "extents",
        "read",
        "written",
        "errors"
    );
    for t in &s.tiers {
        say!(
            "{:<4} {:>12} {:>12} {:>12} {:>8} {:>10} {:>10} {:>7}",
            t.tier.to_string(),
            human(t.capacity_bytes),
            human(t.used_bytes),
            human(t.free_bytes),
            t.extents,
            human(t.read_bytes),
            human(t.write_bytes),
            t.errors
        );
    }
    say!(
        "reserve: target {} (set at format: {}), SSD free {}",
        human(s.reserve.target_bytes),
        human(s.reserve.format_bytes),
        human(s.reserve.ssd_free_bytes)
    );
    match s.hit_ratio {
        Some(r) => say!("SSD hit ratio: {:.1} %", r * 100.0),
        None => say!("SSD hit ratio: - (no reads of mapped data yet)"),
    }
    let m = &s.migration;
    say!(
        "migration: {}{}; {} rounds; {} promotions ({}), {} demotions ({}); now {}/s up, {}/s down; {} aborted, {} failed",
        if m.running { "running" } else { "thread off" },
        if m.paused { ", PAUSED" } else { "" },
        m.rounds,
        m.promotions,
        human(m.promoted_bytes),
        m.demotions,
        human(m.demoted_bytes),
        human(m.promote_rate as u64),
        human(m.demote_rate as u64),
        m.aborts,
        m.errors
    );
    say!(
        "migrate config: interval {:?}, bandwidth {}/s, max {} moves a round",
        m.config.interval,
        human(m.config.bandwidth.0),
        m.config.policy.max_moves
    );
    let w = &s.write_log;
    say!(
        "write log: {}{} of {} on the SSD, {} dirty (write-back backlog); {} writes landed ({}), {} found it full; written back {}, now {}/s",
        if w.enabled { "" } else { "OFF, " },
        human(w.bytes),
        human(w.max_bytes),
        human(w.dirty_bytes),
        w.written,
        human(w.written_bytes),
        w.full,
        human(w.written_back_bytes),
        human(w.write_back_rate as u64)
    );
    let sh = &s.shadows;
    say!(
        "shadows: {} extents keep an HDD copy, {} clean, {} stale; {} pre-cleaned; {} free demotions (saved {}), {} dropped for space",
        sh.extents,
        human(sh.clean_bytes),
        human(sh.stale_bytes),
        sh.precleaned,
        sh.free_demotions,
        human(sh.saved_bytes),
        sh.dropped
    );
    say!(
        "connections {}, in flight {}, spills {}, sequential bypasses {}, pins {}, quarantined {}",
        s.connections,
        s.inflight,
        s.spills,
        s.sequential_bypasses,
        s.pins,
        s.quarantined
    );
}
