//! Configuration through the real binary: precedence file < TIERD_* env <
//! flag (observed through which control socket answers), a bad value and
//! an unknown key in any table refused with the key named, SIGHUP applying `[migrate]` live (observed
//! through `tierctl status --json`) and naming what needs a restart, and the
//! systemd readiness protocol (READY=1, STOPPING=1 on NOTIFY_SOCKET).

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn status(sock: &Path) -> Value {
    let out = run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .args(["status", "--json"]));
    assert!(out.status.success(), "{}", show("tierctl status", &out));
    serde_json::from_slice(&out.stdout).expect("status is JSON")
}

fn answers(sock: &Path) -> bool {
    run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .arg("status"))
    .status
    .success()
}

fn opts(extra: &[&str], env: &[(&str, &str)]) -> DaemonOptions {
    let mut extra_args = vec!["--metrics-listen".to_string(), String::new()];
    extra_args.extend(extra.iter().map(|s| s.to_string()));
    DaemonOptions {
        extra_args,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..DaemonOptions::small()
    }
}

#[test]
fn precedence_file_env_flag() {
    let dir = tempdir();
    let (a, b, c) = (
        dir.path().join("file.sock"),
        dir.path().join("env.sock"),
        dir.path().join("flag.sock"),
    );
    let cfg = dir.path().join("tierd.toml");
    write(
        &cfg,
        format!("control = \"{}\"\n[migrate]\nmax-moves = 7\n", a.display()).as_bytes(),
    );
    let cfgs = cfg.display().to_string();

    // File only.
    let mut d = Daemon::start_with(opts(&["--config", &cfgs], &[]));
    assert!(answers(&a), "the file's control socket does not answer");
    assert_eq!(status(&a)["migration"]["config"]["max_moves"], 7);
    d.terminate();
    assert!(!a.exists(), "the control socket is removed at shutdown");

    // File < env (TIERD_CONTROL is tierctl's; the daemon's key is TIERD_CONTROL too).
    let bs = b.display().to_string();
    let mut d = Daemon::start_with(opts(
        &["--config", &cfgs],
        &[("TIERD_CONTROL", &bs), ("TIERD_MIGRATE__MAX_MOVES", "9")],
    ));
    assert!(answers(&b), "the env's control socket does not answer");
    assert!(
        !a.exists(),
        "the file's socket was created although env overrides it"
    );
    assert_eq!(status(&b)["migration"]["config"]["max_moves"], 9);
    d.terminate();

    // File < env < flag.
    let cs = c.display().to_string();
    let d = Daemon::start_with(opts(
        &["--config", &cfgs, "--control", &cs],
        &[("TIERD_CONTROL", &bs)],
    ));
    assert!(answers(&c), "the flag's control socket does not answer");
    assert!(!a.exists() && !b.exists(), "only the flag's socket exists");
    drop(d);
}

