//! The fixed-newstyle handshake: greeting, option haggling (LIST, INFO/GO,
//! EXPORT_NAME, STRUCTURED_REPLY, meta contexts) and the `NBD_OPT_STARTTLS`
//! upgrade point, ending in the [`Session`] the transmission phase runs with.
//!
//! The transmission flags sent in `NBD_INFO_EXPORT` and in the EXPORT_NAME
//! reply are derived from the export's capabilities ([`Caps`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tracing::{debug, warn};

use super::export::Export;
use super::options::{ConnectionError, ServerOptions};
use super::proto::{self, OptionHeader};
use super::session::{Caps, Session, BASE_ALLOCATION_ID};

/// Options longer than [`proto::MAX_OPTION_LEN`] but at most this long are
/// read, discarded and refused with `NBD_REP_ERR_TOO_BIG`; longer ones end
/// the connection.
const OPTION_DISCARD_LIMIT: u32 = 1024 * 1024;
/// Scratch buffer size used to discard a refused option's payload.
const DISCARD_CHUNK: usize = 64 * 1024;
/// Preferred block size advertised in `NBD_INFO_BLOCK_SIZE`.
const PREFERRED_BLOCK: u32 = 4096;

/// Handshake state carried between options.
#[derive(Debug, Default)]
struct Haggle {
    structured: bool,
    base_allocation: bool,
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
pub(super) enum Conn<S> {
    Plain(S),
    Tls(Box<tokio_rustls::server::TlsStream<S>>),
}

impl<S> Conn<S> {
    pub(super) fn is_tls(&self) -> bool {
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

async fn send<S>(s: &mut S, buf: &[u8]) -> io::Result<()>
where
    S: AsyncWrite + Unpin,
{
    s.write_all(buf).await?;
    s.flush().await
}

/// Read and drop `n` bytes (a refused option's payload) through a small
/// scratch buffer.
async fn discard<R>(rd: &mut R, mut n: u64) -> std::io::Result<()>
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

fn reply_err(out: &mut Vec<u8>, option: u32, reply_type: u32, msg: &str) {
    proto::encode_option_reply(out, option, reply_type, msg.as_bytes());
}

/// Run the handshake on `stream`, upgrading to TLS on `NBD_OPT_STARTTLS`;
/// returns the session and the stream (plain or TLS) for the transmission
/// phase. `Ok(None)`: the client aborted.
pub(super) async fn handshake<S>(
    export: &dyn Export,
    opts: &ServerOptions,
    stream: S,
) -> Result<Option<(Session, Conn<S>)>, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let nego = Negotiator {
        export,
        opts,
        caps: Caps::of(export, opts.read_only),
    };
    nego.run(stream).await
}

/// One connection's handshake against one export.
struct Negotiator<'a> {
    export: &'a dyn Export,
    opts: &'a ServerOptions,
    caps: Caps,
}

impl Negotiator<'_> {
    fn export_matches(&self, name: &str) -> bool {
        name.is_empty() || name == self.opts.export_name
    }

    async fn run<S>(&self, stream: S) -> Result<Option<(Session, Conn<S>)>, ConnectionError>
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
            let step = match &self.opts.tls {
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
                    let (Some(tls), Conn::Plain(raw)) = (&self.opts.tls, conn) else {
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
                        let flags = self.caps.flags(st.structured);
                        out.extend_from_slice(&proto::encode_export_name_reply(
                            self.export.size(),
                            flags,
                            no_zeroes,
                        ));
                    }
                    send(&mut conn, &out).await?;
                    let session = Session {
                        structured: st.structured,
                        base_allocation: st.base_allocation,
                        size: self.export.size(),
                        caps: self.caps,
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
                let opts = self.opts;
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
        let opts = self.opts;
        let flags = self.caps.flags(st.structured);
        let export = proto::encode_info_export(self.export.size(), flags);
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
        // Without block status there is no context to offer.
        let matched = self.caps.block_status
            && if set {
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
}
