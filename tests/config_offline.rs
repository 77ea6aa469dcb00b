//! The configuration without a daemon: `tierd config show` prints every
//! key with its value in force, the layer it comes from (default, file,
//! environment, flag) and its default, as `serve` would load it;
//! `tierd config check` says a valid configuration is valid and exits
//! non-zero naming the key at fault. Neither starts a daemon or creates
//! anything.

mod common;
mod start_support;

use common::tempdir;
use serde_json::Value;
use start_support::{fails, succeeds, tierd_in};

fn row<'a>(rows: &'a [Value], key: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no row for {key}"))
}

#[test]
fn show_names_each_keys_value_source_and_default() {
    let dir = tempdir();
    let cwd = dir.path();
    std::fs::write(
        cwd.join("tierd.toml"),
        "listen = \"127.0.0.1:7000\"\nextent-size = \"2MiB\"\n[migrate]\nmax-moves = 9\n",
    )
    .expect("config");
    let mut cmd = tierd_in(
        cwd,
        &[
            "config",
            "show",
            "--config",
            "tierd.toml",
            "--extent-size",
            "4MiB",
            "--json",
        ],
    );
    cmd.env("TIERD_EXPORT_NAME", "vol");
    let (out, _) = succeeds(&mut cmd);
    let rows: Vec<Value> = serde_json::from_str(&out).expect("config show --json");
    let keys: Vec<&str> = rows.iter().filter_map(|r| r["key"].as_str()).collect();
    let all: Vec<&str> = tierd::config::keys().collect();
    assert_eq!(keys, all, "every key, in order");
    let listen = row(&rows, "listen");
    assert_eq!(listen["value"], "127.0.0.1:7000");
    assert_eq!(listen["source"], "file tierd.toml");
    assert_eq!(listen["default"], "127.0.0.1:10809");
    assert_eq!(row(&rows, "migrate.max-moves")["source"], "file tierd.toml");
    let es = row(&rows, "extent-size");
    assert_eq!(
        (&es["value"], &es["source"]),
        (&"4MiB".into(), &"flag".into())
    );
    let name = row(&rows, "export-name");
    assert_eq!(name["value"], "vol");
    assert_eq!(name["source"], "env TIERD_EXPORT_NAME");
    let ssd = row(&rows, "ssd");
    assert_eq!(ssd["value"], "tierd-data/ssd.img", "the path in effect");
    assert_eq!(ssd["source"], "default");
    assert_eq!(ssd["default"], "<data-dir>/ssd.img");

    // The text: one line per key, the same columns.
    let mut cmd = tierd_in(cwd, &["config", "show", "--config", "tierd.toml"]);
    let (text, _) = succeeds(&mut cmd);
    let head = text.lines().next().unwrap_or_default();
    for col in ["key", "value", "source", "default"] {
        assert!(head.contains(col), "{col} missing: {head}");
    }
    let line = text
        .lines()
        .find(|l| l.starts_with("listen "))
        .unwrap_or_else(|| panic!("no listen line:\n{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words,
        [
            "listen",
            "127.0.0.1:7000",
            "file",
            "tierd.toml",
            "127.0.0.1:10809"
        ]
    );
    // Nothing was made: no data directory, no socket.
    assert!(!cwd.join("tierd-data").exists());
}

#[test]
fn check_passes_a_valid_configuration_and_names_the_bad_key() {
    let dir = tempdir();
    let cwd = dir.path();
    std::fs::write(cwd.join("good.toml"), "[migrate]\nbandwidth = \"64MiB\"\n").expect("good");
    let (out, _) = succeeds(&mut tierd_in(
        cwd,
        &["config", "check", "--config", "good.toml"],
    ));
    assert!(
        out.contains("valid") && out.contains("migrate.bandwidth"),
        "{out}"
    );
    // The shipped example is valid.
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tierd.example.toml");
    let example = example.display().to_string();
    succeeds(&mut tierd_in(
        cwd,
        &["config", "check", "--config", &example],
    ));

    for (text, key) in [
        ("extent-size = \"3MiB\"\n", "extent-size"),
        ("[migrate]\nbandwith = \"1MiB\"\n", "migrate.bandwith"),
        ("[heat]\nhalf-life = \"soon\"\n", "heat.half-life"),
    ] {
        std::fs::write(cwd.join("bad.toml"), text).expect("bad");
        let err = fails(&mut tierd_in(
            cwd,
            &["config", "check", "--config", "bad.toml"],
        ));
        assert!(err.contains(key), "{key} not named: {err}");
        let mut json = tierd_in(cwd, &["config", "check", "--config", "bad.toml", "--json"]);
        let out = common::run(&mut json);
        assert!(!out.status.success(), "{key}: --json exited 0");
        let v: Value = serde_json::from_slice(&out.stdout).expect("check --json");
        assert_eq!(v["valid"], false);
        assert_eq!(v["key"], key, "{v}");
    }
    // A bad environment variable and a bad flag are caught too.
    let mut env = tierd_in(cwd, &["config", "check"]);
    env.env("TIERD_LISTEN", "nowhere");
    let err = fails(&mut env);
    assert!(err.contains("listen"), "{err}");
    let err = fails(&mut tierd_in(
        cwd,
        &["config", "check", "--nbd-threads", "500"],
    ));
    assert!(err.contains("nbd-threads"), "{err}");
    assert!(!cwd.join("tierd-data").exists(), "check made something");
}
