//! `tierd trace replay`: a generated trace replayed through a real `tierd
//! serve` (on plain images, and on modelled drives) over two NBD
//! connections: every request answered without error, the layout's filled
//! extents mapped and the footprint on the HDD at the start, the data the
//! trace wrote read back (`--verify`), the daemon's counters in the
//! report; and the refusals: a volume that holds data (left as it was), a
//! footprint the volume has no room for, a bad fill, an unreachable
//! address, a file that is not a trace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// `tierd trace generate SHAPE` into `dir`, small and short.
fn generate(dir: &Path, shape: &str, region: &str, requests: u32) -> PathBuf {
    let out = dir.join(format!("{shape}-{region}.trace"));
    run_ok(
        Command::new(tierd_bin())
            .args(["trace", "generate", shape])
            .arg(&out)
            .args(["--region", region, "--requests", &requests.to_string()])
            .args(["--rate", "2000", "--seed", "5"]),
    );
    out
}

/// `tierd trace replay TRACE` against `d` with `args`.
fn replay(d: &Daemon, trace: &Path, args: &[&str]) -> Output {
    run_timeout(
        Command::new(tierd_bin())
            .args(["trace", "replay"])
            .arg(trace)
            .args(["--nbd", &d.uri(), "--control"])
            .arg(d.control_socket())
            .args(args)
            .env("NO_COLOR", "1"),
        std::time::Duration::from_secs(300),
    )
}

fn replay_json(d: &Daemon, trace: &Path, args: &[&str]) -> Value {
    let out = replay(d, trace, args);
    assert!(out.status.success(), "{}", show("tierd trace replay", &out));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", show("tierd trace replay", &out)))
}

fn num(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path} missing from {v:#}"))
}

/// The placement of `[offset, offset + len)` from `tierctl placement`.
fn placement(d: &Daemon, offset: u64, len: u64) -> Vec<(u64, u64, String)> {
    let out = run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(d.control_socket())
            .args(["--json", "placement", &format!("{offset}+{len}")]),
    );
    let v: Value = serde_json::from_str(&out).expect("placement JSON");
    v["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["offset"].as_u64().expect("offset"),
                r["len"].as_u64().expect("len"),
                r["where"].as_str().expect("where").to_string(),
            )
        })
        .collect()
}

/// What every successful replay must show.
fn check_report(d: &Daemon, r: &Value, spread_by: &str) {
    let requests = num(r, "/requests");
    assert!(requests > 0.0, "{r:#}");
    assert_eq!(num(r, "/measured/counts/answered"), requests, "{r:#}");
    assert_eq!(num(r, "/errors"), 0.0, "{r:#}");
    assert_eq!(num(r, "/connections"), 2.0);
    assert_eq!(r["spread_by"], spread_by);
    let hit = num(r, "/read_hit_share");
    assert!((0.0..=1.0).contains(&hit), "read_hit_share {hit}");
    for k in [
        "read_mean_us",
        "read_p50_us",
        "read_p99_us",
        "write_mean_us",
        "write_p50_us",
        "write_p99_us",
        "hdd_busy_s",
        "moved_bytes",
        "issue_late_p99_us",
        "socket_wait_p99_us",
    ] {
        let x = num(r, &format!("/{k}"));
        assert!(x.is_finite() && x >= 0.0, "{k} = {x}");
    }
    assert!(num(r, "/read_p99_us") >= num(r, "/read_p50_us"));
    assert!(num(r, "/read_p50_us") > 0.0 && num(r, "/write_p50_us") > 0.0);
    // The layout: the footprint past the SSD's slots, on the HDD when the
    // replay started, and every extent below `filled` mapped (the trace
    // has no trims).
    let es = num(r, "/layout/extent_size") as u64;
    let (base, footprint, filled) = (
        num(r, "/layout/base") as u64,
        num(r, "/layout/footprint") as u64,
        num(r, "/layout/filled") as u64,
    );
    assert_eq!(base, num(r, "/layout/ssd_slots") as u64);
    assert!(base + footprint <= filled, "{r:#}");
    let fill = num(r, "/fill");
    assert!((fill - 0.7).abs() < 0.01, "fill {fill}");
    assert_eq!(num(r, "/prepared/footprint_on_hdd") as u64, footprint);
    let runs = placement(d, 0, filled * es);
    let mapped: u64 = runs.iter().filter(|r| r.2 != "unmapped").map(|r| r.1).sum();
    assert_eq!(mapped, filled * es, "{runs:?}");
    let past = placement(d, filled * es, es);
    assert!(past.iter().all(|r| r.2 == "unmapped"), "{past:?}");
    // --verify read back the footprint and found every byte in place.
    assert!(num(r, "/verify/sectors") >= (footprint * es / 512) as f64 * 0.5);
    assert_eq!(num(r, "/verify/wrong"), 0.0, "{r:#}");
}

