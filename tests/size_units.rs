//! Sizes mean what their unit says everywhere: `1GB` is 10^9 bytes and
//! `1GiB` 2^30, never one read as the other; the image files `tierd format`
//! creates have exactly the size asked for.

mod common;

use std::process::Command;

use common::{run, show, tempdir, tierd_bin};

#[test]
fn decimal_units_are_honoured_as_powers_of_ten() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let mut cmd = Command::new(tierd_bin());
    cmd.arg("format")
        .arg("--data-dir")
        .arg(&data)
        .args(["--ssd-size", "100MB", "--hdd-size", "1GB"])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("TIERD_CONFIG");
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", show("tierd format", &out));
    let len = |name: &str| {
        std::fs::metadata(data.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .len()
    };
    assert_eq!(len("ssd.img"), 100_000_000, "100MB is 10^8 bytes");
    assert_eq!(len("hdd.img"), 1_000_000_000, "1GB is 10^9 bytes, not 1GiB");
}
