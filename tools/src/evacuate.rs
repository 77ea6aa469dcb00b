//! `tierctl evacuate ssd|hdd`: say what draining the tier would move and
//! leave, start it, and follow it with a progress bar until nothing more
//! can move; `--cancel` ends draining.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::bail;
use tierd::control::{EvacuationStatus, Request, Status};
use tierd::volume::Tier;

use crate::out::{human, say};
use crate::{ack, request, Cli};

/// How long without progress before the watch gives up.
const STALL: Duration = Duration::from_secs(60);

fn other(t: Tier) -> Tier {
    match t {
        Tier::Ssd => Tier::Hdd,
        Tier::Hdd => Tier::Ssd,
    }
}

/// The plan in words: the tier's data (the extents `status` counts for
/// it), how much of it can move and how much would remain, which pins
/// draining overrides, and apart what needs no move (write-log segments,
/// clean copies).
fn describe(p: &EvacuationStatus) -> String {
    let es = p.extent_size;
    let movable = p.data_extents.saturating_sub(p.would_remain_extents);
    let mut s = format!(
        "the {} holds {} extents of data ({}); {movable} of them ({}) can move to the {}",
        p.tier,
        p.data_extents,
        human(p.data_extents * es),
        human(movable * es),
        other(p.tier)
    );
    if p.would_remain_extents > 0 {
        s.push_str(&format!(
            ", {} ({}) would REMAIN: the {} has no free slot for them",
            p.would_remain_extents,
            human(p.would_remain_extents * es),
            other(p.tier)
        ));
    } else {
        s.push_str(": nothing would remain");
    }
    if p.pinned_extents > 0 {
        s.push_str(&format!(
            "; {} of them are pinned to the {}: draining overrides those pins and moves them too \
             (the pins stay, and apply again after `tierctl evacuate --cancel`)",
            p.pinned_extents, p.tier
        ));
    }
    if p.log_segments > 0 {
        s.push_str(&format!(
            "; besides, {} write-log segments ({}) are written back to the HDD, not moved",
            p.log_segments,
            human(p.log_segments * es)
        ));
    }
    if p.shadow_extents > 0 {
        s.push_str(&format!(
            "; besides, {} clean copies of SSD extents ({}) are dropped, not moved",
            p.shadow_extents,
            human(p.shadow_extents * es)
        ));
    }
    s
}

/// Bytes moved off `tier` so far, by how: (copied, by remapping). Demotions
/// of extents whose clean HDD copy is current change the mapping only.
fn moved_bytes(st: &Status, tier: Tier) -> (u64, u64) {
    match tier {
        Tier::Ssd => (
            st.migration.demoted_bytes + st.write_log.written_back_bytes,
            st.shadows.saved_bytes,
        ),
        Tier::Hdd => (st.migration.promoted_bytes, 0),
    }
}

/// The moved-bytes counters once two looks a tenth of a second apart agree
/// (for up to two seconds), starting from `now`.
fn settled_bytes(cli: &Cli, tier: Tier, mut now: (u64, u64)) -> anyhow::Result<(u64, u64)> {
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(100));
        let (st, _): (Status, _) = request(cli, &Request::Status)?;
        let next = moved_bytes(&st, tier);
        if next == now {
            break;
        }
        now = next;
    }
    Ok(now)
}

/// Run the command.
pub fn run(
    cli: &Cli,
    tier: Option<Tier>,
    cancel: bool,
    dry_run: bool,
    no_wait: bool,
) -> anyhow::Result<()> {
    if cancel {
        return ack(
            cli,
            &Request::Evacuate {
                tier: None,
                dry_run: false,
            },
        );
    }
    let Some(tier) = tier else {
        bail!("say which tier: tierctl evacuate ssd, tierctl evacuate hdd, or --cancel");
    };
    let (plan, resp): (EvacuationStatus, _) = request(
        cli,
        &Request::Evacuate {
            tier: Some(tier),
            dry_run: true,
        },
    )?;
    if dry_run {
        if cli.json {
            return crate::print_json(&resp);
        }
        say!("{}", describe(&plan));
        return Ok(());
    }
    if !cli.json {
        say!("{}", describe(&plan));
    }
    // What was moved so far, taken before draining starts: the migrator
    // may move everything before the first look at its progress.
    let before = if cli.json || no_wait {
        None
    } else {
        let (st, _): (Status, _) = request(cli, &Request::Status)?;
        Some(moved_bytes(&st, tier))
    };
    ack(
        cli,
        &Request::Evacuate {
            tier: Some(tier),
            dry_run: false,
        },
    )?;
    if cli.json || no_wait {
        return Ok(());
    }
    say!("(Ctrl-C stops watching; draining goes on until `tierctl evacuate --cancel`)");
    watch(cli, before)
}

