//! Admission at the miss: which HDD extents a read miss brings up to the
//! SSD, and which SSD extents make room for them.
//!
//! A read that misses flash has already paid the HDD's seek; reading the
//! rest of its extent right after costs transfer time only, where a later
//! background promotion pays the seek again. So a missed extent is noted
//! here ([`Volume::note_miss`]) and, once the request is answered, the
//! migrate layer copies it up with the ordinary crash-safe protocol
//! (`migrate::admit_pending`), keeping the HDD slot as a clean shadow. The
//! new mapping state is the one a promotion with a shadow already makes.
//!
//! The order is S3-FIFO (Yang et al., SOSP 2023), counted in requests, never
//! in wall time, so a trace played faster or slower places the same data:
//! - a first-time extent enters a small FIFO (a tenth of the SSD's room);
//!   one read again while there moves on to the main FIFO, one never read
//!   again leaves first and is remembered in a ghost FIFO (ids only, as
//!   many as the room holds), so data touched once stays on flash only
//!   briefly;
//! - a missed extent the ghost remembers goes straight to the main FIFO:
//!   its reuse was seen beyond what fits;
//! - the main FIFO is a CLOCK with a 2-bit count of reads: an extent read
//!   since the hand last passed goes round again.
//!
//! A miss inside a sequential stream past the cutoff (a scan) copies
//! nothing on its own: the ghost remembers the extent, and only a miss the
//! ghost already remembers is admitted. A scan read once costs flash
//! nothing; an area scanned again and again (a table a database reads in
//! order every few seconds) comes up on its second pass. The stream
//! detector cannot tell a one-off scan from a repeated one; reuse can.
//!
//! Making room evicts the extent S3-FIFO chooses: by a mapping change when
//! its HDD shadow is clean (every admitted extent has one until written),
//! else with a demotion's copy, as any cache writes back a dirty victim.
//! Room above the reserve is used first; the reserve stays a promise for
//! writes.
//!
//! SSD extents placed by other paths (new writes, background promotions,
//! and every SSD extent when admission is turned on) join the small FIFO, so one order covers
//! the whole SSD. Entries whose extent left the SSD by another path are
//! dropped when the hand reaches them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use parking_lot::{Condvar, Mutex};

use super::geometry::Tier;
use super::stats::Stats;
use super::{Volume, VolumeResult};

/// Reads counted per extent, at most (S3-FIFO's 2-bit counter).
const FREQ_MAX: u8 = 3;
/// State bits per extent beside the count.
const IN_SMALL: u8 = 1 << 2;
const IN_MAIN: u8 = 1 << 3;
const PENDING: u8 = 1 << 4;
/// On the SSD by an admission: its reads are the admissions' savings in
/// the ledger.
const ADMITTED: u8 = 1 << 5;
/// An admitted extent was read from flash since its admission.
const REREAD: u8 = 1 << 6;
const FREQ_MASK: u8 = 0b11;
/// Missed extents waiting for their copy, at most (each is one extent's
/// read and write when its turn comes; more would only queue behind them).
const PENDING_MAX: usize = 64;
/// Queue entries a search for a clean victim looks at, at most.
const VICTIM_SCAN: usize = 256;

/// The order and the candidates; one per volume.
pub(crate) struct Admission {
    /// Per extent: read count (bits 0-1), queue membership, pending. Made
    /// the first time admission is turned on: a volume that never admits
    /// does not pay a byte per extent for it.
    state: std::sync::OnceLock<Box<[AtomicU8]>>,
    extents: u64,
    q: Mutex<Queues>,
    pending: Mutex<VecDeque<u64>>,
    /// Signalled when a candidate is queued.
    ready: Condvar,
    enabled: AtomicBool,
}

#[derive(Default)]
struct Queues {
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    /// The ghost FIFO: ids with the sequence number they were remembered
    /// under; an entry whose number is no longer the id's in `ghost_seq`
    /// was forgotten (a ghost hit) and is skipped, so forgetting is O(1).
    ghost: VecDeque<(u64, u64)>,
    /// Ids the ghost remembers, and their current sequence number.
    ghost_seq: HashMap<u64, u64>,
    next_seq: u64,
}

/// What [`Volume::admission_evict`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The victim left by a mapping change; its slot is free after the
    /// next flush.
    Freed,
    /// The victim has no clean HDD copy: the caller demotes it with one.
    Dirty(u64),
    /// No extent could leave.
    Nothing,
}

/// How a request missed flash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Not part of a long sequential stream.
    Random,
    /// Part of a sequential stream past the cutoff (a scan).
    Sequential,
}

