//! The placement policy: from a snapshot of every mapped extent's tier, heat
//! and pin, decide which extents to move, in which order, and why.
//!
//! Rules, in priority order:
//! 1. **Pins**: an extent pinned to a tier it is not on moves there.
//! 2. **Reserve**: while the SSD has fewer free slots than the reserve, the
//!    coldest unpinned SSD extents are demoted.
//! 3. **Promotion**: HDD extents whose *effective* heat reaches
//!    `promote-min-score` move up, hottest first — into free SSD space above
//!    the reserve if there is any, else by swapping with the coldest SSD
//!    extent (promoting into a reserve slot first, then demoting to refill
//!    it), but only if they beat it by the hysteresis margin
//!    (`eff > cold * (1 + promote-margin) + promote-margin-abs`), so nothing
//!    ping-pongs.
//!
//! Effective heat is `score * min(1, coverage / dense-blocks)`: an extent
//! touched in one stray block counts for a fraction of one touched densely.

use serde::{Deserialize, Serialize};

use crate::volume::Tier;

/// Why an extent moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// Hot on the HDD.
    Hot,
    /// Cold on the SSD, swapped out for a hotter extent.
    Cold,
    /// Demoted to restore the SSD reserve.
    Reserve,
    /// Moved to honour a pin.
    Pin,
    /// Moved on an operator's request.
    Manual,
}

impl Reason {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Hot => "hot",
            Reason::Cold => "cold",
            Reason::Reserve => "reserve",
            Reason::Pin => "pin",
            Reason::Manual => "manual",
        }
    }
}

/// One planned move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Logical extent.
    pub extent: u64,
    /// Destination tier.
    pub to: Tier,
    /// Why.
    pub reason: Reason,
}

/// What the policy knows of one mapped extent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Logical extent.
    pub extent: u64,
    /// Where it is.
    pub tier: Tier,
    /// Decayed heat score.
    pub score: f32,
    /// Distinct blocks touched recently.
    pub coverage: u32,
    /// Pin, if any.
    pub pin: Option<Tier>,
}

/// Policy knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct PolicyConfig {
    /// Minimum effective heat for a promotion.
    pub promote_min_score: f32,
    /// Relative margin a promotion must beat the coldest SSD extent by.
    pub promote_margin: f32,
    /// Absolute margin added to the relative one.
    pub promote_margin_abs: f32,
    /// Distinct blocks that count as dense activity.
    pub dense_blocks: u32,
    /// Moves planned per round at most.
    pub max_moves: usize,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            promote_min_score: 2.0,
            promote_margin: 0.5,
            promote_margin_abs: 1.0,
            dense_blocks: 8,
            max_moves: 256,
        }
    }
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct PlanInput {
    /// Every mapped extent.
    pub candidates: Vec<Candidate>,
    /// Free SSD slots now.
    pub ssd_free: u64,
    /// Reserve in slots.
    pub reserve: u64,
    /// Blocks per extent.
    pub blocks_per_extent: u32,
}

/// Effective heat: score weighted by how densely the extent is used.
pub fn effective(cfg: &PolicyConfig, c: &Candidate, blocks_per_extent: u32) -> f32 {
    let dense = cfg.dense_blocks.clamp(1, blocks_per_extent.max(1));
    c.score * (c.coverage as f32 / dense as f32).min(1.0)
}

