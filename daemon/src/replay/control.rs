//! The replayer's line to the daemon's control socket: the status (the
//! volume's geometry before the fill, its counters before and after the
//! replay), the placement of the footprint, and pausing migration while
//! the fill lays the volume out.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tierd::control::{MigrateAction, PlacementMap, Request, Response, Status};

/// Where a daemon started with `tierd serve` in the current directory
/// keeps its socket, and where the system unit keeps it.
const LOCAL: &str = "tierd-data/control.sock";
const SYSTEM: &str = "/run/tierd/control.sock";

/// A daemon's control socket.
pub struct Control {
    path: PathBuf,
}

impl Control {
    /// `--control` when given, else `$TIERD_CONTROL`, else the local
    /// default and the system daemon's socket, whichever exists first.
    pub fn find(flag: Option<PathBuf>) -> anyhow::Result<Control> {
        if let Some(path) = flag.or_else(|| {
            std::env::var_os("TIERD_CONTROL")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        }) {
            return Ok(Control { path });
        }
        match [LOCAL, SYSTEM].into_iter().find(|p| Path::new(p).exists()) {
            Some(p) => Ok(Control { path: p.into() }),
            None => bail!(
                "no control socket at {LOCAL} or {SYSTEM}: give --control, the socket of the daemon serving the volume (<data-dir>/control.sock); the replayer reads the volume's layout and counters there"
            ),
        }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn call<T: serde::de::DeserializeOwned>(&self, req: &Request) -> anyhow::Result<T> {
        let p = self.path.display();
        let stream = UnixStream::connect(&self.path).with_context(|| {
            format!("no daemon answers at the control socket {p}: give --control, the socket of the daemon serving the volume")
        })?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .with_context(|| format!("talking to {p}"))?;
        let mut line = serde_json::to_vec(req)?;
        line.push(b'\n');
        (&stream)
            .write_all(&line)
            .with_context(|| format!("sending to {p}"))?;
        let mut answer = String::new();
        BufReader::new(&stream)
            .read_line(&mut answer)
            .with_context(|| format!("reading the answer from {p}"))?;
        let resp: Response = serde_json::from_str(&answer)
            .with_context(|| format!("{p} answered something other than a tierd control reply"))?;
        if !resp.ok {
            bail!(
                "the daemon at {p} refused: {}",
                resp.error.as_deref().unwrap_or("(no reason given)")
            );
        }
        serde_json::from_value(resp.result.unwrap_or_default())
            .with_context(|| format!("decoding the answer of {p}"))
    }

    /// The daemon's status.
    pub fn status(&self) -> anyhow::Result<Status> {
        self.call(&Request::Status)
    }

    /// Where the extents of `[offset, offset + len)` are.
    pub fn placement(&self, offset: u64, len: u64) -> anyhow::Result<PlacementMap> {
        self.call(&Request::Placement {
            offset,
            len: Some(len),
            cells: None,
        })
    }

    /// Pause or resume migration.
    pub fn migrate(&self, action: MigrateAction) -> anyhow::Result<()> {
        self.call::<serde_json::Value>(&Request::Migrate { action })
            .map(|_| ())
    }
}
