//! The transmission phase of one connection: the one loop that every
//! connection runs, whatever its stream ([`Wire`]: a plain TCP or Unix
//! socket, or TLS or an in-memory stream bridged) and whoever runs its
//! threads ([`Workers`](super::pool::Workers): the connection's own, or the
//! runtime's shared blocking threads with `threads = 0`).
//!
//! Every thread of a connection takes the next request off the stream
//! under the reader lock (header, checks, payload and stream hint, so
//! request order is kept where it matters), runs it on the export with
//! plain blocking calls, and writes its reply under the writer lock. A
//! request never changes threads on its way, so it costs no hand-off and
//! no wake-up of another task; replies leave out of order but never
//! interleave. The last thread to finish a reply while no other waits to
//! write one flushes the buffered replies: under load, one send carries
//! many replies. Each thread keeps one data buffer: a WRITE payload is
//! received into it and a READ is read into it and sent from it, with no
//! allocation, zero-filling or extra copy per request.
//!
//! A short READ (up to [`COPY_LIMIT`]; longer ones gain from being read and
//! sent by several threads at once) goes to the export by the thread that
//! read it, still holding the reader, and goes down once
//! ([`Export::read_or_wait`]): a page-cache hit is answered without waking
//! a second thread (at queue depth 1: three system calls, receive, read
//! and send), and while more requests are already buffered its reply waits
//! to leave with theirs. Only where the read would wait does the thread
//! hand the reader on (the queued replies go out first) and wait for the
//! device, then answer.
//!
//! A client that keeps one request in flight ([`SOLO_CREDIT`]: about as many
//! requests arrived while none other was served, and none while one was
//! served solo) has a READ or WRITE that must wait for the device served
//! the same way, by the thread that read it, holding the reader: handing the
//! stream to a second thread at once would only park that thread in a
//! receive, and wake it through the scheduler, for nothing (four
//! connections at queue depth 1 on a modelled SSD: 16.7k IOPS, served so
//! 28k). When the next request is already buffered or readable it goes the
//! usual way; a reply sent after the client sent another takes the credit
//! away. Only a wire that can tell that a request waits
//! ([`Wire::peeks`]) serves solo.
//!
//! With the slow lane ([`ServerOptions::slow_lane`], off by default), a
//! READ the export calls slow ([`Export::read_is_slow`]: tierd's reads of
//! data on the HDD) may take at most three quarters of the threads
//! ([`Lanes`]); one read while they are all taken is queued, in order, for
//! the next thread that ends a slow READ, and the thread reads on. So a
//! client's WRITEs and reads of flash are not held up on the socket behind
//! a queue of HDD reads: the one case where a request changes threads.
//!
//! The threads are counted and started by the [`Pool`]; payload memory is
//! bounded by the connection's [`Budget`]. Shutdown shuts the stream's
//! receiving side: a thread blocked reading sees end of stream, requests in
//! flight finish and are answered, then the connection closes.

use std::io::BufReader;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tracing::{debug, warn};

use super::budget::{Budget, REQUEST_OVERHEAD};
use super::export::{Export, ExportConn, ExportError, IoCtx};
use super::job::Job;
use super::lanes::{Entry, Lanes, Parked};
use super::lock::lock;
use super::options::{ConnectionError, RequestObserver, ServerOptions};
use super::pool::{thread_cpu, Pool, Workers};
use super::proto;
use super::reply::{
    error_reply, ok_reply, read_reply_head, runs_to_descriptors, success_reply, OpOutput,
    MAX_DESCRIPTORS,
};
use super::request::{discard, read_header, validate, Op};
use super::session::Session;
use super::socket::{receive, room, Capped, Poll, Replies, COPY_LIMIT, READ_BUFFER, WRITE_BUFFER};
use super::splice::{Pipe, Spliced};
use super::wire::Wire;
use crate::listen::Stop;
use crate::units::IoHint;

/// Budget bytes of a request besides its data.
const OVERHEAD: usize = REQUEST_OVERHEAD as usize;

/// A thread's data buffer grown past this is given back after its request.
const KEEP_BUFFER: usize = 4 * 1024 * 1024;

