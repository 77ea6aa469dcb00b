//! Unit tests of loading, layering, keys and validation.

use super::keys::{default_leaves, leaves};
use super::*;
use crate::units::ByteSize;
use std::path::PathBuf;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn layers_apply_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tierd.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:1\"\nextent-size = \"2MiB\"\nssd-size = \"1GiB\"\n",
    )
    .unwrap();
    let d = Config::load(None, env(&[]), &[]).unwrap();
    assert_eq!(d, Config::default());
    let c = Config::load(
        Some(&file),
        env(&[
            ("TIERD_LISTEN", "127.0.0.1:2"),
            ("TIERD_EXTENT_SIZE", "4MiB"),
            ("TIERD_CONFIG", "ignored: the file comes from the caller"),
            ("HOME", "/root"),
        ]),
        &[("listen", "127.0.0.1:3".into())],
    )
    .unwrap();
    assert_eq!(c.listen, "127.0.0.1:3");
    assert_eq!(c.extent_size, ByteSize(4 << 20));
    assert_eq!(c.ssd_size, ByteSize(1 << 30));
    assert_eq!(c.hdd_size, ByteSize(32 << 30));
}

/// Keys the example leaves commented out although they have a default:
/// setting them asks `format` and `serve` to create image files, which a
/// copy of the example must not do for a mistyped device.
const SET_ONLY_ON_PURPOSE: [&str; 2] = ["ssd-size", "hdd-size"];

#[test]
fn the_example_config_asks_for_no_image_sizes() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tierd.example.toml");
    let l = Config::load_layers(Some(&path), env(&[]), &[]).expect("example loads");
    for key in SET_ONLY_ON_PURPOSE {
        assert!(
            !l.is_given(key),
            "docs/tierd.example.toml sets {key}: a copy of it would make `tierd format` create an image for a mistyped device"
        );
    }
}

#[test]
fn the_example_config_loads_and_matches_the_defaults() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tierd.example.toml");
    let c = Config::load(Some(&path), env(&[]), &[]).expect("example loads");
    let d = Config::default();
    assert_eq!(c.heat, d.heat);
    assert_eq!(c.migrate, d.migrate);
    assert_eq!(c, d, "the example sets a value other than the default");
    // Every key is in the example: set to its default, or (an optional
    // key unset by default, which TOML cannot write) as a comment.
    let raw = config::Config::builder()
        .add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize::<serde_json::Value>())
        .expect("example parses");
    let set: Vec<String> = leaves(&raw).into_iter().map(|(k, _)| k).collect();
    let text = std::fs::read_to_string(&path).expect("example reads");
    let commented = commented_keys(&text);
    for (key, default) in default_leaves() {
        if default.is_null() || SET_ONLY_ON_PURPOSE.contains(&key.as_str()) {
            assert!(
                commented.contains(key),
                "docs/tierd.example.toml lacks `# {key} = ...`"
            );
        } else {
            assert!(set.contains(key), "docs/tierd.example.toml lacks `{key}`");
        }
    }
    for key in set.iter().chain(&commented) {
        assert!(
            is_key(key),
            "docs/tierd.example.toml has unknown key `{key}`"
        );
    }
    let e = Config::load(None, env(&[("TIERD_MIGRATE__PROMOTE_BORROW", "1.5")]), &[]).unwrap_err();
    assert!(e.to_string().contains("promote-borrow"), "{e}");
}

