//! The daemon configuration: one serde struct with kebab-case keys and
//! documented defaults, layered by the `config` crate: built-in defaults <
//! config file < `TIERD_*` environment < command-line flags, then validated
//! (the top-level keys here, each table by its own `validate`). The list of
//! keys (`table.key` inside a table) is derived from the struct by
//! serializing the defaults; each key's `TIERD_*` variable and how a change
//! takes effect on SIGHUP follow from its name. Every table refuses
//! unknown keys.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::heat::HeatConfig;
use crate::migrate::MigrateConfig;
use crate::units::{duration_secs, ByteSize, InvalidKey};
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
    /// The HDD: a block device or image file, or an NBD export on another
    /// server (`nbd://host[:port]/export`, `nbd+unix:///export?socket=PATH`;
    /// docs/remote.md). Default `<data-dir>/hdd.img`.
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
    /// Writes to data on the HDD land in the SSD write log (flash speed;
    /// written back later). Default true.
    pub write_log: bool,
    /// Promotions keep the extent's HDD copy while the HDD has room, so
    /// demoting unchanged data writes nothing. Default true.
    pub shadows: bool,
    /// NBD connections served at once; more wait in the listen backlog.
    /// Default 256.
    pub max_connections: usize,
    /// Threads serving each NBD connection on a plain TCP or Unix socket,
    /// each taking, running and answering whole requests; 0 serves them on
    /// the async loop, as TLS connections always are. Default 16.
    pub nbd_threads: usize,
    /// On those threads, READs longer than 16 KiB of data at rest in an
    /// image file are sent without copying it (splice from the page
    /// cache). Default true.
    pub nbd_zero_copy: bool,
    /// On those threads, how long the thread that reads a connection's
    /// next request polls the socket before it sleeps, while polling pays
    /// (adaptive); `0s` never polls. At most 1ms. Default `50us`.
    #[serde(with = "duration_secs")]
    pub nbd_poll: std::time::Duration,
    /// Time a client has from connecting to the end of its handshake
    /// (including STARTTLS). Default `30s`.
    #[serde(with = "duration_secs")]
    pub handshake_timeout: std::time::Duration,
    /// With the HDD tier on a remote NBD export: longest a request to it
    /// waits, reconnecting included, before it fails with EIO.
    /// Default `30s`.
    #[serde(with = "duration_secs")]
    pub remote_timeout: std::time::Duration,
    /// With the HDD tier on `nbds://`: CA certificates (PEM) the remote
    /// server's certificate must chain to.
    pub remote_tls_ca: Option<PathBuf>,
    /// Client certificate chain (PEM) tierd presents to the remote, if it
    /// asks for one.
    pub remote_tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `remote-tls-cert`.
    pub remote_tls_key: Option<PathBuf>,
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
            write_log: true,
            shadows: true,
            max_connections: 256,
            nbd_threads: 16,
            nbd_zero_copy: true,
            nbd_poll: crate::units::NBD_POLL_DEFAULT,
            handshake_timeout: std::time::Duration::from_secs(30),
            remote_timeout: std::time::Duration::from_secs(30),
            remote_tls_ca: None,
            remote_tls_cert: None,
            remote_tls_key: None,
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

/// Longest `nbd-poll`.
const MAX_NBD_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// Most threads one NBD connection may have (`nbd-threads`): as many as
/// requests it may have in flight.
const MAX_NBD_THREADS: usize = 64;

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
    /// A value parses but is not acceptable (the key is named).
    #[error(transparent)]
    Invalid(#[from] InvalidKey),
}

