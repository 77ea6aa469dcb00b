//! The configuration's keys: the list (derived from the [`Config`] struct by
//! serializing its defaults, `table.key` inside a table), each key's default
//! and `TIERD_*` environment variable, and how a change of each takes effect
//! on SIGHUP.

use super::Config;

/// How a key changed in the file takes effect on SIGHUP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Applied to the running daemon (`[migrate]`, `log-level`).
    Live,
    /// Only after a restart.
    Restart,
    /// Only when a volume is formatted: the running volume keeps its
    /// geometry.
    Format,
}

/// Every key with its default, `table.key` inside a table, derived from
/// serializing [`Config::default`] (so no key can be left out of a list);
/// sorted. A value of `Null` is an unset optional key.
pub(super) fn default_leaves() -> &'static [(String, serde_json::Value)] {
    static LEAVES: std::sync::OnceLock<Vec<(String, serde_json::Value)>> =
        std::sync::OnceLock::new();
    LEAVES.get_or_init(|| {
        // Plain strings, numbers, booleans and paths of the built-in
        // defaults: serializing them cannot fail.
        let v = serde_json::to_value(Config::default()).expect("the defaults serialize");
        leaves(&v)
    })
}

/// The leaves of a table, `table.key` inside nested tables.
pub(super) fn leaves(v: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
        match v.as_object() {
            Some(map) => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            None => out.push((prefix.to_string(), v.clone())),
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out);
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every configuration key, `table.key` inside a table (`heat.half-life`),
/// sorted; derived from the [`Config`] struct itself.
pub fn keys() -> impl Iterator<Item = &'static str> {
    default_leaves().iter().map(|(k, _)| k.as_str())
}

/// The built-in default of `key` as the configuration writes it (`60s`,
/// `128MiB`, `true`), if `key` is a key with a default.
pub fn default_of(key: &str) -> Option<String> {
    let leaves = default_leaves();
    let i = leaves.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
    Some(match &leaves[i].1 {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    })
}

/// Whether `key` is a configuration key.
pub fn is_key(key: &str) -> bool {
    default_leaves()
        .binary_search_by(|(k, _)| k.as_str().cmp(key))
        .is_ok()
}

/// The environment variable that sets `key`: `TIERD_`, then the key in
/// upper case with `-` as `_` and a table's `.` as `__`
/// (`TIERD_EXTENT_SIZE`, `TIERD_MIGRATE__MAX_MOVES`).
pub fn env_var(key: &str) -> String {
    format!(
        "TIERD_{}",
        key.replace('.', "__")
            .replace('-', "_")
            .to_ascii_uppercase()
    )
}

/// The key a `TIERD_*` environment variable sets, if it names one (the
/// inverse of [`env_var`]; the part after `TIERD_` in any case).
pub fn key_of_env(var: &str) -> Option<String> {
    let rest = var.strip_prefix("TIERD_")?.to_ascii_lowercase();
    let key = rest
        .split("__")
        .map(|part| part.replace('_', "-"))
        .collect::<Vec<_>>()
        .join(".");
    is_key(&key).then_some(key)
}

/// How a change of `key` takes effect on SIGHUP.
pub fn reload_effect(key: &str) -> Reload {
    match key {
        "log-level" | "heat.sequential-cutoff" => Reload::Live,
        k if k.starts_with("migrate.") => Reload::Live,
        "ssd-size" | "hdd-size" | "extent-size" | "reserve" => Reload::Format,
        _ => Reload::Restart,
    }
}
