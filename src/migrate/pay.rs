//! Which of a batch of placement moves (promotions, prefetch, and the
//! swaps' demotions that make room for them) go now, against the HDD time
//! the volume's placement budget holds (`volume::budget`).
//!
//! - With the HDD free of users, one run goes: neighbouring extents, which
//!   are copied with one read and one write (or demotions, written
//!   together). Users coming back find the HDD busy with about one copy.
//! - With users on the HDD, the runs the budget pays for go, counting each
//!   run at the measured cost of one move. A promotion whose heat says it
//!   pays back goes whatever the budget holds: at its extent's present
//!   rate it is read about `score` more times over the decay's mean life
//!   (1.44 half-lives; a steady rate's score is the rate times that), each
//!   read saving one HDD request, and that must cover its copy and a
//!   victim's (two moves). Its time is spent all the same, so the moves
//!   that do not show it wait while the SSD's savings repay it.

use crate::heat::HeatMap;
use crate::units::Reason;
use crate::volume::{Tier, Volume};

use super::policy::Move;

/// What the budget allows a batch while users are on the HDD.
#[derive(Debug, Clone, Copy)]
pub(super) struct Allowance {
    /// Runs of moves that need no proof of payback.
    pub runs: usize,
    /// The HDD's mean service time (s): what one read the SSD serves saves.
    pub service: f64,
    /// The measured cost of one move (s).
    pub per: f64,
}

impl Allowance {
    /// `secs` of budget (none if not positive) at `per` seconds a move, the
    /// HDD's mean service time `service`.
    pub(super) fn new(secs: f64, per: f64, service: f64) -> Self {
        let runs = if secs > 0.0 {
            ((secs / per.max(1e-6)).ceil() as usize).max(1)
        } else {
            0
        };
        Allowance { runs, service, per }
    }
}

/// Where a move's run continues: a promotion's run is its HDD slots,
/// neighbours read at once; a demotion reads the SSD and writes the HDD
/// slots the allocator hands out, those given back together first, so a
/// batch of them is written as one run.
fn run_key(vol: &Volume, m: &Move) -> Option<(u32, u32)> {
    match m.to {
        Tier::Ssd => vol.loc_of(m.extent).map(|l| (l.slot, l.slot + 1)),
        Tier::Hdd => Some((u32::MAX, u32::MAX)),
    }
}

/// How many of `batch`'s first moves form one run (at least one): what
/// goes while the HDD is free of users.
pub(super) fn first_run(vol: &Volume, batch: &[Move]) -> usize {
    let mut after = None;
    let mut n = 0;
    for m in batch {
        let key = run_key(vol, m);
        if n > 0 && (key.is_none() || key.map(|k| k.0) != after) {
            break;
        }
        after = key.map(|k| k.1);
        n += 1;
    }
    n.max(1)
}

/// The moves of `batch` that go now while users are on the HDD, in order.
pub(super) fn select(
    vol: &Volume,
    heat: &HeatMap,
    batch: &[Move],
    allow: Allowance,
) -> Vec<(u64, Reason)> {
    let mut runs = allow.runs;
    let (mut after, mut open): (Option<u32>, bool) = (None, false);
    batch
        .iter()
        .filter(|m| {
            let pays = m.to == Tier::Ssd
                && f64::from(heat.score(m.extent)) * allow.service >= 2.0 * allow.per;
            if pays {
                return true;
            }
            let key = run_key(vol, m);
            if key.is_none() || key.map(|k| k.0) != after {
                open = runs > 0;
                runs = runs.saturating_sub(1);
            }
            after = key.map(|k| k.1);
            open
        })
        .map(|m| (m.extent, m.reason))
        .collect()
}
