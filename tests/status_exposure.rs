//! `tierctl status` of a real daemon says how much data has its only copy
//! on the SSD and how old the oldest of it is: `--json` keys
//! `ssd_only_bytes` and `ssd_only_oldest_s` (null when nothing is), and one
//! `exposure:` line of text. After a restart the bytes are the same and
//! the age counts from the open, which the JSON flags and the text says.
//! The migrator is off, so nothing gives the data an HDD copy meanwhile.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

fn status(sock: &Path) -> Value {
    serde_json::from_str(&tierctl_ok(sock, &["status", "--json"])).expect("status JSON")
}

fn exposure_line(sock: &Path) -> String {
    let text = tierctl_ok(sock, &["status"]);
    text.lines()
        .find(|l| l.starts_with("exposure:"))
        .unwrap_or_else(|| panic!("no exposure line in:\n{text}"))
        .to_string()
}

#[test]
fn status_shows_the_data_only_on_the_ssd_and_its_age() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TIERD_MIGRATE__ENABLED".into(), "false".into())],
        ..DaemonOptions::small()
    });
    let sock = d.control_socket();
    let st = status(&sock);
    assert_eq!(st["ssd_only_bytes"], 0, "{st}");
    assert!(
        st.get("ssd_only_oldest_s").is_some_and(Value::is_null),
        "{st}"
    );
    assert_eq!(exposure_line(&sock), "exposure: nothing only on the SSD");

    // New data: 8 KiB into extent 0, 4 KiB into extent 1; both land on the
    // SSD with no HDD copy.
    qemu_io_all(
        &d.uri(),
        &["write -P 0x31 0 8k", "write -P 0x32 1M 4k", "flush"],
    );
    let st = status(&sock);
    assert_eq!(st["ssd_only_bytes"], 12 * 1024, "{st}");
    let age = st["ssd_only_oldest_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no age: {st}"));
    assert!(age >= 0.0, "{st}");
    assert_eq!(st["ssd_only_oldest_at_open"], false, "{st}");
    // The age does not go back.
    let later = status(&sock)["ssd_only_oldest_s"].as_f64();
    assert!(later >= Some(age), "{later:?} < {age}");
    let line = exposure_line(&sock);
    assert!(
        line.starts_with("exposure: 12.00 KiB only on the SSD, oldest written ")
            && line.ends_with(" s ago"),
        "{line}"
    );

    // A clean restart: the bytes come back from the mapping, the age from
    // the open, and both outputs say the true age is longer.
    d.terminate();
    d.restart();
    let sock = d.control_socket();
    let st = status(&sock);
    assert_eq!(st["ssd_only_bytes"], 12 * 1024, "{st}");
    assert!(st["ssd_only_oldest_s"].as_f64() >= Some(0.0), "{st}");
    assert_eq!(st["ssd_only_oldest_at_open"], true, "{st}");
    let line = exposure_line(&sock);
    assert!(
        line.starts_with("exposure: 12.00 KiB only on the SSD, oldest written at least ")
            && line.contains("before the volume opened"),
        "{line}"
    );
    qemu_io_all(&d.uri(), &["read -P 0x31 0 8k", "read -P 0x32 1M 4k"]);
}

#[test]
fn status_says_whether_the_exposure_bound_holds_and_what_stands_in_its_way() {
    let d = Daemon::start_with(DaemonOptions {
        env: vec![("TIERD_DURABILITY__SSD_EXPOSURE".into(), "2s".into())],
        ..DaemonOptions::small()
    });
    let sock = d.control_socket();
    let st = status(&sock);
    assert_eq!(st["ssd_exposure_bound_s"], 2.0, "{st}");
    assert_eq!(st["ssd_exposure_bound_kept"], true, "{st}");
    assert!(
        exposure_line(&sock).ends_with("; bound 2 s kept"),
        "{}",
        exposure_line(&sock)
    );

    // Migration paused: new data stays SSD-only past the bound, and the
    // status says so and why.
    tierctl_ok(&sock, &["migrate", "pause"]);
    qemu_io_all(&d.uri(), &["write -P 0x41 0 64k", "flush"]);
    assert!(
        wait_until(std::time::Duration::from_secs(30), || {
            status(&sock)["ssd_exposure_bound_kept"] == false
        }),
        "the bound was never reported broken: {}",
        status(&sock)
    );
    let st = status(&sock);
    assert!(
        st["ssd_exposure_bound_blocked"]
            .as_str()
            .is_some_and(|w| w.contains("paused")),
        "{st}"
    );
    let line = exposure_line(&sock);
    assert!(
        line.contains("bound 2 s NOT kept (migration is paused"),
        "{line}"
    );

    // Resumed: the migrator gives the data an HDD copy and the bound holds.
    tierctl_ok(&sock, &["migrate", "resume"]);
    assert!(
        wait_until(std::time::Duration::from_secs(60), || {
            let st = status(&sock);
            st["ssd_only_bytes"] == 0 && st["ssd_exposure_bound_kept"] == true
        }),
        "the data never got its HDD copy: {}",
        status(&sock)
    );

    // Live: the bound goes away with `tierctl config set`.
    tierctl_ok(&sock, &["config", "set", "durability.ssd-exposure", "0s"]);
    let st = status(&sock);
    assert!(st["ssd_exposure_bound_s"].is_null(), "{st}");
    assert!(st["ssd_exposure_bound_kept"].is_null(), "{st}");
    qemu_io_all(&d.uri(), &["read -P 0x41 0 64k"]);
}
