//! `format` and `serve` create an image file only for a path in an
//! existing directory, outside /dev, and only with its size asked for (or
//! the embedded default's): a mistyped or not yet attached device, a path
//! in a missing directory, a device named without a size, or a copy of the
//! shipped example configuration are refused with what to do, and nothing
//! is created. A format that fails after it made something (a remote HDD
//! that is down, a device too small, a geometry that does not fit) removes
//! everything it made: images, data directory, metadata directory.

mod common;
mod start_support;

use std::path::{Path, PathBuf};

use common::{sparse_file, tempdir, MIB};
use start_support::{fails, succeeds, tierd_in};

/// A path that must not exist before or after; removed on drop should a
/// run create it after all (so a failing test does not litter /dev or /).
struct MustNotAppear(PathBuf);

impl MustNotAppear {
    fn new(p: impl Into<PathBuf>) -> MustNotAppear {
        let p = p.into();
        assert!(
            std::fs::symlink_metadata(&p).is_err(),
            "{} exists before the test",
            p.display()
        );
        MustNotAppear(p)
    }

    fn check(&self, what: &str) {
        assert!(
            std::fs::symlink_metadata(&self.0).is_err(),
            "{what} created {}",
            self.0.display()
        );
    }

    fn arg(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for MustNotAppear {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// `tierd ARGS` (split at spaces) run in `cwd` must fail, saying every one
/// of `words`, and leave `cwd` holding `left` and nothing else. Returns
/// what it said.
fn refused(cwd: &Path, args: &str, words: &[&str], left: &[&str]) -> String {
    let args: Vec<&str> = args.split_whitespace().collect();
    let err = fails(&mut tierd_in(cwd, &args));
    for w in words {
        assert!(
            err.contains(w),
            "`tierd {}` does not say {w:?}: {err}",
            args.join(" ")
        );
    }
    assert_eq!(
        listing(cwd),
        left,
        "`tierd {}` left files: {err}",
        args.join(" ")
    );
    err
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("listing")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_device_path_in_dev_is_never_made_an_image() {
    let dir = tempdir();
    let cwd = dir.path();
    let typo = MustNotAppear::new(format!("/dev/tierd-typo-sdz{}", std::process::id()));
    let t = typo.arg();
    refused(
        cwd,
        &format!("format --ssd {t} --hdd h.img --ssd-size 64MiB --hdd-size 256MiB"),
        &[&t, "/dev", "attach the device"],
        &[],
    );
    typo.check("format --ssd /dev/...");
    // The data directory of the default images, in /dev: serve refuses too.
    let data = MustNotAppear::new(format!("/dev/tierd-data-{}", std::process::id()));
    let d = data.arg();
    refused(
        cwd,
        &format!("serve --data-dir {d} --listen 127.0.0.1:0 --metrics-listen="),
        &["/dev"],
        &[],
    );
    data.check("serve --data-dir /dev/...");
}

#[test]
fn a_missing_directory_is_not_created_for_an_image() {
    let dir = tempdir();
    let cwd = dir.path();
    let missing = MustNotAppear::new(format!("/nonexist-dir-q{}", std::process::id()));
    refused(
        cwd,
        &format!(
            "format --ssd {}/s.img --hdd h.img --ssd-size 64MiB --hdd-size 256MiB",
            missing.arg()
        ),
        &["mkdir -p"],
        &[],
    );
    missing.check("format --ssd /nonexist/s.img");
    // A data directory whose parent is missing: not made either.
    refused(
        cwd,
        "format --data-dir a/b --ssd-size 16MiB --hdd-size 64MiB",
        &["mkdir -p"],
        &[],
    );
    // The data directory itself is tierd's to make.
    succeeds(&mut tierd_in(
        cwd,
        &[
            "format",
            "--data-dir",
            "v",
            "--ssd-size",
            "16MiB",
            "--hdd-size",
            "64MiB",
        ],
    ));
    assert_eq!(listing(&cwd.join("v")), ["hdd.img", "meta", "ssd.img"]);
}

#[test]
fn a_named_device_needs_its_size_asked_for_and_the_example_asks_none() {
    let dir = tempdir();
    let cwd = dir.path();
    refused(
        cwd,
        "format --ssd s.img --hdd h.img",
        &["s.img does not exist", "--ssd-size"],
        &[],
    );
    // One device named, the other left to its default path: not invented.
    sparse_file(&cwd.join("s.img"), 16 * MIB);
    refused(
        cwd,
        "format --ssd s.img",
        &["--hdd PATH", "--hdd-size"],
        &["s.img"],
    );
    std::fs::remove_file(cwd.join("s.img")).expect("rm");
    // A copy of the shipped example with a mistyped device.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tierd.example.toml");
    std::fs::copy(&example, cwd.join("tierd.toml")).expect("copying the example");
    refused(
        cwd,
        "format --config tierd.toml --ssd nvme-typo.img --hdd sdb.img --meta-dir m",
        &["nvme-typo.img does not exist"],
        &["tierd.toml"],
    );
    // The size given, on the command line or in the file: made.
    std::fs::write(
        cwd.join("sized.toml"),
        "ssd-size = \"16MiB\"\nhdd-size = \"64MiB\"\n",
    )
    .expect("sized.toml");
    succeeds(&mut tierd_in(
        cwd,
        &[
            "format",
            "--config",
            "sized.toml",
            "--ssd",
            "s.img",
            "--hdd",
            "h.img",
            "--meta-dir",
            "m",
        ],
    ));
    assert_eq!(
        std::fs::metadata(cwd.join("s.img")).map(|m| m.len()).ok(),
        Some(16 * MIB)
    );
}

#[test]
fn a_failed_format_removes_what_it_made() {
    let dir = tempdir();
    let cwd = dir.path();
    // The remote HDD is down: the SSD image and a metadata store were made
    // before that showed.
    let hdd = format!("nbd://127.0.0.1:{}/", common::free_port());
    let format = format!("format --ssd s.img --ssd-size 64MiB --hdd {hdd}");
    refused(cwd, &format, &["remote"], &[]);
    refused(
        cwd,
        &format!("{format} --meta-dir vol/meta"),
        &["remote"],
        &[],
    );
    // An existing HDD too small: the image made for the SSD goes again,
    // the HDD (not made by format) stays.
    std::fs::write(cwd.join("tiny.img"), vec![0u8; 4096]).expect("tiny");
    refused(
        cwd,
        "format --ssd s.img --ssd-size 64MiB --hdd tiny.img",
        &["too small"],
        &["tiny.img"],
    );
    // serve's first start on the default images: a geometry that does not
    // fit (an SSD smaller than one extent) leaves no data directory.
    refused(
        cwd,
        "serve --data-dir d --ssd-size 16MiB --hdd-size 256MiB --extent-size 64MiB \
         --listen 127.0.0.1:0 --metrics-listen=",
        &[],
        &["tiny.img"],
    );
}
