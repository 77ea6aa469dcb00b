//! `tierctl status` as text.

use tierd::control::{SsdOnlyMap, Status};

use crate::out::{human, say};

/// Seconds as µs, ms or s, three significant digits.
fn dur(secs: Option<f64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 1e-3 => format!("{:.0} µs", s * 1e6),
        Some(s) if s < 1.0 => format!("{:.2} ms", s * 1e3),
        Some(s) => format!("{s:.2} s"),
    }
}

/// What an SSD failure would lose now: the data whose only copy is on the
/// SSD and how long ago the oldest of it was written.
fn exposure_line(s: &Status) -> String {
    let lost = lost_text(s);
    if s.ssd_only_bytes == 0 {
        return format!("exposure: nothing only on the SSD{}{lost}", bound_text(s));
    }
    let age = match s.ssd_only_oldest_s {
        None => String::new(),
        Some(secs) if s.ssd_only_oldest_at_open => format!(
            ", oldest written at least {secs:.0} s ago (SSD-only since before the volume opened: the time is not kept across a restart)"
        ),
        Some(secs) => format!(", oldest written {secs:.0} s ago"),
    };
    let mut line = format!("exposure: {} only on the SSD{age}", human(s.ssd_only_bytes));
    line.push_str(&bound_text(s));
    line.push_str(&lost);
    let ssd_errors = s
        .tiers
        .iter()
        .find(|t| t.tier == tierd::volume::Tier::Ssd)
        .map_or(0, |t| t.errors);
    if ssd_errors > 0 {
        line.push_str(&format!(
            "\n  the SSD has failed {ssd_errors} requests: data only on it reads EIO where it fails, the rest is served from its HDD copies (`tierctl placement --ssd-only` lists the ranges)"
        ));
    }
    line
}

/// What was lost with a dead SSD, if the volume was opened without it or
/// still has lost blocks.
fn lost_text(s: &Status) -> String {
    let mut t = String::new();
    if s.ssd_lost {
        t.push_str("\n  serving WITHOUT the SSD (--ssd-lost): data with an HDD copy is served from it, new data goes to the HDD; `tierctl replace ssd NEW` brings a new SSD in");
    }
    if s.lost_bytes > 0 {
        t.push_str(&format!(
            "\n  {} lost with the SSD: reads there get EIO until the blocks are rewritten whole or discarded (`tierctl placement --ssd-only` lists them)",
            human(s.lost_bytes)
        ));
    }
    t
}

/// The SSD exposure bound's part of the exposure line: the bound, whether
/// it holds, and what stands in its way.
fn bound_text(s: &Status) -> String {
    let Some(b) = s.ssd_exposure_bound_s else {
        return String::new();
    };
    let mut t = match s.ssd_exposure_bound_kept {
        Some(false) => format!("; bound {b:.0} s NOT kept"),
        _ => format!("; bound {b:.0} s kept"),
    };
    if let Some(why) = &s.ssd_exposure_bound_blocked {
        t.push_str(&format!(" ({why})"));
    }
    t
}

/// `tierctl placement --ssd-only`: the ranges whose newest data is only on
/// the SSD, and what that means now.
pub fn print_ssd_only(m: &SsdOnlyMap) {
    if m.ssd_errors > 0 {
        say!(
            "the SSD has failed {} requests since the daemon started: the ranges below read EIO where it fails",
            m.ssd_errors
        );
    }
    if !m.lost.is_empty() {
        for r in &m.lost {
            say!(
                "{:>14} - {:>14}  {:>12}  lost",
                r.offset,
                r.offset + r.len,
                human(r.len)
            );
        }
        let more = if m.lost_truncated {
            " (more ranges than listed: --max-runs)"
        } else {
            ""
        };
        say!(
            "{} lost with the SSD: reads get EIO until rewritten whole or discarded{more}",
            human(m.lost_bytes)
        );
    }
    if m.runs.is_empty() {
        say!(
            "nothing in {} - {} is only on the SSD: every written block has an up-to-date HDD copy",
            m.offset,
            m.offset + m.len
        );
        return;
    }
    for r in &m.runs {
        say!(
            "{:>14} - {:>14}  {:>12}",
            r.offset,
            r.offset + r.len,
            human(r.len)
        );
    }
    let more = if m.truncated {
        " (more ranges than listed: --max-runs)"
    } else {
        ""
    };
    say!("{} only on the SSD{more}", human(m.bytes));
}

