//! The daemon's live state shared by the control server and the metrics
//! exporter, and the status snapshot computed from it.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::control::{
    AdmissionStatus, HealthStatus, LatencySummary, MigrationStatus, OpLatency, ReasonCount,
    ReserveStatus, ShadowStatus, Status, TierStatus, WorkingSetStatus, WriteLogStatus,
};
use crate::device::{IoClass, IoOp, Latencies};
use crate::heat::HeatMap;
use crate::migrate::candidates::candidates;
use crate::migrate::policy::effective;
use crate::migrate::worker::MigratorHandle;
use crate::migrate::Migrator;
use crate::volume::{Geometry, Stats, Tier, Usage, Volume, BLOCK_SIZE};

/// Every migration reason, in the order status reports them.
pub use crate::units::REASONS;

/// How many one-second samples the migration rate is computed over.
const RATE_SAMPLES: usize = 11;

/// Device errors this recent make the daemon degraded.
const ERROR_WINDOW: Duration = Duration::from_secs(600);

/// Metadata left unflushed this long makes the daemon degraded (the
/// service flushes dirty metadata itself every [`META_FLUSH_EVERY`]).
const META_STALE: Duration = Duration::from_secs(300);

/// How often the service flushes metadata that clients left dirty.
pub const META_FLUSH_EVERY: Duration = Duration::from_secs(30);

/// How often the daemon asks whether the allocator holds enough free memory
/// to give back (`serving::allocator::trim_when_worth`).
pub const TRIM_EVERY: Duration = Duration::from_secs(30);

/// Latency histograms of both tiers, indexed [tier][op][class].
type MeterSnapshot = [[[Latencies; 2]; 3]; 2];

/// One sample of the counters that rates and recent latencies come from.
struct Sample {
    at: Instant,
    /// Migrated bytes to ssd, to hdd, written back.
    moved: [u64; 3],
    lat: MeterSnapshot,
    busy: [f64; 2],
}

fn meters(vol: &Volume) -> (MeterSnapshot, [f64; 2]) {
    let lat = Tier::ALL.map(|t| {
        let m = vol.io_meter(t);
        IoOp::ALL.map(|op| IoClass::ALL.map(|c| m.latencies(op, c)))
    });
    (lat, Tier::ALL.map(|t| vol.io_meter(t).busy_secs()))
}

fn summary(l: &Latencies) -> LatencySummary {
    let ops = l.count();
    LatencySummary {
        ops,
        mean_secs: (ops > 0).then(|| l.sum_secs / ops as f64),
        p50_secs: l.quantile(0.5),
        p99_secs: l.quantile(0.99),
    }
}

/// Counts the daemon's open NBD connections from `/proc`: sockets among our
/// own file descriptors that are established TCP connections on the NBD
/// port, or connected Unix sockets bound to the NBD socket path. Counting
/// from the kernel's tables keeps the NBD server untouched and counts a
/// connection from accept to close, handshake included.
#[derive(Debug, Clone, Default)]
pub struct ConnectionProbe {
    /// Local TCP port of the NBD listener.
    pub tcp_port: Option<u16>,
    /// Path of the NBD Unix socket.
    pub unix: Option<PathBuf>,
}

impl ConnectionProbe {
    /// Open NBD connections now (0 where `/proc` is unreadable).
    pub fn count(&self) -> u64 {
        let ours = own_socket_inodes();
        if ours.is_empty() {
            return 0;
        }
        let mut n = 0;
        if let Some(port) = self.tcp_port {
            for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
                n += count_tcp(table, port, &ours);
            }
        }
        if let Some(path) = &self.unix {
            n += count_unix(path, &ours);
        }
        n
    }
}

fn own_socket_inodes() -> HashSet<u64> {
    let mut set = HashSet::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return set;
    };
    for entry in dir.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path()) {
            let t = target.to_string_lossy();
            if let Some(inode) = t
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|i| i.parse().ok())
            {
                set.insert(inode);
            }
        }
    }
    set
}

fn count_tcp(table: &str, port: u16, ours: &HashSet<u64>) -> u64 {
    let Ok(text) = std::fs::read_to_string(table) else {
        return 0;
    };
    text.lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(st), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                return false;
            };
            let local_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            *st == "01"
                && local_port == Some(port)
                && inode.parse().is_ok_and(|i: u64| ours.contains(&i))
        })
        .count() as u64
}

