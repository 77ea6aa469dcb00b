//! Admission at the miss, the copying side: takes the extents reads missed
//! on the HDD (noted by the volume, see `volume::admit` for the order) and
//! brings each up with the crash-safe copy protocol right after its read
//! was answered, while the HDD's head is still there: one extent's read
//! and write, no seek of its own. The HDD slot stays as a clean shadow, so
//! the extent can make way again by a mapping change.
//!
//! Runs on whoever calls [`admit_pending`]: the daemon's admission thread
//! (woken by each noted miss, [`crate::migrate::Migrator::spawn`]), the
//! benchmark after each request, and every migration round for what is
//! left.

use std::time::Duration;

use crate::device::IoClass;
use crate::units::Reason;
use crate::volume::{Eviction, MoveOutcome, Tier, Volume, VolumeResult};

use super::copy;

/// What one call of [`admit_pending`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Extents brought up.
    pub moved: u64,
    /// Bytes copied for them.
    pub bytes: u64,
    /// Candidates given up: no room, raced by a write, or already there.
    pub skipped: u64,
    /// Candidates left for a later miss: the HDD's users needed the time
    /// (`migrate.admission-share`).
    pub paced: u64,
}

/// Admit the extents waiting, oldest first. A device or store error ends
/// the call (the extents not yet tried are dropped: the next miss notes
/// them again).
pub fn admit_pending(vol: &Volume) -> VolumeResult<Admitted> {
    admit_pending_noting(vol, &mut |_| {})
}

/// [`admit_pending`], telling `landed` each extent brought up once its copy
/// committed (the bench holds back reads of it until then on its clock).
pub fn admit_pending_noting(vol: &Volume, landed: &mut dyn FnMut(u64)) -> VolumeResult<Admitted> {
    let _class = IoClass::Background.enter();
    let mut done = Admitted::default();
    for extent in vol.take_admissions() {
        if vol.mapping(extent).is_none_or(|m| m.loc.tier != Tier::Hdd) {
            done.skipped += 1;
            continue;
        }
        if !vol.ledger().may_admit() {
            // The HDD's users need it: the next miss notes it again.
            done.paced += 1;
            crate::volume::Stats::add(&vol.stats().admissions_paced, 1);
            continue;
        }
        let t0 = vol.clock().io_now();
        let head0 = vol.hdd_busy_here();
        let moved = done.moved;
        let r = admit_one(vol, extent, &mut done);
        if done.moved > moved {
            landed(extent);
        }
        let span = vol.clock().io_now().saturating_sub(t0);
        vol.ledger().admitted(
            span,
            head_time(vol, head0).unwrap_or(span),
            vol.hdd_saturated(),
        );
        r?;
    }
    Ok(done)
}

/// The HDD mechanism time this thread's requests took since it was
/// `head0`, where the drive's model keeps it: what a copy cost the HDD,
/// without its wait in the queue behind the users' requests.
fn head_time(vol: &Volume, head0: Option<Duration>) -> Option<Duration> {
    Some(vol.hdd_busy_here()?.saturating_sub(head0?))
}

/// Bring `extent` up (making room first), counting it in `done`.
fn admit_one(vol: &Volume, extent: u64, done: &mut Admitted) -> VolumeResult<()> {
    {
        let room = make_room(vol)?;
        if matches!(room, Room::None) {
            done.skipped += 1;
            return Ok(());
        }
        let class = vol.admission_class(extent);
        let out = copy::migrate_batch(vol, &[(extent, Reason::Admit)], Tier::Ssd, &mut |_| {})?;
        if let Room::Swap(victim) = room {
            finish_swap(vol, victim)?;
        }
        match out.first() {
            Some((_, MoveOutcome::Moved(n))) => {
                vol.admitted(extent, class);
                done.moved += 1;
                done.bytes += n;
            }
            _ => done.skipped += 1,
        }
    }
    Ok(())
}

/// The second half of a swap: demote `victim` into the HDD slot the
/// admission gave up (or put it back in the order if it cannot go).
fn finish_swap(vol: &Volume, victim: u64) -> VolumeResult<()> {
    if !matches!(demote(vol, victim)?, MoveOutcome::Moved(_)) {
        vol.admission_requeue(victim);
    }
    Ok(())
}

/// Demote an eviction victim with a copy, one pass of the protocol (a
/// write racing it leaves it where it is: `Raced`).
fn demote(vol: &Volume, victim: u64) -> VolumeResult<MoveOutcome> {
    let out = copy::migrate_batch(vol, &[(victim, Reason::Cold)], Tier::Hdd, &mut |_| {})?;
    Ok(out.first().map_or(MoveOutcome::Skipped, |(_, o)| *o))
}

/// Evictions one admission may make before it gives up (a victim that
/// raced a write leaves nothing free).
const EVICT_TRIES: usize = 4;

/// How an admission gets its SSD slot.
enum Room {
    /// A free slot is there.
    Free,
    /// A swap on a full HDD: the admission borrows a reserve slot and gives
    /// up its HDD slot, into which this victim is then demoted.
    Swap(u64),
    /// None: give up.
    None,
}

/// A free SSD slot for one admission: above the reserve if there is one,
/// else the slot of an extent evicted for it in the volume's order (the
/// reserve is no smaller than before; the reserve keeper restores it as
/// before). A victim without a clean HDD copy is demoted with one.
fn make_room(vol: &Volume) -> VolumeResult<Room> {
    if vol.admission_has_room()? {
        return Ok(Room::Free);
    }
    let before = vol.free_slots(Tier::Ssd);
    for _ in 0..EVICT_TRIES {
        match vol.admission_evict()? {
            Eviction::Nothing => return Ok(Room::None),
            Eviction::Freed => {
                // Its slot is free once the eviction is durable.
                vol.flush()?;
            }
            Eviction::Dirty(dirty) => match demote(vol, dirty)? {
                MoveOutcome::Moved(_) => {}
                MoveOutcome::NoRoom
                    if vol.free_slots(Tier::Hdd) == 0 && vol.free_slots(Tier::Ssd) > 0 =>
                {
                    return Ok(Room::Swap(dirty));
                }
                _ => vol.admission_requeue(dirty),
            },
        }
        if vol.free_slots(Tier::Ssd) > before {
            return Ok(Room::Free);
        }
    }
    Ok(Room::None)
}
