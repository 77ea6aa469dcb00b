//! The `tierd` and `tierctl` binaries on image files: every refusal to
//! serve or format (swapped devices, a device of another volume, a shrunken
//! device, an ext4 image, an already formatted device, a missing metadata
//! store, a bad configuration value) exits non-zero with a message naming
//! the problem, and leaves both image files byte-identical and the metadata
//! store logically unchanged; `format --force` does overwrite; `tierctl
//! device --json` reports each device's role; a second daemon on a held
//! store is refused clearly; and the first start on an empty data directory
//! (create + format + serve) works every time.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    read, require, run_ok, run_timeout, show, sparse_file, tempdir, tierctl_bin, tierd_bin, MIB,
};
use tierd::store::{MetaStore, SledStore};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Two image files and a metadata directory.
struct Pair {
    ssd: PathBuf,
    hdd: PathBuf,
    meta: PathBuf,
}

impl Pair {
    /// Create sparse 64 MiB SSD and 128 MiB HDD images named `<tag>-*.img`.
    fn new(dir: &Path, tag: &str) -> Pair {
        let p = Pair {
            ssd: dir.join(format!("{tag}-ssd.img")),
            hdd: dir.join(format!("{tag}-hdd.img")),
            meta: dir.join(format!("{tag}-meta")),
        };
        sparse_file(&p.ssd, 64 * MIB);
        sparse_file(&p.hdd, 128 * MIB);
        p
    }
}

fn tierd(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Command {
    let mut c = Command::new(tierd_bin());
    for a in args {
        c.arg(a);
    }
    c.env("RUST_BACKTRACE", "0")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("TIERD_CONFIG");
    c
}

fn format_cmd(ssd: &Path, hdd: &Path, meta: &Path) -> Command {
    let mut c = tierd(&[
        &"format",
        &"--ssd",
        &ssd,
        &"--hdd",
        &hdd,
        &"--meta-dir",
        &meta,
    ]);
    c.args(["--extent-size", "1MiB"]);
    c
}

fn serve_cmd(ssd: &Path, hdd: &Path, meta: &Path) -> Command {
    // Port 0: should the refusal not happen, it serves on a private port
    // until the timeout fails the test.
    tierd(&[
        &"serve",
        &"--ssd",
        &ssd,
        &"--hdd",
        &hdd,
        &"--meta-dir",
        &meta,
        &"--listen",
        &"127.0.0.1:0",
    ])
}

fn format_ok(p: &Pair) {
    run_ok(&mut format_cmd(&p.ssd, &p.hdd, &p.meta));
}

/// Run `cmd`, assert it fails and its stderr contains every one of `words`;
/// return stderr.
fn refused(mut cmd: Command, words: &[&str]) -> String {
    let what = common::describe(&cmd);
    let out: Output = run_timeout(&mut cmd, TIMEOUT);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "expected a refusal: {}",
        show(&what, &out)
    );
    for w in words {
        assert!(
            stderr.contains(w),
            "refusal message lacks {w:?}: {}",
            show(&what, &out)
        );
    }
    stderr
}

/// The logical content of a metadata store: its volume keys and extent
/// records. Read from a copy, so the original's files and lock are never
/// touched by the test.
#[derive(Debug, PartialEq)]
struct MetaSnapshot {
    keys: Vec<(String, Option<Vec<u8>>)>,
    extents: Vec<(u64, Vec<u8>)>,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating the metadata copy");
    for e in std::fs::read_dir(from).expect("listing the metadata dir") {
        let e = e.expect("metadata dir entry");
        let target = to.join(e.file_name());
        if e.file_type().expect("file type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copying a metadata file");
        }
    }
}