fn count_unix(path: &Path, ours: &HashSet<u64>) -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/net/unix") else {
        return 0;
    };
    let want = path.to_string_lossy();
    text.lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path
            let (Some(st), Some(inode), Some(p)) = (f.get(5), f.get(6), f.get(7)) else {
                return false;
            };
            *st == "03"
                && *p == want.as_ref()
                && inode.parse().is_ok_and(|i: u64| ours.contains(&i))
        })
        .count() as u64
}

/// Shared live state of a serving daemon.
pub struct Live {
    /// The volume.
    pub volume: Arc<Volume>,
    /// The volume's heat map.
    pub heat: Arc<HeatMap>,
    /// The migrator (present even when the background thread is off).
    pub migrator: Arc<Migrator>,
    /// The background migration thread, if running.
    pub worker: Mutex<Option<MigratorHandle>>,
    /// Counts open NBD connections.
    pub probe: ConnectionProbe,
    started: Instant,
    /// Newest last.
    samples: Mutex<VecDeque<Sample>>,
    /// Device errors counted so far and when that count last grew.
    errors: Mutex<(u64, Option<Instant>)>,
    /// Requests answered to clients with an error (the NBD server counts).
    client_errors: Arc<ClientErrors>,
    /// `client_errors` when the previous `status` was answered.
    client_errors_seen: AtomicU64,
    /// The export's trace recorder (`tierctl trace`).
    pub recorder: Arc<super::recorder::Recorder>,
}

impl Live {
    /// What stands in the way of the SSD exposure bound now, if anything
    /// (`None` too when nothing is SSD-only).
    fn bound_blocked(&self, exposure: &crate::volume::Exposure) -> Option<String> {
        let vol = &self.volume;
        if exposure.bytes == 0 {
            return None;
        }
        if !self.migrator.config().enabled {
            return Some(
                "migration is disabled (`migrate.enabled = false`): no copies are made".into(),
            );
        }
        if self.migrator.paused() {
            return Some(
                "migration is paused (`tierctl migrate resume`): no copies are made".into(),
            );
        }
        if !vol.shadows_enabled() {
            return Some(
                "shadows are off (`shadows = false`): SSD extents keep no HDD copy; only the write log is written back".into(),
            );
        }
        if vol.clean_copy_room() == 0 {
            return Some(
                "the HDD has no free slot to spare for copies: SSD extents without one stay SSD-only until it has (the volume is fuller than the HDD holds)".into(),
            );
        }
        let bound = self.migrator.exposure_bound();
        if exposure.oldest.is_some_and(|o| o > bound) {
            return Some(
                "behind: writes brought more SSD-only data than the HDD could copy within the bound; copying goes on at full speed".into(),
            );
        }
        None
    }

    /// Live state for a volume, its heat map and its migrator.
    pub fn new(
        volume: Arc<Volume>,
        heat: Arc<HeatMap>,
        migrator: Arc<Migrator>,
        worker: Option<MigratorHandle>,
        probe: ConnectionProbe,
    ) -> Live {
        Live {
            volume,
            heat,
            migrator,
            worker: Mutex::new(worker),
            probe,
            started: Instant::now(),
            samples: Mutex::new(VecDeque::new()),
            errors: Mutex::new((0, None)),
            client_errors: Arc::new(ClientErrors::default()),
            client_errors_seen: AtomicU64::new(0),
            recorder: Arc::new(super::recorder::Recorder::new()),
        }
    }

    /// The counter of requests answered with an error that the NBD
    /// server's observer feeds.
    pub fn with_client_errors(mut self, errors: Arc<ClientErrors>) -> Live {
        self.client_errors = errors;
        self
    }

    /// The recorder the export tells of every request.
    pub fn with_recorder(mut self, recorder: Arc<super::recorder::Recorder>) -> Live {
        self.recorder = recorder;
        self
    }

    /// Wake the migration thread (no-op when it is not running). Returns
    /// whether a thread was there to wake.
    pub fn wake(&self) -> bool {
        match self.worker.lock().as_ref() {
            Some(w) => {
                w.wake();
                true
            }
            None => false,
        }
    }

    /// Record a migration-rate sample; call about once a second.
    pub fn sample(&self) {
        let s = self.volume.stats();
        let moved = [
            Stats::get(&s.migrated_bytes[0]),
            Stats::get(&s.migrated_bytes[1]),
            Stats::get(&s.written_back_blocks) * BLOCK_SIZE,
        ];
        self.note_device_errors();
        let (lat, busy) = meters(&self.volume);
        let mut q = self.samples.lock();
        q.push_back(Sample {
            at: Instant::now(),
            moved,
            lat,
            busy,
        });
        while q.len() > RATE_SAMPLES {
            q.pop_front();
        }
    }

