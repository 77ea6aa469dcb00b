//! Sequential detection across connections, on the real daemon: a client
//! that spreads one stream over several connections (nbdfuse with four, as
//! qemu's multi-conn and the kernel's nbd-client do too), each connection
//! seeing only every few pieces and slightly out of order, is still one
//! sequential stream: past the cutoff its reads earn no heat, so reading a
//! large file through such a client never pushes a hot set off the SSD.
//! Needs /dev/fuse.

mod common;

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{
    random_bytes, require, run, run_ok, run_quiet, show, tierctl_bin, tool, wait_until, write,
    Daemon, DaemonOptions, MIB,
};
use serde_json::Value;

const LEN: u64 = 96 * MIB;

fn status(d: &Daemon) -> Value {
    let mut c = Command::new(tierctl_bin());
    c.arg("--control")
        .arg(d.data_dir().join("control.sock"))
        .args(["--json", "status"]);
    let out = run(&mut c);
    assert!(out.status.success(), "{}", show("tierctl status", &out));
    serde_json::from_slice(&out.stdout).expect("tierctl status --json is JSON")
}

fn bypasses(d: &Daemon) -> u64 {
    status(d)["sequential_bypasses"]
        .as_u64()
        .expect("sequential_bypasses")
}

/// Extents of `[0, LEN)` with any heat, from `tierctl top`.
fn heated(d: &Daemon) -> Vec<u64> {
    let mut c = Command::new(tierctl_bin());
    c.arg("--control")
        .arg(d.data_dir().join("control.sock"))
        .args(["--json", "top", "--hot", "-n", "1000"]);
    let out = run(&mut c);
    assert!(out.status.success(), "{}", show("tierctl top", &out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("tierctl top --json is JSON");
    // The entries, bare or inside the answer's one object.
    let entries = match &v {
        Value::Array(a) => a.clone(),
        Value::Object(o) => o
            .values()
            .find_map(|x| x.as_array().cloned())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    entries
        .iter()
        .filter(|e| e["score"].as_f64().unwrap_or(0.0) > 0.0)
        .filter_map(|e| e["extent"].as_u64())
        .filter(|e| *e < LEN / MIB)
        .collect()
}

/// nbdfuse with `conns` connections, unmounted on drop.
struct Fuse {
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl Fuse {
    fn start(d: &Daemon, conns: u32) -> Fuse {
        let dir = d.dir().join(format!("fuse{conns}"));
        std::fs::create_dir_all(&dir).expect("creating the nbdfuse mount point");
        let pidfile = d.dir().join(format!("nbdfuse{conns}.pid"));
        let log = File::create(d.dir().join(format!("nbdfuse{conns}.log"))).expect("log file");
        let child = Command::new(require("nbdfuse"))
            .arg("-C")
            .arg(conns.to_string())
            .arg("-P")
            .arg(&pidfile)
            .arg(dir.join("disk"))
            .arg(d.uri())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("spawning nbdfuse");
        let mut f = Fuse {
            dir,
            child: Some(child),
        };
        let ready = wait_until(common::START_TIMEOUT, || {
            let exited = f
                .child
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some());
            exited || pidfile.exists()
        });
        assert!(
            ready && f.dir.join("disk").is_file(),
            "nbdfuse did not start"
        );
        f
    }

    fn disk(&self) -> std::path::PathBuf {
        self.dir.join("disk")
    }
}

impl Drop for Fuse {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let t = Duration::from_secs(30);
            if !run_quiet(Command::new("fusermount3").arg("-u").arg(&self.dir), t) {
                run_quiet(Command::new("fusermount3").arg("-uz").arg(&self.dir), t);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Read `len` bytes of `path` in 1 MiB reads, as `cat` would.
fn read_through(path: &Path, len: u64) -> Vec<u8> {
    let mut f = File::open(path).expect("opening the nbdfuse file");
    let mut out = vec![0u8; len as usize];
    f.read_exact(&mut out).expect("reading through nbdfuse");
    out
}

#[test]
fn a_stream_spread_over_four_connections_is_sequential() {
    require("nbdcopy");
    let d = Daemon::start_with(DaemonOptions::small());
    // 96 MiB of data, written over one connection.
    let input = d.dir().join("in.bin");
    let data = random_bytes(LEN as usize, 7);
    write(&input, &data);
    run_ok(
        tool("nbdcopy")
            .arg("--connections=1")
            .arg(&input)
            .arg(d.uri()),
    );
    // Heat is folded in once a second (each migration round).
    std::thread::sleep(Duration::from_millis(2500));
    let before_heat = heated(&d);
    let b0 = bypasses(&d);
    // Read back through nbdfuse with four connections: FUSE asks for the
    // file in pieces, and nbdfuse hands them to its connections in turn.
    let fuse = Fuse::start(&d, 4);
    let got = read_through(&fuse.disk(), LEN);
    assert!(got == data, "the data read back through nbdfuse differs");
    drop(fuse);
    let b1 = bypasses(&d);
    std::thread::sleep(Duration::from_millis(2500));
    let after_heat = heated(&d);
    // Every piece past the first cutoff's worth is sequential: at least
    // 80 MiB of the 96 in requests of at most 128 KiB (FUSE's size).
    assert!(
        b1 - b0 >= 80 * MIB / (128 << 10),
        "only {} reads bypassed heat (of at least {})",
        b1 - b0,
        LEN / (128 << 10)
    );
    let new: Vec<u64> = after_heat
        .iter()
        .filter(|e| !before_heat.contains(e))
        .copied()
        .collect();
    assert!(
        new.len() <= 8,
        "reading the file heated {} extents: {new:?}",
        new.len()
    );
}
