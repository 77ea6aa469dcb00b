//! The daemon configuration: one serde struct with kebab-case keys and
//! documented defaults, layered by the `config` crate: built-in defaults <
//! config file < `TIERD_*` environment < command-line flags, then validated
//! (the top-level keys here, each table by its own `validate`). The list of
//! keys (`table.key` inside a table) is derived from the struct by
//! serializing the defaults; each key's `TIERD_*` variable and how a change
//! takes effect on SIGHUP follow from its name ([`keys`]). Every layer
//! refuses an unknown key, naming the nearest known one, and the loader
//! says which keys a layer set (`load`); `validate` checks the values.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::heat::HeatConfig;
use crate::migrate::{DurabilityConfig, MigrateConfig};
use crate::units::{duration_secs, ByteSize, InvalidKey};

mod keys;
mod load;
mod show;
#[cfg(test)]
mod tests;
mod validate;

use keys::leaves;
pub use keys::{
    default_of, env_var, is_key, key_of_env, keys, nearest_key, reload_effect, Origin, Reload,
    UnknownKey, NOT_KEYS,
};
pub use load::{Loaded, Source};
pub use show::KeyRow;

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
    /// Most memory the metadata store's page cache takes. Default `64MiB`
    /// (sled's own default, 1 GiB, grows with the volume's records).
    pub meta_cache: ByteSize,
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
    /// Open the volume without its SSD, which has died: serve every extent
    /// that has an HDD copy as of that copy and EIO for the rest, new data
    /// on the HDD; the SSD's extents with a clean copy leave it at once.
    /// Default false.
    pub ssd_lost: bool,
    /// NBD connections served at once; more wait in the listen backlog.
    /// Default 256.
    pub max_connections: usize,
    /// Threads of its own serving each NBD connection, each taking,
    /// running and answering whole requests; 0: none of its own, the
    /// runtime's shared blocking threads serve it. Default 16.
    pub nbd_threads: usize,
    /// On those threads, READs longer than 16 KiB of data at rest in an
    /// image file are sent without copying it (splice from the page
    /// cache). Default true.
    pub nbd_zero_copy: bool,
    /// Reads of data on the HDD take at most three quarters of a
    /// connection's threads; more such reads queue in order, so writes
    /// and reads of flash are not held up behind them (docs/design.md).
    /// Default false: on msr-web0 replayed at 24x through the daemon it
    /// cut the mean write from 14.6 s to 5.8 s but raised the mean read
    /// from 101 s to 117 s and the HDD's busy time by a fifth
    /// (docs/tiering.md, "The NBD server's slow lane").
    pub nbd_slow_lane: bool,
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
    /// The control socket (`tierctl`); `""` for none. Default
    /// `control.sock` beside the metadata directory: `<data-dir>/control.sock`
    /// unless `meta-dir` is set.
    pub control: Option<PathBuf>,
    /// Heat tracking (`[heat]` table).
    pub heat: HeatConfig,
    /// Background migration and placement policy (`[migrate]` table).
    pub migrate: MigrateConfig,
    /// What is done so an SSD failure costs less (`[durability]` table).
    pub durability: DurabilityConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("tierd-data"),
            ssd: None,
            hdd: None,
            meta_dir: None,
            meta_cache: ByteSize(crate::store::DEFAULT_CACHE),
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
            ssd_lost: false,
            max_connections: 256,
            nbd_threads: 16,
            nbd_zero_copy: true,
            nbd_slow_lane: false,
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
            durability: DurabilityConfig::default(),
        }
    }
}

/// Why a configuration does not load.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or a value does not parse (its message names the file).
    #[error(transparent)]
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
    /// A key no configuration has (the nearest known one is named).
    #[error(transparent)]
    Unknown(#[from] UnknownKey),
}

impl ConfigError {
    /// The key the error is about, when it names one (a file that does
    /// not parse as TOML names none).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Load(_) => None,
            ConfigError::Value { key, .. } => Some(key),
            ConfigError::Invalid(e) => Some(e.key),
            ConfigError::Unknown(e) => Some(&e.key),
        }
    }
}

/// Default address of the metrics endpoint.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:10810";

impl Config {
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
    /// By default it sits next to the metadata directory: in the data
    /// directory (`<data-dir>/control.sock`), or beside an explicit
    /// `meta-dir` (`/var/lib/tierd/meta` puts it at
    /// `/var/lib/tierd/control.sock`), so a volume named by its devices
    /// and metadata leaves nothing in `./tierd-data`.
    pub fn control_path(&self) -> Option<PathBuf> {
        match &self.control {
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(p.clone()),
            None => Some(match self.meta_path().parent() {
                Some(dir) => dir.join("control.sock"),
                None => self.data_dir.join("control.sock"),
            }),
        }
    }

    /// Whether both devices are the embedded default image files.
    pub fn uses_default_images(&self) -> bool {
        self.ssd.is_none() && self.hdd.is_none()
    }
}
