//! Holding an extent's foreground writes while a copy of it must commit:
//! the SSD exposure bound's way past a copy that a busy extent would
//! otherwise race for ever (every write during a copy abandons it).
//!
//! A hold marks extents; a foreground write (or trim, or zeroing) into a
//! held extent waits at its start, before it takes any lock, until the
//! hold is released (looking again every half millisecond on the volume's
//! clock). Taking a hold waits for the writes already inside
//! the extent to finish (its write lock, taken and dropped at once), so
//! from then to the release no write changes it and a copy made then
//! commits. Reads never wait. With no hold anywhere a write pays one
//! atomic load.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use parking_lot::Mutex;

use super::Volume;

/// How often a write into a held extent looks again: a copy takes
/// milliseconds (an extent's read and write, a sync).
const HELD_POLL: Duration = Duration::from_micros(500);

/// The held extents.
#[derive(Default)]
pub(crate) struct Held {
    extents: Mutex<HashSet<u64>>,
    /// How many are held (the writes' fast path).
    count: AtomicUsize,
}

impl Held {
    /// Whether any of `first..=last` is held now.
    fn any(&self, first: u64, last: u64) -> bool {
        if self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        let h = self.extents.lock();
        (first..=last).any(|e| h.contains(&e))
    }
}

/// Foreground writes into some extents wait until this is dropped
/// ([`Volume::hold_writes`]).
pub struct WriteHold<'a> {
    vol: &'a Volume,
    extents: Vec<u64>,
}

impl Drop for WriteHold<'_> {
    fn drop(&mut self) {
        if !self.extents.is_empty() {
            self.vol.release_writes(&self.extents);
        }
    }
}

impl Volume {
    /// Hold foreground writes into `extents` until the returned guard is
    /// dropped (a panic in between releases them too); returns once writes
    /// already inside them are done. An extent held elsewhere is left to
    /// that hold.
    pub fn hold_writes(&self, extents: &[u64]) -> WriteHold<'_> {
        let mut took = Vec::with_capacity(extents.len());
        {
            let mut h = self.held.extents.lock();
            for &e in extents {
                if h.insert(e) {
                    took.push(e);
                }
            }
            self.held.count.fetch_add(took.len(), Ordering::AcqRel);
        }
        for &e in &took {
            drop(self.slot_lock(e).write());
        }
        WriteHold {
            vol: self,
            extents: took,
        }
    }

    /// Let writes into `extents` (taken by a hold) go on.
    fn release_writes(&self, extents: &[u64]) {
        let mut h = self.held.extents.lock();
        let mut n = 0;
        for e in extents {
            n += usize::from(h.remove(e));
        }
        self.held.count.fetch_sub(n, Ordering::AcqRel);
    }

    /// Wait while any extent of `offset..offset + len` (`len > 0`) is held:
    /// in steps of [`HELD_POLL`] on the volume's clock, not on a condition
    /// variable, because the hold spans the copy's paced waits, and on the
    /// bench's virtual clock only a sleeping participant lets another run.
    pub(crate) fn wait_unheld(&self, offset: u64, len: u64) {
        let es = self.geo.extent_size;
        let (first, last) = (offset / es, (offset + len - 1) / es);
        while self.held.any(first, last) {
            self.clock.sleep(HELD_POLL);
        }
    }

    /// Whether any extent of `offset..offset + len` (`len > 0`) is held (a
    /// write that must not wait takes the blocking path instead).
    pub(crate) fn is_held(&self, offset: u64, len: u64) -> bool {
        let es = self.geo.extent_size;
        self.held.any(offset / es, (offset + len - 1) / es)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_hold_costs_a_load_and_a_hold_is_seen_by_range() {
        let h = Held::default();
        assert!(!h.any(0, 100));
        h.extents.lock().insert(5);
        h.count.store(1, Ordering::Release);
        assert!(h.any(0, 5));
        assert!(h.any(5, 5));
        assert!(!h.any(6, 9));
        assert!(!h.any(0, 4));
    }
}
