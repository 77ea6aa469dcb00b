//! `tierd bench`: how much the hybrid gains over a pure HDD and how close it
//! comes to a pure SSD, in one run, on modelled or real devices.
//!
//! Targets: `hybrid` (the real engine — volume, heat, migrator — over the
//! SSD and HDD), `pure-ssd` (an SSD of the volume's size alone) and
//! `pure-hdd` (the HDD alone), each over the same test region. Clocks:
//! **virtual** (the default: data-less devices with timing models, a
//! deterministic scheduler; hours of a Fusion-sized volume in minutes) and
//! **real** (image files or real devices, wall-clock time, models sleeping
//! precisely; real devices run with no model).
//!
//! Submodules: [`progress`] (a bar or plain lines), [`sched`] (virtual time), [`workload`] (access patterns),
//! [`target`] (targets and the runner), [`suites`], [`replay`] (block
//! traces played on the targets), [`report`], [`sim`] (the classic
//! placement policies and the offline optimum, simulated on a block
//! trace), [`tracegen`] (synthetic traces of standard shapes).

pub mod bed;
pub mod cache;
pub mod progress;
pub mod replay;
pub mod report;
pub mod sched;
pub mod sim;
pub mod suites;
pub mod target;
pub mod tracegen;
pub mod workload;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use progress::Progress;
use sched::VirtualSched;
use suites::{Chart, Finding, Point, SUITES};
use target::{Hybrid, Mode, Pure, Target};
use tierd::clock::{Clock, SystemClock};
use tierd::device::model::{HddModel, HddParams, ModelKind};
use tierd::device::{BlockDevice, FileDevice, NullDevice, TimedDevice};
use tierd::heat::HeatConfig;
use tierd::migrate::worker::MigratorHandle;
use tierd::migrate::{DurabilityConfig, MigrateConfig, Migrator};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Volume, VolumeOptions};

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad options.
    #[error("{0}")]
    Options(String),
    /// Building the targets failed.
    #[error("setting up {what}: {source}")]
    Setup {
        /// What.
        what: String,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn setup<E: std::error::Error + Send + Sync + 'static>(
    what: &str,
) -> impl FnOnce(E) -> BenchError + '_ {
    move |e| BenchError::Setup {
        what: what.to_string(),
        source: Box::new(e),
    }
}

/// Which clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockKind {
    /// Modelled time over data-less devices.
    Virtual,
    /// Wall-clock time.
    Real,
}

/// Benchmark options.
#[derive(Debug, Clone, Serialize)]
pub struct BenchOptions {
    /// The quick preset (minutes) instead of the full one.
    pub quick: bool,
    /// Suites to run (empty: the preset's).
    pub suites: Vec<String>,
    /// Clock.
    pub clock: ClockKind,
    /// SSD model (`None` only for real devices).
    pub ssd_model: Option<ModelKind>,
    /// HDD model.
    pub hdd_model: Option<ModelKind>,
    /// SSD size.
    pub ssd_size: u64,
    /// HDD size.
    pub hdd_size: u64,
    /// Extent size.
    pub extent_size: u64,
    /// Seed.
    pub seed: u64,
    /// Multiplies every run length.
    pub time_scale: f64,
    /// Real devices (SSD, HDD), destroyed by the run.
    pub devices: Option<(PathBuf, PathBuf)>,
    /// Directory for image files in real-clock runs on models.
    pub scratch: PathBuf,
    /// Test region for the drive suites, bytes.
    pub region: u64,
    /// Heat knobs of the hybrid (a config file's `[heat]`; snake_case keys
    /// in JSON, as in every JSON output).
    #[serde(serialize_with = "tierd::units::snake_json::serialize")]
    pub heat: HeatConfig,
    /// Migration and policy knobs of the hybrid (a config file's `[migrate]`).
    #[serde(serialize_with = "tierd::units::snake_json::serialize")]
    pub migrate: MigrateConfig,
    /// The hybrid's `[durability]` table (the SSD exposure bound); left out
    /// of the JSON while it is the default (no bound).
    #[serde(
        serialize_with = "tierd::units::snake_json::serialize",
        skip_serializing_if = "no_bound"
    )]
    pub durability: DurabilityConfig,
    /// Traces to replay (any supported format); with traces, suites run
    /// only when named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<PathBuf>,
    /// Replay traces this many times faster than recorded.
    #[serde(skip_serializing_if = "is_one")]
    pub trace_speed: f64,
    /// The share of the volume's capacity that holds data before the run
    /// (`None`: 1.0 for the drive suites, 0.7 for trace replays).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fill: Option<f64>,
    /// The hybrid's SSD room for data (its SSD less the reserve) in trace
    /// replays, as shares of each trace's footprint, one replay per room
    /// (empty: one replay on `ssd_size`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace_rooms: Vec<f64>,
}

