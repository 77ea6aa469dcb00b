//! What `tierd format` and `tierd serve` say when a new user gets something
//! wrong: each cause once, with a fix that works as printed. A missing image
//! is reported once with the flag that creates it, and `format` creates it
//! when given its size; the `tierd format` command `serve` advises runs as
//! printed; a TOML error is shown once; the smallest device is the same
//! number, in units, for the configuration and for `format`; an SSD larger
//! than the HDD is warned about.

mod common;
mod start_support;

use common::{sparse_file, tempdir, MIB};
use start_support::{fails, succeeds, tierd_in, Serving};

#[test]
fn a_missing_image_is_reported_once_with_the_flag_that_creates_it() {
    let dir = tempdir();
    let cwd = dir.path();
    // Images are made only in an existing directory.
    std::fs::create_dir(cwd.join("r")).expect("mkdir r");
    let args = [
        "format",
        "--ssd",
        "r/ssd.img",
        "--hdd",
        "r/hdd.img",
        "--meta-dir",
        "r/meta",
    ];
    let err = fails(&mut tierd_in(cwd, &args));
    assert_eq!(
        err.matches("r/ssd.img").count(),
        1,
        "the cause is said once: {err}"
    );
    assert!(
        err.contains("--ssd-size"),
        "no hint how to create it: {err}"
    );
    // Given the sizes, format creates the images.
    let mut with_sizes = tierd_in(cwd, &args);
    with_sizes.args(["--ssd-size", "16MiB", "--hdd-size", "64MiB"]);
    let (out, _) = succeeds(&mut with_sizes);
    assert!(out.contains("formatted"), "{out}");
    assert_eq!(
        std::fs::metadata(cwd.join("r/ssd.img"))
            .map(|m| m.len())
            .ok(),
        Some(16 * MIB)
    );
}

#[test]
fn the_format_command_serve_advises_works_as_printed() {
    let dir = tempdir();
    let cwd = dir.path();
    std::fs::create_dir_all(cwd.join("v")).expect("mkdir");
    sparse_file(&cwd.join("v/hdd.img"), 64 * MIB);
    let serve_args = [
        "serve",
        "--data-dir",
        "elsewhere",
        "--ssd",
        "v/ssd.img",
        "--hdd",
        "v/hdd.img",
        "--meta-dir",
        "v/meta",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
    ];
    let err = fails(&mut tierd_in(cwd, &serve_args));
    let advice = err
        .split('`')
        .find(|s| s.starts_with("tierd format"))
        .unwrap_or_else(|| panic!("no `tierd format ...` advice: {err}"));
    let words: Vec<&str> = advice.split_whitespace().skip(1).collect();
    succeeds(&mut tierd_in(cwd, &words));
    drop(Serving::start(
        &mut tierd_in(cwd, &serve_args),
        &cwd.join("serve.log"),
    ));
}

#[test]
fn a_toml_error_is_shown_once() {
    let dir = tempdir();
    std::fs::write(dir.path().join("bad.toml"), "[migrate\nbandwidth = 1\n").expect("write");
    let err = fails(&mut tierd_in(
        dir.path(),
        &["format", "--config", "bad.toml", "--data-dir", "d"],
    ));
    assert_eq!(
        err.matches("invalid table header").count(),
        1,
        "the parse error is printed once: {err}"
    );
    assert!(err.contains("bad.toml"), "{err}");
}

#[test]
fn the_smallest_device_is_one_number_in_units() {
    let dir = tempdir();
    let cwd = dir.path();
    let from_config = fails(&mut tierd_in(
        cwd,
        &["format", "--data-dir", "d", "--ssd-size", "4MiB"],
    ));
    sparse_file(&cwd.join("small.img"), 4 * MIB);
    sparse_file(&cwd.join("big.img"), 64 * MIB);
    let from_format = fails(&mut tierd_in(
        cwd,
        &[
            "format",
            "--ssd",
            "small.img",
            "--hdd",
            "big.img",
            "--meta-dir",
            "m",
        ],
    ));
    for err in [&from_config, &from_format] {
        assert!(err.contains("at least 8MiB"), "{err}");
    }
}

#[test]
fn an_ssd_larger_than_the_hdd_is_warned_about() {
    let dir = tempdir();
    let (_, log) = succeeds(&mut tierd_in(
        dir.path(),
        &[
            "format",
            "--data-dir",
            "d",
            "--ssd-size",
            "64MiB",
            "--hdd-size",
            "32MiB",
        ],
    ));
    assert!(
        log.contains("WARN") && log.contains("larger than the HDD"),
        "{log}"
    );
}
