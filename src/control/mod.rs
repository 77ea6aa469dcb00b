//! The control API: line-delimited JSON over a Unix socket (mode 0600).
//!
//! Each request is one JSON object on one line, tagged by `cmd`
//! ([`Request`]); each answer is one JSON object on one line
//! ([`Response`]): `{"ok":true,"result":...}` or `{"ok":false,"error":"..."}`.
//! A connection may carry any number of requests, answered in order. The
//! protocol is documented for operators in `docs/operations.md`.
//!
//! This module owns the protocol's messages only (what `tierctl` shares
//! with the daemon), and where a daemon's socket is found from any
//! directory ([`find`]); the answers about where data sits are in
//! `placement.rs`. The server that answers them against the
//! daemon's live state is [`crate::serving::control_server`].

pub mod find;
mod placement;

pub use placement::{ByteRun, Cells, Explain, PlacementMap, Run, SsdOnlyMap, TopEntry, Where};

use serde::{Deserialize, Serialize};

use crate::migrate::{MigrateConfig, ProgressSnapshot};
use crate::units::Reason;
use crate::volume::Tier;

/// Longest request line the server reads.
pub const MAX_LINE: usize = 64 * 1024;

/// A control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Capacity, per-tier use, reserve, hit ratio, migration, connections.
    Status,
    /// Runs of ssd/hdd/unmapped over `[offset, offset+len)` (default: all;
    /// a range past the end of the volume is clipped to it).
    Placement {
        /// First byte (default 0).
        #[serde(default)]
        offset: u64,
        /// Bytes (default: to the end of the volume).
        #[serde(default)]
        len: Option<u64>,
        /// Answer with this many cells of counts instead of the runs (what
        /// `tierctl placement --map` draws): a scattered volume has
        /// hundreds of thousands of runs, and a map needs a few hundred
        /// cells.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cells: Option<u32>,
    },
    /// The byte ranges of `[offset, offset+len)` (default: all; clipped
    /// to the volume) whose newest data is only on the SSD: what an SSD
    /// failure loses, or has lost once it failed.
    SsdOnly {
        /// First byte (default 0).
        #[serde(default)]
        offset: u64,
        /// Bytes (default: to the end of the volume).
        #[serde(default)]
        len: Option<u64>,
        /// Most runs listed (default 1000); the byte count covers them all.
        #[serde(default = "default_ssd_only_runs")]
        max_runs: usize,
    },
    /// Where the extent holding `offset` sits and why.
    Explain {
        /// A byte offset in the volume.
        offset: u64,
    },
    /// The hottest or coldest mapped extents.
    Top {
        /// `hot` or `cold`.
        order: TopOrder,
        /// How many (default 10).
        #[serde(default = "default_top")]
        n: usize,
    },
    /// Pin the extents overlapping a byte range to a tier. A range that
    /// runs past the end of the volume is clipped to it (the answer says so).
    Pin {
        /// First byte.
        offset: u64,
        /// Bytes (default: to the end of the volume).
        #[serde(default)]
        len: Option<u64>,
        /// The tier.
        tier: Tier,
    },
    /// Remove pins from the extents overlapping a byte range (clipped to
    /// the volume as [`Request::Pin`]).
    Unpin {
        /// First byte.
        offset: u64,
        /// Bytes (default: to the end of the volume).
        #[serde(default)]
        len: Option<u64>,
    },
    /// Pause, resume or run background migration now.
    Migrate {
        /// What to do.
        action: MigrateAction,
    },
    /// Set the live reserve target (bytes of SSD kept free); saved like
    /// `config set reserve`.
    Reserve {
        /// Bytes; rounded up to whole extents, at most the SSD.
        bytes: u64,
    },
    /// Every configuration key with its value in force, default, whether
    /// it can change live, and where the value comes from.
    ConfigShow,
    /// Change a live key now and keep the change across restarts.
    ConfigSet {
        /// The key (`migrate.bandwidth`).
        key: String,
        /// The value as the configuration writes it (`64MiB`).
        value: String,
    },
    /// Drop a live setting: the configuration's value comes back.
    ConfigReset {
        /// The key.
        key: String,
    },
    /// Drain a tier online (`tier`), or stop draining (`tier` absent). With
    /// `dry_run`, only say what would move and what would remain.
    Evacuate {
        /// The tier to drain; absent: cancel.
        #[serde(default)]
        tier: Option<Tier>,
        /// Plan only.
        #[serde(default)]
        dry_run: bool,
    },
    /// Put a new device in place of the drained SSD, online.
    ReplaceSsd {
        /// The new device or image file.
        path: std::path::PathBuf,
        /// Overwrite a device that carries something.
        #[serde(default)]
        force: bool,
    },
    /// Load the configuration again, as SIGHUP does, and answer whether it
    /// worked (`ExecReload=tierctl reload` makes a failed reload fail
    /// `systemctl reload`).
    Reload,
    /// Start recording every request served into a trace file (docs/trace.md);
    /// answered with [`TraceStatus`].
    TraceStart {
        /// The file, an absolute path (created with mode 0600).
        path: std::path::PathBuf,
        /// Stop at this many bytes of file (absent or 0: no limit).
        #[serde(default)]
        max_bytes: Option<u64>,
        /// Replace a file that exists.
        #[serde(default)]
        force: bool,
    },
    /// Stop recording; answered with the finished [`TraceStatus`].
    TraceStop,
    /// The recording under way, else the last one that ended ([`TraceStatus`]
    /// or null).
    TraceStatus,
}

