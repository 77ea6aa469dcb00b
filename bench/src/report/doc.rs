//! The tables docs/bench.md carries, made from a recorded run's JSON
//! (`tierd bench --doc-tables FILE`), so the document shows what the
//! record holds: the summary table (the same rows, ratios and marks as
//! the terminal's) and the findings, as Markdown.

use std::fmt::Write as _;

use serde::Deserialize;

use super::{case_rows, hdd_mark, ratio, small, table_notes, verdict};
use crate::suites::{Finding, Point};

/// What the tables need of a recorded run (`bench.json`).
#[derive(Debug, Clone, Deserialize)]
pub struct Recorded {
    /// Test region of the drive suites, bytes.
    pub region: u64,
    /// Data points.
    pub points: Vec<Point>,
    /// Scores, ratios, times.
    pub findings: Vec<Finding>,
}

impl Recorded {
    /// Read a record.
    pub fn parse(json: &str) -> serde_json::Result<Recorded> {
        serde_json::from_str(json)
    }
}

/// A number as the tables print it: whole from 100, else two decimals or
/// two significant digits.
fn value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        small(v)
    }
}

/// The summary table and its notes, then the findings table, in Markdown.
pub fn tables(r: &Recorded) -> String {
    let mut s = String::new();
    let table = case_rows(&r.points);
    let _ = writeln!(
        s,
        "| case (IOPS) | hybrid | pure-ssd | pure-hdd | hyb/ssd | hyb/hdd |\n|---|---:|---:|---:|---:|---:|"
    );
    for c in &table {
        let _ = writeln!(
            s,
            "| {}{} | {:.0} | {:.0} | {:.0} | {}{} | {} |",
            c.case,
            if c.on_hdd_region { " \\*" } else { "" },
            c.iops[0],
            c.iops[1],
            c.iops[2],
            ratio(c.iops[0] / c.iops[1]),
            hdd_mark(c),
            ratio(c.iops[0] / c.iops[2])
        );
    }
    for note in table_notes(&table, r.region) {
        let note = note.replace('\n', " ");
        let _ = writeln!(s, "\n{}", note.replacen('*', "\\*", 1));
    }
    let replays = super::traces::markdown(&r.points);
    if !replays.is_empty() {
        let _ = write!(s, "\n{replays}");
    }
    let _ = writeln!(
        s,
        "\n| finding | value | unit | target | note |\n|---|---:|---|---|---|"
    );
    for f in &r.findings {
        let _ = writeln!(
            s,
            "| {}/{} | {} | {} | {} | {} |",
            f.suite,
            f.name,
            value(f.value),
            f.unit,
            verdict(f),
            f.note.replace('|', "\\|")
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ratio;

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(ratio(0.0028), "0.0028x");
        assert_eq!(ratio(0.063), "0.063x");
        assert_eq!(ratio(0.001), "0.0010x");
        assert_eq!(ratio(0.49), "0.49x");
        assert_eq!(ratio(1.0), "1.00x");
        assert_eq!(ratio(28.8), "28.8x");
        assert_eq!(ratio(437.5), "438x");
        assert_eq!(ratio(f64::NAN), "-");
    }

    #[test]
    fn the_tables_have_a_row_per_case_and_finding() {
        let json = r#"{"region": 2147483648, "points": [
            {"suite":"random","case":"rand-read-4k-qd4","target":"hybrid","qd":4,"block":4096,"read_pct":100,"iops":122.0,"mibps":0.5,"mean_us":1.0,"p50_us":1.0,"p99_us":1.0,"ops":1,"errors":0},
            {"suite":"random","case":"rand-read-4k-qd4","target":"pure-ssd","qd":4,"block":4096,"read_pct":100,"iops":43268.0,"mibps":169.0,"mean_us":1.0,"p50_us":1.0,"p99_us":1.0,"ops":1,"errors":0},
            {"suite":"random","case":"rand-read-4k-qd4","target":"pure-hdd","qd":4,"block":4096,"read_pct":100,"iops":121.0,"mibps":0.5,"mean_us":1.0,"p50_us":1.0,"p99_us":1.0,"ops":1,"errors":0}],
            "findings": [{"suite":"shift","name":"time","value":41.5,"unit":"s","note":"a | b","target":{"at_most":2.0},"met":false}]}"#;
        let r = Recorded::parse(json).expect("parses");
        let t = tables(&r);
        assert!(
            t.contains("| random/rand-read-4k-qd4 \\* | 122 | 43268 | 121 | 0.0028x† | 1.01x |"),
            "{t}"
        );
        assert!(t.contains("† the hybrid ran no faster than the HDD"), "{t}");
        assert!(
            t.contains("| shift/time | 41.50 | s | MISSED (target <= 2) | a \\| b |"),
            "{t}"
        );
    }
}
