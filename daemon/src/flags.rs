//! The flags `serve` and `format` share: `--config FILE` and one flag per
//! configuration key, `--<key>`: the top-level keys from one table
//! ([`FLAGS`]), the keys of the `[heat]` and `[migrate]` tables derived from
//! the configuration's own key list (`--migrate.bandwidth 64MiB`). Given
//! flags become (key, value) overrides of [`Config::load`], above the file
//! and the `TIERD_*` environment.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use tierd::config::{Config, Loaded};

/// What a flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// A path (need not be UTF-8 on the command line).
    Path(&'static str),
    /// Any other value; the name shown in `--help`.
    Value(&'static str),
    /// Nothing: given means `true`.
    Switch,
}

/// A flag: the configuration key it sets (also its long name), what it
/// takes, and its help line.
struct Flag {
    key: &'static str,
    takes: Takes,
    help: &'static str,
}

const fn flag(key: &'static str, takes: Takes, help: &'static str) -> Flag {
    Flag { key, takes, help }
}

/// Every top-level key's flag, in `--help` order. Table keys (`[heat]`,
/// `[migrate]`) get theirs from [`table_keys`].
const FLAGS: &[Flag] = {
    use Takes::{Path, Switch, Value};
    &[
        flag(
            "data-dir",
            Path("DIR"),
            "Data directory (default ./tierd-data)",
        ),
        flag("ssd", Path("PATH"), "SSD block device or image file"),
        flag(
            "hdd",
            Path("PATH"),
            "HDD block device or image file, or a remote NBD export (nbd://host:port/export)",
        ),
        flag(
            "meta-dir",
            Path("DIR"),
            "Metadata directory (default DATA_DIR/meta)",
        ),
        flag(
            "meta-cache",
            Value("SIZE"),
            "Most memory the metadata store's page cache takes (default 64MiB)",
        ),
        flag(
            "ssd-size",
            Value("SIZE"),
            "Size of the SSD image created on first start or by format (default 4GiB; refused if an existing SSD has another size)",
        ),
        flag(
            "hdd-size",
            Value("SIZE"),
            "Size of the HDD image created on first start or by format (default 32GiB; refused if an existing HDD has another size)",
        ),
        flag(
            "listen",
            Value("HOST:PORT"),
            "TCP address to listen on (default 127.0.0.1:10809; \"\" for none)",
        ),
        flag("unix", Path("PATH"), "Unix socket to listen on as well"),
        flag(
            "extent-size",
            Value("SIZE"),
            "Extent size of a new volume (default 1MiB)",
        ),
        flag(
            "reserve",
            Value("SIZE"),
            "SSD reserve of a new volume (default 4GiB capped at 25 % of the SSD)",
        ),
        flag("direct-io", Switch, "Open devices with O_DIRECT"),
        flag(
            "export-name",
            Value("NAME"),
            "NBD export name (default \"\", the default export)",
        ),
        flag(
            "ssd-model",
            Value("MODEL"),
            "Time the SSD like a modelled drive: ssd-sata or ssd-nvme (demos, benchmarks)",
        ),
        flag(
            "hdd-model",
            Value("MODEL"),
            "Time the HDD like a modelled drive: hdd-5400 or hdd-7200, or like a remote tier 1 ms away: remote-1ms",
        ),
        flag(
            "read-only",
            Switch,
            "Serve the volume read-only (writes get EPERM)",
        ),
        flag(
            "write-log",
            Value("BOOL"),
            "Let writes to data on the HDD land in the SSD write log (default true)",
        ),
        flag(
            "shadows",
            Value("BOOL"),
            "Keep a promoted extent's HDD copy while the HDD has room (default true)",
        ),
        flag(
            "ssd-lost",
            Switch,
            "Open the volume without its SSD, which has died: serve what has an HDD copy, EIO for the rest (docs/reliability.md)",
        ),
        flag(
            "max-connections",
            Value("N"),
            "NBD connections served at once (default 256)",
        ),
        flag(
            "nbd-threads",
            Value("N"),
            "Threads of its own per NBD connection; 0 for none (the runtime's shared threads serve it) (default 16)",
        ),
        flag(
            "nbd-zero-copy",
            Value("BOOL"),
            "Send long reads of image-file data without copying it (default true)",
        ),
        flag(
            "nbd-slow-lane",
            Value("BOOL"),
            "Let reads of the HDD take at most three quarters of a connection's threads, queueing the rest, so writes and flash reads pass them (default false)",
        ),
        flag(
            "nbd-poll",
            Value("DURATION"),
            "Poll an NBD socket this long for the next request before sleeping, while it pays; 0s: never (default 50us)",
        ),
        flag(
            "handshake-timeout",
            Value("DURATION"),
            "Time allowed for a client's handshake, e.g. 30s, 500ms (default 30s)",
        ),
        flag(
            "remote-timeout",
            Value("DURATION"),
            "With a remote HDD tier: longest a request to it waits, reconnecting included, before EIO (default 30s)",
        ),
        flag(
            "remote-tls-ca",
            Path("FILE"),
            "With the HDD tier on nbds://: CA certificates (PEM) the remote's certificate must chain to",
        ),
        flag(
            "remote-tls-cert",
            Path("FILE"),
            "Client certificate (PEM) tierd presents to the remote HDD tier",
        ),
        flag(
            "remote-tls-key",
            Path("FILE"),
            "Private key (PEM) of remote-tls-cert",
        ),
        flag(
            "tls-cert",
            Path("FILE"),
            "Server certificate (PEM): serve NBD over TLS only (STARTTLS)",
        ),
        flag("tls-key", Path("FILE"), "Private key (PEM) of --tls-cert"),
        flag(
            "tls-ca",
            Path("FILE"),
            "CA certificates (PEM): require client certificates signed by them",
        ),
        flag(
            "log-level",
            Value("LEVEL"),
            "Log level when RUST_LOG is unset (error, warn, info, debug, trace)",
        ),
        flag(
            "metrics-listen",
            Value("HOST:PORT"),
            "Prometheus metrics endpoint (default 127.0.0.1:10810; \"\" for none)",
        ),
        flag(
            "control",
            Value("PATH"),
            "Control socket for tierctl (default control.sock beside the metadata directory: DATA_DIR/control.sock unless --meta-dir is set; \"\" for none)",
        ),
    ]
};

/// The keys inside tables (`heat.half-life`), each its own flag after the
/// top-level ones.
fn table_keys() -> impl Iterator<Item = &'static str> {
    tierd::config::keys().filter(|k| k.contains('.'))
}

