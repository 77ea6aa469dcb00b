//! What a benchmark runs against: the hybrid volume, or one modelled device
//! alone (pure SSD, pure HDD); and the runner that drives a workload against
//! a target with `qd` outstanding requests in virtual or real time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::sched::VirtualSched;
use super::workload::{Generator, Req, Spec};
use tierd::clock::{Clock, SystemClock};
use tierd::device::BlockDevice;
use tierd::migrate::Migrator;
use tierd::volume::Volume;

/// The least time a request takes in virtual time (host and protocol
/// overhead of a request that touches no device).
pub(crate) const MIN_REQUEST: Duration = Duration::from_micros(2);

/// One of the compared systems.
pub trait Target: Send + Sync {
    /// "hybrid", "pure-ssd" or "pure-hdd".
    fn name(&self) -> &'static str;
    /// Do one request (data is whatever `buf` holds).
    fn io(&self, req: &Req, buf: &mut [u8]) -> io::Result<()>;
    /// Discard a range.
    fn trim(&self, offset: u64, len: u64) -> io::Result<()>;
    /// The volume, for the hybrid.
    fn volume(&self) -> Option<&Arc<Volume>> {
        None
    }
    /// Work that follows an answered request on the virtual clock (the
    /// hybrid's admission at the miss); its device time falls after the
    /// request's completion. On the real clock the migrator's admitting
    /// thread does it, as in the daemon.
    fn after(&self) {}
    /// The byte ranges of the volume whose copies to flash [`Target::after`]
    /// made since this was last asked: the replay holds back a read of them
    /// until the copy is done on its clock, as a read arriving in the
    /// middle of a copy waits for it (or for the HDD queue it is in) on a
    /// real drive.
    fn landed(&self) -> Vec<(u64, u64)> {
        Vec::new()
    }
    /// A read of this range goes to the HDD, as a daemon serving the target
    /// would tell its NBD server (`Export::read_is_slow`): the replay's
    /// model of the server keeps such reads to its slow lane, as the
    /// server does. Default: no read is slow.
    fn read_is_slow(&self, _offset: u64, _len: u64) -> bool {
        false
    }
    /// What the target's devices and placement did since it was built
    /// (two snapshots subtract to give a run's).
    fn usage(&self) -> Usage;
}

/// What a target did, counted from its start: device time, bytes written
/// to flash, bytes copied between the tiers, and where reads and writes
/// were served. Index 0 is the SSD, 1 the HDD.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Time each modelled drive worked (the HDD's: its head time, for
    /// users and copies alike); zero without a model.
    pub busy: [Duration; 2],
    /// Bytes written to the SSD device (users' writes, copies, logs).
    pub ssd_written: u64,
    /// Bytes copied between the tiers (promotions, demotions, admissions,
    /// write-back).
    pub moved: u64,
    /// Read bytes served by the SSD and by the HDD.
    pub read_hit: [u64; 2],
    /// Write bytes that landed on the SSD and on the HDD.
    pub landed: [u64; 2],
}

impl Usage {
    /// What happened between `before` and `self`.
    pub fn since(self, before: Usage) -> Usage {
        let d2 = |a: [u64; 2], b: [u64; 2]| [a[0] - b[0], a[1] - b[1]];
        Usage {
            busy: [0, 1].map(|i| self.busy[i].saturating_sub(before.busy[i])),
            ssd_written: self.ssd_written - before.ssd_written,
            moved: self.moved - before.moved,
            read_hit: d2(self.read_hit, before.read_hit),
            landed: d2(self.landed, before.landed),
        }
    }
}

/// The tiered volume, and the extents its last admissions brought up (for
/// [`Target::landed`]).
pub struct Hybrid(pub Arc<Volume>, parking_lot::Mutex<Vec<u64>>);

impl Hybrid {
    /// The target for `vol`.
    pub fn new(vol: Arc<Volume>) -> Self {
        Hybrid(vol, parking_lot::Mutex::new(Vec::new()))
    }
}

