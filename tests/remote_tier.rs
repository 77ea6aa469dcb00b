//! The capacity tier on a remote NBD export (`hdd = nbd://…`), through a
//! real `tierd serve` process with its HDD tier on nbdkit (file plugin) or
//! qemu-nbd on 127.0.0.1, driven by qemu-io: data on both tiers survives a kill -9 of
//! the daemon and reaches the remote's file; while the remote is away, stalls
//! (nbdkit's pause filter) or fails reads (its error filter), data on the SSD
//! keeps being served, requests that need the remote fail with EIO within
//! `remote-timeout` and never hang, nothing is lost, and everything works
//! again when the remote comes back.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const MIB: u64 = 1 << 20;
/// Pinned to the SSD.
const SSD_AT: u64 = 0;
/// Pinned to the HDD (the remote).
const HDD_AT: u64 = 100 * MIB;
const LEN: u64 = 8 * MIB;

/// A formatted volume whose HDD tier is `remote`, served by tierd.
fn daemon_on(remote: &Nbdkit, dir: &Path, timeout: &str) -> Daemon {
    daemon_on_uri(&remote.uri(), dir, timeout)
}

/// [`daemon_on`] any NBD URI.
fn daemon_on_uri(uri: &str, dir: &Path, timeout: &str) -> Daemon {
    let mut opts = DaemonOptions::small();
    opts.extra_args = format_on_remote(dir, uri, "64MiB", "16MiB", "1MiB");
    opts.extra_args
        .extend(["--remote-timeout".into(), timeout.into()]);
    let d = Daemon::start_with(opts);
    let control = d.control_socket();
    for (range, tier) in [("0+8MiB", "ssd"), ("100MiB+8MiB", "hdd")] {
        run_ok(
            Command::new(tierctl_bin())
                .arg("--control")
                .arg(&control)
                .args(["pin", "--tier", tier, range]),
        );
    }
    d
}

/// Run qemu-io commands on the daemon's export; `Err` carries the output
/// when a command failed.
fn qemu_io(d: &Daemon, cmds: &[String]) -> Result<String, String> {
    let mut cmd = tool("qemu-io");
    cmd.args(["-f", "raw"]);
    for c in cmds {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(d.uri());
    let out = run_timeout(&mut cmd, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && !text.contains("failed") {
        Ok(text)
    } else {
        Err(text)
    }
}

fn write(d: &Daemon, at: u64, p: u8) {
    qemu_io(d, &[format!("write -P {p} {at} {LEN}"), "flush".into()])
        .unwrap_or_else(|e| panic!("write at {at}: {e}\n{}", d.log()));
}

fn check(d: &Daemon, at: u64, p: u8) -> Result<String, String> {
    qemu_io(d, &[format!("read -P {p} {at} {LEN}")])
}

fn placement_of(d: &Daemon, at: u64) -> String {
    let out = run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(d.control_socket())
            .args(["placement", "--json", &format!("{at}+{LEN}")]),
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("placement JSON");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{out}");
    runs[0]["where"].as_str().expect("where").to_string()
}

fn remote_has(file: &Path, byte: u8) -> bool {
    let mut f = std::fs::File::open(file).expect("remote image");
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read remote image");
        if n == 0 {
            return false;
        }
        if buf[..n]
            .windows(4096)
            .step_by(4096)
            .any(|w| w.iter().all(|&b| b == byte))
        {
            return true;
        }
    }
}

#[test]
fn data_on_both_tiers_survives_kill9_and_lives_on_the_remote() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let remote = Nbdkit::start(&hdd, &[]);
    let mut d = daemon_on(&remote, dir.path(), "10s");
    write(&d, SSD_AT, 0x11);
    write(&d, HDD_AT, 0x22);
    assert_eq!(placement_of(&d, SSD_AT), "ssd");
    assert_eq!(placement_of(&d, HDD_AT), "hdd");
    d.kill9();
    d.restart();
    check(&d, SSD_AT, 0x11).expect("SSD data after kill -9");
    check(&d, HDD_AT, 0x22).expect("remote data after kill -9");
    assert!(
        remote_has(&hdd, 0x22),
        "the HDD tier's data is in nbdkit's file"
    );
    assert!(!remote_has(&hdd, 0x11), "the SSD's data is not");
}

