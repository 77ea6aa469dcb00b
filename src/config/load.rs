//! Loading the configuration: the layers (built-in defaults < file <
//! `TIERD_*` environment < flags, or the settings of `tierctl config set`
//! over a configuration) merged by the `config` crate through one mapping
//! of strings to typed values, then deserialized and validated; a value
//! that does not deserialize is traced back to its key.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::keys::{default_leaves, is_table, leaves, unknown_env_key, Origin, UnknownKey};
use super::{is_key, key_of_env, keys, Config, ConfigError};

/// A loaded configuration and the keys a layer above the built-in
/// defaults set (to the default value or not), each with the layer that
/// set it last.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    /// The configuration.
    pub config: Config,
    /// The keys the file, the environment or a flag set.
    pub given: BTreeSet<&'static str>,
    /// Where each given key's value comes from (the highest layer that set
    /// it); a key not here has its built-in default.
    pub sources: BTreeMap<&'static str, Source>,
}

impl Loaded {
    /// Whether a layer above the defaults set `key`.
    pub fn is_given(&self, key: &str) -> bool {
        self.given.contains(key)
    }

    /// The layer `key`'s value comes from.
    pub fn source_of(&self, key: &str) -> Source {
        self.sources.get(key).cloned().unwrap_or(Source::Default)
    }
}

/// The layer a key's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The built-in default.
    Default,
    /// The configuration file.
    File(PathBuf),
    /// A `TIERD_*` environment variable (its name).
    Env(String),
    /// A command-line flag (`--key`), or a setting made over the
    /// configuration.
    Flag,
}

impl std::fmt::Display for Source {
    /// `default`, `file tierd.toml`, `env TIERD_LISTEN`, `flag`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Env(var) => write!(f, "env {var}"),
            Source::Flag => f.write_str("flag"),
        }
    }
}

/// The key `name` as the list spells it (a `&'static str`), if it is one.
fn known(name: &str) -> Option<&'static str> {
    keys().find(|k| *k == name)
}

/// The keys of a configuration file; an unknown one is refused naming the
/// nearest known key.
fn file_keys(file: &Path) -> Result<Vec<&'static str>, ConfigError> {
    let v: serde_json::Value = config::Config::builder()
        .add_source(config::File::from(file).format(config::FileFormat::Toml))
        .build()?
        .try_deserialize()?;
    let mut out = Vec::new();
    for (name, _) in leaves(&v) {
        match known(&name) {
            Some(k) => out.push(k),
            // `heat = 1`: a table given a value, which deserializing names.
            None if is_table(&name) => {}
            None => {
                return Err(UnknownKey::new(&name, Origin::File(file.to_path_buf())).into());
            }
        }
    }
    Ok(out)
}

impl Config {
    /// Load: defaults < `file` (if any) < `TIERD_*` variables from `env` <
    /// `overrides` (key, value) from flags; then validate.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(&str, String)],
    ) -> Result<Self, ConfigError> {
        Ok(Config::load_layers(file, env, overrides)?.config)
    }

    /// [`Config::load`], also saying which keys the layers set. An unknown
    /// key in any layer (a file's key, a `TIERD_*` variable other than
    /// [`NOT_KEYS`](super::keys::NOT_KEYS), a flag's key) is refused,
    /// naming it, where it was found and the nearest known key.
    pub fn load_layers(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(&str, String)],
    ) -> Result<Loaded, ConfigError> {
        let mut sources = BTreeMap::new();
        let mut b =
            config::Config::builder().add_source(config::Config::try_from(&Config::default())?);
        if let Some(f) = file {
            for k in file_keys(f)? {
                sources.insert(k, Source::File(f.to_path_buf()));
            }
            b = b.add_source(config::File::from(f).format(config::FileFormat::Toml));
        }
        let mut env: Vec<(String, String)> = env.into_iter().collect();
        env.sort();
        for (k, v) in env {
            if let Some(unknown) = unknown_env_key(&k) {
                return Err(unknown.into());
            }
            if let Some(key) = key_of_env(&k).as_deref().and_then(known) {
                b = b.set_override(key, typed_for(key, &v))?;
                sources.insert(key, Source::Env(k));
            }
        }
        for (k, v) in overrides {
            let key = known(k).ok_or_else(|| UnknownKey::new(k, Origin::Given))?;
            sources.insert(key, Source::Flag);
            b = b.set_override(key, typed_for(key, v))?;
        }
        let merged = b.build()?;
        let cfg: Config = match merged.clone().try_deserialize() {
            Ok(c) => c,
            Err(e) => return Err(name_the_key(&merged, e)),
        };
        cfg.validate()?;
        Ok(Loaded {
            config: cfg,
            given: sources.keys().copied().collect(),
            sources,
        })
    }

    /// `self` with (key, value) pairs set over it, as flags would set them
    /// (`tierctl config set`), then validated.
    pub fn overridden(&self, pairs: &[(String, String)]) -> Result<Config, ConfigError> {
        let mut b = config::Config::builder().add_source(config::Config::try_from(self)?);
        for (k, v) in pairs {
            if !is_key(k) {
                return Err(UnknownKey::new(k, Origin::Given).into());
            }
            b = b.set_override(k.as_str(), typed_for(k, v))?;
        }
        let merged = b.build()?;
        let cfg: Config = match merged.clone().try_deserialize() {
            Ok(c) => c,
            Err(e) => return Err(name_the_key(&merged, e)),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

/// An environment or flag value as the type it looks like for table keys
/// and the top-level keys whose default is a number or a boolean, so they
/// can be set from strings (`TIERD_MIGRATE__MAX_MOVES=9`); paths, names
/// and addresses stay strings (a data directory may well be called `123`).
fn typed_for(key: &str, v: &str) -> config::Value {
    let scalar = default_leaves()
        .iter()
        .any(|(k, d)| k == key && (d.is_number() || d.is_boolean()));
    if !(key.contains('.') || scalar) {
        return v.into();
    }
    if let Ok(i) = v.parse::<i64>() {
        return i.into();
    }
    if let Ok(b) = v.parse::<bool>() {
        return b.into();
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() && !v.trim().is_empty() => f.into(),
        _ => v.into(),
    }
}

/// Deserialization errors of custom types do not say which key failed:
/// find it by putting each key alone on top of the defaults.
fn name_the_key(merged: &config::Config, err: config::ConfigError) -> ConfigError {
    let (Ok(all), Ok(defaults)) = (
        merged.clone().try_deserialize::<serde_json::Value>(),
        serde_json::to_value(Config::default()),
    ) else {
        return err.into();
    };
    let (Some(all), Some(defaults)) = (all.as_object(), defaults.as_object()) else {
        return err.into();
    };
    for (key, value) in all {
        let mut leaves = vec![(None, key, value)];
        if let Some(table) = value.as_object() {
            leaves = table.iter().map(|(k, v)| (Some(key), k, v)).collect();
        }
        for (table, k, v) in leaves {
            let mut probe = defaults.clone();
            match table {
                Some(t) => {
                    if let Some(serde_json::Value::Object(m)) = probe.get_mut(t) {
                        m.insert(k.clone(), v.clone());
                    }
                }
                None => {
                    probe.insert(k.clone(), v.clone());
                }
            }
            if let Err(e) = serde_json::from_value::<Config>(serde_json::Value::Object(probe)) {
                let name = match table {
                    Some(t) => format!("{t}.{k}"),
                    None => k.clone(),
                };
                return ConfigError::Value {
                    key: name,
                    problem: e.to_string(),
                };
            }
        }
    }
    err.into()
}
