//! Which zones are in use, for neighbourhood prefetch (rule 4 of
//! [`super::policy`]): a *zone* is `zone-extents` neighbouring extents, and
//! its activity is counted in separate runs of recently touched extents.
//!
//! Everything here follows from the candidates touched recently (coverage
//! in the windows, or in use): [`Zones::find`] gives the same answer for
//! every mapped extent as for only those, which is what lets the planner's
//! candidates follow the work (`super::candidates`): the untouched extents
//! of a busy zone are looked up once the zone is known to be busy.

use std::collections::{HashMap, HashSet};

use super::policy::{Candidate, PolicyConfig, KEEPS_COMING_BACK};
use crate::volume::Tier;

/// The zones in use, and how busy each is.
pub struct Zones {
    /// Extents per zone (at least 1).
    z: u64,
    /// Runs of extents that keep coming back, per zone touched within
    /// `idle-after`.
    active: HashMap<u64, u32>,
    /// Runs of any touched extents, per zone touched within `idle-after`:
    /// what keeps a zone's SSD extents from making way for a prefetch.
    any: HashMap<u64, u32>,
    /// Busy zones: their HDD extents may be prefetched.
    busy: HashSet<u64>,
    /// Zones three quarters of whose extents were touched, one within
    /// `idle-after`, at least half of the touched ones on the HDD: read
    /// nearly whole, and mostly not yet on the SSD; zones a quarter of
    /// whose extents are in use right now, mostly on the HDD (a sweep: a
    /// set read at the HDD's pace); and their neighbours in use with a
    /// quarter touched, mostly on the HDD. A zone found arriving
    /// stays so while any touched extent of it is on the HDD (see
    /// [`Zones::find`]'s `following`).
    arriving: HashSet<u64>,
}

