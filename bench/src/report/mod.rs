//! Benchmark output: the terminal summary headed by the hybrid/pure-SSD and
//! hybrid/pure-HDD ratios, the JSON record, SVG charts (written by hand in
//! [`svg`]: a line chart needs no font or plotting dependency) and a
//! Markdown report that bundles them.

pub mod check;
pub mod doc;
mod svg;
mod ticks;
pub mod traces;

pub use svg::svg;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use super::suites::{Finding, Point, ON_THE_HDD_REGION};
use super::BenchReport;

/// One summary row: suite/case and each target's (IOPS, MiB/s).
type Row = (String, BTreeMap<String, (f64, f64)>);

/// Rows (suite/case) with each target's IOPS.
fn rows(points: &[Point]) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    // Trace replays have a table of their own (`traces`): latency, not IOPS.
    for p in points.iter().filter(|p| p.trace.is_none()) {
        let key = format!("{}/{}", p.suite, p.case);
        let pos = match out.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                out.push((key, BTreeMap::new()));
                out.len() - 1
            }
        };
        out[pos].1.insert(p.target.clone(), (p.iops, p.mibps));
    }
    out
}

/// The terminal summary.
pub fn summary(r: &BenchReport) -> String {
    let mut s = String::new();
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let _ = writeln!(
        s,
        "tierd bench ({} clock{}): volume {:.1} GiB, test region {:.1} GiB, reserve {:.1} GiB, {:.0} s wall",
        match r.options.clock {
            super::ClockKind::Virtual => "virtual",
            super::ClockKind::Real => "real",
        },
        if r.options.quick { ", quick" } else { "" },
        gib(r.capacity),
        gib(r.region),
        gib(r.reserve),
        r.wall_secs
    );
    let table = case_rows(&r.points);
    if !table.is_empty() {
        let _ = writeln!(
            s,
            "{:<34} {:>11} {:>11} {:>11} {:>9} {:>9}",
            "case (IOPS)", "hybrid", "pure-ssd", "pure-hdd", "hyb/ssd", "hyb/hdd"
        );
    }
    for c in &table {
        let _ = writeln!(
            s,
            "{:<34} {:>11.0} {:>11.0} {:>11.0} {:>9} {:>9}",
            format!("{}{}", c.case, if c.on_hdd_region { " *" } else { "" }),
            c.iops[0],
            c.iops[1],
            c.iops[2],
            format!("{}{}", ratio(c.iops[0] / c.iops[1]), hdd_mark(c)),
            ratio(c.iops[0] / c.iops[2])
        );
    }
    for note in table_notes(&table, r.region) {
        let _ = writeln!(s, "{}", note.replace('\n', "\n  "));
    }
    s.push_str(&traces::table(&r.points));
    if !r.findings.is_empty() {
        let _ = writeln!(s, "\nfindings:");
        for f in &r.findings {
            let mut verdict = verdict(f);
            if !verdict.is_empty() {
                verdict.push_str("; ");
            }
            let _ = writeln!(
                s,
                "  {:<40} {:>12.2} {:<6} {verdict}{}",
                format!("{}/{}", f.suite, f.name),
                f.value,
                f.unit,
                f.note
            );
        }
    }
    if r.overruns > 0 {
        let _ = writeln!(s, "\n{} real I/Os overran their device model", r.overruns);
    }
    s
}

/// A row of the summary table: a case and each target's IOPS (hybrid,
/// pure SSD, pure HDD).
pub(crate) struct CaseRow {
    /// `suite/case`.
    pub case: String,
    /// Hybrid, pure-ssd, pure-hdd.
    pub iops: [f64; 3],
    /// Over the test region, whose data starts on the HDD.
    pub on_hdd_region: bool,
}

impl CaseRow {
    /// The hybrid ran no faster than the HDD (at most 1.25x the pure HDD)
    /// and far below the pure SSD: its hyb/ssd is the HDD's speed over the
    /// SSD's, which the note under the table says.
    pub(crate) fn at_hdd_speed(&self) -> bool {
        let [h, ss, hd] = self.iops;
        h / ss < 0.1 && h / hd <= 1.25
    }
}

