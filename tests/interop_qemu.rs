//! Interop with QEMU's block layer (`qemu-img`, `qemu-io`) against the real
//! daemon: raw→NBD and NBD→raw conversion, `qemu-img compare` (which must
//! also notice a difference), and `qemu-io` pattern writes and reads, write
//! zeroes, discard, FUA writes, flush and asynchronous writes.

mod common;

use common::{
    assert_same_bytes, assert_zero, random_bytes, read, run, run_ok, show, sparse_file, tool,
    write, Daemon, DaemonOptions, MIB,
};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

/// Run qemu-io with `cmds` against the export; return its output.
fn qemu_io(d: &Daemon, cmds: &[String]) -> std::process::Output {
    let mut c = tool("qemu-io");
    c.args(["-f", "raw"]);
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    c.arg(d.uri());
    run(&mut c)
}

/// Run qemu-io and assert it exits 0 with no error or failed verification.
fn qemu_io_ok(d: &Daemon, cmds: &[String]) -> String {
    let out = qemu_io(d, cmds);
    let what = format!("qemu-io {cmds:?}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{}", show(&what, &out));
    assert!(
        !text.to_lowercase().contains("error"),
        "{}",
        show(&what, &out)
    );
    assert!(
        !text.contains("Pattern verification failed"),
        "{}",
        show(&what, &out)
    );
    text
}

fn cmds(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn qemu_img_convert_and_compare() {
    let d = Daemon::start_with(DaemonOptions::small());
    // A 120 MiB sparse raw image with random data in two places.
    let src = d.dir().join("src.raw");
    let len = 120 * MIB;
    sparse_file(&src, len);
    let f = OpenOptions::new()
        .write(true)
        .open(&src)
        .expect("opening src.raw");
    f.write_all_at(&random_bytes(16 * MIB as usize, 10), 0)
        .expect("writing src.raw");
    f.write_all_at(&random_bytes(8 * MIB as usize + 123, 11), 100 * MIB - 77)
        .expect("writing src.raw");
    drop(f);

    // raw -> nbd
    run_ok(
        tool("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(d.uri()),
    );
    // qemu-img compare: identical (the export's extra tail is zero).
    run_ok(
        tool("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(d.uri()),
    );

    // nbd -> raw gives the source back, then zeros.
    let out = d.dir().join("out.raw");
    run_ok(
        tool("qemu-img")
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(d.uri())
            .arg(&out),
    );
    let (want, got) = (read(&src), read(&out));
    assert!(got.len() > want.len(), "export smaller than the source");
    assert_same_bytes("nbd -> raw", &got[..want.len()], &want);
    assert_zero("export beyond the source", &got[want.len()..]);

    // compare really compares: one flipped byte in the middle of the second
    // data region makes it exit 1 ("images differ").
    let changed = d.dir().join("changed.raw");
    let mut bytes = want;
    let at = (104 * MIB) as usize;
    bytes[at] ^= 0x5a;
    write(&changed, &bytes);
    let res = run(tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&changed)
        .arg(d.uri()));
    assert_eq!(
        res.status.code(),
        Some(1),
        "qemu-img compare should report a difference: {}",
        show("qemu-img compare", &res)
    );
    assert!(
        String::from_utf8_lossy(&res.stdout).contains(&format!("offset {at}")),
        "{}",
        show("qemu-img compare", &res)
    );
}

#[test]
fn qemu_io_patterns_zero_discard_flush_aio() {
    let d = Daemon::start_with(DaemonOptions::small());
    qemu_io_ok(
        &d,
        &cmds(&[
            // plain and unaligned pattern writes
            "write -P 0x11 1M 64k",
            "read -P 0x11 1M 64k",
            "write -P 0x12 3000 5000",
            "read -P 0x12 3000 5000",
            "read -P 0 0 3000",
            "read -P 0 8000 4192",
            // a write spanning an extent boundary
            "write -P 0x13 12032k 512k",
            "read -P 0x13 12032k 512k",
            // write zeroes over part of the pattern
            "write -z 1M 4k",
            "read -P 0 1M 4k",
            "read -P 0x11 1028k 60k",
            // discard a whole extent, and an unaligned piece
            "write -P 0x14 8M 1M",
            "discard 8M 1M",
            "read -P 0 8M 1M",
            // FUA write and flush
            "write -f -P 0x15 10M 128k",
            "read -P 0x15 10M 128k",
            "flush",
            // asynchronous writes, then flush them
            "aio_write -P 0x22 4M 128k",
            "aio_write -P 0x33 5M 128k",
            "aio_write -P 0x44 6M 2M",
            "aio_flush",
            "read -P 0x22 4M 128k",
            "read -P 0x33 5M 128k",
            "read -P 0x44 6M 2M",
        ]),
    );

    // A fresh qemu-io process (new connection) sees the same contents.
    qemu_io_ok(
        &d,
        &cmds(&[
            "read -P 0x11 1028k 60k",
            "read -P 0 1M 4k",
            "read -P 0x12 3000 5000",
            "read -P 0x13 12032k 512k",
            "read -P 0 8M 1M",
            "read -P 0x15 10M 128k",
            "read -P 0x22 4M 128k",
            "read -P 0x33 5M 128k",
            "read -P 0x44 6M 2M",
        ]),
    );

    // The verification itself works: a wrong pattern fails.
    let out = qemu_io(&d, &cmds(&["read -P 0x99 4M 4k"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Pattern verification failed"),
        "a wrong pattern must fail verification: {}",
        show("qemu-io read -P 0x99", &out)
    );
}