/// The help line of a table key's flag.
fn table_help(key: &str) -> String {
    let (table, rest) = key.split_once('.').unwrap_or(("", key));
    let default = tierd::config::default_of(key).unwrap_or_default();
    format!("[{table}] {rest} (default {default}; see docs/tiering.md)")
}

/// Flags shared by `serve` and `format`; each key's flag overrides the
/// config file and the TIERD_* environment.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Common {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// (key, value) of each key flag given, in [`FLAGS`] order.
    pub overrides: Vec<(&'static str, String)>,
}

impl Common {
    /// The configuration: defaults < file (`--config` or `TIERD_CONFIG`) <
    /// `TIERD_*` environment < these flags.
    pub fn load(&self) -> anyhow::Result<Config> {
        Ok(self.load_layers()?.config)
    }

    /// [`Common::load`], also saying which keys the file, the environment
    /// or a flag set.
    pub fn load_layers(&self) -> anyhow::Result<Loaded> {
        self.try_load_layers().context("loading the configuration")
    }

    /// The configuration file: `--config`, else `TIERD_CONFIG`.
    pub fn file(&self) -> Option<PathBuf> {
        self.config
            .clone()
            .or_else(|| std::env::var_os("TIERD_CONFIG").map(PathBuf::from))
    }

    /// [`Common::load_layers`] with the library's error, which names the
    /// key at fault.
    pub fn try_load_layers(&self) -> Result<Loaded, tierd::config::ConfigError> {
        Config::load_layers(self.file().as_deref(), std::env::vars(), &self.overrides)
    }
}

fn matches_error(e: clap::parser::MatchesError) -> clap::Error {
    clap::Error::raw(clap::error::ErrorKind::InvalidValue, e)
}

