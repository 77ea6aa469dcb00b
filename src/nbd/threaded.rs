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
//! the buffered replies: under load, one send carries many replies. Each
//! thread keeps one data buffer: a WRITE payload is received into it and a
//! READ is read into it and sent from it, with no allocation, zero-filling
//! or extra copy per request.
//!
//! A short READ (up to [`COPY_LIMIT`]; longer ones gain from being read and
//! sent by several threads at once) is first tried without waiting, by the thread that read it and
//! still holding the reader: a page-cache hit is answered without waking a
//! second thread (at queue depth 1: three system calls, receive, read and
//! send), and while more requests are already buffered its reply waits to
//! leave with theirs. Anything that would wait goes the usual way, and the
//! queued replies go out before another thread takes the reader.
//!
//! A client that keeps one request in flight ([`SOLO_CREDIT`]: about as many
//! requests arrived while none other was served, and none while one was
//! served solo)
//! has a READ or WRITE that must wait for the device served the same way,
//! by the thread that read it, holding the reader: handing the socket to
//! a second thread at once would only park that thread in a receive, and
//! wake it through the scheduler, for nothing (four connections at queue
//! depth 1 on a modelled SSD: 16.7k IOPS, served so 28k). When the next
//! request is already buffered or readable it goes the usual way; a reply
//! sent after the client sent another takes the credit away.
//!
//! Threads start one at a time, whenever a request leaves no thread waiting
//! to read the next one, up to [`ServerOptions::threads`] (capped by
//! [`ServerOptions::max_in_flight`]). While requests are served without
//! waiting for a device (data in the page cache, so the thread runs the
//! whole time) the pool stops at two threads per CPU: more threads running
//! at once only queue on the same locks (measured in docs/performance.md).
//! Once the threads spend most of a request off the CPU (its thread CPU
//! time against its wall time: waiting for a device, as with O_DIRECT, a
//! modelled drive or a page-cache miss) it grows to the full count, so that
//! requests keep the device's queue full and requests for the fast tier do
//! not queue behind ones waiting for the slow tier; when they stop waiting,
//! threads beyond the cap end after their request. Payload memory is
//! bounded by the same
//! byte budget as the async loop. Shutdown shuts the socket's read side:
//! a thread blocked reading sees end of stream, requests in flight finish
//! and are answered, then the connection closes.

use std::io::{self, BufReader};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tracing::{debug, warn};

use super::export::{Export, ExportConn, ExportError, IoCtx};
use super::handshake::Session;
use super::proto;
use super::reply::{error_reply, ok_reply, read_reply_head, success_reply};
use super::request::{discard_blocking, read_header_blocking, validate, Op};
use super::server::{ConnectionError, RequestObserver, ServerOptions};
use super::socket::{
    receive, room, Capped, Poll, Replies, Sock, COPY_LIMIT, READ_BUFFER, WRITE_BUFFER,
};
use super::splice::{Pipe, Spliced};
use super::transmission::{byte_budget, run_op, REQUEST_OVERHEAD};
use crate::listen::Stop;
use crate::units::IoHint;

/// A thread's data buffer grown past this is given back after its request.
const KEEP_BUFFER: usize = 4 * 1024 * 1024;
/// Share of their time that requests spend off the CPU (in 1/65536, moving
/// average over about 16 requests) from which the pool may grow past two
/// threads per CPU.
const WAITING_SHARE: u32 = 65536 / 2;

/// What a thread took off the socket. `cost`: the budget bytes it holds.
enum Job {
    /// Answer at once with this encoded reply.
    Reply(Vec<u8>),
    /// Read `len` bytes into the thread's buffer and send them.
    Read {
        cookie: u64,
        offset: u64,
        len: u32,
        hint: IoHint,
        cost: usize,
    },
    /// Write the payload now at the start of the thread's buffer.
    Write {
        cookie: u64,
        offset: u64,
        len: u32,
        fua: bool,
        hint: IoHint,
        cost: usize,
    },
    /// Any other op.
    Other { op: Op, cookie: u64, cost: usize },
}

impl Job {
    /// The budget bytes it holds.
    fn cost(&self) -> usize {
        match self {
            Job::Reply(_) => 0,
            Job::Read { cost, .. } | Job::Write { cost, .. } | Job::Other { cost, .. } => *cost,
        }
    }
}

