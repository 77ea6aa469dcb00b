//! Finding the daemon and talking to it: the control socket is the one
//! `--control` names, or the first that answers of `$TIERD_CONTROL`, the
//! local default `tierd-data/control.sock`, the systemd unit's
//! `/run/tierd/control.sock` and the sockets running daemons registered
//! in the runtime directory (`tierd::control::find`), which finds a
//! daemon from any directory; one JSON request per line, one answer back.
//! A socket found by searching is named on stderr.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tierd::control::find::{self, SYSTEM_SOCKET};
use tierd::control::{Request, Response};

/// `tierd serve`'s default in the current directory.
pub const LOCAL_SOCKET: &str = "tierd-data/control.sock";

/// Where a candidate socket came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum From {
    Flag,
    Env,
    Local,
    System,
    /// Registered by the daemon with this pid, at this entry.
    Registered(u32, PathBuf),
}

impl From {
    /// Named by the operator: used without a word.
    fn named(&self) -> bool {
        matches!(self, From::Flag | From::Env)
    }

    fn describe(&self) -> String {
        match self {
            From::Flag => "--control".into(),
            From::Env => "TIERD_CONTROL".into(),
            From::Local => "the local default".into(),
            From::System => "the system daemon's socket".into(),
            From::Registered(pid, entry) => {
                format!("registered by tierd process {pid} as {}", entry.display())
            }
        }
    }
}

/// Where to look for the daemon.
#[derive(Debug, Clone)]
pub struct Target {
    /// Paths in the order tried, each with where it came from.
    candidates: Vec<(PathBuf, From)>,
    /// The directory registrations were looked for in, if any.
    registry: Option<PathBuf>,
}

impl Target {
    /// `--control` alone when given; otherwise `$TIERD_CONTROL` (if set),
    /// the local default, the system socket and the registrations in
    /// `registry`, in that order.
    pub fn new(flag: Option<PathBuf>, env: Option<PathBuf>, registry: Option<PathBuf>) -> Target {
        let candidates = match flag {
            Some(p) => {
                return Target {
                    candidates: vec![(p, From::Flag)],
                    registry: None,
                }
            }
            None => {
                let mut c = Vec::new();
                if let Some(p) = env.filter(|p| !p.as_os_str().is_empty()) {
                    c.push((p, From::Env));
                }
                c.push((PathBuf::from(LOCAL_SOCKET), From::Local));
                c.push((PathBuf::from(SYSTEM_SOCKET), From::System));
                for r in registry
                    .as_deref()
                    .map(find::registered)
                    .unwrap_or_default()
                {
                    c.push((r.socket, From::Registered(r.pid, r.entry)));
                }
                c
            }
        };
        Target {
            candidates,
            registry,
        }
    }

    /// From the flag, `$TIERD_CONTROL` and this environment's registry.
    pub fn from_env(flag: Option<PathBuf>) -> Target {
        Target::new(
            flag,
            std::env::var_os("TIERD_CONTROL").map(PathBuf::from),
            find::registry_dir(),
        )
    }

    /// Connect to the first candidate that accepts; say on stderr which
    /// one it is when it was found by searching, and when an earlier one
    /// (named by `TIERD_CONTROL`, or a stale socket) did not answer.
    /// Several registered daemons and nothing before them: refused, naming
    /// them (`--control` chooses).
    fn connect(&self) -> anyhow::Result<(UnixStream, &Path)> {
        // (path, where it came from, why it failed, whether something was there)
        let mut tried: Vec<(&Path, &From, String, bool)> = Vec::new();
        let registered: Vec<&Path> = self
            .candidates
            .iter()
            .filter(|(_, f)| matches!(f, From::Registered(..)))
            .map(|(p, _)| p.as_path())
            .collect();
        for (path, from) in &self.candidates {
            match UnixStream::connect(path) {
                Ok(s) => {
                    if let From::Registered(..) = from {
                        let others: Vec<String> = registered
                            .iter()
                            .filter(|p| **p != path.as_path() && UnixStream::connect(p).is_ok())
                            .map(|p| format!("  {}", p.display()))
                            .collect();
                        if !others.is_empty() {
                            bail!(
                                "several daemons run; choose one with --control:\n  {}\n{}",
                                path.display(),
                                others.join("\n")
                            );
                        }
                    }
                    // Say so when an earlier choice was named or was there
                    // (a stale socket): this may be another daemon.
                    for (p, f, why, there) in &tried {
                        if **f == From::Env || *there {
                            eprintln!(
                                "tierctl: {} ({}) did not answer ({why}); using {}",
                                p.display(),
                                f.describe(),
                                path.display()
                            );
                        }
                    }
                    if !from.named() {
                        eprintln!(
                            "tierctl: using the daemon at {} ({})",
                            path.display(),
                            from.describe()
                        );
                    }
                    return Ok((s, path));
                }
                Err(e) => tried.push((
                    path,
                    from,
                    describe(&e),
                    e.kind() != std::io::ErrorKind::NotFound,
                )),
            }
        }
        let advice = "is tierd running? (start it with `tierd serve`, or point --control or TIERD_CONTROL at its control socket)";
        if let [(p, _, why, _)] = tried.as_slice() {
            bail!("no daemon at {}: {why}; {advice}", p.display());
        }
        let mut list: Vec<String> = tried
            .iter()
            .map(|(p, from, why, _)| format!("  {} ({}): {why}", p.display(), from.describe()))
            .collect();
        list.push(match &self.registry {
            Some(dir) => format!(
                "  no running daemon registered in {} (where daemons started in this environment register)",
                dir.display()
            ),
            None => "  no runtime directory to look for registered daemons in (set XDG_RUNTIME_DIR)"
                .to_string(),
        });
        bail!("no daemon answers; tried:\n{}\n{advice}", list.join("\n"))
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
    fn the_flag_alone_or_env_then_local_then_system_then_registered() {
        let t = Target::new(Some("/x.sock".into()), Some("/env.sock".into()), None);
        assert_eq!(t.candidates.len(), 1);
        assert_eq!(t.candidates[0].0, PathBuf::from("/x.sock"));
        let t = Target::new(None, Some("/env.sock".into()), None);
        let paths: Vec<_> = t.candidates.iter().map(|c| c.0.clone()).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/env.sock"),
                PathBuf::from(LOCAL_SOCKET),
                PathBuf::from(SYSTEM_SOCKET),
            ]
        );
        assert_eq!(Target::new(None, None, None).candidates.len(), 2);
    }
}
