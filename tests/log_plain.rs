//! The daemon's log is plain text when stderr is not a terminal: a log
//! file, a pipe or the journal gets no ANSI colour codes, whether or not
//! NO_COLOR is set.

mod common;

use std::process::Command;

use common::{run, show, tempdir, tierd_bin};

#[test]
fn a_log_written_to_a_pipe_carries_no_colour_codes() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let mut cmd = Command::new(tierd_bin());
    cmd.arg("format")
        .arg("--data-dir")
        .arg(&data)
        .args(["--ssd-size", "16MiB", "--hdd-size", "64MiB"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .env_remove("TIERD_CONFIG");
    let out = run(&mut cmd);
    let what = show("tierd format", &out);
    assert!(out.status.success(), "{what}");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("created sparse image file"),
        "the format logs what it does: {what}"
    );
    assert!(
        !log.contains('\x1b'),
        "ANSI escape codes in a log that is not a terminal: {log:?}"
    );
}
