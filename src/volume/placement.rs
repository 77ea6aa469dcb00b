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
}

impl Volume {
    /// The last move of an extent since start.
    pub(crate) fn last_move(&self, extent: u64) -> Option<MoveRecord> {
        self.moves.lock().get(&extent).copied()
    }

    /// Where an extent sits and why.
    pub fn explain(&self, extent: u64) -> Option<Placement> {
        let guard = self.map.get(extent as usize)?.read();
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
        })
    }

    /// Every mapped extent with its place, in extent order.
    pub(crate) fn mapped_extents(&self) -> Vec<(u64, Loc)> {
        self.map
            .iter()
            .enumerate()
            .filter_map(|(i, lock)| lock.read().as_ref().map(|m| (i as u64, m.loc)))
            .collect()
    }
}
