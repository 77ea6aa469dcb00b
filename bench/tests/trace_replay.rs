//! `tierd bench --trace FILE`: a generated trace (`tierd trace generate`)
//! replayed in virtual time on every executed target (the hybrid at a
//! stated fill, the pure drives, three caches paying for their copies on
//! the same drives), with the textbook policies and the optimum beside:
//! every request runs without error on every target, each target's
//! latency, HDD time and shares are in the findings and its point, the
//! optimum reads at least as many bytes from the SSD as any other textbook
//! policy, the verdicts are there, two runs give the same record (the
//! replay is deterministic), rooms replay at their own SSD sizes, and a
//! trace too large for the volume is refused with what to do.
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
    let executed = [
        "hybrid",
        "pure-ssd",
        "pure-hdd",
        "cache-lru-1m",
        "cache-lru-256k",
        "cache-larc-1m",
    ];
    assert_eq!(targets, executed, "{points:?}");
    for p in points {
        assert_eq!(p["ops"], 4000, "{p}");
        assert_eq!(p["errors"], 0, "{p}");
        let t = &p["trace"];
        let fill = t["fill"].as_f64().expect("fill");
        assert!(
            (fill - 0.7).abs() < 0.01,
            "the default fill for traces: {fill}"
        );
        let reads = t["read"]["count"].as_u64().expect("reads counted");
        let writes = t["write"]["count"].as_u64().expect("writes counted");
        assert_eq!(reads + writes, 4000, "{p}");
    }
    for target in executed {
        for what in [
            "read-mean-us",
            "read-p99-us",
            "write-mean-us",
            "write-p99-us",
        ] {
            let v = finding(&r, &format!("zipf/{target}-{what}"));
            assert!(v > 0.0, "{target} {what}: {v}");
        }
        let busy = finding(&r, &format!("zipf/{target}-hdd-busy-s"));
        let hit = finding(&r, &format!("zipf/{target}-read-hit-share"));
        let wear = finding(&r, &format!("zipf/{target}-ssd-write-per-host-byte"));
        assert!((0.0..=1.0).contains(&hit), "{target}: {hit}");
        match target {
            // The pure SSD never touches an HDD, the pure HDD never misses
            // flash because it has none.
            "pure-ssd" => assert!(busy == 0.0 && hit == 1.0, "{busy} {hit}"),
            "pure-hdd" => assert!(busy > 0.0 && hit == 0.0 && wear == 0.0, "{busy} {hit}"),
            _ => assert!(busy > 0.0, "{target} {busy}"),
        }
    }
    // The pure HDD serves reads slower than the pure SSD.
    assert!(finding(&r, "zipf/pure-hdd-read-mean-us") > finding(&r, "zipf/pure-ssd-read-mean-us"));
    let mut shares = Vec::new();
    for policy in ["lru", "lfu", "arc", "smq", "popular", "optimal"] {
        let s = finding(&r, &format!("zipf/{policy}-read-hit-share"));
        assert!((0.0..=1.0).contains(&s), "{policy}: {s}");
        shares.push((policy, s));
    }
    let optimal = finding(&r, "zipf/optimal-read-hit-share");
    for (policy, s) in &shares[..4] {
        assert!(
            *s <= optimal + 1e-9,
            "{policy} {s} beat the optimum {optimal}"
        );
    }
    assert!(optimal > 0.0, "a Zipf trace has reuse");
    // The verdicts at a fill below 1: against the best cache and the pure
    // SSD, each with its goal.
    for v in [
        "hybrid-read-mean-vs-best-cache",
        "hybrid-read-p99-vs-best-cache",
        "hybrid-hdd-busy-vs-best-cache",
        "hybrid-write-on-flash",
        "hybrid-write-mean-vs-pure-ssd",
    ] {
        let f = r["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .find(|f| f["name"] == format!("zipf/{v}"))
            .unwrap_or_else(|| panic!("no verdict {v}"));
        assert!(f["target"].is_object() && f["met"].is_boolean(), "{f}");
    }
    let charts: Vec<&str> = r["charts"]
        .as_array()
        .expect("charts")
        .iter()
        .map(|c| c["name"].as_str().expect("name"))
        .collect();
    assert!(charts.contains(&"trace-zipf"), "{charts:?}");
    assert!(charts.contains(&"trace-zipf-latency"), "{charts:?}");
    // Deterministic: the same run gives the same numbers.
    let again = bench("b");
    assert_eq!(r["points"], again["points"]);
    assert_eq!(r["findings"], again["findings"]);

    // Rooms: one replay per room, each on its own SSD size; at a full fill
    // the hybrid is held to the pure HDD.
    let dir2 = dir.path().join("rooms");
    let json = ok(&[
        "bench",
        "--trace",
        t,
        "--trace-room",
        "0.25,0.5",
        "--fill",
        "1.0",
        "--hdd-size",
        "2GiB",
        "--json",
        "--out",
        dir2.to_str().expect("utf-8 path"),
    ]);
    let rooms: Value = serde_json::from_str(&json).expect("the record is JSON");
    let size_of = |case: &str| -> u64 {
        rooms["points"]
            .as_array()
            .expect("points")
            .iter()
            .find(|p| p["case"] == case && p["target"] == "hybrid")
            .and_then(|p| p["trace"]["ssd_size"].as_u64())
            .unwrap_or_else(|| panic!("no point for {case}"))
    };
    assert!(size_of("zipf/room-0.25") < size_of("zipf/room-0.5"));
    for room in ["room-0.25", "room-0.5"] {
        finding(&rooms, &format!("zipf/{room}/hybrid-read-mean-vs-pure-hdd"));
        finding(&rooms, &format!("zipf/{room}/hybrid-read-p99-vs-pure-hdd"));
    }

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