impl Zones {
    /// The zones of `candidates` (only those with coverage or in use
    /// count), with `cfg`'s zone size (not 0) and threshold. `following`:
    /// the zones an earlier round found arriving; each stays arriving,
    /// though most of what was read in it is up by now, while it is still
    /// read nearly whole and in use, and any touched extent of it is still
    /// on the HDD. An arrival seen is followed through: the prefetch that
    /// brought half of a working set up in zone order brings the rest up
    /// the same way, where admission at the miss would bring each
    /// remaining extent up on its own, paced, a read and a seek apiece.
    pub fn find(cfg: &PolicyConfig, candidates: &[Candidate], following: &HashSet<u64>) -> Zones {
        let z = u64::from(cfg.zone_extents.max(1));
        // Activity of a zone: separate runs of recently touched extents. A
        // sequential stream's first few MiB (which earn heat before the
        // stream is recognised) are one run, so they never make a zone busy.
        //
        // Only extents that keep coming back count for runs
        // (KEEPS_COMING_BACK): extents touched in a visit or two each are a
        // scatter, as uniform random reads
        // over a large region make, not a working set, and prefetching
        // their neighbours would read the HDD beside its users for reads
        // that may never come.
        let mut touched: Vec<(u64, bool)> = candidates
            .iter()
            .filter(|c| c.coverage > 0)
            .map(|c| (c.extent, c.recurrence >= KEEPS_COMING_BACK))
            .collect();
        let mut on_hdd: HashMap<u64, u32> = HashMap::new();
        for c in candidates
            .iter()
            .filter(|c| c.coverage > 0 && c.tier == Tier::Hdd)
        {
            *on_hdd.entry(c.extent / z).or_default() += 1;
        }
        // Touched extents in use right now (within their idle time), per
        // zone: how much of it is being read at once.
        let mut live: HashMap<u64, u32> = HashMap::new();
        for c in candidates.iter().filter(|c| c.coverage > 0 && c.active) {
            *live.entry(c.extent / z).or_default() += 1;
        }
        touched.sort_unstable();
        let mut active: HashMap<u64, u32> = HashMap::new();
        let mut any: HashMap<u64, u32> = HashMap::new();
        let mut in_zone: HashMap<u64, u32> = HashMap::new();
        let (mut prev, mut prev_any) = (None, None);
        for (e, reused) in touched {
            let new_run = |p: Option<u64>| p.is_none_or(|p| p + 1 != e || p / z != e / z);
            if reused {
                if new_run(prev) {
                    *active.entry(e / z).or_default() += 1;
                }
                prev = Some(e);
            }
            if new_run(prev_any) {
                *any.entry(e / z).or_default() += 1;
            }
            prev_any = Some(e);
            *in_zone.entry(e / z).or_default() += 1;
        }
        // A zone three quarters of whose extents are in use is busy too,
        // though they form few runs: a working set that has mostly come up,
        // whose last extents on the HDD are the holes between them. (A
        // stream's start is the cutoff's worth of extents, four of 1 MiB by
        // default: a small share of a zone.)
        let mut arriving = HashSet::new();
        for (zone, n) in &in_zone {
            let hdd = on_hdd.get(zone).copied().unwrap_or(0);
            let mostly_hdd = hdd * 2 >= *n || (hdd > 0 && following.contains(zone));
            if u64::from(*n) * 4 >= z * 3 {
                let runs = active.entry(*zone).or_default();
                *runs = (*runs).max(cfg.zone_min_active.max(1));
                if mostly_hdd {
                    arriving.insert(*zone);
                }
            } else if u64::from(live.get(zone).copied().unwrap_or(0)) * 4 >= z && mostly_hdd {
                // A sweep: a quarter of the zone's extents in use at once
                // (each touched within its idle time, seconds at the HDD's
                // pace), most of what was read still on the HDD. Data read
                // that way is a set arriving; three quarters read whole
                // took 8 to 12 s at the HDD's pace for a 700 MiB set
                // (benchmarks/daemon-shift.sh), a quarter in use takes 2.
                // A scatter over a region larger than the SSD fills only
                // the room of idle zones (a prefetch never displaces data
                // in use), and without admission busy zones alone are
                // prefetched, as before.
                arriving.insert(*zone);
            }
        }
        // Runs are counted over the coverage windows (a minute or two: a
        // working set still read at HDD speed touches its tail zones only
        // now and then), but a zone none of whose extents was touched
        // within `idle-after` is idle: not busy, and its SSD extents may
        // make way. So the set that just left is neither prefetched nor
        // kept by its zones' older touches.
        let recent: HashSet<u64> = candidates
            .iter()
            .filter(|c| c.active)
            .map(|c| c.extent / z)
            .collect();
        active.retain(|zone, _| recent.contains(zone));
        any.retain(|zone, _| recent.contains(zone));
        arriving.retain(|zone| recent.contains(zone));
        // A set arriving over neighbouring zones is found from the first
        // zone outwards: a neighbour in use, a quarter of its extents
        // touched and at least half of those on the HDD, is arriving too.
        // Data that moved lies together far more often than not (a file, a
        // table, a VM image), and the first zone read nearly whole is what
        // shows a move; a neighbour read at the HDD's pace reaches three
        // quarters seconds later, while the prefetch could already read
        // it (zones of a 700 MiB set found 8 to 12 s after the move,
        // benchmarks/daemon-shift.sh). Not busy for that: without
        // admission the busy zones alone are prefetched.
        // Such a zone found earlier is followed through as a first zone is.
        let joins = |zone: &u64| {
            let n = in_zone.get(zone).copied().unwrap_or(0);
            let hdd = on_hdd.get(zone).copied().unwrap_or(0);
            recent.contains(zone)
                && u64::from(n) * 4 >= z
                && (hdd * 2 >= n || (hdd > 0 && following.contains(zone)))
        };
        for zone in following {
            if joins(zone) {
                arriving.insert(*zone);
            }
        }
        let mut grow: Vec<u64> = arriving.iter().copied().collect();
        while let Some(zone) = grow.pop() {
            for nb in [zone.wrapping_sub(1), zone.wrapping_add(1)] {
                if joins(&nb) && arriving.insert(nb) {
                    grow.push(nb);
                }
            }
        }
        // Busy zones, grown into neighbouring zones with any reuse at all: a
        // working set spread over many zones (each touched only a few times
        // while the workload still runs at HDD speed) is found from its
        // busiest zones outwards, as long as it is contiguous.
        let mut busy: HashSet<u64> = active
            .iter()
            .filter(|(_, n)| **n >= cfg.zone_min_active.max(1))
            .map(|(zone, _)| *zone)
            .collect();
        let mut grow: Vec<u64> = busy.iter().copied().collect();
        while let Some(zone) = grow.pop() {
            for nb in [zone.wrapping_sub(1), zone + 1] {
                if active.contains_key(&nb) && busy.insert(nb) {
                    grow.push(nb);
                }
            }
        }
        Zones {
            z,
            active,
            any,
            busy,
            arriving,
        }
    }

    /// How much an extent's zone is in use (0: idle, its SSD extents may
    /// make way for a prefetch).
    pub fn in_use(&self, extent: u64) -> u32 {
        let zone = extent / self.z;
        self.active.get(&zone).copied().unwrap_or(0) + self.any.get(&zone).copied().unwrap_or(0)
    }

    /// Whether an extent's zone is busy: its HDD extents may be prefetched.
    pub fn is_busy(&self, extent: u64) -> bool {
        self.busy.contains(&(extent / self.z))
    }

    /// Whether a working set is arriving in an extent's zone: three
    /// quarters of its extents touched within the coverage windows (one
    /// within `idle-after`), and at least half of those still on the HDD
    /// (such a zone is busy too).
    pub fn is_arriving(&self, extent: u64) -> bool {
        self.arriving.contains(&(extent / self.z))
    }

    /// The zones a working set is arriving in (for the next round's
    /// `following`).
    pub fn arriving(&self) -> &HashSet<u64> {
        &self.arriving
    }

    /// The extents of the busy zones and of those a set is arriving in,
    /// zone by zone in order, up to `end` (the volume's extents).
    pub fn busy_extents(&self, end: u64) -> impl Iterator<Item = u64> + '_ {
        let mut zones: Vec<u64> = self.busy.union(&self.arriving).copied().collect();
        zones.sort_unstable();
        let z = self.z;
        zones.into_iter().flat_map(move |zone| {
            zone.saturating_mul(z)..zone.saturating_add(1).saturating_mul(z).min(end)
        })
    }
}
