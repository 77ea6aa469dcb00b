//! What tierctl prints for a person reads without arithmetic: `config show`
//! shows the paths in effect (not `-` for the data directory's defaults) and
//! one word, `none`, for nothing; sizes in units, times as UTC dates, a
//! reload's outcome as sentences. `--json` keeps the raw values.

mod common;

use std::path::Path;

use common::{Daemon, DaemonOptions};
use serde_json::Value;

fn ctl(sock: &Path, args: &[&str]) -> String {
    common::tierctl_ok(sock, args)
}

#[test]
fn config_show_reserve_reload_and_device_read_in_units() {
    let d = Daemon::start_with(DaemonOptions::small());
    let sock = d.data_dir().join("control.sock");
    let data = d.data_dir().display().to_string();

    let text = ctl(&sock, &["config", "show"]);
    let row = |key: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no row for {key}:\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    for (key, file) in [
        ("ssd", "ssd.img"),
        ("hdd", "hdd.img"),
        ("meta-dir", "meta"),
        ("control", "control.sock"),
    ] {
        assert_eq!(
            row(key)[1],
            format!("{data}/{file}"),
            "{key} shows the path in effect:\n{text}"
        );
    }
    assert_eq!(row("unix")[1], "none", "{text}");
    assert!(
        row("reserve")[1].ends_with("MiB"),
        "the format-time reserve in force shows: {text}"
    );
    assert_eq!(
        row("unix").last().map(String::as_str),
        Some("none"),
        "{text}"
    );
    for line in text.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(
            !cols.contains(&"-") && !cols.contains(&"null"),
            "one notation for nothing: {line:?}"
        );
    }
    let rows: Value =
        serde_json::from_str(&ctl(&sock, &["config", "show", "--json"])).expect("JSON");
    let ssd = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["key"] == "ssd"))
        .expect("ssd row");
    assert_eq!(ssd["value"], format!("{data}/ssd.img"));

    let done = ctl(&sock, &["config", "set", "reserve", "8MiB"]);
    assert!(
        done.contains("(was the format-time reserve, 16.00 MiB)"),
        "an unset reserve is the volume's own: {done}"
    );
    let done = ctl(&sock, &["config", "set", "migrate.bandwidth", "1MB"]);
    assert!(done.contains("migrate.bandwidth = 1MB"), "{done}");
    let done = ctl(&sock, &["reserve", "set", "8MiB"]);
    assert!(
        done.contains("8.00 MiB") && !done.contains("bytes"),
        "{done}"
    );
    let raw: Value =
        serde_json::from_str(&ctl(&sock, &["reserve", "set", "8MiB", "--json"])).expect("JSON");
    assert_eq!(raw["reserve_target_bytes"].as_u64(), Some(8 << 20), "{raw}");

    let done = ctl(&sock, &["reload"]);
    assert!(
        !done.contains('[') && !done.contains('"'),
        "a reload reads as prose, not Rust lists: {done}"
    );
    assert!(done.contains("reserve"), "the live reserve holds: {done}");

    let dev = ctl(&sock, &["device", &format!("{data}/ssd.img")]);
    assert!(
        dev.contains(" UTC") && !dev.contains("unix time"),
        "the format time reads as a date: {dev}"
    );
}