    /// Take in the device error counters: when they grew, the latest
    /// error is dated now (at the latest, the next sample or health check).
    fn note_device_errors(&self) {
        let s = self.volume.stats();
        let errors = Stats::get(&s.dev_errors[0]) + Stats::get(&s.dev_errors[1]);
        let mut e = self.errors.lock();
        if errors > e.0 {
            *e = (errors, Some(Instant::now()));
        }
    }

    /// Recent migration rates in bytes/s: (to ssd, to hdd).
    pub fn migration_rates(&self) -> (f64, f64) {
        let q = self.samples.lock();
        match (q.front(), q.back()) {
            (Some(a), Some(b)) if b.at > a.at => {
                let dt = b.at.duration_since(a.at).as_secs_f64();
                (
                    b.moved[0].saturating_sub(a.moved[0]) as f64 / dt,
                    b.moved[1].saturating_sub(a.moved[1]) as f64 / dt,
                )
            }
            _ => (0.0, 0.0),
        }
    }

    /// Recent write-back rate (log to HDD) in bytes/s.
    pub fn write_back_rate(&self) -> f64 {
        let q = self.samples.lock();
        match (q.front(), q.back()) {
            (Some(a), Some(b)) if b.at > a.at => {
                let dt = b.at.duration_since(a.at).as_secs_f64();
                b.moved[2].saturating_sub(a.moved[2]) as f64 / dt
            }
            _ => 0.0,
        }
    }

    /// Per tier: each op and class's latencies (recent window and since
    /// start), busy seconds since start and the recent utilisation.
    fn latencies(&self) -> [(Vec<OpLatency>, f64, f64); 2] {
        let (now, busy) = meters(&self.volume);
        let q = self.samples.lock();
        let oldest = q.front().map(|a| (a.at, &a.lat, a.busy));
        Tier::ALL.map(|t| {
            let i = t.index();
            let mut ops = Vec::new();
            for (o, op) in IoOp::ALL.iter().enumerate() {
                for (c, class) in IoClass::ALL.iter().enumerate() {
                    let total = &now[i][o][c];
                    let recent = match oldest {
                        Some((_, lat, _)) => total.since(&lat[i][o][c]),
                        None => *total,
                    };
                    ops.push(OpLatency {
                        op: op.name().into(),
                        class: class.name().into(),
                        recent: summary(&recent),
                        total: summary(total),
                    });
                }
            }
            let util = match oldest {
                Some((at, _, b)) => {
                    let dt = at.elapsed().as_secs_f64();
                    if dt > 0.0 {
                        ((busy[i] - b[i]) / dt).clamp(0.0, 1.0)
                    } else {
                        0.0
                    }
                }
                None => 0.0,
            };
            (ops, busy[i], util)
        })
    }

    /// The data in use against the SSD's room for it (walks the SSD's
    /// extents and those heat tracks).
    pub fn working_set(&self) -> WorkingSetStatus {
        let vol = &self.volume;
        let es = vol.geometry().extent_size;
        let bpe = vol.geometry().blocks_per_extent();
        let policy = self.migrator.config().policy;
        let mut w = WorkingSetStatus {
            heat_tracked_extents: self.heat.tracked() as u64,
            heat_dropped: self.heat.dropped(),
            ..WorkingSetStatus::default()
        };
        // An extent heat does not track has effective heat 0: hot only
        // with a promotion score of 0, which makes every extent hot.
        let untracked_hot = policy.promote_min_score <= 0.0;
        for c in candidates(vol, &self.heat, None, &HashSet::new()) {
            if effective(&policy, &c, bpe) >= policy.promote_min_score {
                w.hot_bytes += es;
                if c.tier == Tier::Ssd {
                    w.hot_on_ssd_bytes += es;
                }
            }
            if c.active {
                w.active_bytes += es;
            }
        }
        if untracked_hot {
            let u = vol.usage();
            w.hot_bytes = (u.mapped[0] + u.mapped[1]) * es;
            w.hot_on_ssd_bytes = u.mapped[0] * es;
        }
        let slots = u64::from(vol.geometry().ssd_slots);
        w.ssd_usable_bytes = slots.saturating_sub(self.migrator.reserve_extents()) * es;
        w.fits = w.hot_bytes <= w.ssd_usable_bytes;
        w
    }

