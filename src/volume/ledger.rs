//! The ledger of HDD time: one account of what placement spends on the
//! HDD and what flash saves the HDD's users, which the I/O paths record
//! into and the migrator and admission consult.
//!
//! A hybrid must never be slower than its own HDD. Every copy costs HDD
//! time (an extent's read, a victim's write), paid now; it saves HDD time
//! only later, one read at a time, if the data is read again. So:
//!
//! - **Pacing** ([`HddBudget`]): what admissions and the migrator's
//!   promotions may spend while users need the HDD is a token bucket in
//!   seconds of device time, filled with
//!   - for admissions, the time the HDD served no user (less what they
//!     took of it); the migrator's promotions go without the bucket while
//!     the HDD is free of users, a run at a time (`migrate::pay`);
//!   - `share` of the time it served users;
//!   - the HDD time the SSD saved the users: each foreground read served
//!     by the SSD counts as one HDD request of the HDD's mean service time
//!     (the union of the users' request spans over the requests:
//!     [`BusyTime`]).
//!
//!   Spent this way, placement costs the users at most `share` of the
//!   HDD's time beyond what it has given back. The promotions' budget is
//!   off by default (`migrate.promote-share` 1): see docs/tiering.md,
//!   "Promotions pay their way".
//! - **Whether a first miss is worth a copy** ([`Reuse`]): admitting at
//!   the first miss, rather than at the second (a miss the ghost list
//!   remembers, as LARC does), gains one HDD read for every extent that is
//!   read again (either rule copies it; the first serves its second read
//!   from flash) and loses one copy for every extent never read again
//!   (the second rule never copies it). The ledger counts, decayed over
//!   the last admission decisions (counted in misses, never in wall time,
//!   so a trace played faster or slower decides alike), the copies made at
//!   a first miss and how many of them were read again; misses are
//!   admitted at once while the rereads' HDD time (each at the HDD's mean
//!   service time) is worth the wasted copies' (each at the copies' mean
//!   cost), and on shown reuse otherwise. While waiting for reuse the
//!   ghost gives the same counts (a remembered first miss is a copy
//!   admitting at once would have made, a ghost hit one of them read
//!   again), and admission goes back to the first miss when they say so.
//! - **What a copy costs**: the HDD time its reads and writes took the
//!   drive's mechanism, where the drive's model says so, never its wait in
//!   the queue behind the users' requests (theirs, and counted as theirs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::clock::Clock;

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

/// What the SSD saved the users, counted only while the ledger counts (a
/// few relaxed atomics per SSD read, no lock).
#[derive(Debug, Default)]
pub(crate) struct Savings {
    /// The promotions' budget is on (`migrate.promote-share` below 1).
    placement: AtomicBool,
    /// Admission is on.
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
}

/// HDD seconds on each side of an account, decayed.
#[derive(Debug, Default, Clone, Copy)]
struct Account {
    saved: f64,
    spent: f64,
}

impl Account {
    fn decay(&mut self, by: f64) {
        self.saved *= by;
        self.spent *= by;
    }

    /// Saved over spent; `None` before anything was spent.
    fn ratio(&self) -> Option<f64> {
        (self.spent > 0.0).then(|| self.saved / self.spent)
    }
}

/// Admission decisions over which the reuse accounts forget half of what
/// they knew, at least (the room's extents, if more).
const REUSE_HALF_LIFE: f64 = 256.0;

/// What admitting at the first miss gains over admitting at the second,
/// over what it loses ([`Rereads::edge`]), below which admission switches
/// to waiting for reuse, and above [`REUSE_RESUME`] back: hysteresis, so an
/// edge hovering about 1 does not flip the rule every few misses.
const REUSE_STOP: f64 = 0.8;
const REUSE_RESUME: f64 = 1.25;

/// Copies' cost assumed before one was measured: an extent's read at a
/// modest disk's speed (1 MiB at 100 MB/s).
const COPY_GUESS: f64 = 0.01;

/// Copies made at a first miss, and how many of those extents were read
/// again while on flash, decayed: what decides between admitting at the
/// first miss and at the second ([`Reuse::decided`]).
#[derive(Debug, Default, Clone, Copy)]
struct Rereads {
    copies: f64,
    reread: f64,
}