/// Plan the moves of one round. In a swap the promotion goes first while
/// the SSD has a free (reserve) slot to receive it, else the demotion.
pub fn plan(cfg: &PolicyConfig, input: &PlanInput) -> Vec<Move> {
    let bpe = input.blocks_per_extent;
    let eff = |c: &Candidate| effective(cfg, c, bpe);
    let mut moves = Vec::new();
    let mut free = input.ssd_free as i64;
    let reserve = input.reserve as i64;
    let full = |moves: &Vec<Move>| moves.len() >= cfg.max_moves;

    // 1. Pins.
    for c in &input.candidates {
        match (c.pin, c.tier) {
            (Some(Tier::Hdd), Tier::Ssd) if !full(&moves) => {
                moves.push(Move {
                    extent: c.extent,
                    to: Tier::Hdd,
                    reason: Reason::Pin,
                });
                free += 1;
            }
            (Some(Tier::Ssd), Tier::Hdd) if !full(&moves) && free > 0 => {
                moves.push(Move {
                    extent: c.extent,
                    to: Tier::Ssd,
                    reason: Reason::Pin,
                });
                free -= 1;
            }
            _ => {}
        }
    }

    // Coldest first: SSD extents that may leave it.
    let mut cold: Vec<&Candidate> = input
        .candidates
        .iter()
        .filter(|c| c.tier == Tier::Ssd && c.pin.is_none())
        .collect();
    cold.sort_by(|a, b| eff(a).total_cmp(&eff(b)).then(a.extent.cmp(&b.extent)));
    let mut cold = cold.into_iter().peekable();

    // 2. Reserve.
    while free < reserve && !full(&moves) {
        let Some(c) = cold.next() else { break };
        moves.push(Move {
            extent: c.extent,
            to: Tier::Hdd,
            reason: Reason::Reserve,
        });
        free += 1;
    }

    // 3. Promotions, hottest first.
    let mut hot: Vec<&Candidate> = input
        .candidates
        .iter()
        .filter(|c| c.tier == Tier::Hdd && c.pin.is_none() && eff(c) >= cfg.promote_min_score)
        .collect();
    hot.sort_by(|a, b| eff(b).total_cmp(&eff(a)).then(a.extent.cmp(&b.extent)));
    for h in hot {
        if full(&moves) {
            break;
        }
        if free > reserve {
            moves.push(Move {
                extent: h.extent,
                to: Tier::Ssd,
                reason: Reason::Hot,
            });
            free -= 1;
            continue;
        }
        if moves.len() + 2 > cfg.max_moves {
            break;
        }
        let Some(c) = cold.peek() else { break };
        if eff(h) > eff(c) * (1.0 + cfg.promote_margin) + cfg.promote_margin_abs {
            let promote = Move {
                extent: h.extent,
                to: Tier::Ssd,
                reason: Reason::Hot,
            };
            let demote = Move {
                extent: c.extent,
                to: Tier::Hdd,
                reason: Reason::Cold,
            };
            if free > 0 {
                // Promote into the reserve first, then refill it: the hot
                // extent reaches the SSD one HDD transfer sooner.
                moves.push(promote);
                moves.push(demote);
            } else {
                moves.push(demote);
                moves.push(promote);
            }
            cold.next();
        } else {
            break;
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(extent: u64, tier: Tier, score: f32) -> Candidate {
        Candidate {
            extent,
            tier,
            score,
            coverage: 256,
            pin: None,
        }
    }

    fn input(candidates: Vec<Candidate>, ssd_free: u64, reserve: u64) -> PlanInput {
        PlanInput {
            candidates,
            ssd_free,
            reserve,
            blocks_per_extent: 256,
        }
    }

    #[test]
    fn promotes_into_free_space_above_the_reserve() {
        let cfg = PolicyConfig::default();
        let p = plan(
            &cfg,
            &input(
                vec![
                    c(1, Tier::Hdd, 10.0),
                    c(2, Tier::Hdd, 1.0),
                    c(3, Tier::Hdd, 20.0),
                ],
                3,
                1,
            ),
        );
        assert_eq!(
            p,
            vec![
                Move {
                    extent: 3,
                    to: Tier::Ssd,
                    reason: Reason::Hot
                },
                Move {
                    extent: 1,
                    to: Tier::Ssd,
                    reason: Reason::Hot
                },
            ]
        );
    }

    #[test]
    fn restores_the_reserve_coldest_first() {
        let cfg = PolicyConfig::default();
        let p = plan(
            &cfg,
            &input(
                vec![
                    c(1, Tier::Ssd, 5.0),
                    c(2, Tier::Ssd, 0.0),
                    c(3, Tier::Ssd, 1.0),
                ],
                0,
                2,
            ),
        );
        assert_eq!(
            p,
            vec![
                Move {
                    extent: 2,
                    to: Tier::Hdd,
                    reason: Reason::Reserve
                },
                Move {
                    extent: 3,
                    to: Tier::Hdd,
                    reason: Reason::Reserve
                },
            ]
        );
    }

    #[test]
    fn swaps_only_past_the_hysteresis_margin() {
        let cfg = PolicyConfig::default();
        // Full SSD (free == reserve): 10 vs cold 6 → 10 > 6*1.5+1 = 10? no.
        let p = plan(
            &cfg,
            &input(vec![c(1, Tier::Ssd, 6.0), c(2, Tier::Hdd, 10.0)], 1, 1),
        );
        assert!(p.is_empty(), "{p:?}");
        let p = plan(
            &cfg,
            &input(vec![c(1, Tier::Ssd, 6.0), c(2, Tier::Hdd, 10.5)], 1, 1),
        );
        // A free (reserve) slot: promote into it first, then refill it.
        assert_eq!(
            p,
            vec![
                Move {
                    extent: 2,
                    to: Tier::Ssd,
                    reason: Reason::Hot
                },
                Move {
                    extent: 1,
                    to: Tier::Hdd,
                    reason: Reason::Cold
                },
            ]
        );
        // No free slot at all: the demotion goes first.
        let p = plan(
            &cfg,
            &input(vec![c(1, Tier::Ssd, 6.0), c(2, Tier::Hdd, 10.5)], 0, 0),
        );
        assert_eq!(p[0].extent, 1);
        assert_eq!(p[0].to, Tier::Hdd);
    }

    #[test]
    fn sparse_activity_counts_less() {
        let cfg = PolicyConfig::default();
        let mut sparse = c(1, Tier::Hdd, 8.0);
        sparse.coverage = 1;
        // Effective 1.0 < promote-min-score 2.0.
        assert!(plan(&cfg, &input(vec![sparse], 10, 1)).is_empty());
        sparse.coverage = 8;
        assert_eq!(plan(&cfg, &input(vec![sparse], 10, 1)).len(), 1);
    }

    #[test]
    fn pins_win_and_pinned_extents_stay() {
        let cfg = PolicyConfig::default();
        let mut a = c(1, Tier::Ssd, 0.0);
        a.pin = Some(Tier::Ssd);
        let mut b = c(2, Tier::Ssd, 100.0);
        b.pin = Some(Tier::Hdd);
        let mut d = c(3, Tier::Hdd, 0.0);
        d.pin = Some(Tier::Ssd);
        let p = plan(&cfg, &input(vec![a, b, d], 0, 1));
        // b leaves (pin), d arrives (pin) using b's slot, then the reserve
        // needs one more slot but a is pinned: nothing else to demote.
        assert_eq!(
            p,
            vec![
                Move {
                    extent: 2,
                    to: Tier::Hdd,
                    reason: Reason::Pin
                },
                Move {
                    extent: 3,
                    to: Tier::Ssd,
                    reason: Reason::Pin
                },
            ]
        );
    }
}