impl FromArgMatches for Common {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut c = Common::default();
        c.update_from_arg_matches(m)?;
        Ok(c)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        if let Some(p) = m.try_get_one::<PathBuf>("config").map_err(matches_error)? {
            self.config = Some(p.clone());
        }
        for f in FLAGS {
            let v = match f.takes {
                Takes::Path(_) => m
                    .try_get_one::<PathBuf>(f.key)
                    .map_err(matches_error)?
                    .map(|p| p.display().to_string()),
                Takes::Value(_) => m
                    .try_get_one::<String>(f.key)
                    .map_err(matches_error)?
                    .cloned(),
                Takes::Switch => m
                    .try_get_one::<bool>(f.key)
                    .map_err(matches_error)?
                    .is_some_and(|on| *on)
                    .then(|| "true".to_string()),
            };
            if let Some(v) = v {
                self.overrides.retain(|(k, _)| *k != f.key);
                self.overrides.push((f.key, v));
            }
        }
        for key in table_keys() {
            if let Some(v) = m.try_get_one::<String>(key).map_err(matches_error)? {
                self.overrides.retain(|(k, _)| *k != key);
                self.overrides.push((key, v.clone()));
            }
        }
        Ok(())
    }
}

impl Args for Common {
    fn augment_args(mut cmd: clap::Command) -> clap::Command {
        cmd = cmd.arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("Configuration file (TOML)"),
        );
        for f in FLAGS {
            let arg = Arg::new(f.key).long(f.key).help(f.help);
            cmd = cmd.arg(match f.takes {
                Takes::Path(name) => arg
                    .value_name(name)
                    .value_parser(clap::value_parser!(PathBuf)),
                Takes::Value(name) => arg.value_name(name),
                Takes::Switch => arg.action(ArgAction::SetTrue),
            });
        }
        for key in table_keys() {
            cmd = cmd.arg(
                Arg::new(key)
                    .long(key)
                    .value_name("VALUE")
                    .help(table_help(key)),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        common: Common,
    }

    #[test]
    fn every_top_level_key_has_its_flag_and_every_flag_a_key() {
        let top: Vec<&str> = tierd::config::keys().filter(|k| !k.contains('.')).collect();
        let mut flags: Vec<&str> = FLAGS.iter().map(|f| f.key).collect();
        flags.sort_unstable();
        assert_eq!(flags, top);
    }

    #[test]
    fn every_table_key_has_its_flag_too() {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let longs: Vec<&str> = cmd.get_arguments().filter_map(|a| a.get_long()).collect();
        for key in tierd::config::keys() {
            assert!(longs.contains(&key), "no flag --{key}");
        }
        let c = Cli::try_parse_from([
            "tierd",
            "--migrate.bandwidth",
            "64MiB",
            "--heat.half-life",
            "10m",
        ])
        .expect("parses")
        .common;
        let cfg = Config::load(None, std::iter::empty(), &c.overrides).expect("loads");
        assert_eq!(cfg.migrate.bandwidth, tierd::units::ByteSize(64 << 20));
        assert_eq!(cfg.heat.half_life, std::time::Duration::from_secs(600));
        let e = Cli::try_parse_from(["tierd", "--heat.no-such-key", "1"]);
        assert!(e.is_err(), "an unknown table key is no flag");
    }

    #[test]
    fn flags_become_overrides_of_their_keys() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let c = Cli::try_parse_from([
            "tierd",
            "--config",
            "/etc/tierd.toml",
            "--export-name",
            "foo",
            "--read-only",
            "--data-dir",
            "/var/lib/tierd",
            "--control",
            "",
        ])
        .expect("parses")
        .common;
        assert_eq!(c.config, Some(PathBuf::from("/etc/tierd.toml")));
        assert_eq!(
            c.overrides,
            vec![
                ("data-dir", "/var/lib/tierd".to_string()),
                ("export-name", "foo".to_string()),
                ("read-only", "true".to_string()),
                ("control", String::new()),
            ]
        );
        let none = Cli::try_parse_from(["tierd"]).expect("parses").common;
        assert_eq!(none, Common::default());
        let cfg = Config::load(None, std::iter::empty(), &c.overrides).expect("loads");
        assert_eq!(cfg.export_name, "foo");
        assert!(cfg.read_only);
        assert_eq!(cfg.control_path(), None);
    }
}
