//! The placement policy: from a snapshot of the tier, heat and pin of the
//! extents that can move (those on the SSD, those touched recently, those
//! pinned to the SSD and those of busy zones: [`super::candidates`]),
//! decide which extents to move, in which order, and why.
//!
//! Rules, in priority order:
//! 1. **Pins**: an extent pinned to a tier it is not on moves there.
//! 2. **Reserve**: while the SSD has fewer free slots than the reserve, the
//!    coldest unpinned SSD extents are demoted.
//! 3. **Promotion**: HDD extents whose *effective* heat reaches
//!    `promote-min-score`, and that came back (touched in at least two
//!    distinct seconds recently: a burst within one second is no reuse),
//!    move up, hottest first — into free SSD space above
//!    the reserve if there is any, else by swapping with the coldest SSD
//!    extent (promoting into a reserve slot first, then demoting to refill
//!    it). *Recency first*: an extent in use (touched within
//!    `heat.idle-after`) always beats an idle one, an idle one never beats
//!    one in use; within a class it must beat the victim by the hysteresis
//!    margin (`eff > cold * (1 + promote-margin) + promote-margin-abs`), so
//!    nothing ping-pongs. Victims are taken idle first (those with a clean
//!    HDD copy before the others: they leave for free), then by heat.
//!
//! 4. **Neighbourhood prefetch**: a *zone* (`zone-extents` neighbouring
//!    extents) in which at least `zone-min-active` extents were touched
//!    recently (in the coverage windows, and one within `heat.idle-after`)
//!    is in use as a whole; its HDD extents that have not earned a
//!    promotion themselves yet move up too, but only into free space above
//!    the reserve or in place of SSD extents of *idle* zones (zones nothing
//!    touched recently). Data next to what is in use replaces data next to
//!    nothing in use, never warm data, so prefetch cannot churn.
//!
//! Rules 3 and 4 are read-driven: with admission at the miss on
//! ([`PlanInput::admission`]) reads place their data themselves, and the
//! planner keeps only the pins and the reserve.
//!
//! Effective heat is `score * min(1, coverage / dense-blocks)`: an extent
//! touched in one stray block counts for a fraction of one touched densely.
//!
//! **Borrowing**: promotions may use reserve slots (up to `promote-borrow`
//! of the reserve, never the part the recent foreground write rate needs
//! over `reserve-horizon`), so a new hot set comes up before the demotions
//! that refill the reserve are paid; the reserve is refilled with whatever
//! budget each round's promotions leave, and at once below the floor. SSD
//! extents with a clean HDD copy *cover* the reserve: the write path takes
//! them back by a mapping change the moment new data needs the room, so the
//! refill copies data out only for what they do not cover.
//!
//! Order of a round: pins, urgent reserve demotions (below the floor), hot
//! promotions then prefetches, each in source-slot order (an elevator pass
//! over the HDD), a swap's demotions in groups once the free slots reach
//! the floor, then demotions refilling the reserve.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::zones::Zones;
use crate::units::{InvalidKey, Reason};
use crate::volume::Tier;

/// One planned move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// Logical extent.
    pub extent: u64,
    /// Destination tier.
    pub to: Tier,
    /// Why.
    pub reason: Reason,
    /// A move that may wait: a refill of the reserve above its floor. The
    /// worker runs it only while the HDD serves no foreground I/O
    /// (`migrate.speculative-idle`), so work that can wait never slows
    /// down a user.
    pub speculative: bool,
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
    /// Decayed count of the distinct seconds it was touched in
    /// ([`HeatMap::recurrence`]): whether it came back, not how many
    /// requests one visit made.
    pub recurrence: f32,
    /// Distinct blocks touched recently.
    pub coverage: u32,
    /// Pin, if any.
    pub pin: Option<Tier>,
    /// Its slot on its tier (orders the copies for the HDD's sake).
    pub slot: u32,
    /// Touched within `heat.idle-after`: in use. Idle extents give way to
    /// extents in use whatever their scores.
    pub active: bool,
    /// On the SSD with a clean HDD copy: it can leave by a mapping change.
    pub clean: bool,
}

/// Recurrence (decayed count of the distinct seconds an extent was touched
/// in) from which an extent came back: it was used in two seconds at least,
/// recently. A promotion needs it besides its score, and so does an
/// extent's part in its zone's activity (neighbourhood prefetch): a short
/// run of requests within one second earns a score of several, but says
/// nothing about whether the extent will be used again, and uniform random
/// reads over a large region touch many extents once each.
const CAME_BACK: f32 = 1.9;

