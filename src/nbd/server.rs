//! The tokio NBD server: accepting connections, the fixed-newstyle handshake,
//! and the transmission phase for one [`Export`].
//!
//! Per connection, after the handshake, one reader (the connection task
//! itself) reads request headers and write payloads in order and validates
//! them; each valid request then runs on its own task, calling the export on
//! a blocking thread, and hands its encoded reply to one writer task through
//! a channel. Replies therefore complete out of order but never interleave on
//! the socket. Two semaphores bound what a connection may have in flight: a
//! count of requests and a byte budget for read and write buffers; a permit
//! lives until its reply has been written.
//!
//! Shutdown (of an accept loop, or of one stream): stop accepting, stop
//! reading new requests, let in-flight requests finish and their replies be
//! written, then close. Handshakes still in progress are dropped.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter, ReadBuf,
};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, warn, Instrument};

use super::export::{Export, ExportError, StatusRun};
use super::proto::{self, Descriptor, OptionHeader, Request};
use super::tls::ServerTls;
use crate::units::IoHint;

/// Options longer than [`proto::MAX_OPTION_LEN`] but at most this long are
/// read, discarded and refused with `NBD_REP_ERR_TOO_BIG`; longer ones end
/// the connection.
const OPTION_DISCARD_LIMIT: u32 = 1024 * 1024;
/// Most descriptors sent in one `base:allocation` chunk.
const MAX_DESCRIPTORS: usize = 16 * 1024;
/// Context id of `base:allocation` after `NBD_OPT_SET_META_CONTEXT`.
const BASE_ALLOCATION_ID: u32 = 1;
/// Bytes accounted to every in-flight request besides its data buffer.
const REQUEST_OVERHEAD: u32 = 256;
/// Preferred block size advertised in `NBD_INFO_BLOCK_SIZE`.
const PREFERRED_BLOCK: u32 = 4096;
/// Scratch buffer size used to discard unwanted payloads.
const DISCARD_CHUNK: usize = 64 * 1024;

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
    /// When set, TLS is required: a client must upgrade with
    /// `NBD_OPT_STARTTLS` first; every other option except `NBD_OPT_ABORT`
    /// is refused with `NBD_REP_ERR_TLS_REQD` until it has. When `None`,
    /// `NBD_OPT_STARTTLS` is answered with `NBD_REP_ERR_UNSUP`.
    pub tls: Option<ServerTls>,
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
            tls: None,
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

/// What the handshake settled for the transmission phase.
#[derive(Debug, Clone, Copy)]
struct Session {
    structured: bool,
    base_allocation: bool,
    size: u64,
}

/// Handshake state carried between options.
#[derive(Debug, Default)]
struct Haggle {
    structured: bool,
    base_allocation: bool,
}

/// One encoded reply on its way to the writer, with the permits it holds.
struct Outgoing {
    head: Vec<u8>,
    data: Option<Vec<u8>>,
    /// `None` only for the last replies sent while shutting down.
    _permits: Option<Permits>,
}

struct Permits {
    _count: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

/// Streams tracked per connection for sequential detection.
const STREAMS: usize = 4;

/// The last few contiguous streams of one connection: for each, where its
/// next request would start and how many bytes it has run so far. Requests
/// are observed in the order the client sent them, so this is exact.
#[derive(Default)]
struct Streams {
    /// (next offset, run length, last use), most recent use wins.
    slots: [(u64, u64, u64); STREAMS],
    clock: u64,
}

impl Streams {
    /// Account a READ or WRITE and return its hint.
    fn observe(&mut self, offset: u64, len: u64) -> IoHint {
        self.clock += 1;
        let end = offset.saturating_add(len);
        let slot = match self.slots.iter().position(|s| s.0 == offset && s.1 > 0) {
            Some(i) => {
                self.slots[i].1 = self.slots[i].1.saturating_add(len);
                i
            }
            None => {
                // Replace the least recently used stream.
                let i = (0..STREAMS).min_by_key(|i| self.slots[*i].2).unwrap_or(0);
                self.slots[i].1 = len;
                i
            }
        };
        self.slots[slot].0 = end;
        self.slots[slot].2 = self.clock;
        IoHint {
            seq_run: self.slots[slot].1,
        }
    }
}

/// A validated request ready to run against the export.
enum Op {
    Read {
        offset: u64,
        len: u32,
        hint: IoHint,
    },
    Write {
        offset: u64,
        data: Vec<u8>,
        fua: bool,
        hint: IoHint,
    },
    Flush,
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Cache {
        offset: u64,
        len: u32,
    },
    WriteZeroes {
        offset: u64,
        len: u32,
        no_hole: bool,
        fast: bool,
        fua: bool,
    },
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
    },
}

enum OpOutput {
    Done,
    Data { offset: u64, data: Vec<u8> },
    Status(Vec<Descriptor>),
}

/// What the reader does with a request once validated.
enum Next {
    /// Answer at once with this encoded reply.
    Reply(Vec<u8>),
    /// Run this operation holding this many data bytes.
    Run(Op, u32),
}

/// A request refused before it reaches the export.
struct Refusal {
    errno: u32,
    msg: &'static str,
}

