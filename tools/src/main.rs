//! `tierctl`: inspect and steer tierd. `device` reads a device's superblock
//! directly; every other command talks to a running daemon over its control
//! socket (line-delimited JSON, see docs/operations.md). Thin: parses flags,
//! sends one request, prints the answer as text or (`--json`) as JSON.

mod client;
mod device;
mod evacuate;
mod map;
mod out;
mod status;
mod trace;

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use tierd::control::{
    Ack, Explain, MigrateAction, PlacementMap, Request, Response, Setting, SsdOnlyMap, Status,
    TopEntry, TopOrder, Where,
};
use tierd::units::ByteSize;
use tierd::volume::Tier;

use out::{human, paint, say};

#[derive(Parser)]
#[command(name = "tierctl", version, about = "Inspect and steer tierd")]
pub struct Cli {
    /// The daemon's control socket. Default: the first that answers of
    /// $TIERD_CONTROL, tierd-data/control.sock, /run/tierd/control.sock and
    /// the sockets running daemons registered (in $XDG_RUNTIME_DIR/tierd,
    /// else /run/user/UID/tierd, else for root /run/tierd).
    #[arg(long, global = true, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the tierd superblock of a device or image file, or what else it carries.
    Device {
        /// The device or image file.
        path: PathBuf,
    },
    /// Capacity, per-tier use, reserve, hit ratio, migration, connections.
    Status,
    /// Which byte ranges sit on the SSD, the HDD or nowhere.
    Placement {
        /// A byte range: START-END, START+LEN, START (to the end) or all;
        /// sizes take units (0-1GiB, 4GiB+512MiB); a range past the end
        /// is clipped to it. Default: the whole volume.
        range: Option<String>,
        /// Draw a coloured map of the range, one cell per group of extents.
        #[arg(long)]
        map: bool,
        /// Cells in the map.
        #[arg(long, default_value_t = 512)]
        cells: usize,
        /// List the byte ranges whose newest data is only on the SSD
        /// instead: what an SSD failure loses (reads of them get EIO once
        /// it has failed).
        #[arg(long, conflicts_with = "map")]
        ssd_only: bool,
        /// With --ssd-only: most ranges listed.
        #[arg(long, default_value_t = 1000, requires = "ssd_only")]
        max_runs: usize,
    },
    /// Where the extent holding OFFSET sits and why.
    Explain {
        /// A byte offset (units allowed: 3GiB).
        offset: String,
    },
    /// The hottest or coldest extents.
    Top {
        /// Hottest first.
        #[arg(long, conflicts_with = "cold")]
        hot: bool,
        /// Coldest first.
        #[arg(long)]
        cold: bool,
        /// How many.
        #[arg(short, default_value_t = 10)]
        n: usize,
    },
    /// Keep the extents of a byte range on one tier.
    Pin {
        /// START-END, START+LEN (units allowed) or all; a range past the
        /// end of the volume is clipped to it.
        range: String,
        /// The tier.
        #[arg(long, value_enum)]
        tier: TierArg,
    },
    /// Remove the pins of a byte range.
    Unpin {
        /// START-END, START+LEN (units allowed) or all; a range past the
        /// end of the volume is clipped to it.
        range: String,
    },
    /// Pause, resume or run background migration now.
    Migrate {
        /// What to do.
        #[arg(value_enum)]
        action: ActionArg,
    },
    /// The live SSD reserve target.
    Reserve {
        #[command(subcommand)]
        what: ReserveCmd,
    },
    /// Show the configuration in force; change the keys that can change live.
    Config {
        #[command(subcommand)]
        what: ConfigCmd,
    },
    /// Drain a tier online as far as the other tier has room (it says first
    /// what would remain), following it with a progress bar.
    Evacuate {
        /// The tier to drain.
        #[arg(value_enum, required_unless_present = "cancel")]
        tier: Option<TierArg>,
        /// Stop draining: placement follows the policy again.
        #[arg(long, conflicts_with_all = ["tier", "dry_run", "no_wait"])]
        cancel: bool,
        /// Only say what would move and what would remain.
        #[arg(long)]
        dry_run: bool,
        /// Start draining and return without following it.
        #[arg(long)]
        no_wait: bool,
    },
    /// Put a new device in place of the SSD while the volume serves (drain
    /// it first: tierctl evacuate ssd).
    Replace {
        /// Only the SSD can be replaced.
        #[arg(value_enum)]
        tier: ReplaceTier,
        /// The new device or image file (at least as big as the old SSD).
        path: PathBuf,
        /// Overwrite a device that carries a filesystem, a partition table
        /// or a superblock.
        #[arg(long)]
        force: bool,
    },
    /// Load the daemon's configuration again (as SIGHUP does) and say
    /// whether it worked: exits non-zero when the old one stays in force.
    Reload,
    /// Record every request the daemon serves into a trace file
    /// (docs/trace.md), for `tierd trace info` and `tierd bench --trace`.
    Trace {
        #[command(subcommand)]
        what: TraceCmd,
    },
    /// Print the man page, or write one per command into a directory.
    Man {
        /// Write tierctl.1, tierctl-status.1, ... here.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: tierd_clidocs::Shell,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Every key: value in force, default, whether it can change live, and
    /// where the value comes from (default, configuration, tierctl).
    Show {
        /// Only the keys that can change live.
        #[arg(long)]
        live: bool,
    },
    /// Change a live key now; saved, it stays over the configuration file
    /// across restarts until `config reset`.
    Set {
        /// The key (migrate.bandwidth, migrate.promote-margin,
        /// heat.sequential-cutoff, reserve, log-level, ...).
        key: String,
        /// The value as the configuration writes it (64MiB, 0.5, 2s).
        value: String,
    },
    /// Drop a live setting: the configuration's value comes back.
    Reset {
        /// The key.
        key: String,
    },
}

#[derive(Subcommand)]
enum TraceCmd {
    /// Start recording into FILE (created with mode 0600).
    Start {
        /// The trace file.
        file: PathBuf,
        /// Stop by itself at this size of file (units: 1GiB). Default: no limit.
        #[arg(long, value_name = "SIZE")]
        max_size: Option<String>,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Stop recording: the file is complete.
    Stop,
    /// The recording under way, or the last one.
    Status,
}

#[derive(Subcommand)]
enum ReserveCmd {
    /// Keep SIZE of the SSD free (0 up to the SSD's size; rounded up to extents).
    Set {
        /// Size with a unit (2GiB).
        size: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum TierArg {
    Ssd,
    Hdd,
}

impl From<TierArg> for Tier {
    fn from(t: TierArg) -> Tier {
        match t {
            TierArg::Ssd => Tier::Ssd,
            TierArg::Hdd => Tier::Hdd,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ReplaceTier {
    Ssd,
}

#[derive(Clone, Copy, ValueEnum)]
enum ActionArg {
    Pause,
    Resume,
    Now,
}

/// Parse `all`, `START-END`, `START+LEN` or (with `open_end`) `START`;
/// no length means to the end of the volume. The daemon clips a range
/// that runs past the end (`0-35GiB` of a volume `status` shows as
/// 35.00 GiB) and says so.
fn parse_range(s: &str, open_end: bool) -> anyhow::Result<(u64, Option<u64>)> {
    if s.eq_ignore_ascii_case("all") {
        return Ok((0, None));
    }
    // A size as status prints it (`1.24 GiB`) is rounded outwards: the
    // start down, the end and the length up, so the range covers at least
    // what it says (the daemon clips it to the volume).
    let size = |t: &str, up: bool| {
        ByteSize::parse_rounded(t, up)
            .map(|b| b.0)
            .with_context(|| format!("in range {s:?} (or `all` for the whole volume)"))
    };
    if let Some((a, b)) = s.split_once('+') {
        return Ok((size(a, false)?, Some(size(b, true)?)));
    }
    if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (size(a, false)?, size(b, true)?);
        if b <= a {
            bail!(
                "range {s:?} ends before it starts: write START-END with END > START, or START+LEN"
            );
        }
        return Ok((a, Some(b - a)));
    }
    if open_end {
        return Ok((size(s, false)?, None));
    }
    bail!("range {s:?} has no end: write START-END (0-1GiB), START+LEN (4GiB+512MiB) or all")
}

/// Send a request; on `ok`, decode the result as `T`.
pub fn request<T: serde::de::DeserializeOwned>(
    cli: &Cli,
    req: &Request,
) -> anyhow::Result<(T, Response)> {
    let resp = client::Target::from_env(cli.control.clone()).call(req)?;
    if !resp.ok {
        if cli.json {
            say!("{}", serde_json::to_string(&resp)?);
        }
        bail!(
            "the daemon refused: {}",
            resp.error.as_deref().unwrap_or("(no reason given)")
        );
    }
    let v = resp.result.clone().unwrap_or(serde_json::Value::Null);
    let t = serde_json::from_value(v).context("decoding the daemon's answer")?;
    Ok((t, resp))
}

pub fn print_json(resp: &Response) -> anyhow::Result<()> {
    say!(
        "{}",
        serde_json::to_string_pretty(resp.result.as_ref().unwrap_or(&serde_json::Value::Null))?
    );
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        // Each cause once (see tierd::units::error_text).
        eprintln!("tierctl: {}", tierd::units::error_text(e.as_ref()));
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        Command::Man { out } => {
            use clap::CommandFactory;
            let cmd = Cli::command();
            match out {
                Some(dir) => {
                    for f in tierd_clidocs::man_pages(&cmd, dir)
                        .with_context(|| format!("writing man pages into {}", dir.display()))?
                    {
                        say!("{}", f.display());
                    }
                }
                None => tierd_clidocs::man_page(&cmd, &mut std::io::stdout())
                    .context("writing the man page")?,
            }
            Ok(())
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            tierd_clidocs::completions(&Cli::command(), *shell, &mut std::io::stdout());
            Ok(())
        }
        Command::Device { path } => device::show(path, cli.json),
        Command::Status => {
            let (s, resp): (Status, _) = request(&cli, &Request::Status)?;
            if cli.json {
                return print_json(&resp);
            }
            status::print(&s);
            Ok(())
        }
        Command::Placement {
            range,
            map,
            cells,
            ssd_only,
            max_runs,
        } => {
            let (offset, len) = match range {
                Some(r) => parse_range(r, true)?,
                None => (0, None),
            };
            if *ssd_only {
                let (m, resp): (SsdOnlyMap, _) = request(
                    &cli,
                    &Request::SsdOnly {
                        offset,
                        len,
                        max_runs: *max_runs,
                    },
                )?;
                if cli.json {
                    return print_json(&resp);
                }
                status::print_ssd_only(&m);
                return Ok(());
            }
            // The map asks the daemon for its cells' counts, not the runs.
            let want = map.then(|| u32::try_from(*cells).unwrap_or(u32::MAX).max(1));
            let (p, resp): (PlacementMap, _) = request(
                &cli,
                &Request::Placement {
                    offset,
                    len,
                    cells: want,
                },
            )?;
            if cli.json {
                return print_json(&resp);
            }
            if len.is_some_and(|l| offset.saturating_add(l) > p.offset + p.len) {
                say!(
                    "(the range ran past the end of the volume: clipped to its {})",
                    human(p.capacity_bytes)
                );
            }
            if *map {
                map::print(&p, (*cells).max(1));
            } else {
                for r in &p.runs {
                    let at = match r.at {
                        Where::Ssd => paint("32", "ssd"),
                        Where::Hdd => paint("34", "hdd"),
                        Where::Unmapped => "unmapped".to_string(),
                    };
                    say!(
                        "{:>14} - {:>14}  {:>12}  {at}",
                        r.offset,
                        r.offset + r.len,
                        human(r.len)
                    );
                }
            }
            Ok(())
        }
        Command::Explain { offset } => {
            let offset = ByteSize::parse(offset)?.0;
            let (explain, resp): (Explain, _) = request(&cli, &Request::Explain { offset })?;
            if cli.json {
                return print_json(&resp);
            }
            let e = &explain.placement;
            let tier = e.tier.map(|t| t.to_string()).unwrap_or("unmapped".into());
            say!(
                "extent {} (bytes {}..{}): {tier}",
                e.extent,
                e.offset,
                e.offset + e.len
            );
            if let Some(slot) = e.slot {
                say!(
                    "  slot {slot}, {} of {} blocks written",
                    e.written_blocks,
                    e.blocks
                );
            }
            let ranges = || {
                e.dirty_ranges
                    .iter()
                    .map(|[a, b]| {
                        if a == b {
                            a.to_string()
                        } else {
                            format!("{a}-{b}")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            };
            if let Some(slot) = e.shadow_slot {
                say!(
                    "  clean copy on the HDD (slot {slot}); {} blocks stale there{}",
                    e.stale_blocks,
                    if e.stale_blocks > 0 {
                        format!(": {}", ranges())
                    } else {
                        String::new()
                    }
                );
            }
            if e.logged_blocks > 0 {
                say!(
                    "  {} blocks newer in the SSD write log (written back to the HDD later): {}",
                    e.logged_blocks,
                    ranges()
                );
            }
            say!(
                "  heat {:.3}, {} blocks touched recently",
                e.score,
                e.coverage
            );
            if let Some(p) = e.pin {
                say!("  pinned to the {p}");
            }
            if let Some(m) = e.last_move {
                say!(
                    "  last move: {} -> {} ({}) at {}",
                    m.from,
                    m.to,
                    m.reason.name(),
                    out::utc(m.at)
                );
            }
            say!("  why: {}", explain.why);
            Ok(())
        }
        Command::Top { hot, cold, n } => {
            if !hot && !cold {
                bail!("say which end: tierctl top --hot or tierctl top --cold");
            }
            let order = if *cold { TopOrder::Cold } else { TopOrder::Hot };
            let (top, resp): (Vec<TopEntry>, _) = request(&cli, &Request::Top { order, n: *n })?;
            if cli.json {
                return print_json(&resp);
            }
            // `heat` is what the order follows (the score weighted by how
            // densely the extent is used); `score` is the raw decayed score.
            say!(
                "{:>10} {:>14} {:>4} {:>10} {:>10} {:>8} pin",
                "extent",
                "offset",
                "tier",
                "heat",
                "score",
                "blocks"
            );
            for t in top {
                say!(
                    "{:>10} {:>14} {:>4} {:>10.3} {:>10.3} {:>8} {}",
                    t.extent,
                    t.offset,
                    t.tier,
                    t.heat,
                    t.score,
                    t.coverage,
                    t.pin.map(|p| p.to_string()).unwrap_or("-".into())
                );
            }
            Ok(())
        }
        Command::Pin { range, tier } => {
            let (offset, len) = parse_range(range, false)?;
            let tier = Tier::from(*tier);
            ack(&cli, &Request::Pin { offset, len, tier })
        }
        Command::Unpin { range } => {
            let (offset, len) = parse_range(range, false)?;
            ack(&cli, &Request::Unpin { offset, len })
        }
        Command::Migrate { action } => {
            let action = match action {
                ActionArg::Pause => MigrateAction::Pause,
                ActionArg::Resume => MigrateAction::Resume,
                ActionArg::Now => MigrateAction::Now,
            };
            ack(&cli, &Request::Migrate { action })
        }
        Command::Reserve {
            what: ReserveCmd::Set { size },
        } => {
            let bytes = ByteSize::parse(size)?.0;
            ack(&cli, &Request::Reserve { bytes })
        }
        Command::Config {
            what: ConfigCmd::Show { live },
        } => {
            let (rows, resp): (Vec<Setting>, _) = request(&cli, &Request::ConfigShow)?;
            if cli.json {
                if *live {
                    let rows: Vec<&Setting> = rows.iter().filter(|r| r.live).collect();
                    say!("{}", serde_json::to_string_pretty(&rows)?);
                    return Ok(());
                }
                return print_json(&resp);
            }
            say!(
                "{:<28} {:<24} {:<14} {:<5} default",
                "key",
                "value",
                "from",
                "live"
            );
            // One notation for nothing: an unset key, a key turned off
            // with "" and a key without a default all read `none`.
            let shown = |v: &str| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.to_string()
                }
            };
            for r in rows.iter().filter(|r| r.live || !*live) {
                say!(
                    "{:<28} {:<24} {:<14} {:<5} {}",
                    r.key,
                    shown(&r.value),
                    r.source,
                    if r.live { "yes" } else { "no" },
                    shown(&r.default)
                );
            }
            Ok(())
        }
        Command::Config {
            what: ConfigCmd::Set { key, value },
        } => ack(
            &cli,
            &Request::ConfigSet {
                key: key.clone(),
                value: value.clone(),
            },
        ),
        Command::Config {
            what: ConfigCmd::Reset { key },
        } => ack(&cli, &Request::ConfigReset { key: key.clone() }),
        Command::Reload => ack(&cli, &Request::Reload),
        Command::Trace {
            what:
                TraceCmd::Start {
                    file,
                    max_size,
                    force,
                },
        } => trace::start(&cli, file, max_size.as_deref(), *force),
        Command::Trace {
            what: TraceCmd::Stop,
        } => trace::stop(&cli),
        Command::Trace {
            what: TraceCmd::Status,
        } => trace::status(&cli),
        Command::Replace {
            tier: ReplaceTier::Ssd,
            path,
            force,
        } => {
            // The daemon opens the path: make it absolute from here.
            let path = std::path::absolute(path)
                .with_context(|| format!("resolving {}", path.display()))?;
            ack(
                &cli,
                &Request::ReplaceSsd {
                    path,
                    force: *force,
                },
            )
        }
        Command::Evacuate {
            tier,
            cancel,
            dry_run,
            no_wait,
        } => evacuate::run(&cli, tier.map(Tier::from), *cancel, *dry_run, *no_wait),
    }
}

pub fn ack(cli: &Cli, req: &Request) -> anyhow::Result<()> {
    let (a, resp): (Ack, _) = request(cli, req)?;
    if cli.json {
        return print_json(&resp);
    }
    say!("{}", a.done);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_range;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("0-1GiB", false).unwrap(), (0, Some(1 << 30)));
        assert_eq!(
            parse_range("4GiB+512MiB", false).unwrap(),
            (4 << 30, Some(512 << 20))
        );
        assert_eq!(parse_range("1MiB", true).unwrap(), (1 << 20, None));
        assert!(parse_range("1MiB", false).is_err());
        assert!(parse_range("2MiB-1MiB", false).is_err());
        assert!(parse_range("x-1MiB", false).is_err());
    }
}
