//! `tierd bench --trace FILE`: a generated trace (`tierd trace generate`)
//! replayed on the three targets in virtual time, with the classic policies
//! and the optimum beside the hybrid: every request runs without error on
//! every target, the findings are there and are shares, the optimum reads
//! at least as many bytes from the SSD as any other policy, and two runs
//! give the same record (the replay is deterministic); a trace too large
//! for the volume is refused with what to do.
//!
//! Runs the `tierd` binary of this build (next to the test's `deps`
//! directory; `cargo build --workspace` first) or `TIERD_BIN`.

mod support;

use std::process::Command;

use support::tierd_bin;

use serde_json::Value;

fn run(args: &[&str]) -> std::process::Output {
    Command::new(tierd_bin())
        .args(args)
        .output()
        .expect("running tierd")
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "tierd {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn finding(record: &Value, name: &str) -> f64 {
    record["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["name"] == name)
        .and_then(|f| f["value"].as_f64())
        .unwrap_or_else(|| panic!("no finding {name}"))
}

#[test]
fn a_generated_trace_replays_on_every_target_beside_the_policies() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let trace = dir.path().join("zipf.trace");
    let t = trace.to_str().expect("utf-8 path");
    ok(&[
        "trace",
        "generate",
        "zipf",
        t,
        "--region",
        "256MiB",
        "--requests",
        "4000",
        "--rate",
        "400",
    ]);
    let bench = |out: &str| -> Value {
        let out = dir.path().join(out);
        let json = ok(&[
            "bench",
            "--trace",
            t,
            "--ssd-size",
            "256MiB",
            "--hdd-size",
            "2GiB",
            "--json",
            "--out",
            out.to_str().expect("utf-8 path"),
        ]);
        serde_json::from_str(&json).expect("the record is JSON")
    };
    let r = bench("a");
    let points = r["points"].as_array().expect("points");
    let targets: Vec<&str> = points
        .iter()
        .filter(|p| p["suite"] == "trace" && p["case"] == "zipf")
        .map(|p| p["target"].as_str().expect("target"))
        .collect();
    assert_eq!(targets, ["hybrid", "pure-ssd", "pure-hdd"], "{points:?}");
    for p in points {
        assert_eq!(p["ops"], 4000, "{p}");
        assert_eq!(p["errors"], 0, "{p}");
    }
    let mut shares = Vec::new();
    for policy in ["hybrid", "lru", "lfu", "arc", "smq", "popular", "optimal"] {
        let s = finding(&r, &format!("zipf/{policy}-read-hit-share"));
        assert!((0.0..=1.0).contains(&s), "{policy}: {s}");
        shares.push((policy, s));
    }
    let optimal = finding(&r, "zipf/optimal-read-hit-share");
    for (policy, s) in &shares[1..5] {
        assert!(
            *s <= optimal + 1e-9,
            "{policy} {s} beat the optimum {optimal}"
        );
    }
    assert!(optimal > 0.0, "a Zipf trace has reuse");
    let ratio = finding(&r, "zipf/hybrid-vs-optimal");
    assert!((ratio - shares[0].1 / optimal).abs() < 1e-9);
    assert!(r["charts"]
        .as_array()
        .expect("charts")
        .iter()
        .any(|c| c["name"] == "trace-zipf"));
    // Deterministic: the same run gives the same numbers.
    let again = bench("b");
    assert_eq!(r["points"], again["points"]);
    assert_eq!(r["findings"], again["findings"]);

    // Too large a footprint for the bench volume: refused, saying why.
    let big = dir.path().join("big.trace");
    ok(&[
        "trace",
        "generate",
        "zipf",
        big.to_str().expect("utf-8 path"),
        "--region",
        "8GiB",
        "--requests",
        "20000",
    ]);
    let o = run(&[
        "bench",
        "--trace",
        big.to_str().expect("utf-8 path"),
        "--ssd-size",
        "256MiB",
        "--hdd-size",
        "1GiB",
        "--out",
        dir.path().join("c").to_str().expect("utf-8 path"),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--hdd-size"), "{err}");
}
