//! Ranges take what `tierctl status` prints: on the default 4 GiB + 32 GiB
//! volume the capacity status shows (`capacity 35.00 GiB`, rounded up past
//! the exact size, which only `--json` gives) is a range `pin`, `unpin`
//! and `placement` accept, clipped to the end of the volume with a word
//! saying so; a size with a fraction of a byte (`1.001GiB`) is rounded
//! outwards; `all` is the whole volume; a range that starts past the end is
//! still refused.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

fn ctl(sock: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tierctl_bin());
    c.arg("--control").arg(sock).args(args).env("NO_COLOR", "1");
    run(&mut c)
}

fn ok(sock: &Path, args: &[&str]) -> String {
    let out = ctl(sock, args);
    assert!(
        out.status.success(),
        "{}",
        show(&format!("tierctl {}", args.join(" ")), &out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The capacity as the text of `tierctl status` shows it, `313.00MiB`
/// (what a person copies into a range), and the exact size in bytes.
fn capacity(sock: &Path) -> (String, u64) {
    let text = ok(sock, &["status"]);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("capacity "))
        .unwrap_or_else(|| panic!("no capacity line in status:\n{text}"));
    let mut words = line.split_whitespace().skip(1);
    let (num, unit) = (words.next(), words.next());
    let unit = unit.map(|u| u.trim_end_matches(','));
    let shown = format!("{}{}", num.unwrap_or(""), unit.unwrap_or(""));
    let v: Value = serde_json::from_str(&ok(sock, &["status", "--json"])).expect("status JSON");
    let exact = v["capacity_bytes"].as_u64().expect("capacity_bytes");
    (shown, exact)
}

#[test]
fn ranges_take_the_capacity_status_prints_and_all() {
    // The default sizes of `tierd serve` (sparse images).
    let d = Daemon::start_with(DaemonOptions {
        ssd_size: "4GiB".into(),
        hdd_size: "32GiB".into(),
        ..DaemonOptions::default()
    });
    let sock = d.data_dir().join("control.sock");
    let (shown, exact) = capacity(&sock);
    let shown_bytes = tierd::units::ByteSize::parse(&shown)
        .unwrap_or_else(|e| panic!("status shows capacity {shown:?}: {e}"))
        .0;
    assert!(
        shown_bytes > exact,
        "this test needs a capacity that status rounds up ({shown} against {exact} bytes)"
    );

    let range = format!("0-{shown}");
    let text = ok(&sock, &["pin", "--tier", "hdd", &range]);
    assert!(
        text.contains("clipped") && text.contains("whole volume"),
        "pin {range}: {text}"
    );
    // One sentence in order: the range and the tier, then the clipping
    // (not "… clipped to its 35.00 GiB (… bytes) to the hdd").
    let (tier_at, clip_at) = (text.find("to the hdd"), text.find("clipped"));
    assert!(
        tier_at.is_some() && tier_at < clip_at,
        "pin {range}: the tier does not follow the range: {text}"
    );
    let text = ok(&sock, &["unpin", &range]);
    assert!(
        text.contains("unpinned") && text.contains("clipped"),
        "unpin {range}: {text}"
    );
    let v: Value = serde_json::from_str(&ok(&sock, &["status", "--json"])).expect("status JSON");
    assert_eq!(v["pins"], 0, "unpin {range} left pins: {v}");

    // Status shows sizes in units only; the raw count is for --json.
    let text = ok(&sock, &["status"]);
    assert!(
        !text.contains(&exact.to_string()),
        "status prints the raw byte count:\n{text}"
    );
    // A size with a fraction of a byte, as status prints sizes.
    let text = ok(&sock, &["pin", "--tier", "hdd", "0-1.001GiB"]);
    assert!(!text.contains("clipped"), "{text}");
    ok(&sock, &["unpin", "0.5GiB-1.001GiB"]);
    let text = ok(&sock, &["pin", "--tier", "ssd", "1MiB+4MiB"]);
    assert!(!text.contains("clipped"), "{text}");
    let text = ok(&sock, &["unpin", "all"]);
    assert!(
        text.contains("whole volume") && !text.contains("clipped"),
        "unpin all: {text}"
    );
    let v: Value = serde_json::from_str(&ok(&sock, &["status", "--json"])).expect("status JSON");
    assert_eq!(v["pins"], 0, "unpin all left pins: {v}");

    let text = ok(&sock, &["placement", &range]);
    assert!(text.contains("clipped"), "placement {range}: {text}");
    let p: Value =
        serde_json::from_str(&ok(&sock, &["placement", "all", "--json"])).expect("placement JSON");
    assert_eq!(p["offset"], 0);
    assert_eq!(p["len"].as_u64(), Some(exact), "{p}");

    let out = ctl(&sock, &["unpin", &format!("{shown_bytes}+1MiB")]);
    assert!(
        !out.status.success(),
        "{}",
        show("unpin past the end", &out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("past the end of the volume"), "{err}");
}

/// docs/operations.md shows the capacity the way `tierctl status` prints
/// it: in units, without the raw byte count status leaves to `--json`.
#[test]
fn the_docs_quote_status_as_it_prints_the_capacity() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let text = std::fs::read_to_string(&path).expect("docs/operations.md");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let quoted: Vec<&str> = flat
        .match_indices("`status` shows as `")
        .map(|(i, m)| {
            let rest = &flat[i + m.len()..];
            &rest[..rest.find('`').unwrap_or(rest.len())]
        })
        .collect();
    assert!(!quoted.is_empty(), "docs/operations.md quotes no capacity");
    for q in quoted {
        let (num, unit) = q.split_once(' ').unwrap_or((q, ""));
        assert!(
            num.parse::<f64>().is_ok()
                && num.contains('.')
                && ["B", "KiB", "MiB", "GiB", "TiB"].contains(&unit),
            "docs/operations.md quotes status as `{q}`, which status does not print"
        );
    }
}
