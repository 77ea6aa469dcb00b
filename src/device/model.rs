//! Timing models of real drives, used by [`super::TimedDevice`]: given an
//! operation and the time it is submitted, a model says when it completes.
//! Parameters come from datasheets (see docs/device-models.md).
//!
//! - [`HddModel`]: seek time as a function of seek distance fitted to the
//!   track-to-track, average and full-stroke figures (Lee's model:
//!   `t2t + A·√u + B·u` for a seek across fraction `u` of the stroke);
//!   rotational position kept from the clock, so a sequential request pays no
//!   rotation and a random one half a turn on average; zoned transfer rate
//!   falling linearly from the outer to the inner tracks; command queueing
//!   (up to `queue_depth`) with shortest-positioning-time-first reordering,
//!   approximated at submission: a request queued behind others seeks from
//!   the queued request nearest to it, as SPTF would arrange; a write cache
//!   that completes writes at interface speed while it has room and destages
//!   them in the background; FLUSH waits for the cache to drain; a
//!   read-ahead buffer of a few segments: a read that continues a recent
//!   read (or lands just past it) makes the drive read on to `readahead`
//!   bytes, and later reads inside a segment are served from the buffer as
//!   soon as the media has passed them, in whatever order they arrive. So
//!   sequential reads keep their rate when they queue, out of order, or as
//!   several interleaved streams, as a drive's segmented cache keeps it;
//!   likewise the write cache destages a stream's writes together, one
//!   positioning per `readahead` bytes.
//! - [`SsdModel`]: controller overhead, `units` flash units working in
//!   parallel and a shared link, so IOPS grows with queue depth; an optional
//!   write buffer that absorbs writes and, once full, exposes the program
//!   speed (the write cliff).
//! - [`RemoteModel`]: a capacity tier on another machine: a round trip per
//!   request, the server's own service time (requests overlap there), and
//!   the bandwidth of the link each way, shared in order of arrival.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// What a model is asked to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A read.
    Read,
    /// A write.
    Write,
    /// A cache flush.
    Flush,
}

/// A drive's timing.
pub trait TimingModel: Send + 'static {
    /// Completion time of an operation submitted at `now`.
    fn submit(&mut self, kind: OpKind, offset: u64, len: u64, now: Duration) -> Duration;
    /// The model's name.
    fn name(&self) -> &'static str;
    /// Whether it models a remote tier (whose link is measured).
    fn remote(&self) -> bool {
        false
    }
    /// Time the device's mechanism spent serving so far (a disk's head
    /// time: seeks, rotation, transfers, queued writes destaged included),
    /// when the model keeps one; `None` lets the caller measure the time
    /// with an operation in flight instead.
    fn mechanism_time(&self) -> Option<Duration> {
        None
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// Datasheet parameters of a hard disk.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HddParams {
    /// Model name.
    pub name: &'static str,
    /// Spindle speed.
    pub rpm: f64,
    /// Track-to-track seek, seconds.
    pub seek_t2t: f64,
    /// Average seek (a third of the stroke), seconds.
    pub seek_avg: f64,
    /// Full-stroke seek, seconds.
    pub seek_full: f64,
    /// Sustained transfer at the outer edge, bytes/s.
    pub rate_outer: f64,
    /// Sustained transfer at the inner edge, bytes/s.
    pub rate_inner: f64,
    /// Controller overhead per command, seconds.
    pub overhead: f64,
    /// Interface bandwidth, bytes/s.
    pub link: f64,
    /// Write cache, bytes.
    pub cache: u64,
    /// Commands queued at most (NCQ).
    pub queue_depth: usize,
    /// Bytes a read that continues a recent read makes the drive read on
    /// into its buffer (adaptive read-ahead).
    pub readahead: u64,
}

/// Read-ahead segments a drive keeps.
const SEGMENTS: usize = 8;

/// How far past a segment's end a read may start and still count as
/// continuing it (a stream's pieces overtaking each other in the queue).
const SEQ_GAP: u64 = 512 << 10;

/// One read-ahead segment: bytes `[start, end)` of the media, whose last
/// byte is in the buffer at `ready` (read at `rate`).
#[derive(Debug, Clone, Copy)]
struct Segment {
    start: u64,
    end: u64,
    ready: Duration,
    rate: f64,
}

