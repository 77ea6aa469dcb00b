//! `tierctl` against the real daemon: every command in text and `--json`
//! form (the JSON parsed and its fields checked against I/O done over NBD
//! with qemu-io), pins honoured by the migrator, and the errors that tell
//! the operator what to do (no daemon, bad range, impossible reserve).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use serde_json::Value;

fn control(d: &Daemon) -> PathBuf {
    d.data_dir().join("control.sock")
}

fn ctl(sock: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tierctl_bin());
    c.arg("--control").arg(sock).args(args).env("NO_COLOR", "1");
    run(&mut c)
}

/// Run tierctl, assert success, return stdout.
fn ok(sock: &Path, args: &[&str]) -> String {
    let out = ctl(sock, args);
    assert!(
        out.status.success(),
        "{}",
        show(&format!("tierctl {}", args.join(" ")), &out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run tierctl with `--json`, assert success, parse stdout.
fn json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let text = ok(sock, &a);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("tierctl {a:?}: not JSON ({e}): {text}"))
}

/// Run tierctl, assert failure, return stderr.
fn fails(sock: &Path, args: &[&str]) -> String {
    let out = ctl(sock, args);
    assert!(
        !out.status.success(),
        "tierctl {args:?} should fail\n{}",
        show("tierctl", &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn no_daemon_says_what_to_do() {
    let dir = tempdir();
    let sock = dir.path().join("control.sock");
    let err = fails(&sock, &["status"]);
    assert!(err.contains("no daemon at"), "{err}");
    assert!(err.contains(&sock.display().to_string()), "{err}");
    assert!(err.contains("is tierd running?"), "{err}");
    // Without --control: $TIERD_CONTROL, then the local default, then the
    // system daemon's socket, then the daemons registered in the runtime
    // directory (an empty one here), each named with why it did not answer.
    let runtime = tempdir();
    let out = run(Command::new(tierctl_bin())
        .arg("status")
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("TIERD_CONTROL", &sock));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let at = |p: &str| {
        err.find(p)
            .unwrap_or_else(|| panic!("{p} not named in: {err}"))
    };
    let (env, local, system, registry) = (
        at(&sock.display().to_string()),
        at("tierd-data/control.sock"),
        at("/run/tierd/control.sock"),
        at(&runtime.path().join("tierd").display().to_string()),
    );
    assert!(
        env < local && local < system && system < registry,
        "search order: {err}"
    );
    assert!(err.contains("no such socket"), "{err}");
}

#[test]
fn finds_the_local_socket_when_tierd_control_is_stale() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), "".into()],
        ..DaemonOptions::small()
    });
    // A directory whose tierd-data/control.sock is the daemon's socket.
    let cwd = tempdir();
    std::fs::create_dir(cwd.path().join("tierd-data")).expect("mkdir");
    std::os::unix::fs::symlink(control(&d), cwd.path().join("tierd-data/control.sock"))
        .expect("symlink");
    let out = run(Command::new(tierctl_bin())
        .args(["status", "--json"])
        .current_dir(cwd.path())
        .env("TIERD_CONTROL", cwd.path().join("gone.sock")));
    assert!(out.status.success(), "{}", show("tierctl status", &out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert!(v["capacity_bytes"].as_u64().is_some(), "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gone.sock")
            && err.contains("did not answer")
            && err.contains("using tierd-data/control.sock"),
        "the stale TIERD_CONTROL is reported: {err}"
    );
}

#[test]
fn a_reader_that_goes_away_ends_tierctl_quietly() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), "".into()],
        ..DaemonOptions::small()
    });
    for args in [
        &["status"][..],
        &["placement", "--map"],
        &["top", "--hot", "-n", "500"],
    ] {
        let mut child = Command::new(tierctl_bin())
            .arg("--control")
            .arg(control(&d))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tierctl");
        // Close the only read end before tierctl has its answer to print.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("tierctl ends");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "tierctl {args:?}: {:?} {err}",
            out.status
        );
        assert!(err.is_empty(), "tierctl {args:?} printed: {err}");
    }
}

