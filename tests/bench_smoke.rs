//! `tierd bench` on modelled devices in virtual time: the JSON record has
//! its structure, the hybrid beats a pure HDD on a hot set that fits the SSD,
//! and the same seed gives the same numbers.

mod common;

use std::time::Duration;

use serde_json::Value;

fn bench(dir: &std::path::Path, args: &[&str]) -> Value {
    let out = common::run_ok_timeout(
        std::process::Command::new(common::tierd_bin())
            .arg("bench")
            .args([
                "--ssd-size",
                "256MiB",
                "--hdd-size",
                "2GiB",
                "--json",
                "--out",
            ])
            .arg(dir)
            .args(args),
        Duration::from_secs(900),
    );
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("bench --json printed no JSON ({e}):\n{out}"))
}

fn iops(v: &Value, case: &str, target: &str) -> f64 {
    v["points"]
        .as_array()
        .expect("points")
        .iter()
        .find(|p| p["case"] == case && p["target"] == target)
        .and_then(|p| p["iops"].as_f64())
        .unwrap_or_else(|| panic!("no point {case}/{target}"))
}

#[test]
fn hybrid_beats_pure_hdd_on_a_hot_set_and_writes_a_report() {
    let dir = common::tempdir();
    let v = bench(dir.path(), &["--suite", "zipf", "--time-scale", "0.3"]);
    for key in [
        "options",
        "capacity",
        "region",
        "reserve",
        "points",
        "findings",
        "charts",
        "wall_secs",
    ] {
        assert!(v.get(key).is_some(), "JSON lacks {key}: {v}");
    }
    let p = &v["points"][0];
    for key in [
        "suite", "case", "target", "qd", "iops", "mibps", "mean_us", "p99_us", "errors",
    ] {
        assert!(p.get(key).is_some(), "point lacks {key}: {p}");
    }
    let h = iops(&v, "zipf0.99-ws0.5x", "hybrid");
    let hdd = iops(&v, "zipf0.99-ws0.5x", "pure-hdd");
    let ssd = iops(&v, "zipf0.99-ws0.5x", "pure-ssd");
    assert!(h > 5.0 * hdd, "hybrid {h} vs pure HDD {hdd}");
    assert!(h <= ssd * 1.05, "hybrid {h} above pure SSD {ssd}?");
    for f in ["bench.json", "report.md"] {
        assert!(dir.path().join(f).exists(), "{f} written");
    }
}

#[test]
fn the_same_seed_gives_the_same_numbers() {
    let (a, b) = (common::tempdir(), common::tempdir());
    let args = ["--suite", "random", "--time-scale", "0.05", "--seed", "7"];
    let (x, y) = (bench(a.path(), &args), bench(b.path(), &args));
    assert_eq!(x["points"], y["points"], "virtual runs differ for one seed");
    let z = bench(
        b.path(),
        &["--suite", "random", "--time-scale", "0.05", "--seed", "8"],
    );
    assert_ne!(x["points"], z["points"], "the seed changes nothing?");
}

#[test]
fn bad_options_are_refused_clearly() {
    let out = common::run(
        std::process::Command::new(common::tierd_bin()).args(["bench", "--suite", "nope"]),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown suite") && err.contains("zipf"),
        "{err}"
    );
    let out = common::run(std::process::Command::new(common::tierd_bin()).args([
        "bench",
        "--ssd",
        "/dev/null",
        "--hdd",
        "/dev/zero",
    ]));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--yes-destroy-data"));
}