impl HddParams {
    /// A 7200 rpm 3.5" desktop drive (Seagate Barracuda 7200.14 class).
    pub const HDD_7200: HddParams = HddParams {
        name: "hdd-7200",
        rpm: 7200.0,
        seek_t2t: 0.001,
        seek_avg: 0.0085,
        seek_full: 0.017,
        rate_outer: 210e6,
        rate_inner: 100e6,
        overhead: 0.0001,
        link: 600e6,
        cache: 64 << 20,
        queue_depth: 32,
        readahead: 2 << 20,
    };
    /// A 5400 rpm drive (WD Blue 5400 class; the Fusion Drive's 1 TB HDD).
    pub const HDD_5400: HddParams = HddParams {
        name: "hdd-5400",
        rpm: 5400.0,
        seek_t2t: 0.002,
        seek_avg: 0.012,
        seek_full: 0.022,
        rate_outer: 150e6,
        rate_inner: 75e6,
        overhead: 0.00015,
        link: 600e6,
        cache: 32 << 20,
        queue_depth: 32,
        readahead: 2 << 20,
    };
}

/// A hard disk.
pub struct HddModel {
    p: HddParams,
    capacity: u64,
    /// Lee's coefficients.
    a: f64,
    b: f64,
    period: f64,
    /// When the mechanism is free, and where the head is then.
    busy_until: Duration,
    head: u64,
    /// End offsets of requests queued in the mechanism, newest last.
    queued: VecDeque<(u64, Duration)>,
    /// Cached writes not yet destaged: their destage completion times.
    cache_used: VecDeque<(Duration, u64)>,
    link_free: Duration,
    /// Read-ahead segments, most recently used last.
    segments: VecDeque<Segment>,
    /// Recent write streams: (next offset, bytes since its last
    /// positioning), oldest first.
    write_streams: VecDeque<(u64, u64)>,
    /// Mechanism time scheduled so far (the head's busy time).
    head_time: Duration,
}

impl HddModel {
    /// A disk of `capacity` bytes with parameters `p`.
    pub fn new(p: HddParams, capacity: u64) -> Self {
        // Solve t2t + A·√u + B·u for the average (u = 1/3) and full (u = 1).
        let (ya, yf) = (p.seek_avg - p.seek_t2t, p.seek_full - p.seek_t2t);
        let s = (1.0f64 / 3.0).sqrt();
        // A·s + B/3 = ya ; A + B = yf  →  A(s - 1/3) = ya - yf/3
        let a = (ya - yf / 3.0) / (s - 1.0 / 3.0);
        let b = yf - a;
        HddModel {
            p,
            capacity: capacity.max(1),
            a,
            b,
            period: 60.0 / p.rpm,
            busy_until: Duration::ZERO,
            head: 0,
            queued: VecDeque::new(),
            cache_used: VecDeque::new(),
            link_free: Duration::ZERO,
            segments: VecDeque::new(),
            write_streams: VecDeque::new(),
            head_time: Duration::ZERO,
        }
    }

    /// Seek time across `distance` bytes of the surface.
    pub fn seek_time(&self, distance: u64) -> f64 {
        if distance == 0 {
            return 0.0;
        }
        let u = (distance as f64 / self.capacity as f64).min(1.0);
        self.p.seek_t2t + self.a * u.sqrt() + self.b * u
    }

    /// Media transfer rate at an offset (outer tracks first).
    pub fn rate_at(&self, offset: u64) -> f64 {
        let f = (offset as f64 / self.capacity as f64).min(1.0);
        self.p.rate_outer - (self.p.rate_outer - self.p.rate_inner) * f
    }

    /// Angular position (fraction of a turn) of an offset on its track.
    fn angle_of(&self, offset: u64) -> f64 {
        let track = self.rate_at(offset) * self.period;
        (offset as f64 % track) / track
    }

    /// Mechanism time to serve `[offset, offset+len)` starting at `start`
    /// from head position `from`.
    fn service(&self, from: u64, offset: u64, len: u64, start: f64) -> f64 {
        let seek = self.seek_time(from.abs_diff(offset));
        let arrive = start + seek;
        let head_angle = (arrive / self.period).fract();
        let mut wait = self.angle_of(offset) - head_angle;
        if wait < 0.0 {
            wait += 1.0;
        }
        // Sequential continuation: the sector is under the head.
        if from == offset {
            wait = 0.0;
        }
        // A little further on the same track or the next: the head reads
        // on (skips) to it rather than seeking and waiting for a turn.
        let rate = self.rate_at(offset);
        if offset > from && offset - from <= (rate * self.period) as u64 {
            return (offset - from) as f64 / rate + len as f64 / rate;
        }
        seek + wait * self.period + len as f64 / rate
    }

