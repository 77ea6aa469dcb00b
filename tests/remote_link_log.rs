//! What the log says about the link to a remote capacity tier (nbdkit on
//! 127.0.0.1): a clean exit of `tierd serve` and a successful `tierd
//! format` disconnect politely and log no loss of the connection, and a
//! reconnection after the remote was away reports how long it was down,
//! measured from when the connection was lost, not from the next request.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

/// Pinned to the HDD (the remote).
const HDD_AT: u64 = 100 * MIB;
const LEN: u64 = 4 * MIB;

/// A volume on `remote` formatted by `tierd format`; the `tierd serve`
/// daemon of it and what `format` printed.
fn daemon_on(remote: &Nbdkit, dir: &Path) -> (Daemon, String) {
    let ssd = dir.join("ssd.img");
    sparse_file(&ssd, 64 * MIB);
    let args = vec![
        "--ssd".to_string(),
        ssd.display().to_string(),
        "--hdd".into(),
        remote.uri(),
        "--meta-dir".into(),
        dir.join("meta").display().to_string(),
    ];
    let mut cmd = Command::new(tierd_bin());
    cmd.args(["format", "--reserve", "16MiB"])
        .args(&args)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1");
    let what = describe(&cmd);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", show(&what, &out));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut opts = DaemonOptions::small();
    opts.extra_args = args;
    opts.extra_args
        .extend(["--remote-timeout".into(), "20s".into()]);
    let d = Daemon::start_with(opts);
    run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(d.control_socket())
            .args(["pin", "--tier", "hdd", &format!("{HDD_AT}+{LEN}")]),
    );
    (d, text)
}

fn qemu_io(d: &Daemon, cmd: &str) {
    let out = run_ok(tool("qemu-io").args(["-f", "raw", "-c", cmd]).arg(d.uri()));
    assert!(!out.contains("failed"), "qemu-io -c {cmd:?}: {out}");
}

/// Whether a log has a WARN line about the remote tier (other warnings,
/// such as a metrics port another test holds, are not this test's).
fn warns_about_the_remote(log: &str) -> bool {
    log.lines()
        .any(|l| l.contains("WARN") && l.contains("remote"))
}

/// A `Duration`'s `Debug` text (`2.0134s`, `381.674µs`, `12ms`) in seconds.
/// (An `Option`'s `Some(…)` around it is read through.)
fn debug_secs(s: &str) -> Option<f64> {
    let s = s
        .strip_prefix("Some(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(s);
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "µs" | "us" => 1e-6,
        "ns" => 1e-9,
        _ => return None,
    };
    Some(n * scale)
}

#[test]
fn a_clean_exit_and_a_format_log_no_lost_connection() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let remote = Nbdkit::start(&hdd, &[]);
    let (mut d, format) = daemon_on(&remote, dir.path());
    assert!(
        !format.contains("connection to the remote capacity tier lost")
            && !warns_about_the_remote(&format),
        "a successful format warns about the remote:\n{format}"
    );
    qemu_io(&d, &format!("write -P 7 {HDD_AT} {LEN}"));
    d.terminate();
    let log = d.log();
    assert!(log.contains("volume flushed; bye"), "{log}");
    assert!(
        !log.contains("connection to the remote capacity tier lost"),
        "a clean exit logs a lost connection:\n{log}"
    );
    assert!(
        !warns_about_the_remote(&log),
        "a clean exit warns about the remote:\n{log}"
    );
}

#[test]
fn down_for_counts_from_the_loss_of_the_connection() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let mut remote = Nbdkit::start(&hdd, &[]);
    let (d, _) = daemon_on(&remote, dir.path());
    qemu_io(&d, &format!("write -P 9 {HDD_AT} {LEN}"));
    remote.kill();
    assert!(
        wait_until(Duration::from_secs(10), || d
            .log()
            .contains("connection to the remote capacity tier lost")),
        "the loss of the remote is logged when it happens:\n{}",
        d.log()
    );
    // Away for 2 s with no request for it; then a read that needs it.
    let away = Duration::from_secs(2);
    std::thread::sleep(away);
    remote.spawn();
    qemu_io(&d, &format!("read -P 9 {HDD_AT} {LEN}"));
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("reconnected to the remote capacity tier"))
        .unwrap_or_else(|| panic!("no reconnection logged:\n{log}"));
    let value = line
        .split("down_for=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no down_for in {line:?}"));
    let secs = debug_secs(value).unwrap_or_else(|| panic!("down_for={value} is not a duration"));
    assert!(
        secs >= away.as_secs_f64(),
        "the remote was away for over {away:?} but the log says down_for={value}: {line}"
    );
}
