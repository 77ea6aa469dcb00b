//! The SSD write log's places: SSD slots lent to the log as *segments*,
//! each cut into 4 KiB places that writes to HDD extents land in.
//!
//! A segment is taken from the free SSD slots when the log needs room (at
//! most `cap` segments: the reserve) and given back once none of its places
//! is in use. Like a slot, a place that stops being referenced is not reused
//! before the metadata flush that records it: until then the durable record
//! may still point at it, and a crash would read another block's data.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::alloc::Allocator;
use super::extent::{Loc, LogPos};
use super::geometry::Tier;

/// The write log's bookkeeping.
pub(crate) struct WriteLog {
    inner: Mutex<Inner>,
    /// Places per segment (blocks per extent).
    places: u32,
}

struct Inner {
    /// Most segments the log may hold.
    cap: u32,
    /// Segments by SSD slot, with their places in use.
    used: HashMap<u32, u32>,
    /// Free places, handed out from the end (lowest first per segment).
    free: Vec<LogPos>,
    /// Places given up since the last metadata flush.
    quarantine: Vec<LogPos>,
}

/// How full the log is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogUsage {
    /// SSD slots lent to the log.
    pub segments: u32,
    /// Most segments it may take.
    pub cap: u32,
    /// Places holding a block (or waiting for a flush to be free).
    pub used: u64,
    /// Places in all its segments.
    pub places: u64,
}

/// Segments the log may hold with a reserve of `reserve` slots: all but a
/// few (an eighth, at most [`SWAP_ROOM`]). On a full volume the log's
/// segments can only come out of the reserve, and with none of it left
/// migration stops: a promotion needs a free SSD slot to start the swap that
/// frees an HDD slot for its victim, and the HDD has none. The few kept
/// back let swaps go on while the log is full, so a working set can still
/// come up while the log waits for the HDD to be free to write back.
pub(crate) fn cap_for(reserve: u32) -> u32 {
    reserve - (reserve / 8).min(SWAP_ROOM)
}

/// Most reserve slots the log leaves alone ([`cap_for`]).
pub(crate) const SWAP_ROOM: u32 = 32;

impl WriteLog {
    /// A log of at most `cap` segments of `places` places, holding the
    /// places `in_use` (from the extent records at open).
    pub(crate) fn new(cap: u32, places: u32, in_use: impl Iterator<Item = LogPos>) -> Self {
        let mut used: HashMap<u32, Vec<bool>> = HashMap::new();
        for p in in_use {
            let seg = used
                .entry(p.slot)
                .or_insert_with(|| vec![false; places as usize]);
            if let Some(u) = seg.get_mut(p.index as usize) {
                *u = true;
            }
        }
        let mut free = Vec::new();
        let mut counts = HashMap::new();
        for (slot, seg) in &used {
            for i in (0..places).rev() {
                if !seg[i as usize] {
                    free.push(LogPos {
                        slot: *slot,
                        index: i,
                    });
                }
            }
            counts.insert(*slot, seg.iter().filter(|u| **u).count() as u32);
        }
        WriteLog {
            inner: Mutex::new(Inner {
                cap,
                used: counts,
                free,
                quarantine: Vec::new(),
            }),
            places,
        }
    }

    /// SSD slots the log holds.
    #[cfg(test)]
    pub(crate) fn segments(&self) -> Vec<u32> {
        self.inner.lock().used.keys().copied().collect()
    }

    /// A free place, taking a new segment from `alloc` if the log may grow.
    /// A new segment's slot is passed to `fresh` before any of its places
    /// is handed out (the volume detaches it from zero-copy reads of its
    /// previous owner); if that fails the slot goes back and no place is
    /// given.
    pub(crate) fn acquire(
        &self,
        alloc: &Allocator,
        fresh: impl FnOnce(u32) -> bool,
    ) -> Option<LogPos> {
        let mut inner = self.inner.lock();
        if inner.free.is_empty() {
            if inner.used.len() as u32 >= inner.cap {
                return None;
            }
            let loc @ Loc { slot, .. } = alloc.alloc(&[Tier::Ssd])?;
            if !fresh(slot) {
                alloc.free_now(loc);
                return None;
            }
            inner.used.insert(slot, 0);
            for index in (0..self.places).rev() {
                inner.free.push(LogPos { slot, index });
            }
        }
        let p = inner.free.pop()?;
        if let Some(n) = inner.used.get_mut(&p.slot) {
            *n += 1;
        }
        Some(p)
    }

