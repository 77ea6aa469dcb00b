//! Per-device I/O timing. [`MeteredDevice`] wraps any [`BlockDevice`] and
//! times each read, write and sync it passes on into fixed-bucket
//! histograms ([`IoMeter`]), one per operation and per I/O class:
//! foreground (requests of the volume's users) or background (migration,
//! write-back, pre-cleaning). The class is the calling thread's
//! ([`IoClass::enter`]): the migration thread marks itself once, so no
//! call in between has to carry it. The meter also keeps the device's busy
//! time (time with at least one operation in flight), the disk metric
//! node_exporter calls `io_time`.
//!
//! Recording costs two clock reads and three relaxed atomic additions, and
//! an uncontended lock when the device turns busy or idle; the buckets are
//! fixed so that a snapshot is a plain array and two snapshots
//! subtract to give the latencies of the time between them.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::BlockDevice;

/// Upper bounds of the latency buckets, in seconds (10 µs .. 10 s); a last,
/// unbounded bucket follows.
pub const IO_BUCKETS: [f64; 18] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

const SLOTS: usize = IO_BUCKETS.len() + 1;

/// A timed device operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// A read.
    Read,
    /// A write.
    Write,
    /// A sync (fdatasync).
    Sync,
}

impl IoOp {
    /// Every operation, in index order.
    pub const ALL: [IoOp; 3] = [IoOp::Read, IoOp::Write, IoOp::Sync];

    /// Lower-case name (`read`, `write`, `sync`).
    pub fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Sync => "sync",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Whose I/O it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    /// Done for a user's request.
    Foreground,
    /// Done by the migrator: moves, write-back of the write log, pre-cleaning.
    Background,
}

thread_local! {
    static CLASS: Cell<IoClass> = const { Cell::new(IoClass::Foreground) };
}

/// Restores the thread's previous class when dropped.
#[must_use = "the class holds only while the guard lives"]
pub struct ClassGuard(IoClass);

impl Drop for ClassGuard {
    fn drop(&mut self) {
        CLASS.with(|c| c.set(self.0));
    }
}

impl IoClass {
    /// Every class, in index order.
    pub const ALL: [IoClass; 2] = [IoClass::Foreground, IoClass::Background];

    /// Lower-case name (`foreground`, `background`).
    pub fn name(self) -> &'static str {
        match self {
            IoClass::Foreground => "foreground",
            IoClass::Background => "background",
        }
    }

    /// The calling thread's class.
    pub fn current() -> IoClass {
        CLASS.with(Cell::get)
    }

    /// Count the calling thread's I/O as `self` until the guard drops.
    pub fn enter(self) -> ClassGuard {
        ClassGuard(CLASS.with(|c| c.replace(self)))
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One latency histogram of fixed buckets.
#[derive(Debug, Default)]
struct Histogram {
    counts: [AtomicU64; SLOTS],
    sum_ns: AtomicU64,
}

impl Histogram {
    fn record(&self, secs: f64, ns: u64) {
        let i = IO_BUCKETS.partition_point(|&b| b < secs);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Latencies {
        Latencies {
            counts: std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed)),
            sum_secs: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A copy of one histogram: operations per bucket (not cumulative; the
/// last bucket is beyond [`IO_BUCKETS`]) and their summed time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Latencies {
    /// Operations per bucket.
    pub counts: [u64; SLOTS],
    /// Their total time in seconds.
    pub sum_secs: f64,
}

impl Latencies {
    /// Operations counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// What was added since `earlier` (a snapshot of the same histogram).
    pub fn since(&self, earlier: &Latencies) -> Latencies {
        Latencies {
            counts: std::array::from_fn(|i| self.counts[i].saturating_sub(earlier.counts[i])),
            sum_secs: (self.sum_secs - earlier.sum_secs).max(0.0),
        }
    }

    /// The `q` quantile (0..=1) in seconds, interpolated inside its bucket
    /// as Prometheus' `histogram_quantile` does; `None` with no operations.
    /// Past the last bound it answers the last bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut seen = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 && (seen + n) as f64 >= rank {
                let Some(&hi) = IO_BUCKETS.get(i) else {
                    return IO_BUCKETS.last().copied();
                };
                let lo = if i == 0 { 0.0 } else { IO_BUCKETS[i - 1] };
                let into = (rank - seen as f64) / n as f64;
                return Some(lo + (hi - lo) * into.clamp(0.0, 1.0));
            }
            seen += n;
        }
        IO_BUCKETS.last().copied()
    }
}

/// Busy-time bookkeeping, touched only when the device turns busy or idle.
#[derive(Debug, Default)]
struct Busy {
    /// Completed busy periods, ns.
    total_ns: u64,
    /// Start of the period under way, if one is.
    since_ns: Option<u64>,
    /// The most ever reported: reports never go back.
    reported_ns: u64,
}

