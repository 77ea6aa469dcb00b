//! [`HddModel`]: a hard disk timed from its datasheet (seek curve, rotation,
//! zoned rate, command queueing, write cache and read-ahead segments; see
//! the registry's overview in [`super`]).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::{secs, OpKind, TimingModel};

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