impl Target for Hybrid {
    fn name(&self) -> &'static str {
        "hybrid"
    }

    fn io(&self, req: &Req, buf: &mut [u8]) -> io::Result<()> {
        let buf = &mut buf[..req.len as usize];
        let r = if req.read {
            self.0.read_hinted(req.offset, buf, req.hint)
        } else {
            self.0.write_hinted(req.offset, buf, false, req.hint)
        };
        r.map_err(|e| io::Error::other(e.to_string()))
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.0
            .discard(offset, len, false, false, false)
            .map_err(|e| io::Error::other(e.to_string()))
    }

    fn volume(&self) -> Option<&Arc<Volume>> {
        Some(&self.0)
    }

    fn after(&self) {
        let mut landed = self.1.lock();
        if let Err(e) = tierd::migrate::admit_pending_noting(&self.0, &mut |e| landed.push(e)) {
            tracing::warn!("admission: {e}");
        }
    }

    fn read_is_slow(&self, offset: u64, len: u64) -> bool {
        self.0.reads_from_hdd(offset, len)
    }

    fn landed(&self) -> Vec<(u64, u64)> {
        let ext = self.0.geometry().extent_size;
        std::mem::take(&mut *self.1.lock())
            .into_iter()
            .map(|e| (e * ext, ext))
            .collect()
    }

    fn usage(&self) -> Usage {
        use tierd::volume::{Stats, Tier};
        let v = &self.0;
        let s = v.stats();
        let two = |a: &[std::sync::atomic::AtomicU64; 2]| [Stats::get(&a[0]), Stats::get(&a[1])];
        let moved = two(&s.migrated_bytes);
        Usage {
            busy: [Tier::Ssd, Tier::Hdd].map(|t| v.model_busy(t).unwrap_or_default()),
            ssd_written: Stats::get(&s.dev_write_bytes[Tier::Ssd.index()]),
            moved: moved[0] + moved[1] + Stats::get(&s.precleaned_bytes),
            read_hit: two(&s.read_hit_bytes),
            landed: two(&s.write_landed_bytes),
        }
    }
}

/// A device alone.
pub struct Pure {
    /// "pure-ssd" or "pure-hdd".
    name: &'static str,
    /// The device.
    dev: Arc<dyn BlockDevice>,
    /// Whether it is the SSD.
    ssd: bool,
    /// Bytes read, bytes written.
    bytes: [AtomicU64; 2],
}

impl Pure {
    /// `dev` alone, as "pure-ssd" (`ssd`) or "pure-hdd".
    pub fn new(dev: Arc<dyn BlockDevice>, ssd: bool) -> Self {
        Pure {
            name: if ssd { "pure-ssd" } else { "pure-hdd" },
            dev,
            ssd,
            bytes: Default::default(),
        }
    }
}

impl Target for Pure {
    fn name(&self) -> &'static str {
        self.name
    }

    fn io(&self, req: &Req, buf: &mut [u8]) -> io::Result<()> {
        let buf = &mut buf[..req.len as usize];
        self.bytes[usize::from(!req.read)].fetch_add(req.len, Ordering::Relaxed);
        if req.read {
            self.dev.read_at(buf, req.offset)
        } else {
            self.dev.write_at(buf, req.offset)
        }
    }

    fn trim(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn read_is_slow(&self, _offset: u64, _len: u64) -> bool {
        !self.ssd
    }

    fn usage(&self) -> Usage {
        let [read, written] = [0, 1].map(|i| self.bytes[i].load(Ordering::Relaxed));
        let busy = self.dev.model_busy().unwrap_or_default();
        let on = |x: u64| if self.ssd { [x, 0] } else { [0, x] };
        Usage {
            busy: if self.ssd {
                [busy, Duration::ZERO]
            } else {
                [Duration::ZERO, busy]
            },
            ssd_written: if self.ssd { written } else { 0 },
            moved: 0,
            read_hit: on(read),
            landed: on(written),
        }
    }
}

/// Which clock a run uses.
#[derive(Clone)]
pub enum Mode {
    /// Deterministic virtual time.
    Virtual(Arc<VirtualSched>),
    /// Wall-clock time.
    Real(Arc<SystemClock>),
}

/// What one run measured.
#[derive(Clone)]
pub struct Measurement {
    /// Requests completed.
    pub ops: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Run length.
    pub elapsed: Duration,
    /// Latency in nanoseconds.
    pub hist: Histogram<u64>,
    /// Latency of the reads alone, and of the writes alone (trims and
    /// flushes in neither), in nanoseconds.
    pub by_op: [Histogram<u64>; 2],
    /// Requests completed per `bin` of time.
    pub series: Vec<u64>,
    /// Bin width of `series`.
    pub bin: Duration,
    /// Errors seen (should be 0).
    pub errors: u64,
    /// Requests done by the background workers.
    pub bg_ops: u64,
    /// Bytes moved by the background workers.
    pub bg_bytes: u64,
}