/// Credit a connection needs before a request is served solo
/// ([`Shared::solo`]): one per request that arrived with none other of the
/// connection in flight, all of it lost when a request arrived while one
/// was served solo. A request served solo
/// while the client sends another delays that one by a whole service time,
/// against the few microseconds of a hand-off saved: solo pays only for
/// clients that almost never have two in flight. (With 8, half needed, and
/// two lost per sign, ext4 over nbdfuse with four connections and four
/// jobs at queue depth 1 ran at 10.3-10.6k IOPS against 12.4-12.8k without
/// solo serving.)
const SOLO_CREDIT: u8 = 64;

/// The read side: one thread at a time.
struct Reader {
    rd: BufReader<Capped>,
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
    free: Mutex<Room>,
    freed: Condvar,
}

/// Budget bytes free, and whether a reader waits for some (only then is
/// there anyone to wake: a wake-up costs a system call).
struct Room {
    bytes: usize,
    waiting: bool,
}

/// What every thread of one connection shares.
struct Shared {
    export: Arc<dyn Export>,
    observer: Arc<dyn RequestObserver>,
    session: Session,
    max_request: u32,
    /// READs past [`COPY_LIMIT`] may be spliced ([`ServerOptions::zero_copy`]).
    zero_copy: bool,
    max_threads: usize,
    /// The pool size while requests are fast: two threads per CPU.
    cpu_threads: usize,
    /// Moving average of the share of a request's time spent off the CPU,
    /// in 1/65536.
    waited: AtomicU32,
    reader: Mutex<Reader>,
    writer: Mutex<Replies>,
    /// Threads holding a reply that they have not written yet.
    replies_waiting: AtomicUsize,
    /// Credit for serving a request that waits on the device on the thread
    /// that read it, still holding the reader ([`Shared::solo`]): earned
    /// by requests that arrive with none other in flight, lost all at once
    /// by one that arrives while a request is served solo.
    solo: AtomicU8,
    /// A request is served solo now: its reply checks whether the client
    /// sent another meanwhile.
    probing: AtomicBool,
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
        zero_copy: opts.zero_copy,
        max_threads: opts.threads.min(opts.max_in_flight).max(1),
        cpu_threads: std::thread::available_parallelism().map_or(2, |n| 2 * n.get()),
        waited: AtomicU32::new(0),
        reader: Mutex::new(Reader {
            rd: BufReader::with_capacity(
                READ_BUFFER,
                Capped {
                    sock: rd,
                    cap: usize::MAX,
                    poll: Poll::new(opts.poll),
                },
            ),
            conn: export.connect(),
            ended: false,
        }),
        writer: Mutex::new(Replies {
            sock,
            buf: Vec::with_capacity(WRITE_BUFFER),
        }),
        replies_waiting: AtomicUsize::new(0),
        solo: AtomicU8::new(0),
        probing: AtomicBool::new(false),
        budget: Budget {
            free: Mutex::new(Room {
                bytes: byte_budget(opts),
                waiting: false,
            }),
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
    debug!(
        threads = lock(&shared.pool).threads,
        waited_share = shared.waited.load(Ordering::Relaxed),
        "connection threads done"
    );
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
        let mut buf = Vec::new();
        // For zero-copy READs, made at the first one.
        let mut pipe = Spliced::Untried;
        // The reader, kept after a READ answered on the spot.
        let mut held: Option<MutexGuard<'_, Reader>> = None;
        // Replies of READs answered on the spot not sent yet (more requests
        // were buffered: they leave together).
        let mut deferred = false;
        loop {
            let job = {
                let mut r = held.take().unwrap_or_else(|| lock(&self.reader));
                if r.ended {
                    drop(r);
                    self.settle(&mut deferred);
                    return;
                }
                let job = match self.next(&mut r, &mut buf) {
                    Ok(Some(job)) => job,
                    Ok(None) => {
                        r.ended = true;
                        drop(r);
                        self.settle(&mut deferred);
                        return;
                    }
                    Err(e) => {
                        r.ended = true;
                        drop(r);
                        self.settle(&mut deferred);
                        // Replies in flight still go out, as after DISC.
                        self.fail(e, Shutdown::Read);
                        return;
                    }
                };
                if let Job::Read {
                    cookie,
                    offset,
                    len,
                    hint,
                    cost,
                } = job
                {
                    if len as usize <= COPY_LIMIT {
                        // The next request is here already: send this reply
                        // with the next ones.
                        let defer = r.rd.buffer().len() >= proto::REQUEST_HEADER_LEN;
                        if self.read_now(cookie, offset, len, hint, &mut buf, defer) {
                            self.release(cost);
                            deferred = defer;
                            held = Some(r);
                            continue;
                        }
                    }
                }
                self.count_alone(&job);
                if self.solo(&r, &job) {
                    // The client sends one request at a time: serve it
                    // here, keeping the reader, instead of waking another
                    // thread only to wait for the next request.
                    self.settle(&mut deferred);
                    let cost = job.cost();
                    self.probing.store(true, Ordering::Release);
                    self.run(job, &mut buf, &mut pipe);
                    self.probing.store(false, Ordering::Release);
                    self.release(cost);
                    held = Some(r);
                    continue;
                }
                // Another thread will read next: what waits goes out now.
                self.settle(&mut deferred);
                job
            };
            let cost = match job {
                Job::Reply(head) => {
                    self.reply(&head, &[]);
                    continue;
                }
                Job::Read { cost, .. } | Job::Write { cost, .. } | Job::Other { cost, .. } => cost,
            };
            self.busy();
            self.run(job, &mut buf, &mut pipe);
            self.release(cost);
            {
                let mut pool = lock(&self.pool);
                if pool.threads > self.thread_cap() {
                    // Requests no longer wait: this thread is one too many.
                    pool.threads -= 1;
                    return;
                }
                pool.idle += 1;
            }
            if buf.capacity() > KEEP_BUFFER {
                buf = Vec::new();
            }
        }
    }