/// The fill trace replays run at unless told otherwise.
pub const TRACE_FILL: f64 = 0.7;

impl BenchOptions {
    /// The fill of the drive suites' volume.
    pub fn suite_fill(&self) -> f64 {
        self.fill.unwrap_or(1.0)
    }

    /// The fill of trace replays.
    pub fn trace_fill(&self) -> f64 {
        self.fill.unwrap_or(TRACE_FILL)
    }
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

fn no_bound(d: &DurabilityConfig) -> bool {
    d.ssd_exposure.is_zero()
}

impl BenchOptions {
    /// Defaults for the quick or full preset.
    pub fn preset(quick: bool) -> Self {
        BenchOptions {
            quick,
            suites: Vec::new(),
            clock: ClockKind::Virtual,
            ssd_model: Some(ModelKind::SsdSata),
            hdd_model: Some(ModelKind::Hdd5400),
            ssd_size: if quick { 4 << 30 } else { 128 << 30 },
            hdd_size: if quick { 32 << 30 } else { 1 << 40 },
            extent_size: 1 << 20,
            seed: 1,
            time_scale: 1.0,
            devices: None,
            scratch: PathBuf::from("tierd-bench"),
            region: if quick { 2 << 30 } else { 32 << 30 },
            heat: HeatConfig::default(),
            migrate: MigrateConfig::default(),
            durability: DurabilityConfig::default(),
            traces: Vec::new(),
            trace_speed: 1.0,
            fill: None,
            trace_rooms: Vec::new(),
        }
    }
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// Options.
    pub options: BenchOptions,
    /// Volume capacity.
    pub capacity: u64,
    /// Test region of the drive suites.
    pub region: u64,
    /// Reserve bytes.
    pub reserve: u64,
    /// Data points.
    pub points: Vec<Point>,
    /// Charts.
    pub charts: Vec<Chart>,
    /// Scores, ratios, times.
    pub findings: Vec<Finding>,
    /// Real-clock operations that overran their model.
    pub overruns: u64,
    /// Wall-clock seconds the run took.
    pub wall_secs: f64,
}

/// A benchmark in progress.
pub struct Bench {
    opts: BenchOptions,
    mode: Mode,
    targets: Vec<Box<dyn Target>>,
    migrator: Option<Arc<Migrator>>,
    handle: Option<MigratorHandle>,
    timed: Vec<Arc<TimedDevice>>,
    points: Vec<Point>,
    charts: Vec<Chart>,
    findings: Vec<Finding>,
    region: u64,
    region_start: u64,
    capacity: u64,
    /// Bytes the drive suites' volume held before the run.
    filled: u64,
    ssd_size: u64,
    hdd_size: u64,
    extent_size: u64,
    /// The HDD's model (transfer rate by position), unless real devices.
    hdd_model: Option<HddModel>,
    progress: Option<Progress>,
    /// The traces to replay, as read.
    traces: Vec<replay::Raw>,
}

impl Bench {
    /// Build the targets (formatting and pre-filling the hybrid).
    pub fn new(opts: BenchOptions, progress: Option<Progress>) -> Result<Self, BenchError> {
        let sched = VirtualSched::new();
        // The volume's clock (heat, migration pacing) and the timed
        // devices' clock: in virtual time the scheduler's shared time and
        // each thread's own time; in real time one system clock.
        let (mode, clock, device_clock): (Mode, Arc<dyn Clock>, Arc<dyn Clock>) = match opts.clock {
            ClockKind::Virtual => (
                Mode::Virtual(sched.clone()),
                sched.clock(),
                sched.device_clock(),
            ),
            ClockKind::Real => {
                let c = Arc::new(SystemClock::default());
                (Mode::Real(c.clone()), c.clone(), c)
            }
        };
        if opts.clock == ClockKind::Virtual && opts.devices.is_some() {
            return Err(BenchError::Options(
                "real devices run on the real clock: add --clock real".into(),
            ));
        }
        // Raw devices.
        let raw = |name: &str, size: u64| -> Result<Arc<dyn BlockDevice>, BenchError> {
            match (&opts.devices, opts.clock) {
                (Some((ssd, hdd)), _) => {
                    let p = if name == "ssd" { ssd } else { hdd };
                    Ok(Arc::new(
                        FileDevice::open(p, true).map_err(setup("opening a device"))?,
                    ))
                }
                (None, ClockKind::Virtual) => Ok(Arc::new(NullDevice::new(size))),
                (None, ClockKind::Real) => {
                    std::fs::create_dir_all(&opts.scratch)
                        .map_err(setup("creating the scratch directory"))?;
                    let p = opts.scratch.join(format!("{name}.img"));
                    let _ = std::fs::remove_file(&p);
                    FileDevice::create_image(&p, size).map_err(setup("creating an image"))?;
                    Ok(Arc::new(
                        FileDevice::open(&p, false).map_err(setup("opening an image"))?,
                    ))
                }
            }
        };
        let mut timed = Vec::new();
        let mut wrap =
            |dev: Arc<dyn BlockDevice>, model: Option<ModelKind>| -> Arc<dyn BlockDevice> {
                match model {
                    Some(m) if opts.devices.is_none() => {
                        let t = Arc::new(TimedDevice::new(
                            dev.clone(),
                            m.build(dev.size()),
                            device_clock.clone(),
                        ));
                        timed.push(t.clone());
                        t
                    }
                    _ => dev,
                }
            };
        let ssd_raw = raw("ssd", opts.ssd_size)?;
        let hdd_raw = raw("hdd", opts.hdd_size)?;
        let (ssd_size, hdd_size) = (ssd_raw.size(), hdd_raw.size());
        let store = Arc::new(MemStore::new());
        let fopts = FormatOptions {
            extent_size: opts.extent_size,
            reserve: None,
            force: true,
        };
        let plain = Devices {
            ssd: ssd_raw.clone(),
            hdd: hdd_raw.clone(),
        };
        Volume::format(&plain, store.as_ref(), &fopts).map_err(setup("formatting the hybrid"))?;
        let vol_store: Arc<dyn MetaStore> = store.clone();
        let mut b = Bench {
            mode: mode.clone(),
            targets: Vec::new(),
            migrator: None,
            handle: None,
            timed: Vec::new(),
            points: Vec::new(),
            charts: Vec::new(),
            findings: Vec::new(),
            region: 0,
            region_start: 0,
            capacity: 0,
            filled: 0,
            ssd_size,
            hdd_size,
            extent_size: opts.extent_size,
            hdd_model: match (&opts.devices, opts.hdd_model) {
                (None, Some(ModelKind::Hdd7200)) => {
                    Some(HddModel::new(HddParams::HDD_7200, hdd_size))
                }
                (None, Some(_)) => Some(HddModel::new(HddParams::HDD_5400, hdd_size)),
                _ => None,
            },
            progress,
            traces: Vec::new(),
            opts: opts.clone(),
        };
        // Pre-fill every extent once, in order, without timing: the "used"
        // state of a volume data was copied onto. The first allocations take
        // the SSD (the start of the volume), the rest the HDD; the suites'
        // regions lie in the middle, so their data starts out on the HDD,
        // laid out in order.
        {
            let vol = Volume::open_with(plain.clone(), vol_store.clone(), VolumeOptions::default())
                .map_err(setup("opening the hybrid"))?;
            let fill = opts.suite_fill();
            if !(fill > 0.0 && fill <= 1.0) {
                return Err(BenchError::Options(format!(
                    "--fill {fill}: give the share of the volume that holds data, more than 0 and at most 1"
                )));
            }
            let all = vol.geometry().logical_extents();
            let n = ((fill * all as f64).round() as u64).clamp(1, all);
            b.filled = n * opts.extent_size;
            let order: Vec<u64> = (0..n).collect();
            let es = opts.extent_size;
            let data = vec![0x5au8; es as usize];
            b.progress(&format!("pre-filling {n} extents"));
            for e in order {
                vol.write(e * es, &data, false)
                    .map_err(setup("pre-filling"))?;
            }
            vol.flush().map_err(setup("pre-filling"))?;
        }
        let devices = Devices {
            ssd: wrap(ssd_raw.clone(), opts.ssd_model),
            hdd: wrap(hdd_raw.clone(), opts.hdd_model),
        };
        let vopts = VolumeOptions {
            heat: opts.heat,
            clock: clock.clone(),
            ..Default::default()
        };
        let vol = Arc::new(
            Volume::open_with(devices, vol_store, vopts).map_err(setup("opening the hybrid"))?,
        );
        b.capacity = vol.size();
        b.region = opts.region.min(b.capacity).min(ssd_size) / opts.extent_size * opts.extent_size;
        // In the middle of what every target holds; below a full fill, in
        // the middle of what the fill put on the HDD.
        b.region_start =
            (b.capacity.min(hdd_size) - b.region) / 2 / opts.extent_size * opts.extent_size;
        if b.filled < b.capacity {
            let ssd_part =
                u64::from(vol.geometry().slots(tierd::volume::Tier::Ssd)) * opts.extent_size;
            let (lo, hi) = (ssd_part.min(b.filled), b.filled.min(hdd_size));
            b.region_start = if hi >= lo + b.region {
                (lo + (hi - lo - b.region) / 2) / opts.extent_size * opts.extent_size
            } else {
                hi.saturating_sub(b.region) / opts.extent_size * opts.extent_size
            };
        }
        let mig = Arc::new(Migrator::new(vol.clone(), vol.heat(), opts.migrate));
        mig.set_exposure_bound(opts.durability.ssd_exposure);
        // The pure targets: an SSD as large as the volume, the HDD alone.
        let pure_ssd = wrap(Arc::new(NullDevice::new(b.capacity)), opts.ssd_model);
        let pure_hdd = wrap(Arc::new(NullDevice::new(hdd_size)), opts.hdd_model);
        b.targets.push(Box::new(Hybrid::new(vol.clone())));
        let (ssd_dev, hdd_dev) = if opts.devices.is_none() {
            (pure_ssd, pure_hdd)
        } else {
            (ssd_raw, hdd_raw)
        };
        b.targets.push(Box::new(Pure::new(ssd_dev, true)));
        b.targets.push(Box::new(Pure::new(hdd_dev, false)));
        b.timed = timed;
        if opts.clock == ClockKind::Real {
            b.handle = Some(mig.spawn().map_err(setup("starting the migrator"))?);
        } else if opts.migrate.enabled {
            b.migrator = Some(mig.clone());
        }
        // Let the migrator restore the reserve the pre-fill consumed (a
        // config's `migrate.enabled = false` runs the hybrid without one).
        if opts.migrate.enabled {
            b.progress("restoring the SSD reserve");
            b.settle(&mig, &vol);
        }
        // Traces are read and laid into the volume before anything runs,
        // so a bad one stops the run at once.
        if !opts.traces.is_empty() {
            if opts.clock != ClockKind::Virtual {
                return Err(BenchError::Options(
                    "--trace replays on the virtual clock; to replay through the daemon on the real clock, use tierd trace replay TRACE --nbd URL (docs/trace.md)".into(),
                ));
            }
            for path in &opts.traces {
                b.progress(&format!("reading the trace {}", path.display()));
                b.traces.push(replay::read(path)?);
            }
            for r in &opts.trace_rooms {
                if !(*r > 0.0 && r.is_finite()) {
                    return Err(BenchError::Options(format!(
                        "--trace-room {r}: give the SSD's room as a positive share of the trace's footprint"
                    )));
                }
            }
            let fill = opts.trace_fill();
            // Every trace at every size must fit: refused now, before
            // anything runs, saying what to do.
            for raw in &b.traces {
                let fp = raw.footprint(opts.extent_size);
                for (_, ssd) in b.trace_sizes(fp) {
                    bed::check(&opts, ssd, fp, fill).map_err(|e| match e {
                        BenchError::Options(m) => {
                            BenchError::Options(format!("trace {}: {m}", raw.name))
                        }
                        other => other,
                    })?;
                }
            }
        }
        Ok(b)
    }

