//! `tierd trace`: flag parsing and output for the library's `trace` module
//! (`info`, `import`, `export`), the bench's trace generator
//! (`generate`) and the replayer through a running daemon (`replay`, in
//! `crate::replay`); the reading, converting, counting and generating are
//! the libraries'.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tierd::trace::export::{check_device_name, to_fio_iolog_v3};
use tierd::trace::import::{self, Format, Import, ImportStats};
use tierd::trace::stats::{Summary, TraceStats};
use tierd::trace::{Op, Record, TraceError, TraceWriter};
use tierd::units::ByteSize;
use tierd_bench::tracegen::{self, GenOptions, Shape};

/// Subcommands of `tierd trace`.
#[derive(Subcommand)]
pub enum TraceCommand {
    /// Summarise a trace: requests and bytes by op, 4 KiB blocks and 1 MiB
    /// extents touched, span, read/write ratio, connections, block reuse.
    Info {
        /// The trace (any supported format).
        file: PathBuf,
        #[command(flatten)]
        format: FormatArg,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Convert a trace of any supported format to tierd's binary format.
    Import {
        /// The trace to read.
        input: PathBuf,
        /// The tierd trace to write (replaced if it exists).
        output: PathBuf,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Write a trace in another tool's format: `--to fio-iolog` for
    /// `fio --ioengine=nbd --uri=nbd://HOST:PORT --read_iolog=OUTPUT`.
    Export {
        /// The trace to read (any supported format).
        input: PathBuf,
        /// The file to write (replaced if it exists).
        output: PathBuf,
        /// The output format.
        #[arg(long, value_enum)]
        to: ExportTo,
        /// The file name the fio log replays on (fio's nbd engine serves
        /// every name from its --uri).
        #[arg(long, default_value = "nbd", value_name = "NAME")]
        device: String,
        #[command(flatten)]
        format: FormatArg,
    },
    /// Write a synthetic trace of a standard shape in tierd's format,
    /// the same for the same options (docs/trace.md, "Generated shapes").
    Generate {
        /// zipf: Zipf 0.99 over scattered 4 KiB blocks, 90 % reads;
        /// shift: zipf whose hot set moves away at the middle and back at
        /// three quarters; scan-hot: a Zipf hot set on the first eighth and
        /// a sequential 256 KiB scan of the region (a quarter of the
        /// requests); database: 8 KiB random reads and writes (67/33) and a
        /// 4 KiB FUA log on the last eighth (a tenth of the requests).
        #[arg(value_parser = shape_parser())]
        shape: Shape,
        /// The tierd trace to write (refused if it exists, unless --force).
        output: PathBuf,
        /// Bytes the requests span, from offset 0: a multiple of 4 KiB, at
        /// least 1 MiB (the trace's volume size) [default: 4GiB].
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        region: Option<u64>,
        /// Requests to generate [default: 200000].
        #[arg(long, value_name = "N")]
        requests: Option<u64>,
        /// Requests per second, Poisson arrivals [default: 2000].
        #[arg(long, value_name = "R")]
        rate: Option<f64>,
        /// Seed of every random choice [default: 1].
        #[arg(long, value_name = "S")]
        seed: Option<u64>,
        /// Replace OUTPUT if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Replay a trace through a running daemon over NBD, open loop, and
    /// report latency, read-hit share, HDD busy time and bytes moved.
    ///
    /// Lays the volume out as the bench does (the trace's touched extents
    /// packed from the first extent a fill in address order puts on the
    /// HDD, filler around them up to --fill), waits for the daemon to
    /// settle, then sends each request at its recorded time divided by
    /// --speed (docs/trace.md, "Replaying through the daemon"). Writes
    /// over the whole volume: refused on a volume that holds data unless
    /// --force.
    Replay(crate::replay::Options),
}

/// Accepts a shape's name (and lists the names in help and completions).
fn shape_parser() -> impl TypedValueParser<Value = Shape> {
    PossibleValuesParser::new(Shape::ALL.map(Shape::name)).try_map(|s| s.parse::<Shape>())
}

fn parse_size(s: &str) -> Result<u64, String> {
    ByteSize::parse(s).map(|b| b.0).map_err(|e| e.to_string())
}

/// `--format` of the input.
#[derive(clap::Args)]
pub struct FormatArg {
    /// The input's format: tierd, msr-csv, fio-iolog, blkparse or
    /// cloudphysics-csv (default: detected from its first bytes).
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub format: Option<Format>,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse().map_err(|e: TraceError| e.to_string())
}

/// Formats `tierd trace export` writes.
#[derive(Clone, Copy, ValueEnum)]
pub enum ExportTo {
    /// fio's iolog version 3 (microsecond timestamps).
    FioIolog,
}

/// Run a `tierd trace` subcommand.
pub fn run(cmd: TraceCommand) -> anyhow::Result<()> {
    match cmd {
        TraceCommand::Info { file, format, json } => info(&file, format.format, json),
        TraceCommand::Import {
            input,
            output,
            format,
        } => import_to_tierd(&input, &output, format.format),
        TraceCommand::Export {
            input,
            output,
            to: ExportTo::FioIolog,
            device,
            format,
        } => export_fio(&input, &output, format.format, &device),
        TraceCommand::Generate {
            shape,
            output,
            region,
            requests,
            rate,
            seed,
            force,
        } => {
            let d = GenOptions::defaults(shape);
            let opts = GenOptions {
                shape,
                region: region.unwrap_or(d.region),
                requests: requests.unwrap_or(d.requests),
                rate: rate.unwrap_or(d.rate),
                seed: seed.unwrap_or(d.seed),
            };
            generate(&opts, &output, force)
        }
        TraceCommand::Replay(o) => crate::replay::run(&o),
    }
}

/// Open a trace; errors name the file.
fn open(path: &Path, format: Option<Format>) -> anyhow::Result<Import> {
    import::open_with_stats(path, format)
        .with_context(|| format!("opening the trace {}", path.display()))
}

/// A spinner on stderr (drawn only on a terminal) counting records.
fn progress(what: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}: {human_pos} records ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(what.to_string());
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// Every record of `input`, each passed to `each`, with progress; errors
/// name the file.
fn for_each(
    input: &mut Import,
    path: &Path,
    what: &str,
    mut each: impl FnMut(&Record) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let bar = progress(what);
    let mut n = 0u64;
    let result = (|| {
        for r in input.records.by_ref() {
            let r = r.with_context(|| format!("reading the trace {}", path.display()))?;
            each(&r)?;
            n += 1;
            if n.is_multiple_of(4096) {
                bar.set_position(n);
            }
        }
        Ok(n)
    })();
    bar.finish_and_clear();
    result
}

fn info(path: &Path, format: Option<Format>, json: bool) -> anyhow::Result<()> {
    let mut input = open(path, format)?;
    let mut stats = TraceStats::new();
    for_each(&mut input, path, "reading", |r| {
        stats.add(r);
        Ok(())
    })?;
    let s = stats.summary();
    if json {
        let out = serde_json::json!({
            "file": path,
            "format": input.format.name(),
            "source": input.header.source,
            "start_unix_ns": input.header.start_unix_ns,
            "volume_size": input.header.volume_size,
            "summary": s,
            "skipped": skipped_json(&input.stats),
            "clamped": input.stats.clamped(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", info_text(path, &input, &s));
    }
    Ok(())
}

fn skipped_json(stats: &ImportStats) -> serde_json::Value {
    stats
        .skipped()
        .into_iter()
        .map(|(k, v)| (k, serde_json::Value::from(v)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

fn info_text(path: &Path, input: &Import, s: &Summary) -> String {
    let mut t = String::new();
    let mut line = |k: &str, v: String| t.push_str(&format!("{k:<12} {v}\n"));
    line("file", path.display().to_string());
    line("format", input.format.name().to_string());
    line("source", input.header.source.clone());
    if input.header.volume_size > 0 {
        line(
            "volume",
            tierd::units::human_bytes(input.header.volume_size),
        );
    }
    line(
        "records",
        format!("{} over {:.3} s", s.records, s.duration_ns as f64 / 1e9),
    );
    for op in Op::ALL {
        let name = op.name();
        let c = s.ops.get(name).copied().unwrap_or_default();
        if c.count > 0 || matches!(op, Op::Read | Op::Write) {
            let bytes = if op == Op::Flush {
                String::new()
            } else {
                format!(", {}", tierd::units::human_bytes(c.bytes))
            };
            line(name, format!("{}{bytes}", c.count));
        }
    }
    if s.fua > 0 {
        line("fua", s.fua.to_string());
    }
    line(
        "touched",
        format!(
            "{} 4 KiB blocks ({}), {} 1 MiB extents",
            s.blocks_4k,
            tierd::units::human_bytes(s.blocks_4k * 4096),
            s.extents_1m
        ),
    );
    if let (Some(lo), Some(hi)) = (s.lowest_offset, s.highest_end) {
        line(
            "span",
            format!(
                "{lo} .. {hi} ({} .. {})",
                tierd::units::human_bytes(lo),
                tierd::units::human_bytes(hi)
            ),
        );
    }
    let ratio = |r: Option<f64>| r.map_or("no writes".to_string(), |r| format!("{r:.3}"));
    line(
        "read/write",
        format!(
            "{} by requests, {} by bytes",
            ratio(s.read_write_ratio),
            ratio(s.read_write_bytes_ratio)
        ),
    );
    line("connections", s.connections.to_string());
    line(
        "reuse",
        format!(
            "{:.4} ({} of {} 4 KiB block accesses hit a block seen before)",
            s.reuse, s.block_hits, s.block_accesses
        ),
    );
    for (reason, n) in input.stats.skipped() {
        line("skipped", format!("{n} ({reason})"));
    }
    if input.stats.clamped() > 0 {
        line(
            "clamped",
            format!(
                "{} records went back in time and took the time before them",
                input.stats.clamped()
            ),
        );
    }
    t
}

/// Refuse to write over the input.
fn check_distinct(input: &Path, output: &Path) -> anyhow::Result<()> {
    if let (Ok(a), Ok(b)) = (input.canonicalize(), output.canonicalize()) {
        if a == b {
            bail!(
                "{} is both the input and the output; write somewhere else",
                input.display()
            );
        }
    }
    Ok(())
}

/// Create `output`, run `write` on it, and remove it again if that fails.
fn write_file(
    output: &Path,
    write: impl FnOnce(BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let f = File::create(output).with_context(|| format!("creating {}", output.display()))?;
    write_then_clean_up(output, f, write)
}

/// Create `output`, which must not exist unless `force`, run `write` on
/// it, and remove it again if that fails (a file that was there and is
/// refused is left alone).
fn write_new_file(
    output: &Path,
    force: bool,
    write: impl FnOnce(BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut open = OpenOptions::new();
    open.write(true);
    if force {
        open.create(true).truncate(true);
    } else {
        open.create_new(true);
    }
    let f = match open.open(output) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => bail!(
            "{} exists: choose another file, or --force to replace it",
            output.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("creating {}", output.display())),
    };
    write_then_clean_up(output, f, write)
}

fn write_then_clean_up(
    output: &Path,
    f: File,
    write: impl FnOnce(BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let result = write(BufWriter::new(f));
    if result.is_err() {
        let _ = std::fs::remove_file(output);
    }
    result
}

fn import_to_tierd(input: &Path, output: &Path, format: Option<Format>) -> anyhow::Result<()> {
    check_distinct(input, output)?;
    let mut src = open(input, format)?;
    let header = src.header.clone();
    let mut written = 0;
    write_file(output, |out| {
        let mut w = TraceWriter::new(out, &header)
            .with_context(|| format!("writing the trace header to {}", output.display()))?;
        for_each(&mut src, input, "importing", |r| {
            w.write(r)
                .with_context(|| format!("writing the trace {}", output.display()))
        })?;
        written = w.records();
        w.finish()
            .and_then(|mut f| f.flush())
            .with_context(|| format!("writing the trace {}", output.display()))?;
        Ok(())
    })?;
    eprintln!(
        "{written} records from {} ({}) to {}{}",
        input.display(),
        src.format.name(),
        output.display(),
        skipped_note(&src.stats)
    );
    Ok(())
}

fn skipped_note(stats: &ImportStats) -> String {
    let mut note = String::new();
    for (reason, n) in stats.skipped() {
        note.push_str(&format!("; skipped {n} ({reason})"));
    }
    if stats.clamped() > 0 {
        note.push_str(&format!(
            "; {} records went back in time and took the time before them",
            stats.clamped()
        ));
    }
    note
}

fn export_fio(
    input: &Path,
    output: &Path,
    format: Option<Format>,
    device: &str,
) -> anyhow::Result<()> {
    check_device_name(device).context("--device")?;
    check_distinct(input, output)?;
    let mut src = open(input, format)?;
    let bar = progress("exporting");
    let mut done = None;
    let result = write_file(output, |mut out| {
        // Tells a failed read of the input from a failed write of the output.
        let mut input_failed = false;
        let records = src.records.by_ref().enumerate().map(|(i, r)| {
            if i.is_multiple_of(4096) {
                bar.set_position(i as u64);
            }
            input_failed |= r.is_err();
            r
        });
        let d = to_fio_iolog_v3(records, device, &mut out);
        let d = d.with_context(|| {
            if input_failed {
                format!("reading the trace {}", input.display())
            } else {
                format!("writing {}", output.display())
            }
        })?;
        out.flush()
            .with_context(|| format!("writing {}", output.display()))?;
        done = Some(d);
        Ok(())
    });
    bar.finish_and_clear();
    result?;
    let d = done.unwrap_or_default();
    eprintln!(
        "{} requests from {} ({}) to the fio iolog {}{}{}",
        d.written,
        input.display(),
        src.format.name(),
        output.display(),
        if d.skipped > 0 {
            format!("; skipped {} of zero length", d.skipped)
        } else {
            String::new()
        },
        skipped_note(&src.stats)
    );
    Ok(())
}

fn generate(opts: &GenOptions, output: &Path, force: bool) -> anyhow::Result<()> {
    opts.check()
        .with_context(|| format!("generating the trace {}", output.display()))?;
    let header = tracegen::header(opts);
    let bar = progress("generating");
    let mut written = 0;
    let result = write_new_file(output, force, |out| {
        let mut w = TraceWriter::new(out, &header)
            .with_context(|| format!("writing the trace header to {}", output.display()))?;
        for r in tracegen::generate(opts) {
            w.write(&r)
                .with_context(|| format!("writing the trace {}", output.display()))?;
            if w.records().is_multiple_of(4096) {
                bar.set_position(w.records());
            }
        }
        written = w.records();
        w.finish()
            .and_then(|mut f| f.flush())
            .with_context(|| format!("writing the trace {}", output.display()))?;
        Ok(())
    });
    bar.finish_and_clear();
    result?;
    eprintln!(
        "{written} records of the {} shape over {} (seed {}) to {}",
        opts.shape,
        ByteSize(opts.region),
        opts.seed,
        output.display()
    );
    Ok(())
}
