//! The migration worker: each round it ticks the heat map, asks the policy
//! for moves and carries them out with the volume's crash-safe copy protocol,
//! paced by a token bucket and backing off while foreground I/O is busy; it
//! waits with the volume's [`crate::clock::Clock::sleep`]. In the daemon it
//! runs on its own thread; tests and the virtual-time benchmark call
//! [`Migrator::run_round`] directly, on a manual or virtual clock. The
//! round itself (plan, then move batch by batch) is in `round`; its upkeep
//! besides placement (draining a tier, write-back of the write log,
//! pre-cleaning) is in `upkeep`; this file holds the worker's state, its
//! threads and pacing.
//!
//! An error or a panic in a round never stops serving: the extent stays where
//! it was, the failure is logged and counted, and a later round retries.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tracing::{debug, error, warn};

mod pressed;
mod round;
mod upkeep;

use super::bucket::TokenBucket;
use super::knobs::MigrateConfig;
use crate::device::IoClass;
use crate::heat::HeatMap;
use crate::volume::{Stats, Tier, Volume};

/// Work that may wait (speculative moves, write-back of the log while the
/// SSD is not draining, pre-cleaning) goes in groups of at most this many
/// extents, each only while the HDD is free of users: a group that starts
/// just before users come back holds them up for a few extents at most.
const SPECULATIVE_BATCH: usize = 4;

/// Least time between two warnings of failed admissions (a dead device
/// fails every one).
const ADMIT_WARN_EVERY: Duration = Duration::from_secs(10);

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoundReport {
    /// Moves the policy asked for.
    pub planned: usize,
    /// Moves done.
    pub moved: usize,
    /// Bytes copied.
    pub bytes: u64,
    /// Moves with nothing to do or no room.
    pub skipped: usize,
    /// Moves abandoned because the extent kept changing.
    pub raced: usize,
    /// Moves that failed with an error.
    pub errors: usize,
    /// The plan filled the round's budget (`max-moves`): more is waiting.
    pub truncated: bool,
    /// Extents whose logged blocks were written back to the HDD.
    pub written_back: usize,
    /// Shadows dropped to give the HDD free slots.
    pub shadows_dropped: usize,
    /// SSD extents given a clean HDD copy (pre-cleaning).
    pub precleaned: usize,
    /// Extents given an HDD copy (a new one, a stale one brought up to
    /// date, logged blocks written back) for the SSD exposure bound.
    pub covered: usize,
    /// Speculative moves left for a later round: the HDD was serving users.
    pub deferred: usize,
    /// Of those, promotions and their swaps the placement budget had no
    /// HDD time for (`migrate.promote-share`).
    pub paced: usize,
}

impl RoundReport {
    /// Whether the next round should start at once instead of after the
    /// interval: the budget was full and moves are getting done.
    pub fn more_waiting(&self) -> bool {
        (self.truncated && self.moved > 0) || self.written_back > 0 || self.precleaned > 0
    }
}

/// Backlog and throttle counters of a [`Migrator`].
#[derive(Debug, Default)]
struct Progress {
    planned: AtomicU64,
    last_planned: AtomicU64,
    queued: AtomicU64,
    more_waiting: AtomicBool,
    backoff_ns: AtomicU64,
    backing_off: AtomicBool,
    throttle_ns: AtomicU64,
}

/// What the migrator has left to do and how long it waited
/// ([`Migrator::progress`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressSnapshot {
    /// Moves the policy has asked for since start.
    pub planned: u64,
    /// Moves the latest round's plan asked for.
    pub last_planned: u64,
    /// Moves of the current round's plan not yet tried (0 between rounds).
    pub queued: u64,
    /// The latest plan filled a round (`max-moves`): more is waiting.
    pub more_waiting: bool,
    /// Seconds moves waited for busy foreground I/O since start.
    pub backoff_secs: f64,
    /// Waiting for the foreground now.
    pub backing_off: bool,
    /// Seconds copies waited for the bandwidth budget since start.
    pub throttle_secs: f64,
    /// The bandwidth budget in force, bytes/s (0: unlimited): `bandwidth`,
    /// or less when a remote capacity tier's measured link asks for less.
    #[serde(default)]
    pub budget: u64,
    /// The remote capacity tier's link as measured when the budget was
    /// last set (none for a local HDD).
    #[serde(default)]
    pub capacity_link: Option<crate::device::LinkEstimate>,
}

