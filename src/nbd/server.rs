//! The tokio NBD server: its listeners (on the shared accept loop of
//! [`crate::listen`], with this server's connection limit and a graceful
//! drain), one connection's lifetime (handshake, then transmission), and
//! shutdown.
//!
//! The phases live next door: [`handshake`](super::handshake) negotiates,
//! [`transmission`](super::transmission) serves requests, over a plain
//! socket or, for TLS and every other stream, a
//! [`Bridge`](super::bridge::Bridge). Finished requests are reported to the
//! [`RequestObserver`] of [`ServerOptions`] (how tierd counts them in its
//! metrics) so that this layer knows nothing of metrics.
//!
//! Shutdown (of an accept loop, or of one stream): stop accepting, stop
//! reading new requests, let in-flight requests finish and their replies be
//! written, then close. Handshakes still in progress are dropped.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tracing::{debug, warn, Instrument};

use super::bridge::Bridge;
use super::export::Export;
use super::handshake::{handshake, Conn};
use super::options::{ConnectionError, ServerOptions};
use super::socket;
use super::transmission::transmission;
use super::wire::Wire;
use crate::listen::{self, Accept, Drain, LoopOptions, Stop};

/// An NBD server for one export. Cheap to clone.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

struct Inner {
    export: Arc<dyn Export>,
    opts: ServerOptions,
    connections: Arc<Semaphore>,
}

impl Server {
    /// A server for `export` with `options`.
    pub fn new(export: Arc<dyn Export>, options: ServerOptions) -> Server {
        let connections = Arc::new(Semaphore::new(options.max_connections.max(1)));
        Server {
            inner: Arc::new(Inner {
                export,
                opts: options,
                connections,
            }),
        }
    }

    /// The options this server was built with.
    pub fn options(&self) -> &ServerOptions {
        &self.inner.opts
    }

    /// Accept TCP connections (with `TCP_NODELAY`) until `shutdown` completes,
    /// then stop every connection gracefully and return once all are closed.
    pub async fn serve_tcp(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        self.serve_listener(listener, shutdown, |stream: &TcpStream, peer: &str| {
            if let Err(e) = stream.set_nodelay(true) {
                warn!(%peer, "cannot set TCP_NODELAY: {e}");
            }
        })
        .await
    }

    /// Accept Unix-socket connections until `shutdown` completes; see
    /// [`Server::serve_tcp`].
    pub async fn serve_unix(
        &self,
        listener: UnixListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        self.serve_listener(listener, shutdown, |_: &UnixStream, _: &str| {})
            .await
    }

    /// Serve one already-connected stream until the client disconnects.
    /// Does not count against [`ServerOptions::max_connections`].
    pub async fn serve_stream<S>(&self, stream: S) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        self.run_connection(stream, Stop::never()).await
    }

    /// Serve one already-connected stream until the client disconnects or
    /// `shutdown` completes (then in-flight requests finish and are answered).
    pub async fn serve_stream_until<S>(
        &self,
        stream: S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (trigger, stop) = Stop::new();
        let conn = self.run_connection(stream, stop);
        tokio::pin!(conn);
        tokio::pin!(shutdown);
        tokio::select! {
            r = &mut conn => return r,
            () = &mut shutdown => trigger.fire(),
        }
        conn.await
    }

    /// The shared accept loop with this server's connection cap and a
    /// graceful drain; `prepare` runs on each accepted stream first.
    async fn serve_listener<L>(
        &self,
        listener: L,
        shutdown: impl Future<Output = ()>,
        prepare: impl Fn(&L::Conn, &str),
    ) -> io::Result<()>
    where
        L: Accept,
        L::Conn: AsyncRead + AsyncWrite + Unpin,
    {
        let opts = LoopOptions {
            what: "NBD",
            limit: Some(self.inner.connections.clone()),
            drain: Drain::Graceful,
        };
        listen::serve(listener, opts, shutdown, |stream, peer, stop| {
            prepare(&stream, &peer);
            let server = self.clone();
            let span = tracing::debug_span!("nbd", peer = %peer);
            async move {
                debug!("connection accepted");
                let _ = server.run_connection(stream, stop).await;
            }
            .instrument(span)
        })
        .await;
        Ok(())
    }

    /// Serve one connection to its end, logging how it ended.
    async fn run_connection<S>(&self, stream: S, stop: Stop) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let result = self.connection(stream, stop).await;
        match &result {
            Ok(()) => debug!("connection closed"),
            Err(ConnectionError::Protocol(e)) => warn!("NBD protocol error, disconnecting: {e}"),
            Err(ConnectionError::Tls(e)) => warn!("NBD TLS handshake failed: {e}"),
            Err(e) => debug!("connection ended: {e}"),
        }
        result
    }

    async fn connection<S>(&self, stream: S, mut stop: Stop) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let timeout = self.inner.opts.handshake_timeout;
        let session = tokio::select! {
            r = tokio::time::timeout(timeout, handshake(&*self.inner.export, &self.inner.opts, stream)) => match r {
                Err(_) => return Err(ConnectionError::HandshakeTimeout),
                Ok(r) => r?,
            },
            () = stop.wait() => {
                debug!("shutdown during handshake");
                return Ok(());
            }
        };
        let Some((session, stream)) = session else {
            debug!("client aborted the handshake");
            return Ok(());
        };
        debug!(
            structured = session.structured,
            base_allocation = session.base_allocation,
            tls = stream.is_tls(),
            "transmission phase"
        );
        let (export, opts) = (&self.inner.export, &self.inner.opts);
        let runtime = Handle::current();
        let stream = match stream {
            Conn::Plain(s) => match socket::into_blocking(s) {
                Ok(sock) => {
                    return transmission(export, opts, sock?, session, runtime, stop).await;
                }
                Err(s) => Conn::Plain(s),
            },
            tls => tls,
        };
        // TLS, or a stream that is no socket: its own receive and send.
        let wire = Bridge::new(stream, runtime.clone());
        let closing = wire.try_clone()?;
        let served = transmission(export, opts, wire, session, runtime, stop).await;
        let closed = closing.close().await.map_err(ConnectionError::from);
        served.and(closed)
    }
}
