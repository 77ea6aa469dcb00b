//! Trace replay: a recorded or imported block trace (`tierd::trace`, any
//! supported format) played against the three targets on the virtual
//! clock, open loop (each request issued at its recorded time, whatever
//! the ones before it are doing), with the hybrid's migrator running
//! beside it; and the same trace reduced to extent references for the
//! classic policies and the optimum ([`crate::sim`]).
//!
//! **Fitting.** A trace's addresses are laid into the bench volume's HDD
//! part: every 1 MiB extent it touches (in the bench's extent size) keeps
//! its offsets inside the extent, and the touched extents are packed in
//! address order from the first extent the used state put on the HDD, so
//! the trace's data starts out on the HDD, as the drive suites' does, and
//! a trace of any span replays on a small volume. Extent-level reuse is
//! unchanged (one extent maps to one extent), and so is sequentiality
//! across extents: a request spanning two extents touches both, and two
//! extents touched with nothing touched between them stay neighbours.
//!
//! Flushes are not replayed (the timing models have no cache to flush);
//! trims are. Stream hints are worked out as the daemon does: a
//! [`StreamDetector`] per trace connection and one [`VolumeStreams`] over
//! all of them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tierd::heat::{StreamDetector, VolumeStreams};
use tierd::migrate::Migrator;
use tierd::trace::{import, Op, Record};
use tierd::units::IoHint;

use super::sched::VirtualSched;
use super::sim::Access;
use super::target::{IoKind, Measurement, Target, MIN_REQUEST};
use super::workload::Req;
use super::BenchError;

/// Where a replay's data lies in a volume at a stated fill: the share of
/// its logical extents that hold data before the run, written in address
/// order as a used disk's would be. A fill in address order puts the first
/// `ssd_slots` extents on the SSD and the rest on the HDD; the trace's
/// footprint starts at the first extent that went to the HDD (so its data
/// starts out there, and the SSD holds other, older data), and filler
/// surrounds it up to the fill. The bench and `tierd trace replay` lay a
/// volume out the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    /// The volume's logical extents.
    pub extents: u64,
    /// First extent of the trace's footprint.
    pub base: u64,
    /// Extents of the footprint.
    pub footprint: u64,
    /// Extents `[0, filled)` hold data before the run (the footprint among
    /// them).
    pub filled: u64,
}

impl Layout {
    /// Lay a footprint of `footprint` extents into a volume of `extents`
    /// logical extents, of which a fill in address order puts the first
    /// `ssd_slots` on the SSD, at fill `fill` (0 < fill <= 1). The
    /// footprint always holds data, so a fill too small for it rises to
    /// just cover it ([`Layout::fill`] says what it is).
    pub fn new(
        extents: u64,
        ssd_slots: u64,
        footprint: u64,
        fill: f64,
    ) -> Result<Layout, BenchError> {
        if !(fill > 0.0 && fill <= 1.0) {
            return Err(BenchError::Options(format!(
                "--fill {fill}: give the share of the volume that holds data, more than 0 and at most 1"
            )));
        }
        let base = ssd_slots.min(extents);
        if base + footprint > extents {
            return Err(BenchError::Options(format!(
                "the trace touches {footprint} extents, more than the {} past the SSD's {ssd_slots} the volume has: give it a larger --hdd-size",
                extents - base
            )));
        }
        let filled = ((fill * extents as f64).round() as u64).clamp(base + footprint, extents);
        Ok(Layout {
            extents,
            base,
            footprint,
            filled,
        })
    }

    /// The share of the volume's extents that hold data.
    pub fn fill(&self) -> f64 {
        self.filled as f64 / self.extents.max(1) as f64
    }

    /// Whether extent `e` holds data before the run.
    pub fn holds(&self, e: u64) -> bool {
        e < self.filled
    }
}

/// A trace laid into the bench volume.
#[derive(Debug, Clone)]
pub struct Fitted {
    /// A short name (the file's stem).
    pub name: String,
    /// What made the trace (its header).
    pub source: String,
    /// Reads, writes and trims, in time order, at their new offsets.
    pub records: Vec<Record>,
    /// Extents the trace touches (its footprint in the bench's extents).
    pub extents: u64,
    /// First byte of the footprint in the volume.
    pub base: u64,
    /// Its span in the original trace (lowest offset, highest end).
    pub span: (u64, u64),
    /// Flushes left out.
    pub flushes: u64,
}