fn meta_snapshot(meta: &Path, scratch: &Path) -> MetaSnapshot {
    assert!(meta.is_dir(), "{} is not a metadata store", meta.display());
    let copy = scratch.join(format!(
        "meta-copy-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    ));
    copy_dir(meta, &copy);
    let store = SledStore::open(&copy).expect("opening a copy of the metadata store");
    let keys = ["volume-id", "geometry", "pins", "heat"]
        .iter()
        .map(|k| (k.to_string(), store.get(k).expect("reading a metadata key")))
        .collect();
    let extents = store.load_extents().expect("loading extent records");
    drop(store);
    let _ = std::fs::remove_dir_all(&copy);
    MetaSnapshot { keys, extents }
}

/// Byte contents of both images and the logical metadata.
struct State {
    ssd: Vec<u8>,
    hdd: Vec<u8>,
    meta: Option<MetaSnapshot>,
}

fn state(ssd: &Path, hdd: &Path, meta: &Path, scratch: &Path) -> State {
    State {
        ssd: read(ssd),
        hdd: read(hdd),
        meta: meta.exists().then(|| meta_snapshot(meta, scratch)),
    }
}

fn assert_unchanged(what: &str, before: &State, after: &State) {
    assert!(before.ssd == after.ssd, "{what}: the SSD image changed");
    assert!(before.hdd == after.hdd, "{what}: the HDD image changed");
    assert_eq!(before.meta, after.meta, "{what}: the metadata changed");
}

fn volume_id(meta: Option<&MetaSnapshot>) -> Option<Vec<u8>> {
    meta.and_then(|m| m.keys.iter().find(|(k, _)| k == "volume-id"))
        .and_then(|(_, v)| v.clone())
}

/// A refused `format` into a fresh metadata directory must not record a
/// volume there.
fn assert_no_volume_recorded(what: &str, meta: &Path, scratch: &Path) {
    if meta.exists() {
        let snap = meta_snapshot(meta, scratch);
        assert_eq!(
            volume_id(Some(&snap)),
            None,
            "{what}: a refused format recorded a volume in {}",
            meta.display()
        );
        assert!(snap.extents.is_empty(), "{what}: extents recorded");
    }
}

fn tierctl_json(path: &Path) -> serde_json::Value {
    let out = run_ok(
        Command::new(tierctl_bin())
            .arg("device")
            .arg(path)
            .arg("--json"),
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("tierctl --json ({e}): {out}"))
}

#[test]
fn serve_refusals_leave_devices_and_metadata_alone() {
    let dir = tempdir();
    let d = dir.path();
    let a = Pair::new(d, "a");
    format_ok(&a);
    let before = state(&a.ssd, &a.hdd, &a.meta, d);
    assert!(
        volume_id(before.meta.as_ref()).is_some(),
        "format recorded no volume id"
    );

    // Swapped devices.
    let msg = refused(serve_cmd(&a.hdd, &a.ssd, &a.meta), &["swapped"]);
    assert!(
        msg.contains(&a.ssd.display().to_string()) && msg.contains(&a.hdd.display().to_string()),
        "the swapped message should name both devices: {msg}"
    );
    assert_unchanged(
        "serve with swapped devices",
        &before,
        &state(&a.ssd, &a.hdd, &a.meta, d),
    );

    // The HDD of another volume.
    let b = Pair::new(d, "b");
    format_ok(&b);
    let b_hdd = read(&b.hdd);
    let msg = refused(
        serve_cmd(&a.ssd, &b.hdd, &a.meta),
        &["another tierd volume"],
    );
    assert!(msg.contains(&b.hdd.display().to_string()), "{msg}");
    assert_unchanged(
        "serve with another volume's HDD",
        &before,
        &state(&a.ssd, &a.hdd, &a.meta, d),
    );
    assert!(read(&b.hdd) == b_hdd, "the other volume's HDD changed");

    // A shrunken copy of the HDD (same volume, fewer bytes).
    let small = d.join("a-hdd-small.img");
    std::fs::copy(&a.hdd, &small).expect("copying the HDD image");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&small)
        .expect("opening the copy");
    f.set_len(96 * MIB).expect("truncating the copy");
    drop(f);
    let small_before = read(&small);
    let msg = refused(serve_cmd(&a.ssd, &small, &a.meta), &["fewer than"]);
    assert!(msg.contains(&small.display().to_string()), "{msg}");
    assert!(read(&small) == small_before, "the shrunken copy changed");
    assert_unchanged(
        "serve with a shrunken HDD",
        &before,
        &state(&a.ssd, &a.hdd, &a.meta, d),
    );

    // Devices given but no metadata store.
    let nometa = d.join("no-such-meta");
    let msg = refused(serve_cmd(&a.ssd, &a.hdd, &nometa), &["tierd format"]);
    assert!(msg.contains("not formatted"), "{msg}");
    assert!(
        read(&a.ssd) == before.ssd && read(&a.hdd) == before.hdd,
        "serve without a store changed a device"
    );

    // A bad configuration value names its key.
    refused(
        {
            let mut c = serve_cmd(&a.ssd, &a.hdd, &a.meta);
            c.args(["--extent-size", "3MiB"]);
            c
        },
        &["extent-size"],
    );
    assert_unchanged(
        "serve with a bad extent size",
        &before,
        &state(&a.ssd, &a.hdd, &a.meta, d),
    );

    // After all that, the right pair still serves: start it and stop it.
    let mut child = serve_cmd(&a.ssd, &a.hdd, &a.meta)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tierd serve");
    let log = wait_serving(&mut child);
    stop(&mut child, &log);
}

#[test]
fn format_refusals_and_force() {
    require("mkfs.ext4");
    let dir = tempdir();
    let d = dir.path();

    // An ext4 image is refused without --force.
    let e = Pair::new(d, "ext4");
    run_ok(common::tool("mkfs.ext4").args(["-q", "-F"]).arg(&e.ssd));
    let before = state(&e.ssd, &e.hdd, &e.meta, d);
    let msg = refused(format_cmd(&e.ssd, &e.hdd, &e.meta), &["ext4", "--force"]);
    assert!(msg.contains(&e.ssd.display().to_string()), "{msg}");
    let after = state(&e.ssd, &e.hdd, &e.meta, d);
    assert!(before.ssd == after.ssd, "the ext4 image changed");
    assert!(before.hdd == after.hdd, "the HDD image changed");
    assert_no_volume_recorded("format over ext4", &e.meta, d);
    assert_eq!(tierctl_json(&e.ssd)["tierd"], false);

    // An already formatted pair: refused into its own store and into a
    // fresh one (the devices carry superblocks).
    let a = Pair::new(d, "a");
    format_ok(&a);
    let before = state(&a.ssd, &a.hdd, &a.meta, d);
    let msg = refused(format_cmd(&a.ssd, &a.hdd, &a.meta), &["--force"]);
    assert!(msg.contains("already"), "{msg}");
    assert_unchanged(
        "format over a formatted pair",
        &before,
        &state(&a.ssd, &a.hdd, &a.meta, d),
    );
    let fresh = d.join("fresh-meta");
    let msg = refused(format_cmd(&a.ssd, &a.hdd, &fresh), &["tierd superblock"]);
    assert!(msg.contains(&a.ssd.display().to_string()), "{msg}");
    assert!(
        read(&a.ssd) == before.ssd && read(&a.hdd) == before.hdd,
        "a refused format changed a device"
    );
    assert_no_volume_recorded("format over tierd devices", &fresh, d);
    assert_unchanged(
        "format into a fresh store",
        &before,
        &state(&a.ssd, &a.hdd, &a.meta, d),
    );

    // tierctl reports the roles of the formatted pair, with one volume id.
    let (s, h) = (tierctl_json(&a.ssd), tierctl_json(&a.hdd));
    assert_eq!(s["tierd"], true, "{s}");
    assert_eq!(s["role"], "ssd", "{s}");
    assert_eq!(h["role"], "hdd", "{h}");
    assert_eq!(s["volume_id"], h["volume_id"], "{s} {h}");
    assert_eq!(s["extent_size"].as_u64(), Some(MIB), "{s}");
    let old_id = s["volume_id"].clone();

    // --force overwrites: a new volume on both devices and in the store.
    run_ok(format_cmd(&a.ssd, &a.hdd, &a.meta).arg("--force"));
    let (s, h) = (tierctl_json(&a.ssd), tierctl_json(&a.hdd));
    assert_eq!((&s["role"], &h["role"]), (&"ssd".into(), &"hdd".into()));
    assert_eq!(s["volume_id"], h["volume_id"]);
    assert_ne!(s["volume_id"], old_id, "--force did not make a new volume");
    let after = meta_snapshot(&a.meta, d);
    assert_ne!(
        volume_id(Some(&after)),
        volume_id(before.meta.as_ref()),
        "--force did not rewrite the metadata store"
    );

    // --force over the ext4 image works too.
    run_ok(format_cmd(&e.ssd, &e.hdd, &e.meta).arg("--force"));
    assert_eq!(tierctl_json(&e.ssd)["role"], "ssd");

    // A bad configuration value names its key.
    let b = Pair::new(d, "b");
    refused(
        {
            let mut c = format_cmd(&b.ssd, &b.hdd, &b.meta);
            c.args(["--extent-size", "3MiB"]);
            c
        },
        &["extent-size"],
    );
    assert_eq!(tierctl_json(&b.ssd)["tierd"], false);
}

/// Wait until a spawned `tierd serve` logs that it listens; return the log.
fn wait_serving(child: &mut std::process::Child) -> String {
    use std::io::Read;
    let mut stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut all = String::new();
        loop {
            match stderr.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    all.push_str(&String::from_utf8_lossy(&buf[..n]));
                    // Keep draining even when nobody listens any more: a
                    // closed pipe would fail tierd's own logging.
                    let _ = tx.send(all.clone());
                }
            }
        }
    });
    let deadline = Instant::now() + common::START_TIMEOUT;
    let mut log = String::new();
    loop {
        while let Ok(l) = rx.try_recv() {
            log = l;
        }
        if log.contains("serving NBD over TCP") {
            return log;
        }
        if let Some(st) = child.try_wait().expect("polling tierd") {
            while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                log = l;
            }
            panic!("tierd serve exited with {st} before serving:\n{log}");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tierd serve did not start within the timeout:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM a spawned `tierd serve` and assert it exits 0.
fn stop(child: &mut std::process::Child, log: &str) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: signalling our own unreaped child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "kill");
    let ok = common::wait_until(common::STOP_TIMEOUT, || {
        child.try_wait().expect("polling tierd").is_some()
    });
    if !ok {
        let _ = child.kill();
    }
    let st = child.wait().expect("reaping tierd");
    assert!(ok && st.success(), "tierd exited with {st}:\n{log}");
}

