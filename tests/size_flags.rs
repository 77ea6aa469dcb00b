//! A size setting an existing volume does not match is refused, not
//! silently ignored: `--ssd-size` (or `TIERD_HDD_SIZE`) naming another size
//! than the existing image's stops `serve` and `format` with both sizes in
//! units and what to do; without the setting the volume opens as it is.

mod common;
mod start_support;

use common::{tempdir, MIB};
use start_support::{fails, succeeds, tierd_in, Serving};

#[test]
fn serving_an_existing_volume_with_another_size_is_refused() {
    let dir = tempdir();
    let cwd = dir.path();
    let base = ["--data-dir", "d1", "--listen", "127.0.0.1:0"];
    let quiet = ["--metrics-listen", ""];
    succeeds(&mut tierd_in(
        cwd,
        &[
            "format",
            "--data-dir",
            "d1",
            "--ssd-size",
            "16MiB",
            "--hdd-size",
            "64MiB",
        ],
    ));
    let mut serve = tierd_in(cwd, &["serve"]);
    serve.args(base).args(quiet).args(["--ssd-size", "32MiB"]);
    let err = fails(&mut serve);
    for want in ["ssd-size", "16.00 MiB", "32.00 MiB", "Drop ssd-size"] {
        assert!(err.contains(want), "{want:?} missing: {err}");
    }
    let mut serve = tierd_in(cwd, &["serve"]);
    serve.args(base).args(quiet).env("TIERD_HDD_SIZE", "1GiB");
    let err = fails(&mut serve);
    assert!(
        err.contains("hdd-size") && err.contains("64.00 MiB"),
        "{err}"
    );
    let mut format = tierd_in(cwd, &["format", "--force"]);
    format.args(["--data-dir", "d1", "--ssd-size", "1GB"]);
    let err = fails(&mut format);
    assert!(err.contains("ssd-size"), "{err}");
    let len = |f: &str| {
        std::fs::metadata(cwd.join("d1").join(f))
            .map(|m| m.len())
            .ok()
    };
    assert_eq!(len("ssd.img"), Some(16 * MIB), "the image was resized");
    // The same sizes, or none, open the volume.
    let mut serve = tierd_in(cwd, &["serve"]);
    serve
        .args(base)
        .args(quiet)
        .args(["--ssd-size", "16MiB", "--hdd-size", "64MiB"]);
    drop(Serving::start(&mut serve, &cwd.join("same.log")));
    let mut serve = tierd_in(cwd, &["serve"]);
    serve.args(base).args(quiet);
    drop(Serving::start(&mut serve, &cwd.join("none.log")));
}
