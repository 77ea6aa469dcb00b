//! Every configuration path refuses a key it does not know, naming the key,
//! where it was found and the nearest known key: the configuration file, a
//! `TIERD_*` environment variable (before anything is created), a flag, and
//! `tierctl config set` and `config reset` on a running daemon.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{run_timeout, show, tempdir, tierctl_bin, tierd_bin, Daemon, DaemonOptions};

/// `tierd serve` on an empty data directory, on a private port, with
/// `env` added. A refusal ends it at once; a serving daemon runs into the
/// timeout, which fails the test.
fn serve(data: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(tierd_bin());
    c.arg("serve")
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", ""])
        .args(["--ssd-size", "16MiB", "--hdd-size", "64MiB"])
        .args(args)
        .envs(env.iter().copied())
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("TIERD_CONFIG");
    run_timeout(&mut c, Duration::from_secs(20))
}

fn refused(out: &Output, wants: &[&str]) {
    let what = show("tierd serve", out);
    assert!(!out.status.success(), "{what}");
    let err = String::from_utf8_lossy(&out.stderr);
    for want in wants {
        assert!(err.contains(want), "{want:?} missing: {what}");
    }
}

#[test]
fn a_typo_in_an_environment_variable_stops_the_start() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let out = serve(&data, &[("TIERD_MIGRATE__BANDWITH", "1MiB")], &[]);
    refused(
        &out,
        &[
            "TIERD_MIGRATE__BANDWITH",
            "migrate.bandwith",
            "did you mean `migrate.bandwidth`",
        ],
    );
    assert!(!data.exists(), "nothing is created for a refused start");
    let out = serve(&data, &[("TIERD_EXTENT_SIZ", "1MiB")], &[]);
    refused(&out, &["TIERD_EXTENT_SIZ", "did you mean `extent-size`"]);
}

#[test]
fn a_typo_in_the_configuration_file_names_the_nearest_key() {
    let dir = tempdir();
    let file = dir.path().join("tierd.toml");
    std::fs::write(&file, "[migrate]\nbandwith = \"1MiB\"\n").expect("writing the file");
    let file_arg = file.display().to_string();
    let out = serve(&dir.path().join("data"), &[], &["--config", &file_arg]);
    refused(
        &out,
        &[
            "migrate.bandwith",
            "tierd.toml",
            "did you mean `migrate.bandwidth`",
        ],
    );
}

#[test]
fn a_typo_in_a_flag_names_the_nearest_flag() {
    let dir = tempdir();
    let out = serve(
        &dir.path().join("data"),
        &[],
        &["--migrate.bandwith", "1MiB"],
    );
    refused(&out, &["--migrate.bandwith", "--migrate.bandwidth"]);
}

#[test]
fn config_set_and_reset_of_an_unknown_key_name_the_nearest_key() {
    let d = Daemon::start_with(DaemonOptions::small());
    let sock = d.data_dir().join("control.sock");
    for args in [
        &["config", "set", "migrate.bandwith", "1MiB"][..],
        &["config", "reset", "migrate.bandwith"][..],
    ] {
        let out = run_timeout(
            Command::new(tierctl_bin())
                .arg("--control")
                .arg(&sock)
                .args(args)
                .env("NO_COLOR", "1"),
            Duration::from_secs(30),
        );
        let what = show(&format!("tierctl {args:?}"), &out);
        assert!(!out.status.success(), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("migrate.bandwith") && err.contains("did you mean `migrate.bandwidth`"),
            "{what}"
        );
    }
}
