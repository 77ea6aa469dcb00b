//! `tierd`: the tiered block-storage daemon. Thin: parses flags, loads the
//! layered configuration and calls the library (`serve`, `format`).

use std::path::PathBuf;

use anyhow::Context;
mod bench_cmd;

use clap::{Args, Parser, Subcommand};
use tierd::config::Config;
use tierd::serving::service;

#[derive(Parser)]
#[command(
    name = "tierd",
    version,
    about = "Hybrid SSD+HDD tiered block volume served over NBD"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the volume over NBD (the default). With no devices configured it
    /// uses image files in the data directory, created and formatted on first start.
    Serve(Common),
    /// Format two devices (or the default image files) as a new volume.
    Format {
        #[command(flatten)]
        common: Common,
        /// Overwrite devices that carry a filesystem, a partition table or a
        /// tierd superblock, and an existing metadata store.
        #[arg(long)]
        force: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Benchmark the hybrid against a pure SSD and a pure HDD, on device
    /// models (virtual or real clock) or real devices.
    Bench(bench_cmd::BenchArgs),
}

/// Flags shared by every subcommand; each overrides the config file and the
/// TIERD_* environment.
#[derive(Args, Default, Clone)]
struct Common {
    /// Configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory (default ./tierd-data).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// SSD block device or image file.
    #[arg(long, value_name = "PATH")]
    ssd: Option<PathBuf>,
    /// HDD block device or image file.
    #[arg(long, value_name = "PATH")]
    hdd: Option<PathBuf>,
    /// Metadata directory (default DATA_DIR/meta).
    #[arg(long, value_name = "DIR")]
    meta_dir: Option<PathBuf>,
    /// Size of the SSD image created on first start (default 4GiB).
    #[arg(long, value_name = "SIZE")]
    ssd_size: Option<String>,
    /// Size of the HDD image created on first start (default 32GiB).
    #[arg(long, value_name = "SIZE")]
    hdd_size: Option<String>,
    /// TCP address to listen on (default 127.0.0.1:10809; "" for none).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Unix socket to listen on as well.
    #[arg(long, value_name = "PATH")]
    unix: Option<PathBuf>,
    /// Extent size of a new volume (default 1MiB).
    #[arg(long, value_name = "SIZE")]
    extent_size: Option<String>,
    /// SSD reserve of a new volume (default 4GiB capped at 25 % of the SSD).
    #[arg(long, value_name = "SIZE")]
    reserve: Option<String>,
    /// Open devices with O_DIRECT.
    #[arg(long)]
    direct_io: bool,
    /// Time the SSD like a modelled drive: ssd-sata or ssd-nvme (demos, benchmarks).
    #[arg(long, value_name = "MODEL")]
    ssd_model: Option<String>,
    /// Time the HDD like a modelled drive: hdd-5400 or hdd-7200.
    #[arg(long, value_name = "MODEL")]
    hdd_model: Option<String>,
    /// Serve the volume read-only (writes get EPERM).
    #[arg(long)]
    read_only: bool,
    /// NBD connections served at once (default 256).
    #[arg(long, value_name = "N")]
    max_connections: Option<String>,
    /// Time allowed for a client's handshake, e.g. 30s, 500ms (default 30s).
    #[arg(long, value_name = "DURATION")]
    handshake_timeout: Option<String>,
    /// Server certificate (PEM): serve NBD over TLS only (STARTTLS).
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// CA certificates (PEM): require client certificates signed by them.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// Log level when RUST_LOG is unset (error, warn, info, debug, trace).
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Prometheus metrics endpoint (default 127.0.0.1:10810; "" for none).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<String>,
    /// Control socket for tierctl (default DATA_DIR/control.sock; "" for none).
    #[arg(long, value_name = "PATH")]
    control: Option<String>,
}

