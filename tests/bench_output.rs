//! What `tierd bench` prints reads right at first sight: with its output
//! going to a file (not a terminal) it still prints progress, as plain
//! lines (no carriage returns, no escape codes); the table marks the rows
//! that run over the test region and says under it that their data starts
//! on the HDD; no ratio reads a bare `0.00x`, and a row at the HDD's speed
//! is marked and the mark explained; a finding held to a target says
//! whether it was met.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn bench_output_says_where_the_region_starts_and_whether_targets_were_met() {
    let dir = tempdir();
    let out = run_timeout(
        Command::new(tierd_bin())
            .arg("bench")
            .args([
                "--ssd-size",
                "256MiB",
                "--hdd-size",
                "2GiB",
                "--suite",
                "random",
                "--suite",
                "shift",
                "--time-scale",
                "0.05",
                "--out",
            ])
            .arg(dir.path().join("report"))
            .env("NO_COLOR", "1"),
        Duration::from_secs(900),
    );
    assert!(out.status.success(), "{}", show("tierd bench", &out));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );

    // Progress: plain lines, several, naming the suites.
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "progress on a non-terminal uses carriage returns or escapes: {stderr:?}"
    );
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" s] "))
        .collect();
    assert!(
        progress.iter().any(|l| l.contains("suite 1/2"))
            && progress.iter().any(|l| l.contains("suite 2/2")),
        "no progress lines per suite on stderr:\n{stderr}"
    );

    // The random rows are marked and the mark explained.
    let rand_row = stdout
        .lines()
        .find(|l| l.starts_with("random/rand-read-4k-qd1"))
        .unwrap_or_else(|| panic!("no random read row:\n{stdout}"));
    assert!(
        rand_row.split_whitespace().nth(1) == Some("*"),
        "the random row does not carry the region's mark: {rand_row}"
    );
    assert!(
        stdout.contains("starts on the HDD"),
        "the table does not say the region starts on the HDD:\n{stdout}"
    );
    // No ratio reads a bare 0.00x: small ones keep two significant digits,
    // and a row at the HDD's speed is marked and the mark explained.
    assert!(
        !stdout.contains("0.00x"),
        "a ratio reads 0.00x without saying why:\n{stdout}"
    );
    let hyb_ssd = rand_row.split_whitespace().rev().nth(1).unwrap_or_default();
    assert!(
        hyb_ssd
            .trim_end_matches(['x', '†'])
            .parse::<f64>()
            .is_ok_and(|r| r > 0.0),
        "the random row's hyb/ssd does not read as a ratio: {rand_row}"
    );
    if stdout.contains('†') {
        assert!(
            stdout.contains("† the hybrid ran no faster than the HDD"),
            "a row is marked † without the note:\n{stdout}"
        );
    }

    // The finding held to `target <= 2` says met or missed.
    let finding = stdout
        .lines()
        .find(|l| l.contains("time/hdd-sequential-read"))
        .unwrap_or_else(|| panic!("no shift finding with a target:\n{stdout}"));
    assert!(
        finding.contains("met (target <= 2)") || finding.contains("MISSED (target <= 2)"),
        "the finding does not say whether its target was met: {finding}"
    );
    let json = std::fs::read_to_string(dir.path().join("report/bench.json")).expect("bench.json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("bench.json parses");
    let f = v["findings"]
        .as_array()
        .and_then(|a| {
            a.iter().find(|f| {
                f["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("time/hdd-sequential-read"))
            })
        })
        .unwrap_or_else(|| panic!("no such finding in bench.json"));
    assert_eq!(f["target"]["at_most"], 2.0, "{f}");
    let met = f["met"].as_bool().expect("met is a boolean");
    assert_eq!(
        met,
        f["value"].as_f64().is_some_and(|v| v <= 2.0),
        "met disagrees with the value: {f}"
    );
}