    /// Read the next request (a WRITE's payload into `buf`); `None` when no
    /// more will be read.
    fn next(&self, r: &mut Reader, buf: &mut Vec<u8>) -> Result<Option<Job>, ConnectionError> {
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
        if req.typ != proto::CMD_WRITE {
            // Not a stream of long writes: receive as much as comes.
            r.rd.get_mut().cap = usize::MAX;
        }
        if req.typ == proto::CMD_DISC {
            debug!("client sent DISC");
            return Ok(None);
        }
        let structured = self.session.structured;
        let (op, data_bytes) = match validate(&req, &self.session, self.max_request) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(Some(Job::Reply(ok_reply(req.cookie, structured)))),
            Err(refusal) => {
                if req.typ == proto::CMD_WRITE {
                    discard_blocking(&mut r.rd, u64::from(req.length))?;
                }
                let head = refusal.reply(&req, structured);
                return Ok(Some(Job::Reply(head)));
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
            return Ok(Some(Job::Reply(head)));
        }
        let cookie = req.cookie;
        r.conn.request(&op.info(req.length));
        Ok(Some(match op {
            Op::Write { offset, fua, .. } => {
                if let Err(e) = receive(&mut r.rd, buf, req.length) {
                    self.release(cost);
                    return Err(e.into());
                }
                let hint = r.conn.hint(offset, u64::from(req.length));
                Job::Write {
                    cookie,
                    offset,
                    len: req.length,
                    fua,
                    hint,
                    cost,
                }
            }
            Op::Read { offset, len, .. } => Job::Read {
                cookie,
                offset,
                len,
                hint: r.conn.hint(offset, u64::from(len)),
                cost,
            },
            op => Job::Other { op, cookie, cost },
        }))
    }

    /// Count a request read off the socket towards serving solo: earned
    /// when no other request of the connection is being served.
    fn count_alone(&self, job: &Job) {
        if matches!(job, Job::Reply(_)) {
            return;
        }
        let alone = {
            let pool = lock(&self.pool);
            // This thread counts as idle while it reads.
            pool.threads <= pool.idle
        };
        let credit = self.solo.load(Ordering::Relaxed);
        let credit = if alone {
            (credit + 1).min(SOLO_CREDIT)
        } else {
            // Nothing earned, nothing lost: a thread that has just sent
            // its reply counts as busy until it returns to the pool, so
            // this is a hint; a request that really arrived while one was
            // served solo takes the credit (`send`).
            credit
        };
        self.solo.store(credit, Ordering::Relaxed);
    }

