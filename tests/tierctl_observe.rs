//! What `tierctl status` tells an operator beyond capacity, against the
//! real daemon on modelled drives: per-tier latency (p50/p99 by op and
//! class, utilisation), the working set against the SSD's usable room,
//! the migration backlog and throttle, and health; and that every `--json`
//! output, of tierctl and of `tierd format`, spells its keys in snake_case.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn ctl(sock: &Path, args: &[&str]) -> String {
    let out = run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .args(args)
        .env("NO_COLOR", "1"));
    assert!(out.status.success(), "{}", show("tierctl", &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let text = ctl(sock, &a);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("tierctl {a:?}: not JSON ({e}): {text}"))
}

/// Every object key in `v`, with its path.
fn keys(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.push(format!("{path}.{k}"));
                keys(v, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| keys(v, &format!("{path}[]"), out)),
        _ => {}
    }
}

fn assert_snake(what: &str, v: &Value) {
    let mut all = Vec::new();
    keys(v, "", &mut all);
    assert!(!all.is_empty(), "{what}: no keys");
    let bad: Vec<_> = all
        .iter()
        .filter(|p| {
            let k = p.rsplit('.').next().unwrap_or(p);
            !k.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(bad.is_empty(), "{what}: keys not in snake_case: {bad:?}");
}

#[test]
fn status_shows_latency_working_set_backlog_and_health() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: [
            "--metrics-listen",
            "",
            "--ssd-model",
            "ssd-sata",
            "--hdd-model",
            "hdd-7200",
        ]
        .map(String::from)
        .to_vec(),
        ..DaemonOptions::small()
    });
    let sock: PathBuf = d.data_dir().join("control.sock");
    run_ok(tool("qemu-io").args(["-f", "raw", "-c", "write -P 0x5a 0 4M", &d.uri()]));
    for _ in 0..3 {
        run_ok(tool("qemu-io").args(["-f", "raw", "-c", "read -P 0x5a 0 4M", &d.uri()]));
    }
    // A pin makes the migrator plan and move.
    ctl(&sock, &["pin", "0-2MiB", "--tier", "hdd"]);
    let mut st = Value::Null;
    let moved = wait_until(Duration::from_secs(20), || {
        st = json(&sock, &["status"]);
        st["migration"]["progress"]["planned"].as_u64() >= Some(2)
            && st["migration"]["demotions"].as_u64() >= Some(2)
    });
    assert!(moved, "the pin was not planned and done: {st}");

    assert_eq!(st["health"]["state"], "ok", "{st}");
    assert_eq!(st["health"]["problems"], Value::Array(vec![]));

    // Latency: foreground SSD reads and writes, background HDD writes (the
    // demotions), each with p50 <= p99 and the modelled drive's scale.
    let lat = |tier: usize, op: &str, class: &str| -> Value {
        st["tiers"][tier]["latency"]
            .as_array()
            .expect("latency rows")
            .iter()
            .find(|l| l["op"] == op && l["class"] == class)
            .cloned()
            .unwrap_or_else(|| panic!("no {op}/{class} row: {st}"))
    };
    for (tier, op, class) in [
        (0, "write", "foreground"),
        (0, "read", "foreground"),
        (1, "write", "background"),
    ] {
        let l = lat(tier, op, class);
        let t = &l["total"];
        assert!(t["ops"].as_u64() >= Some(1), "{l}");
        let (p50, p99) = (
            t["p50_secs"].as_f64().expect("p50"),
            t["p99_secs"].as_f64().expect("p99"),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 < 10.0, "{l}");
    }
    // Demotions' HDD writes are background, not foreground: no foreground
    // HDD write happened (every user write landed on the SSD).
    assert_eq!(lat(1, "write", "foreground")["total"]["ops"], 0, "{st}");
    let util = st["tiers"][0]["utilisation"].as_f64().expect("utilisation");
    assert!((0.0..=1.0).contains(&util), "{util}");
    assert!(st["tiers"][0]["busy_secs"].as_f64() > Some(0.0));

    // The working set against the SSD's room.
    let ws = &st["working_set"];
    let es = st["extent_size"].as_u64().expect("extent size");
    let ssd_slots = st["tiers"][0]["capacity_bytes"].as_u64().expect("cap") / es;
    let reserve = st["reserve"]["target_bytes"].as_u64().expect("reserve") / es;
    assert_eq!(
        ws["ssd_usable_bytes"].as_u64(),
        Some((ssd_slots - reserve) * es),
        "{ws}"
    );
    assert!(ws["hot_bytes"].as_u64() <= Some(4 * MIB), "{ws}");
    assert!(
        ws["hot_on_ssd_bytes"].as_u64() <= ws["hot_bytes"].as_u64(),
        "{ws}"
    );
    assert!(ws["active_bytes"].as_u64() >= Some(2 * MIB), "{ws}");
    assert_eq!(ws["fits"], true);

    let text = ctl(&sock, &["status"]);
    for want in [
        "health: ok",
        "device latency",
        "p99",
        "working set:",
        "the hot data fits",
        "migration backlog:",
        "for the bandwidth budget",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
}

#[test]
fn every_json_output_uses_snake_case_keys() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), "".into()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    run_ok(tool("qemu-io").args(["-f", "raw", "-c", "write -P 1 0 2M", &d.uri()]));
    for args in [
        &["status"][..],
        &["placement", "0-4MiB"],
        &["explain", "0"],
        &["top", "--hot"],
        &["reserve", "set", "4MiB"],
        &["migrate", "pause"],
    ] {
        assert_snake(&format!("tierctl {args:?}"), &json(&sock, args));
    }
    let ssd = d.data_dir().join("ssd.img").display().to_string();
    assert_snake("tierctl device", &json(&sock, &["device", &ssd]));
    // tierd format --json on fresh images.
    let dir = tempdir();
    let out = run_ok(
        Command::new(tierd_bin())
            .args(["format", "--json", "--data-dir"])
            .arg(dir.path())
            .args(["--ssd-size", "64MiB", "--hdd-size", "256MiB"]),
    );
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("format --json: {e}: {out}"));
    assert_snake("tierd format", &v);
}
