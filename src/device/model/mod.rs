//! Timing models of real drives, used by [`super::TimedDevice`]: given an
//! operation and the time it is submitted, a model says when it completes.
//! Parameters come from datasheets (see docs/device-models.md).
//!
//! - [`HddModel`]: seek time as a function of seek distance fitted to the
//!   track-to-track, average and full-stroke figures (Lee's model:
//!   `t2t + A·√u + B·u` for a seek across fraction `u` of the stroke);
//!   rotational position kept from the clock, so a sequential request pays no
//!   rotation and a random one half a turn on average; zoned transfer rate
//!   falling linearly from the outer to the inner tracks; command queueing
//!   (up to `queue_depth`) with shortest-positioning-time-first reordering,
//!   approximated at submission: a request queued behind others seeks from
//!   the queued request nearest to it, as SPTF would arrange; a write cache
//!   that completes writes at interface speed while it has room and destages
//!   them in the background; FLUSH waits for the cache to drain; a
//!   read-ahead buffer of a few segments: a read that continues a recent
//!   read (or lands just past it) makes the drive read on to `readahead`
//!   bytes, and later reads inside a segment are served from the buffer as
//!   soon as the media has passed them, in whatever order they arrive. So
//!   sequential reads keep their rate when they queue, out of order, or as
//!   several interleaved streams, as a drive's segmented cache keeps it;
//!   likewise the write cache destages a stream's writes together, one
//!   positioning per `readahead` bytes.
//! - [`SsdModel`]: controller overhead, `units` flash units working in
//!   parallel and a shared link, so IOPS grows with queue depth; an optional
//!   write buffer that absorbs writes and, once full, exposes the program
//!   speed (the write cliff).
//! - [`RemoteModel`]: a capacity tier on another machine: a round trip per
//!   request, the server's own service time (requests overlap there), and
//!   the bandwidth of the link each way, shared in order of arrival.
//!
//! One file per model (`hdd.rs`, `ssd.rs`, `remote.rs`) beside this registry:
//! the [`TimingModel`] trait they implement and [`ModelKind`], the models
//! selectable by name.

mod hdd;
mod remote;
mod ssd;
#[cfg(test)]
mod tests;

pub use hdd::{HddModel, HddParams};
pub use remote::{RemoteModel, RemoteParams};
pub use ssd::{SsdModel, SsdParams};

use std::time::Duration;

use serde::Serialize;

/// What a model is asked to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A read.
    Read,
    /// A write.
    Write,
    /// A cache flush.
    Flush,
}

/// A drive's timing.
pub trait TimingModel: Send + 'static {
    /// Completion time of an operation submitted at `now`.
    fn submit(&mut self, kind: OpKind, offset: u64, len: u64, now: Duration) -> Duration;
    /// The model's name.
    fn name(&self) -> &'static str;
    /// Whether it models a remote tier (whose link is measured).
    fn remote(&self) -> bool {
        false
    }
    /// Time the device's mechanism spent serving so far (a disk's head
    /// time: seeks, rotation, transfers, queued writes destaged included),
    /// when the model keeps one; `None` lets the caller measure the time
    /// with an operation in flight instead.
    fn mechanism_time(&self) -> Option<Duration> {
        None
    }
}

/// A duration of `s` seconds (none when negative).
fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// The models selectable by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// 5400 rpm HDD.
    Hdd5400,
    /// 7200 rpm HDD.
    Hdd7200,
    /// SATA SSD.
    SsdSata,
    /// NVMe SSD.
    SsdNvme,
    /// A remote capacity tier 1 ms away.
    Remote1ms,
}

impl ModelKind {
    /// All models.
    pub const ALL: [ModelKind; 5] = [
        ModelKind::Hdd5400,
        ModelKind::Hdd7200,
        ModelKind::SsdSata,
        ModelKind::SsdNvme,
        ModelKind::Remote1ms,
    ];

    /// Whether it models a fast tier (else a capacity tier: a disk or a
    /// remote).
    pub fn is_ssd(self) -> bool {
        matches!(self, ModelKind::SsdSata | ModelKind::SsdNvme)
    }

    /// The names of the fast-tier or the capacity-tier models, for
    /// messages: "ssd-sata or ssd-nvme".
    pub fn names(ssd: bool) -> String {
        let names: Vec<&str> = Self::ALL
            .into_iter()
            .filter(|m| m.is_ssd() == ssd)
            .map(ModelKind::name)
            .collect();
        match names.split_last() {
            Some((last, [])) => (*last).to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// Parse a model name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The model's name.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Hdd5400 => "hdd-5400",
            ModelKind::Hdd7200 => "hdd-7200",
            ModelKind::SsdSata => "ssd-sata",
            ModelKind::SsdNvme => "ssd-nvme",
            ModelKind::Remote1ms => "remote-1ms",
        }
    }

    /// A fresh model instance for a device of `capacity` bytes.
    pub fn build(self, capacity: u64) -> Box<dyn TimingModel> {
        match self {
            ModelKind::Hdd5400 => Box::new(HddModel::new(HddParams::HDD_5400, capacity)),
            ModelKind::Hdd7200 => Box::new(HddModel::new(HddParams::HDD_7200, capacity)),
            ModelKind::SsdSata => Box::new(SsdModel::new(SsdParams::SSD_SATA)),
            ModelKind::SsdNvme => Box::new(SsdModel::new(SsdParams::SSD_NVME)),
            ModelKind::Remote1ms => Box::new(RemoteModel::new(RemoteParams::REMOTE_1MS)),
        }
    }
}
