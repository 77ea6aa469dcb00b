//! What `tierctl evacuate` reports agrees with `tierctl status` and says
//! what moved: with 32 extents of data on the HDD and 32 clean HDD copies
//! (shadows) of SSD extents, `evacuate hdd --dry-run` says the HDD holds
//! the 32 extents status counts (the copies apart: they are dropped, not
//! moved); draining the SSD, whose extents all have clean copies, demotes
//! by remapping alone, and the progress, the summary and status say how
//! much was moved so rather than only "0 B" copied. The plan, the
//! progress, the summary, status and `--json` count the same thing (the
//! tier's data, not its clean copies), and the plan says which pins
//! draining overrides.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

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
    serde_json::from_str(&ok(sock, &a)).expect("tierctl JSON")
}

fn extents(st: &Value, tier: usize) -> u64 {
    st["tiers"][tier]["extents"].as_u64().expect("extents")
}

/// The number just before `word` in `text` (`holds 32 extents` → 32).
fn number_before(text: &str, word: &str) -> Option<u64> {
    let at = text.find(word)?;
    text[..at].split_whitespace().last()?.parse().ok()
}

/// The byte size just before `what` in `text` (`12.00 MiB by remapping`).
fn size_before(text: &str, what: &str) -> Option<String> {
    let at = text.find(what)?;
    let mut w = text[..at].split_whitespace().rev();
    let unit = w.next()?;
    let n = w.next()?;
    Some(format!("{n} {unit}"))
}

#[test]
fn evacuation_reports_agree_with_status_and_say_what_moved() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), String::new()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    // 64 extents of data on the HDD; then 32 of them promoted by a pin,
    // each leaving its clean HDD copy behind.
    ok(&sock, &["pin", "--tier", "hdd", "0+64MiB"]);
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0x3c 0 64M", "-c", "flush"])
            .arg(d.uri()),
    );
    ok(&sock, &["unpin", "0+64MiB"]);
    ok(&sock, &["pin", "--tier", "ssd", "0+32MiB"]);
    let mut st = Value::Null;
    assert!(
        wait_until(Duration::from_secs(60), || {
            st = json(&sock, &["status"]);
            extents(&st, 0) == 32 && st["shadows"]["extents"] == 32
        }),
        "32 extents promoted with their HDD copies kept: {st}"
    );
    ok(&sock, &["unpin", "0+32MiB"]);
    let hdd = extents(&st, 1);
    assert_eq!(hdd, 32, "{st}");

    let plan = json(&sock, &["evacuate", "hdd", "--dry-run"]);
    assert_eq!(plan["data_extents"].as_u64(), Some(hdd), "{plan}");
    assert_eq!(plan["shadow_extents"].as_u64(), Some(32), "{plan}");
    let text = ok(&sock, &["evacuate", "hdd", "--dry-run"]);
    assert_eq!(
        number_before(&text, "extents of data"),
        Some(hdd),
        "the plan's HDD data disagrees with status' {hdd} extents on the HDD: {text}"
    );
    assert!(text.contains("clean copies"), "{text}");

    let out = ctl(&sock, &["evacuate", "ssd"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{}",
        show("tierctl evacuate ssd", &out)
    );
    let summary = stdout
        .lines()
        .find(|l| l.contains("is empty"))
        .unwrap_or_else(|| panic!("no summary: {stdout}"));
    let remapped = size_before(summary, "moved by remapping")
        .unwrap_or_else(|| panic!("the summary does not say what was remapped: {summary}"));
    assert_eq!(remapped, "32.00 MiB", "{summary}");
    let last = stderr
        .lines()
        .rfind(|l| l.starts_with('['))
        .unwrap_or_else(|| panic!("no progress line: {stderr}"));
    assert!(
        !last.ends_with("(0 B/s)") && last.contains("by remapping"),
        "the progress shows only what was copied: {last}"
    );

    let status = ok(&sock, &["status"]);
    let line = status
        .lines()
        .find(|l| l.starts_with("migration:"))
        .unwrap_or_else(|| panic!("no migration line: {status}"));
    let remapped = size_before(line, "by remapping")
        .unwrap_or_else(|| panic!("status does not say what demotions remapped: {line}"));
    assert_ne!(remapped, "0 B", "{line}");
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x3c 0 64M"])
            .arg(d.uri()),
    );
}

/// With 24 extents of data on the HDD, all pinned there, and 24 clean HDD
/// copies of SSD extents: the plan, `--json`, every progress line, the
/// summary and status count the 24 extents of data (the copies apart), and
/// the plan says that draining overrides the 24 pins.
#[test]
fn plan_progress_summary_and_status_count_the_same_extents_and_name_the_pins() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), String::new()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    ok(&sock, &["pin", "--tier", "hdd", "0+48MiB"]);
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0x5e 0 48M", "-c", "flush"])
            .arg(d.uri()),
    );
    // The first half up to the SSD (keeping its HDD copies), the second
    // half pinned to the HDD.
    ok(&sock, &["pin", "--tier", "ssd", "0+24MiB"]);
    let mut st = Value::Null;
    assert!(
        wait_until(Duration::from_secs(60), || {
            st = json(&sock, &["status"]);
            extents(&st, 0) == 24 && st["shadows"]["extents"] == 24
        }),
        "24 extents promoted with their HDD copies kept: {st}"
    );
    ok(&sock, &["unpin", "0+24MiB"]);
    assert_eq!(extents(&st, 1), 24, "{st}");

    let plan = json(&sock, &["evacuate", "hdd", "--dry-run"]);
    for key in ["data_extents", "started_extents", "remaining_extents"] {
        assert_eq!(
            plan[key].as_u64(),
            Some(24),
            "{key} is not the HDD's 24 extents of data: {plan}"
        );
    }
    assert_eq!(plan["shadow_extents"].as_u64(), Some(24), "{plan}");
    assert_eq!(plan["would_remain_extents"].as_u64(), Some(0), "{plan}");
    assert_eq!(
        plan["pinned_extents"].as_u64(),
        Some(24),
        "the plan does not count the pins it overrides: {plan}"
    );
    let text = ok(&sock, &["evacuate", "hdd", "--dry-run"]);
    assert!(
        text.contains("24 of them are pinned to the hdd") && text.contains("overrides"),
        "the plan does not say that draining overrides the pins: {text}"
    );

    let out = ctl(&sock, &["evacuate", "hdd"]);
    assert!(
        out.status.success(),
        "{}",
        show("tierctl evacuate hdd", &out)
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let progress: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[')).collect();
    assert!(!progress.is_empty(), "no progress line: {stderr}");
    for line in &progress {
        assert!(
            line.contains(" of 24 extents moved"),
            "a progress line counts other than the plan's 24 extents: {line}"
        );
    }
    let last = progress.last().copied().unwrap_or_default();
    assert!(last.contains("24 of 24 extents moved"), "{last}");
    assert!(
        stdout.contains("the hdd is empty (24 extents moved"),
        "the summary disagrees with the plan: {stdout}"
    );
    let st = json(&sock, &["status"]);
    let e = &st["evacuation"];
    assert_eq!(e["started_extents"].as_u64(), Some(24), "{st}");
    assert_eq!(e["remaining_extents"].as_u64(), Some(0), "{st}");
    assert_eq!(e["data_extents"].as_u64(), Some(0), "{st}");
    assert_eq!(extents(&st, 1), 0, "{st}");
    let text = ok(&sock, &["status"]);
    assert!(
        text.contains("DRAINING the hdd: 24 of its 24 extents of data moved"),
        "{text}"
    );
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x5e 0 48M"])
            .arg(d.uri()),
    );
}
