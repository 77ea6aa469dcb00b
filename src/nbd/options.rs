//! What the server and both phases of a connection share: how a
//! [`Server`](super::Server) serves ([`ServerOptions`]), who is told of
//! every request served ([`RequestObserver`]), and why a connection ended
//! ([`ConnectionError`]).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::tls::ServerTls;

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
    /// Threads of its own serving one connection, each taking, running
    /// and answering whole requests (at most `max_in_flight`); 0: none of
    /// its own: the runtime's shared blocking threads serve it, up to
    /// `max_in_flight` at once. Plain, TLS and in-memory streams alike.
    pub threads: usize,
    /// On a plain TCP or Unix socket, READs longer than 16 KiB are sent
    /// without copying their data when the export can hand it out as pages
    /// ([`Export::read_to_pipe`](super::Export::read_to_pipe)).
    pub zero_copy: bool,
    /// READs the export calls slow ([`Export::read_is_slow`]) take at most
    /// three quarters of a connection's threads; more queue in order, and
    /// the connection reads on (`src/nbd/lanes.rs`). Default false.
    ///
    /// [`Export::read_is_slow`]: super::Export::read_is_slow
    pub slow_lane: bool,
    /// On a plain TCP or Unix socket, how long the thread reading a
    /// connection's next request polls the socket for it before it sleeps,
    /// while polling pays (adaptive; zero: never). A sleeping thread's
    /// wake-up is most of a queue-depth-1 round trip on a VM.
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
            slow_lane: false,
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