    /// A read: from a read-ahead segment if one holds the bytes (as soon
    /// as the media has passed them), else from the media, reading on into
    /// a segment when the read continues one.
    fn read(&mut self, offset: u64, len: u64, now: Duration) -> Duration {
        let end = offset + len;
        if let Some(i) = self
            .segments
            .iter()
            .position(|g| g.start <= offset && end <= g.end)
        {
            let Some(g) = self.segments.remove(i) else {
                return now;
            };
            let passed = g.ready.saturating_sub(secs((g.end - end) as f64 / g.rate));
            self.segments.push_back(g);
            let start = self.link_free.max(passed.max(now));
            self.link_free = start + secs(len as f64 / self.p.link);
            return self.link_free;
        }
        let continues = self
            .segments
            .iter()
            .position(|g| g.start <= offset && offset <= g.end + SEQ_GAP);
        // Continuing a segment, the media reads on from its end (the bytes
        // before it are in the buffer already) up to `readahead` ahead, but
        // not into bytes another segment holds.
        let (from, start) = match continues.and_then(|i| self.segments.get(i)) {
            Some(g) => (offset.max(g.end), g.start.min(offset)),
            None => (offset, offset),
        };
        let next = self
            .segments
            .iter()
            .filter(|g| g.start > from)
            .map(|g| g.start)
            .min()
            .unwrap_or(u64::MAX);
        let need = end - from;
        let total = match continues {
            Some(_) => need
                .max(self.p.readahead.min(next - from))
                .min(self.capacity.saturating_sub(from).max(need)),
            None => need,
        };
        let all = self.mechanism(from, total, now);
        let rate = self.rate_at(from);
        match continues {
            Some(i) => {
                self.segments.remove(i);
            }
            None if self.segments.len() >= SEGMENTS => {
                self.segments.pop_front();
            }
            None => {}
        }
        let seg_end = from + total;
        self.segments.push_back(Segment {
            // A segment holds at most twice the read-ahead.
            start: start.max(seg_end.saturating_sub(2 * self.p.readahead.max(len))),
            end: seg_end,
            ready: all,
            rate,
        });
        all.saturating_sub(secs((seg_end - end) as f64 / rate))
    }

    /// Schedule a mechanical operation; returns its completion.
    fn mechanism(&mut self, offset: u64, len: u64, now: Duration) -> Duration {
        self.mechanism_from(offset, len, now, None)
    }

    /// [`HddModel::mechanism`], positioning from `from` if given (a write
    /// the cache destages with the rest of its stream).
    fn mechanism_from(
        &mut self,
        offset: u64,
        len: u64,
        now: Duration,
        from: Option<u64>,
    ) -> Duration {
        while self.queued.front().is_some_and(|(_, t)| *t <= now) {
            self.queued.pop_front();
        }
        let start = self.busy_until.max(now);
        // SPTF approximation: seek from the nearest queued request (or the
        // head) when others are waiting.
        let nearest = self
            .queued
            .iter()
            .take(self.p.queue_depth)
            .map(|(end, _)| *end)
            .chain(std::iter::once(self.head))
            .min_by_key(|end| end.abs_diff(offset))
            .unwrap_or(self.head);
        let from = from.unwrap_or(nearest);
        let t = self.service(from, offset, len, start.as_secs_f64());
        let done = start + secs(t);
        self.head_time += secs(t);
        self.busy_until = done;
        self.head = offset + len;
        self.queued.push_back((offset + len, done));
        done
    }
}

