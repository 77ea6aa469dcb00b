//! The transmission phase on blocking threads, for connections on plain TCP
//! or Unix sockets (TLS and in-memory streams keep the async loop of
//! `transmission`).
//!
//! Every thread of a connection takes the next request off the socket under
//! the reader lock (header, checks, payload and stream hint, so request
//! order is kept where it matters), runs it on the export with plain
//! blocking calls, and writes its reply under the writer lock. A request
//! never changes threads on its way, so it costs no hand-off and no wake-up
//! of another task; replies leave out of order but never interleave. The
//! last thread to finish a reply while no other waits to write one flushes
//! the buffered replies: under load, one send carries many replies.
//!
//! Threads start one at a time, whenever a request leaves no thread waiting
//! to read the next one, up to [`ServerOptions::threads`] (capped by
//! [`ServerOptions::max_in_flight`]). Payload memory is bounded by the same
//! byte budget as the async loop. Shutdown shuts the socket's read side:
//! a thread blocked reading sees end of stream, requests in flight finish
//! and are answered, then the connection closes.

use std::any::Any;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;
use tracing::{debug, warn};

use super::export::{Export, ExportConn};
use super::handshake::Session;
use super::proto;
use super::reply::{error_reply, ok_reply, Encoded};
use super::request::{discard_blocking, read_header_blocking, read_payload_blocking, validate, Op};
use super::server::{ConnectionError, RequestObserver, ServerOptions};
use super::transmission::{byte_budget, finish, run_op, REQUEST_OVERHEAD};
use crate::listen::Stop;

/// Buffered reply bytes before a write reaches the socket regardless.
const WRITE_BUFFER: usize = 256 * 1024;
/// Read buffer: many small requests come in with one receive.
const READ_BUFFER: usize = 128 * 1024;