/// Why a request line is refused.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// Not JSON, not an object, or not a request this protocol knows.
    #[error("bad request: {0} (send one JSON object per line, e.g. {{\"cmd\":\"status\"}})")]
    Malformed(#[source] serde_json::Error),
    /// A field the request does not take.
    #[error("unknown field {field:?} in a {cmd:?} request (it takes: {takes})")]
    UnknownField {
        /// The field.
        field: String,
        /// The request's `cmd`.
        cmd: String,
        /// The fields it takes.
        takes: String,
    },
}

impl Request {
    /// Parse one request line. Unknown fields are refused, naming the
    /// field, for every request (serde's `deny_unknown_fields` misses them
    /// on requests without fields, such as `{"cmd":"status","x":1}`).
    pub fn parse(line: &[u8]) -> Result<Request, RequestError> {
        let value: serde_json::Value =
            serde_json::from_slice(line).map_err(RequestError::Malformed)?;
        let req: Request =
            serde_json::from_value(value.clone()).map_err(RequestError::Malformed)?;
        // Every field a request takes is written when it is encoded
        // (absent ones as null), so a field of the line the encoding lacks
        // is one the request does not take.
        let known = serde_json::to_value(&req).map_err(RequestError::Malformed)?;
        if let (Some(given), Some(known)) = (value.as_object(), known.as_object()) {
            if let Some(field) = given.keys().find(|k| !known.contains_key(*k)) {
                let takes: Vec<&str> = known
                    .keys()
                    .map(String::as_str)
                    .filter(|k| *k != "cmd")
                    .collect();
                return Err(RequestError::UnknownField {
                    field: field.clone(),
                    cmd: known
                        .get("cmd")
                        .and_then(|c| c.as_str())
                        .unwrap_or_default()
                        .to_string(),
                    takes: if takes.is_empty() {
                        "no fields but cmd".into()
                    } else {
                        takes.join(", ")
                    },
                });
            }
        }
        Ok(req)
    }
}

