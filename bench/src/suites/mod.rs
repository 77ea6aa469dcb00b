//! The benchmark suites, after the reviews in shared/docs/seed-digest.md:
//! sequential and random basics, queue-depth and block-size sweeps, 512 B
//! response time, the Iometer server patterns with the articles' scores, and
//! the tiering suites (Zipf hot sets against the SSD size, hot-set shift,
//! landing-zone burst). Every case runs on every target in one run.
//!
//! This module holds the records (points, charts, findings), the suite list,
//! the case runner and the drive suites; the tiering suites are in
//! `tiering`; trace replays and their comparison with the classic
//! policies are in `traces`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::target::{execute, Measurement, Run, Target};
use super::workload::{Skew, Spec};
use super::Bench;
mod tiering;
mod traces;

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

/// An Iometer pattern: name, size mix, read share, random share.
type Pattern = (&'static str, Vec<(u64, u32)>, f64, f64);

/// One data point.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Suite name.
    pub suite: String,
    /// Case within the suite.
    pub case: String,
    /// Target name.
    pub target: String,
    /// Outstanding requests.
    pub qd: usize,
    /// Request size (0: a mix).
    pub block: u64,
    /// Read share in percent.
    pub read_pct: u32,
    /// Requests per second.
    pub iops: f64,
    /// MiB per second.
    pub mibps: f64,
    /// Mean latency, µs.
    pub mean_us: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Requests done.
    pub ops: u64,
    /// Errors (always 0 in a good run).
    pub errors: u64,
    /// A trace replay's further measures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<traces::TraceDetail>,
}

/// A chart: x values and one series per target. The series of one chart
/// share its y axis, so they measure one quantity; a further quantity over
/// the same x values goes into a [`Panel`] of `below` (drawn under the
/// first panel, on the same x axis).
#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    /// File-safe name.
    pub name: String,
    /// Title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// (series name, points).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Names of x values, written on the x axis in place of a number
    /// (fill-trim's point after the TRIM).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub x_names: Vec<(f64, String)>,
    /// Panels stacked below the first (the fields above), sharing its x
    /// axis: one per further quantity.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub below: Vec<Panel>,
}

/// A panel of a [`Chart`] below its first: one quantity, its own y axis.
#[derive(Debug, Clone, Serialize)]
pub struct Panel {
    /// Y axis label, with the unit.
    pub y_label: String,
    /// The y axis runs at least up to this (100 for a percentage); `None`:
    /// up to the data's maximum.
    pub y_max: Option<f64>,
    /// (series name, points).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// A scalar result with a verdict (scores, convergence times, ratios).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// Suite.
    pub suite: String,
    /// What was measured.
    pub name: String,
    /// Value.
    pub value: f64,
    /// Unit.
    pub unit: String,
    /// Explanation.
    pub note: String,
    /// The goal the value is held to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Goal>,
    /// Whether the value meets `target` (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub met: Option<bool>,
}

/// A goal a [`Finding`] is held to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The value is at most this.
    AtMost(f64),
    /// The value is at least this.
    AtLeast(f64),
}

impl Goal {
    /// Whether `value` meets the goal (NaN never does).
    pub fn met(self, value: f64) -> bool {
        match self {
            Goal::AtMost(t) => value <= t,
            Goal::AtLeast(t) => value >= t,
        }
    }
}

impl std::fmt::Display for Goal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Goal::AtMost(t) => write!(f, "target <= {t}"),
            Goal::AtLeast(t) => write!(f, "target >= {t}"),
        }
    }
}

/// The suites that run over the test region, whose data starts on the HDD
/// (the used state the bench sets up first): there the hybrid reads at the
/// HDD's speed until the migrator promotes what is hot, which a table row
/// should say.
pub const ON_THE_HDD_REGION: [&str; 9] = [
    "sequential",
    "random",
    "qd-sweep",
    "bs-sweep",
    "response",
    "mixed",
    "multi-stream",
    "iometer",
    "fill-trim",
];