/// qemu-nbd as the remote, with a named export.
#[test]
fn qemu_nbd_serves_the_hdd_tier() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let port = free_port();
    let mut qemu = Command::new(require("qemu-nbd"))
        .args(["-f", "raw", "-t", "-x", "bulk", "-b", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .arg(&hdd)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("qemu-nbd");
    assert!(wait_until(Duration::from_secs(10), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }));
    let mut d = daemon_on_uri(&format!("nbd://127.0.0.1:{port}/bulk"), dir.path(), "10s");
    write(&d, SSD_AT, 0x71);
    write(&d, HDD_AT, 0x72);
    assert_eq!(placement_of(&d, HDD_AT), "hdd");
    d.kill9();
    d.restart();
    check(&d, SSD_AT, 0x71).expect("SSD data after kill -9");
    check(&d, HDD_AT, 0x72).expect("qemu-nbd's data after kill -9");
    d.terminate();
    let _ = qemu.kill();
    let _ = qemu.wait();
    assert!(
        remote_has(&hdd, 0x72),
        "the HDD tier's data is in qemu-nbd's file"
    );
}

#[test]
fn while_the_remote_is_away_ssd_data_is_served_and_remote_reads_fail_in_time() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let mut remote = Nbdkit::start(&hdd, &[]);
    let mut d = daemon_on(&remote, dir.path(), "2s");
    write(&d, SSD_AT, 0x31);
    write(&d, HDD_AT, 0x32);
    remote.kill();

    check(&d, SSD_AT, 0x31).expect("SSD data while the remote is away");
    // A write to SSD data, and its flush, need nothing of the remote.
    write(&d, SSD_AT, 0x33);
    let t = Instant::now();
    let e = check(&d, HDD_AT, 0x32).expect_err("remote data while the remote is away");
    let took = t.elapsed();
    assert!(e.contains("Input/output error"), "{e}");
    assert!(
        took < Duration::from_secs(30),
        "failed after {took:?} (remote-timeout 2s)"
    );
    assert!(
        d.log().contains("remote capacity tier"),
        "the log names the remote:\n{}",
        d.log()
    );

    remote.spawn();
    check(&d, HDD_AT, 0x32).expect("remote data once it is back");
    check(&d, SSD_AT, 0x33).expect("SSD data");
    assert!(d.is_running());
    d.terminate();
    d.restart();
    check(&d, HDD_AT, 0x32).expect("remote data after a restart");
    check(&d, SSD_AT, 0x33).expect("SSD data after a restart");
}