#[test]
fn bad_values_name_the_key() {
    let e = Config::load(None, env(&[("TIERD_EXTENT_SIZE", "3MiB")]), &[]).unwrap_err();
    assert!(e.to_string().contains("extent-size"), "{e}");
    let e = Config::load(None, env(&[]), &[("listen", "nowhere".into())]).unwrap_err();
    assert!(e.to_string().contains("listen"), "{e}");
    let e = Config::load(None, env(&[("TIERD_SSD_SIZE", "lots")]), &[]).unwrap_err();
    assert!(e.to_string().contains("lots"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "no-such-key = 1\n").unwrap();
    let e = Config::load(Some(&file), env(&[]), &[]).unwrap_err();
    assert!(e.to_string().contains("no-such-key"), "{e}");
}

/// `# key = value` lines of a TOML text, `table.key` under `[table]`.
fn commented_keys(text: &str) -> Vec<String> {
    let mut table = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = format!("{t}.");
        } else if let Some(c) = line.strip_prefix('#') {
            let Some((k, _)) = c.trim_start().split_once('=') else {
                continue;
            };
            let k = k.trim();
            if !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                out.push(format!("{table}{k}"));
            }
        }
    }
    out
}

#[test]
fn every_table_refuses_unknown_keys_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    for (text, key) in [
        ("[heat]\nno-such-key = 1\n", "heat.no-such-key"),
        ("[migrate]\nno-such-key = 1\n", "migrate.no-such-key"),
        (
            "[migrate]\nmax-moves = 3\nno-such-key = 1\n",
            "migrate.no-such-key",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let e = Config::load(Some(&file), env(&[]), &[]).unwrap_err();
        assert!(e.to_string().contains(key), "{text:?}: {e}");
    }
    // The policy's keys, flattened into [migrate], are still taken.
    std::fs::write(&file, "[migrate]\nmax-moves = 3\npromote-borrow = 0.5\n").unwrap();
    let c = Config::load(Some(&file), env(&[]), &[]).unwrap();
    assert_eq!(c.migrate.policy.max_moves, 3);
    assert_eq!(c.migrate.policy.promote_borrow, 0.5);
}

#[test]
fn keys_come_from_the_struct() {
    let keys: Vec<&str> = keys().collect();
    for k in [
        "data-dir",
        "listen",
        "extent-size",
        "export-name",
        "control",
        "heat.enabled",
        "heat.half-life",
        "migrate.enabled",
        "migrate.reserve-boost",
        "migrate.heat-save-interval",
        "migrate.max-moves",
        "migrate.promote-borrow",
    ] {
        assert!(keys.contains(&k), "{k} missing from {keys:?}");
    }
    assert!(!keys.contains(&"heat") && !keys.contains(&"migrate.policy"));
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
}