impl Measurement {
    pub(crate) fn new(bin: Duration) -> Self {
        let hist = || {
            Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
        };
        Measurement {
            ops: 0,
            bytes: 0,
            elapsed: Duration::ZERO,
            hist: hist(),
            by_op: [hist(), hist()],
            series: Vec::new(),
            bin,
            errors: 0,
            bg_ops: 0,
            bg_bytes: 0,
        }
    }

    pub(crate) fn record(
        &mut self,
        start: Duration,
        t0: Duration,
        done: Duration,
        len: u64,
        op: Option<IoKind>,
    ) {
        self.ops += 1;
        self.bytes += len;
        let ns = (done.saturating_sub(t0)).as_nanos().max(1) as u64;
        let _ = self.hist.record(ns.min(3_600_000_000_000));
        if let Some(k) = op {
            let _ = self.by_op[k as usize].record(ns.min(3_600_000_000_000));
        }
        let b = (done.saturating_sub(start).as_nanos() / self.bin.as_nanos().max(1)) as usize;
        if self.series.len() <= b {
            self.series.resize(b + 1, 0);
        }
        self.series[b] += 1;
    }

    pub(crate) fn merge(&mut self, o: &Measurement) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.bg_ops += o.bg_ops;
        self.bg_bytes += o.bg_bytes;
        let _ = self.hist.add(&o.hist);
        for (a, b) in self.by_op.iter_mut().zip(&o.by_op) {
            let _ = a.add(b);
        }
        if self.series.len() < o.series.len() {
            self.series.resize(o.series.len(), 0);
        }
        for (a, b) in self.series.iter_mut().zip(&o.series) {
            *a += b;
        }
    }

    /// Requests per second.
    pub fn iops(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// MiB per second.
    pub fn mibps(&self) -> f64 {
        self.bytes as f64 / (1u64 << 20) as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Latency quantile in microseconds.
    pub fn lat_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    /// Mean latency in microseconds.
    pub fn mean_us(&self) -> f64 {
        self.hist.mean() / 1000.0
    }

    /// The reads' or the writes' latency: mean, p50 and p99 in
    /// microseconds, and how many; `None` when there were none.
    pub fn op_latency(&self, k: IoKind) -> Option<OpLatency> {
        let h = &self.by_op[k as usize];
        (!h.is_empty()).then(|| OpLatency {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
        })
    }
}

/// Reads or writes, for the latencies kept apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// A read.
    Read = 0,
    /// A write.
    Write = 1,
}

impl IoKind {
    /// The kind of a read (`true`) or a write.
    pub fn of(read: bool) -> IoKind {
        if read {
            IoKind::Read
        } else {
            IoKind::Write
        }
    }
}

/// Latency of one kind of request over a run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OpLatency {
    /// Requests of the kind.
    pub count: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

/// A workload run.
pub struct Run<'a> {
    /// The access specification.
    pub spec: Spec,
    /// Outstanding requests (one worker each).
    pub qd: usize,
    /// How long.
    pub duration: Duration,
    /// Seed.
    pub seed: u64,
    /// Bin width of the time series.
    pub bin: Duration,
    /// Hot-set rotation to apply from `shift_at` on.
    pub shift: Option<(Duration, u64)>,
    /// The hybrid's migrator, run alongside.
    pub migrator: Option<&'a Migrator>,
    /// More workers with another specification, running at the same time
    /// (a scan next to a hot set, a writer next to a reader); counted in
    /// [`Measurement::bg_ops`] and [`Measurement::bg_bytes`] only.
    pub background: Option<(Spec, usize)>,
}

