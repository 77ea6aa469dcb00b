//! One accept loop for every listener of the daemon (NBD over TCP and Unix
//! sockets, the control socket, the metrics endpoint): accept until
//! shutdown, one task per connection, an optional cap on connections served
//! at once (more wait in the listen backlog), a short pause after a failed
//! accept (say, out of file descriptors), and at the end either a graceful
//! drain (each connection is told to stop through its [`Stop`] and awaited)
//! or an abort of the connections still open.
//!
//! It knows nothing of what runs on a connection, so the protocol layer and
//! the serving layer share it.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// A listener that yields connections with a printable peer name.
pub trait Accept {
    /// A connection.
    type Conn: Send + 'static;
    /// The next connection and its peer.
    fn next(&self) -> impl Future<Output = io::Result<(Self::Conn, String)>> + Send;
}

impl Accept for UnixListener {
    type Conn = UnixStream;
    async fn next(&self) -> io::Result<(UnixStream, String)> {
        let (stream, peer) = self.accept().await?;
        let peer = match peer.as_pathname() {
            Some(p) => p.display().to_string(),
            None => "unix".to_owned(),
        };
        Ok((stream, peer))
    }
}

impl Accept for TcpListener {
    type Conn = TcpStream;
    async fn next(&self) -> io::Result<(TcpStream, String)> {
        self.accept().await.map(|(s, p)| (s, p.to_string()))
    }
}

/// A connection's stop signal: resolves once its loop shuts down
/// gracefully (or its [`StopTrigger`] fires). Cheap to clone.
#[derive(Clone)]
pub struct Stop(Option<watch::Receiver<bool>>);

/// Fires the [`Stop`]s made with it.
pub struct StopTrigger(watch::Sender<bool>);

impl StopTrigger {
    /// Fire: every [`Stop`] of this trigger resolves.
    pub fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Stop {
    /// A signal that never fires (a connection served on its own).
    pub fn never() -> Stop {
        Stop(None)
    }

    /// A signal and its trigger.
    pub fn new() -> (StopTrigger, Stop) {
        let (tx, rx) = watch::channel(false);
        (StopTrigger(tx), Stop(Some(rx)))
    }

    /// Resolve once the signal fires; never if it cannot fire any more.
    pub async fn wait(&mut self) {
        let Some(rx) = self.0.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// What happens to open connections when the loop shuts down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Fire every connection's [`Stop`] and wait for all to finish.
    Graceful,
    /// Abort the connection tasks.
    Abort,
}

/// How a loop runs.
#[derive(Clone)]
pub struct LoopOptions {
    /// Names the listener in logs ("NBD", "control", "metrics").
    pub what: &'static str,
    /// Connections served at once; a further one is not accepted until one
    /// ends.
    pub limit: Option<Arc<Semaphore>>,
    /// What shutdown does to open connections.
    pub drain: Drain,
}

/// Serve each connection of `listener` with `handle` on its own task until
/// `shutdown` completes, then drain as `opts` says.
pub async fn serve<L, F, Fut>(
    listener: L,
    opts: LoopOptions,
    shutdown: impl Future<Output = ()>,
    mut handle: F,
) where
    L: Accept,
    F: FnMut(L::Conn, String, Stop) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let what = opts.what;
    let (fire, stop) = Stop::new();
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while let Some(done) = conns.try_join_next() {
            if let Err(e) = done {
                if !e.is_cancelled() {
                    warn!("{what} connection task failed: {e}");
                }
            }
        }
        let permit = match &opts.limit {
            None => None,
            Some(limit) => tokio::select! {
                () = &mut shutdown => break,
                p = limit.clone().acquire_owned() => match p {
                    Ok(p) => Some(p),
                    Err(_) => break,
                },
            },
        };
        let (conn, peer) = tokio::select! {
            () = &mut shutdown => break,
            r = listener.next() => match r {
                Ok(c) => c,
                Err(e) => {
                    warn!("{what} accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let task = handle(conn, peer, stop.clone());
        conns.spawn(async move {
            let _permit = permit;
            task.await;
        });
    }
    match opts.drain {
        Drain::Abort => conns.abort_all(),
        Drain::Graceful => {
            debug!("{what} stopping; waiting for {} connections", conns.len());
            fire.fire();
            while let Some(done) = conns.join_next().await {
                if let Err(e) = done {
                    warn!("{what} connection task failed: {e}");
                }
            }
        }
    }
}