/// The I/O times of one device.
#[derive(Debug)]
pub struct IoMeter {
    /// Indexed [op][class].
    hist: [[Histogram; 2]; 3],
    inflight: AtomicU64,
    busy: parking_lot::Mutex<Busy>,
    epoch: Instant,
}

impl Default for IoMeter {
    fn default() -> Self {
        IoMeter {
            hist: Default::default(),
            inflight: AtomicU64::new(0),
            busy: parking_lot::Mutex::new(Busy::default()),
            epoch: Instant::now(),
        }
    }
}

impl IoMeter {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn begin(&self) -> u64 {
        let now = self.now_ns();
        if self.inflight.fetch_add(1, Ordering::AcqRel) == 0 {
            let mut b = self.busy.lock();
            if b.since_ns.is_none() {
                b.since_ns = Some(now);
            }
        }
        now
    }

    /// The device may have gone idle: close the busy period, unless an
    /// operation began meanwhile (its increment is seen under the lock, or
    /// it opens a new period after this one closed).
    fn idle(&self, now: u64) {
        let mut b = self.busy.lock();
        if self.inflight.load(Ordering::Acquire) == 0 {
            if let Some(since) = b.since_ns.take() {
                b.total_ns += now.saturating_sub(since);
            }
        }
    }

    fn end(&self, op: IoOp, started_ns: u64) {
        let now = self.now_ns();
        if self.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle(now);
        }
        let ns = now.saturating_sub(started_ns);
        self.hist[op.index()][IoClass::current().index()].record(ns as f64 / 1e9, ns);
    }

    /// The latencies of `op` by `class` so far.
    pub fn latencies(&self, op: IoOp, class: IoClass) -> Latencies {
        self.hist[op.index()][class.index()].snapshot()
    }

    /// Seconds the device had at least one operation in flight, counting
    /// the period under way; never less than an earlier answer.
    pub fn busy_secs(&self) -> f64 {
        let now = self.now_ns();
        let mut b = self.busy.lock();
        let ns = b.total_ns + b.since_ns.map_or(0, |s| now.saturating_sub(s));
        b.reported_ns = b.reported_ns.max(ns);
        b.reported_ns as f64 / 1e9
    }
}

/// A device whose every operation is timed into an [`IoMeter`].
pub struct MeteredDevice {
    inner: Arc<dyn BlockDevice>,
    meter: Arc<IoMeter>,
}

impl MeteredDevice {
    /// Time `inner`'s operations into a new meter.
    pub fn new(inner: Arc<dyn BlockDevice>) -> MeteredDevice {
        MeteredDevice {
            inner,
            meter: Arc::new(IoMeter::default()),
        }
    }

    /// Time `inner`'s operations into `meter` (a replacement device keeps
    /// counting where the one it replaces stopped).
    pub fn with_meter(inner: Arc<dyn BlockDevice>, meter: Arc<IoMeter>) -> MeteredDevice {
        MeteredDevice { inner, meter }
    }

    /// The meter.
    pub fn meter(&self) -> Arc<IoMeter> {
        self.meter.clone()
    }

    fn timed<T>(&self, op: IoOp, f: impl FnOnce() -> T) -> T {
        let t = self.meter.begin();
        let r = f();
        self.meter.end(op, t);
        r
    }
}