/// Recurrence from which an extent counts for its zone's activity
/// (neighbourhood prefetch reads a whole zone, so it wants more than two
/// visits, which uniform random reads over a large region give many
/// extents by chance within seconds): touched in three distinct seconds.
pub(super) const KEEPS_COMING_BACK: f32 = 2.9;

/// Policy knobs. Flattened into the `[migrate]` table (`migrate.max-moves`),
/// whose `MigrateConfig` refuses unknown keys for both (serde's `flatten`
/// does not combine with `deny_unknown_fields` on the flattened struct).
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
    /// Neighbouring extents that form a zone for prefetch (0: no prefetch).
    pub zone_extents: u32,
    /// Separate runs of recently touched extents in a zone for the zone to
    /// count as in use.
    pub zone_min_active: u32,
    /// Share of the reserve promotions may take while they are pending (what
    /// recent writes need stays protected, see `reserve-horizon`); the
    /// reserve is refilled with what each round's moves leave over.
    pub promote_borrow: f32,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            promote_min_score: 2.0,
            promote_margin: 0.5,
            promote_margin_abs: 1.0,
            dense_blocks: 8,
            max_moves: 256,
            zone_extents: 64,
            zone_min_active: 4,
            promote_borrow: 1.0,
        }
    }
}

/// What `MigrateConfig::validate` says of negative scores, margins and
/// reserve boosts.
pub(crate) const NOT_NEGATIVE: &str =
    "scores, margins and reserve-boost must be finite and not negative";

impl PolicyConfig {
    /// Check values that parse but make no sense; the error names the key
    /// (`migrate.promote-borrow`: the policy's keys live in `[migrate]`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        for (key, x) in [
            ("migrate.promote-margin", self.promote_margin),
            ("migrate.promote-margin-abs", self.promote_margin_abs),
            ("migrate.promote-min-score", self.promote_min_score),
        ] {
            if x.is_nan() || x < 0.0 {
                return Err(InvalidKey::new(key, NOT_NEGATIVE));
            }
        }
        if !(0.0..=1.0).contains(&self.promote_borrow) {
            return Err(InvalidKey::new(
                "migrate.promote-borrow",
                "must be a share between 0 and 1",
            ));
        }
        Ok(())
    }
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct PlanInput {
    /// The mapped extents any rule may move or weigh, in extent order:
    /// every extent on the SSD, every one touched recently, pinned to the
    /// SSD or in a busy zone ([`super::candidates::candidates`]). Any other
    /// extent is an untouched, unpinned HDD extent outside the busy zones,
    /// which no rule moves: adding it changes no plan.
    pub candidates: Vec<Candidate>,
    /// Free SSD slots now.
    pub ssd_free: u64,
    /// Reserve in slots.
    pub reserve: u64,
    /// Blocks per extent.
    pub blocks_per_extent: u32,
    /// Moves the worker carries out together: a swap's demotions are
    /// emitted in groups of this many, so each direction goes as a batch.
    pub group: usize,
    /// Reserve slots never lent to promotions: what the recent foreground
    /// write rate would consume over the reserve horizon.
    pub protect: u64,
    /// Promotions keep a clean HDD copy (shadows on, the HDD has room):
    /// what they borrow from the reserve comes back by a mapping change.
    pub shadows: bool,
    /// Admission at the miss is on (`migrate::admit`): no promotions for
    /// heat (rule 3) and no prefetch (rule 4).
    pub admission: bool,
}

/// Effective heat: score weighted by how densely the extent is used.
pub fn effective(cfg: &PolicyConfig, c: &Candidate, blocks_per_extent: u32) -> f32 {
    let dense = cfg.dense_blocks.clamp(1, blocks_per_extent.max(1));
    c.score * (c.coverage as f32 / dense as f32).min(1.0)
}