/// How a trace recording stands or ended (`tierctl trace status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStatus {
    /// The trace file.
    pub path: std::path::PathBuf,
    /// Still recording.
    pub active: bool,
    /// Requests recorded.
    pub records: u64,
    /// Bytes of the file (header and records).
    pub bytes: u64,
    /// Seconds from the start to now, or to the end.
    pub secs: f64,
    /// Size limit in bytes (0: none).
    pub max_bytes: u64,
    /// Why it ended, once it has: `stopped`, `size limit`, `shutdown`, or
    /// the write error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

/// Default [`Request::SsdOnly`] `max_runs`.
fn default_ssd_only_runs() -> usize {
    1000
}

fn default_top() -> usize {
    10
}

/// Order of [`Request::Top`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopOrder {
    /// Highest effective heat first.
    Hot,
    /// Lowest effective heat first.
    Cold,
}

/// Action of [`Request::Migrate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MigrateAction {
    /// Stop starting moves (the current one finishes).
    Pause,
    /// Start moving again.
    Resume,
    /// Run a planning round now.
    Now,
}

/// A control answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Whether the request succeeded.
    pub ok: bool,
    /// The result (on success).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// What went wrong (on failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    /// A success with a result.
    pub fn ok(result: impl Serialize) -> Response {
        match serde_json::to_value(result) {
            Ok(v) => Response {
                ok: true,
                result: Some(v),
                error: None,
            },
            Err(e) => Response::err(format!("encoding the result: {e}")),
        }
    }

    /// A failure.
    pub fn err(msg: impl Into<String>) -> Response {
        Response {
            ok: false,
            result: None,
            error: Some(msg.into()),
        }
    }
}

/// One tier in [`Status`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierStatus {
    /// Which tier.
    pub tier: Tier,
    /// Data slots in bytes: `used_bytes + copies_bytes + log_bytes +
    /// reserve_bytes + free_bytes + pending_bytes`, exactly.
    pub capacity_bytes: u64,
    /// Bytes of mapped extents: the volume's data on this tier.
    pub used_bytes: u64,
    /// Bytes of clean copies kept on this tier (the HDD) of extents that
    /// live on the SSD: dropped when the space is needed.
    #[serde(default)]
    pub copies_bytes: u64,
    /// Bytes of slots lent to the write log (the SSD).
    #[serde(default)]
    pub log_bytes: u64,
    /// Bytes of free slots held for new writes (the SSD's reserve, as far
    /// as free slots cover its target).
    #[serde(default)]
    pub reserve_bytes: u64,
    /// Bytes of free slots beyond the reserve.
    pub free_bytes: u64,
    /// Bytes of slots freed but not yet reusable: waiting for the next
    /// metadata flush, or held by a move under way.
    #[serde(default)]
    pub pending_bytes: u64,
    /// Mapped extents.
    pub extents: u64,
    /// Device read operations.
    pub reads: u64,
    /// Device bytes read.
    pub read_bytes: u64,
    /// Device write operations.
    pub writes: u64,
    /// Device bytes written.
    pub write_bytes: u64,
    /// Device errors.
    pub errors: u64,
    /// Logical read pieces served from this tier.
    pub read_hits: u64,
    /// Logical bytes read from this tier (a block in the write log is read
    /// from the SSD).
    #[serde(default)]
    pub read_hit_bytes: u64,
    /// Bytes of users' writes that landed on this tier (the SSD: its
    /// extents and the write log).
    #[serde(default)]
    pub write_landed_bytes: u64,
    /// Seconds the device had an operation in flight, since start.
    #[serde(default)]
    pub busy_secs: f64,
    /// With a timing model (`ssd-model`, `hdd-model`): seconds the modelled
    /// drive worked since start, on the model's clock (a disk's head time:
    /// seeks, rotation, transfers, for users and copies alike).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_busy_secs: Option<f64>,
    /// Share of the recent window (about 10 s) the device was busy.
    #[serde(default)]
    pub utilisation: f64,
    /// Operation latencies by op and class (foreground, background).
    #[serde(default)]
    pub latency: Vec<OpLatency>,
}

