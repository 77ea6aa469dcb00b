//! Interop with libnbd's `nbdcopy` against the real daemon: 64 MiB of random
//! data copied in and back out must be byte-identical, over one connection
//! and over four (multi-conn), and a copy into a window of the export (through
//! nbdkit's offset filter) must land exactly there and nowhere else.

mod common;

use std::path::Path;
use std::process::Command;

use common::{
    assert_same_bytes, assert_zero, random_bytes, read, require, run_ok, tool, write, Daemon,
    DaemonOptions, MIB,
};

const LEN: usize = 64 * MIB as usize;

/// `nbdcopy` arguments naming a window `[offset, offset+len)` of the export
/// as an NBD server of its own (nbdkit's nbd plugin + offset filter).
fn window(d: &Daemon, offset: u64, len: u64) -> Vec<String> {
    require("nbdkit");
    [
        "[",
        "nbdkit",
        "--exit-with-parent",
        "--filter=offset",
        "nbd",
        &format!("uri={}", d.uri()),
        &format!("offset={offset}"),
        &format!("range={len}"),
        "]",
    ]
    .map(String::from)
    .to_vec()
}

fn nbdcopy(conns: u32) -> Command {
    let mut c = tool("nbdcopy");
    c.arg(format!("--connections={conns}"));
    c
}

/// Copy the whole export out to `out` and return its bytes.
fn whole_export(d: &Daemon, conns: u32, out: &Path) -> Vec<u8> {
    run_ok(nbdcopy(conns).arg(d.uri()).arg(out));
    read(out)
}

#[test]
fn copy_in_and_out_one_connection() {
    let d = Daemon::start_with(DaemonOptions::small());
    let input = d.dir().join("in.raw");
    let data = random_bytes(LEN, 1);
    write(&input, &data);

    run_ok(nbdcopy(1).arg("--flush").arg(&input).arg(d.uri()));

    let out = whole_export(&d, 1, &d.dir().join("out.raw"));
    assert!(
        out.len() > LEN,
        "export smaller than the copy: {}",
        out.len()
    );
    assert_same_bytes("first 64 MiB read back", &out[..LEN], &data);
    assert_zero("the rest of the export", &out[LEN..]);
}

#[test]
fn copy_window_with_four_connections() {
    let d = Daemon::start_with(DaemonOptions::small());
    let (a_off, b_off) = (0u64, 128 * MIB);
    let a = random_bytes(LEN, 2);
    let b = random_bytes(LEN, 3);
    let (a_in, b_in) = (d.dir().join("a.raw"), d.dir().join("b.raw"));
    write(&a_in, &a);
    write(&b_in, &b);

    // Region A directly at offset 0, region B into a window at 128 MiB, both
    // over four connections.
    run_ok(nbdcopy(4).arg(&a_in).arg(d.uri()));
    run_ok(
        nbdcopy(4)
            .arg("--flush")
            .arg(&b_in)
            .arg("--")
            .args(window(&d, b_off, LEN as u64)),
    );

    // The window reads back what was written into it ...
    let b_out = d.dir().join("b.out");
    run_ok(
        nbdcopy(4)
            .arg("--")
            .args(window(&d, b_off, LEN as u64))
            .arg(&b_out),
    );
    assert_same_bytes("region B through the window", &read(&b_out), &b);

    // ... and the whole export holds A, zeros, B, zeros.
    let out = whole_export(&d, 4, &d.dir().join("out.raw"));
    let (a_end, b_end) = ((a_off as usize + LEN), (b_off as usize + LEN));
    assert!(out.len() > b_end, "export too small: {}", out.len());
    assert_same_bytes("region A", &out[a_off as usize..a_end], &a);
    assert_zero("between A and B", &out[a_end..b_off as usize]);
    assert_same_bytes("region B", &out[b_off as usize..b_end], &b);
    assert_zero("after B", &out[b_end..]);
}