    /// Whether [`WriteLog::acquire`] may find a place (a free one, or room
    /// for a segment and a free SSD slot to make it from).
    pub(crate) fn may_take(&self, alloc: &Allocator) -> bool {
        let inner = self.inner.lock();
        !inner.free.is_empty()
            || (inner.cap > inner.used.len() as u32 && alloc.free_count(Tier::Ssd) > 0)
    }

    /// Change the cap; segments held beyond a lowered one go back as they
    /// empty.
    pub(crate) fn set_cap(&self, cap: u32) {
        self.inner.lock().cap = cap;
    }

    /// Whether the log may take another segment (it is below its cap).
    pub(crate) fn may_grow(&self) -> bool {
        let inner = self.inner.lock();
        inner.cap > inner.used.len() as u32
    }

    /// Give back a place nothing durable refers to: free at once, and its
    /// segment back to `alloc` when it was the last one in use.
    pub(crate) fn release_now(&self, p: LogPos, alloc: &Allocator) {
        let mut inner = self.inner.lock();
        let Some(n) = inner.used.get_mut(&p.slot) else {
            return;
        };
        *n = n.saturating_sub(1);
        if *n == 0 {
            inner.used.remove(&p.slot);
            inner.free.retain(|f| f.slot != p.slot);
            alloc.free_now(Loc {
                tier: Tier::Ssd,
                slot: p.slot,
            });
        } else {
            inner.free.push(p);
        }
    }

    /// Give back a place a durable record may still point at: free after the
    /// next metadata flush.
    pub(crate) fn release_deferred(&self, p: LogPos) {
        self.inner.lock().quarantine.push(p);
    }

    /// Take the quarantined places (at the start of a flush).
    pub(crate) fn take_quarantine(&self) -> Vec<LogPos> {
        std::mem::take(&mut self.inner.lock().quarantine)
    }

    /// Free places taken by [`WriteLog::take_quarantine`] (the flush
    /// succeeded) or put them back (`durable == false`).
    pub(crate) fn settle(&self, places: Vec<LogPos>, durable: bool, alloc: &Allocator) {
        if durable {
            for p in places {
                self.release_now(p, alloc);
            }
        } else {
            self.inner.lock().quarantine.extend(places);
        }
    }

    /// Places waiting for a flush.
    pub(crate) fn quarantined(&self) -> usize {
        self.inner.lock().quarantine.len()
    }

    /// How full the log is.
    pub(crate) fn usage(&self) -> LogUsage {
        let inner = self.inner.lock();
        LogUsage {
            segments: inner.used.len() as u32,
            cap: inner.cap,
            used: inner.used.values().map(|n| u64::from(*n)).sum(),
            places: inner.used.len() as u64 * u64::from(self.places),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_come_from_free_ssd_slots_and_go_back_when_empty() {
        let alloc = Allocator::new([3, 1], std::iter::empty());
        let log = WriteLog::new(1, 2, std::iter::empty());
        let a = log.acquire(&alloc, |_| true).unwrap();
        let b = log.acquire(&alloc, |_| true).unwrap();
        assert_eq!((a.slot, a.index, b.slot, b.index), (0, 0, 0, 1));
        assert_eq!(alloc.free_count(Tier::Ssd), 2);
        // The cap: one segment.
        assert_eq!(log.acquire(&alloc, |_| true), None);
        log.release_deferred(a);
        assert_eq!(
            log.acquire(&alloc, |_| true),
            None,
            "quarantined until a flush"
        );
        let q = log.take_quarantine();
        log.settle(q, true, &alloc);
        assert_eq!(log.acquire(&alloc, |_| true), Some(a));
        log.release_now(a, &alloc);
        log.release_now(b, &alloc);
        assert_eq!(log.usage().segments, 0);
        assert_eq!(alloc.free_count(Tier::Ssd), 3);
    }

    #[test]
    fn rebuilt_from_the_places_in_use() {
        let used = [LogPos { slot: 5, index: 1 }];
        let log = WriteLog::new(4, 3, used.into_iter());
        assert_eq!(log.segments(), vec![5]);
        let alloc = Allocator::new(
            [8, 1],
            [Loc {
                tier: Tier::Ssd,
                slot: 5,
            }]
            .into_iter(),
        );
        assert_eq!(
            log.acquire(&alloc, |_| true),
            Some(LogPos { slot: 5, index: 0 })
        );
        assert_eq!(
            log.acquire(&alloc, |_| true),
            Some(LogPos { slot: 5, index: 2 })
        );
        assert_eq!(log.usage().used, 3);
    }
}