#[test]
fn a_stalled_remote_fails_requests_in_time_and_loses_nothing() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let sock = dir.path().join("pause.sock");
    let remote = Nbdkit::start(
        &hdd,
        &[
            "--filter=pause".into(),
            format!("pause-control={}", sock.display()),
        ],
    );
    let d = daemon_on(&remote, dir.path(), "2s");
    write(&d, SSD_AT, 0x41);
    write(&d, HDD_AT, 0x42);
    let control = |c: u8| {
        let mut s = UnixStream::connect(&sock).expect("pause control");
        s.write_all(&[c]).expect("send");
        let mut r = [0u8; 1];
        s.read_exact(&mut r).expect("echo");
        assert_eq!(r[0], c.to_ascii_uppercase());
    };
    control(b'p');
    check(&d, SSD_AT, 0x41).expect("SSD data while the remote stalls");
    let t = Instant::now();
    let e = check(&d, HDD_AT, 0x42).expect_err("remote data while it stalls");
    assert!(e.contains("Input/output error"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    control(b'r');
    assert!(
        wait_until(Duration::from_secs(30), || check(&d, HDD_AT, 0x42).is_ok()),
        "remote data readable after the stall:\n{}",
        d.log()
    );
    check(&d, SSD_AT, 0x41).expect("SSD data");
}

#[test]
fn remote_read_errors_are_eio_and_lose_nothing() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    let trigger = dir.path().join("fail");
    let remote = Nbdkit::start(
        &hdd,
        &[
            "--filter=error".into(),
            "error-pread=EIO".into(),
            "error-pread-rate=100%".into(),
            format!("error-pread-file={}", trigger.display()),
        ],
    );
    let d = daemon_on(&remote, dir.path(), "5s");
    write(&d, HDD_AT, 0x52);
    std::fs::write(&trigger, b"").expect("trigger");
    let t = Instant::now();
    let e = check(&d, HDD_AT, 0x52).expect_err("the remote fails reads");
    assert!(e.contains("Input/output error"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    // Writes still work (into the SSD write log or the remote).
    write(&d, HDD_AT + LEN, 0x53);
    std::fs::remove_file(&trigger).expect("untrigger");
    check(&d, HDD_AT, 0x52).expect("remote data once reads work again");
    qemu_io(&d, &[format!("read -P 0x53 {} {LEN}", HDD_AT + LEN)])
        .expect("the write made meanwhile");
}

/// The migrator measures the remote's link and holds its budget to half
/// of it: nbdkit's rate filter limits the remote to 10 MB/s (80 Mbit/s),
/// a pin pulls 32 MiB up from it, and `tierctl status` reports a measured
/// bandwidth near that, a round trip, and a budget of half the bandwidth.
#[test]
fn the_migration_budget_follows_the_measured_link() {
    let dir = tempdir();
    let hdd = dir.path().join("remote.img");
    sparse_file(&hdd, 256 * MIB);
    // A small bucket: nbdkit's default lets 2 s of traffic through at once.
    let remote = Nbdkit::start(
        &hdd,
        &[
            "--filter=rate".into(),
            "rate=80M".into(),
            "burstiness=0.1".into(),
        ],
    );
    let d = daemon_on(&remote, dir.path(), "30s");
    let control = d.control_socket();
    let tierctl = |args: &[&str]| {
        run_ok(
            Command::new(tierctl_bin())
                .arg("--control")
                .arg(&control)
                .args(args),
        )
    };
    // 32 MiB on the remote, then pulled up to the SSD by a pin.
    let range = format!("{HDD_AT}+{}", 32 * MIB);
    tierctl(&["pin", "--tier", "hdd", &range]);
    qemu_io(
        &d,
        &[
            format!("write -P 0x61 {HDD_AT} {}", 32 * MIB),
            "flush".into(),
        ],
    )
    .unwrap_or_else(|e| panic!("write: {e}"));
    let on = |tier: &str| {
        let v: serde_json::Value =
            serde_json::from_str(&tierctl(&["placement", "--json", &range])).expect("JSON");
        v["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .all(|r| r["where"] == tier)
    };
    assert!(
        wait_until(Duration::from_secs(60), || on("hdd")),
        "{}",
        d.log()
    );
    tierctl(&["pin", "--tier", "ssd", &range]);
    assert!(
        wait_until(Duration::from_secs(60), || on("ssd")),
        "the pinned range came up:\n{}",
        d.log()
    );
    let status = tierctl(&["--json", "status"]);
    let v: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let p = &v["migration"]["progress"];
    let link = &p["capacity_link"];
    let bw = link["bandwidth"].as_f64().expect("a measured bandwidth");
    let rtt = link["rtt_secs"].as_f64().expect("a measured round trip");
    // nbdkit's rate filter sleeps in lumps at 1 MiB requests: the link
    // runs at 4-10 MB/s.
    assert!(
        (2e6..25e6).contains(&bw),
        "measured {bw} B/s for a 10 MB/s link:\n{status}"
    );
    assert!(rtt > 0.0 && rtt < 0.5, "round trip {rtt} s");
    // The budget: half the link as measured when it was set.
    let budget = p["budget"].as_u64().expect("budget");
    assert_eq!(budget, ((bw * 0.5) as u64).max(MIB), "{status}");
    qemu_io(&d, &[format!("read -P 0x61 {HDD_AT} {}", 32 * MIB)]).expect("the data that moved");
    let text = tierctl(&["status"]);
    assert!(text.contains("capacity tier: remote, round trip"), "{text}");
}

/// A single-node Ceph cluster (scripts/ceph-single-node.sh) in a temp
/// directory, stopped on drop.
struct Ceph {
    dir: tempfile::TempDir,
    port: u16,
}

impl Ceph {
    fn script() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ceph-single-node.sh")
    }

    fn start() -> Ceph {
        let c = Ceph {
            dir: tempdir(),
            port: free_port(),
        };
        c.up();
        c
    }

    fn up(&self) {
        run_ok_timeout(
            Command::new(Self::script())
                .arg("start")
                .arg(self.dir.path().join("cluster"))
                .env("CEPH_MON_PORT", self.port.to_string()),
            Duration::from_secs(600),
        );
    }

    fn down(&self) {
        run_ok(
            Command::new(Self::script())
                .arg("stop")
                .arg(self.dir.path().join("cluster")),
        );
    }

    fn conf(&self) -> std::path::PathBuf {
        self.dir.path().join("cluster/ceph.conf")
    }
}

impl Drop for Ceph {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .arg("stop")
            .arg(self.dir.path().join("cluster"))
            .output();
    }
}

/// The HDD tier as objects in a RADOS pool (`hdd = rados://…`), on a
/// single-node Ceph cluster (one monitor, one manager, one OSD on a file)
/// on 127.0.0.1: data on both tiers survives kill -9, the remote's data is
/// in the pool as one object per extent; while the cluster is down, SSD
/// data is served and remote reads fail with EIO within the timeout; once
/// it is back, everything reads again.
#[test]
fn a_rados_pool_serves_the_hdd_tier() {
    let ceph = Ceph::start();
    let dir = tempdir();
    let uri = format!(
        "rados://tierd/vol?conf={}&size=256MiB",
        ceph.conf().display()
    );
    let mut d = daemon_on_uri(&uri, dir.path(), "3s");
    assert!(
        d.log().contains("the HDD tier is a RADOS pool"),
        "{}",
        d.log()
    );
    write(&d, SSD_AT, 0x81);
    write(&d, HDD_AT, 0x82);
    assert_eq!(placement_of(&d, HDD_AT), "hdd");
    d.kill9();
    d.restart();
    check(&d, SSD_AT, 0x81).expect("SSD data after kill -9");
    check(&d, HDD_AT, 0x82).expect("RADOS data after kill -9");

    // One object per 1 MiB extent, named vol.<index>; the superblock area
    // is object 0.
    let rados = |args: &[&str]| {
        run_ok(
            Command::new(require("rados"))
                .arg("-c")
                .arg(ceph.conf())
                .args(["-p", "tierd"])
                .args(args),
        )
    };
    let objects = rados(&["ls"]);
    assert!(
        objects.lines().any(|l| l == "vol.0000000000000000"),
        "{objects}"
    );
    let n = objects.lines().filter(|l| l.starts_with("vol.")).count();
    assert!(n >= 9, "{n} objects:\n{objects}");
    let got = dir.path().join("obj");
    let placed = run_ok(
        Command::new(tierctl_bin())
            .arg("--control")
            .arg(d.control_socket())
            .args(["--json", "explain", &HDD_AT.to_string()]),
    );
    let slot = serde_json::from_str::<serde_json::Value>(&placed).expect("explain JSON")["slot"]
        .as_u64()
        .unwrap_or_else(|| panic!("no slot in:\n{placed}"));
    rados(&[
        "get",
        &format!("vol.{:016x}", slot + 1),
        &got.display().to_string(),
    ]);
    assert!(remote_has(&got, 0x82), "the extent's object holds its data");

    ceph.down();
    check(&d, SSD_AT, 0x81).expect("SSD data while the cluster is down");
    write(&d, SSD_AT, 0x83);
    let t = Instant::now();
    let e = check(&d, HDD_AT, 0x82).expect_err("RADOS data while the cluster is down");
    assert!(e.contains("Input/output error"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    ceph.up();
    check(&d, HDD_AT, 0x82).expect("RADOS data once the cluster is back");
    check(&d, SSD_AT, 0x83).expect("SSD data");
    d.terminate();
}
