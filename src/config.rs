//! The daemon configuration: one serde struct with kebab-case keys and
//! documented defaults, layered by the `config` crate: built-in defaults <
//! config file < `TIERD_*` environment < command-line flags, then validated.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::heat::HeatConfig;
use crate::migrate::MigrateConfig;
use crate::units::{duration_secs, ByteSize};
use crate::volume::{MAX_EXTENT_SIZE, MIN_EXTENT_SIZE};

/// Everything `tierd serve` and `tierd format` are configured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Config {
    /// Directory for the default image files, the metadata store and the
    /// control socket. Default `./tierd-data`.
    pub data_dir: PathBuf,
    /// The SSD: a block device or image file. Default `<data-dir>/ssd.img`.
    pub ssd: Option<PathBuf>,
    /// The HDD: a block device or image file. Default `<data-dir>/hdd.img`.
    pub hdd: Option<PathBuf>,
    /// The sled metadata directory. Default `<data-dir>/meta`.
    pub meta_dir: Option<PathBuf>,
    /// Size of the SSD image created on first start. Default `4GiB`.
    pub ssd_size: ByteSize,
    /// Size of the HDD image created on first start. Default `32GiB`.
    pub hdd_size: ByteSize,
    /// TCP address to serve NBD on; empty to serve on the Unix socket only.
    /// Default `127.0.0.1:10809`.
    pub listen: String,
    /// Unix socket to serve NBD on as well. Default none.
    pub unix: Option<PathBuf>,
    /// Extent size for a new volume. Default `1MiB`.
    pub extent_size: ByteSize,
    /// SSD space kept free for new writes, for a new volume.
    /// Default 4GiB capped at 25 % of the SSD.
    pub reserve: Option<ByteSize>,
    /// Open devices with O_DIRECT (bypass the page cache). Default false.
    pub direct_io: bool,
    /// Name of the export. Default "" (the default export).
    pub export_name: String,
    /// Log filter when RUST_LOG is unset. Default `info`.
    pub log_level: String,
    /// Give the SSD the timing of a modelled drive (`ssd-sata`, `ssd-nvme`)
    /// on the real clock, for demos and benchmarks on image files. Default
    /// none (the device's own speed).
    pub ssd_model: Option<String>,
    /// Give the HDD the timing of a modelled drive (`hdd-5400`, `hdd-7200`).
    /// Default none.
    pub hdd_model: Option<String>,
    /// Serve the volume read-only: writes, trims and zeroing get EPERM and
    /// clients see `NBD_FLAG_READ_ONLY`. Default false.
    pub read_only: bool,
    /// NBD connections served at once; more wait in the listen backlog.
    /// Default 256.
    pub max_connections: usize,
    /// Time a client has from connecting to the end of its handshake
    /// (including STARTTLS). Default `30s`.
    #[serde(with = "duration_secs")]
    pub handshake_timeout: std::time::Duration,
    /// Server certificate chain (PEM) for NBD over TLS (STARTTLS). With
    /// `tls-cert` and `tls-key` set, TLS is required of every client.
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `tls-cert`.
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM): when set, clients must present a certificate
    /// signed by one of them.
    pub tls_ca: Option<PathBuf>,
    /// HTTP address serving Prometheus metrics at `/metrics`; empty for
    /// none. Default `127.0.0.1:10810` (next to NBD's 10809; see
    /// docs/metrics.md for why not in the exporters' 9100-9999 range).
    pub metrics_listen: String,
    /// The control socket (`tierctl`); `""` for none.
    /// Default `<data-dir>/control.sock`.
    pub control: Option<PathBuf>,
    /// Heat tracking (`[heat]` table).
    pub heat: HeatConfig,
    /// Background migration and placement policy (`[migrate]` table).
    pub migrate: MigrateConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("tierd-data"),
            ssd: None,
            hdd: None,
            meta_dir: None,
            ssd_size: ByteSize(4 << 30),
            hdd_size: ByteSize(32 << 30),
            listen: "127.0.0.1:10809".to_string(),
            unix: None,
            extent_size: ByteSize(1 << 20),
            reserve: None,
            direct_io: false,
            export_name: String::new(),
            log_level: "info".to_string(),
            ssd_model: None,
            hdd_model: None,
            read_only: false,
            max_connections: 256,
            handshake_timeout: std::time::Duration::from_secs(30),
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
            metrics_listen: DEFAULT_METRICS_LISTEN.to_string(),
            control: None,
            heat: HeatConfig::default(),
            migrate: MigrateConfig::default(),
        }
    }
}

