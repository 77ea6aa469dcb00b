//! Time for the tiering engine: a [`Clock`] trait with the real monotonic
//! clock and a manual one that tests (and the virtual-time benchmark) advance
//! by hand, so heat decay and migration pacing are deterministic.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A monotonic clock.
pub trait Clock: Send + Sync + 'static {
    /// Time since the clock's own origin.
    fn now(&self) -> Duration;
    /// Wall-clock Unix seconds for records shown to people.
    fn unix_secs(&self) -> u64;
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
}

/// A clock that only moves when told to.
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
}