/// Device latencies per tier: p50 and p99 of the recent window (about
/// 10 s), falling back to since-start figures when the window saw none.
fn print_latency(s: &Status) {
    say!(
        "device latency (last ~10 s; * = since start):\n{:<4} {:<5} {:<10} {:>9} {:>10} {:>10} {:>6}",
        "tier",
        "op",
        "class",
        "ops",
        "p50",
        "p99",
        "util"
    );
    for t in &s.tiers {
        let mut first = true;
        for l in &t.latency {
            if l.total.ops == 0 {
                continue;
            }
            let (w, mark) = if l.recent.ops > 0 {
                (&l.recent, "")
            } else {
                (&l.total, "*")
            };
            let util = if first {
                format!("{:.0} %", t.utilisation * 100.0)
            } else {
                String::new()
            };
            first = false;
            say!(
                "{:<4} {:<5} {:<10} {:>9} {:>10} {:>10} {:>6}",
                t.tier.to_string(),
                l.op,
                l.class,
                format!("{}{mark}", w.ops),
                dur(w.p50_secs),
                dur(w.p99_secs),
                util
            );
        }
    }
}

/// Every slot of each tier: the columns add up to its capacity.
fn print_space(s: &Status) {
    let pending = s.tiers.iter().any(|t| t.pending_bytes > 0);
    let mut head = format!(
        "{:<4} {:>11} = {:>11} {:>11} {:>11} {:>11} {:>11}",
        "tier", "capacity", "used", "copies", "log", "reserve", "free"
    );
    if pending {
        head.push_str(&format!(" {:>11}", "pending"));
    }
    say!("{head}");
    for t in &s.tiers {
        let mut row = format!(
            "{:<4} {:>11} = {:>11} {:>11} {:>11} {:>11} {:>11}",
            t.tier.to_string(),
            human(t.capacity_bytes),
            human(t.used_bytes),
            human(t.copies_bytes),
            human(t.log_bytes),
            human(t.reserve_bytes),
            human(t.free_bytes)
        );
        if pending {
            row.push_str(&format!(" {:>11}", human(t.pending_bytes)));
        }
        say!("{row}");
    }
    say!(
        "  (used: the volume's data; copies: clean HDD copies of SSD extents, given up when room is needed; log: the SSD write log; reserve: free SSD space kept for new writes{})",
        if pending {
            "; pending: freed, reusable after the next metadata flush"
        } else {
            ""
        }
    );
}

