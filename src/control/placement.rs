//! The control API's answers about where the volume's data sits: runs
//! and cells of placement (`tierctl placement`), the ranges only on the
//! SSD (`--ssd-only`), one extent explained, the hottest and coldest.

use serde::{Deserialize, Serialize};

use crate::volume::{Placement, Tier};

/// Where a run of extents lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Where {
    /// On the SSD.
    Ssd,
    /// On the HDD.
    Hdd,
    /// Not mapped (reads as zeros).
    Unmapped,
}

impl From<Option<Tier>> for Where {
    fn from(t: Option<Tier>) -> Self {
        match t {
            Some(Tier::Ssd) => Where::Ssd,
            Some(Tier::Hdd) => Where::Hdd,
            None => Where::Unmapped,
        }
    }
}

/// One run of [`PlacementMap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Where.
    #[serde(rename = "where")]
    pub at: Where,
}

/// Answer of [`super::Request::SsdOnly`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SsdOnlyMap {
    /// First byte asked about (after clipping).
    pub offset: u64,
    /// Bytes asked about (after clipping).
    pub len: u64,
    /// Runs whose newest data is only on the SSD, in 4 KiB blocks (a block
    /// the write log holds in part counts whole), in order.
    pub runs: Vec<ByteRun>,
    /// Bytes of all such runs in the range, listed or not.
    pub bytes: u64,
    /// More runs than `max_runs`: the list stops early.
    pub truncated: bool,
    /// The SSD has failed requests since the daemon started: these ranges
    /// read EIO now, where they did fail.
    pub ssd_errors: u64,
    /// Ranges already lost with a dead SSD (the volume was opened without
    /// it): they read EIO until rewritten whole or discarded. In order, at
    /// most `max_runs`.
    #[serde(default)]
    pub lost: Vec<ByteRun>,
    /// Bytes of all lost ranges in the range, listed or not.
    #[serde(default)]
    pub lost_bytes: u64,
    /// More lost ranges than `max_runs`.
    #[serde(default)]
    pub lost_truncated: bool,
}

/// A byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByteRun {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// Answer of [`super::Request::Placement`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlacementMap {
    /// First byte asked about.
    pub offset: u64,
    /// Bytes asked about.
    pub len: u64,
    /// Extent size in bytes.
    pub extent_size: u64,
    /// Logical capacity in bytes.
    pub capacity_bytes: u64,
    /// Runs of whole extents, in order, covering the range (rounded out to
    /// extent boundaries); empty when cells were asked for.
    pub runs: Vec<Run>,
    /// The counts per cell, when the request asked for cells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cells: Option<Cells>,
}

/// Extents per cell of a [`PlacementMap`] by where they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cells {
    /// Extents per cell (the last cell may have fewer).
    pub per_cell: u64,
    /// Per cell, in order: extents on the SSD, on the HDD, unmapped.
    pub counts: Vec<[u64; 3]>,
}

/// Answer of [`super::Request::Explain`]: the engine's [`Placement`] (its fields
/// flattened into the JSON object) and a sentence on why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explain {
    /// Where the extent sits, its heat, pin and last move.
    #[serde(flatten)]
    pub placement: Placement,
    /// A sentence on why it sits where it does.
    pub why: String,
}

/// One extent of [`super::Request::Top`]'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TopEntry {
    /// Logical extent.
    pub extent: u64,
    /// Its first byte.
    pub offset: u64,
    /// Where it is.
    pub tier: Tier,
    /// Decayed heat score.
    pub score: f32,
    /// Effective heat, what the order follows (and the migrator ranks
    /// by): the score weighted by how densely the extent is used.
    #[serde(default)]
    pub heat: f32,
    /// Distinct blocks touched recently.
    pub coverage: u32,
    /// Pin, if any.
    pub pin: Option<Tier>,
}