    /// Whether to serve `job` on this thread holding the reader: a READ or
    /// WRITE, while the client keeps one request in flight (the credit)
    /// and nothing more has arrived (no buffered bytes, nothing to read).
    /// A request that is served so while the client sends another costs
    /// that one the rest of the service time; the probe in
    /// [`Shared::send`] sees it and takes the credit away.
    fn solo(&self, r: &Reader, job: &Job) -> bool {
        matches!(job, Job::Read { .. } | Job::Write { .. })
            && self.solo.load(Ordering::Relaxed) >= SOLO_CREDIT
            && r.rd.buffer().is_empty()
            && !self.ctl.ready().unwrap_or(false)
    }

    /// This thread runs a request now: start another to read the next one
    /// when none would be left waiting.
    fn busy(self: &Arc<Self>) {
        let mut pool = lock(&self.pool);
        pool.idle -= 1;
        if pool.idle > 0 || pool.threads >= self.thread_cap() || self.ended() {
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

    /// How many threads the pool may have now.
    fn thread_cap(&self) -> usize {
        if self.waited.load(Ordering::Relaxed) < WAITING_SHARE {
            self.max_threads.min(self.cpu_threads)
        } else {
            self.max_threads
        }
    }

    /// Fold one request's share off the CPU into the average (weight 1/16).
    /// Racing updates may lose one sample; it is a hint.
    fn note_wait(&self, wall: Duration, cpu: Duration) {
        let wall_ns = wall.as_nanos().max(1);
        let off = wall_ns.saturating_sub(cpu.as_nanos());
        let share = u32::try_from(off * 65536 / wall_ns).unwrap_or(65536);
        let old = self.waited.load(Ordering::Relaxed);
        let new = old - old / 16 + share / 16;
        self.waited.store(new, Ordering::Relaxed);
    }

    fn ended(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Run a job on the export and answer it.
    fn run(&self, job: Job, buf: &mut Vec<u8>, pipe: &mut Spliced) {
        let structured = self.session.structured;
        let export = &*self.export;
        match job {
            Job::Reply(head) => self.reply(&head, &[]),
            Job::Read {
                cookie,
                offset,
                len,
                hint,
                ..
            } => {
                let n = len as usize;
                let ctx = IoCtx::blocking().with_hint(hint);
                let p = if self.zero_copy && n > COPY_LIMIT {
                    pipe.get(n)
                } else {
                    None
                };
                // Spliced into the pipe (`true`), or read into `buf`.
                let done = self.call("read", u64::from(len), cookie, || {
                    if let Some(p) = p {
                        if let Some(r) = export.read_to_pipe(offset, u64::from(len), p.input(), ctx)
                        {
                            return r.map(|()| true);
                        }
                    }
                    export.read(offset, room(buf, n), ctx).map(|()| false)
                });
                match done.map(|spliced| (spliced, read_reply_head(cookie, structured, offset, n)))
                {
                    Ok((true, Ok(head))) => {
                        if let Some(p) = p {
                            self.send_spliced(&head, p, n);
                        }
                    }
                    Ok((false, Ok(head))) => self.reply(&head, &buf[..n]),
                    Ok((_, Err(head))) | Err(head) => {
                        // A failed splice may have left data in the pipe.
                        if p.is_some() {
                            pipe.discard();
                        }
                        self.reply(&head, &[]);
                    }
                }
            }
            Job::Write {
                cookie,
                offset,
                len,
                fua,
                hint,
                ..
            } => {
                let ctx = IoCtx::blocking().with_hint(hint).with_fua(fua);
                let data = &buf[..len as usize];
                let done = self.call("write", data.len() as u64, cookie, || {
                    export.write(offset, data, ctx)
                });
                match done {
                    Ok(()) => self.reply(&ok_reply(cookie, structured), &[]),
                    Err(head) => self.reply(&head, &[]),
                }
            }
            Job::Other { op, cookie, .. } => {
                let (command, bytes) = op.label();
                match self.call(command, bytes, cookie, || run_op(export, op)) {
                    Ok(out) => {
                        let (head, data) = success_reply(cookie, structured, out);
                        self.reply(&head, data.as_deref().unwrap_or(&[]));
                    }
                    Err(head) => self.reply(&head, &[]),
                }
            }
        }
    }

    /// Answer a READ if the export can serve it without waiting; `false`
    /// (nothing done) if it cannot.
    fn read_now(
        &self,
        cookie: u64,
        offset: u64,
        len: u32,
        hint: IoHint,
        buf: &mut Vec<u8>,
        defer: bool,
    ) -> bool {
        let n = len as usize;
        let started = Instant::now();
        let export = &*self.export;
        let data = room(buf, n);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            export.read(offset, data, IoCtx::nowait(hint))
        }));
        match r {
            Ok(Ok(())) => {
                self.observer
                    .request_done("read", u64::from(len), started.elapsed(), true);
                let (head, data) = match read_reply_head(cookie, self.session.structured, offset, n)
                {
                    Ok(head) => (head, &buf[..n]),
                    Err(head) => (head, &[][..]),
                };
                self.send(&head, data, !defer);
                true
            }
            // Would wait, failed or panicked: the usual path runs it again
            // and answers whatever it gives.
            _ => false,
        }
    }

