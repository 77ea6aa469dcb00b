//! `tierctl`: inspect and steer tierd. `device` reads a device's superblock
//! directly; every other command talks to a running daemon over its control
//! socket (line-delimited JSON, see docs/operations.md). Thin: parses flags,
//! sends one request, prints the answer as text or (`--json`) as JSON.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use tierd::control::{
    Ack, Explain, MigrateAction, PlacementMap, Request, Response, Status, TopEntry, TopOrder, Where,
};
use tierd::device::{BlockDevice, FileDevice};
use tierd::units::ByteSize;
use tierd::volume::{detect_content, Superblock, Tier, PROBE_SIZE};

#[derive(Parser)]
#[command(name = "tierctl", version, about = "Inspect and steer tierd")]
struct Cli {
    /// The daemon's control socket.
    #[arg(
        long,
        global = true,
        env = "TIERD_CONTROL",
        value_name = "PATH",
        default_value = "tierd-data/control.sock"
    )]
    control: PathBuf,
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
        /// A byte range: START-END, START+LEN or START (to the end); sizes
        /// take units (0-1GiB, 4GiB+512MiB). Default: the whole volume.
        range: Option<String>,
        /// Draw a coloured map of the range, one cell per group of extents.
        #[arg(long)]
        map: bool,
        /// Cells in the map.
        #[arg(long, default_value_t = 512)]
        cells: usize,
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
        /// START-END or START+LEN (units allowed).
        range: String,
        /// The tier.
        #[arg(long, value_enum)]
        tier: TierArg,
    },
    /// Remove the pins of a byte range.
    Unpin {
        /// START-END or START+LEN (units allowed).
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

#[derive(Clone, Copy, ValueEnum)]
enum ActionArg {
    Pause,
    Resume,
    Now,
}

/// Parse `START-END`, `START+LEN` or (with `open_end`) `START`.
fn parse_range(s: &str, open_end: bool) -> anyhow::Result<(u64, Option<u64>)> {
    let size = |t: &str| {
        ByteSize::parse(t)
            .map(|b| b.0)
            .with_context(|| format!("in range {s:?}"))
    };
    if let Some((a, b)) = s.split_once('+') {
        return Ok((size(a)?, Some(size(b)?)));
    }
    if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (size(a)?, size(b)?);
        if b <= a {
            bail!(
                "range {s:?} ends before it starts: write START-END with END > START, or START+LEN"
            );
        }
        return Ok((a, Some(b - a)));
    }
    if open_end {
        return Ok((size(s)?, None));
    }
    bail!("range {s:?} has no end: write START-END (0-1GiB) or START+LEN (4GiB+512MiB)")
}

/// Send one request and return the daemon's answer.
fn call(socket: &Path, req: &Request) -> anyhow::Result<Response> {
    let mut stream = UnixStream::connect(socket).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => anyhow::anyhow!(
            "no daemon at {}: is tierd running? (start it with `tierd serve`, or point --control or TIERD_CONTROL at its control socket)",
            socket.display()
        ),
        std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
            "cannot connect to {}: permission denied (the socket is mode 0600: run tierctl as the user tierd runs as)",
            socket.display()
        ),
        _ => anyhow::anyhow!("cannot connect to {}: {e}", socket.display()),
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut line = serde_json::to_vec(req)?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .with_context(|| format!("sending to {}", socket.display()))?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .with_context(|| format!("reading the answer from {}", socket.display()))?;
    if answer.is_empty() {
        bail!(
            "{} closed the connection without answering: is it a tierd control socket?",
            socket.display()
        );
    }
    serde_json::from_str(&answer).context("the daemon's answer is not valid JSON")
}