/// Latencies of one device operation for one class of I/O, in
/// [`TierStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpLatency {
    /// `read`, `write` or `sync`.
    pub op: String,
    /// `foreground` (users' requests) or `background` (migration,
    /// write-back, pre-cleaning).
    pub class: String,
    /// Over the recent window (about 10 s).
    pub recent: LatencySummary,
    /// Since start.
    pub total: LatencySummary,
}

/// Count and quantiles of a latency histogram (quantiles interpolated in
/// fixed buckets, as Prometheus' `histogram_quantile`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Operations.
    pub ops: u64,
    /// Mean seconds (`None` without operations).
    pub mean_secs: Option<f64>,
    /// Median seconds.
    pub p50_secs: Option<f64>,
    /// 99th percentile seconds.
    pub p99_secs: Option<f64>,
}

/// The data in use against the SSD's room for it, in [`Status`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkingSetStatus {
    /// Bytes of extents whose heat makes them promotion candidates
    /// (effective heat at least `promote-min-score`).
    pub hot_bytes: u64,
    /// Of those, bytes on the SSD now.
    pub hot_on_ssd_bytes: u64,
    /// Bytes of extents touched within `heat.idle-after`.
    pub active_bytes: u64,
    /// SSD bytes that may hold data: its slots less the reserve target.
    pub ssd_usable_bytes: u64,
    /// `hot_bytes` fit in `ssd_usable_bytes`.
    pub fits: bool,
    /// Extents whose heat is kept now (touched recently; at most
    /// `heat.max-tracked`).
    #[serde(default)]
    pub heat_tracked_extents: u64,
    /// Extents whose heat was dropped, or never kept, because the heat
    /// table was full, since start.
    #[serde(default)]
    pub heat_dropped: u64,
}

/// Whether the daemon needs an operator, in [`Status`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthStatus {
    /// `ok` or `degraded`.
    pub state: String,
    /// What makes it degraded, one sentence each (empty when ok).
    pub problems: Vec<String>,
    /// Seconds since the metadata store was last flushed.
    pub metadata_flush_age_secs: f64,
    /// Metadata changed since that flush.
    pub metadata_dirty: bool,
}

/// Reserve part of [`Status`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReserveStatus {
    /// The reserve fixed at format time.
    pub format_bytes: u64,
    /// The live target the migrator keeps free.
    pub target_bytes: u64,
    /// SSD bytes free now.
    pub ssd_free_bytes: u64,
    /// What covers the reserve now: free SSD bytes, and SSD extents whose
    /// HDD copy is clean (each leaves by a mapping change the moment a
    /// write needs its slot). While the volume's data fits the HDD with
    /// room to spare, admitted data may fill the reserve so long as clean
    /// copies cover it (docs/tiering.md); on a fuller volume the reserve is
    /// kept free.
    #[serde(default)]
    pub covered_bytes: u64,
}

/// Migration part of [`Status`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MigrationStatus {
    /// Whether the background thread runs.
    pub running: bool,
    /// Whether migration is paused.
    pub paused: bool,
    /// Planning rounds so far.
    pub rounds: u64,
    /// Completed moves to the SSD.
    pub promotions: u64,
    /// Completed moves to the HDD.
    pub demotions: u64,
    /// Bytes copied to the SSD.
    pub promoted_bytes: u64,
    /// Bytes copied to the HDD.
    pub demoted_bytes: u64,
    /// Completed moves per reason.
    pub by_reason: Vec<ReasonCount>,
    /// Recent copy rate to the SSD, bytes/s (about the last 10 s).
    pub promote_rate: f64,
    /// Recent copy rate to the HDD, bytes/s.
    pub demote_rate: f64,
    /// Moves abandoned because the extent kept changing.
    pub aborts: u64,
    /// Moves that failed.
    pub errors: u64,
    /// The knobs in force (`[migrate]`, keys in snake_case).
    #[serde(with = "crate::units::snake_json")]
    pub config: MigrateConfig,
    /// Backlog and time spent waiting.
    #[serde(default)]
    pub progress: ProgressSnapshot,
}