/// The suites by name, in run order, with whether `--quick` runs them.
pub const SUITES: [(&str, bool); 14] = [
    ("sequential", true),
    ("random", true),
    ("qd-sweep", false),
    ("bs-sweep", false),
    ("response", false),
    ("mixed", false),
    ("multi-stream", false),
    ("iometer", true),
    ("zipf", true),
    ("shift", true),
    ("scan", true),
    ("landing", true),
    // Trims a quarter of the volume (for room to keep shadows in).
    ("return", true),
    // Last: it trims the test region.
    ("fill-trim", false),
];

fn point(
    b: &Bench,
    suite: &str,
    case: &str,
    t: &dyn Target,
    qd: usize,
    spec: &Spec,
    m: &Measurement,
) -> Point {
    let block = if spec.sizes.len() == 1 {
        spec.sizes[0].0
    } else {
        0
    };
    let p = Point {
        suite: suite.into(),
        case: case.into(),
        target: t.name().into(),
        qd,
        block,
        read_pct: (spec.read * 100.0).round() as u32,
        iops: m.iops(),
        mibps: m.mibps(),
        mean_us: m.mean_us(),
        p50_us: m.lat_us(0.5),
        p99_us: m.lat_us(0.99),
        ops: m.ops,
        errors: m.errors,
        trace: None,
    };
    b.progress(&format!("{suite}/{case} {}: {:.0} IOPS", t.name(), p.iops));
    p
}