/// Where an admitted extent goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Seen for the first time (as far as the ghost knows).
    Small,
    /// Its reuse was seen beyond what fits.
    Main,
}

impl Admission {
    pub(crate) fn new(extents: u64) -> Self {
        Admission {
            state: std::sync::OnceLock::new(),
            extents,
            q: Mutex::new(Queues::default()),
            pending: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            enabled: AtomicBool::new(false),
        }
    }

    fn get(&self, extent: u64) -> Option<&AtomicU8> {
        self.state.get()?.get(extent as usize)
    }

    /// Change `extent`'s state bits with `f` (a compare-and-swap loop: the
    /// pending bit and the count change without the queue lock).
    fn update(&self, extent: u64, f: impl Fn(u8) -> u8) {
        if let Some(s) = self.get(extent) {
            let _ = s.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(f(v)));
        }
    }

    /// A read served from the SSD: one more read for the clock; whether
    /// the extent came up by an admission.
    /// `None` unless an admission brought it up; else whether this is its
    /// first read since.
    pub(crate) fn hit(&self, extent: u64) -> Option<bool> {
        let s = self.get(extent)?;
        let v = s
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                let v = if v & FREQ_MASK < FREQ_MAX { v + 1 } else { v };
                Some(if v & ADMITTED != 0 { v | REREAD } else { v })
            })
            .unwrap_or(0);
        (v & ADMITTED != 0).then_some(v & REREAD == 0)
    }

    /// `extent` arrived on the SSD: into the small FIFO unless queued.
    pub(crate) fn arrived(&self, extent: u64, class: Class) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let Some(s) = self.get(extent) else { return };
        let mut q = self.q.lock();
        let v = s.load(Ordering::Relaxed);
        if v & (IN_SMALL | IN_MAIN) != 0 {
            return;
        }
        let bit = match class {
            Class::Small => {
                q.small.push_back(extent);
                IN_SMALL
            }
            Class::Main => {
                q.main.push_back(extent);
                IN_MAIN
            }
        };
        self.update(extent, |v| (v & PENDING) | bit);
    }

    fn remember(q: &mut Queues, extent: u64, cap: usize) {
        if !q.ghost_seq.contains_key(&extent) {
            let seq = q.next_seq;
            q.next_seq += 1;
            q.ghost_seq.insert(extent, seq);
            q.ghost.push_back((extent, seq));
        }
        while q.ghost_seq.len() > cap.max(1) {
            let Some((g, seq)) = q.ghost.pop_front() else {
                break;
            };
            if q.ghost_seq.get(&g) == Some(&seq) {
                q.ghost_seq.remove(&g);
            }
        }
        if q.ghost.len() > 2 * cap.max(1) {
            // Forgotten entries past the live ones: drop them all at once
            // (amortised over as many ghost hits as the ghost holds).
            let Queues {
                ghost, ghost_seq, ..
            } = q;
            ghost.retain(|(g, seq)| ghost_seq.get(g) == Some(seq));
        }
    }
}

impl Volume {
    /// Whether read misses bring their extent to the SSD.
    pub fn admission_enabled(&self) -> bool {
        self.admission.enabled.load(Ordering::Relaxed)
    }

    /// Turn admission at the miss on or off (live). Turned on, it queues
    /// what the SSD holds now.
    pub fn set_admission(&self, on: bool) {
        let a = &self.admission;
        if on {
            a.state
                .get_or_init(|| (0..a.extents).map(|_| AtomicU8::new(0)).collect());
        }
        let was = a.enabled.swap(on, Ordering::Relaxed);
        if on && !was {
            self.seed_admission();
        }
    }

    /// SSD extents the admission order may fill: the SSD less the reserve.
    fn admission_room(&self) -> usize {
        self.geo
            .ssd_slots
            .saturating_sub(self.reserve_target())
            .max(1) as usize
    }

    /// Queue every SSD extent, in extent order (when admission is turned
    /// on, and when every queued entry was dropped).
    fn seed_admission(&self) {
        for e in self.map.ssd_extents() {
            self.admission.arrived(e, Class::Small);
        }
    }

    /// How the I/O paths note a miss of a request with `hint`: `None` while
    /// admission is off, else whether the request is part of a sequential
    /// stream past the cutoff. One relaxed load while admission is off
    /// (hits are noted whenever it is on).
    pub(crate) fn admission_notes(&self, hint: crate::units::IoHint) -> Option<Miss> {
        if !self.admission_enabled() {
            return None;
        }
        Some(if hint.seq_run > self.heat.sequential_cutoff() {
            Miss::Sequential
        } else {
            Miss::Random
        })
    }