impl TimingModel for HddModel {
    fn submit(&mut self, kind: OpKind, offset: u64, len: u64, now: Duration) -> Duration {
        let overhead = secs(self.p.overhead);
        match kind {
            OpKind::Read => self.read(offset, len, now + overhead),
            OpKind::Write => {
                // The buffer no longer holds these bytes.
                let end = offset + len;
                self.segments.retain(|g| g.end <= offset || g.start >= end);
                while self.cache_used.front().is_some_and(|(t, _)| *t <= now) {
                    self.cache_used.pop_front();
                }
                let used: u64 = self.cache_used.iter().map(|(_, n)| n).sum();
                // Drives keep the destage backlog short so reads are not
                // starved: cache only while the mechanism is < 50 ms behind.
                let behind = self.busy_until.saturating_sub(now);
                // A write continuing a recent one is destaged with it: the
                // cache gathers a stream's writes and the drive writes them
                // in runs of up to `readahead` bytes, one positioning each.
                let coalesced = self.write_streams.iter_mut().find(|w| w.0 == offset);
                let from = match coalesced {
                    Some(w) if w.1 + len <= self.p.readahead.max(len) => {
                        w.0 = end;
                        w.1 += len;
                        Some(offset)
                    }
                    Some(w) => {
                        *w = (end, len);
                        None
                    }
                    None => {
                        if self.write_streams.len() >= SEGMENTS {
                            self.write_streams.pop_front();
                        }
                        self.write_streams.push_back((end, len));
                        None
                    }
                };
                let destaged = self.mechanism_from(offset, len, now + overhead, from);
                if used + len <= self.p.cache && behind < Duration::from_millis(50) {
                    // Completed from the cache at interface speed.
                    self.cache_used.push_back((destaged, len));
                    let start = self.link_free.max(now);
                    self.link_free = start + secs(len as f64 / self.p.link);
                    self.link_free + overhead
                } else {
                    destaged
                }
            }
            OpKind::Flush => {
                let last = self.cache_used.back().map(|(t, _)| *t).unwrap_or(now);
                self.cache_used.clear();
                last.max(now) + overhead
            }
        }
    }

    fn name(&self) -> &'static str {
        self.p.name
    }

    fn mechanism_time(&self) -> Option<Duration> {
        Some(self.head_time)
    }
}

/// Datasheet parameters of a solid-state drive.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SsdParams {
    /// Model name.
    pub name: &'static str,
    /// Controller overhead per command, seconds.
    pub overhead: f64,
    /// Flash read of one 4 KiB page, seconds.
    pub page_read: f64,
    /// Flash program time per 4 KiB, seconds (per unit).
    pub page_program: f64,
    /// Flash units working in parallel.
    pub units: usize,
    /// Link bandwidth, bytes/s.
    pub link: f64,
    /// Write buffer in bytes (0: none, no cliff).
    pub write_buffer: u64,
}

impl SsdParams {
    /// A SATA SSD (Samsung 850 EVO class): ~10k IOPS at QD 1, ~95k at QD 32.
    pub const SSD_SATA: SsdParams = SsdParams {
        name: "ssd-sata",
        overhead: 0.000025,
        page_read: 0.000060,
        page_program: 0.000300,
        units: 6,
        link: 550e6,
        write_buffer: 6 << 30,
    };
    /// An NVMe SSD (Samsung 970 EVO class): ~15k IOPS at QD 1, ~450k at QD 32.
    pub const SSD_NVME: SsdParams = SsdParams {
        name: "ssd-nvme",
        overhead: 0.000010,
        page_read: 0.000050,
        page_program: 0.000250,
        units: 32,
        link: 3400e6,
        write_buffer: 12 << 30,
    };
}

/// A solid-state drive.
pub struct SsdModel {
    p: SsdParams,
    units: Vec<Duration>,
    /// Transfers booked on the link, as (start, end), in time order and
    /// not overlapping. A transfer takes the earliest idle interval at or
    /// after it is ready: a read's transfer booked after its flash time
    /// leaves the link free before it for transfers ready sooner.
    link: VecDeque<(Duration, Duration)>,
    /// Buffered write bytes and when each leaves the buffer.
    buffer: VecDeque<(Duration, u64)>,
    buffered: u64,
    /// When the background programming of buffered data is done.
    program_free: Duration,
}

impl SsdModel {
    /// A drive with parameters `p`.
    pub fn new(p: SsdParams) -> Self {
        SsdModel {
            units: vec![Duration::ZERO; p.units.max(1)],
            p,
            link: VecDeque::new(),
            buffer: VecDeque::new(),
            buffered: 0,
            program_free: Duration::ZERO,
        }
    }

