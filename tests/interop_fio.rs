//! Interop with fio's NBD engine against the real daemon: a random
//! read/write workload at queue depth 32 with crc32c verification of every
//! written block must finish without errors, and must actually have done
//! the I/O (and the verifying reads) it claims.

mod common;

use std::time::Duration;

use common::{run_timeout, show, tool, Daemon, DaemonOptions, MIB};
use serde_json::Value;

#[test]
fn fio_randrw_verify_qd32() {
    let d = Daemon::start_with(DaemonOptions::small());
    let mut cmd = tool("fio");
    cmd.args([
        "--name=tierd-randrw",
        "--ioengine=nbd",
        &format!("--uri={}", d.uri()),
        "--rw=randrw",
        "--bs=4k",
        "--iodepth=32",
        "--size=64m",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--runtime=120",
        "--output-format=json",
        // fio writes verify state files into its working directory.
        "--verify_state_save=0",
    ])
    .current_dir(d.dir());
    let what = common::describe(&cmd);
    let out = run_timeout(&mut cmd, Duration::from_secs(180));
    assert!(out.status.success(), "{}", show(&what, &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.to_lowercase().contains("verify") && !stderr.to_lowercase().contains("error"),
        "fio reported problems: {}",
        show(&what, &out)
    );

    // The nbd engine prints a line before the JSON document.
    let json = &stdout[stdout
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in fio output: {}", show(&what, &out)))..];
    let v: Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("parsing fio JSON ({e}): {}", show(&what, &out)));
    let job = &v["jobs"][0];
    assert_eq!(job["error"].as_u64(), Some(0), "fio job error: {job:#}");
    let written = job["write"]["io_bytes"].as_u64().expect("write io_bytes");
    let read = job["read"]["io_bytes"].as_u64().expect("read io_bytes");
    // randrw splits 64 MiB roughly half/half; verification then re-reads
    // every written block, so reads exceed writes.
    assert!(written >= 16 * MIB, "fio wrote only {written} bytes");
    assert!(
        read >= written,
        "fio read {read} < written {written}: the verify pass did not run"
    );
    assert_eq!(
        job["write"]["total_ios"].as_u64().expect("write total_ios") * 4096,
        written,
        "every write is one 4 KiB I/O"
    );
}