#[test]
fn a_generated_trace_replays_through_the_daemon_and_reads_back() {
    let d = Daemon::start_with(DaemonOptions::small());
    let dir = tempdir();
    // Reads and writes 67/33, and FUA writes to a log from a connection
    // of its own: spread by the trace's connections.
    let trace = generate(dir.path(), "database", "32MiB", 3000);
    let r = replay_json(&d, &trace, &["--json", "--verify", "--connections", "2"]);
    check_report(&d, &r, "trace-connection");
    assert!(num(&r, "/measured/counts/writes") > 500.0, "{r:#}");
    assert_eq!(r["counters"]["busy_source"], "device");
    assert_eq!(r["prepared"]["cleared"], false);
    // Again, now over a volume with data: only with --force, which clears
    // it first; the text report says the same things.
    let out = replay(&d, &trace, &["--force", "--speed", "4"]);
    assert!(out.status.success(), "{}", show("replay --force", &out));
    let text = String::from_utf8_lossy(&out.stdout);
    for k in [
        "read-hit",
        "busy",
        "moved",
        "sent late",
        "socket wait",
        "4x",
        "errors",
    ] {
        assert!(text.contains(k), "{k} missing from:\n{text}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("trimming the volume"), "{err}");
    assert!(err.contains("settled"), "progress on stderr: {err}");
}

#[test]
fn a_replay_on_modelled_drives_reports_the_model_hdd_time() {
    let mut opts = DaemonOptions::small();
    opts.extra_args = ["--ssd-model", "ssd-sata", "--hdd-model", "hdd-5400"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let d = Daemon::start_with(opts);
    let dir = tempdir();
    let trace = generate(dir.path(), "zipf", "48MiB", 3000);
    // One connection in the trace: round-robin over the default two.
    let r = replay_json(&d, &trace, &["--json", "--verify"]);
    check_report(&d, &r, "round-robin");
    assert_eq!(r["counters"]["busy_source"], "model", "{r:#}");
    // The footprint starts on the HDD: the first reads of it are misses,
    // which the modelled disk spends time on.
    assert!(num(&r, "/read_hit_share") < 1.0, "{r:#}");
    assert!(num(&r, "/hdd_busy_s") > 0.0, "{r:#}");
}

#[test]
fn bad_input_is_refused_clearly_and_a_volume_with_data_is_left_alone() {
    let d = Daemon::start_with(DaemonOptions::small());
    let dir = tempdir();
    let trace = generate(dir.path(), "zipf", "16MiB", 500);
    // Data on the volume: refused without --force, and still there.
    let data = random_bytes(8 << 20, 11);
    let src = dir.path().join("data.bin");
    write(&src, &data);
    run_ok(tool("nbdcopy").arg(&src).arg(d.uri()));
    let out = replay(&d, &trace, &[]);
    assert!(!out.status.success(), "{}", show("replay over data", &out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already holds data") && err.contains("--force"),
        "{err}"
    );
    assert_same_bytes(
        "the volume after a refused replay",
        &first_bytes(&d, dir.path(), data.len()),
        &data,
    );
    // A footprint larger than the HDD part: names --hdd-size.
    let big = generate(dir.path(), "zipf", "1GiB", 20000);
    let err = stderr_of(replay(&d, &big, &["--force"]));
    assert!(
        err.contains("--hdd-size") && err.contains("extents"),
        "{err}"
    );
    // A fill out of range.
    for bad in ["0", "1.5", "nan"] {
        let err = stderr_of(replay(&d, &trace, &["--fill", bad]));
        assert!(err.contains("--fill"), "--fill {bad}: {err}");
    }
    // Nothing listening.
    let port = free_port();
    let err = stderr_of(run(Command::new(tierd_bin())
        .args(["trace", "replay"])
        .arg(&trace)
        .args(["--nbd", &format!("nbd://127.0.0.1:{port}")])));
    assert!(err.contains("cannot reach"), "{err}");
    // Not a trace.
    let junk = dir.path().join("junk.csv");
    write(&junk, b"this is not a trace\n");
    let err = stderr_of(replay(&d, &junk, &[]));
    assert!(err.contains("reading the trace"), "{err}");
    // Still the data it had.
    assert_same_bytes(
        "the volume after the refusals",
        &first_bytes(&d, dir.path(), data.len()),
        &data,
    );
}

/// The volume's first `n` bytes (nbdcopy copies it whole into `dir`).
fn first_bytes(d: &Daemon, dir: &Path, n: usize) -> Vec<u8> {
    use std::io::Read;
    let back = dir.join("back.bin");
    run_ok(tool("nbdcopy").arg(d.uri()).arg(&back));
    let mut buf = vec![0u8; n];
    std::fs::File::open(&back)
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("reading the copy back");
    std::fs::remove_file(&back).expect("removing the copy");
    buf
}

fn stderr_of(out: Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        show("expected a failure", &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}
