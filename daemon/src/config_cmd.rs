//! `tierd config show` and `tierd config check`: the configuration a file,
//! the `TIERD_*` environment and flags resolve to, read and checked with
//! no daemon running (a running daemon's is `tierctl config show`).

use std::io::Write;

use anyhow::Context;
use clap::Subcommand;
use tierd::config::KeyRow;

use crate::flags::Common;

/// `tierd config ...`.
#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Every key: the value in force, where it comes from (default, file,
    /// env, flag) and its default, as `serve` would load it.
    Show {
        #[command(flatten)]
        common: Common,
        /// Print JSON (an array of {key, value, source, default}).
        #[arg(long)]
        json: bool,
    },
    /// Check the configuration (the file, the TIERD_* environment and the
    /// flags): exits non-zero naming the key at fault.
    Check {
        #[command(flatten)]
        common: Common,
        /// Print the verdict as JSON ({valid, key, error}).
        #[arg(long)]
        json: bool,
    },
}

/// Run the command.
pub fn run(cmd: ConfigCommand) -> anyhow::Result<()> {
    match cmd {
        ConfigCommand::Show { common, json } => {
            let loaded = common.load_layers()?;
            let rows = loaded.rows();
            if json {
                return print(&serde_json::to_string_pretty(&rows)?);
            }
            print(&table(&rows))
        }
        ConfigCommand::Check { common, json } => {
            let file = common.file();
            let verdict = common.try_load_layers();
            if json {
                let out = match &verdict {
                    Ok(_) => serde_json::json!({ "valid": true, "key": null, "error": null }),
                    Err(e) => serde_json::json!({
                        "valid": false,
                        "key": e.key(),
                        "error": tierd::units::error_text(e),
                    }),
                };
                print(&serde_json::to_string_pretty(&out)?)?;
                if verdict.is_err() {
                    std::process::exit(1);
                }
                return Ok(());
            }
            // The error names the key (or the file and line).
            let loaded = verdict.context("the configuration is not valid")?;
            let from = match &file {
                Some(f) => format!("{} with the defaults", f.display()),
                None => "the defaults (no --config, no TIERD_CONFIG)".to_string(),
            };
            let given: Vec<String> = loaded
                .sources
                .iter()
                .map(|(k, s)| format!("{k} ({s})"))
                .collect();
            let set = if given.is_empty() {
                "no key set above the defaults".to_string()
            } else {
                format!("set above the defaults: {}", given.join(", "))
            };
            print(&format!("the configuration is valid: {from}; {set}"))
        }
    }
}

/// The rows as a table; an empty value reads `none`.
fn table(rows: &[KeyRow]) -> String {
    let shown = |v: &str| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.to_string()
        }
    };
    let width = |f: &dyn Fn(&KeyRow) -> String, title: &str| {
        rows.iter()
            .map(|r| f(r).chars().count())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let (wk, wv, ws) = (
        width(&|r| r.key.to_string(), "key"),
        width(&|r| shown(&r.value), "value"),
        width(&|r| r.source.clone(), "source"),
    );
    let mut s = format!(
        "{:<wk$}  {:<wv$}  {:<ws$}  default",
        "key", "value", "source"
    );
    for r in rows {
        s.push_str(&format!(
            "\n{:<wk$}  {:<wv$}  {:<ws$}  {}",
            r.key,
            shown(&r.value),
            r.source,
            shown(&r.default)
        ));
    }
    s
}

/// Print `text` and a newline; a reader that went away (`| head`) ends
/// the output quietly.
fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
