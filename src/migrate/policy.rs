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
//! planner makes no hot promotions and prefetches only zones where a
//! working set is arriving (three quarters of their extents touched
//! recently, at least half of those still on the HDD: a set that moved
//! there, which paced misses would bring up one seek at a time).
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
    /// Zones an earlier round found a working set arriving in (rule 4
    /// follows each through; [`Zones::find`]).
    pub following: HashSet<u64>,
}

/// Effective heat: score weighted by how densely the extent is used.
pub fn effective(cfg: &PolicyConfig, c: &Candidate, blocks_per_extent: u32) -> f32 {
    let dense = cfg.dense_blocks.clamp(1, blocks_per_extent.max(1));
    c.score * (c.coverage as f32 / dense as f32).min(1.0)
}

/// Plan the moves of one round (see the module docs for the rules and the
/// order).
pub fn plan(cfg: &PolicyConfig, input: &PlanInput) -> Vec<Move> {
    plan_round(cfg, input).0
}

/// [`plan`], and the zones a working set is arriving in (the next round's
/// [`PlanInput::following`]): those rule 4 found, or, in a round that had
/// no room to look, the ones it was following still.
pub fn plan_round(cfg: &PolicyConfig, input: &PlanInput) -> (Vec<Move>, HashSet<u64>) {
    let mut arrivals = if cfg.zone_extents > 0 {
        input.following.clone()
    } else {
        HashSet::new()
    };
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
    // With admission at the miss, a miss brings its own extent up, and a
    // busy zone's neighbours are worth a copy only where a working set is
    // arriving: the zone read nearly whole, most of what was read still on
    // the HDD. Paced misses would bring it up one at a time, each paying a
    // seek, where a prefetch reads the zone in order; a zone whose set is
    // mostly up keeps to admission (its holes are read less than misses).
    if cfg.zone_extents > 0 && room(&promote, &demote) > 0 {
        let zones = Zones::find(cfg, &input.candidates, &input.following);
        arrivals = zones.arriving().clone();
        let wanted = |e: u64| {
            if input.admission {
                zones.is_arriving(e)
            } else {
                zones.is_busy(e)
            }
        };
        let in_use = |c: &Candidate| zones.in_use(c.extent);
        let chosen: HashSet<u64> = promote.iter().map(|(c, _)| c.extent).collect();
        let mut near: Vec<&Candidate> = input
            .candidates
            .iter()
            .filter(|c| {
                c.tier == Tier::Hdd
                    && c.pin.is_none()
                    && wanted(c.extent)
                    && !chosen.contains(&c.extent)
            })
            .collect();
        // Extents in use themselves first (not enough for a promotion of
        // their own yet, but the likeliest to be read again), then the
        // busiest zones, in order within a zone. With admission, a zone
        // arriving comes up whole, in order: its extents in use are
        // admitted at their misses anyway, and taken first they left the
        // HDD reads scattered, two extents or so apiece, each waiting
        // behind the users' queued reads (benchmarks/daemon-shift.sh),
        // where the zone in order goes up to `MERGE_MAX` (`crate::volume::moves`) per read.
        let first = |c: &Candidate| {
            if input.admission {
                (false, false)
            } else {
                (c.active, c.coverage > 0)
            }
        };
        near.sort_by(|a, b| {
            first(b)
                .cmp(&first(a))
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
    // (With admission, prefetches in slot order alone, see above.)
    promote.sort_by_key(|(c, r)| {
        (
            *r != Reason::Hot,
            !c.active && !input.admission,
            c.slot,
            c.extent,
        )
    });
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
    (moves, arrivals)
}

#[cfg(test)]
mod tests;
