//! HDD time for placement: what the volume's background placement
//! (admissions at the miss, the migrator's promotions and the swaps that
//! make room for them) may spend on the HDD while its users need it.
//!
//! A hybrid must never be slower than its own HDD. Every promotion costs
//! HDD time (the extent's read, a victim's write), paid now; it saves HDD
//! time only later, one read at a time, if the data is read again. On a
//! busy HDD the cost comes straight out of the users' time. So the time
//! placement spends is a token bucket in seconds of device time, filled
//! with:
//! - for admissions, the time the HDD served no user (less what they took
//!   of it); the migrator's promotions go without the bucket while the
//!   HDD is free of users, a run at a time (`migrate::pay`);
//! - `share` of the time it served users;
//! - the HDD time the SSD saved the users: each foreground read served by
//!   the SSD counts as one HDD request of the HDD's mean service time (the
//!   union of the users' request spans over the requests: [`BusyTime`]).
//!
//! Spent this way, placement costs the users at most `share` of the HDD's
//! time beyond what it has given back, so against the HDD alone the hybrid
//! loses at most that share; and placement that pays (a hot set coming
//! up, read again and again) funds its own pace. The promotions' budget is
//! off by default (`migrate.promote-share` 1): see docs/tiering.md,
//! "Promotions pay their way", for what it costs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::Volume;

/// What the admission bucket holds at most (seconds): a dozen extents'
/// copies, so a user arriving after a quiet spell finds the HDD busy with
/// admissions for a fraction of a second at worst.
pub(crate) const ADMISSION_BURST: f64 = 0.25;

/// What idle time fills the promotions' bucket to: nothing. With the HDD
/// free of users the migrator goes without the bucket, one run at a time
/// (`migrate::pay`); and a gap between one user's requests is no time to
/// spend: a write cache destaging the users' writes fills it unseen.
pub(crate) const PLACEMENT_IDLE_BURST: f64 = 0.0;

/// What the promotions' bucket holds at most (seconds): a full batch of
/// copies, paid for by time the SSD already saved the users.
pub(crate) const PLACEMENT_BURST: f64 = 1.0;

/// The bucket (see the module docs).
#[derive(Debug)]
pub(crate) struct HddBudget {
    tokens: f64,
    /// When it was last filled (the volume's clock), the users' HDD busy
    /// time and the HDD time saved then; `None` before the first use.
    last: Option<(Duration, Duration, Duration)>,
    /// Placement time not yet matched by time passing.
    spent: f64,
    /// Share of the users' HDD time placement may add (1: no limit).
    pub(crate) share: f64,
    /// What idle time fills it to, at most.
    idle_burst: f64,
    /// What it holds at most.
    burst: f64,
}

impl HddBudget {
    /// A bucket with this share, filled to `idle_burst`, which idle time
    /// fills to `idle_burst` and the rest to `burst` at most.
    pub(crate) fn new(share: f64, idle_burst: f64, burst: f64) -> Self {
        HddBudget {
            tokens: idle_burst,
            last: None,
            spent: 0.0,
            share,
            idle_burst,
            burst: burst.max(idle_burst),
        }
    }

    /// Fill the bucket for the time up to `now`, the HDD's users having
    /// been busy `busy_total` and the SSD having saved them `saved_total`
    /// since the volume opened; the seconds it holds (unlimited at share
    /// 1).
    pub(crate) fn refill(
        &mut self,
        now: Duration,
        busy_total: Duration,
        saved_total: Duration,
    ) -> f64 {
        if self.share >= 1.0 {
            return f64::INFINITY;
        }
        let (elapsed, busy, saved) = match self.last {
            Some((at, busy_then, saved_then)) => {
                let elapsed = now.saturating_sub(at).as_secs_f64();
                let busy = busy_total.saturating_sub(busy_then).as_secs_f64();
                let saved = saved_total.saturating_sub(saved_then).as_secs_f64();
                // Overlapping requests count their time once: neither the
                // users nor the savings took more than the time passed.
                (elapsed, busy.min(elapsed), saved.min(elapsed))
            }
            None => (0.0, 0.0, 0.0),
        };
        // The users get their time; placement the share of it, what the
        // SSD saved them, and whatever neither the users nor placement
        // used. Placement time not yet matched by time passing is carried
        // over: on a clock that catches up with device time later (the
        // bench's), the catching up is not idle time.
        let idle = elapsed - busy;
        let free = (idle - self.spent).max(0.0);
        self.spent = (self.spent - idle).max(0.0);
        self.tokens = (self.tokens + self.share * busy + saved).min(self.burst);
        if free > 0.0 && self.tokens < self.idle_burst {
            self.tokens = (self.tokens + free).min(self.idle_burst);
        }
        self.last = Some((now, busy_total, saved_total));
        self.tokens
    }