/// Default address of the metrics endpoint.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:10810";

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
fn default_leaves() -> &'static [(String, serde_json::Value)] {
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
fn leaves(v: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
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
            if let Some(key) = key_of_env(&k) {
                let v = typed_for(&key, &v);
                b = b.set_override(key, v)?;
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

    /// `self` with (key, value) pairs set over it, as flags would set them
    /// (`tierctl config set`), then validated.
    pub fn overridden(&self, pairs: &[(String, String)]) -> Result<Config, ConfigError> {
        let mut b = config::Config::builder().add_source(config::Config::try_from(self)?);
        for (k, v) in pairs {
            if !is_key(k) {
                return Err(ConfigError::Invalid(InvalidKey::new(
                    "key",
                    format!("{k:?} is no configuration key"),
                )));
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

    /// Every key with its value as the configuration writes it (`60s`,
    /// `128MiB`, `true`; `""` for an unset optional key), sorted by key.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        let v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        let mine = leaves(&v);
        keys()
            .map(|k| {
                let val = mine
                    .iter()
                    .find(|(m, _)| m == k)
                    .map(|(_, v)| match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Null => String::new(),
                        v => v.to_string(),
                    })
                    .unwrap_or_default();
                (k, val)
            })
            .collect()
    }

    /// The keys whose values differ between `self` and `other`, sorted.
    pub fn changed_keys(&self, other: &Config) -> Vec<&'static str> {
        let (Ok(a), Ok(b)) = (serde_json::to_value(self), serde_json::to_value(other)) else {
            // A path that is not UTF-8 does not serialize: compare whole.
            return if self == other {
                Vec::new()
            } else {
                keys().collect()
            };
        };
        // Both have every key (an unset one as null), in the same order.
        leaves(&a)
            .into_iter()
            .zip(leaves(&b))
            .zip(keys())
            .filter(|(((_, x), (_, y)), _)| x != y)
            .map(|(_, k)| k)
            .collect()
    }

    /// Check values that parse but make no sense: the top-level keys here,
    /// each table by its own `validate`.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        let es = self.extent_size.0;
        if !es.is_power_of_two() || !(MIN_EXTENT_SIZE..=MAX_EXTENT_SIZE).contains(&es) {
            return Err(InvalidKey::new(
                "extent-size",
                format!(
                    "{} must be a power of two from 64KiB to 64MiB",
                    self.extent_size
                ),
            ));
        }
        if !self.listen.is_empty() && self.listen.parse::<SocketAddr>().is_err() {
            return Err(InvalidKey::new(
                "listen",
                format!(
                    "{:?} is not HOST:PORT (for example 127.0.0.1:10809)",
                    self.listen
                ),
            ));
        }
        if !self.metrics_listen.is_empty() && self.metrics_listen.parse::<SocketAddr>().is_err() {
            return Err(InvalidKey::new(
                "metrics-listen",
                format!(
                    "{:?} is not HOST:PORT (for example {DEFAULT_METRICS_LISTEN}); \"\" turns metrics off",
                    self.metrics_listen
                ),
            ));
        }
        if let Some(p) = self.control_path() {
            // sockaddr_un holds 108 bytes including the terminating NUL.
            if p.as_os_str().len() > 107 {
                return Err(InvalidKey::new(
                    "control",
                    format!(
                        "{} is longer than a Unix socket path may be (107 bytes); choose a shorter path",
                        p.display()
                    ),
                ));
            }
        }
        if self.listen.is_empty() && self.unix.is_none() {
            return Err(InvalidKey::new(
                "listen",
                "empty, and no unix socket is set: nothing to serve on",
            ));
        }
        for (key, v) in [("ssd-size", self.ssd_size), ("hdd-size", self.hdd_size)] {
            if v.0 < 8 << 20 {
                return Err(InvalidKey::new(
                    key,
                    format!("{v} is too small (at least 8MiB)"),
                ));
            }
        }
        for (key, v, ssd) in [
            ("ssd-model", &self.ssd_model, true),
            ("hdd-model", &self.hdd_model, false),
        ] {
            if let Some(name) = v {
                let ok =
                    crate::device::model::ModelKind::parse(name).is_some_and(|m| m.is_ssd() == ssd);
                if !ok {
                    return Err(InvalidKey::new(
                        key,
                        format!(
                            "{name:?}: use {}",
                            crate::device::model::ModelKind::names(ssd)
                        ),
                    ));
                }
            }
        }
        self.heat.validate()?;
        self.migrate.validate()?;
        if self.max_connections == 0 {
            return Err(InvalidKey::new("max-connections", "must be at least 1"));
        }
        if self.nbd_threads > MAX_NBD_THREADS {
            return Err(InvalidKey::new(
                "nbd-threads",
                format!("{} is more than {MAX_NBD_THREADS} threads per connection (0 for the async loop)", self.nbd_threads),
            ));
        }
        if self.nbd_poll > MAX_NBD_POLL {
            return Err(InvalidKey::new(
                "nbd-poll",
                format!(
                    "{} us is more than 1ms: a longer poll only burns CPU (0s turns polling off)",
                    self.nbd_poll.as_micros()
                ),
            ));
        }
        if self.handshake_timeout.is_zero() {
            return Err(InvalidKey::new("handshake-timeout", "must be above zero"));
        }
        if self.remote_timeout.is_zero() {
            return Err(InvalidKey::new("remote-timeout", "must be above zero"));
        }
        if self.remote_tls_cert.is_some() != self.remote_tls_key.is_some() {
            return Err(InvalidKey::new(
                if self.remote_tls_cert.is_some() {
                    "remote-tls-key"
                } else {
                    "remote-tls-cert"
                },
                "remote-tls-cert and remote-tls-key must be set together",
            ));
        }
        if let Some(hdd) = self.hdd.as_ref().and_then(|p| p.to_str()) {
            if crate::device::rados::is_rados_uri(hdd) {
                crate::device::rados::RadosTarget::parse(hdd)
                    .map_err(|e| InvalidKey::new("hdd", e))?;
            }
        }
        if let Some(ssd) = self.ssd.as_ref().and_then(|p| p.to_str()) {
            if crate::nbd::client::is_uri(ssd) || crate::device::rados::is_rados_uri(ssd) {
                return Err(InvalidKey::new(
                    "ssd",
                    format!("{ssd} is remote storage: the SSD must be a local device (only the HDD tier may be remote)"),
                ));
            }
        }
        if let Some(hdd) = self.hdd.as_ref().and_then(|p| p.to_str()) {
            if crate::nbd::client::is_uri(hdd) {
                let t = crate::nbd::client::Target::parse(hdd)
                    .map_err(|e| InvalidKey::new("hdd", e.to_string()))?;
                if t.tls_name.is_some() && self.remote_tls_ca.is_none() {
                    return Err(InvalidKey::new(
                        "remote-tls-ca",
                        format!("{hdd} asks for TLS: set remote-tls-ca to the CA that signed the remote's certificate"),
                    ));
                }
            }
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(InvalidKey::new(
                    "tls-key",
                    "tls-cert is set but tls-key is not: TLS needs both",
                ))
            }
            (None, Some(_)) => {
                return Err(InvalidKey::new(
                    "tls-cert",
                    "tls-key is set but tls-cert is not: TLS needs both",
                ))
            }
            _ => {}
        }
        if self.tls_ca.is_some() && self.tls_cert.is_none() {
            return Err(InvalidKey::new(
                "tls-ca",
                "client certificates need TLS: set tls-cert and tls-key too",
            ));
        }
        if tracing_level_ok(&self.log_level).is_err() {
            return Err(InvalidKey::new(
                "log-level",
                format!(
                    "{:?}: use error, warn, info, debug or trace",
                    self.log_level
                ),
            ));
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
            if default.is_null() {
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
        assert!(c.validate().is_ok(), "0 selects the async loop");
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
}