impl Rereads {
    fn decay(&mut self, by: f64) {
        self.copies *= by;
        self.reread *= by;
    }

    /// What admitting at the first miss gains over admitting at the second
    /// (a ghost hit, as LARC does), over what it loses, for a read saved
    /// `service` and a copy `copy` seconds of HDD time: an extent read
    /// again after its first miss is copied by either rule, but the first
    /// saves the HDD that second read; an extent never read again is a
    /// copy the second rule does not make. `None` before a few copies were
    /// counted; infinite when none was wasted.
    fn edge(&self, service: f64, copy: f64) -> Option<f64> {
        if self.copies < 8.0 {
            return None;
        }
        let gain = self.reread * service;
        let loss = (self.copies - self.reread).max(0.0) * copy;
        Some(if loss > 0.0 {
            gain / loss
        } else {
            f64::INFINITY
        })
    }
}

/// Whether a first miss is worth a copy (see the module docs).
#[derive(Debug)]
pub(crate) struct Reuse {
    /// Reads of admitted extents (saved), their copies (spent).
    admitted: Account,
    /// While admitting at the first miss: its copies and their rereads.
    first: Rereads,
    /// While waiting for reuse: first misses the ghost remembered (each a
    /// copy admitting at once would have made) and ghost hits (each such
    /// copy read again).
    would: Rereads,
    /// While waiting for reuse: what admitting at once would have saved
    /// (a ghost hit) and spent (a remembered first miss).
    ghost: Account,
    /// The mean cost of one admission's copy, seconds (smoothed).
    copy: f64,
    /// Admitting at the first miss (`true`) or on shown reuse.
    at_first: bool,
    /// Decay per decision.
    keep: f64,
}

impl Reuse {
    fn new(room: u64) -> Self {
        let half = REUSE_HALF_LIFE.max(room as f64);
        Reuse {
            admitted: Account::default(),
            first: Rereads::default(),
            would: Rereads::default(),
            ghost: Account::default(),
            copy: COPY_GUESS,
            at_first: true,
            keep: 0.5f64.powf(1.0 / half),
        }
    }

    /// What admitting at the first miss returns: measured while it is the
    /// rule, estimated from the ghost while waiting for reuse.
    fn first_return(&self) -> Option<f64> {
        if self.at_first {
            self.admitted.ratio()
        } else {
            let a = Account {
                saved: self.admitted.saved + self.ghost.saved,
                spent: self.admitted.spent + self.ghost.spent,
            };
            a.ratio()
        }
    }

    /// One admission decision was made, with a read from the HDD saving
    /// `service` seconds: the accounts age, and the rule is looked at
    /// again. Admitting at the first miss stays the rule while what it
    /// gains over admitting at the second (one HDD read per extent read
    /// again) is worth what it loses (a copy per extent never read again);
    /// measured on its own copies while it is the rule, and on the ghost's
    /// first misses and hits while waiting for reuse.
    fn decided(&mut self, service: f64) {
        self.admitted.decay(self.keep);
        self.ghost.decay(self.keep);
        self.first.decay(self.keep);
        self.would.decay(self.keep);
        if self.at_first {
            if self
                .first
                .edge(service, self.copy)
                .is_some_and(|e| e < REUSE_STOP)
            {
                self.at_first = false;
                self.ghost = Account::default();
                self.would = Rereads::default();
            }
        } else if self
            .would
            .edge(service, self.copy)
            .is_some_and(|e| e >= REUSE_RESUME)
        {
            self.at_first = true;
            self.first = Rereads::default();
        }
    }
}

/// The ledger (see the module docs): one per volume.
pub struct Ledger {
    clock: Arc<dyn Clock>,
    /// The users' HDD time (the union of their requests' spans).
    busy: Mutex<BusyTime>,
    /// What the SSD saved them.
    savings: Savings,
    /// What admissions may spend now.
    admission: Mutex<HddBudget>,
    /// What the migrator's promotions may spend now.
    placement: Mutex<HddBudget>,
    /// Whether a first miss is worth a copy.
    reuse: Mutex<Reuse>,
    /// Totals since open, for the status: seconds spent by admissions and
    /// by the migrator's budgeted moves.
    spent: Mutex<(f64, f64)>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("status", &self.status())
            .finish()
    }
}

