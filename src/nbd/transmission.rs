//! The transmission phase of one connection: the reader loop that takes
//! requests in order and dispatches them, the permits that bound what is in
//! flight, running ops on the export (inline when it need not wait, else on
//! a blocking thread), and the one writer task that puts replies on the
//! socket.
//!
//! One reader (the connection task itself) reads request headers and write
//! payloads in order and validates them; each valid request then runs on its
//! own blocking task and hands its encoded reply to the writer through a
//! channel. Replies therefore complete out of order but never interleave on
//! the socket. Two semaphores bound what a connection may have in flight: a
//! count of requests and a byte budget for read and write buffers; a permit
//! lives until its reply has been written.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn, Instrument};

use super::export::{Export, ExportConn, ExportError, IoCtx};
use super::handshake::Session;
use super::proto;
use super::reply::{
    error_reply, ok_reply, runs_to_descriptors, success_reply, Encoded, OpOutput, MAX_DESCRIPTORS,
};
use super::request::{discard, read_header, validate, Op};
use super::server::{ConnectionError, RequestObserver, ServerOptions};
use crate::listen::Stop;

/// Bytes accounted to every in-flight request besides its data buffer.
pub(super) const REQUEST_OVERHEAD: u32 = 256;

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

/// What the reader does with a request once validated.
enum Next {
    /// Answer at once with this encoded reply.
    Reply(Vec<u8>),
    /// Run this operation holding this many data bytes.
    Run(Op, u32),
}

/// What every op of one connection shares.
struct Dispatch {
    export: Arc<dyn Export>,
    observer: Arc<dyn RequestObserver>,
    structured: bool,
}

/// Serve the transmission phase of `stream` until the client leaves or
/// `stop` turns true (then in-flight requests finish and are answered).
pub(super) async fn transmission<S>(
    export: &Arc<dyn Export>,
    opts: &ServerOptions,
    stream: S,
    session: Session,
    mut stop: Stop,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (rd, wr) = tokio::io::split(stream);
    let (tx, rx) = mpsc::unbounded_channel::<Outgoing>();
    let writer = tokio::spawn(write_replies(wr, rx).in_current_span());
    let reader = BufReader::with_capacity(128 * 1024, rd);
    let dispatch = Dispatch {
        export: Arc::clone(export),
        observer: Arc::clone(&opts.observer),
        structured: session.structured,
    };
    let read_result = read_requests(&dispatch, opts, reader, tx, session, &mut stop).await;
    // The reader has dropped its sender; the writer ends once every
    // in-flight request has sent its reply.
    let write_result = match writer.await {
        Ok(r) => r.map_err(ConnectionError::from),
        Err(e) => Err(ConnectionError::Io(io::Error::other(e))),
    };
    read_result.and(write_result)
}

