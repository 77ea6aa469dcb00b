//! The crash-safe copy protocol: strings the volume's move steps together
//! (reserve → copy → sync → commit → flush → release, each a typestate the
//! volume hands out only in that order), retries an extent that foreground
//! writes keep changing, and, in tests only, stops after a named step as a
//! crash there would.
//!
//! Failpoints: with the `failpoints` cargo feature (which the crate's own
//! tests turn on), [`arm_crash_after`] makes the next migration *on the
//! calling thread* stop after a step, answering `Stopped(step)` for the
//! extents it held; the test then drops the volume without flushing. Without
//! the feature there is no way to arm one and every check is a constant
//! `false`.

use crate::units::Reason;
use crate::volume::{Goal, MoveOutcome, MoveStep, Tier, Volume, VolumeResult};

/// Attempts before a migration racing foreground writes gives up.
const ATTEMPTS: usize = 3;

#[cfg(feature = "failpoints")]
thread_local! {
    static ARMED: std::cell::Cell<Option<MoveStep>> = const { std::cell::Cell::new(None) };
}

/// Failpoint (tests only, `failpoints` feature): the next
/// [`migrate_extent`] or [`migrate_batch`] on this thread stops after
/// `step`, as a crash there would; drop the volume without flushing to
/// complete the simulated crash.
#[cfg(feature = "failpoints")]
pub fn arm_crash_after(step: MoveStep) {
    ARMED.with(|a| a.set(Some(step)));
}

#[cfg(feature = "failpoints")]
thread_local! {
    #[allow(clippy::type_complexity)]
    static HOOK: std::cell::RefCell<Option<(MoveStep, Box<dyn FnOnce()>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Failpoint (tests only, `failpoints` feature): the next pass of the copy
/// protocol on this thread that reaches `step` runs `f` there, then goes
/// on: what another thread might do between two steps, made
/// deterministic.
#[cfg(feature = "failpoints")]
pub fn run_after(step: MoveStep, f: Box<dyn FnOnce()>) {
    HOOK.with(|h| *h.borrow_mut() = Some((step, f)));
}

/// Run the hook armed for `step`, if any (taken first: a pass the hook
/// itself starts does not run it again). Without the feature: nothing.
fn hook(step: MoveStep) {
    #[cfg(feature = "failpoints")]
    {
        let f = HOOK.with(|h| {
            let mut h = h.borrow_mut();
            if h.as_ref().is_some_and(|(s, _)| *s == step) {
                h.take().map(|(_, f)| f)
            } else {
                None
            }
        });
        if let Some(f) = f {
            f();
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = step;
}

/// Disarm and return the step this thread's next migration stops after.
fn take_armed() -> Option<MoveStep> {
    #[cfg(feature = "failpoints")]
    {
        ARMED.with(|a| a.take())
    }
    #[cfg(not(feature = "failpoints"))]
    {
        None
    }
}

/// `out` plus `Stopped(step)` for each of `extents`, when the armed step is
/// `step`; `None` (go on) otherwise. Without the feature: always `None`.
fn stop_at(
    armed: Option<MoveStep>,
    step: MoveStep,
    out: &mut Vec<(u64, MoveOutcome)>,
    extents: impl FnOnce() -> Vec<u64>,
) -> bool {
    if armed != Some(step) {
        return false;
    }
    #[cfg(feature = "failpoints")]
    out.extend(
        extents()
            .into_iter()
            .map(|e| (e, MoveOutcome::Stopped(step))),
    );
    #[cfg(not(feature = "failpoints"))]
    let _ = (out, extents);
    true
}

/// Move one extent to tier `to` with the crash-safe copy protocol,
/// retrying a few times if foreground writes keep changing it.
/// `pace(bytes)` is called before each copy (it may sleep).
pub fn migrate_extent(
    vol: &Volume,
    extent: u64,
    to: Tier,
    reason: Reason,
    pace: &mut dyn FnMut(u64),
) -> VolumeResult<MoveOutcome> {
    let armed = take_armed();
    for _ in 0..ATTEMPTS {
        let out = run(vol, &[(extent, reason)], Goal::of(to), pace, armed)?;
        match out.first() {
            Some((_, MoveOutcome::Raced)) => continue,
            Some((_, o)) => return Ok(*o),
            None => return Ok(MoveOutcome::Skipped),
        }
    }
    Ok(MoveOutcome::Raced)
}

/// Move many extents to tier `to` in one pass of the copy protocol: every
/// copy, one sync of the destination, every commit, one flush, then the
/// sources are freed. Copies between neighbouring source and destination
/// slots are merged. An extent a foreground write changed meanwhile is
/// left in place (`Raced`; a later round retries). A device or store error
/// fails the extents not yet committed.
pub fn migrate_batch(
    vol: &Volume,
    extents: &[(u64, Reason)],
    to: Tier,
    pace: &mut dyn FnMut(u64),
) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
    let armed = take_armed();
    run(vol, extents, Goal::of(to), pace, armed)
}

/// Write the logged blocks of HDD extents back from the SSD write log into
/// their HDD slots (in HDD order, neighbouring blocks in one write) with the
/// same crash-safe protocol: copy, sync the HDD, commit the mappings without
/// the logged blocks, flush, then free the log places. An extent written
/// meanwhile is left as it is (`Raced`).
pub fn write_back_batch(
    vol: &Volume,
    extents: &[u64],
    pace: &mut dyn FnMut(u64),
) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
    let armed = take_armed();
    let extents: Vec<(u64, Reason)> = extents.iter().map(|e| (*e, Reason::Writeback)).collect();
    run(vol, &extents, Goal::WriteBack, pace, armed)
}

/// Pre-clean SSD extents: copy each into a new HDD slot that becomes its
/// clean shadow, with the same crash-safe protocol (copy, sync the HDD,
/// commit the mappings with the shadow, flush). An extent written
/// meanwhile is left without one (`Raced`). Only while the HDD keeps more
/// free slots than the reserve (`NoRoom` otherwise). A shadow is trusted
/// only after a clean shutdown, like every other.
pub fn preclean_batch(
    vol: &Volume,
    extents: &[u64],
    pace: &mut dyn FnMut(u64),
) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
    let armed = take_armed();
    let extents: Vec<(u64, Reason)> = extents.iter().map(|e| (*e, Reason::Cold)).collect();
    run(vol, &extents, Goal::Clean, pace, armed)
}

/// Clean SSD extents where they are: a stale shadow is brought up to date
/// (only the blocks written since go to the HDD), an extent without one is
/// pre-cleaned into a new HDD slot, so each can later leave by a mapping
/// change. Two passes of the protocol, one per kind; an extent written
/// meanwhile stays as it was (`Raced`).
pub fn clean_batch(
    vol: &Volume,
    extents: &[(u64, Reason)],
    pace: &mut dyn FnMut(u64),
) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
    let armed = take_armed();
    let mut shadowed: Vec<(u64, Reason)> = Vec::new();
    let mut bare: Vec<(u64, Reason)> = Vec::new();
    for &(e, r) in extents {
        if vol.mapping(e).is_some_and(|m| m.shadow.is_some()) {
            shadowed.push((e, r));
        } else {
            bare.push((e, r));
        }
    }
    let mut out = run(vol, &shadowed, Goal::Refresh, pace, armed)?;
    out.extend(run(vol, &bare, Goal::Clean, pace, armed)?);
    Ok(out)
}