/// Completed moves for one reason, in [`MigrationStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonCount {
    /// Why.
    pub reason: Reason,
    /// Moves to the SSD.
    pub to_ssd: u64,
    /// Moves to the HDD.
    pub to_hdd: u64,
}

/// Answer of [`Request::Status`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// tierd version.
    pub version: String,
    /// Volume UUID.
    pub volume_id: String,
    /// Seconds since the service started.
    pub uptime_secs: u64,
    /// Logical capacity in bytes.
    pub capacity_bytes: u64,
    /// Extent size in bytes.
    pub extent_size: u64,
    /// SSD first, then HDD.
    pub tiers: Vec<TierStatus>,
    /// Reserve.
    pub reserve: ReserveStatus,
    /// Share of mapped reads served by the SSD since start (`None`: no reads).
    pub hit_ratio: Option<f64>,
    /// Reads of unmapped space (zeros without device I/O).
    pub read_unmapped: u64,
    /// New extents that went to the HDD because the SSD was full.
    pub spills: u64,
    /// Requests that earned no heat because they were part of a sequential stream.
    pub sequential_bypasses: u64,
    /// Slots waiting for a metadata flush before reuse.
    pub quarantined: u64,
    /// Bytes whose only copy is on the SSD (SSD extents without a clean HDD
    /// copy, write-log data not yet written back): what an SSD failure
    /// would lose now.
    #[serde(default)]
    pub ssd_only_bytes: u64,
    /// Seconds since the oldest of those bytes became SSD-only (`None`:
    /// nothing is); counted from the daemon's start for data that was
    /// already SSD-only then.
    #[serde(default)]
    pub ssd_only_oldest_s: Option<f64>,
    /// The oldest SSD-only data was so when the volume opened: its true age
    /// is longer than `ssd_only_oldest_s`.
    #[serde(default)]
    pub ssd_only_oldest_at_open: bool,
    /// The SSD exposure bound in force (`durability.ssd-exposure`), in
    /// seconds; `None`: no bound.
    #[serde(default)]
    pub ssd_exposure_bound_s: Option<f64>,
    /// With a bound: whether it holds now (no SSD-only data older than
    /// it); `None` without a bound.
    #[serde(default)]
    pub ssd_exposure_bound_kept: Option<bool>,
    /// With a bound: why it cannot be kept now, if something stands in
    /// its way (the HDD has no room for copies, shadows are off).
    #[serde(default)]
    pub ssd_exposure_bound_blocked: Option<String>,
    /// The volume was opened without its SSD (`tierd serve --ssd-lost`):
    /// only data with an HDD copy was kept.
    #[serde(default)]
    pub ssd_lost: bool,
    /// Bytes lost with a dead SSD that still read as I/O errors (until a
    /// whole-block write or a discard); `tierctl placement --ssd-only`
    /// lists them.
    #[serde(default)]
    pub lost_bytes: u64,
    /// Pin entries.
    pub pins: usize,
    /// Open NBD connections.
    pub connections: u64,
    /// Foreground requests in progress.
    pub inflight: u64,
    /// Migration.
    pub migration: MigrationStatus,
    /// The SSD write log (writes to HDD extents) and its write-back.
    #[serde(default)]
    pub write_log: WriteLogStatus,
    /// Clean HDD copies kept by SSD extents.
    #[serde(default)]
    pub shadows: ShadowStatus,
    /// Admission at the miss (`migrate.admission`).
    #[serde(default)]
    pub admission: AdmissionStatus,
    /// The data in use against the SSD's room.
    #[serde(default)]
    pub working_set: WorkingSetStatus,
    /// Ok or degraded, and why.
    #[serde(default)]
    pub health: HealthStatus,
    /// The tier being drained, if any.
    #[serde(default)]
    pub evacuation: Option<EvacuationStatus>,
}

