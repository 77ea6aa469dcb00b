//! Draining a tier online through the real daemon (`tierctl evacuate`):
//! the SSD is emptied (extents and write log) while a client keeps
//! writing, with every byte intact, new data kept off it, and the draining
//! kept across kill -9 until `--cancel`; draining the HDD fills the SSD as
//! far as room allows and says first what would remain.

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

fn json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    serde_json::from_str(&ok(sock, &a)).expect("JSON")
}

fn qemu_io(d: &Daemon, cmd: &str) {
    run_ok(tool("qemu-io").args(["-f", "raw", "-c", cmd, &d.uri()]));
}

fn extents(st: &Value, tier: usize) -> u64 {
    st["tiers"][tier]["extents"].as_u64().expect("extents")
}

#[test]
fn draining_the_ssd_empties_it_while_writes_go_on_and_survives_kill9() {
    let mut d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), String::new()],
        // The heat migrator's states (the write log): admission at the
        // miss would bring this small volume's HDD extents up as they are
        // written.
        env: vec![("TIERD_MIGRATE__ADMISSION".into(), "false".into())],
        ..DaemonOptions::small()
    });
    let sock: PathBuf = d.data_dir().join("control.sock");
    // 96 MiB: the SSD fills, the rest spills to the HDD; then small writes
    // into HDD extents land in the SSD write log.
    qemu_io(&d, "write -P 0x11 0 96M");
    // The migrator covers the reserve first (free slots, or clean copies
    // that leave by a mapping change): the log lives in it.
    let refilled = wait_until(std::time::Duration::from_secs(30), || {
        let st = json(&sock, &["status"]);
        st["reserve"]["covered_bytes"].as_u64() >= st["reserve"]["target_bytes"].as_u64()
    });
    assert!(refilled, "the reserve was not refilled");
    for i in 0..8u64 {
        qemu_io(&d, &format!("write -P 0x22 {}M 4k", 80 + i));
    }
    let st = json(&sock, &["status"]);
    assert!(extents(&st, 0) > 0, "{st}");
    assert!(
        st["write_log"]["segments"].as_u64() > Some(0),
        "nothing in the write log: {st}"
    );

    let plan = json(&sock, &["evacuate", "ssd", "--dry-run"]);
    assert_eq!(plan["would_remain_extents"], 0, "{plan}");
    // What moves is the SSD's data; the write log is counted apart.
    assert_eq!(
        plan["remaining_extents"].as_u64(),
        Some(extents(&st, 0)),
        "{plan} vs {st}"
    );
    assert_eq!(
        plan["log_segments"].as_u64(),
        st["write_log"]["segments"].as_u64(),
        "{plan} vs {st}"
    );
    let text = ok(&sock, &["evacuate", "ssd", "--dry-run"]);
    assert!(text.contains("nothing would remain"), "{text}");

    // Drain while a client rewrites 8 MiB, twice.
    let uri = d.uri();
    let writer = std::thread::spawn(move || {
        for p in [0x33, 0x44] {
            run_ok(tool("qemu-io").args([
                "-f",
                "raw",
                "-c",
                &format!("write -P {p} 16M 8M"),
                &uri,
            ]));
        }
    });
    let out = ok(&sock, &["evacuate", "ssd"]);
    writer.join().expect("writer");
    assert!(out.contains("the ssd is empty"), "{out}");
    let st = json(&sock, &["status"]);
    assert_eq!(extents(&st, 0), 0, "{st}");
    assert_eq!(st["write_log"]["segments"], 0, "{st}");
    assert_eq!(st["evacuation"]["done"], true, "{st}");
    assert_eq!(st["evacuation"]["tier"], "ssd");
    let evac = st["migration"]["by_reason"]
        .as_array()
        .expect("by_reason")
        .iter()
        .find(|r| r["reason"] == "evacuate")
        .cloned()
        .expect("an evacuate row");
    assert!(evac["to_hdd"].as_u64() > Some(0), "{evac}");
    let text = ok(&sock, &["status"]);
    assert!(
        text.contains("DRAINING the ssd") && text.contains("done: empty"),
        "{text}"
    );

    // Every byte intact.
    qemu_io(&d, "read -P 0x11 0 16M");
    qemu_io(&d, "read -P 0x44 16M 8M");
    qemu_io(&d, "read -P 0x11 24M 56M");
    for i in 0..8u64 {
        qemu_io(&d, &format!("read -P 0x22 {}M 4k", 80 + i));
        qemu_io(
            &d,
            &format!("read -P 0x11 {} 1044480", ((80 + i) << 20) + 4096),
        );
    }
    // New data stays off the SSD, also after kill -9.
    qemu_io(&d, "write -P 0x55 100M 4M");
    assert_eq!(extents(&json(&sock, &["status"]), 0), 0);
    d.kill9();
    d.restart();
    let st = json(&sock, &["status"]);
    assert_eq!(st["evacuation"]["tier"], "ssd", "draining is kept: {st}");
    qemu_io(&d, "write -P 0x66 110M 4M");
    qemu_io(&d, "read -P 0x55 100M 4M");
    assert_eq!(extents(&json(&sock, &["status"]), 0), 0);
    assert!(d.log().contains("is being drained"), "{}", d.log());

    // Cancel: new data lands on the SSD again.
    let out = ok(&sock, &["evacuate", "--cancel"]);
    assert!(out.contains("cancelled"), "{out}");
    assert_eq!(json(&sock, &["status"])["evacuation"], Value::Null);
    qemu_io(&d, "write -P 0x77 120M 4M");
    assert!(extents(&json(&sock, &["status"]), 0) >= 4);
    let err = String::from_utf8_lossy(&ctl(&sock, &["evacuate", "--cancel"]).stderr).into_owned();
    assert!(err.contains("no tier is being drained"), "{err}");
    qemu_io(&d, "read -P 0x66 110M 4M");
    d.terminate();
}

#[test]
fn draining_the_hdd_fills_the_ssd_and_says_what_remains() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), String::new()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    qemu_io(&d, "write -P 0x5a 0 160M");
    let st = json(&sock, &["status"]);
    let es = st["extent_size"].as_u64().expect("es");
    // Every free SSD slot, the reserve's included: draining fills them.
    let ssd_free = st["reserve"]["ssd_free_bytes"].as_u64().expect("free") / es;
    let hdd = extents(&st, 1);
    let plan = json(&sock, &["evacuate", "hdd", "--dry-run"]);
    assert_eq!(
        plan["would_remain_extents"].as_u64(),
        Some(hdd - ssd_free),
        "{plan}"
    );
    let out = ok(&sock, &["evacuate", "hdd"]);
    assert!(
        out.contains("would REMAIN"),
        "it says first what would remain: {out}"
    );
    assert!(out.contains("drained as far as room allows"), "{out}");
    let st = json(&sock, &["status"]);
    assert_eq!(st["reserve"]["ssd_free_bytes"], 0, "the SSD is full: {st}");
    assert_eq!(extents(&st, 1), hdd - ssd_free, "{st}");
    assert_eq!(st["shadows"]["extents"], 0, "no HDD copies kept: {st}");
    qemu_io(&d, "read -P 0x5a 0 160M");
}
