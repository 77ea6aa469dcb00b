//! Waiting for room in the write log. A write the log would take but that
//! finds it full waits for write-back to free a place, for at most what
//! the same write would take in place on the HDD (the smoothed time such
//! writes took there when no room came), then goes in place as before: a full log
//! slows new writes to the HDD's in-place speed and never below it. While
//! writes wait, the HDD's time goes to write-back, which sends the log's
//! blocks down in HDD order, merged into spans, where the same writes in
//! place would each cost a seek. Writes wait only while write-back runs
//! beside users ([`Volume::log_pressed`]: the log over its band, no user
//! reading from the HDD), and the waiters keep it running.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::io::{block_span, Latency, Piece};
use super::stats::Stats;
use super::write::LogWay;
use super::Volume;
use crate::units::IoHint;

/// Below this smoothed in-place write latency no write waits for room: an
/// in-place write that fast (into the page cache of an image file) is not
/// worth a wait, and a wait that short costs its own polling.
const MIN_WAIT: Duration = Duration::from_millis(1);

/// The longest step between two looks for room while a write waits.
const MAX_STEP: Duration = Duration::from_millis(5);

/// The shortest.
const MIN_STEP: Duration = Duration::from_micros(250);

/// Shares of the log's capacity at which write-back starts running beside
/// users (`PRESS_ON`, in quarters) and stops again (`PRESS_OFF`)
/// ([`Volume::log_pressed`]).
const PRESS_ON: u64 = 3;
const PRESS_OFF: u64 = 2;

/// What writes waiting for log room share.
pub(crate) struct Room {
    /// Smoothed time of users' writes the log wanted but had no room for,
    /// in place on the HDD (never stale: a log
    /// that takes every write leaves no new samples, and the last is the
    /// best guess of what going in place would cost).
    inplace: Latency,
    /// Smoothed time from one group of write-back beside users to the next
    /// (pushed by the migrator): places come free once per group, after
    /// its flush.
    group: Latency,
    /// Writes waiting for room now.
    waiters: AtomicUsize,
    /// Write-back runs beside users ([`Volume::log_pressed`]): writes wait
    /// for room only while it does.
    pressing: AtomicBool,
}

impl Default for Room {
    fn default() -> Self {
        let (inplace, group) = (Latency::default(), Latency::default());
        inplace.set_busy(Duration::ZERO);
        group.set_busy(Duration::ZERO);
        Room {
            inplace,
            group,
            waiters: AtomicUsize::new(0),
            pressing: AtomicBool::new(false),
        }
    }
}

impl Room {
    /// The longest a write waits for room: zero while the smoothed
    /// in-place write latency is below [`MIN_WAIT`] or unmeasured; else
    /// that latency, or twice the time from one group of write-back beside
    /// users to the next if longer. Room comes once per group, after its
    /// flush, so a shorter wait, in a group's middle, would give up on room about to come and send the
    /// write in place, where it delays the group that brings the room (a
    /// disk's queue of in-place writes made each group wait behind it, so
    /// groups slowed, waits ran out, and more writes went in place). Two:
    /// the group under way may end with its room taken by the writes
    /// that waited longer. Waiting gives the disk to write-back, which
    /// frees a group's worth of places in the time a few writes in place
    /// would take; the writes' rate stays above the in-place one while a
    /// group frees more places than the disk writes in place in two
    /// groups' time.
    pub(crate) fn bound(&self) -> Duration {
        let at = |l: &Latency| l.get(Duration::ZERO, Duration::MAX);
        match at(&self.inplace) {
            Some(d) if d >= MIN_WAIT => d.max(at(&self.group).unwrap_or_default() * 2),
            _ => Duration::ZERO,
        }
    }
}

impl Volume {
    /// A write the log wanted but had no room for went to the HDD in place,
    /// from `t0` to `t1` (both on [`crate::clock::Clock::io_now`]'s scale).
    pub(crate) fn note_inplace_write(&self, t0: Duration, t1: Duration) {
        self.room
            .inplace
            .sample(t1.saturating_sub(t0), t1, Duration::MAX);
    }

    /// Room came `took` after it last came from write-back beside users
    /// (or a group took that long after a pause; the migrator's note, for
    /// [`Room::bound`]).
    pub fn note_pressed_group(&self, took: Duration) {
        self.room.group.sample(took, took, Duration::MAX);
    }

    /// The longest a write now waits for log room (zero: none waits).
    pub(crate) fn log_wait_bound(&self) -> Duration {
        self.room.bound()
    }

    /// Writes waiting for room in the write log now.
    pub fn log_waiters(&self) -> usize {
        self.room.waiters.load(Ordering::Relaxed)
    }

    /// Whether write-back runs beside users now (the state of the last
    /// [`Volume::log_pressed`]).
    pub fn log_pressing(&self) -> bool {
        self.room.pressing.load(Ordering::Relaxed)
    }

