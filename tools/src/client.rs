//! Finding the daemon and talking to it: the control socket is the one
//! `--control` names, or the first that answers of `$TIERD_CONTROL`, the
//! systemd unit's `/run/tierd/control.sock` and the local default
//! `tierd-data/control.sock`; one JSON request per line, one answer back.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tierd::control::{Request, Response};

/// The system daemon's socket (systemd/tierd.service).
pub const SYSTEM_SOCKET: &str = "/run/tierd/control.sock";
/// `tierd serve`'s default in the current directory.
pub const LOCAL_SOCKET: &str = "tierd-data/control.sock";

/// Where to look for the daemon.
#[derive(Debug, Clone)]
pub struct Target {
    /// Paths in the order tried, each with where it came from.
    candidates: Vec<(PathBuf, &'static str)>,
}

impl Target {
    /// `--control` alone when given; otherwise `$TIERD_CONTROL` (if set),
    /// the system socket and the local default, in that order.
    pub fn new(flag: Option<PathBuf>, env: Option<PathBuf>) -> Target {
        let candidates = match flag {
            Some(p) => vec![(p, "--control")],
            None => {
                let mut c = Vec::new();
                if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
                    c.push((p, "TIERD_CONTROL"));
                }
                c.push((PathBuf::from(SYSTEM_SOCKET), "the system daemon's socket"));
                c.push((PathBuf::from(LOCAL_SOCKET), "the local default"));
                c
            }
        };
        Target { candidates }
    }

    /// Connect to the first candidate that accepts; say on stderr when an
    /// earlier one (named by `TIERD_CONTROL`) did not.
    fn connect(&self) -> anyhow::Result<(UnixStream, &Path)> {
        // (path, where it came from, why it failed, whether something was there)
        let mut tried: Vec<(PathBuf, &str, String, bool)> = Vec::new();
        for (path, from) in &self.candidates {
            match UnixStream::connect(path) {
                Ok(s) => {
                    // Say so when an earlier choice was named or was there
                    // (a stale socket): this may be another daemon.
                    for (p, f, why, there) in &tried {
                        if *f == "TIERD_CONTROL" || *there {
                            eprintln!(
                                "tierctl: {} ({f}) did not answer ({why}); using {}",
                                p.display(),
                                path.display()
                            );
                        }
                    }
                    return Ok((s, path));
                }
                Err(e) => tried.push((
                    path.clone(),
                    *from,
                    describe(&e),
                    e.kind() != std::io::ErrorKind::NotFound,
                )),
            }
        }
        let list: Vec<String> = tried
            .iter()
            .map(|(p, from, why, _)| format!("  {} ({from}): {why}", p.display()))
            .collect();
        if let [(p, _, why, _)] = tried.as_slice() {
            bail!(
                "no daemon at {}: {why}; is tierd running? (start it with `tierd serve`, or point --control or TIERD_CONTROL at its control socket)",
                p.display()
            );
        }
        bail!(
            "no daemon answers; tried:\n{}\nis tierd running? (start it with `tierd serve`, or point --control or TIERD_CONTROL at its control socket)",
            list.join("\n")
        )
    }

    /// Send one request and return the daemon's answer.
    pub fn call(&self, req: &Request) -> anyhow::Result<Response> {
        let (stream, socket) = self.connect()?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        (&stream)
            .write_all(&line)
            .with_context(|| format!("sending to {}", socket.display()))?;
        let mut answer = String::new();
        BufReader::new(&stream)
            .read_line(&mut answer)
            .with_context(|| format!("reading the answer from {}", socket.display()))?;
        if answer.is_empty() {
            bail!(
                "{} closed the connection without answering: is it a tierd control socket?",
                socket.display()
            );
        }
        serde_json::from_str(&answer).context("the daemon's answer is not valid JSON")
    }
}

/// Why a connect failed, in an operator's words.
fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such socket".into(),
        std::io::ErrorKind::ConnectionRefused => "nothing listens there (a stale socket)".into(),
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (the socket is mode 0600: run tierctl as the user tierd runs as)"
                .into()
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_alone_or_env_then_system_then_local() {
        let t = Target::new(Some("/x.sock".into()), Some("/env.sock".into()));
        assert_eq!(t.candidates.len(), 1);
        assert_eq!(t.candidates[0].0, PathBuf::from("/x.sock"));
        let t = Target::new(None, Some("/env.sock".into()));
        let paths: Vec<_> = t.candidates.iter().map(|c| c.0.clone()).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/env.sock"),
                PathBuf::from(SYSTEM_SOCKET),
                PathBuf::from(LOCAL_SOCKET)
            ]
        );
        assert_eq!(Target::new(None, None).candidates.len(), 2);
    }
}
