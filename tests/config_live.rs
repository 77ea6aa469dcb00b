//! Live tunables through the real daemon: `tierctl config show` lists every
//! key with its value, default, whether it can change live and where it
//! comes from; `tierctl config set` changes a live key at once (seen in
//! status and in behaviour), refuses keys that cannot change live and bad
//! values with the key named, and is kept across a restart, over the
//! configuration file, even after kill -9, until `tierctl config reset`; `tierctl reserve set`
//! is kept the same way; `tierctl reload` reports a failed reload with a
//! non-zero exit, keeps the old configuration, and applies a good one.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn ctl(sock: &Path, args: &[&str]) -> Output {
    run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .args(args)
        .env("NO_COLOR", "1"))
}

fn ok(sock: &Path, args: &[&str]) -> String {
    let out = ctl(sock, args);
    assert!(
        out.status.success(),
        "{}",
        show(&format!("tierctl {args:?}"), &out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(sock: &Path, args: &[&str]) -> String {
    let out = ctl(sock, args);
    assert!(
        !out.status.success(),
        "tierctl {args:?} should fail: {}",
        show("tierctl", &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(sock, &a)).expect("JSON")
}

fn setting(sock: &Path, key: &str) -> Value {
    json(sock, &["config", "show"])
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["key"] == key)
        .cloned()
        .unwrap_or_else(|| panic!("no row for {key}"))
}

fn daemon(cfg: &Path) -> Daemon {
    Daemon::start_with(DaemonOptions {
        extra_args: vec![
            "--metrics-listen".into(),
            String::new(),
            "--config".into(),
            cfg.display().to_string(),
        ],
        ..DaemonOptions::small()
    })
}

#[test]
fn config_set_applies_now_survives_restarts_and_resets() {
    let dir = tempdir();
    let cfg = dir.path().join("tierd.toml");
    write(&cfg, b"[migrate]\nbandwidth = \"32MiB\"\nmax-moves = 7\n");
    let mut d = daemon(&cfg);
    let sock: PathBuf = d.data_dir().join("control.sock");

    // show: every key, with sources.
    let rows = json(&sock, &["config", "show"]);
    let n = rows.as_array().map(Vec::len).unwrap_or(0);
    assert!(n > 30, "{rows}");
    let bw = setting(&sock, "migrate.bandwidth");
    assert_eq!(bw["value"], "32MiB");
    assert_eq!(bw["source"], "configuration");
    assert_eq!(bw["live"], true);
    assert_eq!(setting(&sock, "migrate.interval")["source"], "default");
    assert_eq!(setting(&sock, "extent-size")["live"], false);
    let text = ok(&sock, &["config", "show", "--live"]);
    assert!(
        text.contains("migrate.bandwidth") && !text.contains("extent-size"),
        "{text}"
    );

    // set: applied at once.
    let done = ok(&sock, &["config", "set", "migrate.bandwidth", "64MiB"]);
    assert!(
        done.contains("64MiB") && done.contains("was 32MiB"),
        "{done}"
    );
    let st = json(&sock, &["status"]);
    assert_eq!(st["migration"]["config"]["bandwidth"], "64MiB", "{st}");
    assert_eq!(setting(&sock, "migrate.bandwidth")["source"], "tierctl");
    ok(&sock, &["config", "set", "heat.sequential-cutoff", "8MiB"]);
    ok(&sock, &["config", "set", "migrate.promote-margin", "0.5"]);
    let a = json(&sock, &["reserve", "set", "8MiB"]);
    assert_eq!(a["reserve_target_bytes"].as_u64(), Some(8 * MIB));

    // Refusals name the key and say why.
    let err = fails(&sock, &["config", "set", "extent-size", "2MiB"]);
    assert!(
        err.contains("extent-size") && err.contains("formatted"),
        "{err}"
    );
    let err = fails(&sock, &["config", "set", "listen", "127.0.0.1:1"]);
    assert!(err.contains("restart"), "{err}");
    let err = fails(&sock, &["config", "set", "migrate.bandwidth", "lots"]);
    assert!(err.contains("migrate.bandwidth"), "{err}");
    let err = fails(&sock, &["config", "set", "migrate.no-such", "1"]);
    assert!(err.contains("unknown configuration key"), "{err}");
    let err = fails(&sock, &["config", "set", "reserve", "1TiB"]);
    assert!(err.contains("more than the SSD"), "{err}");
    // A refused value changed nothing.
    assert_eq!(
        json(&sock, &["status"])["migration"]["config"]["bandwidth"],
        "64MiB"
    );

    // Killed and started again: the live settings were saved durably and
    // are still in force, over the file.
    d.kill9();
    d.restart();
    let st = json(&sock, &["status"]);
    assert_eq!(st["migration"]["config"]["bandwidth"], "64MiB", "{st}");
    assert_eq!(st["migration"]["config"]["promote_margin"], 0.5, "{st}");
    assert_eq!(
        st["migration"]["config"]["max_moves"], 7,
        "the file's value stays"
    );
    assert_eq!(
        st["reserve"]["target_bytes"].as_u64(),
        Some(8 * MIB),
        "tierctl reserve set is kept: {st}"
    );
    assert_eq!(setting(&sock, "heat.sequential-cutoff")["value"], "8MiB");
    assert!(
        d.log()
            .contains("live settings from `tierctl config set` are in force"),
        "{}",
        d.log()
    );

    // A reload keeps live settings over the file and says so.
    write(&cfg, b"[migrate]\nbandwidth = \"16MiB\"\nmax-moves = 9\n");
    let done = ok(&sock, &["reload"]);
    assert!(
        done.contains("held by live settings") && done.contains("migrate.bandwidth"),
        "{done}"
    );
    let st = json(&sock, &["status"]);
    assert_eq!(st["migration"]["config"]["bandwidth"], "64MiB");
    assert_eq!(
        st["migration"]["config"]["max_moves"], 9,
        "the file's new value applies"
    );

    // reset: the file's value comes back, and stays back after a restart.
    let done = ok(&sock, &["config", "reset", "migrate.bandwidth"]);
    assert!(
        done.contains("reset") && done.contains("from the configuration"),
        "{done}"
    );
    assert_eq!(
        json(&sock, &["status"])["migration"]["config"]["bandwidth"],
        "16MiB"
    );
    // A key the file does not set comes back to its default, and says so.
    let done = ok(&sock, &["config", "reset", "reserve"]);
    assert!(
        done.contains("from the default") && !done.contains("configuration"),
        "{done}"
    );
    let format_reserve = json(&sock, &["status"])["reserve"]["format_bytes"].clone();
    assert_eq!(
        json(&sock, &["status"])["reserve"]["target_bytes"],
        format_reserve
    );
    let err = fails(&sock, &["config", "reset", "migrate.bandwidth"]);
    assert!(err.contains("no live setting"), "{err}");
    d.terminate();
    d.restart();
    let st = json(&sock, &["status"]);
    assert_eq!(st["migration"]["config"]["bandwidth"], "16MiB");
    assert_eq!(st["reserve"]["target_bytes"], format_reserve);
    assert_eq!(
        st["migration"]["config"]["promote_margin"], 0.5,
        "still set"
    );
    d.terminate();
}

#[test]
fn a_failed_reload_fails_tierctl_reload_and_keeps_the_old_configuration() {
    let dir = tempdir();
    let cfg = dir.path().join("tierd.toml");
    write(&cfg, b"[migrate]\nmax-moves = 5\n");
    let mut d = daemon(&cfg);
    let sock = d.data_dir().join("control.sock");
    write(&cfg, b"[migrate]\nmax-moves = \"many\"\n");
    let err = fails(&sock, &["reload"]);
    assert!(
        err.contains("not reloaded") && err.contains("max-moves"),
        "{err}"
    );
    assert_eq!(
        json(&sock, &["status"])["migration"]["config"]["max_moves"],
        5
    );
    write(
        &cfg,
        b"[migrate]\nmax-moves = 6\n[heat]\nhalf-life = \"10m\"\n",
    );
    let done = ok(&sock, &["reload"]);
    assert!(
        done.contains("need a restart") && done.contains("heat.half-life"),
        "{done}"
    );
    assert_eq!(
        json(&sock, &["status"])["migration"]["config"]["max_moves"],
        6
    );
    assert!(d.is_running());
    d.terminate();
}