impl Fitted {
    /// Read bytes and write bytes.
    pub fn bytes(&self) -> (u64, u64) {
        let mut rw = (0, 0);
        for r in &self.records {
            match r.op {
                Op::Read => rw.0 += u64::from(r.len),
                Op::Write => rw.1 += u64::from(r.len),
                _ => {}
            }
        }
        rw
    }

    /// The trace's length.
    pub fn duration(&self) -> Duration {
        Duration::from_nanos(self.records.last().map_or(0, |r| r.t_ns))
    }

    /// The reads and writes as the simulators take them.
    pub fn accesses(&self) -> Vec<Access> {
        self.records
            .iter()
            .filter(|r| matches!(r.op, Op::Read | Op::Write) && r.len > 0)
            .map(|r| Access {
                t_ns: r.t_ns,
                offset: r.offset,
                len: u64::from(r.len),
                write: r.op == Op::Write,
            })
            .collect()
    }
}

/// A trace as read, before it is laid into a volume.
#[derive(Debug, Clone)]
pub struct Raw {
    /// A short name (the file's stem).
    pub name: String,
    /// What made the trace (its header).
    pub source: String,
    /// Reads, writes and trims, as recorded.
    pub records: Vec<Record>,
    /// Flushes left out.
    pub flushes: u64,
}

impl Raw {
    /// Extents of `extent` bytes the trace touches.
    pub fn footprint(&self, extent: u64) -> u64 {
        let extent = extent.max(1);
        let mut touched = std::collections::BTreeSet::new();
        for r in &self.records {
            let stop = r.offset.saturating_add(u64::from(r.len));
            touched.extend(r.offset / extent..stop.div_ceil(extent));
        }
        touched.len() as u64
    }

    /// Lay the trace into extents of `extent` bytes from byte `base`; the
    /// footprint must end by `end`.
    pub fn fit(&self, extent: u64, base: u64, end: u64) -> Result<Fitted, BenchError> {
        fit(
            self.name.clone(),
            self.source.clone(),
            self.records.clone(),
            self.flushes,
            extent,
            base,
            end,
        )
    }
}

/// Read `path` (any supported format, detected).
pub fn read(path: &Path) -> Result<Raw, BenchError> {
    let (header, records) = import::open(path, None).map_err(|e| BenchError::Setup {
        what: format!("reading the trace {}", path.display()),
        source: Box::new(e),
    })?;
    let mut kept = Vec::new();
    let mut flushes = 0u64;
    for r in records {
        let r = r.map_err(|e| BenchError::Setup {
            what: format!("reading the trace {}", path.display()),
            source: Box::new(e),
        })?;
        match r.op {
            Op::Flush => flushes += 1,
            _ if r.len == 0 => {}
            _ => kept.push(r),
        }
    }
    if kept.is_empty() {
        return Err(BenchError::Options(format!(
            "the trace {} has no read, write or trim to replay",
            path.display()
        )));
    }
    let name = path
        .file_stem()
        .map_or_else(|| "trace".to_string(), |s| s.to_string_lossy().into_owned());
    Ok(Raw {
        name,
        source: header.source,
        records: kept,
        flushes,
    })
}

/// Read `path` (any supported format, detected) and lay it into extents of
/// `extent` bytes from byte `base`; the footprint must end by `end`.
pub fn load(path: &Path, extent: u64, base: u64, end: u64) -> Result<Fitted, BenchError> {
    read(path)?.fit(extent, base, end)
}