async fn read_requests<R>(
    dispatch: &Dispatch,
    opts: &ServerOptions,
    mut rd: R,
    tx: mpsc::UnboundedSender<Outgoing>,
    session: Session,
    stop: &mut Stop,
) -> Result<(), ConnectionError>
where
    R: AsyncRead + Unpin,
{
    let count = Arc::new(Semaphore::new(opts.max_in_flight.max(1)));
    let bytes = Arc::new(Semaphore::new(byte_budget(opts)));
    let mut conn: Box<dyn ExportConn> = dispatch.export.connect();
    loop {
        let mut hdr = [0u8; proto::REQUEST_HEADER_LEN];
        let got = tokio::select! {
            biased;
            () = stop.wait() => {
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
        let next = match validate(&req, &session, opts.max_request) {
            Ok(Some((op, data_bytes))) => Next::Run(op, data_bytes),
            // Zero-length request (no payload either): nothing to do.
            Ok(None) => Next::Reply(ok_reply(req.cookie, session.structured)),
            Err(refusal) => {
                if req.typ == proto::CMD_WRITE {
                    discard(&mut rd, u64::from(req.length)).await?;
                }
                let head = refusal.reply(&req, session.structured);
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
                conn.request(&op.info(req.length));
                let op = match op {
                    Op::Write { offset, fua, .. } => {
                        // Allocated only now: the length passed validation.
                        let mut data = vec![0u8; req.length as usize];
                        rd.read_exact(&mut data).await?;
                        let hint = conn.hint(offset, u64::from(req.length));
                        Op::Write {
                            offset,
                            data,
                            fua,
                            hint,
                        }
                    }
                    Op::Read { offset, len, .. } => {
                        let hint = conn.hint(offset, u64::from(len));
                        Op::Read { offset, len, hint }
                    }
                    other => other,
                };
                match dispatch.try_inline(&op, req.cookie) {
                    Some((head, data)) => {
                        let _ = tx.send(Outgoing {
                            head,
                            data,
                            _permits: Some(permits),
                        });
                    }
                    None => dispatch.spawn_op(op, req.cookie, permits, tx.clone()),
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

impl Dispatch {
    /// Serve a READ, or a WRITE without FUA, right here when the export can
    /// do it without waiting (data in the page cache): no thread hand-off at
    /// all. `None`: it would wait; run it on a blocking thread instead.
    fn try_inline(&self, op: &Op, cookie: u64) -> Option<Encoded> {
        let (command, bytes) = op.label();
        let started = Instant::now();
        let export = &self.export;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match *op {
            Op::Write {
                offset,
                ref data,
                fua: false,
                hint,
            } => Some(
                export
                    .write(offset, data, IoCtx::nowait(hint))
                    .map(|()| OpOutput::Done),
            ),
            Op::Read { offset, len, hint } => {
                let mut data = vec![0u8; len as usize];
                Some(
                    export
                        .read(offset, &mut data, IoCtx::nowait(hint))
                        .map(|()| OpOutput::Data { offset, data }),
                )
            }
            _ => None,
        }))
        // A panic here: let the blocking path run (and answer) it.
        .ok()??;
        if matches!(result, Err(ExportError::WouldBlock)) {
            return None;
        }
        Some(finish(
            &*self.observer,
            cookie,
            self.structured,
            command,
            bytes,
            started,
            result,
        ))
    }

    fn spawn_op(&self, op: Op, cookie: u64, permits: Permits, tx: mpsc::UnboundedSender<Outgoing>) {
        let export = Arc::clone(&self.export);
        let observer = Arc::clone(&self.observer);
        let structured = self.structured;
        let (command, bytes) = op.label();
        let started = Instant::now();
        let span = tracing::Span::current();
        // One hand-off only: the blocking thread runs the op, encodes the
        // reply and queues it for the writer (no intermediate async task).
        tokio::task::spawn_blocking(move || {
            let _enter = span.enter();
            let result =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_op(&*export, op)));
            let (head, data) = match result {
                Ok(r) => finish(&*observer, cookie, structured, command, bytes, started, r),
                Err(_) => {
                    warn!(cookie, "request panicked in the export");
                    observer.request_done(command, bytes, started.elapsed(), false);
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

/// Report a finished op to the observer and encode its reply.
pub(super) fn finish(
    observer: &dyn RequestObserver,
    cookie: u64,
    structured: bool,
    command: &'static str,
    bytes: u64,
    started: Instant,
    result: Result<OpOutput, ExportError>,
) -> Encoded {
    observer.request_done(command, bytes, started.elapsed(), result.is_ok());
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

/// Run one validated request on the export (on a blocking thread).
pub(super) fn run_op(export: &dyn Export, op: Op) -> Result<OpOutput, ExportError> {
    match op {
        Op::Read { offset, len, hint } => {
            let mut data = vec![0u8; len as usize];
            export.read(offset, &mut data, IoCtx::blocking().with_hint(hint))?;
            Ok(OpOutput::Data { offset, data })
        }
        Op::Write {
            offset,
            data,
            fua,
            hint,
        } => export
            .write(
                offset,
                &data,
                IoCtx::blocking().with_hint(hint).with_fua(fua),
            )
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

/// Take one request slot and `cost` bytes of budget, preferring permits that
/// are available at once; `None` if shutdown comes while waiting.
async fn acquire(
    count: &Arc<Semaphore>,
    bytes: &Arc<Semaphore>,
    cost: u32,
    stop: &mut Stop,
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
        () = stop.wait() => None,
    }
}

/// Byte budget of one connection: the configured one, raised so that the
/// costliest single request always fits (else it would wait forever).
pub(super) fn byte_budget(opts: &ServerOptions) -> usize {
    let largest = (opts.max_request as usize).max(8 * MAX_DESCRIPTORS);
    opts.max_in_flight_bytes
        .max(largest + REQUEST_OVERHEAD as usize)
        .min(Semaphore::MAX_PERMITS)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
