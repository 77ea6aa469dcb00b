//! `tierctl status` accounts for every slot of each tier: the volume's
//! data (`used`), clean HDD copies of SSD extents (`copies`), the SSD
//! write log (`log`), the SSD reserve, the free slots and those waiting for
//! a metadata flush (`pending`) add up to the tier's capacity, in
//! `--json` and in the text, with a volume that has all of them.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn status(sock: &Path) -> Value {
    serde_json::from_str(&tierctl_ok(sock, &["status", "--json"])).expect("status JSON")
}

const PARTS: [&str; 6] = [
    "used_bytes",
    "copies_bytes",
    "log_bytes",
    "reserve_bytes",
    "free_bytes",
    "pending_bytes",
];

fn b(t: &Value, key: &str) -> u64 {
    t[key].as_u64().unwrap_or_else(|| panic!("no {key} in {t}"))
}

#[test]
fn every_slot_of_each_tier_is_counted_once() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), String::new()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    // 96 MiB: the SSD fills and the rest lands on the HDD; the migrator
    // then covers the reserve again (free slots, or extents with a clean
    // HDD copy: this volume's data fits the HDD with room to spare).
    qemu_io_all(&d.uri(), &["write -P 0x11 0 96M", "flush"]);
    assert!(
        wait_until(Duration::from_secs(60), || {
            let st = status(&sock);
            st["reserve"]["covered_bytes"].as_u64() >= st["reserve"]["target_bytes"].as_u64()
        }),
        "the reserve was not refilled: {}",
        status(&sock)
    );
    // A pin brings HDD extents up, their HDD copies kept.
    tierctl_ok(&sock, &["pin", "--tier", "ssd", "64MiB+8MiB"]);
    let mut st = Value::Null;
    assert!(
        wait_until(Duration::from_secs(60), || {
            st = status(&sock);
            st["shadows"]["extents"].as_u64() > Some(0)
                && st["reserve"]["covered_bytes"].as_u64() >= st["reserve"]["target_bytes"].as_u64()
        }),
        "no clean copies: {st}"
    );
    // Migration paused (no write-back), small writes into HDD extents land
    // in the SSD write log and stay there.
    tierctl_ok(&sock, &["migrate", "pause"]);
    let mut small: Vec<String> = (0..8u64)
        .map(|i| format!("write -P 0x22 {}M 4k", 80 + i))
        .collect();
    small.push("flush".into());
    let small: Vec<&str> = small.iter().map(String::as_str).collect();
    qemu_io_all(&d.uri(), &small);
    // Quiet and flushed: nothing is left waiting for a flush.
    assert!(
        wait_until(Duration::from_secs(30), || {
            qemu_io_all(&d.uri(), &["flush"]);
            st = status(&sock);
            st["migration"]["progress"]["queued"] == 0
                && st["tiers"]
                    .as_array()
                    .is_some_and(|t| t.iter().all(|t| t["pending_bytes"] == 0))
        }),
        "slots still pending after a flush: {st}"
    );
    assert!(
        st["write_log"]["segments"].as_u64() > Some(0),
        "nothing in the write log: {st}"
    );
    let es = st["extent_size"].as_u64().expect("extent size");
    for t in st["tiers"].as_array().expect("tiers") {
        let sum: u64 = PARTS.iter().map(|k| b(t, k)).sum();
        assert_eq!(
            sum,
            b(t, "capacity_bytes"),
            "the {} does not add up: {t}",
            t["tier"]
        );
        assert_eq!(b(t, "used_bytes"), b(t, "extents") * es, "{t}");
    }
    let (ssd, hdd) = (&st["tiers"][0], &st["tiers"][1]);
    assert_eq!(b(hdd, "copies_bytes"), b(&st["shadows"], "extents") * es);
    assert!(b(hdd, "copies_bytes") > 0, "{st}");
    assert_eq!(b(ssd, "log_bytes"), b(&st["write_log"], "bytes"));
    assert!(b(ssd, "log_bytes") > 0, "{st}");
    assert_eq!((b(ssd, "copies_bytes"), b(hdd, "log_bytes")), (0, 0));
    assert_eq!(b(hdd, "reserve_bytes"), 0);
    assert_eq!(
        b(ssd, "reserve_bytes") + b(ssd, "free_bytes"),
        b(&st["reserve"], "ssd_free_bytes"),
        "{st}"
    );
    assert_eq!(
        b(ssd, "reserve_bytes"),
        b(&st["reserve"], "ssd_free_bytes").min(b(&st["reserve"], "target_bytes"))
    );

    // The text: one row per tier whose columns are these figures.
    let text = tierctl_ok(&sock, &["status"]);
    let header = text
        .lines()
        .find(|l| l.contains("capacity") && l.contains("copies"))
        .unwrap_or_else(|| panic!("no space table in status:\n{text}"));
    for col in ["used", "copies", "log", "reserve", "free"] {
        assert!(header.contains(col), "{col} missing: {header}");
    }
    for (t, name) in [(ssd, "ssd"), (hdd, "hdd")] {
        let row = text
            .lines()
            .find(|l| l.starts_with(name) && l.contains('='))
            .unwrap_or_else(|| panic!("no {name} row in:\n{text}"));
        let mut want = String::new();
        for k in ["capacity_bytes"].iter().chain(&PARTS[..5]) {
            want.push_str(&tierd::units::human_bytes(b(t, k)));
            want.push(' ');
        }
        let got: Vec<&str> = row.split_whitespace().filter(|w| *w != "=").collect();
        let got = got[1..].join(" ");
        assert!(
            format!("{got} ").starts_with(&want),
            "the {name} row is not its figures: {row} (want {want})"
        );
    }
    tierctl_ok(&sock, &["migrate", "resume"]);
    qemu_io_all(&d.uri(), &["read -P 0x22 80M 4k", "read -P 0x11 0 64M"]);
}