/// Lay `records` into the volume (see the module docs).
pub fn fit(
    name: String,
    source: String,
    mut records: Vec<Record>,
    flushes: u64,
    extent: u64,
    base: u64,
    end: u64,
) -> Result<Fitted, BenchError> {
    if records.is_empty() {
        return Err(BenchError::Options(format!(
            "the trace {name} has no read, write or trim to replay"
        )));
    }
    let extent = extent.max(1);
    let mut touched: BTreeMap<u64, u64> = BTreeMap::new();
    let mut span = (u64::MAX, 0u64);
    for r in &records {
        let stop = r.offset.saturating_add(u64::from(r.len));
        span = (span.0.min(r.offset), span.1.max(stop));
        for e in r.offset / extent..stop.div_ceil(extent) {
            touched.insert(e, 0);
        }
    }
    for (i, v) in touched.values_mut().enumerate() {
        *v = i as u64;
    }
    let extents = touched.len() as u64;
    let first = base / extent;
    if (first + extents) * extent > end {
        return Err(BenchError::Options(format!(
            "the trace {name} touches {extents} extents of {} MiB, more than the {} the bench volume's HDD part has room for: give the volume a larger --hdd-size",
            extent >> 20,
            end.saturating_sub(base) / extent
        )));
    }
    for r in &mut records {
        let e = r.offset / extent;
        let at = touched.get(&e).copied().unwrap_or(0);
        r.offset = (first + at) * extent + r.offset % extent;
    }
    // Stable: records at the same time keep their order.
    records.sort_by_key(|r| r.t_ns);
    Ok(Fitted {
        name,
        source,
        records,
        extents,
        base: first * extent,
        span,
        flushes,
    })
}

/// When copies to flash made after earlier requests are done, on the
/// replay's clock. The replay runs a target's work after a request (its
/// admissions, [`Target::after`]) at once, in the order of the trace: a
/// copy issued behind a queue on the HDD is done a minute later on the
/// clock, yet its mapping changed before the next request was sent. Left
/// so, every read arriving in that minute was served from flash though its
/// data was not there yet (msr-web0 at 10x: 72 % of the reads of admitted
/// extents, 80 s early on average). A read of such a range is sent when the
/// copy is done instead, as a read arriving in the middle of a copy waits
/// for it, or for the HDD queue the copy is in, on a real drive.
#[derive(Debug, Default)]
struct Landing {
    /// Range start -> (range end, when its copy is done).
    at: BTreeMap<u64, (u64, Duration)>,
    /// The longest range noted.
    longest: u64,
}

impl Landing {
    /// Ranges copied, done at `done`.
    fn note(&mut self, ranges: Vec<(u64, u64)>, done: Duration) {
        for (start, len) in ranges {
            self.at.insert(start, (start + len, done));
            self.longest = self.longest.max(len);
        }
    }

    /// When a read of `offset..offset + len` arriving at `t0` can be sent:
    /// at `t0`, or when the last copy it overlaps is done. Copies done by
    /// `t0` are forgotten.
    fn ready(&mut self, offset: u64, len: u64, t0: Duration) -> Duration {
        let end = offset + len;
        let from = offset.saturating_sub(self.longest);
        let at = self
            .at
            .range(from..end)
            .filter(|(_, (e, _))| *e > offset)
            .map(|(_, (_, d))| *d)
            .fold(t0, Duration::max);
        if self.at.len() > 4096 {
            self.at.retain(|_, (_, d)| *d > t0);
        }
        at
    }
}

/// Requests a daemon serves at once for `tierd trace replay` (two
/// connections by default, `server.nbd-threads` 16 threads each): the rest
/// wait on the socket, not in the HDD's queue.
pub const SERVED_AT_ONCE: usize = 32;

/// Of them, reads of the HDD served at once at most with the NBD server's
/// slow lane (`server.nbd-slow-lane`, off by default): it leaves a quarter
/// of each connection's threads to other requests (`src/nbd/lanes.rs`)
/// and queues the rest of those reads in order. The replay models the
/// daemon's default, without the lane ([`Serving::new`]).
pub const SLOW_LANE_AT_ONCE: usize = SERVED_AT_ONCE - SERVED_AT_ONCE / 4;

/// The server's threads: a request is taken up when one of
/// [`SERVED_AT_ONCE`] is free, a read the target serves from the HDD
/// ([`Target::read_is_slow`]) only while fewer than `slow_cap` such reads
/// are served; each lane in the order sent. Without this bound every
/// request of a flood queued on the drive at once, where the daemon holds
/// 32 and the rest wait, looked up only when taken up: msr-web0 at 10x
/// queued minutes of reads on the bench's HDD against 0.1 to 0.3 s on the
/// daemon's (docs/bench.md, "Again on 2026-12-06"). The wait for a thread
/// counts in the request's latency, as the client sees it.
#[derive(Debug)]
struct Serving {
    /// Slow reads served at once at most.
    slow_cap: usize,
    /// When the requests taken up start and end: other requests, slow
    /// reads.
    spans: [Vec<(Duration, Duration)>; 2],
    /// When the last request of each lane was taken up.
    last: [Duration; 2],
}