/// Run `run` against `target`.
pub fn execute(mode: &Mode, target: &dyn Target, run: &Run) -> Measurement {
    let bg_len = run
        .background
        .as_ref()
        .and_then(|(s, _)| s.sizes.iter().map(|x| x.0).max())
        .unwrap_or(0);
    let max_len = run
        .spec
        .sizes
        .iter()
        .map(|s| s.0)
        .max()
        .unwrap_or(4096)
        .max(bg_len) as usize;
    let nbg = run.background.as_ref().map(|b| b.1).unwrap_or(0);
    let gen_for = |w: usize| match &run.background {
        Some((spec, n)) if w >= run.qd => {
            Generator::new(spec.clone(), run.seed ^ 0xb9, w - run.qd, *n)
        }
        _ => Generator::new(run.spec.clone(), run.seed, w, run.qd),
    };
    match mode {
        Mode::Virtual(sched) => {
            let finished = AtomicUsize::new(0);
            let start = sched.now();
            let extra = usize::from(run.migrator.is_some());
            // The migrator is paused when the run ends (see below), and
            // resumes with the next run.
            if let Some(mig) = run.migrator {
                mig.set_paused(false);
            }
            let parts = sched.phase(1 + extra, |p, i| {
                let mut m = Measurement::new(run.bin);
                if i == 1 {
                    if let Some(mig) = run.migrator {
                        let interval = mig.config().interval;
                        // A round at the start of every run, then one per
                        // interval: short runs back to back still migrate.
                        // Its pacing waits on the volume's clock, the
                        // scheduler's: other participants run meanwhile.
                        loop {
                            p.set_own_now(p.now());
                            let r = mig.run_round();
                            p.sleep_until(p.own_now());
                            if finished.load(Ordering::Acquire) >= run.qd {
                                break;
                            }
                            if !r.more_waiting() {
                                p.sleep_until(p.now() + interval);
                            }
                            if finished.load(Ordering::Acquire) >= run.qd {
                                break;
                            }
                        }
                    }
                    return m;
                }
                // All `qd` workers are driven from this one thread as an
                // event loop (each worker's next issue time in a heap), so a
                // request costs no thread hand-off; the scheduler only
                // switches when the migrator is due first.
                let _ = i;
                let mut gens: Vec<Generator> = (0..run.qd + nbg).map(gen_for).collect();
                let mut heap: BinaryHeap<Reverse<(Duration, usize)>> =
                    (0..run.qd + nbg).map(|w| Reverse((start, w))).collect();
                let mut buf = vec![0u8; max_len];
                let end = start + run.duration;
                let mut shifted = false;
                while let Some(Reverse((t0, w))) = heap.pop() {
                    if t0 >= end {
                        continue;
                    }
                    p.sleep_until(t0);
                    if let Some((at, shift)) = run.shift {
                        if !shifted && t0 >= start + at {
                            gens.iter_mut().for_each(|g| g.set_shift(shift));
                            shifted = true;
                        }
                    }
                    let req = gens[w].next_req();
                    p.set_own_now(t0);
                    if target.io(&req, &mut buf).is_err() {
                        m.errors += 1;
                    }
                    // A request that touched no device (unmapped space)
                    // still takes a moment, or virtual time would stall.
                    let done = p.own_now().max(t0 + MIN_REQUEST);
                    if w < run.qd {
                        m.record(start, t0, done, req.len, Some(IoKind::of(req.read)));
                    } else {
                        m.bg_ops += 1;
                        m.bg_bytes += req.len;
                    }
                    p.set_own_now(done);
                    target.after();
                    heap.push(Reverse((done, w)));
                }
                finished.store(run.qd, Ordering::Release);
                // The migrator's round ends with the run (between batches),
                // so the run's length is the time measured.
                if let Some(mig) = run.migrator {
                    mig.set_paused(true);
                }
                m
            });
            if let Some(mig) = run.migrator {
                mig.set_paused(false);
            }
            let mut total = Measurement::new(run.bin);
            for m in &parts {
                total.merge(m);
            }
            total.elapsed = run.duration;
            total
        }
        Mode::Real(clock) => {
            let real_now = || clock.now();
            let start = real_now();
            let parts: Vec<Measurement> = std::thread::scope(|s| {
                let gen_for = &gen_for;
                let hs: Vec<_> = (0..run.qd + nbg)
                    .map(|i| {
                        s.spawn(move || {
                            let mut m = Measurement::new(run.bin);
                            let mut gen = gen_for(i);
                            let mut buf = vec![0u8; max_len];
                            let mut shifted = false;
                            while real_now() < start + run.duration {
                                if let Some((at, shift)) = run.shift {
                                    if !shifted && real_now() >= start + at {
                                        gen.set_shift(shift);
                                        shifted = true;
                                    }
                                }
                                let req = gen.next_req();
                                let t0 = real_now();
                                if target.io(&req, &mut buf).is_err() {
                                    m.errors += 1;
                                }
                                if i < run.qd {
                                    m.record(
                                        start,
                                        t0,
                                        real_now(),
                                        req.len,
                                        Some(IoKind::of(req.read)),
                                    );
                                } else {
                                    m.bg_ops += 1;
                                    m.bg_bytes += req.len;
                                }
                                // No `after`: on the real clock the
                                // migrator's own admitting thread runs, as
                                // in the daemon.
                            }
                            m
                        })
                    })
                    .collect();
                hs.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            let mut total = Measurement::new(run.bin);
            for m in &parts {
                total.merge(m);
            }
            total.elapsed = real_now().saturating_sub(start);
            total
        }
    }
}