/// A connected plain socket in blocking mode.
pub(super) enum Sock {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Sock {
    fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(bufs),
            Sock::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The stream as a blocking socket when it is a tokio TCP or Unix stream;
/// else the stream back, for the async loop.
pub(super) fn into_blocking<S: 'static>(stream: S) -> Result<io::Result<Sock>, S> {
    let any: Box<dyn Any> = Box::new(stream);
    let any = match any.downcast::<tokio::net::TcpStream>() {
        Ok(tcp) => {
            return Ok(tcp.into_std().and_then(|s| {
                s.set_nonblocking(false)?;
                Ok(Sock::Tcp(s))
            }))
        }
        Err(any) => any,
    };
    let any = match any.downcast::<tokio::net::UnixStream>() {
        Ok(unix) => {
            return Ok(unix.into_std().and_then(|s| {
                s.set_nonblocking(false)?;
                Ok(Sock::Unix(s))
            }))
        }
        Err(any) => any,
    };
    match any.downcast::<S>() {
        Ok(s) => Err(*s),
        // Unreachable: the box was made from an S.
        Err(_) => unreachable!("a boxed stream is of its own type"),
    }
}

/// What a thread took off the socket.
enum Job {
    /// Answer at once with this encoded reply, holding `cost` budget bytes.
    Reply(Vec<u8>, usize),
    /// Run this op, holding `cost` budget bytes.
    Run { op: Op, cookie: u64, cost: usize },
}

/// The read side: one thread at a time.
struct Reader {
    rd: BufReader<Sock>,
    conn: Box<dyn ExportConn>,
    /// No more requests: end of stream, DISC, shutdown or a broken stream.
    ended: bool,
}

/// How many threads serve the connection and how many are free.
struct Pool {
    threads: usize,
    /// Threads not running a request (waiting to read, or reading).
    idle: usize,
}

/// Bytes of request data a connection may hold in memory.
struct Budget {
    free: Mutex<usize>,
    freed: Condvar,
}

/// What every thread of one connection shares.
struct Shared {
    export: Arc<dyn Export>,
    observer: Arc<dyn RequestObserver>,
    session: Session,
    max_request: u32,
    max_threads: usize,
    reader: Mutex<Reader>,
    writer: Mutex<BufWriter<Sock>>,
    /// Threads holding a reply that they have not written yet.
    replies_waiting: AtomicUsize,
    budget: Budget,
    pool: Mutex<Pool>,
    stopping: AtomicBool,
    /// The first error that ended the connection.
    failure: Mutex<Option<ConnectionError>>,
    /// A handle to shut the socket down with.
    ctl: Sock,
    live: AtomicUsize,
    all_done: Notify,
    span: tracing::Span,
}

/// A lock that a panicking thread left behind is still usable: every guarded
/// state is consistent between statements.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serve the transmission phase of `sock` on blocking threads until the
/// client leaves or `stop` turns true.
pub(super) async fn transmission(
    export: &Arc<dyn Export>,
    opts: &ServerOptions,
    sock: Sock,
    session: Session,
    mut stop: Stop,
) -> Result<(), ConnectionError> {
    let rd = sock.try_clone()?;
    let ctl = sock.try_clone()?;
    let shared = Arc::new(Shared {
        export: Arc::clone(export),
        observer: Arc::clone(&opts.observer),
        session,
        max_request: opts.max_request,
        max_threads: opts.threads.min(opts.max_in_flight).max(1),
        reader: Mutex::new(Reader {
            rd: BufReader::with_capacity(READ_BUFFER, rd),
            conn: export.connect(),
            ended: false,
        }),
        writer: Mutex::new(BufWriter::with_capacity(WRITE_BUFFER, sock)),
        replies_waiting: AtomicUsize::new(0),
        budget: Budget {
            free: Mutex::new(byte_budget(opts)),
            freed: Condvar::new(),
        },
        pool: Mutex::new(Pool {
            threads: 1,
            idle: 1,
        }),
        stopping: AtomicBool::new(false),
        failure: Mutex::new(None),
        ctl,
        live: AtomicUsize::new(1),
        all_done: Notify::new(),
        span: tracing::Span::current(),
    });
    if let Err(e) = Shared::spawn(&shared) {
        return Err(ConnectionError::Io(e));
    }
    let mut stopped = false;
    loop {
        if stopped {
            shared.all_done.notified().await;
        } else {
            tokio::select! {
                () = shared.all_done.notified() => {}
                () = stop.wait() => {
                    stopped = true;
                    debug!("shutdown: no more requests read");
                    shared.stop();
                }
            }
        }
        if shared.live.load(Ordering::Acquire) == 0 {
            break;
        }
    }
    let failure = lock(&shared.failure).take();
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl Shared {
    /// Start one more serving thread (already counted in `pool` and `live`).
    fn spawn(this: &Arc<Shared>) -> io::Result<()> {
        let me = Arc::clone(this);
        let started = std::thread::Builder::new()
            .name("tierd-nbd".into())
            .spawn(move || {
                let span = me.span.clone();
                let _enter = span.enter();
                me.serve();
                if me.live.fetch_sub(1, Ordering::AcqRel) == 1 {
                    me.all_done.notify_one();
                }
            });
        match started {
            Ok(_) => Ok(()),
            Err(e) => {
                let mut pool = lock(&this.pool);
                pool.threads -= 1;
                pool.idle -= 1;
                drop(pool);
                this.live.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    /// One thread's loop: take a request, run it, answer it.
    fn serve(self: &Arc<Self>) {
        loop {
            let job = {
                let mut r = lock(&self.reader);
                if r.ended {
                    return;
                }
                match self.next(&mut r) {
                    Ok(Some(job)) => job,
                    Ok(None) => {
                        r.ended = true;
                        return;
                    }
                    Err(e) => {
                        r.ended = true;
                        drop(r);
                        // Replies in flight still go out, as after DISC.
                        self.fail(e, Shutdown::Read);
                        return;
                    }
                }
            };
            match job {
                Job::Reply(head, cost) => {
                    self.reply(&head, None);
                    self.release(cost);
                }
                Job::Run { op, cookie, cost } => {
                    self.busy();
                    let (head, data) = self.run(op, cookie);
                    self.reply(&head, data.as_deref());
                    self.release(cost);
                    lock(&self.pool).idle += 1;
                }
            }
        }
    }

    /// Read the next request; `None` when no more will be read.
    fn next(&self, r: &mut Reader) -> Result<Option<Job>, ConnectionError> {
        let mut hdr = [0u8; proto::REQUEST_HEADER_LEN];
        let got = match read_header_blocking(&mut r.rd, &mut hdr) {
            Ok(got) => got,
            // The read side shut by `stop` may also fail a read.
            Err(_) if self.stopping.load(Ordering::Acquire) => false,
            Err(e) => return Err(e.into()),
        };
        if !got {
            if self.stopping.load(Ordering::Acquire) {
                debug!("shutdown: no more requests read");
            } else {
                debug!("client closed the connection");
            }
            return Ok(None);
        }
        let req = proto::parse_request(&hdr).map_err(|e| {
            ConnectionError::Protocol(format!("request header: {e}; cannot resync"))
        })?;
        if req.typ == proto::CMD_DISC {
            debug!("client sent DISC");
            return Ok(None);
        }
        let structured = self.session.structured;
        let (op, data_bytes) = match validate(&req, &self.session, self.max_request) {
            Ok(Some(v)) => v,
            Ok(None) => {
                return Ok(Some(Job::Reply(ok_reply(req.cookie, structured), 0)));
            }
            Err(refusal) => {
                if req.typ == proto::CMD_WRITE {
                    discard_blocking(&mut r.rd, u64::from(req.length))?;
                }
                debug!(
                    cookie = req.cookie,
                    cmd = req.typ,
                    errno = refusal.errno,
                    "request refused: {}",
                    refusal.msg
                );
                let head = error_reply(req.cookie, structured, refusal.errno, refusal.msg);
                return Ok(Some(Job::Reply(head, 0)));
            }
        };
        let cost = REQUEST_OVERHEAD.saturating_add(data_bytes) as usize;
        if !self.acquire(cost) {
            // Shutting down while waiting for room: answer, don't run.
            if matches!(op, Op::Write { .. }) {
                discard_blocking(&mut r.rd, u64::from(req.length))?;
            }
            r.ended = true;
            let msg = "server is shutting down";
            let head = error_reply(req.cookie, structured, proto::ESHUTDOWN, msg);
            return Ok(Some(Job::Reply(head, 0)));
        }
        let op = match op {
            Op::Write { offset, fua, .. } => {
                // Allocated only now: the length passed validation.
                let data = match read_payload_blocking(&mut r.rd, req.length) {
                    Ok(d) => d,
                    Err(e) => {
                        self.release(cost);
                        return Err(e.into());
                    }
                };
                let hint = r.conn.hint(offset, u64::from(req.length));
                Op::Write {
                    offset,
                    data,
                    fua,
                    hint,
                }
            }
            Op::Read { offset, len, .. } => {
                let hint = r.conn.hint(offset, u64::from(len));
                Op::Read { offset, len, hint }
            }
            other => other,
        };
        Ok(Some(Job::Run {
            op,
            cookie: req.cookie,
            cost,
        }))
    }

    /// This thread runs a request now: start another to read the next one
    /// when none would be left waiting.
    fn busy(self: &Arc<Self>) {
        let mut pool = lock(&self.pool);
        pool.idle -= 1;
        if pool.idle > 0 || pool.threads >= self.max_threads || self.ended() {
            return;
        }
        pool.threads += 1;
        pool.idle += 1;
        self.live.fetch_add(1, Ordering::AcqRel);
        drop(pool);
        if let Err(e) = Shared::spawn(self) {
            warn!("cannot start another NBD thread: {e}");
        }
    }

    fn ended(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Run one op on the export and encode its reply.
    fn run(&self, op: Op, cookie: u64) -> Encoded {
        let (command, bytes) = op.label();
        let started = Instant::now();
        let structured = self.session.structured;
        let export = &*self.export;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_op(export, op))) {
            Ok(r) => finish(
                &*self.observer,
                cookie,
                structured,
                command,
                bytes,
                started,
                r,
            ),
            Err(_) => {
                warn!(cookie, "request panicked in the export");
                self.observer
                    .request_done(command, bytes, started.elapsed(), false);
                let msg = "internal server error";
                (error_reply(cookie, structured, proto::EIO, msg), None)
            }
        }
    }

    /// Write one reply; the last writer in a row flushes them all.
    fn reply(&self, head: &[u8], data: Option<&[u8]>) {
        self.replies_waiting.fetch_add(1, Ordering::AcqRel);
        let mut w = lock(&self.writer);
        let mut result = w.write_all(head);
        if let (Ok(()), Some(data)) = (&result, data) {
            result = w.write_all(data);
        }
        let others = self.replies_waiting.fetch_sub(1, Ordering::AcqRel) - 1;
        if result.is_ok() && others == 0 {
            result = w.flush();
        }
        drop(w);
        if let Err(e) = result {
            self.fail(ConnectionError::Io(e), Shutdown::Both);
        }
    }

    /// Take `cost` bytes of budget; `false` if shutdown comes first.
    fn acquire(&self, cost: usize) -> bool {
        let mut free = lock(&self.budget.free);
        loop {
            if self.stopping.load(Ordering::Acquire) {
                return false;
            }
            if *free >= cost {
                *free -= cost;
                return true;
            }
            free = self
                .budget
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn release(&self, cost: usize) {
        if cost == 0 {
            return;
        }
        *lock(&self.budget.free) += cost;
        self.budget.freed.notify_all();
    }

    /// Stop reading requests: wake a thread blocked on the socket or on the
    /// budget. Requests in flight still finish and are answered.
    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        {
            let _free = lock(&self.budget.free);
            self.budget.freed.notify_all();
        }
        // Fails only if the socket is already gone; nothing more to stop.
        let _ = self.ctl.shutdown(Shutdown::Read);
    }

    /// The connection is broken: remember the first error, stop reading,
    /// and shut the socket (`how`) so that no thread stays blocked on it.
    fn fail(&self, e: ConnectionError, how: Shutdown) {
        {
            let mut first = lock(&self.failure);
            if first.is_none() {
                *first = Some(e);
            }
        }
        self.stopping.store(true, Ordering::Release);
        {
            let _free = lock(&self.budget.free);
            self.budget.freed.notify_all();
        }
        let _ = self.ctl.shutdown(how);
    }
}
