//! The trace replays' table: for open-loop replays the comparison is of
//! what users wait for and what the HDD spends, not of IOPS (every target
//! serves the trace's requests at the trace's rate), so each target gets a
//! row of latencies, HDD time, shares and copies; caches are marked, their
//! capacity being the HDD's alone.

use std::fmt::Write as _;

use crate::suites::Point;

/// Milliseconds, with the decimals a latency needs.
fn ms(us: Option<f64>) -> String {
    match us {
        None => "-".into(),
        Some(u) if u >= 100_000.0 => format!("{:.0}", u / 1000.0),
        Some(u) if u >= 1_000.0 => format!("{:.1}", u / 1000.0),
        Some(u) => format!("{:.3}", u / 1000.0),
    }
}

/// The rows, one per (case, target) of a trace replay: `[case, target,
/// read mean, read p99, write mean, write p99, HDD busy, read-hit, write on
/// flash, SSD written per host byte, moved]`.
pub fn rows(points: &[Point]) -> Vec<[String; 11]> {
    points
        .iter()
        .filter_map(|p| {
            let d = p.trace.as_ref()?;
            let r = d.read.as_ref();
            let w = d.write.as_ref();
            Some([
                p.case.clone(),
                format!(
                    "{}{}",
                    p.target,
                    if p.target.starts_with("cache-") {
                        " ‡"
                    } else {
                        ""
                    }
                ),
                ms(r.map(|l| l.mean_us)),
                ms(r.map(|l| l.p99_us)),
                ms(w.map(|l| l.mean_us)),
                ms(w.map(|l| l.p99_us)),
                format!("{:.1}", d.hdd_busy_s),
                format!("{:.3}", d.read_hit_share),
                format!("{:.2}", d.write_ssd_share),
                format!("{:.2}", d.ssd_write_per_host_byte),
                format!("{}", d.moved_bytes >> 20),
            ])
        })
        .collect()
}

const HEAD: [&str; 11] = [
    "case",
    "target",
    "read mean ms",
    "read p99 ms",
    "write mean ms",
    "write p99 ms",
    "HDD busy s",
    "read-hit",
    "writes on flash",
    "SSD w/host",
    "moved MiB",
];

/// The note under the table.
pub const NOTE: &str = "‡ a cache on the same drives, paying for its copies: its capacity is the HDD's alone (the hybrid's is SSD + HDD less the reserve)";

/// The terminal table (empty without trace replays).
pub fn table(points: &[Point]) -> String {
    let rows = rows(points);
    if rows.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let wide = rows
        .iter()
        .map(|r| r[0].chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        s,
        "\n{:<wide$} {:<16} {:>12} {:>11} {:>13} {:>12} {:>10} {:>8} {:>15} {:>10} {:>9}",
        HEAD[0],
        HEAD[1],
        HEAD[2],
        HEAD[3],
        HEAD[4],
        HEAD[5],
        HEAD[6],
        HEAD[7],
        HEAD[8],
        HEAD[9],
        HEAD[10]
    );
    for r in &rows {
        let _ = writeln!(
            s,
            "{:<wide$} {:<16} {:>12} {:>11} {:>13} {:>12} {:>10} {:>8} {:>15} {:>10} {:>9}",
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10]
        );
    }
    let _ = writeln!(s, "{NOTE}");
    s
}

/// The same as a Markdown table (empty without trace replays).
pub fn markdown(points: &[Point]) -> String {
    let rows = rows(points);
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!("| {} |\n|---|---|", HEAD.join(" | "));
    s.push_str(&"---:|".repeat(HEAD.len() - 2));
    s.push('\n');
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    let _ = writeln!(s, "\n{NOTE}");
    s
}
