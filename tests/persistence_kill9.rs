//! Durability of the real daemon across process death: data written and
//! then flushed (NBD_CMD_FLUSH, or FUA writes) must survive `kill -9` and a
//! restart on the same data directory, over several crash cycles; data
//! written without any flush must survive a clean SIGTERM shutdown (which
//! flushes). Checked byte for byte by copying the whole export out.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{
    assert_same_bytes, random_bytes, read, run_ok, sparse_file, tool, Daemon, DaemonOptions, MIB,
};

fn export_size(d: &Daemon) -> u64 {
    let out = run_ok(tool("nbdinfo").arg("--size").arg(d.uri()));
    out.trim()
        .parse()
        .unwrap_or_else(|e| panic!("nbdinfo --size printed {out:?}: {e}"))
}

/// Put random data at each (offset, len, seed) of the local image `img`.
fn scatter(img: &Path, pieces: &[(u64, usize, u64)]) {
    let f = OpenOptions::new()
        .write(true)
        .open(img)
        .unwrap_or_else(|e| panic!("opening {}: {e}", img.display()));
    for &(off, len, seed) in pieces {
        f.write_all_at(&random_bytes(len, seed), off)
            .unwrap_or_else(|e| panic!("writing {}: {e}", img.display()));
    }
}

/// Put a qemu-io style byte pattern at `off..off+len` of the local image.
fn pattern(img: &Path, off: u64, len: usize, byte: u8) {
    let f = OpenOptions::new()
        .write(true)
        .open(img)
        .unwrap_or_else(|e| panic!("opening {}: {e}", img.display()));
    f.write_all_at(&vec![byte; len], off)
        .unwrap_or_else(|e| panic!("writing {}: {e}", img.display()));
}

/// Copy the whole export out and compare it with the local image `want`.
fn assert_export_equals(d: &Daemon, want: &Path, what: &str) {
    let out = d.dir().join("readback.raw");
    let _ = std::fs::remove_file(&out);
    run_ok(tool("nbdcopy").arg(d.uri()).arg(&out));
    assert_same_bytes(what, &read(&out), &read(want));
}

#[test]
fn flushed_writes_survive_kill9() {
    let mut d = Daemon::start_with(DaemonOptions::small());
    let size = export_size(&d);
    let want = d.dir().join("want.raw");
    sparse_file(&want, size);

    // Round 1: random data at several (some unaligned) offsets through
    // nbdcopy --flush, plus a FUA write and a write + explicit flush.
    scatter(
        &want,
        &[
            (0, 3 * MIB as usize, 1),
            (37 * MIB + 4097, 5 * MIB as usize + 11, 2),
            (150 * MIB, MIB as usize, 3),
            (size - 2 * MIB - 512, 2 * MIB as usize + 512, 4),
        ],
    );
    run_ok(tool("nbdcopy").arg("--flush").arg(&want).arg(d.uri()));
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "write -f -P 0x77 200M 64k"])
            .args(["-c", "write -P 0x66 210M 1M", "-c", "flush"])
            .arg(d.uri()),
    );
    pattern(&want, 200 * MIB, 64 * 1024, 0x77);
    pattern(&want, 210 * MIB, MIB as usize, 0x66);

    d.kill9();
    d.restart();
    assert_export_equals(&d, &want, "after the first kill -9");

    // Round 2 on the recovered volume: overwrite part of the old data,
    // discard one region, write new data, flush, crash again.
    scatter(
        &want,
        &[(MIB + 100, 700_000, 5), (100 * MIB, 4 * MIB as usize, 6)],
    );
    pattern(&want, 150 * MIB, MIB as usize, 0);
    run_ok(tool("nbdcopy").arg("--flush").arg(&want).arg(d.uri()));
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "discard 150M 1M", "-c", "flush"])
            .arg(d.uri()),
    );
    d.kill9();
    d.restart();
    assert_export_equals(&d, &want, "after the second kill -9");
    d.terminate();
}

#[test]
fn unflushed_writes_survive_sigterm() {
    let mut d = Daemon::start_with(DaemonOptions::small());
    let size = export_size(&d);
    let want = d.dir().join("want.raw");
    sparse_file(&want, size);
    scatter(
        &want,
        &[
            (5 * MIB, 9 * MIB as usize, 21),
            (64 * MIB + 1, 333_333, 22),
            (size - MIB, MIB as usize, 23),
        ],
    );
    // No --flush: nothing asks the daemon to make this durable ...
    run_ok(tool("nbdcopy").arg(&want).arg(d.uri()));
    // ... but a clean shutdown flushes.
    d.terminate();
    assert!(
        d.log().contains("volume flushed"),
        "no flush logged at shutdown:\n{}",
        d.log()
    );
    d.restart();
    assert_export_equals(&d, &want, "after SIGTERM and restart");
    d.terminate();
}