/// A tier being drained (or what draining it would do), in [`Status`] and
/// as the answer of [`Request::Evacuate`]. Every count of extents to move
/// is of the tier's data, its mapped extents (what `status` counts for the
/// tier; see `serving::evacuation`); the write log's segments and the
/// clean copies need no move and are counted apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvacuationStatus {
    /// The tier drained.
    pub tier: Tier,
    /// Extents of data on it when draining started (for a plan: now).
    pub started_extents: u64,
    /// Extents of data on it now: what is still to move or remains.
    pub remaining_extents: u64,
    /// Of those, extents the other tier has no free slot for: they stay
    /// unless room appears.
    pub would_remain_extents: u64,
    /// The volume's data on the tier now, its mapped extents (the count
    /// `status` shows for the tier); the same as `remaining_extents`.
    #[serde(default)]
    pub data_extents: u64,
    /// Of those, extents pinned to this tier: draining overrides their pins
    /// and moves them too (the pins apply again once draining ends).
    #[serde(default)]
    pub pinned_extents: u64,
    /// Besides the data, SSD slots of the write log (SSD only): written
    /// back to the HDD extents they belong to, nothing to move.
    #[serde(default)]
    pub log_segments: u64,
    /// Besides the data, clean HDD copies SSD extents keep (HDD only):
    /// dropped, nothing to move.
    #[serde(default)]
    pub shadow_extents: u64,
    /// Extent size, to turn extents into bytes.
    pub extent_size: u64,
    /// Draining is in force (false for a plan or after a cancel).
    pub active: bool,
    /// Nothing more can move, the write log is written back and the
    /// copies are dropped: everything left is what would remain.
    pub done: bool,
}

/// The SSD write log: where writes to HDD extents land.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WriteLogStatus {
    /// New writes may land in it.
    pub enabled: bool,
    /// SSD slots lent to it.
    pub segments: u64,
    /// Most it may take (the reserve).
    pub max_segments: u64,
    /// Bytes of those slots.
    pub bytes: u64,
    /// Bytes it may take.
    pub max_bytes: u64,
    /// Bytes of blocks whose newest data is in it: the write-back backlog.
    pub dirty_bytes: u64,
    /// Writes that landed in it since start.
    pub written: u64,
    /// Their bytes.
    pub written_bytes: u64,
    /// Writes to HDD extents that found it full and went to the HDD.
    pub full: u64,
    /// Bytes written back to the HDD since start.
    pub written_back_bytes: u64,
    /// Recent write-back rate, bytes/s.
    pub write_back_rate: f64,
    /// Writes that found it full and waited for room since start (those
    /// that got none in time went to the HDD and count in `full` too).
    #[serde(default)]
    pub waited: u64,
    /// Their time waiting, seconds.
    #[serde(default)]
    pub wait_secs: f64,
    /// Of those, the ones that went to the HDD after all.
    #[serde(default)]
    pub wait_timeouts: u64,
    /// Writes waiting for room now.
    #[serde(default)]
    pub waiting: u64,
    /// Write-back runs beside users now: the log is three quarters full,
    /// or writes wait for room, and it has not come back below half.
    #[serde(default)]
    pub pressed: bool,
}

/// Clean HDD copies (shadows) that SSD extents keep after a promotion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShadowStatus {
    /// SSD extents with a shadow.
    pub extents: u64,
    /// Bytes of shadows still current (demoting them writes nothing).
    pub clean_bytes: u64,
    /// Bytes written on the SSD since (demotion writes only these).
    pub stale_bytes: u64,
    /// Demotions that wrote nothing, since start.
    pub free_demotions: u64,
    /// Bytes demotions did not write thanks to shadows.
    pub saved_bytes: u64,
    /// Shadows dropped because the HDD needed their slots.
    pub dropped: u64,
    /// SSD extents given an HDD copy in idle time (pre-cleaning), since
    /// start.
    #[serde(default)]
    pub precleaned: u64,
}

