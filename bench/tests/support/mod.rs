//! What the bench crate's integration tests share: finding the `tierd`
//! binary they run.

use std::path::{Path, PathBuf};

/// The `tierd` binary of this build (next to the test's `deps` directory;
/// `cargo build --workspace` first), or `TIERD_BIN`.
pub fn tierd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TIERD_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "TIERD_BIN={} does not exist", p.display());
        return p;
    }
    let exe = std::env::current_exe().expect("locating the test executable");
    // target/<profile>/deps/<test> -> target/<profile>/tierd
    let p = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable is in target/<profile>/deps")
        .join("tierd");
    assert!(
        p.is_file(),
        "{} not found: build it first: cargo build --workspace (or set TIERD_BIN)",
        p.display()
    );
    p
}