impl Serving {
    /// No request served yet; at most `slow_cap` slow reads at once
    /// ([`SERVED_AT_ONCE`]: no slow lane, the daemon's default;
    /// [`SLOW_LANE_AT_ONCE`] with it).
    fn new(slow_cap: usize) -> Serving {
        Serving {
            slow_cap,
            spans: Default::default(),
            last: Default::default(),
        }
    }

    /// When a request sent at `t0` (no earlier than the last one sent),
    /// a slow read if `slow`, is taken up.
    fn take(&mut self, t0: Duration, slow: bool) -> Duration {
        for spans in &mut self.spans {
            spans.retain(|(_, e)| *e > t0);
        }
        let lane = usize::from(slow);
        let mut at = t0.max(self.last[lane]);
        loop {
            // Served at `at`: taken up by then, not ended.
            let on = |(s, e): &&(Duration, Duration)| *s <= at && *e > at;
            let busy = |spans: &[(Duration, Duration)]| spans.iter().filter(on).count();
            let (others, slows) = (busy(&self.spans[0]), busy(&self.spans[1]));
            let lane_full = slow && slows >= self.slow_cap;
            if !lane_full && others + slows < SERVED_AT_ONCE {
                break;
            }
            // The first end that frees what it waits for.
            let next = if lane_full {
                self.spans[1].iter().filter(on).map(|(_, e)| *e).min()
            } else {
                let all = self.spans[0].iter().chain(&self.spans[1]);
                all.filter(on).map(|(_, e)| *e).min()
            };
            match next {
                Some(e) => at = e,
                None => break,
            }
        }
        self.last[lane] = at;
        at
    }

    /// A request taken up at `start` (a slow read if `slow`) ends at `end`.
    fn done(&mut self, start: Duration, end: Duration, slow: bool) {
        self.spans[usize::from(slow)].push((start, end));
    }
}

