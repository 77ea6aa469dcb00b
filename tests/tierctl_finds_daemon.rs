//! tierctl finds a running daemon from any directory: `tierd serve`
//! registers its control socket in the runtime directory
//! (`$XDG_RUNTIME_DIR/tierd` here) and removes it when it stops; tierctl,
//! run elsewhere with no `--control` and no `TIERD_CONTROL`, uses it and
//! says which socket it used; with two daemons registered it asks which.

mod common;
mod start_support;

use std::path::Path;
use std::process::{Command, Output};

use common::{run, show, tempdir, tierctl_bin};
use start_support::{tierd_in, Serving};

fn tierctl_in(cwd: &Path, runtime: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(tierctl_bin());
    c.current_dir(cwd)
        .args(args)
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("TIERD_CONTROL")
        .env("NO_COLOR", "1");
    run(&mut c)
}

fn serve_in(cwd: &Path, runtime: &Path) -> Serving {
    let args = "serve --ssd-size=16MiB --hdd-size=64MiB --listen=127.0.0.1:0 --metrics-listen=";
    let args: Vec<&str> = args.split_whitespace().collect();
    let mut c = tierd_in(cwd, &args);
    c.env("XDG_RUNTIME_DIR", runtime);
    Serving::start(&mut c, &cwd.join("serve.log"))
}

#[test]
fn tierctl_finds_the_daemon_from_another_directory_and_says_which() {
    let (runtime, a, b, elsewhere) = (tempdir(), tempdir(), tempdir(), tempdir());
    let daemon = serve_in(a.path(), runtime.path());
    let sock = a.path().join("tierd-data/control.sock");
    let out = tierctl_in(elsewhere.path(), runtime.path(), &["status", "--json"]);
    assert!(out.status.success(), "{}", show("tierctl status", &out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert!(v["capacity_bytes"].as_u64().is_some(), "{v}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("using the daemon at") && err.contains(&sock.display().to_string()),
        "tierctl does not say which daemon it used: {err}\n{}",
        daemon.log()
    );
    assert!(
        err.contains(&runtime.path().join("tierd").display().to_string()),
        "nor where it found it: {err}"
    );

    // A second daemon: tierctl will not guess.
    let second = serve_in(b.path(), runtime.path());
    let out = tierctl_in(elsewhere.path(), runtime.path(), &["status"]);
    assert!(!out.status.success(), "{}", show("tierctl status", &out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("several daemons")
            && err.contains("--control")
            && err.contains(&sock.display().to_string())
            && err.contains(
                &b.path()
                    .join("tierd-data/control.sock")
                    .display()
                    .to_string()
            ),
        "{err}"
    );
    drop(second);

    // Stopped, the daemon is no longer registered.
    drop(daemon);
    let out = tierctl_in(elsewhere.path(), runtime.path(), &["status"]);
    assert!(!out.status.success(), "{}", show("tierctl status", &out));
    let left: Vec<_> = std::fs::read_dir(runtime.path().join("tierd"))
        .expect("the registry directory")
        .collect();
    assert!(left.is_empty(), "registrations left: {left:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no running daemon registered in"),
        "the refusal does not say where it looked: {err}"
    );
}