impl Bench {
    /// Run `spec` at `qd` on every target; returns the points.
    fn case(
        &mut self,
        suite: &str,
        case: &str,
        spec: &Spec,
        qd: usize,
        dur: Duration,
    ) -> Vec<Point> {
        self.case_with(suite, case, spec, qd, dur, None)
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    /// [`Bench::case`] with background workers running another spec; also
    /// returns each target's measurement.
    fn case_with(
        &mut self,
        suite: &str,
        case: &str,
        spec: &Spec,
        qd: usize,
        dur: Duration,
        background: Option<(Spec, usize)>,
    ) -> Vec<(Point, Measurement)> {
        let mut out = Vec::new();
        for i in 0..self.targets.len() {
            let run = Run {
                spec: spec.clone(),
                qd,
                duration: dur,
                seed: self.opts.seed,
                bin: Duration::from_secs(1),
                shift: None,
                migrator: if i == 0 {
                    self.migrator.as_deref()
                } else {
                    None
                },
                background: background.clone(),
            };
            let m = execute(&self.mode, self.targets[i].as_ref(), &run);
            let p = point(self, suite, case, self.targets[i].as_ref(), qd, spec, &m);
            out.push((p, m));
        }
        self.points.extend(out.iter().map(|(p, _)| p.clone()));
        out
    }

    fn dur(&self, secs: f64) -> Duration {
        Duration::from_secs_f64(secs * self.opts.time_scale)
    }

    /// Run one suite by name.
    pub fn run_suite(&mut self, name: &str) {
        let region = self.region;
        let quick = self.opts.quick;
        match name {
            "sequential" => {
                for (read, rw) in [(1.0, "read"), (0.0, "write")] {
                    for qd in [1, 4] {
                        let spec = Spec::simple(read, 0.0, 256 * KIB, self.region_start, region);
                        self.case(
                            name,
                            &format!("seq-{rw}-256k-qd{qd}"),
                            &spec,
                            qd,
                            self.dur(4.0),
                        );
                    }
                }
            }
            "random" => {
                for (read, rw) in [(1.0, "read"), (0.0, "write")] {
                    for qd in [1, 4, 32] {
                        if rw == "write" && qd == 32 && quick {
                            continue;
                        }
                        let spec = Spec::simple(read, 1.0, 4 * KIB, self.region_start, region);
                        self.case(
                            name,
                            &format!("rand-{rw}-4k-qd{qd}"),
                            &spec,
                            qd,
                            self.dur(3.0),
                        );
                    }
                }
            }
            "qd-sweep" => {
                let mut chart = self.chart(
                    "qd-sweep",
                    "4 KiB random read vs queue depth",
                    "queue depth",
                    "IOPS",
                    true,
                );
                for qd in [1, 2, 4, 8, 16, 32] {
                    let spec = Spec::simple(1.0, 1.0, 4 * KIB, self.region_start, region);
                    let pts = self.case(
                        name,
                        &format!("rand-read-4k-qd{qd}"),
                        &spec,
                        qd,
                        self.dur(2.0),
                    );
                    add(&mut chart, &pts, qd as f64);
                }
                self.charts.push(chart);
            }
            "bs-sweep" => {
                let mut chart = self.chart(
                    "bs-sweep",
                    "Random read vs block size, QD 4",
                    "block size (KiB)",
                    "MiB/s",
                    true,
                );
                for bs in [
                    512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144,
                ] {
                    let spec = Spec::simple(1.0, 1.0, bs, self.region_start, region);
                    let pts = self.case(
                        name,
                        &format!("rand-read-{bs}-qd4"),
                        &spec,
                        4,
                        self.dur(2.0),
                    );
                    for p in &pts {
                        push(&mut chart, &p.target, bs as f64 / 1024.0, p.mibps);
                    }
                }
                self.charts.push(chart);
            }
            "response" => {
                let spec = Spec::simple(1.0, 1.0, 512, self.region_start, region);
                self.case(name, "read-512-qd1", &spec, 1, self.dur(5.0));
            }
            "mixed" => {
                // Two independent workers of 128 KiB sequential I/O, one
                // reading and one writing, in the read share given.
                let mut chart = self.chart(
                    "mixed",
                    "Two sequential 128 KiB workers vs read share",
                    "read share (%)",
                    "MiB/s",
                    false,
                );
                let half = region / 2 / self.extent_size * self.extent_size;
                let rs = self.region_start;
                for share in (0..=100).step_by(10) {
                    let r = f64::from(share) / 100.0;
                    let a = Spec::simple(r, 0.0, 128 * KIB, rs, half);
                    let b = Spec::simple(r, 0.0, 128 * KIB, rs + half, half);
                    let res = self.case_with(
                        name,
                        &format!("read{share}pct"),
                        &a,
                        1,
                        self.dur(2.0),
                        Some((b, 1)),
                    );
                    for (p, m) in &res {
                        let total = (m.bytes + m.bg_bytes) as f64
                            / MIB as f64
                            / m.elapsed.as_secs_f64().max(1e-9);
                        push(&mut chart, &p.target, f64::from(share), total);
                    }
                }
                self.charts.push(chart);
            }
            "multi-stream" => {
                // 1..4 workers, each sequential 64 KiB at QD 1 in its own
                // region (the generator spreads the workers' cursors).
                let mut chart = self.chart(
                    "multi-stream",
                    "1..4 sequential 64 KiB streams, separate regions",
                    "streams",
                    "MiB/s",
                    false,
                );
                for n in 1..=4usize {
                    let spec = Spec::simple(1.0, 0.0, 64 * KIB, self.region_start, region);
                    let pts = self.case(name, &format!("streams{n}"), &spec, n, self.dur(3.0));
                    for p in &pts {
                        push(&mut chart, &p.target, n as f64, p.mibps);
                    }
                }
                self.charts.push(chart);
            }
            "fill-trim" => self.fill_trim(),
            "scan" => self.scan(),
            "iometer" => self.iometer(),
            "zipf" => self.zipf(),
            "shift" => self.shift(),
            "landing" => self.landing(),
            "return" => self.return_(),
            _ => {}
        }
    }

    fn chart(&self, name: &str, title: &str, x: &str, y: &str, log_x: bool) -> Chart {
        Chart {
            name: name.into(),
            title: title.into(),
            x_label: x.into(),
            y_label: y.into(),
            log_x,
            series: self
                .targets
                .iter()
                .map(|t| (t.name().to_string(), Vec::new()))
                .collect(),
            x_names: Vec::new(),
            below: Vec::new(),
        }
    }

    fn finding(&mut self, suite: &str, name: &str, value: f64, unit: &str, note: String) {
        self.progress(&format!("{suite}: {name} = {value:.2} {unit}"));
        self.findings.push(Finding {
            suite: suite.into(),
            name: name.into(),
            value,
            unit: unit.into(),
            note,
            target: None,
            met: None,
        });
    }

    /// A finding held to `goal`: the record and the summary say whether
    /// it was met.
    fn finding_against(
        &mut self,
        suite: &str,
        name: &str,
        value: f64,
        unit: &str,
        note: String,
        goal: Goal,
    ) {
        let met = goal.met(value);
        self.progress(&format!(
            "{suite}: {name} = {value:.2} {unit} ({goal}: {})",
            if met { "met" } else { "MISSED" }
        ));
        self.findings.push(Finding {
            suite: suite.into(),
            name: name.into(),
            value,
            unit: unit.into(),
            note,
            target: Some(goal),
            met: Some(met),
        });
    }

    fn iometer(&mut self) {
        let region = self.region;
        let patterns: [Pattern; 4] = [
            ("database", vec![(8 * KIB, 1)], 0.67, 1.0),
            (
                "fileserver",
                vec![
                    (512, 10),
                    (KIB, 5),
                    (2 * KIB, 5),
                    (4 * KIB, 60),
                    (8 * KIB, 2),
                    (16 * KIB, 4),
                    (32 * KIB, 4),
                    (64 * KIB, 10),
                ],
                0.8,
                1.0,
            ),
            (
                "webserver",
                vec![
                    (512, 22),
                    (KIB, 15),
                    (2 * KIB, 8),
                    (4 * KIB, 23),
                    (8 * KIB, 15),
                    (16 * KIB, 2),
                    (32 * KIB, 6),
                    (64 * KIB, 7),
                    (128 * KIB, 1),
                    (512 * KIB, 1),
                ],
                1.0,
                1.0,
            ),
            ("workstation", vec![(8 * KIB, 1)], 0.8, 0.8),
        ];
        let qds: &[usize] = if self.opts.quick {
            &[1, 4, 16]
        } else {
            &[1, 2, 4, 8, 16, 32]
        };
        for (pname, sizes, read, random) in patterns {
            if self.opts.quick && (pname == "fileserver" || pname == "webserver") {
                continue;
            }
            let spec = Spec {
                read,
                random,
                sizes,
                align: 512,
                start: self.region_start,
                len: region,
                skew: Skew::Uniform,
            };
            let mut per_target: Vec<Vec<(usize, f64)>> = vec![Vec::new(); self.targets.len()];
            for &qd in qds {
                let pts = self.case(
                    "iometer",
                    &format!("{pname}-qd{qd}"),
                    &spec,
                    qd,
                    self.dur(2.0),
                );
                for (i, p) in pts.iter().enumerate() {
                    per_target[i].push((qd, p.iops));
                }
            }
            for (i, series) in per_target.iter().enumerate() {
                let tname = self.targets[i].name();
                let (score, how) = if pname == "workstation" {
                    let s: f64 = series
                        .iter()
                        .filter(|(qd, _)| *qd <= 16)
                        .map(|(qd, v)| v / *qd as f64)
                        .sum();
                    (s, "sum of IOPS(QD)/QD over QD 1..16 as run")
                } else {
                    let s = series.iter().map(|(_, v)| v).sum::<f64>() / series.len().max(1) as f64;
                    (s, "mean IOPS over the queue depths run")
                };
                self.finding(
                    "iometer",
                    &format!("{pname}-score-{tname}"),
                    score,
                    "score",
                    how.into(),
                );
            }
        }
    }
}

fn push(chart: &mut Chart, target: &str, x: f64, y: f64) {
    if let Some(s) = chart.series.iter_mut().find(|s| s.0 == target) {
        s.1.push((x, y));
    }
}

fn add(chart: &mut Chart, pts: &[Point], x: f64) {
    for p in pts {
        push(chart, &p.target, x, p.iops);
    }
}