/// One pass of the protocol over `extents`.
fn run(
    vol: &Volume,
    extents: &[(u64, Reason)],
    goal: Goal,
    pace: &mut dyn FnMut(u64),
    armed: Option<MoveStep>,
) -> VolumeResult<Vec<(u64, MoveOutcome)>> {
    // 1. Snapshot each extent and take destination slots.
    let (reserved, mut out) = vol.reserve_moves(extents, goal)?;
    if reserved.is_empty() {
        return Ok(out);
    }
    hook(MoveStep::Allocated);
    if stop_at(armed, MoveStep::Allocated, &mut out, || reserved.extents()) {
        return Ok(out);
    }
    // 2. Copy, without the extents' locks.
    let copied = vol.copy_moves(reserved, pace)?;
    hook(MoveStep::Copied);
    if stop_at(armed, MoveStep::Copied, &mut out, || copied.extents()) {
        return Ok(out);
    }
    // 3. Make the copies durable.
    let synced = vol.sync_moves(copied)?;
    hook(MoveStep::Synced);
    if stop_at(armed, MoveStep::Synced, &mut out, || synced.extents()) {
        return Ok(out);
    }
    // 4. Commit each mapping unless a foreground write changed it.
    let (committed, raced) = vol.commit_moves(synced);
    out.extend(raced);
    hook(MoveStep::Committed);
    if stop_at(armed, MoveStep::Committed, &mut out, || committed.extents()) {
        return Ok(out);
    }
    // 5. Make the new mappings durable.
    let flushed = vol.flush_moves(committed)?;
    if stop_at(armed, MoveStep::Flushed, &mut out, || flushed.extents()) {
        return Ok(out);
    }
    // 6. Free the sources.
    out.extend(vol.release_moves(flushed)?);
    Ok(out)
}
