//! The effective configuration as a person or a script reads it: every key
//! with its value in force (the paths that follow from `data-dir` as they
//! resolve), the layer it comes from and its built-in default; what
//! `tierd config show` prints with no daemon running.

use serde::Serialize;

use super::{default_of, Config, Loaded};

/// One key of the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyRow {
    /// The key (`migrate.bandwidth`).
    pub key: &'static str,
    /// Its value in force as the configuration writes it; `""` for an
    /// unset optional key or one turned off with `""`.
    pub value: String,
    /// Where the value comes from: `default`, `file PATH`, `env VAR` or
    /// `flag`.
    pub source: String,
    /// The built-in default (`""`: none).
    pub default: String,
}

impl Config {
    /// Every key with its value in force, sorted by key; the keys that
    /// follow from `data-dir` when unset (`ssd`, `hdd`, `meta-dir`,
    /// `control`) show the path in effect.
    pub fn effective_values(&self) -> Vec<(&'static str, String)> {
        self.values()
            .into_iter()
            .map(|(k, v)| {
                let v = match k {
                    "ssd" => self.ssd_path().display().to_string(),
                    "hdd" => self.hdd_path().display().to_string(),
                    "meta-dir" => self.meta_path().display().to_string(),
                    "control" => self
                        .control_path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    _ => v,
                };
                (k, v)
            })
            .collect()
    }
}

impl Loaded {
    /// Every key: value in force, source and default, sorted by key.
    pub fn rows(&self) -> Vec<KeyRow> {
        self.config
            .effective_values()
            .into_iter()
            .map(|(key, value)| KeyRow {
                key,
                value,
                source: self.source_of(key).to_string(),
                default: default_of(key).unwrap_or_default(),
            })
            .collect()
    }
}
