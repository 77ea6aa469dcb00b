//! Time for the tiering engine and the timed devices: a [`Clock`] trait
//! (now, sleep) with the real monotonic clock and a manual one that tests
//! advance by hand, so heat decay and migration pacing are deterministic.
//! The virtual-time benchmark (the `tierd-bench` crate) implements the same
//! trait over its scheduler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic clock.
pub trait Clock: Send + Sync + 'static {
    /// Time since the clock's own origin.
    fn now(&self) -> Duration;
    /// Wall-clock Unix seconds for records shown to people.
    fn unix_secs(&self) -> u64;
    /// Wait for `d` on this clock: the real clock sleeps, a virtual one
    /// moves on. Callers call it even for a zero `d` (a virtual clock may
    /// hand the turn to others there).
    fn sleep(&self, d: Duration);
    /// This thread's time counting the device work it did since it last
    /// waited: how long an operation took, measured across it. The real
    /// clock's is [`Clock::now`]; a virtual clock whose devices add their
    /// time to the calling thread only (the bench's) answers that time.
    fn io_now(&self) -> Duration {
        self.now()
    }
    /// Wait until `deadline` (on [`Clock::now`]'s scale); nothing when it
    /// has passed. The real clock does this with sub-millisecond precision.
    fn sleep_until(&self, deadline: Duration) {
        let now = self.now();
        if deadline > now {
            self.sleep(deadline - now);
        }
    }
}

/// The real clock.
pub struct SystemClock {
    origin: Instant,
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn unix_secs(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }

    /// A coarse sleep followed by a short spin: the thread timer alone is
    /// too coarse for a modelled SSD's completion times.
    fn sleep_until(&self, deadline: Duration) {
        const SPIN: Duration = Duration::from_micros(150);
        loop {
            let now = self.now();
            if now >= deadline {
                return;
            }
            let left = deadline - now;
            if left > SPIN {
                std::thread::sleep(left - SPIN);
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// A clock that only moves when told to: by [`ManualClock::advance`], or by
/// a [`Clock::sleep`] on it (which advances it by the time slept).
#[derive(Default)]
pub struct ManualClock {
    nanos: AtomicU64,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Move forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.nanos.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    fn unix_secs(&self) -> u64 {
        self.now().as_secs()
    }

    fn sleep(&self, d: Duration) {
        self.advance(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new();
        assert_eq!(c.now(), Duration::ZERO);
        c.advance(Duration::from_millis(1500));
        assert_eq!(c.now(), Duration::from_millis(1500));
        assert_eq!(c.unix_secs(), 1);
        let s = SystemClock::default();
        assert!(s.unix_secs() > 1_600_000_000);
    }

    #[test]
    fn sleeping_advances_a_manual_clock_and_waits_on_the_real_one() {
        let c = ManualClock::new();
        c.sleep(Duration::from_millis(20));
        c.sleep_until(Duration::from_millis(15));
        assert_eq!(c.now(), Duration::from_millis(20), "a past deadline");
        c.sleep_until(Duration::from_millis(50));
        assert_eq!(c.now(), Duration::from_millis(50));
        let s = SystemClock::default();
        let deadline = s.now() + Duration::from_millis(3);
        s.sleep_until(deadline);
        assert!(s.now() >= deadline);
        let t = s.now();
        s.sleep(Duration::from_millis(2));
        assert!(s.now() >= t + Duration::from_millis(2));
    }
}