/// What the ledger shows ([`Ledger::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct LedgerStatus {
    /// HDD seconds the users' requests took since open (counted while a
    /// budget or admission uses them).
    pub users_hdd_s: f64,
    /// HDD seconds the SSD saved them.
    pub saved_hdd_s: f64,
    /// Seconds admissions spent copying, each copy from its start to its
    /// end (its wait behind the users' requests included: what the
    /// admissions' bucket pays).
    pub admissions_hdd_s: f64,
    /// HDD seconds the migrator's budgeted moves spent.
    pub placement_hdd_s: f64,
    /// The HDD's mean service time per user request, seconds.
    pub service_s: f64,
    /// What admitting at the first miss returns now (saved over spent,
    /// recent decisions weighing most); absent before a copy.
    pub first_miss_return: Option<f64>,
    /// Whether misses are admitted at once (else on shown reuse).
    pub admit_at_first_miss: bool,
}

impl Ledger {
    /// A ledger on `clock` for a volume whose SSD room is `room` extents.
    pub(crate) fn new(clock: Arc<dyn Clock>, room: u64) -> Self {
        Ledger {
            clock,
            busy: Mutex::new(BusyTime::default()),
            savings: Savings::default(),
            admission: Mutex::new(HddBudget::new(1.0, ADMISSION_BURST, ADMISSION_BURST)),
            placement: Mutex::new(HddBudget::new(1.0, PLACEMENT_IDLE_BURST, PLACEMENT_BURST)),
            reuse: Mutex::new(Reuse::new(room)),
            spent: Mutex::new((0.0, 0.0)),
        }
    }

    /// Whether the I/O paths measure the users' HDD time and the SSD's
    /// savings: while a budget or admission uses them, so with both off
    /// (promote-share 1, admission off) they cost a relaxed load or two.
    pub(crate) fn counting(&self) -> bool {
        let s = &self.savings;
        s.placement.load(Ordering::Relaxed) || s.admission.load(Ordering::Relaxed)
    }

    /// A foreground HDD request spanned `t0..t1` (`io_now`'s scale).
    pub(crate) fn hdd_foreground(&self, t0: Duration, t1: Duration) {
        if self.counting() {
            let mut t = self.busy.lock();
            t.add(t0, t1);
            self.savings.set_mean(t.mean());
        }
    }