#[test]
fn every_command_text_and_json() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), "".into()],
        ..DaemonOptions::small()
    });
    let sock = control(&d);
    // The socket is private to the daemon's user.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&sock)
            .expect("control socket exists")
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "control socket mode {mode:o}");

    // 4 MiB at offset 0 through NBD.
    run_ok(tool("qemu-io").args(["-f", "raw", "-c", "write -P 0xab 0 4M", &d.uri()]));

    // status
    let text = ok(&sock, &["status"]);
    assert!(
        text.contains("capacity") && text.contains("reserve"),
        "{text}"
    );
    let st = json(&sock, &["status"]);
    let size: u64 = run_ok(tool("nbdinfo").args(["--size", &d.uri()]))
        .trim()
        .parse()
        .expect("size");
    assert_eq!(st["capacity_bytes"].as_u64(), Some(size));
    assert_eq!(st["extent_size"].as_u64(), Some(MIB));
    assert_eq!(st["tiers"][0]["tier"], "ssd");
    assert_eq!(st["tiers"][1]["tier"], "hdd");
    let mapped = st["tiers"][0]["extents"].as_u64().unwrap_or(0)
        + st["tiers"][1]["extents"].as_u64().unwrap_or(0);
    assert_eq!(mapped, 4, "{st}");
    assert!(st["tiers"][0]["write_bytes"].as_u64().unwrap_or(0) >= 4 * MIB);
    assert_eq!(st["migration"]["paused"], false);
    assert!(st["connections"].is_u64());
    assert!(st["reserve"]["target_bytes"].as_u64().unwrap_or(0) > 0);

    // placement
    let p = json(&sock, &["placement", "0-8MiB"]);
    let runs = p["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{p}");
    assert_eq!(runs[0]["offset"].as_u64(), Some(0));
    assert_eq!(runs[0]["len"].as_u64(), Some(4 * MIB));
    assert_eq!(runs[0]["where"], "ssd");
    assert_eq!(runs[1]["where"], "unmapped");
    assert_eq!(runs[1]["len"].as_u64(), Some(4 * MIB));
    let whole = json(&sock, &["placement"]);
    let total: u64 = whole["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|r| r["len"].as_u64())
        .sum();
    assert_eq!(total, size, "runs cover the volume");
    let text = ok(&sock, &["placement", "0+8MiB"]);
    assert!(text.contains("ssd") && text.contains("unmapped"), "{text}");
    let map = ok(&sock, &["placement", "--map", "--cells", "64"]);
    assert!(map.contains("legend"), "{map}");
    assert!(map.contains('S') && map.contains('.'), "{map}");
    // The map's cells are counted by the daemon: they agree with the runs.
    let cells = json(&sock, &["placement", "--map", "--cells", "64"]);
    let per = cells["cells"]["per_cell"].as_u64().expect("per_cell");
    let counts = cells["cells"]["counts"].as_array().expect("counts");
    assert!(
        cells["runs"].as_array().is_some_and(Vec::is_empty),
        "{cells}"
    );
    let es = whole["extent_size"].as_u64().expect("extent_size");
    let mut from_runs = vec![[0u64; 3]; counts.len()];
    for r in whole["runs"].as_array().expect("runs") {
        let k = match r["where"].as_str() {
            Some("ssd") => 0,
            Some("hdd") => 1,
            _ => 2,
        };
        let (a, n) = (
            r["offset"].as_u64().unwrap_or(0) / es,
            r["len"].as_u64().unwrap_or(0) / es,
        );
        for e in a..a + n {
            from_runs[(e / per) as usize][k] += 1;
        }
    }
    let got: Vec<[u64; 3]> = counts
        .iter()
        .map(|c| [0, 1, 2].map(|i| c[i].as_u64().unwrap_or(u64::MAX)))
        .collect();
    assert_eq!(got, from_runs, "{cells}");

    // explain
    let e = json(&sock, &["explain", "1MiB"]);
    assert_eq!(e["extent"].as_u64(), Some(1));
    assert_eq!(e["tier"], "ssd");
    assert_eq!(e["written_blocks"], e["blocks"]);
    assert!(e["why"].as_str().is_some_and(|w| !w.is_empty()));
    let e = json(&sock, &["explain", "100MiB"]);
    assert_eq!(e["tier"], Value::Null);
    let text = ok(&sock, &["explain", "0"]);
    assert!(text.contains("extent 0") && text.contains("why:"), "{text}");
    let err = fails(&sock, &["explain", "1TiB"]);
    assert!(err.contains("outside the volume"), "{err}");

    // top
    let t = json(&sock, &["top", "--hot", "-n", "2"]);
    assert_eq!(t.as_array().map(Vec::len), Some(2), "{t}");
    let t = json(&sock, &["top", "--cold", "-n", "10"]);
    assert_eq!(
        t.as_array().map(Vec::len),
        Some(4),
        "only 4 extents are mapped: {t}"
    );
    let text = ok(&sock, &["top", "--cold"]);
    assert!(text.contains("extent") && text.contains("heat"), "{text}");
    let err = fails(&sock, &["top"]);
    assert!(err.contains("--hot") && err.contains("--cold"), "{err}");

    // pin to the HDD: the migrator is woken and moves both extents now.
    let a = json(&sock, &["pin", "0-2MiB", "--tier", "hdd"]);
    assert!(
        a["done"].as_str().is_some_and(|s| s.contains("pinned")),
        "{a}"
    );
    let moved = wait_until(Duration::from_secs(20), || {
        let p = json(&sock, &["placement", "0-4MiB"]);
        p["runs"][0]["where"] == "hdd" && p["runs"][0]["len"].as_u64() == Some(2 * MIB)
    });
    assert!(
        moved,
        "pinned extents did not move: {}",
        ok(&sock, &["placement", "0-4MiB"])
    );
    let e = json(&sock, &["explain", "0"]);
    assert_eq!(e["pin"], "hdd");
    assert_eq!(e["last_move"]["reason"], "pin");
    // The data moved intact.
    run_ok(tool("qemu-io").args(["-f", "raw", "-c", "read -P 0xab 0 4M", &d.uri()]));
    let text = ok(&sock, &["unpin", "0-2MiB"]);
    assert!(text.contains("unpinned"), "{text}");
    assert_eq!(json(&sock, &["explain", "0"])["pin"], Value::Null);
    let err = fails(&sock, &["pin", "5MiB-1MiB", "--tier", "ssd"]);
    assert!(err.contains("ends before it starts"), "{err}");
    let err = fails(&sock, &["pin", "0", "--tier", "ssd"]);
    assert!(err.contains("START-END"), "{err}");

    // migrate
    let a = json(&sock, &["migrate", "pause"]);
    assert_eq!(a["paused"], true);
    assert_eq!(json(&sock, &["status"])["migration"]["paused"], true);
    let err = fails(&sock, &["migrate", "now"]);
    assert!(err.contains("resume"), "{err}");
    let text = ok(&sock, &["migrate", "resume"]);
    assert!(text.contains("resumed"), "{text}");
    assert_eq!(json(&sock, &["status"])["migration"]["paused"], false);
    let a = json(&sock, &["migrate", "now"]);
    assert!(
        a["done"].as_str().is_some_and(|s| s.contains("round")),
        "{a}"
    );

    // reserve
    let a = json(&sock, &["reserve", "set", "8MiB"]);
    assert_eq!(a["reserve_target_bytes"].as_u64(), Some(8 * MIB));
    assert_eq!(
        json(&sock, &["status"])["reserve"]["target_bytes"].as_u64(),
        Some(8 * MIB)
    );
    let text = ok(&sock, &["reserve", "set", "0"]);
    assert!(text.contains("reserve target set to 0 B"), "{text}");
    let err = fails(&sock, &["reserve", "set", "1TiB"]);
    assert!(err.contains("more than the SSD"), "{err}");

    // device (reads the image directly, no daemon needed)
    let ssd = d.data_dir().join("ssd.img");
    let dev = json(&sock, &["device", &ssd.display().to_string()]);
    assert_eq!(dev["tierd"], true);
    assert_eq!(dev["role"], "ssd");
    assert_eq!(dev["volume_id"], st["volume_id"]);
    let text = ok(&sock, &["device", &ssd.display().to_string()]);
    assert!(text.contains("tierd ssd device"), "{text}");
}