    /// A read of `extent` was served from the SSD: if an admission brought
    /// it up, one HDD request saved for the admissions' account.
    pub(crate) fn note_hit(&self, extent: u64) {
        if let Some(first) = self.admission.hit(extent) {
            self.ledger.admitted_hit(first);
        }
    }

    /// A request to `extent` missed flash (its data is on the HDD): note it
    /// as a candidate, unless the extent is pinned to the HDD, a tier is
    /// drained, or enough are waiting. A [`Miss::Sequential`] one becomes a
    /// candidate only if the ghost remembers the extent; else the ghost
    /// remembers it now and nothing is copied, so a scan read once costs
    /// flash nothing and one read again comes up on its next pass. Callers
    /// ask [`Volume::admission_notes`] first.
    pub(crate) fn note_miss(&self, extent: u64, kind: Miss) {
        if self.evacuating().is_some() {
            return;
        }
        if self.pin_of(extent) == Some(Tier::Hdd) {
            return;
        }
        let Some(s) = self.admission.get(extent) else {
            return;
        };
        if s.load(Ordering::Relaxed) & PENDING != 0 {
            return;
        }
        // While admitting at once does not pay for its copies (the
        // ledger), a miss is admitted only on shown reuse, as a scan's is.
        // Admission is a cache's rule: while the HDD keeps an admitted
        // extent's copy, so that it leaves again by a mapping change. On a
        // full HDD every admission would swap with a victim written down:
        // there the migrator's heat decides alone.
        if !self.admission_keeps_copies() {
            return;
        }
        let first = kind == Miss::Random && self.ledger.admit_at_first_miss();
        if !first {
            let mut q = self.admission.q.lock();
            let seen = q.ghost_seq.contains_key(&extent);
            if kind == Miss::Random {
                if seen {
                    self.ledger.ghost_hit();
                } else {
                    self.ledger.ghost_remembered();
                }
            }
            if !seen {
                Admission::remember(&mut q, extent, self.admission_room());
                Stats::add(&self.stats.admissions_scanned, 1);
                return;
            }
        }
        let mut p = self.admission.pending.lock();
        if p.len() >= PENDING_MAX {
            Stats::add(&self.stats.admissions_dropped, 1);
            return;
        }
        s.fetch_or(PENDING, Ordering::Relaxed);
        p.push_back(extent);
        drop(p);
        self.admission.ready.notify_one();
    }

    /// Take the extents waiting for admission, oldest first.
    pub fn take_admissions(&self) -> Vec<u64> {
        let mut p = self.admission.pending.lock();
        let out: Vec<u64> = p.drain(..).collect();
        drop(p);
        for e in &out {
            if let Some(s) = self.admission.get(*e) {
                s.fetch_and(!PENDING, Ordering::Relaxed);
            }
        }
        out
    }

    /// Wait until a candidate is waiting or `timeout` passes (on the real
    /// clock: for a thread that admits as misses happen).
    pub fn wait_admissions(&self, timeout: std::time::Duration) -> bool {
        let mut p = self.admission.pending.lock();
        if p.is_empty() {
            self.admission.ready.wait_for(&mut p, timeout);
        }
        !p.is_empty()
    }

    /// Candidates waiting now.
    pub fn admissions_waiting(&self) -> usize {
        self.admission.pending.lock().len()
    }

    /// Where an admission of `extent` belongs: the main FIFO if the ghost
    /// remembers it (and forgets it now), else the small one.
    pub fn admission_class(&self, extent: u64) -> Class {
        let mut q = self.admission.q.lock();
        if q.ghost_seq.remove(&extent).is_some() {
            Class::Main
        } else {
            Class::Small
        }
    }

    /// An eviction of `extent` did not happen (a write raced it, or the HDD
    /// had no room for its copy): it goes round again.
    pub fn admission_requeue(&self, extent: u64) {
        if self
            .mapping(extent)
            .is_some_and(|m| m.loc.tier == Tier::Ssd)
        {
            self.admission.arrived(extent, Class::Main);
        }
    }

    /// An admission of `extent` committed: queue it as `class` says; its
    /// reads from now on count for the admissions in the ledger.
    pub fn admitted(&self, extent: u64, class: Class) {
        self.admission.arrived(extent, class);
        self.admission.update(extent, |v| (v | ADMITTED) & !REREAD);
        Stats::add(&self.stats.admissions, 1);
    }

