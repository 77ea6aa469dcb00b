//! `tierctl trace start FILE | stop | status`: record every request the
//! daemon serves into a trace file (docs/trace.md), for `tierd trace info`
//! and `tierd bench --trace`.

use std::path::Path;

use anyhow::Context;
use tierd::control::{Request, TraceStatus};
use tierd::units::ByteSize;

use crate::out::{human, say};
use crate::{print_json, request, Cli};

/// One line about a recording.
fn describe(s: &TraceStatus) -> String {
    let state = match (&s.ended, s.active) {
        (_, true) => "recording".to_string(),
        (Some(why), false) => format!("ended ({why})"),
        (None, false) => "ended".to_string(),
    };
    let limit = if s.max_bytes > 0 {
        format!(" of at most {}", human(s.max_bytes))
    } else {
        String::new()
    };
    format!(
        "{state}: {} requests in {:.1} s, {}{limit}, in {}",
        s.records,
        s.secs,
        human(s.bytes),
        s.path.display()
    )
}

/// Start recording into `file` (made absolute from here: the daemon's
/// working directory is not ours).
pub fn start(cli: &Cli, file: &Path, max_size: Option<&str>, force: bool) -> anyhow::Result<()> {
    let path =
        std::path::absolute(file).with_context(|| format!("resolving {}", file.display()))?;
    let max_bytes = max_size
        .map(|m| {
            ByteSize::parse(m)
                .map(|b| b.0)
                .with_context(|| format!("--max-size {m:?}"))
        })
        .transpose()?;
    let (s, resp): (TraceStatus, _) = request(
        cli,
        &Request::TraceStart {
            path,
            max_bytes,
            force,
        },
    )?;
    if cli.json {
        return print_json(&resp);
    }
    say!("{}", describe(&s));
    say!("stop with: tierctl trace stop");
    Ok(())
}

/// Stop the recording under way.
pub fn stop(cli: &Cli) -> anyhow::Result<()> {
    let (s, resp): (TraceStatus, _) = request(cli, &Request::TraceStop)?;
    if cli.json {
        return print_json(&resp);
    }
    say!("{}", describe(&s));
    say!("look at it with: tierd trace info {}", s.path.display());
    Ok(())
}

/// The recording under way, or the last one.
pub fn status(cli: &Cli) -> anyhow::Result<()> {
    let (s, resp): (Option<TraceStatus>, _) = request(cli, &Request::TraceStatus)?;
    if cli.json {
        return print_json(&resp);
    }
    match s {
        Some(s) => say!("{}", describe(&s)),
        None => say!("no trace recorded since the daemon started"),
    }
    Ok(())
}