/// Share of a remote capacity tier's measured bandwidth that migration may
/// take: the rest stays for the users' requests that miss the SSD.
pub const REMOTE_SHARE: f64 = 0.5;
/// The budget never falls below this (bytes/s), so placement still moves
/// over a very slow link.
const MIN_REMOTE_BUDGET: u64 = 1 << 20;

/// The migration budget: the configured `bandwidth` (0: unlimited), held
/// to [`REMOTE_SHARE`] of a remote capacity tier's measured bandwidth.
pub fn migration_budget(configured: u64, link: Option<&crate::device::LinkEstimate>) -> u64 {
    let Some(l) = link else {
        return configured;
    };
    let measured = ((l.bandwidth * REMOTE_SHARE) as u64).max(MIN_REMOTE_BUDGET);
    if configured == 0 {
        measured
    } else {
        configured.min(measured)
    }
}

/// Plans and performs migrations for one volume.
pub struct Migrator {
    vol: Arc<Volume>,
    heat: Arc<HeatMap>,
    cfg: Mutex<MigrateConfig>,
    bucket: Mutex<TokenBucket>,
    reserve_bucket: Mutex<TokenBucket>,
    /// Smoothed HDD time of one placement move (ns), sizing the batches
    /// the placement budget pays for.
    move_cost: AtomicU64,
    /// The capacity tier's link the budget was last sized with.
    link: Mutex<Option<crate::device::LinkEstimate>>,
    paused: AtomicBool,
    /// Foreground bytes written at the last round and when.
    last_written: Mutex<(u64, Duration)>,
    rounds: AtomicU64,
    panics: AtomicU64,
    /// Backlog and throttle counters ([`Migrator::progress`]).
    progress: Progress,
    /// [`ssd_changes`], and when, as pre-cleaning last looked for an SSD
    /// extent without an HDD copy and found none. Only a write to the SSD
    /// or a dropped shadow makes such an extent, so while the count stands
    /// the look (a walk of the SSD's extents) is skipped, for
    /// [`PRECLEAN_RELOOK`] at most (a write whose count came before the
    /// look but whose mapping came after it is found then): idle rounds
    /// cost next to nothing.
    preclean_none: Mutex<Option<(u64, Duration)>>,
    /// Zones a working set was found arriving in (`PlanInput::following`).
    following: Mutex<std::collections::HashSet<u64>>,
    /// SSD extents the last look found without an HDD copy, coldest first,
    /// and when it looked: later rounds take their batches from it until
    /// it is used up or [`PRECLEAN_LIST_AGE`] old, so the look's walk of
    /// the SSD is paid once per list, not once per batch of four.
    preclean_list: Mutex<(std::collections::VecDeque<u64>, Duration)>,
    /// Extents per group of write-back while the HDD is free of users
    /// (`upkeep::write_back`): grown until a group's syncs take at most a
    /// quarter of its time.
    write_back_group: std::sync::atomic::AtomicUsize,
    /// When the last group of write-back beside users ended, while the log
    /// has stayed pressed since (`upkeep::write_back_pressed`).
    pressed_end: Mutex<Option<Duration>>,
    /// Held while write-back runs beside users (the round or the
    /// write-back thread, one at a time).
    pressed_run: Mutex<()>,
    /// `durability.ssd-exposure` in ns (0: no bound).
    exposure_bound: AtomicU64,
}

/// The running background thread.
pub struct MigratorHandle {
    tx: mpsc::Sender<Signal>,
    thread: Option<JoinHandle<()>>,
    /// The admitting thread and its stop flag.
    admit: Option<(Arc<std::sync::atomic::AtomicBool>, JoinHandle<()>)>,
    /// The thread that writes the log back beside users while it is
    /// pressed, and its stop flag.
    pressed: Option<(Arc<std::sync::atomic::AtomicBool>, JoinHandle<()>)>,
}

enum Signal {
    Wake,
    Stop,
}

impl MigratorHandle {
    /// Start a round now instead of at the next interval.
    pub fn wake(&self) {
        let _ = self.tx.send(Signal::Wake);
    }