impl BlockDevice for MeteredDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.timed(IoOp::Read, || self.inner.read_at(buf, offset))
    }

    fn link(&self) -> Option<super::LinkEstimate> {
        self.inner.link()
    }

    fn model_busy(&self) -> Option<std::time::Duration> {
        self.inner.model_busy()
    }

    fn model_busy_here(&self) -> Option<std::time::Duration> {
        self.inner.model_busy_here()
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Option<io::Result<()>> {
        // Only an answered read counts: `None` did no I/O, and the caller
        // reads again with `read_at`.
        let t = self.meter.begin();
        let r = self.inner.read_at_nowait(buf, offset);
        match r {
            Some(_) => self.meter.end(IoOp::Read, t),
            None => self.meter.cancel(),
        }
        r
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.timed(IoOp::Write, || self.inner.write_at(buf, offset))
    }

    fn write_at_nowait(&self, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
        let t = self.meter.begin();
        let r = self.inner.write_at_nowait(buf, offset);
        match r {
            Some(_) => self.meter.end(IoOp::Write, t),
            None => self.meter.cancel(),
        }
        r
    }

    fn read_to_pipe(
        &self,
        pipe: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Option<io::Result<()>> {
        // Timed as a read: the pages are looked up (or read) now.
        let t = self.meter.begin();
        let r = self.inner.read_to_pipe(pipe, offset, len);
        match r {
            Some(_) => self.meter.end(IoOp::Read, t),
            None => self.meter.cancel(),
        }
        r
    }

    fn forget(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.forget(offset, len)
    }

    fn sync(&self) -> io::Result<()> {
        self.timed(IoOp::Sync, || self.inner.sync())
    }

    fn name(&self) -> String {
        self.inner.name()
    }
}

impl IoMeter {
    /// End an operation that did no I/O: its busy time counts, nothing else.
    fn cancel(&self) {
        let now = self.now_ns();
        if self.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn operations_land_in_their_op_and_class() {
        let dev = MeteredDevice::new(Arc::new(MemDevice::new(1 << 20)));
        let m = dev.meter();
        let mut buf = vec![0u8; 4096];
        dev.write_at(&buf, 0).expect("write");
        dev.read_at(&mut buf, 0).expect("read");
        {
            let _bg = IoClass::Background.enter();
            dev.read_at(&mut buf, 4096).expect("read");
            dev.read_at(&mut buf, 8192).expect("read");
            dev.sync().expect("sync");
        }
        dev.read_at(&mut buf, 0).expect("read");
        let n = |op, class| m.latencies(op, class).count();
        assert_eq!(n(IoOp::Write, IoClass::Foreground), 1);
        assert_eq!(n(IoOp::Read, IoClass::Foreground), 2);
        assert_eq!(n(IoOp::Read, IoClass::Background), 2);
        assert_eq!(n(IoOp::Sync, IoClass::Background), 1);
        assert_eq!(n(IoOp::Sync, IoClass::Foreground), 0);
        assert_eq!(
            IoClass::current(),
            IoClass::Foreground,
            "the guard restored it"
        );
        assert!(m.busy_secs() > 0.0);
        assert!(m.busy_secs() < 1.0);
    }

    #[test]
    fn busy_time_never_goes_back_under_concurrent_io() {
        let dev = Arc::new(MeteredDevice::new(Arc::new(MemDevice::new(1 << 20))));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..3)
            .map(|i| {
                let (dev, stop) = (dev.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 4096];
                    while !stop.load(Ordering::Relaxed) {
                        dev.read_at(&mut buf, i * 4096).expect("read");
                    }
                })
            })
            .collect();
        let m = dev.meter();
        let mut last = 0.0;
        for _ in 0..20_000 {
            let b = m.busy_secs();
            assert!(b >= last, "busy time went back: {b} < {last}");
            last = b;
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().expect("worker");
        }
        let idle = m.busy_secs();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(m.busy_secs(), idle, "an idle device accrues no busy time");
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let h = Histogram::default();
        // 90 operations at 0.3 ms (bucket 0.25..0.5 ms), 10 at 20 ms
        // (bucket 10..25 ms).
        for _ in 0..90 {
            h.record(0.0003, 300_000);
        }
        for _ in 0..10 {
            h.record(0.02, 20_000_000);
        }
        let l = h.snapshot();
        assert_eq!(l.count(), 100);
        let p50 = l.quantile(0.5).expect("p50");
        assert!((0.00025..=0.0005).contains(&p50), "{p50}");
        let p99 = l.quantile(0.99).expect("p99");
        assert!((0.01..=0.025).contains(&p99), "{p99}");
        assert!((l.sum_secs - (0.027 + 0.2)).abs() < 1e-9, "{}", l.sum_secs);
        let later = {
            h.record(0.02, 20_000_000);
            h.snapshot()
        };
        let d = later.since(&l);
        assert_eq!(d.count(), 1);
        assert!(d.quantile(0.5).expect("p50") >= 0.01);
        assert_eq!(Latencies::default().quantile(0.5), None);
        // Beyond the last bound: the last bound.
        h.record(30.0, 30_000_000_000);
        assert_eq!(h.snapshot().quantile(1.0), Some(10.0));
    }

    /// A device that never has data at hand (the trait's defaults).
    struct Never(MemDevice);

    impl BlockDevice for Never {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.0.write_at(buf, offset)
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn name(&self) -> String {
            "never".into()
        }
    }

    #[test]
    fn a_read_the_device_cannot_answer_now_is_not_counted() {
        let dev = MeteredDevice::new(Arc::new(Never(MemDevice::new(1 << 20))));
        let mut buf = vec![0u8; 512];
        assert!(dev.read_at_nowait(&mut buf, 0).is_none());
        assert!(dev.write_at_nowait(&buf, 0).is_none());
        assert_eq!(
            dev.meter()
                .latencies(IoOp::Read, IoClass::Foreground)
                .count(),
            0
        );
        assert_eq!(dev.meter.inflight.load(Ordering::Relaxed), 0);
    }
}