    /// Whether admitted extents keep their HDD slot as a clean copy: the
    /// volume's data fits the HDD with room to spare (its mapped extents
    /// and twice the reserve within the HDD's slots: a fill below about
    /// HDD / (SSD + HDD)), and the HDD has that room free now. Then every
    /// SSD extent can have a copy, an admitted extent leaves again by a
    /// mapping change, the SSD serves like a cache, and admissions may
    /// fill the reserve too: clean extents cover it, the write path takes
    /// them back the moment writes need the room. Judged by the data the
    /// volume holds, not by the free slots alone, which swaps in flight on
    /// a full volume open and close.
    pub fn admission_keeps_copies(&self) -> bool {
        let spare = 2 * u64::from(self.reserve_target().max(1));
        let mapped: u64 = self.map.counts().mapped.iter().sum();
        self.shadows_enabled()
            && mapped + spare <= u64::from(self.geo.hdd_slots)
            && u64::from(self.alloc.free_count(Tier::Hdd)) > spare
    }

    /// Whether the SSD has a free slot for an admission (flushing first when
    /// evictions freed slots that wait for one): above the reserve, or
    /// anywhere while admitted extents keep clean copies.
    pub fn admission_has_room(&self) -> VolumeResult<bool> {
        let floor = if self.admission_keeps_copies() {
            0
        } else {
            self.reserve_target()
        };
        if self.alloc.free_count(Tier::Ssd) > floor {
            return Ok(true);
        }
        if self.alloc.quarantined() > 0 {
            self.flush()?;
        }
        Ok(self.alloc.free_count(Tier::Ssd) > floor)
    }

    /// Evict one extent for an admission, in S3-FIFO order: by a mapping
    /// change if its HDD copy is clean, else it is handed back for the
    /// caller to demote with a copy.
    pub fn admission_evict(&self) -> VolumeResult<Eviction> {
        let Some((victim, clean)) = self.admission_victim() else {
            Stats::add(&self.stats.admissions_no_room, 1);
            return Ok(Eviction::Nothing);
        };
        if clean && self.demote_clean(victim, crate::units::Reason::Cold)? {
            return Ok(Eviction::Freed);
        }
        Ok(Eviction::Dirty(victim))
    }

    /// The next SSD extent S3-FIFO evicts, taken out of its queue, and
    /// whether its HDD copy is clean. Extents no longer on the SSD are
    /// dropped; extents read since the hand passed, and ones pinned to the
    /// SSD, go round again.
    fn admission_victim(&self) -> Option<(u64, bool)> {
        let room = self.admission_room();
        let small_cap = (room / 10).max(1);
        let blocks = self.geo.blocks_per_extent();
        let empty = {
            let q = self.admission.q.lock();
            q.small.is_empty() && q.main.is_empty()
        };
        if empty {
            // Every entry was dropped (the extents left by other paths, or
            // could not leave): queue what the SSD holds now.
            self.seed_admission();
        }
        let mut q = self.admission.q.lock();
        for _ in 0..VICTIM_SCAN {
            let from_small = q.small.len() >= small_cap || q.main.is_empty();
            let e = if from_small {
                q.small.pop_front()
            } else {
                q.main.pop_front()
            };
            let e = e?;
            let Some(s) = self.admission.get(e) else {
                continue;
            };
            let v = s.load(Ordering::Relaxed);
            let (clean, on_ssd) = match self.slot_lock(e).try_read() {
                Some(g) => match g.as_ref() {
                    Some(m) if m.loc.tier == Tier::Ssd => (m.shadow_clean(blocks), true),
                    _ => (false, false),
                },
                // Busy right now: in use.
                None => (false, true),
            };
            let a = &self.admission;
            if !on_ssd {
                a.update(e, |v| v & PENDING);
                continue;
            }
            let freq = v & FREQ_MASK;
            let pinned = self.pin_of(e) == Some(Tier::Ssd);
            if from_small {
                if freq > 0 || pinned {
                    // Read again while on probation: on to the main FIFO
                    // (its reads still count for the admission that
                    // brought it up).
                    a.update(e, |v| (v & (PENDING | ADMITTED | REREAD)) | IN_MAIN);
                    q.main.push_back(e);
                    continue;
                }
                a.update(e, |v| v & PENDING);
                Admission::remember(&mut q, e, room);
                return Some((e, clean));
            }
            if freq > 0 || pinned {
                a.update(e, |v| {
                    (v & (PENDING | ADMITTED | REREAD))
                        | IN_MAIN
                        | (v & FREQ_MASK).saturating_sub(1)
                });
                q.main.push_back(e);
                continue;
            }
            a.update(e, |v| v & PENDING);
            return Some((e, clean));
        }
        None
    }
}
