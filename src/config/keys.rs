//! The configuration's keys: the list (derived from the [`Config`] struct by
//! serializing its defaults, `table.key` inside a table), each key's default
//! and `TIERD_*` environment variable, how a change of each takes effect
//! on SIGHUP, and the refusal of a key that is none of them, naming the
//! nearest known key.

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
/// `128MiB`, `true`, `""`), or as it follows from other keys
/// (`<data-dir>/ssd.img`); `None` for a key without a default (an unset
/// optional key, such as `unix` or `tls-cert`) or no key at all.
pub fn default_of(key: &str) -> Option<String> {
    let derived = match key {
        "ssd" => Some("<data-dir>/ssd.img"),
        "hdd" => Some("<data-dir>/hdd.img"),
        "meta-dir" => Some("<data-dir>/meta"),
        "control" => Some("control.sock beside meta-dir"),
        "reserve" => Some("4GiB, at most 25 % of the SSD"),
        _ => None,
    };
    if let Some(d) = derived {
        return Some(d.to_string());
    }
    let leaves = default_leaves();
    let i = leaves.binary_search_by(|(k, _)| k.as_str().cmp(key)).ok()?;
    match &leaves[i].1 {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        v => Some(v.to_string()),
    }
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
    env_key_name(var).filter(|k| is_key(k))
}

/// The key name a `TIERD_*` variable spells, whether or not it is a key.
fn env_key_name(var: &str) -> Option<String> {
    let rest = var.strip_prefix("TIERD_")?.to_ascii_lowercase();
    Some(
        rest.split("__")
            .map(|part| part.replace('_', "-"))
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// `TIERD_*` variables that are not configuration keys: the configuration
/// file's, and the knobs of tierd's own test suite and scripts, which the
/// daemons those start inherit. Any other `TIERD_*` variable that names no
/// key stops the start.
pub const NOT_KEYS: &[&str] = &[
    "TIERD_CONFIG",
    "TIERD_BIN",
    "TIERD_TEST_REMOTE_HDD",
    "TIERD_CRASH_SEED",
    "TIERD_CRASH_CYCLES",
    "TIERD_SOAK_CYCLES",
    "TIERD_FUZZ_ITERS",
    "TIERD_MODEL_SEEDS",
    "TIERD_POWER_SEEDS",
];

/// The unknown key a `TIERD_*` variable names, if it names one: `None` for
/// a variable that sets a key, one of [`NOT_KEYS`], or no `TIERD_*`
/// variable at all.
pub fn unknown_env_key(var: &str) -> Option<UnknownKey> {
    if NOT_KEYS.contains(&var) {
        return None;
    }
    let key = env_key_name(var)?;
    (!is_key(&key)).then(|| UnknownKey::new(&key, Origin::Env(var.to_string())))
}

/// Whether `name` is a table of keys (`heat`, `migrate`).
pub fn is_table(name: &str) -> bool {
    let prefix = format!("{name}.");
    keys().any(|k| k.starts_with(&prefix))
}

/// Where an unknown key was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The configuration file.
    File(std::path::PathBuf),
    /// A `TIERD_*` environment variable.
    Env(String),
    /// A command-line flag or `tierctl config set`.
    Given,
}

impl Origin {
    fn text(&self) -> String {
        match self {
            Origin::File(p) => format!(" in {}", p.display()),
            Origin::Env(var) => format!(" (environment variable {var})"),
            Origin::Given => String::new(),
        }
    }
}

/// A key no configuration has, with where it was found and the nearest
/// key there is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown configuration key `{key}`{}{}", .origin.text(), hint(.nearest))]
pub struct UnknownKey {
    /// The key as given (`migrate.bandwith`).
    pub key: String,
    /// Where it was found.
    pub origin: Origin,
    /// The known key nearest to it, if one is near enough to be meant.
    pub nearest: Option<&'static str>,
}

fn hint(nearest: &Option<&'static str>) -> String {
    match nearest {
        Some(k) => format!(": did you mean `{k}`?"),
        None => " (docs/tierd.example.toml lists every key)".into(),
    }
}

impl UnknownKey {
    /// `key`, found at `origin`, with the known key nearest to it.
    pub fn new(key: &str, origin: Origin) -> UnknownKey {
        UnknownKey {
            key: key.to_string(),
            origin,
            nearest: nearest_key(key),
        }
    }
}

/// The known key nearest to `unknown` by edit distance (a letter left out,
/// added, changed or two swapped), if it is near enough to be the one
/// meant: at most a third of its name's length away (the part after the
/// table). A key without a table is
/// also compared with the keys inside tables (`bandwith` finds
/// `migrate.bandwidth`).
pub fn nearest_key(unknown: &str) -> Option<&'static str> {
    let unknown = unknown.to_ascii_lowercase().replace('_', "-");
    let mut best: Option<(usize, &'static str)> = None;
    for k in keys() {
        let mut d = edit_distance(&unknown, k);
        if !unknown.contains('.') {
            if let Some((_, name)) = k.split_once('.') {
                d = d.min(edit_distance(&unknown, name));
            }
        }
        if best.is_none_or(|(b, _)| d < b) {
            best = Some((d, k));
        }
    }
    let (d, k) = best?;
    // A third of the key's own name: a shared table prefix makes no typo.
    let name = unknown.rsplit('.').next().unwrap_or(&unknown);
    (d <= (name.len() / 3).max(1)).then_some(k)
}

/// Optimal string alignment distance: insertions, deletions, substitutions
/// and swaps of neighbours each cost one.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// How a change of `key` takes effect on SIGHUP.
pub fn reload_effect(key: &str) -> Reload {
    match key {
        "log-level" | "heat.sequential-cutoff" => Reload::Live,
        k if k.starts_with("migrate.") || k.starts_with("durability.") => Reload::Live,
        "ssd-size" | "hdd-size" | "extent-size" | "reserve" => Reload::Format,
        _ => Reload::Restart,
    }
}
