//! `tierctl top` shows the heat its order follows: an extent read in one
//! block many times has a high raw score but a low effective heat (the
//! score weighted by how densely the extent is used), and one read in
//! many blocks the opposite; `top --cold` and `top --hot` list them in the
//! order of the `heat` column (ascending and descending), which showed the
//! raw score and so ran against the order.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn top(sock: &Path, order: &str) -> String {
    run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(sock)
            .args(["top", order, "-n", "10"])
            .env("NO_COLOR", "1"),
    )
}

/// The `heat` column of `tierctl top`'s table, row by row.
fn heat_column(text: &str) -> Vec<f64> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .map(|h| h.split_whitespace().collect())
        .unwrap_or_default();
    let col = header
        .iter()
        .position(|h| *h == "heat")
        .unwrap_or_else(|| panic!("no heat column: {text}"));
    lines
        .map(|l| {
            let cell = l.split_whitespace().nth(col).unwrap_or_default();
            cell.parse()
                .unwrap_or_else(|e| panic!("heat {cell:?} in {l:?}: {e}"))
        })
        .collect()
}

#[test]
fn the_heat_column_follows_the_order() {
    let d = Daemon::start_with(DaemonOptions::small());
    let sock = d.data_dir().join("control.sock");
    let mut cmd = tool("qemu-io");
    cmd.args(["-f", "raw", "-c", "write -P 1 0 4k"]);
    // Extent 0: one block, read 40 times (high score, coverage 1).
    for _ in 0..40 {
        cmd.args(["-c", "read -P 1 0 4k"]);
    }
    // Extent 2: 12 blocks apart, written and read once each (lower score,
    // denser).
    for b in 0..12u64 {
        let at = 2 * MIB + b * 64 * KIB;
        cmd.args(["-c", &format!("write -P 2 {at} 4k")]);
        cmd.args(["-c", &format!("read -P 2 {at} 4k")]);
    }
    run_ok(cmd.arg(d.uri()));
    // The heat map folds hits into scores at its next tick.
    let scored = wait_until(Duration::from_secs(30), || {
        let v: Value = serde_json::from_str(&run_ok(
            Command::new(tierctl_bin())
                .arg("--control")
                .arg(&sock)
                .args(["top", "--hot", "--json"]),
        ))
        .expect("top JSON");
        v.as_array()
            .is_some_and(|a| a.len() >= 2 && a.iter().all(|e| e["score"].as_f64() > Some(0.0)))
    });
    assert!(scored, "the reads earned no heat: {}", top(&sock, "--hot"));
    let cold = heat_column(&top(&sock, "--cold"));
    let hot = heat_column(&top(&sock, "--hot"));
    assert!(cold.len() >= 2 && hot.len() >= 2, "{cold:?} {hot:?}");
    assert!(
        cold.windows(2).all(|w| w[0] <= w[1]),
        "top --cold is not coldest first by its heat column: {cold:?}"
    );
    assert!(
        hot.windows(2).all(|w| w[0] >= w[1]),
        "top --hot is not hottest first by its heat column: {hot:?}"
    );
}
