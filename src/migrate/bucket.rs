//! A token bucket that paces background (migration) I/O in bytes per second.

use std::time::Duration;

/// Bytes-per-second pacing with a burst allowance. A rate of 0 is unlimited.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Duration,
}

impl TokenBucket {
    /// A full bucket refilling at `rate` bytes/s, holding at most `burst`.
    pub fn new(rate: u64, burst: u64, now: Duration) -> Self {
        TokenBucket {
            rate: rate as f64,
            burst: burst.max(1) as f64,
            tokens: burst.max(1) as f64,
            last: now,
        }
    }

    /// Change the rate (0: unlimited).
    pub fn set_rate(&mut self, rate: u64) {
        self.rate = rate as f64;
    }

    /// The rate in bytes/s.
    pub fn rate(&self) -> u64 {
        self.rate as u64
    }

    /// Take `n` bytes at time `now`; returns how long the caller should wait
    /// before doing that I/O (zero when tokens were available).
    pub fn take(&mut self, n: u64, now: Duration) -> Duration {
        if self.rate <= 0.0 {
            return Duration::ZERO;
        }
        let elapsed = now.saturating_sub(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_to_the_rate_after_the_burst() {
        let s = Duration::from_secs;
        let mut b = TokenBucket::new(100, 100, s(0));
        assert_eq!(b.take(100, s(0)), Duration::ZERO);
        assert_eq!(b.take(50, s(0)), Duration::from_millis(500));
        // One second later 100 tokens came back; the debt of 50 is paid.
        assert_eq!(b.take(50, s(1)), Duration::ZERO);
        let mut u = TokenBucket::new(0, 1, s(0));
        assert_eq!(u.take(1 << 40, s(0)), Duration::ZERO);
    }
}
