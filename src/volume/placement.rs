//! Where an extent sits and why: the explanation `tierctl explain` shows,
//! the last move of each extent, and the list of mapped extents the
//! migration policy plans over.

use serde::{Deserialize, Serialize};

use super::extent::Loc;
use super::geometry::Tier;
use super::moves::MoveRecord;
use super::Volume;

/// Where an extent sits and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Logical extent.
    pub extent: u64,
    /// Its first byte.
    pub offset: u64,
    /// Extent size.
    pub len: u64,
    /// Tier, if mapped.
    pub tier: Option<Tier>,
    /// Slot on that tier.
    pub slot: Option<u32>,
    /// Blocks holding written data.
    pub written_blocks: u32,
    /// Blocks per extent.
    pub blocks: u32,
    /// Decayed heat score.
    pub score: f32,
    /// Distinct blocks touched recently.
    pub coverage: u32,
    /// Pin in force.
    pub pin: Option<Tier>,
    /// The last move since start.
    pub last_move: Option<MoveRecord>,
    /// On the SSD: the HDD slot of its clean copy (shadow), if it keeps one.
    #[serde(default)]
    pub shadow_slot: Option<u32>,
    /// Blocks of that copy that are stale (written on the SSD since).
    #[serde(default)]
    pub stale_blocks: u32,
    /// On the HDD: blocks whose newest data is in the SSD write log.
    #[serde(default)]
    pub logged_blocks: u32,
    /// The blocks whose two copies differ (stale in the shadow, or newer in
    /// the log), as inclusive ranges `[first, last]`.
    #[serde(default)]
    pub dirty_ranges: Vec<[u32; 2]>,
}

impl Volume {
    /// The last move of an extent since start.
    pub(crate) fn last_move(&self, extent: u64) -> Option<MoveRecord> {
        self.moves.lock().get(&extent).copied()
    }

    /// Where an extent sits and why.
    pub fn explain(&self, extent: u64) -> Option<Placement> {
        let guard = self.map.get(extent)?.read();
        let blocks = self.geo.blocks_per_extent();
        let m = guard.as_ref();
        Some(Placement {
            extent,
            offset: extent * self.geo.extent_size,
            len: self.geo.extent_size,
            tier: m.map(|m| m.loc.tier),
            slot: m.map(|m| m.loc.slot),
            written_blocks: m
                .map(|m| (0..blocks).filter(|b| m.written.get(*b)).count() as u32)
                .unwrap_or(0),
            blocks,
            score: self.heat.score(extent),
            coverage: self.heat.coverage(extent),
            pin: self.pin_of(extent),
            last_move: self.last_move(extent),
            shadow_slot: m.and_then(|m| m.shadow.as_ref().map(|s| s.slot)),
            stale_blocks: m
                .and_then(|m| {
                    let s = m.shadow.as_ref()?;
                    Some(
                        (0..blocks)
                            .filter(|b| m.written.get(*b) && s.stale.get(*b))
                            .count() as u32,
                    )
                })
                .unwrap_or(0),
            logged_blocks: m.map(|m| m.logged.len() as u32).unwrap_or(0),
            dirty_ranges: m.map(|m| dirty_ranges(m, blocks)).unwrap_or_default(),
        })
    }

    /// Every mapped extent with its place and whether it is an SSD extent
    /// whose HDD shadow is clean (it may leave by a mapping change alone),
    /// in extent order.
    pub(crate) fn mapped_extents(&self) -> Vec<(u64, Loc, bool)> {
        let blocks = self.geo.blocks_per_extent();
        (0..self.map.len())
            .filter_map(|i| {
                self.map
                    .at(i)
                    .read()
                    .as_ref()
                    .map(|m| (i, m.loc, m.shadow_clean(blocks)))
            })
            .collect()
    }

    /// The extents on the SSD, as [`Volume::mapped_extents`] gives them, in
    /// extent order: what the SSD holds is bounded by its slots, not by the
    /// volume's size.
    pub fn ssd_extents(&self) -> Vec<(u64, Loc, bool)> {
        let blocks = self.geo.blocks_per_extent();
        self.map
            .ssd_extents()
            .into_iter()
            .filter_map(|e| {
                let g = self.map.at(e).read();
                let m = g.as_ref().filter(|m| m.loc.tier == Tier::Ssd)?;
                Some((e, m.loc, m.shadow_clean(blocks)))
            })
            .collect()
    }
}

/// Blocks whose two copies differ, as inclusive ranges.
fn dirty_ranges(m: &super::Mapping, blocks: u32) -> Vec<[u32; 2]> {
    let dirty = |b: u32| match &m.shadow {
        Some(s) => m.written.get(b) && s.stale.get(b),
        None => m.logged_at(b).is_some(),
    };
    let mut out: Vec<[u32; 2]> = Vec::new();
    for b in (0..blocks).filter(|b| dirty(*b)) {
        match out.last_mut() {
            Some(r) if r[1] + 1 == b => r[1] = b,
            _ => out.push([b, b]),
        }
    }
    out
}
