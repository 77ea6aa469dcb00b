//! Failpoints of the crash-safe copy protocol: a test arms one on a volume
//! and the next migration stops after the named step, as a crash there
//! would (the test then drops the volume without flushing). Compiled in only
//! with the `failpoints` cargo feature, which the crate's own tests enable;
//! without it [`Armed`] is an empty type and every check folds to `false`.

#[cfg(feature = "failpoints")]
use parking_lot::Mutex;

use super::mover::{Item, MoveOutcome};

/// Steps of the copy protocol after which a test can simulate a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStep {
    /// Destination slot taken.
    Allocated,
    /// Data copied.
    Copied,
    /// Destination synced.
    Synced,
    /// Mapping switched and written to the store (not yet flushed).
    Committed,
    /// Mapping flushed (source not yet freed).
    Flushed,
}

/// The step a migration is armed to stop after (nothing without the
/// `failpoints` feature).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Armed(#[cfg(feature = "failpoints")] Option<MoveStep>);

impl Armed {
    /// Whether the migration stops after `step`.
    #[inline]
    pub(crate) fn hits(&self, _step: MoveStep) -> bool {
        #[cfg(feature = "failpoints")]
        {
            self.0 == Some(_step)
        }
        #[cfg(not(feature = "failpoints"))]
        {
            false
        }
    }
}

/// A volume's armed failpoint, taken by the next migration.
#[derive(Default)]
pub(crate) struct Failpoint {
    #[cfg(feature = "failpoints")]
    armed: Mutex<Option<MoveStep>>,
}

impl Failpoint {
    /// Disarm and return what was armed.
    #[inline]
    pub(crate) fn take(&self) -> Armed {
        #[cfg(feature = "failpoints")]
        {
            Armed(self.armed.lock().take())
        }
        #[cfg(not(feature = "failpoints"))]
        {
            Armed::default()
        }
    }

    /// Arm: the next migration stops after `step`.
    #[cfg(feature = "failpoints")]
    pub(crate) fn arm(&self, step: MoveStep) {
        *self.armed.lock() = Some(step);
    }
}

/// `out` plus a `Stopped(step)` outcome for each of `items` (a simulated
/// crash). Without the feature no migration is ever armed, so this is never
/// reached; it then returns `out` as it is.
pub(crate) fn stopped<'a>(
    #[allow(unused_mut)] mut out: Vec<(u64, MoveOutcome)>,
    _items: impl Iterator<Item = &'a Item>,
    _step: MoveStep,
) -> Vec<(u64, MoveOutcome)> {
    #[cfg(feature = "failpoints")]
    out.extend(_items.map(|i| (i.extent, MoveOutcome::Stopped(_step))));
    out
}
