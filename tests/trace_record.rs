//! Recording a trace of what the daemon serves: `tierctl trace start FILE`,
//! a client no one here wrote (qemu-io) writes, reads, trims and flushes,
//! `tierctl trace stop`, and the file holds exactly those requests, in
//! order, readable by `tierd trace info` and by the library's reader; a
//! second start refuses an existing file without `--force`, and a daemon
//! stopped while recording leaves a complete file.

mod common;

use std::fs::File;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;
use tierd::trace::{Op, TraceReader};

fn ctl(sock: &Path, args: &[&str]) -> std::process::Output {
    run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .args(args)
        .env("NO_COLOR", "1"))
}

fn ctl_json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = ctl(sock, &a);
    assert!(out.status.success(), "{}", show("tierctl", &out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn qemu_io(d: &Daemon, cmds: &[&str]) {
    let mut c = tool("qemu-io");
    c.args(["-f", "raw"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    run_ok(c.arg(d.uri()));
}

fn ops(path: &Path) -> Vec<(Op, u64, u32)> {
    TraceReader::new(File::open(path).expect("open the trace"))
        .expect("the trace's header")
        .map(|r| {
            let r = r.expect("a record");
            (r.op, r.offset, r.len)
        })
        .collect()
}

#[test]
fn tierctl_records_what_a_client_does_and_the_trace_reads_back() {
    let mut d = Daemon::start_with(DaemonOptions::small());
    let sock = d.data_dir().join("control.sock");
    let trace = d.dir().join("served.trace");
    let trace_arg = trace.to_str().expect("utf-8 path");
    // Before any recording.
    assert_eq!(ctl_json(&sock, &["trace", "status"]), Value::Null);
    let s = ctl_json(&sock, &["trace", "start", trace_arg]);
    assert_eq!(s["active"], true);
    assert_eq!(s["records"], 0);
    qemu_io(
        &d,
        &[
            "write -P 0x5a 1M 64k",
            "read -P 0x5a 1M 64k",
            "discard 8M 1M",
            "flush",
        ],
    );
    let s = ctl_json(&sock, &["trace", "status"]);
    assert_eq!(s["active"], true, "{s}");
    // qemu-io flushes once more as it closes.
    assert!(s["records"].as_u64().is_some_and(|n| n >= 4), "{s}");
    // A second recording while one runs is refused, naming the file.
    let out = ctl(&sock, &["trace", "start", "/tmp/other.trace"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("served.trace"),
        "{}",
        show("tierctl", &out)
    );
    let s = ctl_json(&sock, &["trace", "stop"]);
    assert_eq!(
        (s["active"].clone(), s["ended"].clone()),
        (false.into(), "stopped".into())
    );
    assert_eq!(
        s["bytes"].as_u64(),
        Some(std::fs::metadata(&trace).expect("stat").len())
    );
    let got = ops(&trace);
    assert!(got.len() >= 4, "{got:?}");
    assert_eq!(
        got[..4],
        [
            (Op::Write, 1 << 20, 64 << 10),
            (Op::Read, 1 << 20, 64 << 10),
            (Op::Trim, 8 << 20, 1 << 20),
            (Op::Flush, 0, 0),
        ]
    );
    // After the stop nothing more is recorded.
    qemu_io(&d, &["read 0 4k"]);
    assert_eq!(ops(&trace).len(), got.len());
    // tierd's own reader of traces agrees.
    let info: Value = serde_json::from_str(&run_ok(
        Command::new(tierd_bin()).args(["trace", "info", trace_arg, "--json"]),
    ))
    .expect("JSON");
    let sum = &info["summary"];
    assert_eq!(sum["records"].as_u64(), Some(got.len() as u64), "{info}");
    assert_eq!(sum["ops"]["write"]["bytes"], 65536, "{info}");
    assert_eq!(sum["ops"]["trim"]["bytes"], 1 << 20, "{info}");
    assert!(
        info["source"]
            .as_str()
            .is_some_and(|s| s.ends_with(" recording")),
        "{info}"
    );
    // The file exists now: no --force, no overwrite.
    let out = ctl(&sock, &["trace", "start", trace_arg]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    assert_eq!(
        ops(&trace).len(),
        got.len(),
        "the refused start kept the file"
    );

    // Recording again with --force, then the daemon stops: the file ends
    // complete.
    ctl_json(&sock, &["trace", "start", trace_arg, "--force"]);
    qemu_io(&d, &["write -P 0x11 0 4k"]);
    d.terminate();
    let again = ops(&trace);
    assert!(again.first() == Some(&(Op::Write, 0, 4096)), "{again:?}");
}