    fn unit(&mut self, now: Duration, busy: f64) -> Duration {
        let (i, free) = self
            .units
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| **t)
            .map(|(i, t)| (i, *t))
            .unwrap_or((0, Duration::ZERO));
        let done = free.max(now) + secs(busy);
        self.units[i] = done;
        done
    }

    /// Book a transfer of `len` bytes ready at `ready`; when it ends.
    /// Bookings that ended before `now` are forgotten.
    fn link(&mut self, now: Duration, ready: Duration, len: u64) -> Duration {
        while self.link.front().is_some_and(|(_, end)| *end <= now) {
            self.link.pop_front();
        }
        let d = secs(len as f64 / self.p.link);
        let mut start = ready;
        let mut at = self.link.len();
        for (i, (s, e)) in self.link.iter().enumerate() {
            if *e <= start {
                continue;
            }
            if start + d <= *s {
                at = i;
                break;
            }
            start = start.max(*e);
        }
        self.link.insert(at, (start, start + d));
        // A bounded book: a queue this long is far in the future anyway.
        if self.link.len() > LINK_BOOKINGS {
            self.link.pop_front();
        }
        start + d
    }
}

/// Link bookings an [`SsdModel`] keeps at most.
const LINK_BOOKINGS: usize = 4096;

impl TimingModel for SsdModel {
    fn submit(&mut self, kind: OpKind, _offset: u64, len: u64, now: Duration) -> Duration {
        let overhead = secs(self.p.overhead);
        let pages = len.div_ceil(4096).max(1) as f64;
        match kind {
            OpKind::Read => {
                // Pages of one request spread over the units.
                let per_unit = (pages / self.p.units as f64).ceil();
                let ready = self.unit(now + overhead, self.p.page_read * per_unit);
                self.link(now, ready, len)
            }
            OpKind::Write => {
                let arrived = self.link(now, now + overhead, len);
                // Programming proceeds in the background at the aggregate
                // program rate of all units.
                let program = secs(self.p.page_program * pages / self.p.units as f64);
                self.program_free = self.program_free.max(arrived) + program;
                if self.p.write_buffer == 0 {
                    return arrived;
                }
                while self.buffer.front().is_some_and(|(t, _)| *t <= now) {
                    if let Some((_, n)) = self.buffer.pop_front() {
                        self.buffered -= n;
                    }
                }
                let done = if self.buffered + len <= self.p.write_buffer {
                    arrived
                } else {
                    // The cliff: wait until programming frees enough room.
                    let mut over = self.buffered + len - self.p.write_buffer;
                    let mut at = arrived;
                    for (t, n) in &self.buffer {
                        at = at.max(*t);
                        if *n >= over {
                            break;
                        }
                        over -= n;
                    }
                    at
                };
                self.buffer.push_back((self.program_free, len));
                self.buffered += len;
                done
            }
            OpKind::Flush => now + overhead,
        }
    }

    fn name(&self) -> &'static str {
        self.p.name
    }
}

/// Parameters of a remote capacity tier (an NBD export, a RADOS pool).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RemoteParams {
    /// Model name.
    pub name: &'static str,
    /// Network round trip, seconds.
    pub rtt: f64,
    /// The server's time per request once it arrives, seconds (requests
    /// overlap there without limit).
    pub service: f64,
    /// Bandwidth of the link each way, bytes/s.
    pub bandwidth: f64,
}

impl RemoteParams {
    /// A network disk 1 ms away (round trip) on 10 Gbit/s, served from
    /// flash or cache at the far end (0.1 ms per request).
    pub const REMOTE_1MS: RemoteParams = RemoteParams {
        name: "remote-1ms",
        rtt: 0.001,
        service: 0.0001,
        bandwidth: 1.25e9,
    };
}

/// A capacity tier reached over a network.
pub struct RemoteModel {
    p: RemoteParams,
    /// When the link towards the server is free again.
    up: Duration,
    /// When the link back is free again.
    down: Duration,
}

impl RemoteModel {
    /// A remote with parameters `p`.
    pub fn new(p: RemoteParams) -> Self {
        RemoteModel {
            p,
            up: Duration::ZERO,
            down: Duration::ZERO,
        }
    }
}

impl TimingModel for RemoteModel {
    fn submit(&mut self, kind: OpKind, _offset: u64, len: u64, now: Duration) -> Duration {
        let half = secs(self.p.rtt / 2.0);
        let service = secs(self.p.service);
        let wire = secs(len as f64 / self.p.bandwidth);
        match kind {
            OpKind::Read => {
                let ready = now + half + service;
                self.down = self.down.max(ready) + wire;
                self.down + half
            }
            OpKind::Write => {
                self.up = self.up.max(now) + wire;
                self.up + half + service + half
            }
            OpKind::Flush => now + half + service + half,
        }
    }