/// Replay `trace` against `target` on the virtual clock, `speed` times
/// faster than recorded, with `migrator` (the hybrid's) running rounds
/// beside it. Every request is measured from its issue time to its end.
pub fn execute(
    sched: &std::sync::Arc<VirtualSched>,
    target: &dyn Target,
    trace: &Fitted,
    speed: f64,
    migrator: Option<&Migrator>,
) -> Measurement {
    let speed = if speed.is_finite() && speed > 0.0 {
        speed
    } else {
        1.0
    };
    let start = sched.now();
    let done = AtomicBool::new(false);
    let bin = Duration::from_secs(1).max(Duration::from_secs_f64(
        trace.duration().as_secs_f64() / speed / 200.0,
    ));
    if let Some(mig) = migrator {
        mig.set_paused(false);
    }
    let parts = sched.phase(1 + usize::from(migrator.is_some()), |p, i| {
        let mut m = Measurement::new(bin);
        if i == 1 {
            if let Some(mig) = migrator {
                let interval = mig.config().interval;
                while !done.load(Ordering::Acquire) {
                    p.set_own_now(p.now());
                    let r = mig.run_round();
                    p.sleep_until(p.own_now());
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                    if !r.more_waiting() {
                        p.sleep_until(p.now() + interval);
                    }
                }
            }
            return m;
        }
        let max = trace
            .records
            .iter()
            .map(|r| r.len as usize)
            .max()
            .unwrap_or(4096);
        let mut buf = vec![0u8; max];
        let all = VolumeStreams::new();
        let mut own: BTreeMap<u16, StreamDetector> = BTreeMap::new();
        let mut last_end = start;
        let mut landing = Landing::default();
        let mut serving = Serving::new(SERVED_AT_ONCE);
        for r in &trace.records {
            let t0 = start + Duration::from_secs_f64(r.t_ns as f64 / 1e9 / speed);
            p.sleep_until(t0);
            // Taken up when one of the server's threads is free, then, for
            // a read of data whose copy to flash is not done yet on this
            // clock, when it is (see `Serving`, `Landing`).
            let len = u64::from(r.len);
            // A read is slow if the HDD serves it, or if it waits for a
            // copy from the HDD still on its way (the daemon's read of an
            // extent whose copy is not done reads the HDD).
            let slow = r.op == Op::Read
                && (target.read_is_slow(r.offset, len) || landing.ready(r.offset, len, t0) > t0);
            let taken = serving.take(t0, slow);
            let issue = match r.op {
                Op::Read => landing.ready(r.offset, u64::from(r.len), taken),
                _ => taken,
            };
            p.set_own_now(issue);
            let ok = match r.op {
                Op::Trim | Op::Zero => target.trim(r.offset, len).is_ok(),
                Op::Read | Op::Write => {
                    let mine = own.entry(r.conn).or_default().observe(r.offset, len);
                    let theirs = all.observe(r.offset, len);
                    let req = Req {
                        read: r.op == Op::Read,
                        offset: r.offset,
                        len,
                        hint: IoHint {
                            seq_run: mine.seq_run.max(theirs.seq_run),
                        },
                    };
                    target.io(&req, &mut buf[..r.len as usize]).is_ok()
                }
                Op::Flush => true,
            };
            if !ok {
                m.errors += 1;
            }
            let end = p.own_now().max(t0 + MIN_REQUEST);
            let kind = match r.op {
                Op::Read => Some(IoKind::Read),
                Op::Write => Some(IoKind::Write),
                _ => None,
            };
            serving.done(taken, end, slow);
            m.record(start, t0, end, len, kind);
            last_end = last_end.max(end);
            p.set_own_now(end);
            target.after();
            landing.note(target.landed(), p.own_now());
        }
        // The run lasts until its last request completed: an overloaded
        // target finishes long after the trace's last arrival.
        m.elapsed = last_end.saturating_sub(start);
        done.store(true, Ordering::Release);
        if let Some(mig) = migrator {
            mig.set_paused(true);
        }
        m
    });
    if let Some(mig) = migrator {
        mig.set_paused(false);
    }
    let mut total = Measurement::new(bin);
    for m in &parts {
        total.merge(m);
    }
    // The replay's own length (the migrator's last round may run past it).
    total.elapsed = parts.iter().map(|m| m.elapsed).max().unwrap_or_default();
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t_ns: u64, offset: u64, len: u32, op: Op) -> Record {
        Record {
            t_ns,
            offset,
            len,
            conn: 0,
            op,
            fua: false,
        }
    }

    #[test]
    fn a_layout_puts_the_footprint_past_the_ssd_and_filler_around_it() {
        let l = Layout::new(1000, 100, 50, 0.7).expect("fits");
        assert_eq!((l.base, l.footprint, l.filled), (100, 50, 700));
        assert!((l.fill() - 0.7).abs() < 1e-9);
        assert!(l.holds(699) && !l.holds(700));
        // Too small a fill rises to cover the footprint.
        let l = Layout::new(1000, 100, 50, 0.01).expect("fits");
        assert_eq!(l.filled, 150);
        assert!(Layout::new(1000, 100, 950, 0.7).is_err());
        assert!(Layout::new(1000, 100, 50, 0.0).is_err());
        assert!(Layout::new(1000, 100, 50, 1.5).is_err());
        assert_eq!(Layout::new(1000, 100, 50, 1.0).expect("fits").filled, 1000);
    }

    #[test]
    fn fitting_packs_touched_extents_in_order_and_keeps_offsets_inside_them() {
        const E: u64 = 1 << 20;
        let records = vec![
            rec(0, 100 * E + 4096, 4096, Op::Read),
            // Spans extents 7 and 8.
            rec(5, 8 * E - 4096, 8192, Op::Write),
            rec(3, 100 * E, 512, Op::Trim),
        ];
        let f = fit("t".into(), "s".into(), records, 2, E, 10 * E, 64 * E).expect("fits");
        assert_eq!(f.extents, 3);
        assert_eq!(f.base, 10 * E);
        assert_eq!(f.flushes, 2);
        assert_eq!(f.span, (7 * E + E - 4096, 100 * E + 8192));
        let got: Vec<(u64, u64, Op)> = f.records.iter().map(|r| (r.t_ns, r.offset, r.op)).collect();
        // Extent 7 -> 10, 8 -> 11 (neighbours stay neighbours), 100 -> 12.
        assert_eq!(
            got,
            vec![
                (0, 12 * E + 4096, Op::Read),
                (3, 12 * E, Op::Trim),
                (5, 11 * E - 4096, Op::Write),
            ]
        );
        assert_eq!(f.bytes(), (4096, 8192));
        assert_eq!(f.accesses().len(), 2);
        assert!(fit("t".into(), "s".into(), Vec::new(), 0, E, 0, E).is_err());
        let big = vec![rec(0, 0, 4096, Op::Read), rec(1, 5 * E, 4096, Op::Read)];
        let e = fit("t".into(), "s".into(), big, 0, E, 0, E).expect_err("no room");
        assert!(e.to_string().contains("--hdd-size"), "{e}");
    }

    #[test]
    fn a_read_of_a_range_whose_copy_is_not_done_waits_for_it() {
        let ms = Duration::from_millis;
        let mut l = Landing::default();
        const M: u64 = 1 << 20;
        // Extent 3's copy is done at 5 s; piece 2 of 256 KiB at 2 s.
        l.note(vec![(3 * M, M)], ms(5000));
        l.note(vec![(2 * M / 4, M / 4)], ms(2000));
        // A read inside extent 3 at 1 s waits until 5 s; one straddling
        // extents 2 and 3 too; one ending where extent 3 begins does not.
        assert_eq!(l.ready(3 * M + 4096, 4096, ms(1000)), ms(5000));
        assert_eq!(l.ready(3 * M - 4096, 8192, ms(1000)), ms(5000));
        assert_eq!(l.ready(3 * M - 4096, 4096, ms(1000)), ms(1000));
        // The 256 KiB piece: inside it waits, just past it not.
        assert_eq!(l.ready(M / 2 + 8192, 4096, ms(1000)), ms(2000));
        assert_eq!(l.ready(3 * M / 4, 4096, ms(1000)), ms(1000));
        // Once done, a read goes at its own time.
        assert_eq!(l.ready(3 * M, 4096, ms(6000)), ms(6000));
    }

    #[test]
    fn a_request_waits_for_a_free_thread_and_requests_are_taken_up_in_order() {
        let ms = Duration::from_millis;
        let mut s = Serving::new(SERVED_AT_ONCE);
        // Take a request sent at `t0` up and end it at `end`; when taken.
        let go = |s: &mut Serving, t0: u64, end: u64, slow: bool| {
            let at = s.take(ms(t0), slow);
            s.done(at, ms(end), slow);
            at
        };
        // A flood at 0: the first SERVED_AT_ONCE go at once, each ending
        // at 100 ms, 200 ms, ...
        for i in 0..SERVED_AT_ONCE as u64 {
            assert_eq!(go(&mut s, 0, 100 * (i + 1), false), ms(0));
        }
        // The next waits for the first to end, the one after for the
        // second.
        assert_eq!(go(&mut s, 1, 10_000, false), ms(100));
        assert_eq!(go(&mut s, 2, 10_000, false), ms(200));
        // Sent later than a thread freed: at its own time, never before
        // one taken up earlier.
        assert_eq!(go(&mut s, 350, 10_000, false), ms(350));
    }

    #[test]
    fn slow_reads_take_at_most_their_lane_and_leave_the_rest_to_other_requests() {
        let ms = Duration::from_millis;
        let mut s = Serving::new(SLOW_LANE_AT_ONCE);
        let go = |s: &mut Serving, t0: u64, end: u64, slow: bool| {
            let at = s.take(ms(t0), slow);
            s.done(at, ms(end), slow);
            at
        };
        // A flood of HDD reads at 0, each ending 1 s after the last.
        for i in 0..SLOW_LANE_AT_ONCE as u64 {
            assert_eq!(go(&mut s, 0, 1000 * (i + 1), true), ms(0));
        }
        // The next HDD read waits for the first to end; the one after it
        // for the second, in order.
        assert_eq!(go(&mut s, 1, 60_000, true), ms(1000));
        assert_eq!(go(&mut s, 2, 60_000, true), ms(2000));
        // Writes sent meanwhile go at once, on the threads left: a quarter
        // (the two reads waiting for the lane hold no thread yet).
        for i in 0..(SERVED_AT_ONCE - SLOW_LANE_AT_ONCE) as u64 {
            assert_eq!(go(&mut s, 3, 10 + i, false), ms(3), "write {i}");
        }
        // With every thread taken, the next waits for the first to end,
        // a write's at 10 ms.
        assert_eq!(go(&mut s, 4, 11, false), ms(10));
    }
}