impl Common {
    fn load(&self) -> anyhow::Result<Config> {
        let mut o: Vec<(&str, String)> = Vec::new();
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        for (k, v) in [
            ("data-dir", path(&self.data_dir)),
            ("ssd", path(&self.ssd)),
            ("hdd", path(&self.hdd)),
            ("meta-dir", path(&self.meta_dir)),
            ("ssd-size", self.ssd_size.clone()),
            ("hdd-size", self.hdd_size.clone()),
            ("listen", self.listen.clone()),
            ("unix", path(&self.unix)),
            ("extent-size", self.extent_size.clone()),
            ("reserve", self.reserve.clone()),
            ("read-only", self.read_only.then(|| "true".to_string())),
            ("ssd-model", self.ssd_model.clone()),
            ("hdd-model", self.hdd_model.clone()),
            ("max-connections", self.max_connections.clone()),
            ("handshake-timeout", self.handshake_timeout.clone()),
            ("tls-cert", path(&self.tls_cert)),
            ("tls-key", path(&self.tls_key)),
            ("tls-ca", path(&self.tls_ca)),
            ("log-level", self.log_level.clone()),
            ("direct-io", self.direct_io.then(|| "true".to_string())),
            ("metrics-listen", self.metrics_listen.clone()),
            ("control", self.control.clone()),
        ] {
            if let Some(v) = v {
                o.push((k, v));
            }
        }
        let file = self
            .config
            .clone()
            .or_else(|| std::env::var_os("TIERD_CONFIG").map(PathBuf::from));
        Config::load(file.as_deref(), std::env::vars(), &o).context("loading the configuration")
    }
}

type LogHandle =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// Set up logging; returns a handle to change the level live, unless
/// RUST_LOG (which wins over the configuration) is set.
fn init_logging(level: &str) -> Option<LogHandle> {
    use tracing_subscriber::prelude::*;
    let (filter, from_env) = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(f) => (f, true),
        Err(_) => (tracing_subscriber::EnvFilter::new(level), false),
    };
    let (layer, handle) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(layer)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    (!from_env).then_some(handle)
}

/// Install the SIGTERM and SIGINT handlers now (before anything is
/// served, so an early signal is never fatal) and return the future that
/// completes on either.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("watching SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve(Common::default())) {
        Command::Serve(common) => {
            let cfg = common.load()?;
            let log = init_logging(&cfg.log_level);
            let (volume, _) = service::prepare(&cfg).context("opening the volume")?;
            let g = volume.geometry();
            tracing::info!(
                volume = %volume.id(),
                capacity = volume.size(),
                extent_size = g.extent_size,
                ssd_slots = g.ssd_slots,
                hdd_slots = g.hdd_slots,
                reserve_extents = g.reserve_extents,
                "volume open"
            );
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            let reload_from = common.clone();
            let hooks = service::Hooks {
                reload: Some(Box::new(move || {
                    reload_from.load().map_err(|e| format!("{e:#}"))
                })),
                set_log_level: Some(Box::new(move |level: &str| match &log {
                    Some(h) => h
                        .reload(tracing_subscriber::EnvFilter::new(level))
                        .map_err(|e| e.to_string()),
                    None => Err("RUST_LOG is set and wins over log-level".into()),
                })),
            };
            let shutdown = rt.block_on(async { shutdown_signal() })?;
            rt.block_on(service::run_with(&cfg, volume, shutdown, hooks))
                .context("serving the volume")?;
            Ok(())
        }
        Command::Bench(args) => {
            init_logging("warn");
            bench_cmd::run(args)
        }
        Command::Format {
            common,
            force,
            json,
        } => {
            let cfg = common.load()?;
            let _ = init_logging(&cfg.log_level);
            let geo = service::format(&cfg, force).context("formatting")?;
            if json {
                let out = serde_json::json!({
                    "ssd": cfg.ssd_path(),
                    "hdd": cfg.hdd_path(),
                    "meta-dir": cfg.meta_path(),
                    "extent-size": geo.extent_size,
                    "ssd-slots": geo.ssd_slots,
                    "hdd-slots": geo.hdd_slots,
                    "reserve-extents": geo.reserve_extents,
                    "capacity": geo.capacity(),
                });
                println!("{out}");
            } else {
                println!(
                    "formatted: {} (SSD) + {} (HDD), metadata in {}\n  extent size {} B, {} SSD + {} HDD slots, reserve {} extents\n  capacity {} bytes ({:.2} GiB)",
                    cfg.ssd_path().display(),
                    cfg.hdd_path().display(),
                    cfg.meta_path().display(),
                    geo.extent_size,
                    geo.ssd_slots,
                    geo.hdd_slots,
                    geo.reserve_extents,
                    geo.capacity(),
                    geo.capacity() as f64 / (1u64 << 30) as f64
                );
            }
            Ok(())
        }
    }
}