/// Follow draining until done or stalled; `base` is what was moved before
/// it started (else the first look's figures).
fn watch(cli: &Cli, mut base: Option<(u64, u64)>) -> anyhow::Result<()> {
    let tty = std::io::stderr().is_terminal();
    let mut last = (u64::MAX, Instant::now());
    let mut last_line: Option<Instant> = None;
    let started = Instant::now();
    loop {
        let (st, _): (Status, _) = request(cli, &Request::Status)?;
        let Some(e) = st.evacuation else {
            say!("draining was cancelled");
            return Ok(());
        };
        let total = e.started_extents.max(1);
        let moved = e.started_extents.saturating_sub(e.remaining_extents);
        let frac = moved as f64 / total as f64;
        let width = 30;
        let filled = ((frac * width as f64).round() as usize).min(width);
        let mut now = moved_bytes(&st, e.tier);
        if e.done {
            // A batch's mappings are switched before its bytes are counted
            // (the counters follow the flush that makes them durable): once
            // the tier looks drained, wait for the counts to settle.
            now = settled_bytes(cli, e.tier, now)?;
        }
        let (b_copied, b_remapped) = *base.get_or_insert(now);
        let (copied, remapped) = (
            now.0.saturating_sub(b_copied),
            now.1.saturating_sub(b_remapped),
        );
        let secs = started.elapsed().as_secs_f64().max(0.5);
        let how = match e.tier {
            Tier::Ssd => format!("{} copied, {} by remapping", human(copied), human(remapped)),
            Tier::Hdd => format!("{} copied", human(copied)),
        };
        let line = format!(
            "[{}{}] {:>3.0} %  {moved} of {} extents moved ({} of {}), {} left on the {}; {how} ({}/s)",
            "#".repeat(filled),
            ".".repeat(width - filled),
            frac * 100.0,
            e.started_extents,
            human(moved * e.extent_size),
            human(e.started_extents * e.extent_size),
            human(e.remaining_extents * e.extent_size),
            e.tier,
            human(((copied + remapped) as f64 / secs) as u64)
        );
        if tty {
            eprint!("\r{line}\x1b[K");
        } else if last_line.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) || e.done {
            eprintln!("{line}");
            last_line = Some(Instant::now());
        }
        if e.done {
            if tty {
                eprintln!();
            }
            let how = match e.tier {
                Tier::Ssd => format!(
                    "{moved} extents moved: {} copied, {} moved by remapping onto clean HDD copies",
                    human(copied),
                    human(remapped)
                ),
                Tier::Hdd => format!("{moved} extents moved: {} copied", human(copied)),
            };
            if e.remaining_extents > 0 {
                say!(
                    "drained as far as room allows ({how}): {} extents ({}) remain on the {}",
                    e.remaining_extents,
                    human(e.remaining_extents * e.extent_size),
                    e.tier
                );
            } else {
                say!(
                    "the {} is empty ({how}); new data goes to the {} until `tierctl evacuate --cancel`",
                    e.tier,
                    other(e.tier)
                );
            }
            return Ok(());
        }
        // Progress is data moved, or write log written back, or copies
        // dropped.
        let left = e.remaining_extents + e.log_segments + e.shadow_extents;
        if left < last.0 {
            last = (left, Instant::now());
        } else if last.1.elapsed() > STALL {
            if tty {
                eprintln!();
            }
            bail!(
                "no progress for {} s with {} extents left on the {} (is migration paused? tierctl status says); draining goes on",
                STALL.as_secs(),
                e.remaining_extents,
                e.tier
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