#[test]
fn every_key_has_its_environment_variable() {
    assert_eq!(env_var("listen"), "TIERD_LISTEN");
    assert_eq!(env_var("extent-size"), "TIERD_EXTENT_SIZE");
    assert_eq!(env_var("heat.half-life"), "TIERD_HEAT__HALF_LIFE");
    assert_eq!(env_var("migrate.max-moves"), "TIERD_MIGRATE__MAX_MOVES");
    for k in keys() {
        assert_eq!(key_of_env(&env_var(k)).as_deref(), Some(k));
    }
    assert_eq!(
        key_of_env("TIERD_extent_size").as_deref(),
        Some("extent-size")
    );
    for v in [
        "TIERD_CONFIG",
        "TIERD_UNRELATED",
        "TIERD_HEAT__NO_SUCH",
        "TIERD_DATA__DIR",
    ] {
        assert_eq!(key_of_env(v), None, "{v}");
    }
    // Each key set through its variable to its default as a string
    // loads the defaults: every key is reachable from the environment.
    for (k, d) in default_leaves() {
        let v = match d {
            serde_json::Value::Null => continue,
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let c = Config::load(None, env(&[(&env_var(k), &v)]), &[])
            .unwrap_or_else(|e| panic!("{k} = {v:?}: {e}"));
        assert_eq!(c, Config::default(), "{k} = {v:?}");
    }
    let c = Config::load(
        None,
        env(&[
            ("TIERD_EXPORT_NAME", "foo"),
            ("TIERD_HEAT__ENABLED", "false"),
            ("TIERD_MIGRATE__HEAT_SAVE_INTERVAL", "10s"),
            ("TIERD_READ_ONLY", "true"),
            ("TIERD_MAX_CONNECTIONS", "9"),
        ]),
        &[],
    )
    .unwrap();
    assert_eq!(c.export_name, "foo");
    assert!(!c.heat.enabled && c.read_only);
    assert_eq!(c.max_connections, 9);
    assert_eq!(
        c.migrate.heat_save_interval,
        std::time::Duration::from_secs(10)
    );
}

#[test]
fn sections_validate_themselves_naming_the_key() {
    let mut c = Config::default();
    c.heat.coverage_window = std::time::Duration::ZERO;
    assert_eq!(c.heat.validate().unwrap_err().key, "heat.coverage-window");
    let mut c = Config::default();
    c.migrate.batch = 0;
    assert_eq!(c.validate().unwrap_err().key, "migrate.batch");
    let mut c = Config {
        nbd_threads: 65,
        ..Config::default()
    };
    assert_eq!(c.validate().unwrap_err().key, "nbd-threads");
    c.nbd_threads = 0;
    assert!(c.validate().is_ok(), "0: no threads of its own");
    c.nbd_poll = std::time::Duration::from_millis(2);
    assert_eq!(c.validate().unwrap_err().key, "nbd-poll");
    c.nbd_poll = std::time::Duration::ZERO;
    assert!(c.validate().is_ok(), "0s turns polling off");
    c.migrate.batch = 1;
    c.migrate.reserve_boost = -1.0;
    assert_eq!(c.validate().unwrap_err().key, "migrate.reserve-boost");
    c.migrate.reserve_boost = 1.0;
    c.migrate.policy.promote_margin = f32::NAN;
    assert_eq!(
        c.migrate.validate().unwrap_err().key,
        "migrate.promote-margin"
    );
    let e = Config::load(None, env(&[("TIERD_MIGRATE__INTERVAL", "0")]), &[]).unwrap_err();
    assert!(e.to_string().contains("migrate.interval"), "{e}");
}

#[test]
fn the_write_log_and_shadows_are_on_unless_switched_off() {
    let c = Config::default();
    assert!(c.write_log && c.shadows);
    let c = Config::load(
        None,
        env(&[("TIERD_WRITE_LOG", "false"), ("TIERD_SHADOWS", "false")]),
        &[],
    )
    .unwrap();
    assert!(!c.write_log && !c.shadows);
    let e = Config::load(None, env(&[("TIERD_WRITE_LOG", "sometimes")]), &[]).unwrap_err();
    assert!(e.to_string().contains("write-log"), "{e}");
}

#[test]
fn changed_keys_say_how_they_take_effect() {
    let a = Config::default();
    let mut b = a.clone();
    assert!(a.changed_keys(&b).is_empty());
    b.migrate.policy.max_moves = 3;
    b.heat.half_life = std::time::Duration::from_secs(600);
    b.extent_size = ByteSize(2 << 20);
    b.read_only = true;
    b.log_level = "debug".into();
    b.ssd = Some(PathBuf::from("/dev/x"));
    let changed = b.changed_keys(&a);
    assert_eq!(
        changed,
        [
            "extent-size",
            "heat.half-life",
            "log-level",
            "migrate.max-moves",
            "read-only",
            "ssd"
        ]
    );
    let effects: Vec<Reload> = changed.iter().map(|k| reload_effect(k)).collect();
    assert_eq!(
        effects,
        [
            Reload::Format,
            Reload::Restart,
            Reload::Live,
            Reload::Live,
            Reload::Restart,
            Reload::Restart
        ]
    );
}

#[test]
fn unknown_keys_name_the_nearest_known_key() {
    assert_eq!(nearest_key("migrate.bandwith"), Some("migrate.bandwidth"));
    assert_eq!(nearest_key("bandwith"), Some("migrate.bandwidth"));
    assert_eq!(nearest_key("extent-szie"), Some("extent-size"));
    assert_eq!(nearest_key("heat.half_life"), Some("heat.half-life"));
    assert_eq!(nearest_key("unrelated"), None);
    assert_eq!(nearest_key("migrate.no-such"), None);
    // Every layer refuses an unknown key, naming it, where it was and the
    // nearest known key.
    let e = Config::load(None, env(&[("TIERD_MIGRATE__BANDWITH", "1MiB")]), &[]).unwrap_err();
    let text = e.to_string();
    for want in [
        "migrate.bandwith",
        "TIERD_MIGRATE__BANDWITH",
        "did you mean `migrate.bandwidth`",
    ] {
        assert!(text.contains(want), "{want:?} not in {text:?}");
    }
    let e = Config::load(None, env(&[("TIERD_UNRELATED", "x")]), &[]).unwrap_err();
    assert!(e.to_string().contains("`unrelated`"), "{e}");
    for var in NOT_KEYS {
        Config::load(None, env(&[(var, "1")]), &[]).unwrap_or_else(|e| panic!("{var}: {e}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.toml");
    std::fs::write(&file, "[migrate]\nbandwith = \"1MiB\"\n").unwrap();
    let e = Config::load(Some(&file), env(&[]), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("migrate.bandwith")
            && e.contains("typo.toml")
            && e.contains("did you mean `migrate.bandwidth`"),
        "{e}"
    );
    let e = Config::load(None, env(&[]), &[("migrate.bandwith", "1MiB".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("did you mean `migrate.bandwidth`"), "{e}");
    let e = Config::default()
        .overridden(&[("migrate.bandwith".into(), "1MiB".into())])
        .unwrap_err()
        .to_string();
    assert!(e.contains("did you mean `migrate.bandwidth`"), "{e}");
}

#[test]
fn the_layers_say_which_keys_they_set() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tierd.toml");
    std::fs::write(&file, "ssd-size = \"4GiB\"\n[migrate]\nmax-moves = 3\n").unwrap();
    let l = Config::load_layers(
        Some(&file),
        env(&[("TIERD_HDD_SIZE", "1GiB")]),
        &[("listen", "127.0.0.1:1".into())],
    )
    .unwrap();
    let given: Vec<&str> = l.given.iter().copied().collect();
    assert_eq!(
        given,
        ["hdd-size", "listen", "migrate.max-moves", "ssd-size"],
        "a key set to its default is given too"
    );
    assert!(l.is_given("ssd-size") && !l.is_given("extent-size"));
}

#[test]
fn defaults_read_as_the_configuration_writes_them() {
    assert_eq!(default_of("extent-size").as_deref(), Some("1MiB"));
    assert_eq!(default_of("export-name").as_deref(), Some(""));
    assert_eq!(default_of("ssd").as_deref(), Some("<data-dir>/ssd.img"));
    assert_eq!(default_of("unix"), None, "no default, not \"null\"");
    assert_eq!(default_of("no-such-key"), None);
}

#[test]
fn the_metadata_cache_is_bounded_and_set_by_flag_or_environment() {
    let d = Config::load(None, env(&[]), &[]).expect("defaults");
    assert_eq!(d.meta_cache, ByteSize(64 << 20));
    let c = Config::load(None, env(&[]), &[("meta-cache", "256MiB".into())]).expect("flag");
    assert_eq!(c.meta_cache, ByteSize(256 << 20));
    let c = Config::load(None, env(&[("TIERD_META_CACHE", "8MiB")]), &[]).expect("env");
    assert_eq!(c.meta_cache, ByteSize(8 << 20));
    let e = Config::load(None, env(&[]), &[("meta-cache", "512KiB".into())]).unwrap_err();
    assert!(
        e.to_string().contains("meta-cache") && e.to_string().contains("at least 1MiB"),
        "{e}"
    );
}
