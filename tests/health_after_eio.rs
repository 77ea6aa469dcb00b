//! Health reflects I/O errors returned to clients at once: the first
//! `tierctl status` after a client got EIO (a read of data on a remote HDD
//! tier whose reads fail: nbdkit's error filter) says degraded, with how
//! many requests failed, instead of ok until the next one-second sample.

mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

/// Pinned to the HDD (the remote).
const HDD_AT: u64 = 100 * MIB;
const LEN: u64 = 4 * MIB;

fn status(d: &Daemon) -> Value {
    let out = run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(d.control_socket())
            .args(["status", "--json"]),
    );
    serde_json::from_str(&out).expect("status JSON")
}

fn qemu_io(d: &Daemon, cmd: &str) -> (bool, String) {
    let out = run(tool("qemu-io").args(["-f", "raw", "-c", cmd]).arg(d.uri()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && !text.contains("failed"), text)
}

#[test]
fn the_first_status_after_an_eio_is_degraded_with_a_count() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let trigger = dir.path().join("fail");
    let remote = Nbdkit::start(
        &hdd,
        &[
            "--filter=error".into(),
            "error-pread=EIO".into(),
            "error-pread-rate=100%".into(),
            format!("error-pread-file={}", trigger.display()),
        ],
    );
    let mut opts = DaemonOptions::small();
    opts.extra_args = format_on_remote(dir.path(), &remote.uri(), "64MiB", "16MiB", "1MiB");
    opts.extra_args
        .extend(["--remote-timeout".into(), "5s".into()]);
    let d = Daemon::start_with(opts);
    run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(d.control_socket())
            .args(["pin", "--tier", "hdd", &format!("{HDD_AT}+{LEN}")]),
    );
    let (ok, text) = qemu_io(&d, &format!("write -P 0x61 {HDD_AT} {LEN}"));
    assert!(ok, "{text}");
    let st = status(&d);
    assert_eq!(st["health"]["state"], "ok", "before any error: {st}");

    std::fs::write(&trigger, b"").expect("making the remote fail reads");
    let (ok, text) = qemu_io(&d, &format!("read -P 0x61 {HDD_AT} {LEN}"));
    assert!(
        !ok && text.contains("Input/output error"),
        "the read should fail with EIO: {text}"
    );
    let st = status(&d);
    let health = &st["health"];
    assert_eq!(
        health["state"], "degraded",
        "the first status after a client got EIO: {health}"
    );
    let problems = health["problems"].to_string();
    assert!(
        problems.contains("answered with an error since the last status"),
        "health does not count the requests that failed: {problems}"
    );
    std::fs::remove_file(&trigger).expect("letting reads work again");
    let (ok, text) = qemu_io(&d, &format!("read -P 0x61 {HDD_AT} {LEN}"));
    assert!(ok, "{text}");
}
