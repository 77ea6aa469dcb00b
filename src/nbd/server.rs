//! The tokio NBD server: its listeners (on the shared accept loop of
//! [`crate::listen`], with this server's connection limit and a graceful
//! drain), one connection's lifetime (handshake, then transmission), and
//! shutdown.
//!
//! The phases live next door: [`handshake`](super::handshake) negotiates,
//! [`transmission`](super::transmission) serves requests. Finished requests
//! are reported to the [`RequestObserver`] of [`ServerOptions`] (how tierd
//! counts them in its metrics) so that this layer knows nothing of metrics.
//!
//! Shutdown (of an accept loop, or of one stream): stop accepting, stop
//! reading new requests, let in-flight requests finish and their replies be
//! written, then close. Handshakes still in progress are dropped.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn, Instrument};

use super::export::Export;
use super::handshake::{handshake, Conn};
use super::socket;
use super::threaded;
use super::tls::ServerTls;
use super::transmission::transmission;
use crate::listen::{self, Accept, Drain, LoopOptions, Stop};

/// Told about every request that reached the export, once it is done.
/// Refused requests (answered before the export is called) are not reported.
pub trait RequestObserver: Send + Sync + 'static {
    /// `command`: `read`, `write`, `flush`, `trim`, `cache`, `write_zeroes`
    /// or `block_status`; `bytes`: the READ/WRITE payload (0 otherwise);
    /// `took`: from dispatch to the encoded reply; `ok`: it succeeded.
    fn request_done(&self, command: &'static str, bytes: u64, took: Duration, ok: bool) {
        let _ = (command, bytes, took, ok);
    }
}

impl fmt::Debug for dyn RequestObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RequestObserver")
    }
}

/// A [`RequestObserver`] that ignores everything (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl RequestObserver for NoObserver {}

/// How a [`Server`] serves its export.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Name of the export; the empty name always selects it too.
    pub export_name: String,
    /// Human-readable description (`NBD_INFO_DESCRIPTION`, `NBD_OPT_LIST`).
    pub description: String,
    /// Refuse writes with `EPERM` and advertise `NBD_FLAG_READ_ONLY`.
    pub read_only: bool,
    /// Largest READ/WRITE payload accepted (also the advertised maximum).
    pub max_request: u32,
    /// Time allowed from connection to the start of transmission.
    pub handshake_timeout: Duration,
    /// Connections served at once by an accept loop; more wait in the backlog.
    pub max_connections: usize,
    /// Requests in flight per connection.
    pub max_in_flight: usize,
    /// Bytes of request/reply data in flight per connection (raised to at
    /// least `max_request` so that one maximal request always fits).
    pub max_in_flight_bytes: usize,
    /// Threads serving one connection on a plain TCP or Unix socket, each
    /// taking, running and answering whole requests (at most
    /// `max_in_flight`); 0 serves those connections on the async loop, as
    /// TLS and other streams always are.
    pub threads: usize,
    /// On those threads, READs longer than 16 KiB are sent without copying
    /// their data when the export can hand it out as pages
    /// ([`Export::read_to_pipe`](super::Export::read_to_pipe)).
    pub zero_copy: bool,
    /// On those threads, how long the thread reading a connection's next
    /// request polls the socket for it before it sleeps, while polling pays
    /// (adaptive; zero: never). A sleeping thread's wake-up is most of a
    /// queue-depth-1 round trip on a VM.
    pub poll: Duration,
    /// When set, TLS is required: a client must upgrade with
    /// `NBD_OPT_STARTTLS` first; every other option except `NBD_OPT_ABORT`
    /// is refused with `NBD_REP_ERR_TLS_REQD` until it has. When `None`,
    /// `NBD_OPT_STARTTLS` is answered with `NBD_REP_ERR_UNSUP`.
    pub tls: Option<ServerTls>,
    /// Told about every request served (default: [`NoObserver`]).
    pub observer: Arc<dyn RequestObserver>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            export_name: String::new(),
            description: String::new(),
            read_only: false,
            max_request: 32 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(30),
            max_connections: 256,
            max_in_flight: 64,
            max_in_flight_bytes: 128 * 1024 * 1024,
            threads: 16,
            zero_copy: true,
            poll: crate::units::NBD_POLL_DEFAULT,
            tls: None,
            observer: Arc::new(NoObserver),
        }
    }
}

/// Why a connection ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The socket failed (including the client closing mid-message).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The client broke the protocol in a way that ends the session.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The handshake did not finish within [`ServerOptions::handshake_timeout`].
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// The TLS handshake after `NBD_OPT_STARTTLS` failed (e.g. the client
    /// refused our certificate or offered none when one is required).
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
}

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
        let stream = match stream {
            Conn::Plain(s) if self.inner.opts.threads > 0 => match socket::into_blocking(s) {
                Ok(sock) => {
                    let sock = sock?;
                    let export = &self.inner.export;
                    return threaded::transmission(export, &self.inner.opts, sock, session, stop)
                        .await;
                }
                Err(s) => Conn::Plain(s),
            },
            other => other,
        };
        transmission(&self.inner.export, &self.inner.opts, stream, session, stop).await
    }
}