/// Why a configuration does not load.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or a value does not parse.
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    /// A value does not parse.
    #[error("configuration key `{key}`: {problem}")]
    Value {
        /// The key (`table.key` inside a table).
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A value parses but is not acceptable.
    #[error("configuration key `{key}`: {problem}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// Tables whose keys are settable as `TIERD_<TABLE>__<KEY>`.
pub const TABLES: [&str; 2] = ["heat", "migrate"];

/// Keys settable from `TIERD_<KEY>` (upper case, `-` as `_`).
pub const KEYS: [&str; 23] = [
    "data-dir",
    "ssd",
    "hdd",
    "meta-dir",
    "ssd-size",
    "hdd-size",
    "listen",
    "unix",
    "extent-size",
    "reserve",
    "direct-io",
    "export-name",
    "log-level",
    "ssd-model",
    "hdd-model",
    "read-only",
    "max-connections",
    "handshake-timeout",
    "tls-cert",
    "tls-key",
    "tls-ca",
    "metrics-listen",
    "control",
];

/// Default address of the metrics endpoint.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:10810";

impl Config {
    /// Load: defaults < `file` (if any) < `TIERD_*` variables from `env` <
    /// `overrides` (key, value) from flags; then validate.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(&str, String)],
    ) -> Result<Self, ConfigError> {
        let mut b =
            config::Config::builder().add_source(config::Config::try_from(&Config::default())?);
        if let Some(f) = file {
            b = b.add_source(config::File::from(f).format(config::FileFormat::Toml));
        }
        for (k, v) in env {
            if let Some(rest) = k.strip_prefix("TIERD_") {
                let key = rest.to_ascii_lowercase();
                let key = match key.split_once("__") {
                    Some((table, k)) if TABLES.contains(&table) => {
                        format!("{table}.{}", k.replace('_', "-"))
                    }
                    Some(_) => continue,
                    None => key.replace('_', "-"),
                };
                if KEYS.contains(&key.as_str()) || key.contains('.') {
                    let v = typed_for(&key, &v);
                    b = b.set_override(key, v)?;
                }
            }
        }
        for (k, v) in overrides {
            b = b.set_override(*k, typed_for(k, v))?;
        }
        let merged = b.build()?;
        let cfg: Config = match merged.clone().try_deserialize() {
            Ok(c) => c,
            Err(e) => return Err(name_the_key(&merged, e)),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Check values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let es = self.extent_size.0;
        if !es.is_power_of_two() || !(MIN_EXTENT_SIZE..=MAX_EXTENT_SIZE).contains(&es) {
            return Err(ConfigError::Invalid {
                key: "extent-size",
                problem: format!(
                    "{} must be a power of two from 64KiB to 64MiB",
                    self.extent_size
                ),
            });
        }
        if !self.listen.is_empty() && self.listen.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::Invalid {
                key: "listen",
                problem: format!(
                    "{:?} is not HOST:PORT (for example 127.0.0.1:10809)",
                    self.listen
                ),
            });
        }
        if !self.metrics_listen.is_empty() && self.metrics_listen.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::Invalid {
                key: "metrics-listen",
                problem: format!(
                    "{:?} is not HOST:PORT (for example {DEFAULT_METRICS_LISTEN}); \"\" turns metrics off",
                    self.metrics_listen
                ),
            });
        }
        if let Some(p) = self.control_path() {
            // sockaddr_un holds 108 bytes including the terminating NUL.
            if p.as_os_str().len() > 107 {
                return Err(ConfigError::Invalid {
                    key: "control",
                    problem: format!(
                        "{} is longer than a Unix socket path may be (107 bytes); choose a shorter path",
                        p.display()
                    ),
                });
            }
        }
        if self.listen.is_empty() && self.unix.is_none() {
            return Err(ConfigError::Invalid {
                key: "listen",
                problem: "empty, and no unix socket is set: nothing to serve on".into(),
            });
        }
        for (key, v) in [("ssd-size", self.ssd_size), ("hdd-size", self.hdd_size)] {
            if v.0 < 8 << 20 {
                return Err(ConfigError::Invalid {
                    key,
                    problem: format!("{v} is too small (at least 8MiB)"),
                });
            }
        }
        for (key, v, ssd) in [
            ("ssd-model", &self.ssd_model, true),
            ("hdd-model", &self.hdd_model, false),
        ] {
            if let Some(name) = v {
                let ok = crate::device::model::ModelKind::parse(name)
                    .is_some_and(|m| m.name().starts_with("ssd") == ssd);
                if !ok {
                    return Err(ConfigError::Invalid {
                        key,
                        problem: format!(
                            "{name:?}: use {}",
                            if ssd {
                                "ssd-sata or ssd-nvme"
                            } else {
                                "hdd-5400 or hdd-7200"
                            }
                        ),
                    });
                }
            }
        }
        let h = &self.heat;
        if h.half_life.is_zero() || h.coverage_window.is_zero() {
            return Err(ConfigError::Invalid {
                key: "heat.half-life",
                problem: "half-life and coverage-window must be above zero".into(),
            });
        }
        let m = &self.migrate;
        if m.interval.is_zero() {
            return Err(ConfigError::Invalid {
                key: "migrate.interval",
                problem: "must be above zero".into(),
            });
        }
        let p = &m.policy;
        let bad = |x: f32| x.is_nan() || x < 0.0;
        if bad(p.promote_margin)
            || bad(p.promote_margin_abs)
            || bad(p.promote_min_score)
            || !m.reserve_boost.is_finite()
            || m.reserve_boost < 0.0
        {
            return Err(ConfigError::Invalid {
                key: "migrate",
                problem: "scores, margins and reserve-boost must be finite and not negative".into(),
            });
        }
        if !(0.0..=1.0).contains(&p.promote_borrow) {
            return Err(ConfigError::Invalid {
                key: "migrate.promote-borrow",
                problem: "must be a share between 0 and 1".into(),
            });
        }
        if m.batch == 0 || m.batch > 1024 {
            return Err(ConfigError::Invalid {
                key: "migrate.batch",
                problem: "must be between 1 and 1024".into(),
            });
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid {
                key: "max-connections",
                problem: "must be at least 1".into(),
            });
        }
        if self.handshake_timeout.is_zero() {
            return Err(ConfigError::Invalid {
                key: "handshake-timeout",
                problem: "must be above zero".into(),
            });
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(ConfigError::Invalid {
                    key: "tls-key",
                    problem: "tls-cert is set but tls-key is not: TLS needs both".into(),
                })
            }
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "tls-cert",
                    problem: "tls-key is set but tls-cert is not: TLS needs both".into(),
                })
            }
            _ => {}
        }
        if self.tls_ca.is_some() && self.tls_cert.is_none() {
            return Err(ConfigError::Invalid {
                key: "tls-ca",
                problem: "client certificates need TLS: set tls-cert and tls-key too".into(),
            });
        }
        if tracing_level_ok(&self.log_level).is_err() {
            return Err(ConfigError::Invalid {
                key: "log-level",
                problem: format!(
                    "{:?}: use error, warn, info, debug or trace",
                    self.log_level
                ),
            });
        }
        Ok(())
    }

    /// The SSD path.
    pub fn ssd_path(&self) -> PathBuf {
        self.ssd
            .clone()
            .unwrap_or_else(|| self.data_dir.join("ssd.img"))
    }

    /// The HDD path.
    pub fn hdd_path(&self) -> PathBuf {
        self.hdd
            .clone()
            .unwrap_or_else(|| self.data_dir.join("hdd.img"))
    }

    /// The metadata directory.
    pub fn meta_path(&self) -> PathBuf {
        self.meta_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("meta"))
    }

    /// The control socket path, or `None` when turned off (`control = ""`).
    pub fn control_path(&self) -> Option<PathBuf> {
        match &self.control {
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
            None => Some(self.data_dir.join("control.sock")),
        }
    }

    /// Whether both devices are the embedded default image files.
    pub fn uses_default_images(&self) -> bool {
        self.ssd.is_none() && self.hdd.is_none()
    }
}