/// Plan the moves of one round (see the module docs for the rules and the
/// order).
pub fn plan(cfg: &PolicyConfig, input: &PlanInput) -> Vec<Move> {
    let bpe = input.blocks_per_extent;
    let eff = |c: &Candidate| effective(cfg, c, bpe);
    let mut head = Vec::new();
    let mut free = input.ssd_free as i64;
    let reserve = input.reserve as i64;
    let budget = cfg.max_moves;

    // 1. Pins.
    for c in &input.candidates {
        match (c.pin, c.tier) {
            (Some(Tier::Hdd), Tier::Ssd) if head.len() < budget => {
                head.push(Move {
                    extent: c.extent,
                    to: Tier::Hdd,
                    reason: Reason::Pin,
                    speculative: false,
                });
                free += 1;
            }
            (Some(Tier::Ssd), Tier::Hdd) if head.len() < budget && free > 0 => {
                head.push(Move {
                    extent: c.extent,
                    to: Tier::Ssd,
                    reason: Reason::Pin,
                    speculative: false,
                });
                free -= 1;
            }
            _ => {}
        }
    }

    // Coldest first: SSD extents that may leave it. Idle ones (untouched
    // for `idle-after`) before any extent in use, whatever the scores: a
    // score counts how often an extent was read, and data read from the
    // SSD is read far more often than the same data on the HDD, so by
    // scores alone a new working set would wait minutes behind the old.
    let mut cold: Vec<&Candidate> = input
        .candidates
        .iter()
        .filter(|c| c.tier == Tier::Ssd && c.pin.is_none())
        .collect();
    // Among idle extents, those with a clean HDD copy first: they leave by
    // a mapping change, the others by a copy.
    cold.sort_by(|a, b| {
        let key = |c: &Candidate| (c.active, c.active || !c.clean);
        key(a)
            .cmp(&key(b))
            .then(eff(a).total_cmp(&eff(b)))
            .then(a.extent.cmp(&b.extent))
    });
    let mut gone: HashSet<u64> = HashSet::new();
    let next_cold = |gone: &mut HashSet<u64>, ok: &dyn Fn(&Candidate) -> bool| {
        let c = cold
            .iter()
            .find(|c| !gone.contains(&c.extent) && ok(c))
            .copied();
        if let Some(c) = c {
            gone.insert(c.extent);
        }
        c
    };

    // 2. Reserve: at once down to the share promotions may borrow.
    let lend = reserve - (input.protect as i64).min(reserve);
    let borrow = ((reserve as f32 * cfg.promote_borrow.clamp(0.0, 1.0)).floor() as i64).min(lend);
    let floor = reserve - borrow;
    while free < floor && head.len() < budget {
        // Idle extents with a clean HDD copy first: they leave for free.
        let Some(c) = next_cold(&mut gone, &|c| !c.active && c.clean)
            .or_else(|| next_cold(&mut gone, &|_| true))
        else {
            break;
        };
        head.push(Move {
            extent: c.extent,
            to: Tier::Hdd,
            reason: Reason::Reserve,
            speculative: false,
        });
        free += 1;
    }

    // 3. Promotions, hottest first: into free space above the reserve (less
    // what may be borrowed), else as swaps past the hysteresis margin.
    let mut promote: Vec<(&Candidate, Reason)> = Vec::new();
    let mut demote: Vec<(&Candidate, Reason)> = Vec::new();
    let room = |p: &Vec<(&Candidate, Reason)>, d: &Vec<(&Candidate, Reason)>| {
        budget.saturating_sub(head.len() + p.len() + d.len())
    };
    let mut hot: Vec<&Candidate> = input
        .candidates
        .iter()
        .filter(|c| {
            !input.admission
                && c.tier == Tier::Hdd
                && c.pin.is_none()
                && eff(c) >= cfg.promote_min_score
                && c.recurrence >= CAME_BACK
        })
        .collect();
    hot.sort_by(|a, b| eff(b).total_cmp(&eff(a)).then(a.extent.cmp(&b.extent)));
    // Free space above the reserve takes promotions as they are; a slot
    // lent from the reserve only with a victim whose demotion (deferred to
    // the refill) it beats, like a swap.
    let mut above = (free - reserve).max(0);
    let mut lend = (free - floor).max(0) - above;
    let mut later: Vec<(&Candidate, Reason)> = Vec::new();
    // Why a victim leaves: idle data gives way to an extent in use; data in
    // use only to one hotter by the margin.
    let why = |c: &Candidate| if c.active { Reason::Cold } else { Reason::Idle };
    for h in hot {
        if above > 0 && room(&promote, &demote) >= 1 {
            promote.push((h, Reason::Hot));
            above -= 1;
            continue;
        }
        // A lent slot's victim leaves in the refill, maybe a later round.
        if room(&promote, &demote) < if lend > 0 { 1 } else { 2 } {
            break;
        }
        // The coldest is the one to beat: if it is not beaten, none is.
        let Some(c) = next_cold(&mut gone, &|_| true) else {
            break;
        };
        // An idle extent gives way to one in use. Between two in use (or
        // two idle), past the margin both in effective heat and in raw
        // score: the score decays smoothly, while coverage drops a step
        // whenever a coverage window ends; a swap on that step alone would
        // churn. Neither lets two sets push each other out in turn: a
        // promoted extent in use is not idle, and the margin is hysteresis.
        let past = |a: f32, b: f32| a > b * (1.0 + cfg.promote_margin) + cfg.promote_margin_abs;
        let beats = match (h.active, c.active) {
            // Data in use beats idle data; idle data never displaces data
            // in use (so the set that just left cannot come back by its
            // old score).
            (true, false) => true,
            (false, true) => false,
            _ => past(eff(h), eff(c)) && past(h.score, c.score),
        };
        if !beats {
            gone.remove(&c.extent);
            break;
        }
        promote.push((h, Reason::Hot));
        if lend > 0 {
            lend -= 1;
            later.push((c, why(c)));
        } else {
            demote.push((c, why(c)));
        }
    }

    // 4. Neighbourhood prefetch.
    if !input.admission && cfg.zone_extents > 0 && room(&promote, &demote) > 0 {
        let zones = Zones::find(cfg, &input.candidates);
        let in_use = |c: &Candidate| zones.in_use(c.extent);
        let chosen: HashSet<u64> = promote.iter().map(|(c, _)| c.extent).collect();
        let mut near: Vec<&Candidate> = input
            .candidates
            .iter()
            .filter(|c| {
                c.tier == Tier::Hdd
                    && c.pin.is_none()
                    && zones.is_busy(c.extent)
                    && !chosen.contains(&c.extent)
            })
            .collect();
        // Extents in use themselves first (not enough for a promotion of
        // their own yet, but the likeliest to be read again), then the
        // busiest zones, in order within a zone.
        near.sort_by(|a, b| {
            (b.active, b.coverage > 0)
                .cmp(&(a.active, a.coverage > 0))
                .then(in_use(b).cmp(&in_use(a)))
                .then(a.extent.cmp(&b.extent))
        });
        for n in near {
            if above > 0 && room(&promote, &demote) >= 1 {
                promote.push((n, Reason::Near));
                above -= 1;
                continue;
            }
            if room(&promote, &demote) < if lend > 0 { 1 } else { 2 } {
                break;
            }
            // Only extents of idle zones make way.
            let Some(c) = next_cold(&mut gone, &|c| in_use(c) == 0) else {
                break;
            };
            promote.push((n, Reason::Near));
            if lend > 0 {
                lend -= 1;
                later.push((c, Reason::Idle));
            } else {
                demote.push((c, Reason::Idle));
            }
        }
    }

    // Order: hot promotions, then prefetches, each by source slot (an
    // elevator pass over the HDD); a swap's demotions only when the free
    // slots reach the floor.
    promote.sort_by_key(|(c, r)| (*r != Reason::Hot, !c.active, c.slot, c.extent));
    let promoted = promote.len() as i64;
    let mut moves = head;
    let mut demote = demote.into_iter();
    for (p, reason) in promote {
        if free <= floor.max(0) {
            for (d, reason) in demote.by_ref().take(input.group.max(1)) {
                moves.push(Move {
                    extent: d.extent,
                    to: Tier::Hdd,
                    reason,
                    speculative: false,
                });
                free += 1;
            }
        }
        if free <= 0 {
            break;
        }
        moves.push(Move {
            extent: p.extent,
            to: Tier::Ssd,
            reason,
            speculative: false,
        });
        free -= 1;
    }
    for (d, reason) in demote {
        moves.push(Move {
            extent: d.extent,
            to: Tier::Hdd,
            reason,
            speculative: false,
        });
        free += 1;
    }

    // 5. Refill the reserve with what the round has left. SSD extents with
    // a clean HDD copy (and this round's promotions, when they keep
    // theirs) cover it: the write path takes them back by a mapping change
    // the moment writes need the room, so demoting them now would gain
    // nothing and bring them back by a copy if they are read again (a
    // working set's tail, idle for a while, cycled so). What is left
    // uncovered is refilled as before, from extents without a clean copy:
    // the victims of promotions into lent slots, then the coldest.
    let cover: i64 = input
        .candidates
        .iter()
        .filter(|c| c.tier == Tier::Ssd && c.pin.is_none() && c.clean && !gone.contains(&c.extent))
        .count() as i64
        + if input.shadows { promoted } else { 0 };
    let mut later = later.into_iter().filter(|(c, _)| !c.clean);
    while free + cover.max(0) < reserve && moves.len() < budget {
        // A clean extent already counts as cover: demoting it would gain
        // nothing, so only extents without a clean copy are copied out.
        // A victim of this round's promotions into lent slots leaves with
        // them (the slots they took are the reserve's); a plain refill
        // above the floor may wait for the HDD to be free of users: below
        // it, step 2 of a later round demotes at once.
        let (c, reason, speculative) = match later.next() {
            Some((c, reason)) => (c, reason, false),
            None => match next_cold(&mut gone, &|c| !c.clean) {
                Some(c) => (c, Reason::Reserve, true),
                None => break,
            },
        };
        moves.push(Move {
            extent: c.extent,
            to: Tier::Hdd,
            reason,
            speculative,
        });
        free += 1;
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
            recurrence: score,
            coverage: 256,
            pin: None,
            slot: extent as u32,
            active: true,
            clean: false,
        }
    }

    fn input(candidates: Vec<Candidate>, ssd_free: u64, reserve: u64) -> PlanInput {
        PlanInput {
            candidates,
            ssd_free,
            reserve,
            blocks_per_extent: 256,
            group: 1,
            protect: 0,
            shadows: false,
            admission: false,
        }
    }

    #[test]
    fn with_admission_on_heat_promotes_nothing_but_the_reserve_is_kept() {
        let cfg = PolicyConfig::default();
        let mut hot = c(1, Tier::Hdd, 20.0);
        hot.recurrence = 10.0;
        let mut inp = input(vec![hot, c(2, Tier::Ssd, 0.5)], 0, 1);
        inp.admission = true;
        let p = plan(&cfg, &inp);
        assert!(p.iter().all(|m| m.to == Tier::Hdd), "{p:?}");
        assert!(
            p.iter()
                .any(|m| m.extent == 2 && m.reason == Reason::Reserve),
            "{p:?}"
        );
        inp.admission = false;
        assert!(plan(&cfg, &inp)
            .iter()
            .any(|m| m.extent == 1 && m.to == Tier::Ssd));
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
        // The two hottest, copied in source-slot order.
        assert_eq!(
            p,
            vec![
                Move {
                    extent: 1,
                    to: Tier::Ssd,
                    reason: Reason::Hot,
                    speculative: false
                },
                Move {
                    extent: 3,
                    to: Tier::Ssd,
                    reason: Reason::Hot,
                    speculative: false
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
                    reason: Reason::Reserve,
                    speculative: true
                },
                Move {
                    extent: 3,
                    to: Tier::Hdd,
                    reason: Reason::Reserve,
                    speculative: true
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
                    reason: Reason::Hot,
                    speculative: false
                },
                Move {
                    extent: 1,
                    to: Tier::Hdd,
                    reason: Reason::Cold,
                    speculative: false
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
                    reason: Reason::Pin,
                    speculative: false
                },
                Move {
                    extent: 3,
                    to: Tier::Ssd,
                    reason: Reason::Pin,
                    speculative: false
                },
            ]
        );
    }

    fn touched(extent: u64, tier: Tier, score: f32, coverage: u32) -> Candidate {
        Candidate {
            coverage,
            active: coverage > 0,
            ..c(extent, tier, score)
        }
    }

    #[test]
    fn a_busy_zone_brings_its_neighbours_in_place_of_idle_data() {
        let cfg = PolicyConfig::default();
        // Zone 1 (extents 64..128): four extents touched a few times each
        // (below the promotion score), two untouched. Zone 3: SSD data nobody touches.
        // Zone 4: an SSD extent touched once (its zone is in use).
        let mut v = vec![
            touched(64, Tier::Hdd, 3.0, 1),
            touched(70, Tier::Hdd, 3.0, 1),
            touched(80, Tier::Hdd, 3.0, 1),
            touched(90, Tier::Hdd, 3.0, 1),
            touched(100, Tier::Hdd, 0.0, 0),
            touched(101, Tier::Hdd, 0.0, 0),
            touched(200, Tier::Ssd, 0.0, 0),
            touched(201, Tier::Ssd, 0.0, 0),
            touched(256, Tier::Ssd, 0.1, 1),
            // A zone with three touched extents only: not busy.
            touched(320, Tier::Hdd, 1.0, 1),
            touched(321, Tier::Hdd, 1.0, 1),
            touched(322, Tier::Hdd, 1.0, 1),
            touched(323, Tier::Hdd, 0.0, 0),
        ];
        for (k, x) in v.iter_mut().enumerate() {
            x.slot = k as u32;
        }
        // No free slot, no reserve: two swaps, the idle zone's extents out.
        let p = plan(&cfg, &input(v.clone(), 0, 0));
        let up: Vec<u64> = p
            .iter()
            .filter(|m| m.to == Tier::Ssd)
            .map(|m| m.extent)
            .collect();
        let down: Vec<u64> = p
            .iter()
            .filter(|m| m.to == Tier::Hdd)
            .map(|m| m.extent)
            .collect();
        assert!(p
            .iter()
            .filter(|m| m.to == Tier::Ssd)
            .all(|m| m.reason == Reason::Near));
        assert_eq!(down, vec![200, 201], "{p:?}");
        assert_eq!(up.len(), 2);
        // Touched extents come before untouched ones.
        assert!(up.iter().all(|e| [64, 70, 80, 90].contains(e)), "{up:?}");
        assert!(!up.contains(&320) && !down.contains(&256));
        // Free space above the reserve: every extent of the busy zone, and
        // nothing of the quiet one.
        let p = plan(&cfg, &input(v.clone(), 10, 0));
        let mut up: Vec<u64> = p.iter().map(|m| m.extent).collect();
        up.sort();
        assert_eq!(up, vec![64, 70, 80, 90, 100, 101]);
        // Four neighbouring touched extents (a sequential stream's start)
        // are one run: not a busy zone.
        let run: Vec<Candidate> = (0..6u64)
            .map(|e| {
                touched(
                    128 + e,
                    Tier::Hdd,
                    if e < 4 { 1.0 } else { 0.0 },
                    u32::from(e < 4),
                )
            })
            .collect();
        assert!(plan(&cfg, &input(run, 10, 0)).is_empty());
        // Prefetch off.
        let off = PolicyConfig {
            zone_extents: 0,
            ..cfg
        };
        assert!(plan(&off, &input(v, 10, 0)).is_empty());
    }

    #[test]
    fn promotions_borrow_the_reserve_unless_writes_need_it() {
        let cfg = PolicyConfig::default();
        let v = vec![
            c(1, Tier::Ssd, 0.0),
            c(2, Tier::Ssd, 0.0),
            c(3, Tier::Hdd, 10.0),
            c(4, Tier::Hdd, 9.0),
        ];
        // Free == reserve == 2, nothing protected: both promotions first
        // (into lent slots), then their victims refill the reserve.
        let p = plan(&cfg, &input(v.clone(), 2, 2));
        let kinds: Vec<(u64, Tier, Reason)> =
            p.iter().map(|m| (m.extent, m.to, m.reason)).collect();
        assert_eq!(
            kinds,
            vec![
                (3, Tier::Ssd, Reason::Hot),
                (4, Tier::Ssd, Reason::Hot),
                (1, Tier::Hdd, Reason::Cold),
                (2, Tier::Hdd, Reason::Cold),
            ]
        );
        // Recent writes need the whole reserve: nothing is lent, so each
        // swap's demotion goes first.
        let mut inp = input(v.clone(), 2, 2);
        inp.protect = 2;
        let p = plan(&cfg, &inp);
        assert_eq!(p[0].to, Tier::Hdd, "{p:?}");
        // promote-borrow = 0: the same.
        let no = PolicyConfig {
            promote_borrow: 0.0,
            ..cfg
        };
        let p = plan(&no, &input(v.clone(), 2, 2));
        assert_eq!(p[0].to, Tier::Hdd, "{p:?}");
        // A budget that the promotions fill: the refill waits for a later
        // round (the reserve stays lent meanwhile).
        let tight = PolicyConfig {
            max_moves: 2,
            ..cfg
        };
        let p = plan(&tight, &input(v, 2, 2));
        assert!(p.iter().all(|m| m.to == Tier::Ssd), "{p:?}");
    }

    #[test]
    fn a_coverage_window_ending_does_not_trigger_swaps() {
        let cfg = PolicyConfig::default();
        // The SSD extent's blocks were last touched two windows ago: its
        // coverage (and so its effective heat) just dropped to zero, while
        // its score is as high as the HDD extent's.
        let mut ssd = c(1, Tier::Ssd, 6.0);
        ssd.coverage = 0;
        let hdd = c(2, Tier::Hdd, 6.0);
        assert!(plan(&cfg, &input(vec![ssd, hdd], 0, 0)).is_empty());
        // A clearly hotter HDD extent still wins.
        let hotter = c(2, Tier::Hdd, 12.0);
        assert_eq!(plan(&cfg, &input(vec![ssd, hotter], 0, 0)).len(), 2);
    }

    fn idle(mut c: Candidate) -> Candidate {
        c.active = false;
        c
    }

    #[test]
    fn data_in_use_displaces_idle_data_whatever_the_scores() {
        let cfg = PolicyConfig::default();
        // The old set: on the SSD with a high score from when it was read
        // at SSD speed, idle now. The new set: on the HDD, in use, with the
        // few hits it earns at HDD speed.
        let old = idle(c(1, Tier::Ssd, 500.0));
        let new = c(2, Tier::Hdd, 3.0);
        let p = plan(&cfg, &input(vec![old, new], 0, 0));
        assert_eq!(
            p,
            vec![
                Move {
                    extent: 1,
                    to: Tier::Hdd,
                    reason: Reason::Idle,
                    speculative: false
                },
                Move {
                    extent: 2,
                    to: Tier::Ssd,
                    reason: Reason::Hot,
                    speculative: false
                },
            ]
        );
        // Once swapped, the old set cannot come back by its score while
        // the new one is in use: no ping-pong.
        let back = plan(
            &cfg,
            &input(
                vec![idle(c(1, Tier::Hdd, 500.0)), c(2, Tier::Ssd, 3.0)],
                0,
                0,
            ),
        );
        assert!(back.is_empty(), "{back:?}");
        // Both in use: the score and the margin decide, as before.
        let both = plan(
            &cfg,
            &input(vec![c(1, Tier::Ssd, 500.0), c(2, Tier::Hdd, 3.0)], 0, 0),
        );
        assert!(both.is_empty(), "{both:?}");
        // Idle victims with a clean HDD copy go first (they leave for
        // free), even when colder unclean ones exist.
        let mut clean = idle(c(3, Tier::Ssd, 50.0));
        clean.clean = true;
        let p = plan(
            &cfg,
            &input(vec![idle(c(1, Tier::Ssd, 5.0)), clean, new], 0, 0),
        );
        assert_eq!(p[0].extent, 3, "{p:?}");
    }

    #[test]
    fn clean_copies_cover_the_reserve() {
        let cfg = PolicyConfig::default();
        let clean = |e, active| Candidate {
            clean: true,
            active,
            ..c(e, Tier::Ssd, 1.0)
        };
        // Reserve 2, nothing free; two SSD extents with clean copies, one
        // idle: covered, nothing moves (an idle one demoted now would come
        // back by a copy if read again).
        let p = plan(
            &cfg,
            &input(
                vec![clean(1, false), clean(2, true), c(3, Tier::Ssd, 0.5)],
                0,
                2,
            ),
        );
        assert!(p.is_empty(), "{p:?}");
        // One clean extent covers one slot; the other is copied out, from
        // the extents without a clean copy.
        let p = plan(
            &cfg,
            &input(
                vec![clean(1, false), c(2, Tier::Ssd, 3.0), c(3, Tier::Ssd, 0.5)],
                0,
                2,
            ),
        );
        assert_eq!(
            p,
            vec![Move {
                extent: 3,
                to: Tier::Hdd,
                reason: Reason::Reserve,
                speculative: true
            }]
        );
        // Without clean copies the coldest are copied out, as before.
        let p = plan(
            &cfg,
            &input(vec![c(1, Tier::Ssd, 2.0), c(3, Tier::Ssd, 0.5)], 0, 1),
        );
        assert_eq!(p[0].extent, 3);
    }

    #[test]
    fn a_zone_mostly_in_use_stays_busy_for_its_last_extents() {
        // Zones of 8 extents, busy at 3 runs. Zone 0: extents 0..7 in use
        // (on the SSD, one run) and extent 7 on the HDD, untouched: the
        // zone is busy by its share of extents in use (at least three
        // quarters), so 7 comes up.
        let cfg = PolicyConfig {
            zone_extents: 8,
            zone_min_active: 3,
            ..PolicyConfig::default()
        };
        let mut v: Vec<Candidate> = (0..7).map(|e| touched(e, Tier::Ssd, 3.0, 1)).collect();
        v.push(touched(7, Tier::Hdd, 0.0, 0));
        let p = plan(&cfg, &input(v.clone(), 10, 0));
        assert_eq!(
            p,
            vec![Move {
                extent: 7,
                to: Tier::Ssd,
                reason: Reason::Near,
                speculative: false
            }]
        );
        // Five in use of eight (under three quarters, one run): not busy.
        let mut few: Vec<Candidate> = (0..5).map(|e| touched(e, Tier::Ssd, 1.0, 1)).collect();
        few.push(touched(7, Tier::Hdd, 0.0, 0));
        assert!(plan(&cfg, &input(few, 10, 0)).is_empty());
    }

    #[test]
    fn a_burst_within_one_second_earns_no_promotion() {
        // Scores past the promotion mark, free room: the extent that came
        // back moves up, the one touched by a burst of requests in one
        // visit does not.
        let cfg = PolicyConfig::default();
        let burst = Candidate {
            recurrence: 1.0,
            ..c(1, Tier::Hdd, 6.0)
        };
        let back = Candidate {
            recurrence: 2.0,
            ..c(2, Tier::Hdd, 3.0)
        };
        let p = plan(&cfg, &input(vec![burst, back], 10, 0));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!((p[0].extent, p[0].reason), (2, Reason::Hot));
    }

    #[test]
    fn a_scatter_of_single_touches_is_no_working_set() {
        // Zone 1: six extents touched in one or two visits each (uniform
        // random reads over a large region), two untouched, free room:
        // nothing is prefetched. The same zone whose extents keep coming
        // back is a working set.
        let cfg = PolicyConfig::default();
        let zone = |recurrence: f32| -> Vec<Candidate> {
            let mut v: Vec<Candidate> = [64, 66, 70, 80, 90, 100]
                .into_iter()
                .map(|e| Candidate {
                    recurrence,
                    ..touched(e, Tier::Hdd, 1.5, 1)
                })
                .collect();
            v.push(touched(101, Tier::Hdd, 0.0, 0));
            v.push(touched(102, Tier::Hdd, 0.0, 0));
            v
        };
        assert!(plan(&cfg, &input(zone(1.0), 100, 0)).is_empty());
        assert!(plan(&cfg, &input(zone(2.0), 100, 0)).is_empty());
        let p = plan(&cfg, &input(zone(3.0), 100, 0));
        assert_eq!(p.len(), 8, "{p:?}");
        assert!(p.iter().all(|m| m.reason == Reason::Near && !m.speculative));
    }

    #[test]
    fn a_busy_zone_grows_into_active_neighbours_only() {
        // Zones of 4 extents, busy at 2 separate runs. Zone 1 (4..8) is
        // busy (runs at 4 and 6); zone 2 (8..12) has one touched extent, so
        // it joins; zone 3 (12..16) has none and stops the growth, so zone
        // 4 (16..20), touched once, stays out.
        let cfg = PolicyConfig {
            zone_extents: 4,
            zone_min_active: 2,
            ..PolicyConfig::default()
        };
        let v = vec![
            touched(4, Tier::Hdd, 3.0, 1),
            touched(5, Tier::Hdd, 0.0, 0),
            touched(6, Tier::Hdd, 3.0, 1),
            touched(9, Tier::Hdd, 3.0, 1),
            touched(10, Tier::Hdd, 0.0, 0),
            touched(13, Tier::Hdd, 0.0, 0),
            touched(17, Tier::Hdd, 1.0, 1),
            touched(18, Tier::Hdd, 0.0, 0),
        ];
        let p = plan(&cfg, &input(v, 20, 0));
        let mut up: Vec<u64> = p.iter().map(|m| m.extent).collect();
        up.sort();
        assert_eq!(up, vec![4, 5, 6, 9, 10], "{p:?}");
    }
}
