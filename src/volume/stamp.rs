//! When foreground I/O last did something, on the volume's clock: the
//! moments the migrator asks about (the HDD last serving a user, new data
//! last landing, a user's stream last writing to the HDD in place). Only
//! foreground threads stamp ([`IoClass::Foreground`]): the migrator's own
//! copies must not make the HDD look busy to itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Clock;
use crate::device::IoClass;

/// The last moment stamped (ns on the volume's clock; `u64::MAX`: never).
#[derive(Debug)]
pub(crate) struct Stamp(AtomicU64);

impl Stamp {
    /// Never stamped: [`Stamp::since`] says `Duration::MAX`.
    pub(crate) fn never() -> Self {
        Stamp(AtomicU64::new(u64::MAX))
    }

    /// Stamped at the clock's zero: [`Stamp::since`] counts from there.
    pub(crate) fn at_zero() -> Self {
        Stamp(AtomicU64::new(0))
    }

    /// Stamp now, if the calling thread does foreground I/O.
    pub(crate) fn note(&self, clock: &dyn Clock) {
        if IoClass::current() == IoClass::Foreground {
            self.0
                .store(clock.now().as_nanos() as u64, Ordering::Relaxed);
        }
    }

    /// Time since the last stamp (`Duration::MAX` if never stamped).
    pub(crate) fn since(&self, clock: &dyn Clock) -> Duration {
        match self.0.load(Ordering::Relaxed) {
            u64::MAX => Duration::MAX,
            at => clock.now().saturating_sub(Duration::from_nanos(at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn foreground_stamps_and_background_does_not() {
        let clock = ManualClock::new();
        let never = Stamp::never();
        let zero = Stamp::at_zero();
        assert_eq!(never.since(&clock), Duration::MAX);
        clock.advance(Duration::from_secs(3));
        assert_eq!(zero.since(&clock), Duration::from_secs(3));
        never.note(&clock);
        assert_eq!(never.since(&clock), Duration::ZERO);
        clock.advance(Duration::from_secs(2));
        {
            let _bg = IoClass::Background.enter();
            never.note(&clock);
        }
        assert_eq!(never.since(&clock), Duration::from_secs(2));
    }
}