    /// Ok, or degraded with the reasons: requests answered with an error
    /// since the previous status or in the last ten minutes, device errors
    /// in the last ten minutes, a failed flush, metadata unflushed for
    /// five minutes, a migration round that panicked.
    pub fn health(&self) -> HealthStatus {
        let vol = &self.volume;
        let s = vol.stats();
        let mut problems = Vec::new();
        let (failed, failed_last) = self.client_errors.get();
        let unseen = failed.saturating_sub(self.client_errors_seen.load(Ordering::Relaxed));
        if unseen > 0 || failed_last.is_some_and(|at| at.elapsed() < ERROR_WINDOW) {
            problems.push(format!(
                "{unseen} requests answered with an error since the last status ({failed} since start, the latest {} s ago); see the log",
                failed_last.map_or(0, |at| at.elapsed().as_secs())
            ));
        }
        self.note_device_errors();
        let (errors, last) = *self.errors.lock();
        if let Some(at) = last.filter(|at| at.elapsed() < ERROR_WINDOW) {
            problems.push(format!(
                "device errors, the latest {} s ago ({errors} since start: SSD {}, HDD {}); see the log",
                at.elapsed().as_secs(),
                Stats::get(&s.dev_errors[0]),
                Stats::get(&s.dev_errors[1])
            ));
        }
        let f = vol.flush_state();
        if f.last_failed {
            problems.push(
                "the latest flush failed: writes since the previous flush are not durable, and freed slots wait for a flush that succeeds; see the log"
                    .into(),
            );
        }
        if f.meta_dirty && f.dirty_for > META_STALE {
            problems.push(format!(
                "metadata unflushed for {} s: a power cut would lose the mapping changes since",
                f.dirty_for.as_secs()
            ));
        }
        let panics = self.migrator.panics();
        if panics > 0 {
            problems.push(format!(
                "{panics} migration rounds panicked since start; see the log"
            ));
        }
        HealthStatus {
            state: if problems.is_empty() {
                "ok"
            } else {
                "degraded"
            }
            .into(),
            problems,
            metadata_flush_age_secs: f.since_meta_flush.as_secs_f64(),
            metadata_dirty: f.meta_dirty,
        }
    }