fn refuse(errno: u32, msg: &'static str) -> Refusal {
    Refusal { errno, msg }
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
        let accept = || async {
            let (stream, peer) = listener.accept().await?;
            if let Err(e) = stream.set_nodelay(true) {
                warn!(%peer, "cannot set TCP_NODELAY: {e}");
            }
            Ok((stream, peer.to_string()))
        };
        self.accept_loop(accept, shutdown).await
    }

    /// Accept Unix-socket connections until `shutdown` completes; see
    /// [`Server::serve_tcp`].
    pub async fn serve_unix(
        &self,
        listener: UnixListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let accept = || async {
            let (stream, peer) = listener.accept().await?;
            let peer = match peer.as_pathname() {
                Some(p) => p.display().to_string(),
                None => "unix".to_owned(),
            };
            Ok((stream, peer))
        };
        self.accept_loop(accept, shutdown).await
    }

    /// Serve one already-connected stream until the client disconnects.
    /// Does not count against [`ServerOptions::max_connections`].
    pub async fn serve_stream<S>(&self, stream: S) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        self.serve_stream_until(stream, std::future::pending())
            .await
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
        let (stop_tx, stop_rx) = watch::channel(false);
        let conn = self.run_connection(stream, stop_rx);
        tokio::pin!(conn);
        tokio::pin!(shutdown);
        tokio::select! {
            r = &mut conn => return r,
            () = &mut shutdown => {
                let _ = stop_tx.send(true);
            }
        }
        conn.await
    }

    async fn accept_loop<S, A, F>(
        &self,
        mut accept: A,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
        A: FnMut() -> F,
        F: Future<Output = io::Result<(S, String)>>,
    {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            while let Some(done) = tasks.try_join_next() {
                if let Err(e) = done {
                    warn!("NBD connection task failed: {e}");
                }
            }
            let permit = tokio::select! {
                () = &mut shutdown => break,
                p = self.inner.connections.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let (stream, peer) = tokio::select! {
                () = &mut shutdown => break,
                r = accept() => match r {
                    Ok(conn) => conn,
                    Err(e) => {
                        warn!("NBD accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let server = self.clone();
            let stop = stop_rx.clone();
            let span = tracing::debug_span!("nbd", peer = %peer);
            tasks.spawn(
                async move {
                    let _permit = permit;
                    debug!("connection accepted");
                    let _ = server.run_connection(stream, stop).await;
                }
                .instrument(span),
            );
        }
        debug!(
            "NBD server stopping; waiting for {} connections",
            tasks.len()
        );
        let _ = stop_tx.send(true);
        while let Some(done) = tasks.join_next().await {
            if let Err(e) = done {
                warn!("NBD connection task failed: {e}");
            }
        }
        Ok(())
    }

    /// Serve one connection to its end, logging how it ended.
    async fn run_connection<S>(
        &self,
        stream: S,
        stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectionError>
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

    async fn connection<S>(
        &self,
        stream: S,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let timeout = self.inner.opts.handshake_timeout;
        let session = tokio::select! {
            r = tokio::time::timeout(timeout, self.handshake(stream)) => match r {
                Err(_) => return Err(ConnectionError::HandshakeTimeout),
                Ok(r) => r?,
            },
            () = wait_stop(&mut stop) => {
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
        self.transmission(stream, session, stop).await
    }

    fn export_matches(&self, name: &str) -> bool {
        name.is_empty() || name == self.inner.opts.export_name
    }

    fn transmission_flags(&self, structured: bool) -> u16 {
        let mut flags = proto::FLAG_HAS_FLAGS
            | proto::FLAG_SEND_FLUSH
            | proto::FLAG_SEND_FUA
            | proto::FLAG_SEND_TRIM
            | proto::FLAG_SEND_WRITE_ZEROES
            | proto::FLAG_SEND_FAST_ZERO
            | proto::FLAG_SEND_CACHE
            | proto::FLAG_CAN_MULTI_CONN;
        if structured {
            flags |= proto::FLAG_SEND_DF;
        }
        if self.inner.opts.read_only {
            flags |= proto::FLAG_READ_ONLY;
        }
        flags
    }

    /// Run the handshake, upgrading to TLS on `NBD_OPT_STARTTLS`; returns
    /// the session and the stream (plain or TLS) for the transmission phase.
    /// `Ok(None)`: the client aborted.
    async fn handshake<S>(&self, stream: S) -> Result<Option<(Session, Conn<S>)>, ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut conn = Conn::Plain(stream);
        let greeting =
            proto::encode_server_greeting(proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES);
        send(&mut conn, &greeting).await?;
        let client_flags = conn.read_u32().await?;
        if client_flags & !proto::KNOWN_CLIENT_FLAGS != 0 {
            return Err(ConnectionError::Protocol(format!(
                "unknown client flags {client_flags:#x}"
            )));
        }
        let no_zeroes = client_flags & proto::FLAG_C_NO_ZEROES != 0;
        let mut st = Haggle::default();
        loop {
            let mut hdr = [0u8; proto::OPTION_HEADER_LEN];
            conn.read_exact(&mut hdr).await?;
            let h = proto::parse_option_header(&hdr)
                .map_err(|e| ConnectionError::Protocol(format!("option header: {e}")))?;
            if h.len > proto::MAX_OPTION_LEN {
                if h.option == proto::OPT_EXPORT_NAME || h.len > OPTION_DISCARD_LIMIT {
                    return Err(ConnectionError::Protocol(format!(
                        "option {} of {} bytes is too long",
                        h.option, h.len
                    )));
                }
                warn!(option = h.option, len = h.len, "option too long; refused");
                discard(&mut conn, u64::from(h.len)).await?;
                let mut out = Vec::new();
                reply_err(
                    &mut out,
                    h.option,
                    proto::REP_ERR_TOO_BIG,
                    "option too long",
                );
                send(&mut conn, &out).await?;
                continue;
            }
            // Bounded by MAX_OPTION_LEN above.
            let mut payload = vec![0u8; h.len as usize];
            conn.read_exact(&mut payload).await?;
            let mut out = Vec::new();
            let step = match &self.inner.opts.tls {
                Some(_) if h.option == proto::OPT_STARTTLS => {
                    if !payload.is_empty() {
                        reply_err(
                            &mut out,
                            h.option,
                            proto::REP_ERR_INVALID,
                            "STARTTLS takes no data",
                        );
                        Step::Continue
                    } else if conn.is_tls() {
                        reply_err(
                            &mut out,
                            h.option,
                            proto::REP_ERR_INVALID,
                            "TLS is already in use",
                        );
                        Step::Continue
                    } else {
                        proto::encode_option_reply(&mut out, h.option, proto::REP_ACK, &[]);
                        Step::StartTls
                    }
                }
                Some(_) if !conn.is_tls() && h.option != proto::OPT_ABORT => {
                    if h.option == proto::OPT_EXPORT_NAME {
                        // No error reply is possible to EXPORT_NAME.
                        Step::Close("EXPORT_NAME before STARTTLS; TLS is required".into())
                    } else {
                        reply_err(
                            &mut out,
                            h.option,
                            proto::REP_ERR_TLS_REQD,
                            "TLS is required: send NBD_OPT_STARTTLS first",
                        );
                        Step::Continue
                    }
                }
                _ => self.option(&h, &payload, &mut st, &mut out),
            };
            match step {
                Step::Continue => send(&mut conn, &out).await?,
                Step::StartTls => {
                    send(&mut conn, &out).await?;
                    let (Some(tls), Conn::Plain(raw)) = (&self.inner.opts.tls, conn) else {
                        return Err(ConnectionError::Protocol(
                            "STARTTLS without TLS configured".into(),
                        ));
                    };
                    let tls_stream = tls
                        .acceptor()
                        .accept(raw)
                        .await
                        .map_err(ConnectionError::Tls)?;
                    debug!("TLS established");
                    conn = Conn::Tls(Box::new(tls_stream));
                    // Option haggling starts over; the client flags stay.
                    st = Haggle::default();
                }
                Step::Abort => {
                    // The client may already have gone; that is fine.
                    let _ = send(&mut conn, &out).await;
                    return Ok(None);
                }
                Step::Transmit => {
                    if h.option == proto::OPT_EXPORT_NAME {
                        let flags = self.transmission_flags(st.structured);
                        out.extend_from_slice(&proto::encode_export_name_reply(
                            self.inner.export.size(),
                            flags,
                            no_zeroes,
                        ));
                    }
                    send(&mut conn, &out).await?;
                    let session = Session {
                        structured: st.structured,
                        base_allocation: st.base_allocation,
                        size: self.inner.export.size(),
                    };
                    return Ok(Some((session, conn)));
                }
                Step::Close(why) => {
                    return Err(ConnectionError::Protocol(why));
                }
            }
        }
    }

    /// Answer one option into `out`.
    fn option(&self, h: &OptionHeader, payload: &[u8], st: &mut Haggle, out: &mut Vec<u8>) -> Step {
        let opt = h.option;
        match opt {
            proto::OPT_EXPORT_NAME => match proto::parse_string(payload) {
                Ok(name) if self.export_matches(&name) => Step::Transmit,
                Ok(name) => Step::Close(format!("unknown export {name:?}")),
                Err(e) => Step::Close(format!("bad export name: {e}")),
            },
            proto::OPT_ABORT => {
                proto::encode_option_reply(out, opt, proto::REP_ACK, &[]);
                Step::Abort
            }
            proto::OPT_LIST => {
                if !payload.is_empty() {
                    reply_err(out, opt, proto::REP_ERR_INVALID, "LIST takes no data");
                    return Step::Continue;
                }
                let opts = &self.inner.opts;
                let server = proto::encode_rep_server(&opts.export_name, &opts.description);
                proto::encode_option_reply(out, opt, proto::REP_SERVER, &server);
                if !opts.export_name.is_empty() {
                    let default = proto::encode_rep_server("", &opts.description);
                    proto::encode_option_reply(out, opt, proto::REP_SERVER, &default);
                }
                proto::encode_option_reply(out, opt, proto::REP_ACK, &[]);
                Step::Continue
            }
            proto::OPT_INFO | proto::OPT_GO => self.info_or_go(opt, payload, st, out),
            proto::OPT_STRUCTURED_REPLY => {
                if payload.is_empty() {
                    st.structured = true;
                    proto::encode_option_reply(out, opt, proto::REP_ACK, &[]);
                } else {
                    reply_err(
                        out,
                        opt,
                        proto::REP_ERR_INVALID,
                        "STRUCTURED_REPLY takes no data",
                    );
                }
                Step::Continue
            }
            proto::OPT_LIST_META_CONTEXT | proto::OPT_SET_META_CONTEXT => {
                self.meta_context(opt, payload, st, out);
                Step::Continue
            }
            proto::OPT_STARTTLS => {
                reply_err(out, opt, proto::REP_ERR_UNSUP, "TLS is not supported");
                Step::Continue
            }
            proto::OPT_EXTENDED_HEADERS => {
                reply_err(
                    out,
                    opt,
                    proto::REP_ERR_UNSUP,
                    "extended headers are not supported",
                );
                Step::Continue
            }
            _ => {
                debug!(option = opt, "unsupported option");
                reply_err(out, opt, proto::REP_ERR_UNSUP, "unsupported option");
                Step::Continue
            }
        }
    }

    fn info_or_go(&self, opt: u32, payload: &[u8], st: &Haggle, out: &mut Vec<u8>) -> Step {
        let req = match proto::parse_info_request(payload) {
            Ok(r) => r,
            Err(e) => {
                warn!("malformed INFO/GO: {e}");
                reply_err(out, opt, proto::REP_ERR_INVALID, &e.to_string());
                return Step::Continue;
            }
        };
        if !self.export_matches(&req.name) {
            reply_err(out, opt, proto::REP_ERR_UNKNOWN, "no such export");
            return Step::Continue;
        }
        let opts = &self.inner.opts;
        let flags = self.transmission_flags(st.structured);
        let export = proto::encode_info_export(self.inner.export.size(), flags);
        proto::encode_option_reply(out, opt, proto::REP_INFO, &export);
        let block = proto::encode_info_block_size(1, PREFERRED_BLOCK, opts.max_request);
        proto::encode_option_reply(out, opt, proto::REP_INFO, &block);
        if req.requests.contains(&proto::INFO_NAME) {
            let name = proto::encode_info_string(proto::INFO_NAME, &opts.export_name);
            proto::encode_option_reply(out, opt, proto::REP_INFO, &name);
        }
        if req.requests.contains(&proto::INFO_DESCRIPTION) {
            let d = proto::encode_info_string(proto::INFO_DESCRIPTION, &opts.description);
            proto::encode_option_reply(out, opt, proto::REP_INFO, &d);
        }
        proto::encode_option_reply(out, opt, proto::REP_ACK, &[]);
        if opt == proto::OPT_GO {
            Step::Transmit
        } else {
            Step::Continue
        }
    }

    fn meta_context(&self, opt: u32, payload: &[u8], st: &mut Haggle, out: &mut Vec<u8>) {
        let set = opt == proto::OPT_SET_META_CONTEXT;
        if set {
            // Every SET replaces the selection, even one that fails.
            st.base_allocation = false;
            if !st.structured {
                reply_err(
                    out,
                    opt,
                    proto::REP_ERR_INVALID,
                    "structured replies must be negotiated first",
                );
                return;
            }
        }
        let req = match proto::parse_meta_context_request(payload) {
            Ok(r) => r,
            Err(e) => {
                warn!("malformed meta context option: {e}");
                reply_err(out, opt, proto::REP_ERR_INVALID, &e.to_string());
                return;
            }
        };
        if !self.export_matches(&req.export) {
            reply_err(out, opt, proto::REP_ERR_UNKNOWN, "no such export");
            return;
        }
        let matched = if set {
            req.queries
                .iter()
                .any(|q| q == proto::CONTEXT_BASE_ALLOCATION)
        } else {
            req.queries.is_empty()
                || req
                    .queries
                    .iter()
                    .any(|q| q == "base:" || q == proto::CONTEXT_BASE_ALLOCATION)
        };
        if matched {
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            let ctx = proto::encode_meta_context(id, proto::CONTEXT_BASE_ALLOCATION);
            proto::encode_option_reply(out, opt, proto::REP_META_CONTEXT, &ctx);
            if set {
                st.base_allocation = true;
            }
        }
        proto::encode_option_reply(out, opt, proto::REP_ACK, &[]);
    }

    async fn transmission<S>(
        &self,
        stream: S,
        session: Session,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (rd, wr) = tokio::io::split(stream);
        let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
        let writer = tokio::spawn(write_replies(wr, rx).in_current_span());
        let reader = BufReader::with_capacity(128 * 1024, rd);
        let read_result = self.read_requests(reader, tx, session, &mut stop).await;
        // The reader has dropped its sender; the writer ends once every
        // in-flight request has sent its reply.
        let write_result = match writer.await {
            Ok(r) => r.map_err(ConnectionError::from),
            Err(e) => Err(ConnectionError::Io(io::Error::other(e))),
        };
        read_result.and(write_result)
    }

    async fn read_requests<R>(
        &self,
        mut rd: R,
        tx: mpsc::UnboundedSender<Outgoing>,
        session: Session,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<(), ConnectionError>
    where
        R: AsyncRead + Unpin,
    {
        let opts = &self.inner.opts;
        let count = Arc::new(Semaphore::new(opts.max_in_flight.max(1)));
        let bytes = Arc::new(Semaphore::new(byte_budget(opts)));
        let mut streams = Streams::default();
        loop {
            let mut hdr = [0u8; proto::REQUEST_HEADER_LEN];
            let got = tokio::select! {
                biased;
                () = wait_stop(stop) => {
                    debug!("shutdown: no more requests read");
                    break;
                }
                () = tx.closed() => break,
                r = read_header(&mut rd, &mut hdr) => r?,
            };
            if !got {
                debug!("client closed the connection");
                break;
            }
            let req = proto::parse_request(&hdr).map_err(|e| {
                ConnectionError::Protocol(format!("request header: {e}; cannot resync"))
            })?;
            if req.typ == proto::CMD_DISC {
                debug!("client sent DISC");
                break;
            }
            let next = match self.validate(&req, &session) {
                Ok(Some((op, data_bytes))) => Next::Run(op, data_bytes),
                // Zero-length request (no payload either): nothing to do.
                Ok(None) => Next::Reply(ok_reply(req.cookie, session.structured)),
                Err(refusal) => {
                    if req.typ == proto::CMD_WRITE {
                        discard(&mut rd, u64::from(req.length)).await?;
                    }
                    debug!(
                        cookie = req.cookie,
                        cmd = req.typ,
                        errno = refusal.errno,
                        "request refused: {}",
                        refusal.msg
                    );
                    let head =
                        error_reply(req.cookie, session.structured, refusal.errno, refusal.msg);
                    Next::Reply(head)
                }
            };
            let cost = match &next {
                Next::Reply(_) => REQUEST_OVERHEAD,
                // data_bytes is bounded by validation; the budget covers it.
                Next::Run(_, data_bytes) => REQUEST_OVERHEAD.saturating_add(*data_bytes),
            };
            let permits = acquire(&count, &bytes, cost, stop).await;
            let stopping = permits.is_none();
            match (next, permits) {
                (Next::Reply(head), permits) => {
                    let _ = tx.send(Outgoing {
                        head,
                        data: None,
                        _permits: permits,
                    });
                }
                (Next::Run(op, _), Some(permits)) => {
                    let op = match op {
                        Op::Write { offset, fua, .. } => {
                            // Allocated only now: the length passed validation.
                            let mut data = vec![0u8; req.length as usize];
                            rd.read_exact(&mut data).await?;
                            let hint = streams.observe(offset, u64::from(req.length));
                            Op::Write {
                                offset,
                                data,
                                fua,
                                hint,
                            }
                        }
                        Op::Read { offset, len, .. } => {
                            let hint = streams.observe(offset, u64::from(len));
                            Op::Read { offset, len, hint }
                        }
                        other => other,
                    };
                    match self.try_inline(&op, req.cookie, session.structured) {
                        Some((head, data)) => {
                            let _ = tx.send(Outgoing {
                                head,
                                data,
                                _permits: Some(permits),
                            });
                        }
                        None => {
                            self.spawn_op(op, req.cookie, session.structured, permits, tx.clone())
                        }
                    }
                }
                (Next::Run(op, _), None) => {
                    // Shutting down while waiting for room: answer, don't run.
                    if matches!(op, Op::Write { .. }) {
                        discard(&mut rd, u64::from(req.length)).await?;
                    }
                    let msg = "server is shutting down";
                    let head = error_reply(req.cookie, session.structured, proto::ESHUTDOWN, msg);
                    let _ = tx.send(Outgoing {
                        head,
                        data: None,
                        _permits: None,
                    });
                }
            }
            if stopping {
                debug!("shutdown while requests were queued; no more requests read");
                break;
            }
        }
        Ok(())
    }

    /// Check a request. `Ok(None)`: valid but zero-length, answered at once.
    /// On success also returns the data bytes it will hold in memory.
    fn validate(&self, req: &Request, session: &Session) -> Result<Option<(Op, u32)>, Refusal> {
        use proto::{
            CMD_FLAG_DF, CMD_FLAG_FAST_ZERO, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE, CMD_FLAG_REQ_ONE,
            EINVAL, ENOSPC, EPERM,
        };
        let opts = &self.inner.opts;
        let offset = req.offset;
        let len = req.length;
        let in_range = offset
            .checked_add(u64::from(len))
            .is_some_and(|end| end <= session.size);
        let flags_ok = |allowed: u16| req.flags & !allowed == 0;
        let fua = req.flags & CMD_FLAG_FUA != 0;
        match req.typ {
            proto::CMD_READ => {
                let allowed = if session.structured {
                    CMD_FLAG_FUA | CMD_FLAG_DF
                } else {
                    CMD_FLAG_FUA
                };
                if !flags_ok(allowed) {
                    return Err(refuse(EINVAL, "invalid flags for READ"));
                }
                if len > opts.max_request {
                    return Err(refuse(EINVAL, "read longer than the maximum payload"));
                }
                if !in_range {
                    return Err(refuse(EINVAL, "read beyond the end of the export"));
                }
                if len == 0 {
                    return Ok(None);
                }
                Ok(Some((
                    Op::Read {
                        offset,
                        len,
                        hint: IoHint::default(),
                    },
                    len,
                )))
            }
            proto::CMD_WRITE => {
                if !flags_ok(CMD_FLAG_FUA) {
                    return Err(refuse(EINVAL, "invalid flags for WRITE"));
                }
                if len > opts.max_request {
                    return Err(refuse(EINVAL, "write longer than the maximum payload"));
                }
                if opts.read_only {
                    return Err(refuse(EPERM, "export is read-only"));
                }
                if !in_range {
                    return Err(refuse(ENOSPC, "write beyond the end of the export"));
                }
                if len == 0 {
                    return Ok(None);
                }
                let op = Op::Write {
                    offset,
                    data: Vec::new(),
                    fua,
                    hint: IoHint::default(),
                };
                Ok(Some((op, len)))
            }
            proto::CMD_FLUSH => {
                if !flags_ok(CMD_FLAG_FUA) {
                    return Err(refuse(EINVAL, "invalid flags for FLUSH"));
                }
                Ok(Some((Op::Flush, 0)))
            }
            proto::CMD_TRIM => {
                if !flags_ok(CMD_FLAG_FUA) {
                    return Err(refuse(EINVAL, "invalid flags for TRIM"));
                }
                if opts.read_only {
                    return Err(refuse(EPERM, "export is read-only"));
                }
                if !in_range {
                    return Err(refuse(EINVAL, "trim beyond the end of the export"));
                }
                if len == 0 {
                    return Ok(None);
                }
                Ok(Some((Op::Trim { offset, len, fua }, 0)))
            }
            proto::CMD_CACHE => {
                if !flags_ok(CMD_FLAG_FUA) {
                    return Err(refuse(EINVAL, "invalid flags for CACHE"));
                }
                if !in_range {
                    return Err(refuse(EINVAL, "cache beyond the end of the export"));
                }
                if len == 0 {
                    return Ok(None);
                }
                Ok(Some((Op::Cache { offset, len }, 0)))
            }
            proto::CMD_WRITE_ZEROES => {
                if !flags_ok(CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO) {
                    return Err(refuse(EINVAL, "invalid flags for WRITE_ZEROES"));
                }
                if opts.read_only {
                    return Err(refuse(EPERM, "export is read-only"));
                }
                if !in_range {
                    return Err(refuse(ENOSPC, "write zeroes beyond the end of the export"));
                }
                if len == 0 {
                    return Ok(None);
                }
                let op = Op::WriteZeroes {
                    offset,
                    len,
                    no_hole: req.flags & CMD_FLAG_NO_HOLE != 0,
                    fast: req.flags & CMD_FLAG_FAST_ZERO != 0,
                    fua,
                };
                Ok(Some((op, 0)))
            }
            proto::CMD_BLOCK_STATUS => {
                if !flags_ok(CMD_FLAG_FUA | CMD_FLAG_REQ_ONE) {
                    return Err(refuse(EINVAL, "invalid flags for BLOCK_STATUS"));
                }
                if !session.structured || !session.base_allocation {
                    return Err(refuse(EINVAL, "no metadata context negotiated"));
                }
                if len == 0 {
                    return Err(refuse(EINVAL, "zero-length block status"));
                }
                if !in_range {
                    return Err(refuse(EINVAL, "block status beyond the end of the export"));
                }
                let req_one = req.flags & CMD_FLAG_REQ_ONE != 0;
                let reply_bytes = if req_one {
                    8
                } else {
                    8 * MAX_DESCRIPTORS as u32
                };
                Ok(Some((
                    Op::BlockStatus {
                        offset,
                        len,
                        req_one,
                    },
                    reply_bytes,
                )))
            }
            _ => Err(refuse(EINVAL, "unknown command")),
        }
    }

    /// Serve a READ, or a WRITE without FUA, right here when the export can
    /// do it without waiting (data in the page cache): no thread hand-off at
    /// all. `None`: it would wait; run it on a blocking thread instead.
    fn try_inline(
        &self,
        op: &Op,
        cookie: u64,
        structured: bool,
    ) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let (command, bytes) = op_label(op);
        let started = std::time::Instant::now();
        let export = &self.inner.export;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match *op {
            Op::Write {
                offset,
                ref data,
                fua: false,
                hint,
            } => export
                .write_nowait(offset, data, hint)
                .map(|r| r.map(|()| OpOutput::Done)),
            Op::Read { offset, len, hint } => {
                let mut data = vec![0u8; len as usize];
                export
                    .read_nowait(offset, &mut data, hint)
                    .map(|r| r.map(|()| OpOutput::Data { offset, data }))
            }
            _ => None,
        }))
        // A panic here: let the blocking path run (and answer) it.
        .ok()??;
        Some(finish(cookie, structured, command, bytes, started, result))
    }

    fn spawn_op(
        &self,
        op: Op,
        cookie: u64,
        structured: bool,
        permits: Permits,
        tx: mpsc::UnboundedSender<Outgoing>,
    ) {
        let export = Arc::clone(&self.inner.export);
        let (command, bytes) = op_label(&op);
        let started = std::time::Instant::now();
        let span = tracing::Span::current();
        // One hand-off only: the blocking thread runs the op, encodes the
        // reply and queues it for the writer (no intermediate async task).
        tokio::task::spawn_blocking(move || {
            let _enter = span.enter();
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_op(&*export, op)));
            let (head, data) = match result {
                Ok(r) => finish(cookie, structured, command, bytes, started, r),
                Err(_) => {
                    warn!(cookie, "request panicked in the export");
                    crate::serving::metrics::record_nbd_request(
                        command,
                        bytes,
                        started.elapsed(),
                        false,
                    );
                    let msg = "internal server error";
                    (error_reply(cookie, structured, proto::EIO, msg), None)
                }
            };
            let _ = tx.send(Outgoing {
                head,
                data,
                _permits: Some(permits),
            });
        });
    }
}

/// The metrics label and payload bytes of an op.
fn op_label(op: &Op) -> (&'static str, u64) {
    match op {
        Op::Read { len, .. } => ("read", u64::from(*len)),
        Op::Write { data, .. } => ("write", data.len() as u64),
        Op::Flush => ("flush", 0),
        Op::Trim { .. } => ("trim", 0),
        Op::Cache { .. } => ("cache", 0),
        Op::WriteZeroes { .. } => ("write_zeroes", 0),
        Op::BlockStatus { .. } => ("block_status", 0),
    }
}

/// Record a finished op in the metrics and encode its reply.
fn finish(
    cookie: u64,
    structured: bool,
    command: &'static str,
    bytes: u64,
    started: std::time::Instant,
    result: Result<OpOutput, ExportError>,
) -> (Vec<u8>, Option<Vec<u8>>) {
    crate::serving::metrics::record_nbd_request(command, bytes, started.elapsed(), result.is_ok());
    match result {
        Ok(out) => success_reply(cookie, structured, out),
        Err(e) => {
            debug!(cookie, errno = e.errno(), "request failed: {e}");
            (
                error_reply(cookie, structured, e.errno(), &e.to_string()),
                None,
            )
        }
    }
}

/// What the handshake loop does after an option.
enum Step {
    Continue,
    Abort,
    Transmit,
    /// ACK sent for `NBD_OPT_STARTTLS`: run the TLS handshake next.
    StartTls,
    Close(String),
}

/// A connection's stream: as accepted, or upgraded to TLS by STARTTLS.
enum Conn<S> {
    Plain(S),
    Tls(Box<tokio_rustls::server::TlsStream<S>>),
}

impl<S> Conn<S> {
    fn is_tls(&self) -> bool {
        matches!(self, Conn::Tls(_))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Conn<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

fn reply_err(out: &mut Vec<u8>, option: u32, reply_type: u32, msg: &str) {
    proto::encode_option_reply(out, option, reply_type, msg.as_bytes());
}

/// Run one validated request on the export (on a blocking thread).
fn run_op(export: &dyn Export, op: Op) -> Result<OpOutput, ExportError> {
    match op {
        Op::Read { offset, len, hint } => {
            let mut data = vec![0u8; len as usize];
            export.read_hinted(offset, &mut data, hint)?;
            Ok(OpOutput::Data { offset, data })
        }
        Op::Write {
            offset,
            data,
            fua,
            hint,
        } => export
            .write_hinted(offset, &data, fua, hint)
            .map(|()| OpOutput::Done),
        Op::Flush => export.flush().map(|()| OpOutput::Done),
        Op::Trim { offset, len, fua } => export
            .trim(offset, u64::from(len), fua)
            .map(|()| OpOutput::Done),
        Op::Cache { offset, len } => export
            .cache(offset, u64::from(len))
            .map(|()| OpOutput::Done),
        Op::WriteZeroes {
            offset,
            len,
            no_hole,
            fast,
            fua,
        } => export
            .write_zeroes(offset, u64::from(len), no_hole, fast, fua)
            .map(|()| OpOutput::Done),
        Op::BlockStatus {
            offset,
            len,
            req_one,
        } => {
            let max = if req_one { 1 } else { MAX_DESCRIPTORS };
            let runs = export.block_status(offset, u64::from(len), max)?;
            Ok(OpOutput::Status(runs_to_descriptors(&runs, len, max)))
        }
    }
}

/// Turn export runs into at most `max` descriptors whose lengths sum to at
/// most `len`; adjacent runs with equal flags merge, empty runs are skipped,
/// and an empty answer becomes one descriptor of status 0 (always allowed).
fn runs_to_descriptors(runs: &[StatusRun], len: u32, max: usize) -> Vec<Descriptor> {
    let max = max.max(1);
    let mut out: Vec<Descriptor> = Vec::new();
    let mut remaining = len;
    for run in runs {
        if remaining == 0 {
            break;
        }
        // Bounded by `remaining`, so it fits in u32.
        let n = u32::try_from(run.len.min(u64::from(remaining))).unwrap_or(remaining);
        if n == 0 {
            continue;
        }
        let mut flags = 0;
        if run.hole {
            flags |= proto::STATE_HOLE;
        }
        if run.zero {
            flags |= proto::STATE_ZERO;
        }
        let full = out.len() >= max;
        match out.last_mut() {
            Some(last) if last.flags == flags => last.len += n,
            _ if full => break,
            _ => out.push(Descriptor { len: n, flags }),
        }
        remaining -= n;
    }
    if out.is_empty() {
        out.push(Descriptor { len, flags: 0 });
    }
    out
}

fn ok_reply(cookie: u64, structured: bool) -> Vec<u8> {
    if structured {
        let mut out = Vec::with_capacity(proto::STRUCTURED_HEADER_LEN);
        proto::encode_none_chunk(&mut out, cookie);
        out
    } else {
        proto::encode_simple_reply(0, cookie).to_vec()
    }
}

fn error_reply(cookie: u64, structured: bool, errno: u32, msg: &str) -> Vec<u8> {
    // A zero errno would read as success: never send one for a failure.
    let errno = if errno == 0 { proto::EIO } else { errno };
    if structured {
        let mut out = Vec::new();
        proto::encode_error_chunk(&mut out, cookie, errno, msg);
        out
    } else {
        proto::encode_simple_reply(errno, cookie).to_vec()
    }
}

fn success_reply(cookie: u64, structured: bool, out: OpOutput) -> (Vec<u8>, Option<Vec<u8>>) {
    match out {
        OpOutput::Done => (ok_reply(cookie, structured), None),
        OpOutput::Data { offset, data } => {
            if structured {
                let mut head = Vec::with_capacity(proto::STRUCTURED_HEADER_LEN + 8);
                if proto::encode_offset_data_header(&mut head, cookie, offset, data.len(), true)
                    .is_none()
                {
                    // Unreachable with max_request below 4 GiB; fail cleanly anyway.
                    let msg = "read too large for one chunk";
                    return (error_reply(cookie, true, proto::EOVERFLOW, msg), None);
                }
                (head, Some(data))
            } else {
                (proto::encode_simple_reply(0, cookie).to_vec(), Some(data))
            }
        }
        OpOutput::Status(descs) => {
            let mut head = Vec::new();
            match proto::encode_block_status_chunk(
                &mut head,
                cookie,
                BASE_ALLOCATION_ID,
                &descs,
                true,
            ) {
                Some(()) => (head, None),
                None => (
                    error_reply(cookie, structured, proto::EIO, "bad block status"),
                    None,
                ),
            }
        }
    }
}

/// Write replies in arrival order until every sender is gone.
async fn write_replies<W>(wr: W, mut rx: mpsc::UnboundedReceiver<Outgoing>) -> io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let mut w = BufWriter::with_capacity(256 * 1024, wr);
    while let Some(msg) = rx.recv().await {
        w.write_all(&msg.head).await?;
        if let Some(data) = &msg.data {
            w.write_all(data).await?;
        }
        drop(msg);
        if rx.is_empty() {
            w.flush().await?;
        }
    }
    w.flush().await?;
    w.shutdown().await
}

/// Read a request header. `Ok(false)`: clean end of stream before its first byte.
async fn read_header<R>(rd: &mut R, hdr: &mut [u8; proto::REQUEST_HEADER_LEN]) -> io::Result<bool>
where
    R: AsyncRead + Unpin,
{
    let mut filled = 0;
    while filled < hdr.len() {
        let n = rd.read(&mut hdr[filled..]).await?;
        if n == 0 {
            if filled == 0 {
                return Ok(false);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "end of stream inside a request header",
            ));
        }
        filled += n;
    }
    Ok(true)
}

/// Read and drop `n` bytes through a small scratch buffer.
async fn discard<R>(rd: &mut R, mut n: u64) -> io::Result<()>
where
    R: AsyncRead + Unpin,
{
    if n == 0 {
        return Ok(());
    }
    let mut scratch = vec![0u8; DISCARD_CHUNK.min(usize::try_from(n).unwrap_or(DISCARD_CHUNK))];
    while n > 0 {
        let want = scratch
            .len()
            .min(usize::try_from(n).unwrap_or(scratch.len()));
        rd.read_exact(&mut scratch[..want]).await?;
        n -= want as u64;
    }
    Ok(())
}

async fn send<S>(s: &mut S, buf: &[u8]) -> io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    s.write_all(buf).await?;
    s.flush().await
}

/// Take one request slot and `cost` bytes of budget, preferring permits that
/// are available at once; `None` if shutdown comes while waiting.
async fn acquire(
    count: &Arc<Semaphore>,
    bytes: &Arc<Semaphore>,
    cost: u32,
    stop: &mut watch::Receiver<bool>,
) -> Option<Permits> {
    let both = async {
        let count = Arc::clone(count).acquire_owned().await.ok()?;
        let bytes = Arc::clone(bytes).acquire_many_owned(cost).await.ok()?;
        Some(Permits {
            _count: count,
            _bytes: bytes,
        })
    };
    tokio::select! {
        biased;
        p = both => p,
        () = wait_stop(stop) => None,
    }
}

/// Byte budget of one connection: the configured one, raised so that the
/// costliest single request always fits (else it would wait forever).
fn byte_budget(opts: &ServerOptions) -> usize {
    let largest = (opts.max_request as usize).max(8 * MAX_DESCRIPTORS);
    opts.max_in_flight_bytes
        .max(largest + REQUEST_OVERHEAD as usize)
        .min(Semaphore::MAX_PERMITS)
}

/// Resolve once `stop` turns true; never if its sender is gone.
async fn wait_stop(stop: &mut watch::Receiver<bool>) {
    loop {
        if *stop.borrow_and_update() {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;

    #[test]
    fn contiguous_requests_grow_a_run_and_interleaved_streams_are_kept_apart() {
        let mut s = Streams::default();
        assert_eq!(s.observe(0, 4096).seq_run, 4096);
        assert_eq!(s.observe(4096, 4096).seq_run, 8192);
        // Another stream interleaved with the first.
        assert_eq!(s.observe(1 << 30, 4096).seq_run, 4096);
        assert_eq!(s.observe(8192, 4096).seq_run, 12288);
        assert_eq!(s.observe((1 << 30) + 4096, 4096).seq_run, 8192);
        // A random jump starts over.
        assert_eq!(s.observe(77 * 4096, 4096).seq_run, 4096);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(len: u64, hole: bool) -> StatusRun {
        StatusRun {
            len,
            hole,
            zero: hole,
        }
    }

    #[test]
    fn descriptors_clip_and_merge() {
        let runs = [run(100, true), run(50, true), run(1000, false)];
        let d = runs_to_descriptors(&runs, 200, 10);
        assert_eq!(
            d,
            vec![
                Descriptor {
                    len: 150,
                    flags: proto::STATE_HOLE | proto::STATE_ZERO
                },
                Descriptor { len: 50, flags: 0 },
            ]
        );
        let d = runs_to_descriptors(&runs, 200, 1);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].len, 150);
        // A run longer than u32 is clipped to the request.
        let d = runs_to_descriptors(&[run(1 << 40, false)], u32::MAX, 4);
        assert_eq!(
            d,
            vec![Descriptor {
                len: u32::MAX,
                flags: 0
            }]
        );
    }

    #[test]
    fn descriptors_fallback() {
        assert_eq!(
            runs_to_descriptors(&[], 512, 4),
            vec![Descriptor { len: 512, flags: 0 }]
        );
        assert_eq!(
            runs_to_descriptors(&[run(0, true)], 512, 4),
            vec![Descriptor { len: 512, flags: 0 }]
        );
    }

    #[test]
    fn budget_fits_the_costliest_request() {
        let tiny = ServerOptions {
            max_request: 4096,
            max_in_flight_bytes: 1,
            ..ServerOptions::default()
        };
        let need = (8 * MAX_DESCRIPTORS) + REQUEST_OVERHEAD as usize;
        assert!(byte_budget(&tiny) >= need);
        let huge = ServerOptions {
            max_request: u32::MAX,
            ..ServerOptions::default()
        };
        assert!(byte_budget(&huge) >= u32::MAX as usize);
        assert_eq!(byte_budget(&ServerOptions::default()), 128 << 20);
    }

    #[test]
    fn error_reply_never_zero() {
        let r = error_reply(1, false, 0, "x");
        assert_eq!(&r[4..8], &proto::EIO.to_be_bytes());
    }
}
