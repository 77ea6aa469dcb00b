//! The threads that serve one connection: how many there are and how many
//! are free, when one more starts and when one ends, and who runs them
//! ([`Workers`]: threads of the connection's own, or the runtime's shared
//! blocking threads).
//!
//! Threads start one at a time, whenever a request leaves no thread waiting
//! to read the next one, up to the configured count (capped by
//! [`ServerOptions::max_in_flight`]). While requests are served without
//! waiting for a device (data in the page cache, so the thread runs the
//! whole time) the pool stops at two threads per CPU: more threads running
//! at once only queue on the same locks (measured in docs/performance.md).
//! Once the threads spend most of a request off the CPU (its thread CPU
//! time against its wall time: waiting for a device, as with O_DIRECT, a
//! modelled drive or a page-cache miss) it grows to the full count, so that
//! requests keep the device's queue full and requests for the fast tier do
//! not queue behind ones waiting for the slow tier; when they stop waiting,
//! threads beyond the cap end after their request.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::Notify;

use super::lock::lock;
use super::options::ServerOptions;

/// Share of their time that requests spend off the CPU (in 1/65536, moving
/// average over about 16 requests) from which the pool may grow past two
/// threads per CPU.
const WAITING_SHARE: u32 = 65536 / 2;

/// Who runs a connection's serving threads.
pub(super) enum Workers {
    /// Threads of the connection's own (`tierd-nbd`).
    Own,
    /// The runtime's shared blocking threads (`threads = 0`).
    Runtime(Handle),
}

impl Workers {
    /// The workers `opts` asks for (`runtime`: the connection's).
    pub(super) fn of(opts: &ServerOptions, runtime: Handle) -> Workers {
        if opts.threads > 0 {
            Workers::Own
        } else {
            Workers::Runtime(runtime)
        }
    }
}

/// How many threads serve the connection and how many are free.
struct Counts {
    threads: usize,
    /// Threads not running a request (waiting to read, or reading).
    idle: usize,
}

/// One connection's serving threads.
pub(super) struct Pool {
    counts: Mutex<Counts>,
    workers: Workers,
    max_threads: usize,
    /// The pool size while requests are fast: two threads per CPU.
    cpu_threads: usize,
    /// Moving average of the share of a request's time spent off the CPU,
    /// in 1/65536.
    waited: AtomicU32,
    /// Threads not ended yet.
    live: AtomicUsize,
    all_done: Notify,
}

impl Pool {
    /// A pool of one thread (not started yet: [`Pool::start`] it).
    pub(super) fn new(opts: &ServerOptions, workers: Workers) -> Pool {
        let max_threads = match workers {
            Workers::Own => opts.threads.min(opts.max_in_flight),
            Workers::Runtime(_) => opts.max_in_flight,
        };
        Pool {
            counts: Mutex::new(Counts {
                threads: 1,
                idle: 1,
            }),
            workers,
            max_threads: max_threads.max(1),
            cpu_threads: std::thread::available_parallelism().map_or(2, |n| 2 * n.get()),
            waited: AtomicU32::new(0),
            live: AtomicUsize::new(1),
            all_done: Notify::new(),
        }
    }

    /// Threads the pool may have now (it grows past two per CPU once
    /// requests wait off the CPU).
    pub(super) fn threads_now(&self) -> usize {
        self.cap()
    }

    /// Run `serve` on a thread already counted (by [`Pool::new`] or
    /// [`Pool::busy`]); it must call [`Pool::ended`] last. On failure the
    /// count is taken back.
    pub(super) fn start(&self, serve: impl FnOnce() + Send + 'static) -> io::Result<()> {
        let started = match &self.workers {
            Workers::Own => std::thread::Builder::new()
                .name("tierd-nbd".into())
                .spawn(serve)
                .map(drop),
            Workers::Runtime(rt) => {
                drop(rt.spawn_blocking(serve));
                Ok(())
            }
        };
        if started.is_err() {
            let mut c = lock(&self.counts);
            c.threads -= 1;
            c.idle -= 1;
            drop(c);
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
        started
    }

    /// A serving thread ends.
    pub(super) fn ended(&self) {
        if self.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_done.notify_one();
        }
    }

    /// Until every thread has ended (or a spurious wake: check
    /// [`Pool::done`]).
    pub(super) async fn wait(&self) {
        self.all_done.notified().await;
    }

    /// Every thread has ended.
    pub(super) fn done(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }

    /// This thread runs a request now: whether another must start to read
    /// the next one (none would be left waiting; then it is counted, and
    /// the caller [`start`](Pool::start)s it).
    pub(super) fn busy(&self, stopping: bool) -> bool {
        let mut c = lock(&self.counts);
        c.idle -= 1;
        if c.idle > 0 || c.threads >= self.cap() || stopping {
            return false;
        }
        c.threads += 1;
        c.idle += 1;
        self.live.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// This thread has answered its request: `false` if it is one too
    /// many now (requests no longer wait) and ends, else it is free again.
    pub(super) fn back(&self) -> bool {
        let mut c = lock(&self.counts);
        if c.threads > self.cap() {
            c.threads -= 1;
            return false;
        }
        c.idle += 1;
        true
    }

    /// No thread runs a request (the one asking counts as free while it
    /// reads).
    pub(super) fn all_free(&self) -> bool {
        let c = lock(&self.counts);
        c.threads <= c.idle
    }

    /// How many threads the pool may have now.
    fn cap(&self) -> usize {
        if self.waited.load(Ordering::Relaxed) < WAITING_SHARE {
            self.max_threads.min(self.cpu_threads)
        } else {
            self.max_threads
        }
    }

    /// Fold one request's share off the CPU into the average (weight 1/16).
    /// Racing updates may lose one sample; it is a hint.
    pub(super) fn note_wait(&self, wall: Duration, cpu: Duration) {
        let wall_ns = wall.as_nanos().max(1);
        let off = wall_ns.saturating_sub(cpu.as_nanos());
        let share = u32::try_from(off * 65536 / wall_ns).unwrap_or(65536);
        let old = self.waited.load(Ordering::Relaxed);
        let new = old - old / 16 + share / 16;
        self.waited.store(new, Ordering::Relaxed);
    }

    /// Threads now, and the share off the CPU (for the log).
    pub(super) fn summary(&self) -> (usize, u32) {
        (
            lock(&self.counts).threads,
            self.waited.load(Ordering::Relaxed),
        )
    }
}

/// CPU time of the calling thread.
pub(super) fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}
