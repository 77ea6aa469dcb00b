//! `tierd bench`: flag parsing and output for the `tierd-bench` crate.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tierd::device::model::ModelKind;
use tierd::units::ByteSize;
use tierd_bench::{self as bench, BenchOptions, ClockKind, Progress};

/// Flags of `tierd bench`.
#[derive(Args, Clone)]
pub struct BenchArgs {
    /// The full preset (a Fusion-sized 128 GiB + 1 TiB volume, every suite).
    #[arg(long, conflicts_with = "quick")]
    full: bool,
    /// The quick preset (the default): 4 GiB + 32 GiB, about half a minute
    /// in a release build.
    #[arg(long)]
    quick: bool,
    /// Run only these suites (repeatable): sequential, random, qd-sweep,
    /// bs-sweep, response, iometer, zipf, shift, landing, return.
    #[arg(long = "suite", value_name = "NAME")]
    suites: Vec<String>,
    /// virtual (modelled time, deterministic) or real (wall clock).
    #[arg(long, default_value = "virtual", value_name = "CLOCK")]
    clock: String,
    /// SSD model: ssd-sata or ssd-nvme.
    #[arg(long, default_value = "ssd-sata", value_name = "MODEL")]
    ssd_model: String,
    /// HDD model: hdd-5400, hdd-7200, or remote-1ms (a capacity tier 1 ms away).
    #[arg(long, default_value = "hdd-5400", value_name = "MODEL")]
    hdd_model: String,
    /// SSD size (modelled devices).
    #[arg(long, value_name = "SIZE")]
    ssd_size: Option<String>,
    /// HDD size (modelled devices).
    #[arg(long, value_name = "SIZE")]
    hdd_size: Option<String>,
    /// Test region of the drive suites.
    #[arg(long, value_name = "SIZE")]
    region: Option<String>,
    /// Extent size.
    #[arg(long, default_value = "1MiB", value_name = "SIZE")]
    extent_size: String,
    /// Seed (virtual runs are identical for the same seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Multiply every run's length.
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// A real SSD to benchmark (destroys its contents).
    #[arg(long, value_name = "PATH", requires = "hdd")]
    ssd: Option<PathBuf>,
    /// A real HDD to benchmark (destroys its contents).
    #[arg(long, value_name = "PATH", requires = "ssd")]
    hdd: Option<PathBuf>,
    /// Confirm that the real devices' contents may be destroyed.
    #[arg(long)]
    yes_destroy_data: bool,
    /// Directory for bench.json, the SVG charts and report.md.
    #[arg(long, default_value = "tierd-bench-report", value_name = "DIR")]
    out: PathBuf,
    /// Print the JSON record on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Configuration file whose `[heat]`, `[migrate]` and `[durability]`
    /// tables (and their TIERD_* variables) the hybrid uses; default: the
    /// built-in policy.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Replay a block trace (repeatable; tierd's format or any format
    /// `tierd trace import` reads) on the three targets, and compare the
    /// hybrid's SSD hit share with LRU, LFU, ARC, an smq-like policy and
    /// the offline optimum; with traces, suites run only when named.
    #[arg(long = "trace", value_name = "FILE")]
    traces: Vec<PathBuf>,
    /// Replay traces this many times faster than recorded.
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    trace_speed: f64,
    /// The share of the volume's capacity that holds data before the run,
    /// laid out as a used disk (default: 1.0 for the drive suites, 0.7 for
    /// trace replays).
    #[arg(long, value_name = "F")]
    fill: Option<f64>,
    /// Replay each trace with the hybrid's SSD room for data (its SSD less
    /// the reserve) at this share of the trace's footprint; repeat it or
    /// give a list (`--trace-room 0.125,0.25,0.5`). Without it, one replay
    /// on --ssd-size.
    #[arg(long = "trace-room", value_name = "SHARE", value_delimiter = ',')]
    trace_rooms: Vec<f64>,
    /// Run nothing: print the Markdown tables of a recorded run's
    /// bench.json (the summary and the findings, as docs/bench.md carries
    /// them).
    #[arg(long, value_name = "FILE")]
    doc_tables: Option<PathBuf>,
}

fn model(name: &str, want_ssd: bool) -> anyhow::Result<ModelKind> {
    let m = ModelKind::parse(name).with_context(|| {
        format!(
            "unknown device model {name:?}: use {} for the SSD, {} for the HDD",
            ModelKind::names(true),
            ModelKind::names(false)
        )
    })?;
    if m.is_ssd() != want_ssd {
        bail!(
            "{name} is not a{} model",
            if want_ssd { "n SSD" } else { "n HDD" }
        );
    }
    Ok(m)
}