pub fn print(s: &Status) {
    let h = &s.health;
    if h.problems.is_empty() {
        say!("health: ok");
    } else {
        say!("health: DEGRADED");
        for p in &h.problems {
            say!("  - {p}");
        }
    }
    say!(
        "volume {} (tierd {}), up {} s",
        s.volume_id,
        s.version,
        s.uptime_secs
    );
    say!(
        "capacity {}, extent size {}",
        human(s.capacity_bytes),
        human(s.extent_size)
    );
    print_space(s);
    say!(
        "{:<4} {:>8} {:>10} {:>10} {:>7}",
        "tier",
        "extents",
        "read",
        "written",
        "errors"
    );
    for t in &s.tiers {
        say!(
            "{:<4} {:>8} {:>10} {:>10} {:>7}",
            t.tier.to_string(),
            t.extents,
            human(t.read_bytes),
            human(t.write_bytes),
            t.errors
        );
    }
    say!(
        "reserve: target {} (set at format: {}), SSD free {}, covered {} (free and clean copies)",
        human(s.reserve.target_bytes),
        human(s.reserve.format_bytes),
        human(s.reserve.ssd_free_bytes),
        human(s.reserve.covered_bytes)
    );
    match s.hit_ratio {
        Some(r) => say!("SSD hit ratio: {:.1} %", r * 100.0),
        None => say!("SSD hit ratio: - (no reads of mapped data yet)"),
    }
    let m = &s.migration;
    say!(
        "migration: {}{}; {} rounds; {} promotions ({} copied), {} demotions ({} copied, {} by remapping onto clean HDD copies); now {}/s up, {}/s down; {} aborted, {} failed",
        if m.running { "running" } else { "thread off" },
        if m.paused { ", PAUSED" } else { "" },
        m.rounds,
        m.promotions,
        human(m.promoted_bytes),
        m.demotions,
        human(m.demoted_bytes),
        human(s.shadows.saved_bytes),
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
    let p = &m.progress;
    say!(
        "migration backlog: last plan {} moves{}, {} of this round left; {} planned since start; waited {:.1} s for the foreground{}, {:.1} s for the bandwidth budget",
        p.last_planned,
        if p.more_waiting { " (a full round: more waiting)" } else { "" },
        p.queued,
        p.planned,
        p.backoff_secs,
        if p.backing_off { " (waiting now)" } else { "" },
        p.throttle_secs
    );
    if let Some(l) = &p.capacity_link {
        say!(
            "capacity tier: remote, round trip {:.2} ms, {}/s measured; migration budget {}/s (half the link, at most the configured bandwidth)",
            l.rtt_secs * 1e3,
            human(l.bandwidth as u64),
            human(p.budget)
        );
    }
    if let Some(e) = &s.evacuation {
        say!(
            "DRAINING the {}: {} of its {} extents of data moved, {} left{}; new data goes to the other tier (tierctl evacuate --cancel ends it)",
            e.tier,
            e.started_extents.saturating_sub(e.remaining_extents),
            e.started_extents,
            e.remaining_extents,
            if e.done {
                if e.remaining_extents > 0 {
                    format!(
                        ", done as far as room allows ({} stay)",
                        human(e.remaining_extents * e.extent_size)
                    )
                } else {
                    ", done: empty".to_string()
                }
            } else {
                String::new()
            }
        );
    }
    let ws = &s.working_set;
    say!(
        "working set: {} hot ({} of it on the SSD), {} touched recently; the SSD holds {} beside the reserve: {}",
        human(ws.hot_bytes),
        human(ws.hot_on_ssd_bytes),
        human(ws.active_bytes),
        human(ws.ssd_usable_bytes),
        if ws.fits {
            "the hot data fits"
        } else {
            "TOO SMALL for the hot data"
        }
    );
    if ws.heat_dropped > 0 {
        say!(
            "heat: kept for {} extents; {} dropped or never kept because the table was full (heat.max-tracked)",
            ws.heat_tracked_extents,
            ws.heat_dropped
        );
    }
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
    if w.waited > 0 || w.pressed {
        say!(
            "write log room: {} writes waited for it ({:.1} s in all, {} went to the HDD after all), {} waiting now; write-back {}",
            w.waited,
            w.wait_secs,
            w.wait_timeouts,
            w.waiting,
            if w.pressed {
                "runs beside users (the log is pressed)"
            } else {
                "waits for the HDD to be free of users"
            }
        );
    }
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
    say!("{}", exposure_line(s));
    let a = &s.admission;
    if a.enabled || a.admitted > 0 {
        say!(
            "admission at the miss: {}; {} extents brought up, {} scan misses remembered, {} dropped, {} without room, {} left for the HDD's users, {} waiting",
            if a.enabled { "on" } else { "off" },
            a.admitted,
            a.remembered,
            a.dropped,
            a.no_room,
            a.paced,
            a.waiting
        );
    }
    print_latency(s);
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