    fn name(&self) -> &'static str {
        self.p.name
    }

    fn remote(&self) -> bool {
        true
    }
}

/// The models selectable by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// 5400 rpm HDD.
    Hdd5400,
    /// 7200 rpm HDD.
    Hdd7200,
    /// SATA SSD.
    SsdSata,
    /// NVMe SSD.
    SsdNvme,
    /// A remote capacity tier 1 ms away.
    Remote1ms,
}

impl ModelKind {
    /// All models.
    pub const ALL: [ModelKind; 5] = [
        ModelKind::Hdd5400,
        ModelKind::Hdd7200,
        ModelKind::SsdSata,
        ModelKind::SsdNvme,
        ModelKind::Remote1ms,
    ];

    /// Whether it models a fast tier (else a capacity tier: a disk or a
    /// remote).
    pub fn is_ssd(self) -> bool {
        matches!(self, ModelKind::SsdSata | ModelKind::SsdNvme)
    }

    /// The names of the fast-tier or the capacity-tier models, for
    /// messages: "ssd-sata or ssd-nvme".
    pub fn names(ssd: bool) -> String {
        let names: Vec<&str> = Self::ALL
            .into_iter()
            .filter(|m| m.is_ssd() == ssd)
            .map(ModelKind::name)
            .collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// Parse a model name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The model's name.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Hdd5400 => "hdd-5400",
            ModelKind::Hdd7200 => "hdd-7200",
            ModelKind::SsdSata => "ssd-sata",
            ModelKind::SsdNvme => "ssd-nvme",
            ModelKind::Remote1ms => "remote-1ms",
        }
    }

    /// A fresh model instance for a device of `capacity` bytes.
    pub fn build(self, capacity: u64) -> Box<dyn TimingModel> {
        match self {
            ModelKind::Hdd5400 => Box::new(HddModel::new(HddParams::HDD_5400, capacity)),
            ModelKind::Hdd7200 => Box::new(HddModel::new(HddParams::HDD_7200, capacity)),
            ModelKind::SsdSata => Box::new(SsdModel::new(SsdParams::SSD_SATA)),
            ModelKind::SsdNvme => Box::new(SsdModel::new(SsdParams::SSD_NVME)),
            ModelKind::Remote1ms => Box::new(RemoteModel::new(RemoteParams::REMOTE_1MS)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const TB: u64 = 1 << 40;

    /// `ops` operations from `qd` closed-loop workers: each op goes to the
    /// worker free first, `next(worker, k)` says what it is. Returns the
    /// last completion.
    fn closed_loop(
        model: &mut dyn TimingModel,
        qd: usize,
        ops: u64,
        mut next: impl FnMut(usize, u64) -> (OpKind, u64, u64),
    ) -> Duration {
        let mut free = vec![Duration::ZERO; qd];
        let mut last = Duration::ZERO;
        for k in 0..ops {
            let (w, t) = free
                .iter()
                .enumerate()
                .min_by_key(|(_, t)| **t)
                .map(|(i, t)| (i, *t))
                .unwrap();
            let (kind, off, len) = next(w, k);
            free[w] = model.submit(kind, off, len, t);
            last = last.max(free[w]);
        }
        last
    }

    /// IOPS of `qd` closed-loop workers doing random `len`-byte ops.
    fn iops(
        model: &mut dyn TimingModel,
        kind: OpKind,
        span: u64,
        len: u64,
        qd: usize,
        ops: usize,
    ) -> f64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let last = closed_loop(model, qd, ops as u64, |_, _| {
            (kind, rng.gen_range(0..span / 4096) * 4096, len)
        });
        ops as f64 / last.as_secs_f64()
    }

    #[test]
    fn hdd_7200_random_4k_qd1_full_span_is_70_to_100_iops() {
        let mut m = HddModel::new(HddParams::HDD_7200, TB);
        let v = iops(&mut m, OpKind::Read, TB, 4096, 1, 2000);
        assert!((70.0..=100.0).contains(&v), "{v}");
    }

    #[test]
    fn hdd_queueing_helps_and_sequential_reads_run_at_zone_rate() {
        let mut m = HddModel::new(HddParams::HDD_7200, TB);
        let q32 = iops(&mut m, OpKind::Read, TB, 4096, 32, 4000);
        assert!(q32 > 150.0, "SPTF at QD 32: {q32}");
        let mut m = HddModel::new(HddParams::HDD_7200, TB);
        let mut t = Duration::ZERO;
        let len = 256 << 10;
        for i in 0..4000u64 {
            t = m.submit(OpKind::Read, i * len, len, t);
        }
        let rate = 4000.0 * len as f64 / t.as_secs_f64();
        assert!(
            rate > 0.9 * 205e6 && rate < 211e6,
            "outer-zone sequential rate {rate}"
        );
        // Inner zone is slower.
        let mut m = HddModel::new(HddParams::HDD_7200, TB);
        let base = TB - 4000 * len;
        let mut t = Duration::ZERO;
        for i in 0..4000u64 {
            t = m.submit(OpKind::Read, base + i * len, len, t);
        }
        let inner = 4000.0 * len as f64 / t.as_secs_f64();
        assert!(inner < 0.6 * rate, "inner {inner} vs outer {rate}");
    }

    /// MB/s of `qd` closed-loop workers reading `len`-byte pieces
    /// sequentially, worker w from its own cursor (`streams`: each worker a
    /// stream of its own, spread over the disk as the bench spreads them)
    /// or from one shared cursor whose pieces are handed out in pairs
    /// swapped (a queue that reorders them).
    fn seq_rate(p: HddParams, qd: usize, len: u64, streams: bool, pieces: u64) -> f64 {
        let mut m = HddModel::new(p, TB);
        let mut cursors = spread_cursors(qd);
        let last = closed_loop(&mut m, qd, pieces, |w, k| {
            let off = if streams {
                let o = cursors[w];
                cursors[w] += len;
                o
            } else if qd > 1 {
                (k ^ 1) * len
            } else {
                k * len
            };
            (OpKind::Read, off, len)
        });
        (pieces * len) as f64 / last.as_secs_f64() / 1e6
    }

    /// One start offset per worker, an eighth of the disk apart.
    fn spread_cursors(qd: usize) -> Vec<u64> {
        (0..qd as u64).map(|w| w * (TB / 8)).collect()
    }

    #[test]
    fn hdd_sequential_reads_keep_their_rate_when_they_queue() {
        let p = HddParams::HDD_5400;
        let len = 256 << 10;
        let qd1 = seq_rate(p, 1, len, false, 2000);
        assert!(qd1 > 0.9 * 150.0, "QD 1 sequential {qd1} MB/s");
        // One stream, QD 4, pieces reaching the drive out of order: the
        // read-ahead buffer keeps the media streaming.
        let qd4 = seq_rate(p, 4, len, false, 2000);
        assert!(qd4 > 0.9 * qd1, "QD 4 out of order {qd4} vs QD 1 {qd1}");
        // Four streams spread over the disk: a seek per 2 MiB of read-ahead
        // instead of per request (a third of one stream's rate or more;
        // without read-ahead it was a tenth).
        let four = seq_rate(p, 4, len, true, 2000);
        assert!(four > qd1 / 3.0, "four streams {four} vs one {qd1}");
        assert!(four < qd1, "four streams cannot beat one: {four} vs {qd1}");
    }

    #[test]
    fn hdd_sequential_write_streams_are_destaged_together() {
        // Four streams of 256 KiB writes at QD 4, closed loop, each worker
        // its own stream spread over the disk, then a FLUSH: at least a
        // third of one stream's rate (without gathering, a seek per write).
        let rate = |qd: usize| {
            let mut m = HddModel::new(HddParams::HDD_5400, TB);
            let len = 256u64 << 10;
            let mut cursors = spread_cursors(qd);
            let last = closed_loop(&mut m, qd, 2000, |w, _| {
                cursors[w] += len;
                (OpKind::Write, cursors[w] - len, len)
            });
            let end = m.submit(OpKind::Flush, 0, 0, last);
            2000.0 * len as f64 / end.as_secs_f64() / 1e6
        };
        let one = rate(1);
        let four = rate(4);
        assert!(one > 0.8 * 150.0, "one stream {one} MB/s");
        assert!(four > one / 3.0, "four streams {four} vs one {one}");
        assert!(
            four < one * 1.05,
            "four streams cannot beat one: {four} vs {one}"
        );
    }

    #[test]
    fn hdd_write_cache_completes_early_and_flush_waits() {
        let mut m = HddModel::new(HddParams::HDD_7200, TB);
        let w = m.submit(OpKind::Write, TB / 2, 4096, Duration::ZERO);
        assert!(w < Duration::from_micros(500), "{w:?}");
        let f = m.submit(OpKind::Flush, 0, 0, w);
        assert!(
            f > Duration::from_millis(2),
            "flush waits for the destage: {f:?}"
        );
    }

    #[test]
    fn ssd_sata_scales_with_queue_depth() {
        let mut m = SsdModel::new(SsdParams::SSD_SATA);
        let q1 = iops(&mut m, OpKind::Read, TB, 4096, 1, 20000);
        assert!((9000.0..=12000.0).contains(&q1), "QD1 {q1}");
        let mut m = SsdModel::new(SsdParams::SSD_SATA);
        let q32 = iops(&mut m, OpKind::Read, TB, 4096, 32, 100000);
        assert!((85000.0..=110000.0).contains(&q32), "QD32 {q32}");
    }

    #[test]
    fn ssd_link_carries_a_write_while_a_read_waits_for_flash() {
        let mut m = SsdModel::new(SsdParams::SSD_SATA);
        let t0 = Duration::from_secs(1);
        let read_done = m.submit(OpKind::Read, 0, 1 << 20, t0);
        let write_done = m.submit(OpKind::Write, 1 << 30, 4096, t0);
        // The 1 MiB read's flash time is ~2.6 ms; the write needs the link
        // for 7.4 us after 25 us of overhead.
        assert!(
            write_done - t0 < Duration::from_micros(100),
            "write waited for the read: {:?}",
            write_done - t0
        );
        assert!(
            read_done - t0 > Duration::from_millis(4),
            "read {:?}",
            read_done - t0
        );
        // Transfers never overlap: a second read ready at the same moment
        // as the first transfers after it.
        let mut m = SsdModel::new(SsdParams::SSD_SATA);
        let a = m.submit(OpKind::Read, 0, 1 << 20, t0);
        let b = m.submit(OpKind::Read, 1 << 20, 1 << 20, t0);
        assert!(b - a >= Duration::from_micros(1900), "{a:?} {b:?}");
    }

    #[test]
    fn ssd_write_cliff_after_the_buffer_fills() {
        let mut p = SsdParams::SSD_SATA;
        p.write_buffer = 64 << 20;
        let mut m = SsdModel::new(p);
        let mut t = Duration::ZERO;
        let mut first = Duration::ZERO;
        for i in 0..4096u64 {
            let start = t;
            t = m.submit(OpKind::Write, i * (1 << 20), 1 << 20, t);
            if i == 0 {
                first = t - start;
            }
            if i == 4095 {
                assert!(
                    t - start > first * 2,
                    "late writes slower: {:?} vs {:?}",
                    t - start,
                    first
                );
            }
        }
    }

    #[test]
    fn remote_pays_a_round_trip_per_request_and_shares_its_bandwidth() {
        let mut m = ModelKind::Remote1ms.build(TB);
        // QD 1, 4 KiB: a round trip and the service, about 1.1 ms.
        let t = closed_loop(m.as_mut(), 1, 1000, |_, k| (OpKind::Read, k * 4096, 4096));
        let iops = 1000.0 / t.as_secs_f64();
        assert!((850.0..950.0).contains(&iops), "QD 1: {iops}");
        // Requests overlap at the server: QD 32 is ~32x QD 1.
        let mut m = ModelKind::Remote1ms.build(TB);
        let t = closed_loop(m.as_mut(), 32, 32_000, |_, k| {
            (OpKind::Read, k * 4096, 4096)
        });
        let iops32 = 32_000.0 / t.as_secs_f64();
        assert!(iops32 > 25.0 * iops, "QD 32: {iops32}");
        // Large transfers are held to the link's bandwidth.
        let mut m = ModelKind::Remote1ms.build(TB);
        let t = closed_loop(m.as_mut(), 16, 2000, |_, k| {
            (OpKind::Write, k << 20, 1 << 20)
        });
        let bw = 2000.0 * f64::from(1u32 << 20) / t.as_secs_f64();
        assert!((1.0e9..1.26e9).contains(&bw), "bandwidth {bw}");
        assert!(!ModelKind::Remote1ms.is_ssd() && ModelKind::SsdSata.is_ssd());
        assert_eq!(ModelKind::names(true), "ssd-sata or ssd-nvme");
        assert_eq!(ModelKind::names(false), "hdd-5400, hdd-7200 or remote-1ms");
    }
}