/// Admission at the miss: HDD extents brought up by the requests that
/// missed flash (counts since start).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdmissionStatus {
    /// Whether misses bring their extent up (`migrate.admission`).
    pub enabled: bool,
    /// Extents brought up.
    pub admitted: u64,
    /// Misses inside a long sequential stream only remembered (a scan's
    /// first pass).
    pub remembered: u64,
    /// Misses not noted because enough were waiting.
    pub dropped: u64,
    /// Admissions given up because no SSD extent could leave.
    pub no_room: u64,
    /// Misses left for later: admissions had spent their share of a busy
    /// HDD's time (`migrate.admission-share`).
    #[serde(default)]
    pub paced: u64,
    /// Misses waiting for their copy now.
    pub waiting: u64,
}

/// One key of `tierctl config show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The key (`migrate.bandwidth`).
    pub key: String,
    /// Its value in force, as the configuration writes it.
    pub value: String,
    /// The built-in default.
    pub default: String,
    /// Whether `tierctl config set` may change it.
    pub live: bool,
    /// Where the value in force comes from: `default`, `configuration`
    /// (file, environment or flag) or `tierctl` (a live setting).
    pub source: String,
}

/// Answer of pin, unpin, migrate and reserve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    /// What was done.
    pub done: String,
    /// Migration paused after the request.
    pub paused: bool,
    /// Reserve target in bytes after the request.
    pub reserve_target_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_reject_unknown_fields() {
        let r: Request =
            serde_json::from_str(r#"{"cmd":"pin","offset":0,"len":4096,"tier":"ssd"}"#)
                .expect("pin parses");
        assert_eq!(
            r,
            Request::Pin {
                offset: 0,
                len: Some(4096),
                tier: Tier::Ssd
            }
        );
        let r: Request = serde_json::from_str(r#"{"cmd":"top","order":"cold"}"#).expect("top");
        assert_eq!(
            r,
            Request::Top {
                order: TopOrder::Cold,
                n: 10
            }
        );
        let s = serde_json::to_string(&Request::Migrate {
            action: MigrateAction::Now,
        })
        .expect("encodes");
        assert_eq!(s, r#"{"cmd":"migrate","action":"now"}"#);
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"explain","offset":1,"x":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"reboot"}"#).is_err());
    }

    #[test]
    fn unknown_fields_are_refused_by_name_on_every_request() {
        for line in [
            r#"{"cmd":"status","x":1}"#,
            r#"{"cmd":"config-show","x":1}"#,
            r#"{"cmd":"trace-stop","x":null}"#,
            r#"{"cmd":"explain","offset":1,"x":1}"#,
            r#"{"cmd":"placement","x":1}"#,
        ] {
            let e = Request::parse(line.as_bytes()).expect_err(line).to_string();
            assert!(e.contains("\"x\"") || e.contains("`x`"), "{line}: {e}");
        }
        let e = Request::parse(br#"{"cmd":"status","x":1}"#)
            .expect_err("status with x")
            .to_string();
        assert!(e.contains("unknown field \"x\""), "{e}");
        for line in [
            r#"{"cmd":"status"}"#,
            r#"{"cmd":"placement"}"#,
            r#"{"cmd":"placement","offset":0,"len":null}"#,
            r#"{"cmd":"unpin","offset":0}"#,
            r#"{"cmd":"evacuate","tier":"ssd","dry_run":true}"#,
            r#"{"cmd":"trace-start","path":"/t","max_bytes":1,"force":false}"#,
        ] {
            Request::parse(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert!(Request::parse(b"[1]").is_err());
        assert!(Request::parse(b"{\"cmd\":\"reboot\"}").is_err());
    }
}
