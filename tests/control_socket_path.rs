//! The control socket follows the volume: with explicit devices and
//! `--meta-dir`, `tierd serve` puts it beside the metadata directory and
//! leaves nothing in `./tierd-data`; with the defaults it stays
//! `<data-dir>/control.sock`.

mod common;
mod start_support;

use common::{sparse_file, tempdir, MIB};
use start_support::{succeeds, tierd_in, Serving};

#[test]
fn the_control_socket_sits_beside_an_explicit_metadata_directory() {
    let dir = tempdir();
    let cwd = dir.path();
    std::fs::create_dir_all(cwd.join("vol")).expect("mkdir");
    sparse_file(&cwd.join("vol/ssd.img"), 16 * MIB);
    sparse_file(&cwd.join("vol/hdd.img"), 64 * MIB);
    let devices = [
        "--ssd",
        "vol/ssd.img",
        "--hdd",
        "vol/hdd.img",
        "--meta-dir",
        "vol/meta",
    ];
    let mut format = tierd_in(cwd, &["format"]);
    format.args(devices);
    succeeds(&mut format);
    let mut serve = tierd_in(cwd, &["serve"]);
    serve
        .args(devices)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", ""]);
    let s = Serving::start(&mut serve, &cwd.join("serve.log"));
    assert!(
        cwd.join("vol/control.sock").exists(),
        "no vol/control.sock:\n{}",
        s.log()
    );
    assert!(
        !cwd.join("tierd-data").exists(),
        "./tierd-data was created for a volume that lives elsewhere:\n{}",
        s.log()
    );
}