    /// A foreground read the SSD served: it saved the users one HDD
    /// request, of the HDD's mean service time so far.
    pub(crate) fn ssd_read(&self) {
        if !self.counting()
            || crate::device::IoClass::current() != crate::device::IoClass::Foreground
        {
            return;
        }
        let s = &self.savings;
        s.saved
            .fetch_add(s.mean.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// The users' HDD time so far.
    pub(crate) fn users_busy(&self) -> Duration {
        self.busy.lock().busy
    }

    /// HDD time the SSD has saved the users since the ledger began counting
    /// it: their reads it served, each at the HDD's mean service time.
    pub fn hdd_time_saved(&self) -> Duration {
        Duration::from_nanos(self.savings.saved.load(Ordering::Relaxed))
    }

    /// The HDD's mean service time per foreground request, as measured
    /// while the ledger counts (zero before): what one read the SSD serves
    /// saves.
    pub fn hdd_service_time(&self) -> Duration {
        Duration::from_nanos(self.savings.mean.load(Ordering::Relaxed))
    }

    /// Set the shares of a busy HDD's time admissions (with admission on)
    /// and the migrator's promotions may take beyond what the SSD saved (0
    /// to 1; 1: no limit). Changed only when they do.
    pub fn set_shares(&self, admission: Option<f64>, placement: f64) {
        let s = &self.savings;
        match admission {
            Some(a) => {
                self.admission.lock().share = a.clamp(0.0, 1.0);
                // Admission measures the users' time and the savings in
                // any case: the reuse accounts price reads by them.
                s.admission.store(true, Ordering::Relaxed);
            }
            None => s.admission.store(false, Ordering::Relaxed),
        }
        self.placement.lock().share = placement.clamp(0.0, 1.0);
        s.placement.store(placement < 1.0, Ordering::Relaxed);
    }

    /// Whether an admission may use the HDD now: its bucket is filled for
    /// the time since it last was, and must not be empty.
    pub fn may_admit(&self) -> bool {
        let now = self.clock.now();
        self.admission
            .lock()
            .refill(now, self.users_busy(), self.hdd_time_saved())
            > 0.0
    }

    /// An admission's copy took `span` from its start to its end and
    /// `head` of the HDD's mechanism time. The bucket pays the span: a
    /// copy queued behind the users' requests holds the HDD for the users
    /// queued behind it as long as the queue it waited in, so under load
    /// the span is what the copy costs them now, and the HDD time flash
    /// saves later, when a burst's queue has drained, is worth its own
    /// length only. With `saturated` (users' reads have queued on the HDD
    /// without a break for longer than the savings take to come, see
    /// [`crate::volume::Volume::hdd_saturated`]) the bucket pays the head
    /// time: the queue outlasts both the copy and its savings, so a second
    /// of head time spent delays every later request as much as a second
    /// saved speeds them, and head time is weighed against head time. The
    /// reuse accounts pay the head time always: whether copies pay back is
    /// a question of HDD time spent against HDD time saved, queue or no
    /// queue.
    pub fn admitted(&self, span: Duration, head: Duration, saturated: bool) {
        let paid = if saturated { head } else { span }.as_secs_f64();
        self.admission.lock().spend(paid);
        self.spent.lock().0 += paid;
        let secs = head.as_secs_f64();
        let mut r = self.reuse.lock();
        r.admitted.spent += secs;
        if r.at_first {
            r.first.copies += 1.0;
        }
        r.copy = if r.copy == COPY_GUESS {
            secs.max(1e-6)
        } else {
            r.copy * 0.9 + secs * 0.1
        };
    }

    /// A read of an admitted extent was served from flash: one HDD request
    /// saved for the admissions' account.
    pub(crate) fn admitted_hit(&self, first: bool) {
        let saved = self.hdd_service_time().as_secs_f64();
        let mut r = self.reuse.lock();
        r.admitted.saved += saved;
        if first && r.at_first {
            r.first.reread += 1.0;
        }
    }

    /// Whether a first miss is admitted at once now (else on shown reuse);
    /// one decision made, the accounts age.
    pub(crate) fn admit_at_first_miss(&self) -> bool {
        let service = self.hdd_service_time().as_secs_f64();
        let mut r = self.reuse.lock();
        r.decided(service);
        r.at_first
    }

    /// While waiting for reuse: a first miss was only remembered (admitting
    /// at once would have copied it).
    pub(crate) fn ghost_remembered(&self) {
        let mut r = self.reuse.lock();
        if !r.at_first {
            let c = r.copy;
            r.ghost.spent += c;
            r.would.copies += 1.0;
        }
    }

    /// While waiting for reuse: a miss the ghost remembered (admitting at
    /// once would have served it from flash).
    pub(crate) fn ghost_hit(&self) {
        let saved = self.hdd_service_time().as_secs_f64();
        let mut r = self.reuse.lock();
        if !r.at_first {
            r.ghost.saved += saved;
            r.would.reread += 1.0;
        }
    }

    /// Seconds of HDD time the migrator's promotions may spend now: the
    /// bucket is filled for the time since it last was. Not positive: none.
    pub fn placement_budget(&self) -> f64 {
        let now = self.clock.now();
        self.placement
            .lock()
            .refill(now, self.users_busy(), self.hdd_time_saved())
    }

    /// The migrator's promotions took `d` of HDD time.
    pub fn placement_spent(&self, d: Duration) {
        let secs = d.as_secs_f64();
        self.placement.lock().spend(secs);
        self.spent.lock().1 += secs;
    }

    /// What the ledger shows.
    pub fn status(&self) -> LedgerStatus {
        let (admissions, placement) = *self.spent.lock();
        let r = self.reuse.lock();
        LedgerStatus {
            users_hdd_s: self.users_busy().as_secs_f64(),
            saved_hdd_s: self.hdd_time_saved().as_secs_f64(),
            admissions_hdd_s: admissions,
            placement_hdd_s: placement,
            service_s: self.hdd_service_time().as_secs_f64(),
            first_miss_return: r.first_return(),
            admit_at_first_miss: r.at_first,
        }
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
    fn copies_rarely_read_again_turn_admission_to_shown_reuse_and_ghost_hits_bring_it_back() {
        let mut r = Reuse::new(16);
        r.copy = 0.010;
        assert!(r.at_first, "admitting at once at first");
        // Copies of 10 ms, one in four read again (each reread a 5 ms HDD
        // read saved): 5 ms gained for every 30 ms of copies never read.
        for i in 0..40 {
            r.first.copies += 1.0;
            if i % 4 == 0 {
                r.first.reread += 1.0;
            }
            r.decided(0.005);
        }
        assert!(!r.at_first, "{r:?}");
        // Waiting for reuse, three in four remembered misses come back: 15
        // ms gained for every 10 ms copy admitting at once would waste.
        for i in 0..200 {
            r.would.copies += 1.0;
            if i % 4 != 0 {
                r.would.reread += 1.0;
            }
            r.decided(0.005);
            if r.at_first {
                break;
            }
        }
        assert!(r.at_first, "back to admitting at once: {r:?}");
    }

    #[test]
    fn a_high_return_does_not_keep_admitting_at_the_first_miss_when_the_second_does_better() {
        // Every copy pays back many times over in reads, yet half of them
        // are never read again: admitting at the second miss makes the
        // same hits for half the copies, and costs only the second reads.
        let mut r = Reuse::new(16);
        r.copy = 0.020;
        for i in 0..40 {
            r.admitted.spent += 0.020;
            r.first.copies += 1.0;
            if i % 2 == 0 {
                r.admitted.saved += 0.100;
                r.first.reread += 1.0;
            }
            r.decided(0.005);
        }
        assert!(r.first_return().is_some_and(|x| x > 2.0), "{r:?}");
        assert!(!r.at_first, "{r:?}");
    }

    #[test]
    fn an_edge_about_one_does_not_flip_the_rule() {
        // Two in three read again: 2 x 5 ms gained against 10 ms lost.
        let mut r = Reuse::new(16);
        r.copy = 0.010;
        for i in 0..500 {
            r.first.copies += 1.0;
            if i % 3 != 2 {
                r.first.reread += 1.0;
            }
            r.decided(0.005);
            assert!(r.at_first, "about 1 is above the stop line: {r:?}");
        }
    }

    #[test]
    fn the_ledger_prices_reads_of_admitted_extents_at_the_service_time() {
        use crate::clock::ManualClock;
        let l = Ledger::new(Arc::new(ManualClock::new()), 16);
        l.set_shares(Some(0.05), 1.0);
        assert!(l.counting());
        l.hdd_foreground(ms(0), ms(8));
        l.hdd_foreground(ms(10), ms(18));
        assert_eq!(l.hdd_service_time(), ms(8));
        // The copy waited 84 ms behind the users and took the HDD 16 ms:
        // the bucket pays the 100 ms span, the reuse account the 16 ms.
        l.admitted(ms(100), ms(16), false);
        l.admitted_hit(true);
        l.admitted_hit(false);
        let s = l.status();
        assert!(
            (s.first_miss_return.unwrap_or(0.0) - 1.0).abs() < 1e-9,
            "{s:?}"
        );
        assert!((s.admissions_hdd_s - 0.100).abs() < 1e-9);
        assert!(s.admit_at_first_miss);
        // On a saturated HDD the bucket pays the 16 ms of head time.
        l.admitted(ms(100), ms(16), true);
        let s = l.status();
        assert!((s.admissions_hdd_s - 0.116).abs() < 1e-9, "{s:?}");
        l.set_shares(None, 1.0);
        assert!(
            !l.counting(),
            "admission off, no budget: nothing is measured"
        );
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
