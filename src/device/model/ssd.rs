//! [`SsdModel`]: a solid-state drive timed from its datasheet (controller
//! overhead, parallel flash units, a shared link, and the write buffer
//! whose filling exposes the program speed).

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use super::{secs, OpKind, TimingModel};

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
    /// Work booked on each flash unit, as (start, end), in time order: a
    /// request is fitted into the first gap after it is ready, so work
    /// booked for later (on a virtual clock, a participant ahead of the
    /// others: the bench's migrator after a wait on the HDD) does not hold
    /// up a request that is done before it starts.
    units: Vec<VecDeque<(Duration, Duration)>>,
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
            units: vec![VecDeque::new(); p.units.max(1)],
            p,
            link: VecDeque::new(),
            buffer: VecDeque::new(),
            buffered: 0,
            program_free: Duration::ZERO,
        }
    }

    /// Book `busy` seconds of flash work ready at `ready` on the unit
    /// that can start it first; when it ends. Bookings that ended before
    /// `now` are forgotten.
    fn unit(&mut self, now: Duration, ready: Duration, busy: f64) -> Duration {
        let d = secs(busy);
        let mut best: Option<(Duration, usize)> = None;
        for (i, unit) in self.units.iter_mut().enumerate() {
            forget(unit, now);
            let (start, _) = fit(unit, ready, d);
            if best.is_none_or(|(b, _)| start < b) {
                best = Some((start, i));
            }
        }
        let i = best.map_or(0, |(_, i)| i);
        book(&mut self.units[i], ready, d, UNIT_BOOKINGS)
    }

    /// Book a transfer of `len` bytes ready at `ready`; when it ends.
    /// Bookings that ended before `now` are forgotten.
    fn link(&mut self, now: Duration, ready: Duration, len: u64) -> Duration {
        forget(&mut self.link, now);
        let d = secs(len as f64 / self.p.link);
        book(&mut self.link, ready, d, LINK_BOOKINGS)
    }
}

/// Forget the bookings of `list` that ended by `now`.
fn forget(list: &mut VecDeque<(Duration, Duration)>, now: Duration) {
    while list.front().is_some_and(|(_, end)| *end <= now) {
        list.pop_front();
    }
}

/// Where `d` of work ready at `ready` fits in `list` (bookings as (start,
/// end) in time order): its start, and the index to insert it at.
fn fit(list: &VecDeque<(Duration, Duration)>, ready: Duration, d: Duration) -> (Duration, usize) {
    let mut start = ready;
    for (i, (s, e)) in list.iter().enumerate() {
        if *e <= start {
            continue;
        }
        if start + d <= *s {
            return (start, i);
        }
        start = start.max(*e);
    }
    (start, list.len())
}

/// Book `d` of work ready at `ready` in the first gap of `list` that holds
/// it; when it ends. At most `keep` bookings are kept: a queue that long is
/// far in the future anyway.
fn book(
    list: &mut VecDeque<(Duration, Duration)>,
    ready: Duration,
    d: Duration,
    keep: usize,
) -> Duration {
    let (start, at) = fit(list, ready, d);
    list.insert(at, (start, start + d));
    if list.len() > keep {
        list.pop_front();
    }
    start + d
}

/// Bookings an [`SsdModel`] keeps per flash unit at most.
const UNIT_BOOKINGS: usize = 1024;

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
                let ready = self.unit(now, now + overhead, self.p.page_read * per_unit);
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