/// The embedded default: on an empty data directory `tierd serve` creates
/// the images, formats them and serves. This must work every time, not
/// most of the time; repeated to catch a race between formatting and
/// opening the metadata store.
#[test]
fn first_start_formats_and_serves_every_time() {
    let dir = tempdir();
    let mut failures = Vec::new();
    const STARTS: usize = 60;
    for i in 0..STARTS {
        let data = dir.path().join(format!("data-{i}"));
        let mut child = tierd(&[
            &"serve",
            &"--data-dir",
            &data,
            &"--listen",
            &"127.0.0.1:0",
            &"--ssd-size",
            &"64MiB",
            &"--hdd-size",
            &"128MiB",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning tierd serve");
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let log = wait_serving(&mut child);
            stop(&mut child, &log);
        }));
        if let Err(e) = res {
            let _ = child.kill();
            let _ = child.wait();
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "(non-string panic)".into());
            failures.push(format!("start {i}: {msg}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {STARTS} first starts failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A second `tierd serve` on a data directory a running daemon holds is
/// refused with a message that says so, and the running daemon is
/// unaffected.
#[test]
fn second_daemon_on_a_held_store_is_refused_clearly() {
    let d = common::Daemon::start_with(common::DaemonOptions::small());
    run_ok(
        common::tool("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0x3c 0 1M", "-c", "flush"])
            .arg(d.uri()),
    );
    let msg = refused(
        tierd(&[
            &"serve",
            &"--data-dir",
            &d.data_dir(),
            &"--listen",
            &"127.0.0.1:0",
        ]),
        &[],
    );
    // The running daemon is unaffected.
    run_ok(
        common::tool("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x3c 0 1M"])
            .arg(d.uri()),
    );
    assert!(
        msg.contains("another tierd running"),
        "the refusal should say the store is held by another tierd \
         (service.rs maps this to \"locked by another process: is another tierd running on it?\"), got:\n{msg}"
    );
    // Past the control socket (none here), the held metadata store stops
    // it, said once: not "metadata store at …: metadata store error: locked …".
    let mut past_control = tierd(&[&"serve", &"--data-dir", &d.data_dir()]);
    past_control.args(["--listen=127.0.0.1:0", "--control=", "--metrics-listen="]);
    let msg = refused(
        past_control,
        &["locked by another process", "another tierd running"],
    );
    assert_eq!(
        msg.matches("metadata store").count(),
        1,
        "the refusal repeats itself: {msg}"
    );
}
