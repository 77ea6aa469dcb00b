//! Benchmark output: the terminal summary headed by the hybrid/pure-SSD and
//! hybrid/pure-HDD ratios, the JSON record, SVG charts (written by hand in
//! [`svg`]: a line chart needs no font or plotting dependency) and a
//! Markdown report that bundles them.

pub mod check;
mod svg;
mod ticks;

pub use svg::svg;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use super::suites::ON_THE_HDD_REGION;
use super::BenchReport;

/// One summary row: suite/case and each target's (IOPS, MiB/s).
type Row = (String, BTreeMap<String, (f64, f64)>);

/// Rows (suite/case) with each target's IOPS.
fn rows(r: &BenchReport) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    for p in &r.points {
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
    let _ = writeln!(
        s,
        "{:<34} {:>11} {:>11} {:>11} {:>9} {:>9}",
        "case (IOPS)", "hybrid", "pure-ssd", "pure-hdd", "hyb/ssd", "hyb/hdd"
    );
    let mut on_hdd = false;
    for (case, t) in rows(r) {
        let g = |n: &str| t.get(n).map(|v| v.0).unwrap_or(f64::NAN);
        let (h, ss, hd) = (g("hybrid"), g("pure-ssd"), g("pure-hdd"));
        // Rows over the test region, whose data starts on the HDD, carry a
        // mark that the note under the table explains.
        let suite = case.split('/').next().unwrap_or_default();
        let mark = if ON_THE_HDD_REGION.contains(&suite) {
            on_hdd = true;
            " *"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "{:<34} {:>11.0} {:>11.0} {:>11.0} {:>8.2}x {:>8.1}x",
            format!("{case}{mark}"),
            h,
            ss,
            hd,
            h / ss,
            h / hd
        );
    }
    if on_hdd {
        let _ = writeln!(
            s,
            "* over the test region ({:.1} GiB in the middle of the volume), whose data starts on the HDD\n  \
             (the used state: the volume is filled first): the hybrid reads it at the HDD's speed\n  \
             until the migrator promotes what is hot; zipf, shift and scan show it once warmed",
            gib(r.region)
        );
    }
    if !r.findings.is_empty() {
        let _ = writeln!(s, "\nfindings:");
        for f in &r.findings {
            let verdict = match (f.target, f.met) {
                (Some(goal), Some(true)) => format!("met ({goal}); "),
                (Some(goal), _) => format!("MISSED ({goal}); "),
                (None, _) => String::new(),
            };
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