    /// Placement took `secs` of device time.
    pub(crate) fn spend(&mut self, secs: f64) {
        self.tokens -= secs;
        self.spent += secs;
    }
}

/// The HDD's foreground time: the union of its users' requests' spans, so
/// requests queued together count their time once, and how many requests
/// it served. Under load the mean is the HDD's service time per request
/// (its queue's reordering included), not a request's wait in the queue.
#[derive(Debug, Default)]
pub(crate) struct BusyTime {
    /// The latest end of a span seen.
    last_end: Duration,
    /// The union's length.
    pub(crate) busy: Duration,
    requests: u64,
}

impl BusyTime {
    /// A request spanned `start..end` (on the clock's `io_now` scale). Spans
    /// arrive about in the order they end: each adds what lies past the
    /// latest end seen.
    pub(crate) fn add(&mut self, start: Duration, end: Duration) {
        self.busy += end.saturating_sub(start.max(self.last_end));
        self.last_end = self.last_end.max(end);
        self.requests += 1;
    }

    /// Mean time per request (zero before the first).
    pub(crate) fn mean(&self) -> Duration {
        match self.requests {
            0 => Duration::ZERO,
            n => self.busy / n.min(u64::from(u32::MAX)) as u32,
        }
    }
}

/// What the SSD saved the users, counted only while a budget uses it (a
/// few relaxed atomics per SSD read, no lock).
#[derive(Debug, Default)]
pub(crate) struct Savings {
    /// The promotions' budget is on (`migrate.promote-share` below 1).
    placement: AtomicBool,
    /// The admissions' budget is on (`migrate.admission-share` below 1).
    admission: AtomicBool,
    /// The HDD's mean service time per foreground request (ns).
    mean: AtomicU64,
    /// HDD time saved so far (ns).
    saved: AtomicU64,
}

