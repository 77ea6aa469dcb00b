//! Benchmark output: the terminal summary headed by the hybrid/pure-SSD and
//! hybrid/pure-HDD ratios, the JSON record, SVG charts (written by hand: a
//! line chart needs no font or plotting dependency) and a Markdown report
//! that bundles them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use super::suites::Chart;
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
        "case", "hybrid", "pure-ssd", "pure-hdd", "hyb/ssd", "hyb/hdd"
    );
    for (case, t) in rows(r) {
        let g = |n: &str| t.get(n).map(|v| v.0).unwrap_or(f64::NAN);
        let (h, ss, hd) = (g("hybrid"), g("pure-ssd"), g("pure-hdd"));
        let _ = writeln!(
            s,
            "{:<34} {:>11.0} {:>11.0} {:>11.0} {:>8.2}x {:>8.1}x",
            case,
            h,
            ss,
            hd,
            h / ss,
            h / hd
        );
    }
    if !r.findings.is_empty() {
        let _ = writeln!(s, "\nfindings:");
        for f in &r.findings {
            let _ = writeln!(
                s,
                "  {:<40} {:>12.2} {:<6} {}",
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

/// An SVG line chart.
pub fn svg(c: &Chart) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 420.0, 70.0, 170.0, 40.0, 50.0);
    let pts: Vec<(f64, f64)> = c.series.iter().flat_map(|s| s.1.iter().copied()).collect();
    let tx = |x: f64| if c.log_x { x.max(1e-9).log2() } else { x };
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    let mut y1 = 0.0f64;
    for (x, y) in &pts {
        x0 = x0.min(tx(*x));
        x1 = x1.max(tx(*x));
        if y.is_finite() {
            y1 = y1.max(*y);
        }
    }
    if pts.is_empty() || x1 <= x0 {
        x1 = x0.max(0.0) + 1.0;
        x0 = x1 - 1.0;
    }
    let y1 = if y1 <= 0.0 { 1.0 } else { y1 * 1.1 };
    let px = |x: f64| ml + (tx(x) - x0) / (x1 - x0) * (w - ml - mr);
    let py = |y: f64| h - mb - y / y1 * (h - mt - mb);
    let colors = ["#d62728", "#1f77b4", "#7f7f7f", "#2ca02c", "#9467bd"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        w / 2.0,
        esc(&c.title)
    );
    let _ = writeln!(
        s,
        r#"<line x1="{ml}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        h - mb,
        w - mr,
        h - mb
    );
    let _ = writeln!(
        s,
        r#"<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{}" stroke="black"/>"#,
        h - mb
    );
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            ml - 6.0,
            py(y) + 4.0,
            fmt_num(y)
        );
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{0}" x2="{1}" y2="{0}" stroke="#ddd"/>"##,
            py(y),
            w - mr
        );
    }
    let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let every = (xs.len() / 10).max(1);
    for x in xs.iter().step_by(every) {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(*x),
            h - mb + 16.0,
            fmt_num(*x)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        ml + (w - ml - mr) / 2.0,
        h - 10.0,
        esc(&c.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        h / 2.0,
        h / 2.0,
        esc(&c.y_label)
    );
    for (i, (name, series)) in c.series.iter().enumerate() {
        let color = colors[i % colors.len()];
        let path: Vec<String> = series
            .iter()
            .filter(|p| p.1.is_finite())
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        if !path.is_empty() {
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                path.join(" ")
            );
        }
        let ly = mt + 20.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="14" height="4" fill="{color}"/>"#,
            w - mr + 12.0,
            ly - 4.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            w - mr + 32.0,
            ly,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_num(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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