/// The summary table's rows, from the data points.
pub(crate) fn case_rows(points: &[Point]) -> Vec<CaseRow> {
    rows(points)
        .into_iter()
        .map(|(case, t)| {
            let g = |n: &str| t.get(n).map(|v| v.0).unwrap_or(f64::NAN);
            let suite = case.split('/').next().unwrap_or_default();
            CaseRow {
                on_hdd_region: ON_THE_HDD_REGION.contains(&suite),
                iops: [g("hybrid"), g("pure-ssd"), g("pure-hdd")],
                case,
            }
        })
        .collect()
}

/// The mark of a row at the HDD's speed, after its hyb/ssd.
pub(crate) fn hdd_mark(c: &CaseRow) -> &'static str {
    if c.at_hdd_speed() {
        "†"
    } else {
        ""
    }
}

/// The notes under the table, for the marks its rows carry (a line break
/// where a terminal line would end).
pub(crate) fn table_notes(table: &[CaseRow], region: u64) -> Vec<String> {
    let mut out = Vec::new();
    if table.iter().any(|c| c.on_hdd_region) {
        out.push(format!(
            "* over the test region ({:.1} GiB in the middle of the volume), whose data starts on the HDD\n\
             (the used state: the volume is filled first): the hybrid reads it at the HDD's speed\n\
             until the migrator promotes what is hot; zipf, shift and scan show it once warmed",
            region as f64 / (1u64 << 30) as f64
        ));
    }
    if table.iter().any(CaseRow::at_hdd_speed) {
        out.push(
            "† the hybrid ran no faster than the HDD (hyb/hdd at most 1.25x): the data read was\n\
             still on the HDD, so hyb/ssd is the HDD's speed over the SSD's, not a loss of tierd's;\n\
             on data the migrator has brought up (the zipf rows) it is about 1.00x"
                .to_string(),
        );
    }
    out
}

/// Whether a finding met the target it is held to: `met (target <= 2)`,
/// `MISSED (target <= 2)`, or nothing without a target.
pub(crate) fn verdict(f: &Finding) -> String {
    match (f.target, f.met) {
        (Some(goal), Some(true)) => format!("met ({goal})"),
        (Some(goal), _) => format!("MISSED ({goal})"),
        (None, _) => String::new(),
    }
}

/// A ratio as the table prints it: two decimals, and two significant
/// digits below 0.1 (`0.0028x`, never a bare `0.00x`); one decimal from 10,
/// none from 100.
pub(crate) fn ratio(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    if x >= 100.0 {
        format!("{x:.0}x")
    } else if x >= 10.0 {
        format!("{x:.1}x")
    } else {
        format!("{}x", small(x))
    }
}

/// A number below 100 with two decimals, or two significant digits when
/// that shows more (`0.0028`, not `0.00`).
pub(crate) fn small(x: f64) -> String {
    if x.abs() >= 0.1 || x == 0.0 || !x.is_finite() {
        format!("{x:.2}")
    } else {
        let decimals = (-x.abs().log10()).ceil() as usize + 1;
        format!("{x:.decimals$}")
    }
}

/// Write `bench.json`, one SVG per chart and `report.md` into `dir`.
pub fn write_all(r: &BenchReport, dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_vec_pretty(r).map_err(io::Error::other)?;
    std::fs::write(dir.join("bench.json"), json)?;
    let mut md = String::new();
    let _ = writeln!(md, "# tierd bench report\n\n```\n{}```\n", summary(r));
    for c in &r.charts {
        let file = format!("{}.svg", c.name);
        std::fs::write(dir.join(&file), svg(c))?;
        let _ = writeln!(md, "## {}\n\n![{}]({file})\n", c.title, c.title);
    }
    let _ = writeln!(md, "## All data points\n\n| suite | case | target | QD | IOPS | MiB/s | mean µs | p99 µs |\n|---|---|---|---|---|---|---|---|");
    for p in &r.points {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {:.1} | {:.0} | {:.0} |",
            p.suite, p.case, p.target, p.qd, p.iops, p.mibps, p.mean_us, p.p99_us
        );
    }
    std::fs::write(dir.join("report.md"), md)
}