impl Savings {
    /// The HDD's mean service time is now `d`.
    pub(crate) fn set_mean(&self, d: Duration) {
        self.mean.store(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Whether the admissions' budget counts savings.
    pub(crate) fn for_admission(&self, on: bool) {
        self.admission.store(on, Ordering::Relaxed);
    }
}

impl Volume {
    /// A foreground read the SSD served: it saved the users one HDD
    /// request, of the HDD's mean service time so far. Counted only while
    /// a budget uses it.
    pub(crate) fn ssd_foreground_read(&self) {
        if !self.budget_on()
            || crate::device::IoClass::current() != crate::device::IoClass::Foreground
        {
            return;
        }
        let s = &self.savings;
        s.saved
            .fetch_add(s.mean.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether a budget uses the users' HDD time and the SSD's savings
    /// (the promotions', or the admissions' while admission is on): only
    /// then do the I/O paths measure them, so with both off (the default)
    /// they cost a relaxed load or two.
    pub(crate) fn budget_on(&self) -> bool {
        let s = &self.savings;
        s.placement.load(Ordering::Relaxed)
            || s.admission.load(Ordering::Relaxed) && self.admission_enabled()
    }

    /// HDD time the SSD has saved the users since a budget began counting
    /// it: their reads it served, each at the HDD's mean service time.
    pub fn hdd_time_saved(&self) -> Duration {
        Duration::from_nanos(self.savings.saved.load(Ordering::Relaxed))
    }

    /// The HDD's mean service time per foreground request, as measured
    /// while a budget used it (zero before): what one read the SSD serves
    /// saves.
    pub fn hdd_service_time(&self) -> Duration {
        Duration::from_nanos(self.savings.mean.load(Ordering::Relaxed))
    }

    /// Set the share of a busy HDD's time the migrator's promotions may
    /// take beyond what the SSD saved (0 to 1; 1: no limit).
    pub fn set_placement_share(&self, share: f64) {
        self.placement.lock().share = share.clamp(0.0, 1.0);
        self.savings.placement.store(share < 1.0, Ordering::Relaxed);
    }

    /// Seconds of HDD time the migrator's promotions may spend now (see
    /// the module docs): the bucket is filled for the time since it last
    /// was. Not positive: none.
    pub fn placement_budget(&self) -> f64 {
        let now = self.clock.now();
        self.placement
            .lock()
            .refill(now, self.hdd_foreground_busy(), self.hdd_time_saved())
    }

    /// The migrator's promotions took `d` of HDD time.
    pub fn placement_spent(&self, d: Duration) {
        self.placement.lock().spend(d.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_busy_hdd_gives_placement_its_share_and_an_idle_one_all_of_it() {
        let mut b = HddBudget::new(0.1, 0.25, 0.25);
        b.tokens = 0.0;
        let z = Duration::ZERO;
        assert!(b.refill(ms(0), ms(0), z) <= 0.0, "empty at first");
        // Users kept the HDD busy for the whole second: 0.1 s to spend.
        let t = b.refill(ms(1000), ms(1000), z);
        assert!((t - 0.1).abs() < 1e-9, "{t}");
        // A copy takes 0.1 s; the users' time goes on as before: nothing
        // of the copy's own time comes back as idle time.
        b.spend(0.1);
        let t = b.refill(ms(1100), ms(1000), z);
        assert!(t.abs() < 1e-9, "{t}");
        // Overlapping requests count their time once: busy is at most the
        // time that passed.
        let t = b.refill(ms(1200), ms(5000), z);
        assert!((t - 0.01).abs() < 1e-9, "{t}");
        // An idle second: all of it, up to the burst.
        let t = b.refill(ms(2200), ms(5000), z);
        assert!((t - 0.25).abs() < 1e-9, "{t}");
        // Time the clock has not caught up with yet is no idle time when
        // it does: 0.1 s spent at once, then 0.05 s pass with no user
        // (the clock catching up), then 0.1 s more.
        b.tokens = 0.0;
        b.spend(0.1);
        assert!(b.refill(ms(2200), ms(5000), z) <= 0.0);
        assert!(b.refill(ms(2250), ms(5000), z) <= 0.0, "{b:?}");
        // Of the 0.15 s that passed, 0.05 s were idle: the 0.1 s spent is
        // owed still, less those.
        let t = b.refill(ms(2350), ms(5000), z);
        assert!((t + 0.05).abs() < 1e-9, "{t}");
        let t = b.refill(ms(2450), ms(5000), z);
        assert!((t - 0.05).abs() < 1e-9, "{t}");
        // No limit at share 1.
        b.share = 1.0;
        b.spend(10.0);
        assert!(b.refill(ms(2200), ms(5000), z) > 0.0);
    }

    #[test]
    fn overlapping_requests_count_their_time_once() {
        let mut b = BusyTime::default();
        // Two queued together: the second waits for the first.
        b.add(ms(0), ms(10));
        b.add(ms(0), ms(20));
        assert_eq!(b.busy, ms(20));
        assert_eq!(b.mean(), ms(10));
        // A gap, then one alone.
        b.add(ms(50), ms(60));
        assert_eq!(b.busy, ms(30));
        assert_eq!(b.mean(), ms(10));
        // One that ended before the latest end adds nothing.
        b.add(ms(55), ms(58));
        assert_eq!(b.busy, ms(30));
    }

    #[test]
    fn what_the_ssd_saved_the_users_is_placement_time() {
        let mut b = HddBudget::new(0.0, 0.05, 1.0);
        b.tokens = 0.0;
        b.refill(ms(0), ms(0), ms(0));
        // A busy second with share 0: nothing, unless the SSD saved time.
        assert!(b.refill(ms(1000), ms(1000), ms(0)).abs() < 1e-9);
        let t = b.refill(ms(1100), ms(1100), ms(30));
        assert!((t - 0.03).abs() < 1e-9, "{t}");
        // Savings count no more than the time that passed.
        let t = b.refill(ms(1200), ms(1200), ms(5000));
        assert!((t - 0.13).abs() < 1e-9, "{t}");
        // And the bucket holds a burst at most.
        let t = b.refill(ms(2500), ms(2500), ms(10_000));
        assert!((t - 1.0).abs() < 1e-9, "{t}");
        // Idle time fills it to its idle burst only, once it has matched
        // the time spent.
        b.spend(1.0);
        let t = b.refill(ms(3500), ms(2500), ms(10_000));
        assert!(t.abs() < 1e-9, "{t}");
        let t = b.refill(ms(4500), ms(2500), ms(10_000));
        assert!((t - 0.05).abs() < 1e-9, "{t}");
        let t = b.refill(ms(5500), ms(2500), ms(10_000));
        assert!((t - 0.05).abs() < 1e-9, "{t}");
    }
}