/// How a thread served the request it took.
enum Turn {
    /// Answered without waiting, holding the reader.
    AtOnce,
    /// Served solo: holding the reader while it waited.
    Solo,
    /// The reader went on to the next thread while it waited.
    Pool,
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
struct Reader<W> {
    rd: BufReader<Capped<W>>,
    conn: Box<dyn ExportConn>,
    /// No more requests: end of stream, DISC, shutdown or a broken stream.
    ended: bool,
}

/// What every thread of one connection shares.
struct Shared<W> {
    export: Arc<dyn Export>,
    observer: Arc<dyn RequestObserver>,
    session: Session,
    max_request: u32,
    /// READs past [`COPY_LIMIT`] may be spliced ([`ServerOptions::zero_copy`],
    /// on a wire that takes spliced pages).
    zero_copy: bool,
    /// The wire can tell that a request waits ([`Wire::peeks`]).
    peeks: bool,
    reader: Mutex<Reader<W>>,
    writer: Mutex<Replies<W>>,
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
    pool: Pool,
    /// How many threads may wait on slow READs, and those queued for it
    /// ([`ServerOptions::slow_lane`]; `None`: no lane).
    lanes: Option<Lanes>,
    stopping: AtomicBool,
    /// The first error that ended the connection.
    failure: Mutex<Option<ConnectionError>>,
    /// A handle to ask and shut the stream with.
    ctl: W,
    span: tracing::Span,
}

/// Serve the transmission phase of `wire` until the client leaves or
/// `stop` turns true (then in-flight requests finish and are answered);
/// `runtime` runs the threads with `threads = 0`.
pub(super) async fn transmission<W: Wire>(
    export: &Arc<dyn Export>,
    opts: &ServerOptions,
    wire: W,
    session: Session,
    runtime: Handle,
    mut stop: Stop,
) -> Result<(), ConnectionError> {
    let rd = wire.try_clone()?;
    let ctl = wire.try_clone()?;
    let peeks = wire.peeks();
    let poll = if peeks { opts.poll } else { Duration::ZERO };
    let pool = Pool::new(opts, Workers::of(opts, runtime));
    let shared = Arc::new(Shared {
        export: Arc::clone(export),
        observer: Arc::clone(&opts.observer),
        session,
        max_request: opts.max_request,
        zero_copy: opts.zero_copy && wire.splice_target().is_some(),
        peeks,
        reader: Mutex::new(Reader {
            rd: BufReader::with_capacity(
                READ_BUFFER,
                Capped {
                    sock: rd,
                    cap: usize::MAX,
                    poll: Poll::new(poll),
                },
            ),
            conn: export.connect(),
            ended: false,
        }),
        writer: Mutex::new(Replies {
            sock: wire,
            buf: Vec::with_capacity(WRITE_BUFFER),
        }),
        replies_waiting: AtomicUsize::new(0),
        solo: AtomicU8::new(0),
        probing: AtomicBool::new(false),
        budget: Budget::new(opts),
        pool,
        lanes: opts.slow_lane.then(Lanes::new),
        stopping: AtomicBool::new(false),
        failure: Mutex::new(None),
        ctl,
        span: tracing::Span::current(),
    });
    if let Err(e) = Shared::spawn(&shared) {
        return Err(ConnectionError::Io(e));
    }
    let mut stopped = false;
    loop {
        if stopped {
            shared.pool.wait().await;
        } else {
            tokio::select! {
                () = shared.pool.wait() => {}
                () = stop.wait() => {
                    stopped = true;
                    debug!("shutdown: no more requests read");
                    shared.stop();
                }
            }
        }
        if shared.pool.done() {
            break;
        }
    }
    let (threads, waited_share) = shared.pool.summary();
    debug!(threads, waited_share, "connection threads done");
    let failure = lock(&shared.failure).take();
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl<W: Wire> Shared<W> {
    /// Start one more serving thread (already counted by the pool).
    fn spawn(this: &Arc<Self>) -> std::io::Result<()> {
        let me = Arc::clone(this);
        this.pool.start(move || {
            let span = me.span.clone();
            let _enter = span.enter();
            me.serve();
            me.pool.ended();
        })
    }

    /// One thread's loop: take a request, run it, answer it.
    fn serve(self: &Arc<Self>) {
        let mut buf = Vec::new();
        // For zero-copy READs, made at the first one.
        let mut pipe = Spliced::Untried;
        // The reader, kept after a request answered or served holding it.
        let mut held: Option<MutexGuard<'_, Reader<W>>> = None;
        // Replies of READs answered at once not sent yet (more requests
        // were buffered: they leave together).
        let mut deferred = false;
        loop {
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
            if let Job::Reply(head) = &job {
                // Answered without the export: the next thread reads on.
                self.settle(&mut deferred);
                drop(r);
                self.reply(head, &[]);
                continue;
            }
            let lane = self.lane(&job);
            let job = match lane
                .map(|(lanes, read)| (read, lanes.enter(read, self.pool.threads_now())))
            {
                None | Some((_, Entry::Serve)) => job,
                Some((read, entry)) => {
                    // Queued, holding the request's overhead alone: its
                    // data is not in memory until it is served.
                    self.budget.release(read.cost.saturating_sub(OVERHEAD));
                    match entry {
                        Entry::ServeQueued(first) => {
                            self.budget.overdraw(first.cost.saturating_sub(OVERHEAD));
                            first.job()
                        }
                        _ => {
                            // The lane is full: read on, so that what flash
                            // serves is not held up behind it. What waits to
                            // be sent goes out first: the next read may wait.
                            self.settle(&mut deferred);
                            held = Some(r);
                            continue;
                        }
                    }
                }
            };
            let cost = job.cost();
            let mut reader = Some(r);
            let mut turn = match job {
                Job::Read {
                    cookie,
                    offset,
                    len,
                    hint,
                    ..
                } if len as usize <= COPY_LIMIT => {
                    let short = ShortRead {
                        cookie,
                        offset,
                        len,
                        hint,
                    };
                    self.read_short(short, &job, &mut buf, &mut reader, &mut deferred)
                }
                job => {
                    let turn = self.take_turn(&job, &mut reader, &mut deferred);
                    self.run(job, &mut buf, &mut pipe);
                    turn
                }
            };
            if matches!(turn, Turn::Solo) {
                self.probing.store(false, Ordering::Release);
            }
            self.budget.release(cost);
            if let Some((lanes, _)) = lane {
                // Its place in the slow lane goes to the next queued READ,
                // served by this thread before it reads again.
                while let Some(read) = lanes.next() {
                    self.budget.overdraw(read.cost.saturating_sub(OVERHEAD));
                    if !matches!(turn, Turn::Pool) {
                        reader = None;
                        self.settle(&mut deferred);
                        self.busy();
                        turn = Turn::Pool;
                    }
                    self.run(read.job(), &mut buf, &mut pipe);
                    self.budget.release(read.cost);
                }
            }
            match turn {
                Turn::AtOnce | Turn::Solo => held = reader,
                Turn::Pool => {
                    if !self.pool.back() {
                        // Requests no longer wait: this thread is one too many.
                        return;
                    }
                    if buf.capacity() > KEEP_BUFFER {
                        buf = Vec::new();
                    }
                }
            }
        }
    }

    /// `job` for the slow lane, if the connection has one and it is a READ
    /// the export calls slow.
    fn lane(&self, job: &Job) -> Option<(&Lanes, Parked)> {
        let lanes = self.lanes.as_ref()?;
        let read = job.parked()?;
        let slow = self.export.read_is_slow(read.offset, u64::from(read.len));
        slow.then_some((lanes, read))
    }

    /// `job` must wait for the export: serve it solo, keeping the reader
    /// (the client sends one request at a time: another thread would
    /// only wait for the next request), or hand the reader to the next
    /// thread. What waits to be sent goes out first either way.
    fn take_turn(
        self: &Arc<Self>,
        job: &Job,
        reader: &mut Option<MutexGuard<'_, Reader<W>>>,
        deferred: &mut bool,
    ) -> Turn {
        self.count_alone(job);
        let solo = reader.as_ref().is_some_and(|r| self.solo(r, job));
        self.settle(deferred);
        if solo {
            self.probing.store(true, Ordering::Release);
            return Turn::Solo;
        }
        *reader = None;
        self.busy();
        Turn::Pool
    }

    /// Read the next request (a WRITE's payload into `buf`); `None` when no
    /// more will be read.
    fn next(&self, r: &mut Reader<W>, buf: &mut Vec<u8>) -> Result<Option<Job>, ConnectionError> {
        let mut hdr = [0u8; proto::REQUEST_HEADER_LEN];
        let got = match read_header(&mut r.rd, &mut hdr) {
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
                    discard(&mut r.rd, u64::from(req.length))?;
                }
                let head = refusal.reply(&req, structured);
                return Ok(Some(Job::Reply(head)));
            }
        };
        let cost = REQUEST_OVERHEAD.saturating_add(data_bytes) as usize;
        if !self.budget.acquire(cost, &self.stopping) {
            // Shutting down while waiting for room: answer, don't run.
            if matches!(op, Op::Write { .. }) {
                discard(&mut r.rd, u64::from(req.length))?;
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
                    self.budget.release(cost);
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

    /// Count a request read off the stream towards serving solo: earned
    /// when no other request of the connection is being served.
    fn count_alone(&self, job: &Job) {
        if matches!(job, Job::Reply(_)) {
            return;
        }
        let alone = self.pool.all_free();
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
    fn solo(&self, r: &Reader<W>, job: &Job) -> bool {
        self.peeks
            && matches!(job, Job::Read { .. } | Job::Write { .. })
            && self.solo.load(Ordering::Relaxed) >= SOLO_CREDIT
            && r.rd.buffer().is_empty()
            && !self.ctl.ready().unwrap_or(false)
    }

    /// This thread runs a request now: start another to read the next one
    /// when none would be left waiting.
    fn busy(self: &Arc<Self>) {
        if self.pool.busy(self.ended()) {
            if let Err(e) = Shared::spawn(self) {
                warn!("cannot start another NBD thread: {e}");
            }
        }
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
                // Spliced into the pipe (`true`), or read into `buf`. A
                // splice that fails is read again by copying: the export
                // may serve it another way (tierd: an extent's HDD copy
                // when the SSD fails); the pipe, which may hold part of
                // it, is dropped.
                let mut splice_failed = false;
                let done = self.call("read", u64::from(len), cookie, || {
                    if let Some(p) = p {
                        match export.read_to_pipe(offset, u64::from(len), p.input(), ctx) {
                            Some(Ok(())) => return Ok(true),
                            Some(Err(_)) => splice_failed = true,
                            None => {}
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
                    Ok((false, Ok(head))) => {
                        if splice_failed {
                            pipe.discard();
                        }
                        self.reply(&head, &buf[..n])
                    }
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

    /// Serve a short READ (`job`), holding the reader: answered at once
    /// when the export has the data at hand; where it would wait, the turn
    /// is taken ([`Shared::take_turn`]) just before, and the read goes on
    /// waiting, down once.
    fn read_short(
        self: &Arc<Self>,
        read: ShortRead,
        job: &Job,
        buf: &mut Vec<u8>,
        reader: &mut Option<MutexGuard<'_, Reader<W>>>,
        deferred: &mut bool,
    ) -> Turn {
        let ShortRead {
            cookie,
            offset,
            len,
            hint,
        } = read;
        let n = len as usize;
        // The next request is here already: send this reply with the next
        // ones if it is answered at once.
        let defer = reader
            .as_ref()
            .is_some_and(|r| r.rd.buffer().len() >= proto::REQUEST_HEADER_LEN);
        let started = Instant::now();
        let mut turn = None;
        // When the read started to wait, on the clock and the thread's CPU.
        let mut waiting = None;
        let export = &*self.export;
        let data = room(buf, n);
        let result = {
            let mut before_wait = || {
                turn = Some(self.take_turn(job, reader, deferred));
                waiting = Some((Instant::now(), thread_cpu()));
            };
            let ctx = IoCtx::blocking().with_hint(hint);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                export.read_or_wait(offset, data, ctx, &mut before_wait)
            }))
        };
        if let Some((since, cpu)) = waiting {
            self.pool
                .note_wait(since.elapsed(), thread_cpu().saturating_sub(cpu));
        }
        let head = self
            .outcome("read", u64::from(len), cookie, started, result)
            .map(|()| read_reply_head(cookie, self.session.structured, offset, n));
        let (head, data) = match head {
            Ok(Ok(head)) => (head, &buf[..n]),
            Ok(Err(head)) | Err(head) => (head, &[][..]),
        };
        match turn {
            None => {
                self.send(&head, data, !defer);
                *deferred = defer;
                Turn::AtOnce
            }
            Some(turn) => {
                self.reply(&head, data);
                turn
            }
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
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        self.pool
            .note_wait(started.elapsed(), thread_cpu().saturating_sub(cpu));
        self.outcome(command, bytes, cookie, started, result)
    }

    /// Report a request that ran since `started` to the observer; a
    /// failure (or a panic in the export) becomes its encoded error reply.
    fn outcome<T>(
        &self,
        command: &'static str,
        bytes: u64,
        cookie: u64,
        started: Instant,
        result: std::thread::Result<Result<T, ExportError>>,
    ) -> Result<T, Vec<u8>> {
        let structured = self.session.structured;
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

    /// Stop reading requests: wake a thread blocked on the stream or on the
    /// budget. Requests in flight still finish and are answered.
    fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.budget.wake();
        // Fails only if the stream is already gone; nothing more to stop.
        let _ = self.ctl.shutdown(Shutdown::Read);
    }

    /// The connection is broken: remember the first error, stop reading,
    /// and shut the stream (`how`) so that no thread stays blocked on it.
    fn fail(&self, e: ConnectionError, how: Shutdown) {
        {
            let mut first = lock(&self.failure);
            if first.is_none() {
                *first = Some(e);
            }
        }
        self.stopping.store(true, Ordering::Release);
        self.budget.wake();
        let _ = self.ctl.shutdown(how);
    }
}

/// A short READ's request.
#[derive(Clone, Copy)]
struct ShortRead {
    cookie: u64,
    offset: u64,
    len: u32,
    hint: IoHint,
}

/// Run one validated request on the export (the loop runs READs and WRITEs
/// itself, into and out of the thread's buffer).
fn run_op(export: &dyn Export, op: Op) -> Result<OpOutput, ExportError> {
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
