//! `tierd`: the tiered block-storage daemon. Thin: parses flags (the
//! configuration keys' flags are in `flags`), loads the layered
//! configuration and calls the library (`serve`, `format`); `bench`,
//! `trace` and `config` have their flags and output in modules of their own.

use anyhow::Context;
mod bench_cmd;
mod config_cmd;
mod flags;
mod replay;
mod trace_cmd;

use clap::{Parser, Subcommand};
use flags::Common;
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
    /// The configuration with no daemon running: what a file, the TIERD_*
    /// environment and flags resolve to (show), and whether it is valid
    /// (check).
    Config {
        #[command(subcommand)]
        command: config_cmd::ConfigCommand,
    },
    /// Benchmark the hybrid against a pure SSD and a pure HDD, on device
    /// models (virtual or real clock) or real devices.
    Bench(Box<bench_cmd::BenchArgs>),
    /// Block I/O traces: summarise one, convert public formats to tierd's,
    /// export for fio, generate synthetic ones, replay one through a
    /// running daemon (docs/trace.md).
    Trace {
        #[command(subcommand)]
        command: trace_cmd::TraceCommand,
    },
    /// Print the man page, or write one per command into a directory.
    Man {
        /// Write tierd.1, tierd-serve.1, ... here.
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: tierd_clidocs::Shell,
    },
}

type LogHandle =
    tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, tracing_subscriber::Registry>;

/// Set up logging; returns a handle to change the level live, unless
/// RUST_LOG (which wins over the configuration) is set. Colour only when
/// stderr is a terminal and NO_COLOR is unset: a log file or the journal
/// gets plain text.
fn init_logging(level: &str) -> Option<LogHandle> {
    use std::io::IsTerminal;
    use tracing_subscriber::prelude::*;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let (filter, from_env) = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(f) => (f, true),
        Err(_) => (tracing_subscriber::EnvFilter::new(level), false),
    };
    let (layer, handle) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(layer)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi),
        )
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

fn main() -> std::process::ExitCode {
    tierd::serving::allocator::limit_malloc_arenas();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, each cause once: anyhow's own report repeats a
            // cause that an error both prints and returns as its source.
            eprintln!("tierd: error: {}", tierd::units::error_text(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command.unwrap_or(Command::Serve(Common::default())) {
        Command::Serve(common) => {
            let loaded = common.load_layers()?;
            let cfg = loaded.config.clone();
            let log = init_logging(&cfg.log_level);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            // Image files that may not be made are refused before anything
            // is bound or made.
            service::check_before_start(&loaded).context("opening the volume")?;
            // Every listen address first: a busy port stops the start
            // before an image is created or a volume formatted.
            let endpoints = {
                let _in_runtime = rt.enter();
                tierd::serving::Endpoints::bind(&cfg).context("binding the listen addresses")?
            };
            let (volume, _) = service::prepare(&loaded).context("opening the volume")?;
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
            rt.block_on(service::run_with(&cfg, volume, endpoints, shutdown, hooks))
                .context("serving the volume")?;
            Ok(())
        }
        Command::Man { out } => {
            use clap::CommandFactory;
            let cmd = Cli::command();
            match out {
                Some(dir) => {
                    for f in tierd_clidocs::man_pages(&cmd, &dir)
                        .with_context(|| format!("writing man pages into {}", dir.display()))?
                    {
                        println!("{}", f.display());
                    }
                }
                None => tierd_clidocs::man_page(&cmd, &mut std::io::stdout())
                    .context("writing the man page")?,
            }
            Ok(())
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            tierd_clidocs::completions(&Cli::command(), shell, &mut std::io::stdout());
            Ok(())
        }
        Command::Bench(args) => {
            init_logging("warn");
            bench_cmd::run(*args)
        }
        Command::Trace { command } => trace_cmd::run(command),
        Command::Config { command } => config_cmd::run(command),
        Command::Format {
            common,
            force,
            json,
        } => {
            let loaded = common.load_layers()?;
            let cfg = &loaded.config;
            let _ = init_logging(&cfg.log_level);
            let geo = service::format(&loaded, force).context("formatting")?;
            if json {
                let out = serde_json::json!({
                    "ssd": cfg.ssd_path(),
                    "hdd": cfg.hdd_path(),
                    "meta_dir": cfg.meta_path(),
                    "extent_size": geo.extent_size,
                    "ssd_slots": geo.ssd_slots,
                    "hdd_slots": geo.hdd_slots,
                    "reserve_extents": geo.reserve_extents,
                    "capacity": geo.capacity(),
                });
                println!("{out}");
            } else {
                use tierd::units::{human_bytes, ByteSize};
                println!(
                    "formatted: {} (SSD) + {} (HDD), metadata in {}\n  extent size {}, {} SSD + {} HDD slots, reserve {} extents ({})\n  capacity {}",
                    cfg.ssd_path().display(),
                    cfg.hdd_path().display(),
                    cfg.meta_path().display(),
                    ByteSize(geo.extent_size),
                    geo.ssd_slots,
                    geo.hdd_slots,
                    geo.reserve_extents,
                    human_bytes(u64::from(geo.reserve_extents) * geo.extent_size),
                    human_bytes(geo.capacity()),
                );
            }
            Ok(())
        }
    }
}