    /// Time since the service started.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// A status snapshot (walks the extent map: call off the async threads).
    pub fn status(&self) -> Status {
        let vol = &self.volume;
        let geo = *vol.geometry();
        let es = geo.extent_size;
        let usage = vol.usage();
        let exposure = vol.exposure();
        let bound = Some(self.migrator.exposure_bound()).filter(|b| !b.is_zero());
        let s = vol.stats();
        let mut lat = self.latencies();
        let space = tier_space(&geo, &usage, self.migrator.reserve_extents());
        let tiers = Tier::ALL
            .iter()
            .map(|&t| {
                let i = t.index();
                let (latency, busy_secs, utilisation) = std::mem::take(&mut lat[i]);
                let sp = space[i];
                TierStatus {
                    read_hit_bytes: Stats::get(&s.read_hit_bytes[i]),
                    write_landed_bytes: Stats::get(&s.write_landed_bytes[i]),
                    busy_secs,
                    model_busy_secs: vol.model_busy(t).map(|d| d.as_secs_f64()),
                    utilisation,
                    latency,
                    tier: t,
                    capacity_bytes: sp.slots * es,
                    used_bytes: sp.used * es,
                    copies_bytes: sp.copies * es,
                    log_bytes: sp.log * es,
                    reserve_bytes: sp.reserve * es,
                    free_bytes: sp.free * es,
                    pending_bytes: sp.pending * es,
                    extents: usage.mapped[i],
                    reads: Stats::get(&s.dev_reads[i]),
                    read_bytes: Stats::get(&s.dev_read_bytes[i]),
                    writes: Stats::get(&s.dev_writes[i]),
                    write_bytes: Stats::get(&s.dev_write_bytes[i]),
                    errors: Stats::get(&s.dev_errors[i]),
                    read_hits: Stats::get(&s.read_hits[i]),
                }
            })
            .collect();
        let hits = [Stats::get(&s.read_hits[0]), Stats::get(&s.read_hits[1])];
        let hit_ratio = match hits[0] + hits[1] {
            0 => None,
            total => Some(hits[0] as f64 / total as f64),
        };
        let by_reason: Vec<_> = REASONS
            .iter()
            .map(|&r| ReasonCount {
                reason: r,
                to_ssd: s.migrations_to(Tier::Ssd, r),
                to_hdd: s.migrations_to(Tier::Hdd, r),
            })
            .collect();
        let (promote_rate, demote_rate) = self.migration_rates();
        let migration = MigrationStatus {
            running: self.worker.lock().is_some(),
            paused: self.migrator.paused(),
            rounds: self.migrator.rounds(),
            promotions: by_reason.iter().map(|c| c.to_ssd).sum(),
            demotions: by_reason.iter().map(|c| c.to_hdd).sum(),
            promoted_bytes: Stats::get(&s.migrated_bytes[0]),
            demoted_bytes: Stats::get(&s.migrated_bytes[1]),
            by_reason,
            promote_rate,
            demote_rate,
            aborts: Stats::get(&s.migration_aborts),
            errors: Stats::get(&s.migration_errors),
            config: self.migrator.config(),
            progress: self.migrator.progress(),
        };
        let blk = BLOCK_SIZE;
        let write_log = WriteLogStatus {
            enabled: vol.write_log_enabled(),
            segments: u64::from(usage.log.segments),
            max_segments: u64::from(usage.log.cap),
            bytes: u64::from(usage.log.segments) * es,
            max_bytes: u64::from(usage.log.cap) * es,
            dirty_bytes: usage.logged_blocks * blk,
            written: Stats::get(&s.log_writes),
            written_bytes: Stats::get(&s.log_write_bytes),
            full: Stats::get(&s.log_full),
            written_back_bytes: Stats::get(&s.written_back_blocks) * blk,
            write_back_rate: self.write_back_rate(),
            waited: Stats::get(&s.log_waits),
            wait_secs: Stats::get(&s.log_wait_ns) as f64 / 1e9,
            wait_timeouts: Stats::get(&s.log_wait_timeouts),
            waiting: vol.log_waiters() as u64,
            pressed: vol.log_pressing(),
        };
        let shadows = ShadowStatus {
            extents: usage.shadows,
            clean_bytes: usage.shadow_clean_blocks * blk,
            stale_bytes: usage.shadow_stale_blocks * blk,
            free_demotions: Stats::get(&s.free_demotions),
            saved_bytes: Stats::get(&s.shadow_saved_blocks) * blk,
            dropped: Stats::get(&s.shadows_dropped),
            precleaned: Stats::get(&s.precleaned),
        };
        let admission = AdmissionStatus {
            enabled: vol.admission_enabled(),
            admitted: Stats::get(&s.admissions),
            remembered: Stats::get(&s.admissions_scanned),
            dropped: Stats::get(&s.admissions_dropped),
            no_room: Stats::get(&s.admissions_no_room),
            paced: Stats::get(&s.admissions_paced),
            waiting: vol.admissions_waiting() as u64,
        };
        Status {
            admission,
            // The settings know what is drained: the control server,
            // which holds them, fills this in.
            evacuation: None,
            working_set: self.working_set(),
            health: {
                let h = self.health();
                self.client_errors_seen
                    .store(self.client_errors.get().0, Ordering::Relaxed);
                h
            },
            write_log,
            shadows,
            version: env!("CARGO_PKG_VERSION").to_string(),
            volume_id: vol.id().to_string(),
            uptime_secs: self.uptime().as_secs(),
            capacity_bytes: vol.size(),
            extent_size: es,
            tiers,
            reserve: ReserveStatus {
                format_bytes: u64::from(geo.reserve_extents) * es,
                target_bytes: self.migrator.reserve_extents() * es,
                ssd_free_bytes: u64::from(usage.free[0]) * es,
                covered_bytes: (u64::from(usage.free[0]) + usage.clean_extents) * es,
            },
            hit_ratio,
            read_unmapped: Stats::get(&s.read_unmapped),
            spills: Stats::get(&s.spills),
            sequential_bypasses: self.heat.bypassed(),
            quarantined: u64::from(usage.quarantined),
            ssd_only_bytes: exposure.bytes,
            ssd_only_oldest_s: exposure.oldest.map(|d| d.as_secs_f64()),
            ssd_only_oldest_at_open: exposure.oldest_at_open,
            ssd_exposure_bound_s: bound.map(|b| b.as_secs_f64()),
            ssd_exposure_bound_kept: bound.map(|b| exposure.oldest.is_none_or(|o| o <= b)),
            ssd_exposure_bound_blocked: bound.and_then(|_| self.bound_blocked(&exposure)),
            ssd_lost: vol.ssd_lost(),
            lost_bytes: vol.lost_bytes(),
            pins: vol.pins().len(),
            connections: self.probe.count(),
            inflight: vol.inflight() as u64,
            migration,
        }
    }
}