    fn settle(&mut self, mig: &Arc<Migrator>, vol: &Arc<Volume>) {
        let reserve = vol.geometry().reserve_extents;
        if let Mode::Virtual(sched) = &self.mode {
            bed::settle(sched, mig, vol);
        } else {
            for _ in 0..600 {
                if vol.free_slots(tierd::volume::Tier::Ssd) >= reserve {
                    break;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }

    fn progress(&self, msg: &str) {
        match &self.progress {
            Some(p) => p.message(msg),
            None => tracing::info!("{msg}"),
        }
    }

    /// How many steps (suites and traces) the progress display counts to.
    pub fn set_progress_length(&self, len: u64) {
        if let Some(p) = &self.progress {
            p.set_length(len);
        }
    }

    /// The suites this run will execute (with traces, only those named).
    pub fn selected(&self) -> Vec<&'static str> {
        SUITES
            .iter()
            .filter(|(name, quick)| {
                if self.opts.suites.is_empty() {
                    if !self.opts.traces.is_empty() {
                        return false;
                    }
                    *quick || !self.opts.quick
                } else {
                    self.opts.suites.iter().any(|s| s == name)
                }
            })
            .map(|(n, _)| *n)
            .collect()
    }

    /// Run everything and report.
    pub fn run(mut self) -> BenchReport {
        let started = std::time::Instant::now();
        for name in self.selected() {
            self.progress(&format!("suite {name}"));
            self.run_suite(name);
            if let Some(p) = &self.progress {
                p.inc();
            }
        }
        for trace in std::mem::take(&mut self.traces) {
            self.replay_trace(&trace);
            if let Some(p) = &self.progress {
                p.inc();
            }
        }
        if let Some(h) = self.handle.take() {
            h.stop();
        }
        if let Some(p) = &self.progress {
            p.finish();
        }
        let reserve = self
            .targets
            .first()
            .and_then(|t| t.volume())
            .map(|v| u64::from(v.geometry().reserve_extents) * self.extent_size)
            .unwrap_or(0);
        BenchReport {
            options: self.opts.clone(),
            capacity: self.capacity,
            region: self.region,
            reserve,
            points: self.points,
            charts: self.charts,
            findings: self.findings,
            overruns: self.timed.iter().map(|t| t.overruns()).sum(),
            wall_secs: started.elapsed().as_secs_f64(),
        }
    }
}

/// Check that the named suites exist.
pub fn check_suites(names: &[String]) -> Result<(), BenchError> {
    for n in names {
        if !SUITES.iter().any(|(s, _)| s == n) {
            let all: Vec<&str> = SUITES.iter().map(|s| s.0).collect();
            return Err(BenchError::Options(format!(
                "unknown suite {n:?}; suites: {}",
                all.join(", ")
            )));
        }
    }
    Ok(())
}

/// Refuse real devices that are mounted or carry a filesystem or a
/// partition table (checked before anything is written).
pub fn check_real_devices(paths: &[&std::path::Path]) -> Result<(), BenchError> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    for p in paths {
        let canon = std::fs::canonicalize(p).map_err(setup("resolving a device path"))?;
        let c = canon.display().to_string();
        if mounts
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .any(|dev| dev == c || dev.starts_with(&c))
        {
            return Err(BenchError::Options(format!(
                "{c} (or a partition of it) is mounted; refusing to destroy it"
            )));
        }
        let dev = FileDevice::open(p, false).map_err(setup("opening a device"))?;
        let mut probe = vec![0u8; tierd::volume::PROBE_SIZE.min(dev.size() as usize)];
        dev.read_at(&mut probe, 0)
            .map_err(setup("reading a device"))?;
        if let Some(found) = tierd::volume::detect_content(&probe) {
            return Err(BenchError::Options(format!(
                "{c} carries {found}; wipe it first (for example wipefs -a) if you really mean to benchmark it"
            )));
        }
    }
    Ok(())
}
