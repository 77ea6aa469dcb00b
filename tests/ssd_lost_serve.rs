//! The SSD dies for good, on the real daemon: killed with -9, its SSD image
//! gone, `tierd serve --ssd-lost` serves every byte that had an HDD copy
//! and EIO exactly on the ranges `tierctl placement --ssd-only` listed
//! before the loss; a rewrite brings a lost range back; `tierctl replace
//! ssd NEW` brings a new SSD in, and the volume restarts on it without the
//! flag with the same answers. `--ssd-lost` is refused while the SSD reads
//! as this volume's, and with no volume at all.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

fn status(sock: &Path) -> Value {
    serde_json::from_str(&tierctl_ok(sock, &["status", "--json"])).expect("JSON")
}

/// Byte ranges `(offset, len)`.
type Ranges = Vec<(u64, u64)>;

/// The SSD-only byte ranges `tierctl placement --ssd-only` lists, and the
/// lost ones.
fn ranges(sock: &Path) -> (Ranges, Ranges) {
    let v: Value = serde_json::from_str(&tierctl_ok(
        sock,
        &["placement", "--ssd-only", "--max-runs", "100000", "--json"],
    ))
    .expect("JSON");
    let runs = |k: &str| -> Ranges {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        (
                            r["offset"].as_u64().expect("offset"),
                            r["len"].as_u64().expect("len"),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    (runs("runs"), runs("lost"))
}

/// Read each MiB of `0..mibs` MiB with a pattern check in one qemu-io;
/// per MiB: `Ok(())`, or the failure qemu-io printed.
fn read_mibs(uri: &str, want: &dyn Fn(u64) -> u8, mibs: u64) -> Vec<Result<(), String>> {
    let mut cmd = tool("qemu-io");
    cmd.args(["-f", "raw"]);
    for m in 0..mibs {
        cmd.args(["-c", &format!("read -P {} {}M 1M", want(m), m)]);
    }
    cmd.arg(uri);
    let out = run(&mut cmd);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // One answer line per command, in order.
    let answers: Vec<Result<(), String>> = text
        .lines()
        .filter_map(|l| {
            if l.starts_with("read 1048576/1048576 bytes") {
                Some(Ok(()))
            } else if l.contains("failed") || l.contains("Pattern verification") {
                Some(Err(l.to_string()))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(answers.len() as u64, mibs, "one answer per read:\n{text}");
    answers
}

fn overlaps(runs: &[(u64, u64)], m: u64) -> bool {
    runs.iter()
        .any(|&(at, n)| at < (m + 1) * MIB && m * MIB < at + n)
}

/// Every MiB reads its pattern, or EIO where `lost` says.
fn assert_answers(d: &Daemon, want: &dyn Fn(u64) -> u8, lost: &[(u64, u64)], what: &str) {
    for (m, a) in read_mibs(&d.uri(), want, 112).into_iter().enumerate() {
        let m = m as u64;
        if overlaps(lost, m) {
            let e = a.expect_err(&format!("{what}: MiB {m} is lost, yet reads"));
            assert!(e.contains("Input/output error"), "{what}: MiB {m}: {e}");
        } else {
            a.unwrap_or_else(|e| panic!("{what}: MiB {m}: {e}"));
        }
    }
}

#[test]
fn a_daemon_restarted_without_its_ssd_serves_the_copies_and_errors_the_rest() {
    let mut d = Daemon::start_with(DaemonOptions {
        env: vec![("TIERD_DURABILITY__SSD_EXPOSURE".into(), "2s".into())],
        extra_args: vec!["--metrics-listen".into(), String::new()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    qemu_io_all(&d.uri(), &["write -P 0x11 0 32M"]);
    // The bound gives all of it an HDD copy.
    let covered = wait_until(std::time::Duration::from_secs(60), || {
        status(&sock)["ssd_only_bytes"].as_u64() == Some(0)
    });
    assert!(covered, "no HDD copy after 60 s: {}", status(&sock));
    // Then no more copies: new data and rewrites stay on the SSD alone.
    tierctl_ok(&sock, &["config", "set", "durability.ssd-exposure", "0s"]);
    qemu_io_all(
        &d.uri(),
        &["write -P 0x33 4M 1M", "write -P 0x22 64M 8M", "flush"],
    );
    let (before, none) = ranges(&sock);
    assert!(none.is_empty(), "nothing lost yet: {none:?}");
    assert!(overlaps(&before, 4), "the rewrite is SSD-only: {before:?}");
    let pattern = |m: u64| match m {
        4 => 0x33,
        0..32 => 0x11,
        64..72 => 0x22,
        _ => 0,
    };
    assert_answers(&d, &pattern, &[], "before the loss");

    // The machine dies with the SSD.
    d.kill9();
    std::fs::remove_file(d.data_dir().join("ssd.img")).expect("the SSD is gone");
    d.options_mut().extra_args.push("--ssd-lost".into());
    d.restart();
    let st = status(&sock);
    assert_eq!(st["ssd_lost"], true, "{st}");
    assert_eq!(st["ssd_only_bytes"], 0, "{st}");
    let lost_bytes: u64 = before.iter().map(|r| r.1).sum();
    assert_eq!(st["lost_bytes"].as_u64(), Some(lost_bytes), "{st}");
    let (ssd_only, lost) = ranges(&sock);
    assert!(ssd_only.is_empty(), "{ssd_only:?}");
    assert_eq!(lost, before, "lost exactly what was listed SSD-only");
    let text = tierctl_ok(&sock, &["status"]);
    assert!(
        text.contains("WITHOUT the SSD") && text.contains("lost with the SSD"),
        "{text}"
    );
    assert_answers(&d, &pattern, &lost, "without the SSD");

    // A rewrite brings a lost MiB back; new data goes to the HDD.
    qemu_io_all(&d.uri(), &["write -P 0x44 64M 1M", "write -P 0x66 80M 2M"]);
    let pattern2 = |m: u64| match m {
        64 => 0x44,
        80 | 81 => 0x66,
        m => pattern(m),
    };
    let (_, lost2) = ranges(&sock);
    assert!(!overlaps(&lost2, 64) && overlaps(&lost2, 65), "{lost2:?}");
    assert_answers(&d, &pattern2, &lost2, "after a rewrite");
    assert_eq!(
        status(&sock)["tiers"][0]["extents"],
        0,
        "nothing on the SSD"
    );

    // The drain of the lost SSD cannot be ended or moved by hand.
    for args in [&["evacuate", "--cancel"][..], &["evacuate", "hdd"][..]] {
        let out = run(Command::new(tierctl_bin())
            .arg("--control")
            .arg(&sock)
            .args(args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("the SSD is lost"),
            "tierctl {args:?} while the SSD is lost: {err}"
        );
    }

    // A new SSD.
    let new = d.dir().join("new-ssd.img");
    sparse_file(&new, 64 * MIB);
    let done = tierctl_ok(&sock, &["replace", "ssd", &new.display().to_string()]);
    assert!(done.contains("the SSD is now"), "{done}");
    tierctl_ok(&sock, &["evacuate", "--cancel"]);
    qemu_io_all(&d.uri(), &["write -P 0x55 96M 4M"]);
    let st = status(&sock);
    assert_eq!(st["ssd_lost"], false, "{st}");
    assert!(st["tiers"][0]["extents"].as_u64() >= Some(4), "{st}");
    let pattern3 = |m: u64| match m {
        96..100 => 0x55,
        m => pattern2(m),
    };
    assert_answers(&d, &pattern3, &lost2, "with the new SSD");

    // Restarted with the stale flag (the configured SSD path is still the
    // dead one): refused, naming the replacement, which still holds data.
    d.terminate();
    let err = refused_ssd_lost(d.data_dir(), "after replace ssd");
    assert!(
        err.contains("the SSD was replaced by") && err.contains("new-ssd.img"),
        "{err}"
    );

    // Restarted on the new SSD, without the flag: the same answers.
    std::fs::rename(&new, d.data_dir().join("ssd.img")).expect("rename");
    d.options_mut().extra_args.retain(|a| a != "--ssd-lost");
    d.restart();
    assert_answers(&d, &pattern3, &lost2, "restarted on the new SSD");
    assert_eq!(ranges(&sock).1, lost2);

    // With the flag while the SSD is fine: refused, nothing touched.
    d.terminate();
    let err = refused_ssd_lost(d.data_dir(), "with a good SSD");
    assert!(
        err.contains("still reads as this volume's SSD") && err.contains("tierctl evacuate ssd"),
        "{err}"
    );
    d.restart();
    assert_answers(&d, &pattern3, &lost2, "after the refusal");
}

/// `tierd serve --ssd-lost` on `data_dir` must fail (`when` says in which
/// case); returns its stderr.
fn refused_ssd_lost(data_dir: &Path, when: &str) -> String {
    let out = run(Command::new(tierd_bin())
        .args(["serve", "--ssd-lost", "--data-dir"])
        .arg(data_dir)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--control",
            "",
        ]));
    assert!(!out.status.success(), "--ssd-lost {when} was accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn ssd_lost_with_no_volume_is_refused() {
    let dir = tempdir();
    let err = refused_ssd_lost(dir.path(), "with no volume");
    assert!(
        err.contains("no metadata store") && err.contains("--ssd-lost"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path()).expect("dir").next().is_none(),
        "nothing was created"
    );
}