    /// Look whether the write log wants write-back beside users (the
    /// migrator's write-back steers by it), and remember the answer: once
    /// it is three quarters full, or a write waits for room; and, once it
    /// does, until it is back below half. The band keeps write-back going
    /// in runs long enough to merge blocks into spans, and leaves the log
    /// half its room for the next burst. Never while users read from the
    /// HDD (`reads_quiet` false: one did within `speculative-idle`): the
    /// reads are what users wait for, and each would wait behind the
    /// write-back's spans, where a write sent in place costs them one
    /// write's time; so beside reads the log's writes go in place as
    /// before, and write-back waits for idle time. Never either while
    /// writes in place cost less than [`MIN_WAIT`] (an image file's page
    /// cache, or nothing measured yet): then a full log costs the users
    /// nothing, and write-back beside them would cost them its syncs.
    pub fn log_pressed(&self, reads_quiet: bool) -> bool {
        let p = reads_quiet && !self.log_wait_bound().is_zero() && self.log_over_band();
        self.room.pressing.store(p, Ordering::Relaxed);
        p
    }

    /// Whether the log is over its band ([`Volume::log_pressed`]), given
    /// whether it was pressed at the last look.
    fn log_over_band(&self) -> bool {
        if self.log_waiters() > 0 {
            return true;
        }
        let u = self.log.usage();
        let room = u64::from(u.cap) * u64::from(self.geo.blocks_per_extent());
        if room == 0 {
            return false;
        }
        let mark = if self.log_pressing() {
            PRESS_OFF
        } else {
            PRESS_ON
        };
        u.used * 4 >= room * mark
    }

    /// Stop pressing (the log is empty, or the migrator is told to stop).
    pub fn log_unpress(&self) {
        self.room.pressing.store(false, Ordering::Relaxed);
    }

    /// Before writing piece `p`, while the log is pressed: if the log would
    /// take it but has no room, wait for room, up to
    /// [`Volume::log_wait_bound`] (outside every lock; the write then goes
    /// where the log's room says, in place if none came). The bound learns
    /// from the device time of writes the log wanted and sent in place
    /// (`Volume::note_inplace_write`, from the write paths): those
    /// writes', not any write's in place (a stream's sequential writes
    /// cost the disk far less than the random ones the log takes), and not
    /// their waits for the extent's lock.
    pub(crate) fn await_log_room(&self, p: &Piece, hint: IoHint) {
        let bound = self.log_wait_bound();
        if bound.is_zero() || !self.log_pressing() || !self.wants_log_room(p, hint) {
            return;
        }
        let clock = self.clock.clone();
        let step = (bound / 16).clamp(MIN_STEP, MAX_STEP);
        self.room.waiters.fetch_add(1, Ordering::Relaxed);
        let t0 = clock.now();
        let mut waited = Duration::ZERO;
        let got = loop {
            if self.log_room() {
                break true;
            }
            if waited >= bound || !self.log_pressing() {
                break false;
            }
            clock.sleep(step.min(bound - waited));
            waited = clock.now().saturating_sub(t0);
        };
        self.room.waiters.fetch_sub(1, Ordering::Relaxed);
        Stats::add(&self.stats.log_waits, 1);
        Stats::add(&self.stats.log_wait_ns, waited.as_nanos() as u64);
        if !got {
            Stats::add(&self.stats.log_wait_timeouts, 1);
        }
    }

    /// Whether piece `p` is a write the log would take but has no room
    /// for, and needs a new place for (a block not in the log yet).
    fn wants_log_room(&self, p: &Piece, hint: IoHint) -> bool {
        let guard = self.slot_lock(p.extent).read();
        let Some(m) = guard.as_ref() else {
            return false;
        };
        if self.log_way_quiet(p, m, hint) != LogWay::Full
            || super::write::partial_on_hdd(m, p.start, p.len)
        {
            return false;
        }
        let (first, last) = block_span(p.start, p.len);
        (first..=last).any(|b| m.logged_at(b).is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_bound_is_the_in_place_time_or_two_groups_and_none_below_a_millisecond() {
        let r = Room::default();
        assert_eq!(r.bound(), Duration::ZERO, "nothing measured");
        // A group alone says nothing: no write has gone in place.
        r.group.sample(ms(50), ms(50), Duration::MAX);
        assert_eq!(r.bound(), Duration::ZERO);
        // Page-cache writes: no wait.
        r.inplace
            .sample(Duration::from_micros(40), ms(1), Duration::MAX);
        assert_eq!(r.bound(), Duration::ZERO);
        // A disk: the in-place time, or two groups when longer.
        let r = Room::default();
        r.inplace.sample(ms(120), ms(120), Duration::MAX);
        assert_eq!(r.bound(), ms(120));
        r.group.sample(ms(40), ms(200), Duration::MAX);
        assert_eq!(r.bound(), ms(120));
        let r2 = Room::default();
        r2.inplace.sample(ms(120), ms(120), Duration::MAX);
        r2.group.sample(ms(90), ms(200), Duration::MAX);
        assert_eq!(r2.bound(), ms(180));
        // Old samples never go stale: a log that takes every write leaves
        // no new in-place ones.
        assert_eq!(r2.bound(), ms(180));
    }
}