fn size(s: &Option<String>, key: &str) -> anyhow::Result<Option<u64>> {
    s.as_deref()
        .map(|v| {
            ByteSize::parse(v)
                .map(|b| b.0)
                .with_context(|| format!("--{key}"))
        })
        .transpose()
}

/// Run the benchmark.
pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    if let Some(file) = &a.doc_tables {
        let json =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let recorded = bench::report::doc::Recorded::parse(&json)
            .with_context(|| format!("{} is not a bench.json record", file.display()))?;
        print!("{}", bench::report::doc::tables(&recorded));
        return Ok(());
    }
    let mut o = BenchOptions::preset(!a.full);
    o.suites = a.suites.clone();
    bench::check_suites(&o.suites)?;
    o.clock = match a.clock.as_str() {
        "virtual" => ClockKind::Virtual,
        "real" => ClockKind::Real,
        other => bail!("--clock {other:?}: use virtual or real"),
    };
    o.ssd_model = Some(model(&a.ssd_model, true)?);
    o.hdd_model = Some(model(&a.hdd_model, false)?);
    if let Some(v) = size(&a.ssd_size, "ssd-size")? {
        o.ssd_size = v;
    }
    if let Some(v) = size(&a.hdd_size, "hdd-size")? {
        o.hdd_size = v;
    }
    if let Some(v) = size(&a.region, "region")? {
        o.region = v;
    }
    o.extent_size = ByteSize::parse(&a.extent_size).context("--extent-size")?.0;
    o.seed = a.seed;
    let file = a
        .config
        .clone()
        .or_else(|| std::env::var_os("TIERD_CONFIG").map(PathBuf::from));
    let cfg = tierd::config::Config::load(file.as_deref(), std::env::vars(), &[])
        .context("loading the configuration")?;
    o.heat = cfg.heat;
    o.migrate = cfg.migrate;
    o.durability = cfg.durability;
    if !(a.time_scale > 0.0 && a.time_scale.is_finite()) {
        bail!("--time-scale must be a positive number");
    }
    o.time_scale = a.time_scale;
    if !(a.trace_speed > 0.0 && a.trace_speed.is_finite()) {
        bail!("--trace-speed must be a positive number");
    }
    o.traces = a.traces.clone();
    o.trace_speed = a.trace_speed;
    if let Some(f) = a.fill {
        if !(f > 0.0 && f <= 1.0) {
            bail!("--fill {f}: give the share of the volume that holds data, more than 0 and at most 1");
        }
        o.fill = Some(f);
    }
    if !a.trace_rooms.is_empty() && a.traces.is_empty() {
        bail!("--trace-room sizes trace replays: add --trace FILE");
    }
    o.trace_rooms = a.trace_rooms.clone();
    if let (Some(ssd), Some(hdd)) = (&a.ssd, &a.hdd) {
        if !a.yes_destroy_data {
            bail!("benchmarking real devices destroys their contents: add --yes-destroy-data");
        }
        bench::check_real_devices(&[ssd, hdd])?;
        o.devices = Some((ssd.clone(), hdd.clone()));
        o.clock = ClockKind::Real;
        o.ssd_model = None;
        o.hdd_model = None;
    }
    // A bar on a terminal; plain lines on a log or a pipe (a bar there
    // shows nothing); none with --json.
    let progress = if a.json {
        None
    } else if std::io::stderr().is_terminal() {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] suite {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        b.enable_steady_tick(std::time::Duration::from_millis(200));
        Some(Progress::Bar(b))
    } else {
        Some(Progress::lines())
    };
    let length = a.traces.len() as u64;
    let b = bench::Bench::new(o, progress)?;
    b.set_progress_length(b.selected().len() as u64 + length);
    let report = b.run();
    bench::report::write_all(&report, &a.out)
        .with_context(|| format!("writing the report to {}", a.out.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", bench::report::summary(&report));
        println!(
            "\nreport: {}/report.md, data: {}/bench.json",
            a.out.display(),
            a.out.display()
        );
    }
    let errors: u64 = report.points.iter().map(|p| p.errors).sum();
    if errors > 0 {
        bail!("{errors} requests failed during the benchmark");
    }
    Ok(())
}