    /// Call the export, report the request to the observer, and turn a
    /// failure (or a panic in the export) into its encoded error reply.
    fn call<T>(
        &self,
        command: &'static str,
        bytes: u64,
        cookie: u64,
        f: impl FnOnce() -> Result<T, ExportError>,
    ) -> Result<T, Vec<u8>> {
        let started = Instant::now();
        let cpu = thread_cpu();
        let structured = self.session.structured;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        self.note_wait(started.elapsed(), thread_cpu().saturating_sub(cpu));
        let ok = matches!(result, Ok(Ok(_)));
        self.observer
            .request_done(command, bytes, started.elapsed(), ok);
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                debug!(cookie, errno = e.errno(), "request failed: {e}");
                Err(error_reply(cookie, structured, e.errno(), &e.to_string()))
            }
            Err(_) => {
                warn!(cookie, "request panicked in the export");
                let msg = "internal server error";
                Err(error_reply(cookie, structured, proto::EIO, msg))
            }
        }
    }

    /// Send a READ reply whose data is in `pipe` (then sent at once, with
    /// what is queued before it).
    fn send_spliced(&self, head: &[u8], pipe: &Pipe, len: usize) {
        let mut w = lock(&self.writer);
        let result = w.push_spliced(head, pipe, len);
        drop(w);
        if let Err(e) = result {
            self.fail(ConnectionError::Io(e), Shutdown::Both);
        }
    }

    /// Send one reply; the last writer in a row flushes them all.
    fn reply(&self, head: &[u8], data: &[u8]) {
        self.send(head, data, true);
    }

    /// Queue one reply, and send what is queued if no other reply waits and
    /// `may_flush` (else the caller [`settle`](Self::settle)s later).
    fn send(&self, head: &[u8], data: &[u8], may_flush: bool) {
        if self.probing.swap(false, Ordering::AcqRel) && self.ctl.ready().unwrap_or(false) {
            // Served solo while the client sent another request: it
            // keeps more than one in flight.
            self.solo.store(0, Ordering::Relaxed);
        }
        self.replies_waiting.fetch_add(1, Ordering::AcqRel);
        let mut w = lock(&self.writer);
        let mut result = w.push(head, data);
        let others = self.replies_waiting.fetch_sub(1, Ordering::AcqRel) - 1;
        if result.is_ok() && others == 0 && may_flush {
            result = w.flush();
        }
        drop(w);
        if let Err(e) = result {
            self.fail(ConnectionError::Io(e), Shutdown::Both);
        }
    }

    /// Send the replies this thread left queued, if any.
    fn settle(&self, deferred: &mut bool) {
        if !std::mem::take(deferred) {
            return;
        }
        let result = lock(&self.writer).flush();
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
            if free.bytes >= cost {
                free.bytes -= cost;
                free.waiting = false;
                return true;
            }
            free.waiting = true;
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
        let mut free = lock(&self.budget.free);
        free.bytes += cost;
        if free.waiting {
            self.budget.freed.notify_all();
        }
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

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}
