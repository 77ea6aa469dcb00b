//! Every chart the bench makes, rendered to PNG with `rsvg-convert`
//! (Debian package librsvg2-bin; scripts/test.sh installs it) so the charts
//! can be looked at: `<target>/tmp/chart-png/<name>.svg` and `.png`.
//!
//! Runs the chart-making suites in-process on the virtual clock with small
//! devices and short runs (three benches, in parallel), then checks each
//! chart: the layout check of `report::check` (every text inside the
//! canvas, round ticks), that rsvg-convert renders it (exit 0, a PNG of the
//! SVG's size), and what the suites promise of the charts themselves (one
//! quantity per panel, a percentage panel within 0..100 %). Missing
//! rsvg-convert fails the test; so does a suite added to the bench without
//! being listed here as making a chart or not.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use tierd_bench::report::{self, check};
use tierd_bench::suites::SUITES;
use tierd_bench::{Bench, BenchOptions};

/// The suites that make charts (each makes the chart of its name), as the
/// tests below run them.
const CHART_SUITES: [&str; 7] = [
    "qd-sweep",
    "bs-sweep",
    "mixed",
    "multi-stream",
    "fill-trim",
    "shift",
    "landing",
];

/// The suites that make none.
const NO_CHART: [&str; 7] = [
    "sequential",
    "random",
    "response",
    "iometer",
    "zipf",
    "scan",
    "return",
];

const MIB: u64 = 1 << 20;

/// (width, height) from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    let sig = b"\x89PNG\r\n\x1a\n";
    if png.len() < 24 || &png[..8] != sig || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&png[16..20]), be(&png[20..24])))
}

fn rsvg_convert() {
    match Command::new("rsvg-convert").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "rsvg-convert --version failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "rsvg-convert not found ({e}): install librsvg2-bin \
             (apt-get install librsvg2-bin; scripts/test.sh installs it) to render the charts"
        ),
    }
}

/// Run `suites` on an SSD of `ssd_mib` (the HDD 8x, the region half the
/// SSD) with every run `time_scale` as long; check and render each chart
/// into `<target>/tmp/chart-png/`.
fn render(suites: &[&str], ssd_mib: u64, time_scale: f64) {
    rsvg_convert();
    let mut o = BenchOptions::preset(true);
    o.suites = suites.iter().map(|s| s.to_string()).collect();
    o.ssd_size = ssd_mib * MIB;
    o.hdd_size = 8 * ssd_mib * MIB;
    o.region = ssd_mib / 2 * MIB;
    o.time_scale = time_scale;
    let report = Bench::new(o, None).expect("setting up the bench").run();
    let made: BTreeSet<&str> = report.charts.iter().map(|c| c.name.as_str()).collect();
    let want: BTreeSet<&str> = suites.iter().copied().collect();
    assert_eq!(made, want, "the charts made");

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-png");
    std::fs::create_dir_all(&dir).expect("creating the PNG directory");
    println!("charts rendered into {}", dir.display());
    let mut failures = Vec::new();
    for c in &report.charts {
        for (label, series) in std::iter::once((&c.y_label, &c.series))
            .chain(c.below.iter().map(|p| (&p.y_label, &p.series)))
        {
            assert!(
                !label.contains("x100") && !label.contains(" / "),
                "{}: {label:?} looks like two quantities on one axis",
                c.name
            );
            assert!(
                series.iter().all(|s| !s.1.is_empty()),
                "{}: an empty series in {label:?}",
                c.name
            );
        }
        for p in &c.below {
            if p.y_label.contains('%') {
                assert_eq!(p.y_max, Some(100.0), "{}: {}", c.name, p.y_label);
                for (name, pts) in &p.series {
                    assert!(
                        pts.iter().all(|(_, y)| (0.0..=100.0).contains(y)),
                        "{}: {name} leaves 0..100 %",
                        c.name
                    );
                }
            }
        }
        let svg = report::svg(c);
        let problems = check::layout_problems(&svg);
        if !problems.is_empty() {
            failures.push(format!("{}: {problems:#?}", c.name));
        }
        let panels = check::y_ticks(&svg).expect("reading the panels back");
        assert_eq!(panels.len(), 1 + c.below.len(), "{}: panels", c.name);
        let svg_path = dir.join(format!("{}.svg", c.name));
        let png_path = dir.join(format!("{}.png", c.name));
        std::fs::write(&svg_path, &svg).expect("writing the SVG");
        let out = Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png_path)
            .arg(&svg_path)
            .output()
            .expect("running rsvg-convert");
        assert!(
            out.status.success(),
            "rsvg-convert {} failed ({}): {}",
            svg_path.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let png = std::fs::read(&png_path).expect("reading the PNG");
        let (w, h) = check::canvas(&svg).expect("the SVG's size");
        assert_eq!(
            png_size(&png),
            Some((w as u32, h as u32)),
            "{}: the PNG's size",
            png_path.display()
        );
        assert!(
            png.len() > 1000,
            "{}: a nearly empty PNG",
            png_path.display()
        );
        println!("  {} ({w}x{h})", png_path.display());
    }
    assert!(
        failures.is_empty(),
        "layout problems:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_suite_is_known_to_make_a_chart_or_not() {
    let mut known: Vec<&str> = CHART_SUITES.iter().chain(&NO_CHART).copied().collect();
    known.sort_unstable();
    let mut all: Vec<&str> = SUITES.iter().map(|s| s.0).collect();
    all.sort_unstable();
    assert_eq!(
        known, all,
        "a suite was added or removed: list it in CHART_SUITES (and render it below) or NO_CHART"
    );
}

#[test]
fn sweep_charts_render_to_png() {
    render(&CHART_SUITES[..5], 256, 0.1);
}

#[test]
fn shift_chart_renders_to_png() {
    render(&["shift"], 512, 0.25);
}

#[test]
fn landing_chart_renders_to_png() {
    render(&["landing"], 256, 0.5);
}