#[test]
fn bad_values_name_the_key() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let out = run(Command::new(tierd_bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .args(["--metrics-listen", "nowhere"]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics-listen"), "{err}");

    let out = run(Command::new(tierd_bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .env("TIERD_METRICS_LISTEN", "10.0.0.1"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics-listen"), "{err}");

    let cfg = dir.path().join("bad.toml");
    write(&cfg, b"[migrate]\nbandwidth = \"lots\"\n");
    let out = run(Command::new(tierd_bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&cfg));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("migrate.bandwidth") && err.contains("lots"),
        "{err}"
    );
    assert!(!data.join("meta").exists(), "nothing was formatted");
}

#[test]
fn unknown_keys_in_tables_are_refused_and_named() {
    let dir = tempdir();
    let data = dir.path().join("data");
    for (table, key) in [
        ("heat", "heat.no-such-key"),
        ("migrate", "migrate.no-such-key"),
    ] {
        let cfg = dir.path().join(format!("{table}.toml"));
        write(&cfg, format!("[{table}]\nno-such-key = 1\n").as_bytes());
        let out = run(Command::new(tierd_bin())
            .arg("serve")
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&cfg));
        assert!(!out.status.success(), "{}", show("tierd serve", &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{err}");
    }
    assert!(!data.join("meta").exists(), "nothing was formatted");
}

#[test]
fn sighup_reloads_live_knobs() {
    let dir = tempdir();
    let cfg = dir.path().join("tierd.toml");
    write(&cfg, b"[migrate]\nbandwidth = \"64MiB\"\nmax-moves = 5\n");
    let cfgs = cfg.display().to_string();
    let mut d = Daemon::start_with(opts(&["--config", &cfgs], &[]));
    let sock = d.data_dir().join("control.sock");
    let st = status(&sock);
    assert_eq!(st["migration"]["config"]["bandwidth"], "64MiB");
    assert_eq!(st["migration"]["config"]["max_moves"], 5);

    write(
        &cfg,
        b"[migrate]\nbandwidth = \"32MiB\"\nmax-moves = 3\n[heat]\nhalf-life = \"10m\"\n",
    );
    let pid = libc::pid_t::try_from(d.pid()).expect("pid fits");
    // SAFETY: kill(2) on our own running child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let applied = wait_until(Duration::from_secs(10), || {
        status(&sock)["migration"]["config"]["bandwidth"] == "32MiB"
    });
    assert!(applied, "SIGHUP did not apply [migrate]:\n{}", d.log());
    assert_eq!(status(&sock)["migration"]["config"]["max_moves"], 3);
    let log = d.log();
    assert!(log.contains("configuration reloaded"), "{log}");
    assert!(
        log.contains("take effect only after a restart") && log.contains("heat"),
        "the restart-only [heat] change is not reported:\n{log}"
    );
    // A broken file keeps the old configuration and says so.
    write(&cfg, b"[migrate]\nbandwidth = \"lots\"\n");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    assert!(
        wait_until(Duration::from_secs(10), || d
            .log()
            .contains("configuration not reloaded")),
        "{}",
        d.log()
    );
    assert_eq!(status(&sock)["migration"]["config"]["bandwidth"], "32MiB");
    assert!(d.is_running());
    d.terminate();
}

/// A reload that changes a restart-only key outside `[heat]` says it needs
/// a restart, and nothing about the `[heat]` half-life it did not touch.
#[test]
fn a_restart_only_change_is_reported_without_a_word_about_heat() {
    let dir = tempdir();
    let cfg = dir.path().join("tierd.toml");
    write(&cfg, b"export-name = \"a\"\n");
    let cfgs = cfg.display().to_string();
    let mut d = Daemon::start_with(opts(&["--config", &cfgs], &[]));
    write(&cfg, b"export-name = \"b\"\n");
    let pid = libc::pid_t::try_from(d.pid()).expect("pid fits");
    // SAFETY: kill(2) on our own running child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    assert!(
        wait_until(Duration::from_secs(10), || d
            .log()
            .contains("take effect only after a restart")),
        "the restart-only change of export-name is not reported:\n{}",
        d.log()
    );
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("take effect only after a restart"))
        .unwrap_or_default();
    assert!(line.contains("export-name"), "{line}");
    assert!(
        !line.contains("heat") && !line.contains("half-life"),
        "a change of export-name is reported with a word about [heat]: {line}"
    );
    d.terminate();
}

#[test]
fn tells_systemd_ready_status_watchdog_and_stopping() {
    let dir = tempdir();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).expect("binding the notify socket");
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let ps = path.display().to_string();
    let cfg = dir.path().join("tierd.toml");
    write(&cfg, b"[migrate]\nmax-moves = 5\n");
    let cfgs = cfg.display().to_string();
    // A watchdog of 400 ms: pings every 200 ms.
    let mut d = Daemon::start_with(opts(
        &["--config", &cfgs],
        &[("NOTIFY_SOCKET", &ps), ("WATCHDOG_USEC", "400000")],
    ));
    let mut buf = [0u8; 512];
    let mut recv = || {
        let n = sock.recv(&mut buf).expect("a notification within 20 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    let msg = recv();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg:?}");
    // A reload the moment tierd is ready does not kill it: SIGHUP is
    // watched before READY=1.
    let pid = libc::pid_t::try_from(d.pid()).expect("pid fits");
    // SAFETY: kill(2) on our own running child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    // Ready means listening: the control socket answers.
    assert!(answers(&d.data_dir().join("control.sock")));
    assert!(d.is_running(), "a SIGHUP right after READY=1 killed tierd");
    // Then the health in the status line, and watchdog pings.
    let mut seen = Vec::new();
    while !(seen
        .iter()
        .any(|m: &String| m.starts_with("STATUS=serving; health ok"))
        && seen.iter().filter(|m| *m == "WATCHDOG=1").count() >= 3)
    {
        seen.push(recv());
        assert!(seen.len() < 100, "no status line or pings: {seen:?}");
    }
    // A reload says RELOADING=1 with the monotonic time Type=notify-reload
    // wants, then READY=1 with how it went.
    let reload = |recv: &mut dyn FnMut() -> String| -> (String, String) {
        // SAFETY: kill(2) on our own running child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
        let mut got = Vec::new();
        loop {
            let m = recv();
            if m.starts_with("RELOADING=1") {
                got.push(m);
            } else if m.starts_with("READY=1") && !got.is_empty() {
                return (got.remove(0), m);
            }
            assert!(got.len() < 100);
        }
    };
    let (start, end) = reload(&mut recv);
    let usec: u64 = start
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no MONOTONIC_USEC: {start:?}"));
    assert!(usec > 0);
    assert!(end.contains("STATUS=serving; health ok"), "{end:?}");
    write(&cfg, b"[migrate]\nmax-moves = \"many\"\n");
    let (_, end) = reload(&mut recv);
    assert!(
        end.contains("STATUS=serving; the last reload FAILED") && end.contains("max-moves"),
        "{end:?}"
    );
    d.terminate();
    loop {
        let m = recv();
        if m == "STOPPING=1" {
            break;
        }
        assert!(
            m == "WATCHDOG=1" || m.starts_with("STATUS="),
            "unexpected notification before STOPPING=1: {m:?}"
        );
    }
}