/// Send a request; on `ok`, decode the result as `T`.
fn request<T: serde::de::DeserializeOwned>(
    cli: &Cli,
    req: &Request,
) -> anyhow::Result<(T, Response)> {
    let resp = call(&cli.control, req)?;
    if !resp.ok {
        if cli.json {
            println!("{}", serde_json::to_string(&resp)?);
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

fn print_json(resp: &Response) -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(resp.result.as_ref().unwrap_or(&serde_json::Value::Null))?
    );
    Ok(())
}

/// Bytes in binary units with two decimals.
fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Colour only on a terminal and without NO_COLOR.
fn colour() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

fn paint(code: &str, s: &str) -> String {
    if colour() {
        format!("\x1b[{code}m{s}\x1b[0m")
    } else {
        s.to_string()
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("tierctl: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match &cli.command {
        Command::Device { path } => device(path, cli.json),
        Command::Status => {
            let (s, resp): (Status, _) = request(&cli, &Request::Status)?;
            if cli.json {
                return print_json(&resp);
            }
            print_status(&s);
            Ok(())
        }
        Command::Placement { range, map, cells } => {
            let (offset, len) = match range {
                Some(r) => parse_range(r, true)?,
                None => (0, None),
            };
            let (p, resp): (PlacementMap, _) = request(&cli, &Request::Placement { offset, len })?;
            if cli.json {
                return print_json(&resp);
            }
            if *map {
                print_map(&p, (*cells).max(1));
            } else {
                for r in &p.runs {
                    let at = match r.at {
                        Where::Ssd => paint("32", "ssd"),
                        Where::Hdd => paint("34", "hdd"),
                        Where::Unmapped => "unmapped".to_string(),
                    };
                    println!(
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
            println!(
                "extent {} (bytes {}..{}): {tier}",
                e.extent,
                e.offset,
                e.offset + e.len
            );
            if let Some(slot) = e.slot {
                println!(
                    "  slot {slot}, {} of {} blocks written",
                    e.written_blocks, e.blocks
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
                println!(
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
                println!(
                    "  {} blocks newer in the SSD write log (written back to the HDD later): {}",
                    e.logged_blocks,
                    ranges()
                );
            }
            println!(
                "  heat {:.3}, {} blocks touched recently",
                e.score, e.coverage
            );
            if let Some(p) = e.pin {
                println!("  pinned to the {p}");
            }
            if let Some(m) = e.last_move {
                println!(
                    "  last move: {} -> {} ({}) at unix time {}",
                    m.from,
                    m.to,
                    m.reason.name(),
                    m.at
                );
            }
            println!("  why: {}", explain.why);
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
            println!(
                "{:>10} {:>14} {:>4} {:>10} {:>8} pin",
                "extent", "offset", "tier", "heat", "blocks"
            );
            for t in top {
                println!(
                    "{:>10} {:>14} {:>4} {:>10.3} {:>8} {}",
                    t.extent,
                    t.offset,
                    t.tier,
                    t.score,
                    t.coverage,
                    t.pin.map(|p| p.to_string()).unwrap_or("-".into())
                );
            }
            Ok(())
        }
        Command::Pin { range, tier } => {
            let (offset, len) = parse_range(range, false)?;
            let tier = match tier {
                TierArg::Ssd => Tier::Ssd,
                TierArg::Hdd => Tier::Hdd,
            };
            let req = Request::Pin {
                offset,
                len: len.unwrap_or(0),
                tier,
            };
            ack(&cli, &req)
        }
        Command::Unpin { range } => {
            let (offset, len) = parse_range(range, false)?;
            ack(
                &cli,
                &Request::Unpin {
                    offset,
                    len: len.unwrap_or(0),
                },
            )
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
    }
}

fn ack(cli: &Cli, req: &Request) -> anyhow::Result<()> {
    let (a, resp): (Ack, _) = request(cli, req)?;
    if cli.json {
        return print_json(&resp);
    }
    println!("{}", a.done);
    Ok(())
}

fn print_status(s: &Status) {
    println!(
        "volume {} (tierd {}), up {} s",
        s.volume_id, s.version, s.uptime_secs
    );
    println!(
        "capacity {} ({} bytes), extent size {}",
        human(s.capacity_bytes),
        s.capacity_bytes,
        human(s.extent_size)
    );
    println!(
        "{:<4} {:>12} {:>12} {:>12} {:>8} {:>10} {:>10} {:>7}",
        "tier", "capacity", "used", "free", "extents", "read", "written", "errors"
    );
    for t in &s.tiers {
        println!(
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
    println!(
        "reserve: target {} (set at format: {}), SSD free {}",
        human(s.reserve.target_bytes),
        human(s.reserve.format_bytes),
        human(s.reserve.ssd_free_bytes)
    );
    match s.hit_ratio {
        Some(r) => println!("SSD hit ratio: {:.1} %", r * 100.0),
        None => println!("SSD hit ratio: - (no reads of mapped data yet)"),
    }
    let m = &s.migration;
    println!(
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
    println!(
        "migrate config: interval {:?}, bandwidth {}/s, max {} moves a round",
        m.config.interval,
        human(m.config.bandwidth.0),
        m.config.policy.max_moves
    );
    let w = &s.write_log;
    println!(
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
    println!(
        "shadows: {} extents keep an HDD copy, {} clean, {} stale; {} pre-cleaned; {} free demotions (saved {}), {} dropped for space",
        sh.extents,
        human(sh.clean_bytes),
        human(sh.stale_bytes),
        sh.precleaned,
        sh.free_demotions,
        human(sh.saved_bytes),
        sh.dropped
    );
    println!(
        "connections {}, in flight {}, spills {}, sequential bypasses {}, pins {}, quarantined {}",
        s.connections, s.inflight, s.spills, s.sequential_bypasses, s.pins, s.quarantined
    );
}

/// One cell per group of extents: S all SSD, H all HDD, m mixed, . unmapped.
fn print_map(p: &PlacementMap, cells: usize) {
    let es = p.extent_size;
    let first = p.offset / es;
    let end = (p.offset + p.len).div_ceil(es);
    let extents = end - first;
    let cells = (cells as u64).min(extents).max(1);
    let per = extents.div_ceil(cells);
    let cells = extents.div_ceil(per);
    // Counts [ssd, hdd, unmapped] per cell.
    let mut counts = vec![[0u64; 3]; cells as usize];
    for r in &p.runs {
        let (a, b) = (r.offset / es, (r.offset + r.len) / es);
        for e in a.max(first)..b.min(end) {
            let c = ((e - first) / per) as usize;
            let k = match r.at {
                Where::Ssd => 0,
                Where::Hdd => 1,
                Where::Unmapped => 2,
            };
            counts[c][k] += 1;
        }
    }
    println!(
        "{} .. {} ({} extents of {}, {} per cell)",
        human(first * es),
        human(end * es),
        extents,
        human(es),
        per
    );
    let width = 64;
    for (row, chunk) in counts.chunks(width).enumerate() {
        let mut line = String::new();
        for c in chunk {
            line.push_str(&match (c[0] > 0, c[1] > 0) {
                (true, false) => paint("42;30", "S"),
                (false, true) => paint("44;37", "H"),
                (true, true) => paint("43;30", "m"),
                (false, false) => paint("2", "."),
            });
        }
        let at = first + (row * width) as u64 * per;
        println!("{:>10} {line}", human(at * es));
    }
    println!(
        "legend: {} SSD  {} HDD  {} both  {} unmapped",
        paint("42;30", "S"),
        paint("44;37", "H"),
        paint("43;30", "m"),
        paint("2", ".")
    );
}

fn device(path: &Path, json: bool) -> anyhow::Result<()> {
    let dev =
        FileDevice::open(path, false).with_context(|| format!("opening {}", path.display()))?;
    let mut probe = vec![0u8; PROBE_SIZE.min(dev.size() as usize)];
    dev.read_at(&mut probe, 0)
        .with_context(|| format!("reading {}", path.display()))?;
    let sb = Superblock::decode(&probe);
    let content = detect_content(&probe);
    if json {
        let v = match &sb {
            Ok(sb) => serde_json::json!({
                "path": path, "size": dev.size(), "tierd": true,
                "role": sb.role, "volume-id": sb.volume_id, "format-version": sb.version,
                "extent-size": sb.extent_size, "device-size": sb.device_size,
                "data-offset": sb.data_offset, "slots": sb.slots, "created": sb.created,
            }),
            Err(e) => serde_json::json!({
                "path": path, "size": dev.size(), "tierd": false,
                "problem": e.to_string(), "content": content,
            }),
        };
        println!("{v}");
    } else {
        match &sb {
            Ok(sb) => println!(
                "{}: tierd {} device of volume {}\n  format version {}, extent size {} B, {} slots from offset {}\n  device size {} B (at format: {} B), formatted at unix time {}",
                path.display(), sb.role, sb.volume_id, sb.version, sb.extent_size,
                sb.slots, sb.data_offset, dev.size(), sb.device_size, sb.created
            ),
            Err(e) => println!(
                "{}: not a tierd device ({e}); it carries {}",
                path.display(),
                content.as_deref().unwrap_or("nothing recognisable")
            ),
        }
    }
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