    /// Stop the thread (after its current move) and wait for it.
    pub fn stop(mut self) {
        let _ = self.tx.send(Signal::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for (stop, t) in [self.admit.take(), self.pressed.take()]
            .into_iter()
            .flatten()
        {
            stop.store(true, Ordering::Relaxed);
            let _ = t.join();
        }
    }
}

/// Writes to the SSD (any: foreground, the write log, copies) plus shadows
/// dropped: what can give the SSD an extent with data and no HDD copy.
fn ssd_changes(vol: &Volume) -> u64 {
    let s = vol.stats();
    Stats::get(&s.dev_writes[Tier::Ssd.index()]).wrapping_add(Stats::get(&s.shadows_dropped))
}

/// Bytes the foreground wrote to the devices (migration copies excluded).
fn written_bytes(vol: &Volume) -> u64 {
    let s = vol.stats();
    let dev = Stats::get(&s.dev_write_bytes[0]) + Stats::get(&s.dev_write_bytes[1]);
    let copies = Stats::get(&s.migrated_bytes[0])
        + Stats::get(&s.migrated_bytes[1])
        + Stats::get(&s.precleaned_bytes);
    dev.saturating_sub(copies)
}

impl Migrator {
    /// A migrator for `vol`.
    pub fn new(vol: Arc<Volume>, heat: Arc<HeatMap>, cfg: MigrateConfig) -> Self {
        let now = vol.clock().now();
        // A merged copy takes its tokens at once.
        let burst = vol.geometry().extent_size.max(crate::volume::MERGE_MAX);
        let written = written_bytes(&vol);
        Migrator {
            bucket: Mutex::new(TokenBucket::new(
                migration_budget(cfg.bandwidth.0, vol.hdd_link().as_ref()),
                burst,
                now,
            )),
            reserve_bucket: Mutex::new(TokenBucket::new(cfg.bandwidth.0, burst, now)),
            // An extent's read and a victim's write on a 5400 rpm disk.
            move_cost: AtomicU64::new(40_000_000),
            link: Mutex::new(vol.hdd_link()),
            vol,
            heat,
            cfg: Mutex::new(cfg),
            paused: AtomicBool::new(false),
            last_written: Mutex::new((written, now)),
            rounds: AtomicU64::new(0),
            panics: AtomicU64::new(0),
            progress: Progress::default(),
            preclean_none: Mutex::new(None),
            following: Mutex::new(std::collections::HashSet::new()),
            preclean_list: Mutex::new((std::collections::VecDeque::new(), Duration::ZERO)),
            write_back_group: std::sync::atomic::AtomicUsize::new(SPECULATIVE_BATCH),
            pressed_end: Mutex::new(None),
            pressed_run: Mutex::new(()),
            exposure_bound: AtomicU64::new(0),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> MigrateConfig {
        *self.cfg.lock()
    }

    /// Replace the configuration (policy knobs, bandwidth) live.
    pub fn set_config(&self, cfg: MigrateConfig) {
        self.bucket.lock().set_rate(migration_budget(
            cfg.bandwidth.0,
            self.vol.hdd_link().as_ref(),
        ));
        *self.cfg.lock() = cfg;
    }

    /// Set the SSD exposure bound (`durability.ssd-exposure`; zero: none),
    /// live.
    pub fn set_exposure_bound(&self, bound: Duration) {
        self.exposure_bound
            .store(bound.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The SSD exposure bound in force (zero: none).
    pub fn exposure_bound(&self) -> Duration {
        Duration::from_nanos(self.exposure_bound.load(Ordering::Relaxed))
    }

    /// Pause or resume migration.
    pub fn set_paused(&self, paused: bool) {
        let was = self.paused.swap(paused, Ordering::Relaxed);
        if was && !paused {
            // The write rate is measured from here: writes while paused
            // are not a rate the next round should plan the reserve by
            // (the bench pauses the migrator between its runs).
            let now = self.vol.clock().now();
            *self.last_written.lock() = (written_bytes(&self.vol), now);
        }
    }

    /// Whether migration is paused.
    pub fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// SSD slots the policy keeps free: the volume's reserve target
    /// ([`Volume::reserve_target`]), the geometry's reserve unless set with
    /// [`Migrator::set_reserve_extents`].
    pub fn reserve_extents(&self) -> u64 {
        u64::from(self.vol.reserve_target())
    }

    /// Change the reserve target live (clamped to the SSD's slots); the
    /// volume's capacity does not change ([`Volume::set_reserve_target`]).
    pub fn set_reserve_extents(&self, extents: u64) {
        self.vol.set_reserve_target(extents);
    }

    /// Rounds run so far.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// The migration backlog and how long moves waited.
    pub fn progress(&self) -> ProgressSnapshot {
        let p = &self.progress;
        let secs = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
        ProgressSnapshot {
            planned: p.planned.load(Ordering::Relaxed),
            last_planned: p.last_planned.load(Ordering::Relaxed),
            queued: p.queued.load(Ordering::Relaxed),
            more_waiting: p.more_waiting.load(Ordering::Relaxed),
            backoff_secs: secs(&p.backoff_ns),
            backing_off: p.backing_off.load(Ordering::Relaxed),
            throttle_secs: secs(&p.throttle_ns),
            budget: self.bucket.lock().rate(),
            capacity_link: *self.link.lock(),
        }
    }

    /// Wait while `busy()` says the foreground needs the devices, at most
    /// `max` (the time goes to the backoff counters).
    fn back_off(&self, busy: impl Fn() -> bool, max: Duration) {
        let clock = self.vol.clock();
        let mut waited = Duration::ZERO;
        if !busy() {
            return;
        }
        self.progress.backing_off.store(true, Ordering::Relaxed);
        while busy() && waited < max {
            let step = Duration::from_millis(5);
            clock.sleep(step);
            waited += step;
        }
        self.progress.backing_off.store(false, Ordering::Relaxed);
        self.progress
            .backoff_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Rounds that panicked.
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// Whether the HDD has served no user for `speculative-idle`: work
    /// that may wait (speculative moves, write-back of a log that is not
    /// filling up, pre-cleaning) runs only then.
    fn hdd_free_of_users(&self, cfg: &MigrateConfig) -> bool {
        cfg.speculative_idle.is_zero() || self.vol.hdd_foreground_idle() >= cfg.speculative_idle
    }

    /// Whether a user's sequential stream has sent a write to the HDD in
    /// place within `speculative-idle` ([`Volume::hdd_stream_idle`]; the
    /// window in which the HDD counts as still serving a user). The disk
    /// streams those writes from its write cache only while its mechanism
    /// keeps up; a copy queued in front of them makes each wait for it,
    /// where a copy written a moment later costs the stream nothing. So the
    /// copies that may wait hold back while it lasts, before each copy of
    /// a batch, as they hold back for the users' queueing reads: refills
    /// and cleaning of the reserve, pre-cleaning, the exposure bound's
    /// copies not yet late. Not the moves for the data in use (what the
    /// users' misses wait for), nor the write-back of the log (it starts
    /// only while the HDD is free of users; held mid-group it moved no
    /// verdict and slowed sequential writes, docs/tiering.md).
    fn hdd_streaming(&self, cfg: &MigrateConfig) -> bool {
        !cfg.speculative_idle.is_zero() && self.vol.hdd_stream_idle() < cfg.speculative_idle
    }

    /// Wait while a user's stream goes to the HDD ([`Migrator::hdd_streaming`]),
    /// at most `max-backoff`: called before each copy of work that may
    /// wait, outside the extents' locks (where the pacing is).
    fn yield_to_streams(&self, cfg: &MigrateConfig) {
        self.back_off(|| self.hdd_streaming(cfg), cfg.max_backoff);
    }

    /// Take `bytes` from `bucket` and sleep for the wait it says. Called
    /// even with nothing to wait for: on the virtual clock this is where a
    /// copy's device time elapses.
    fn pace(&self, bucket: &Mutex<TokenBucket>, bytes: u64) -> Duration {
        let clock = self.vol.clock();
        let wait = bucket.lock().take(bytes, clock.now());
        self.progress
            .throttle_ns
            .fetch_add(wait.as_nanos() as u64, Ordering::Relaxed);
        clock.sleep(wait);
        wait
    }

    /// Run rounds on a background thread until stopped.
    pub fn spawn(self: &Arc<Self>) -> std::io::Result<MigratorHandle> {
        let (tx, rx) = mpsc::channel();
        let me = self.clone();
        let thread = std::thread::Builder::new()
            .name("tierd-migrate".into())
            .spawn(move || me.thread_main(rx))?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (me, flag) = (self.clone(), stop.clone());
        let admit = std::thread::Builder::new()
            .name("tierd-admit".into())
            .spawn(move || me.admit_main(&flag))?;
        let stop2 = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (me, flag) = (self.clone(), stop2.clone());
        let pressed = std::thread::Builder::new()
            .name("tierd-logpress".into())
            .spawn(move || me.pressed_main(&flag))?;
        Ok(MigratorHandle {
            tx,
            thread: Some(thread),
            admit: Some((stop, admit)),
            pressed: Some((stop2, pressed)),
        })
    }

    /// The admitting thread: brings up each extent a read missed as soon
    /// as it is noted (the read was answered first), until stopped.
    fn admit_main(&self, stop: &std::sync::atomic::AtomicBool) {
        let _class = IoClass::Background.enter();
        // A failing device fails every admission: one warning per
        // `ADMIT_WARN_EVERY`, saying how many were not logged.
        let (mut warned, mut quiet): (Option<std::time::Instant>, u64) = (None, 0);
        while !stop.load(Ordering::Relaxed) {
            if !self.vol.wait_admissions(Duration::from_millis(200)) {
                continue;
            }
            let cfg = self.config();
            if !cfg.enabled || !cfg.admission || self.paused() {
                // Not now: the next miss notes them again.
                self.vol.take_admissions();
                continue;
            }
            self.vol.ledger().set_shares(
                cfg.admission.then_some(cfg.admission_share),
                cfg.promote_share,
            );
            match catch_unwind(AssertUnwindSafe(|| super::admit::admit_pending(&self.vol))) {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    Stats::add(&self.vol.stats().migration_errors, 1);
                    if warned.is_some_and(|t| t.elapsed() < ADMIT_WARN_EVERY) {
                        quiet += 1;
                    } else {
                        warn!(not_logged_since_last = quiet, "admission: {e}");
                        (warned, quiet) = (Some(std::time::Instant::now()), 0);
                    }
                }
                Err(_) => error!("admission panicked; it goes on with the next miss"),
            }
        }
    }

    fn thread_main(&self, rx: mpsc::Receiver<Signal>) {
        let _class = IoClass::Background.enter();
        let mut last_save = self.vol.clock().now();
        let mut more = false;
        loop {
            let cfg = self.config();
            // A round that filled its budget is followed at once.
            let wait = if more { Duration::ZERO } else { cfg.interval };
            match rx.recv_timeout(wait) {
                Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(Signal::Wake) | Err(RecvTimeoutError::Timeout) => {}
            }
            if !cfg.enabled {
                continue;
            }
            let round = catch_unwind(AssertUnwindSafe(|| self.run_round()));
            more = matches!(&round, Ok(r) if r.more_waiting());
            match round {
                Ok(r)
                    if r.moved
                        + r.errors
                        + r.raced
                        + r.written_back
                        + r.shadows_dropped
                        + r.precleaned
                        + r.covered
                        > 0 =>
                {
                    debug!(?r, "migration round")
                }
                Ok(_) => {}
                Err(_) => {
                    self.panics.fetch_add(1, Ordering::Relaxed);
                    Stats::add(&self.vol.stats().migration_errors, 1);
                    error!("migration round panicked; serving continues, retrying next round");
                }
            }
            let now = self.vol.clock().now();
            if now.saturating_sub(last_save) >= cfg.heat_save_interval {
                last_save = now;
                if let Err(e) = self.vol.save_heat() {
                    warn!("saving heat: {e}");
                }
            }
        }
        if let Err(e) = self.vol.save_heat() {
            warn!("saving heat at shutdown: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::LinkEstimate;

    #[test]
    fn a_remote_link_holds_the_budget_to_half_its_measured_bandwidth() {
        let link = |mib: f64| LinkEstimate {
            rtt_secs: 0.001,
            bandwidth: mib * f64::from(1u32 << 20),
            samples: 10,
        };
        // A local HDD: the configured bandwidth.
        assert_eq!(migration_budget(128 << 20, None), 128 << 20);
        assert_eq!(migration_budget(0, None), 0);
        // A slow remote (40 MiB/s): 20 MiB/s, whatever is configured.
        assert_eq!(migration_budget(128 << 20, Some(&link(40.0))), 20 << 20);
        assert_eq!(migration_budget(0, Some(&link(40.0))), 20 << 20);
        // A fast one: the configured cap still holds.
        assert_eq!(migration_budget(128 << 20, Some(&link(1000.0))), 128 << 20);
        // A crawling one: never below 1 MiB/s.
        assert_eq!(migration_budget(128 << 20, Some(&link(0.1))), 1 << 20);
    }
}