/// An environment or flag value as the type it looks like for table keys
/// and the numeric or boolean top-level keys, so they can be set from
/// strings (`TIERD_MIGRATE__MAX_MOVES=9`); paths, names and addresses stay
/// strings (a data directory may well be called `123`).
fn typed_for(key: &str, v: &str) -> config::Value {
    if !(key.contains('.') || ["direct-io", "read-only", "max-connections"].contains(&key)) {
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

fn tracing_level_ok(s: &str) -> Result<(), ()> {
    match s.to_ascii_lowercase().as_str() {
        "error" | "warn" | "info" | "debug" | "trace" | "off" => Ok(()),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                ("TIERD_UNRELATED", "x"),
            ]),
            &[("listen", "127.0.0.1:3".into())],
        )
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:3");
        assert_eq!(c.extent_size, ByteSize(4 << 20));
        assert_eq!(c.ssd_size, ByteSize(1 << 30));
        assert_eq!(c.hdd_size, ByteSize(32 << 30));
    }

    #[test]
    fn the_example_config_loads_and_matches_the_defaults() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tierd.example.toml");
        let c = Config::load(Some(&path), env(&[]), &[]).expect("example loads");
        let d = Config::default();
        assert_eq!(c.heat, d.heat);
        assert_eq!(c.migrate, d.migrate);
        let e =
            Config::load(None, env(&[("TIERD_MIGRATE__PROMOTE_BORROW", "1.5")]), &[]).unwrap_err();
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
}
