//! One accept loop for the daemon's side listeners (the control socket and
//! the metrics endpoint): accept until shutdown, one task per connection,
//! a short pause after a failed accept (say, out of file descriptors), and
//! the connections still open aborted at the end.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;
use tracing::warn;

/// A listener that yields connections.
pub(crate) trait Accept {
    /// A connection.
    type Conn;
    /// The next connection.
    fn next(&self) -> impl Future<Output = io::Result<Self::Conn>> + Send;
}

impl Accept for UnixListener {
    type Conn = UnixStream;
    async fn next(&self) -> io::Result<UnixStream> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for TcpListener {
    type Conn = TcpStream;
    async fn next(&self) -> io::Result<TcpStream> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// Serve each connection of `listener` with `handle` on its own task until
/// `shutdown` completes; `what` names the listener in logs.
pub(crate) async fn serve_until<L, F, Fut>(
    listener: L,
    what: &'static str,
    shutdown: impl Future<Output = ()>,
    mut handle: F,
) where
    L: Accept,
    F: FnMut(L::Conn) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::pin!(shutdown);
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        tokio::select! {
            () = &mut shutdown => break,
            r = listener.next() => match r {
                Ok(conn) => {
                    conns.spawn(handle(conn));
                }
                Err(e) => {
                    warn!("{what} accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    conns.abort_all();
}