/// Where one tier's slots are, in slots; they add up to `slots`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TierSpace {
    slots: u64,
    /// Mapped extents.
    used: u64,
    /// Clean HDD copies of SSD extents (HDD).
    copies: u64,
    /// Write-log segments (SSD).
    log: u64,
    /// Free slots held for the reserve target (SSD).
    reserve: u64,
    /// Free slots beyond it.
    free: u64,
    /// The rest: freed slots waiting for a metadata flush, and slots a
    /// move under way holds.
    pending: u64,
}

/// Every slot of each tier (SSD, HDD) in one of its uses, from one usage
/// snapshot, with `reserve_target` free SSD slots counted as the reserve.
/// The parts are read at slightly different moments under load: a count
/// that runs over is taken off the free slots, so they always add up.
fn tier_space(geo: &Geometry, u: &Usage, reserve_target: u64) -> [TierSpace; 2] {
    Tier::ALL.map(|t| {
        let i = t.index();
        let slots = u64::from(geo.slots(t));
        let used = u.mapped[i];
        let (copies, log) = match t {
            Tier::Ssd => (0, u64::from(u.log.segments)),
            Tier::Hdd => (u.shadows, 0),
        };
        let taken = used + copies + log;
        let free_slots = u64::from(u.free[i]).min(slots.saturating_sub(taken));
        let reserve = match t {
            Tier::Ssd => free_slots.min(reserve_target),
            Tier::Hdd => 0,
        };
        let pending = slots.saturating_sub(taken + free_slots);
        TierSpace {
            slots,
            used,
            copies,
            log,
            reserve,
            free: free_slots - reserve,
            pending,
        }
    })
}

/// Requests the NBD server answered with an error: how many since start
/// and when the latest was, for the health in `status`.
#[derive(Debug, Default)]
pub struct ClientErrors {
    count: AtomicU64,
    last: Mutex<Option<Instant>>,
}

impl ClientErrors {
    /// One more request answered with an error, now.
    pub fn note(&self) {
        // The time first: a reader that sees the count sees its time.
        *self.last.lock() = Some(Instant::now());
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// How many so far, and when the latest was.
    pub fn get(&self) -> (u64, Option<Instant>) {
        (self.count.load(Ordering::Relaxed), *self.last.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(mapped: [u64; 2], free: [u32; 2], log: u32, shadows: u64) -> Usage {
        Usage {
            capacity: 0,
            mapped,
            free,
            quarantined: 0,
            log: crate::volume::LogUsage {
                segments: log,
                ..Default::default()
            },
            logged_blocks: 0,
            shadows,
            shadow_clean_blocks: 0,
            shadow_stale_blocks: 0,
            clean_extents: 0,
        }
    }

    #[test]
    fn every_slot_is_in_one_use_and_they_add_up() {
        let geo = Geometry {
            extent_size: 1 << 20,
            ssd_slots: 100,
            hdd_slots: 400,
            reserve_extents: 25,
        };
        // SSD: 50 data, 5 log, 40 free (25 of them the reserve), 5 pending.
        // HDD: 200 data, 30 clean copies, 160 free, 10 pending.
        let [ssd, hdd] = tier_space(&geo, &usage([50, 200], [40, 160], 5, 30), 25);
        assert_eq!(
            ssd,
            TierSpace {
                slots: 100,
                used: 50,
                copies: 0,
                log: 5,
                reserve: 25,
                free: 15,
                pending: 5
            }
        );
        assert_eq!(
            hdd,
            TierSpace {
                slots: 400,
                used: 200,
                copies: 30,
                log: 0,
                reserve: 0,
                free: 160,
                pending: 10
            }
        );
        // Fewer free slots than the target: all of them are the reserve.
        let [ssd, _] = tier_space(&geo, &usage([80, 0], [10, 400], 10, 0), 25);
        assert_eq!((ssd.reserve, ssd.free, ssd.pending), (10, 0, 0));
        // A snapshot whose free count runs over still adds up.
        let [ssd, _] = tier_space(&geo, &usage([95, 0], [10, 400], 0, 0), 25);
        let sum = ssd.used + ssd.copies + ssd.log + ssd.reserve + ssd.free + ssd.pending;
        assert_eq!(sum, 100, "{ssd:?}");
    }
}
