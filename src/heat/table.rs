//! The sparse table behind [`HeatMap`](super::HeatMap): per-extent heat
//! state for the extents touched recently, nothing for the others.
//!
//! The table is split into [`SHARDS`] shards by the extent's low bits (so
//! neighbouring extents, which one request or one stream touches in turn,
//! take different locks), each a short `Mutex` around a hash map from the
//! extent's remaining bits (a `u32`) to an [`Entry`] of 24 bytes. The
//! block-coverage bitmaps live apart, in a per-shard slab of `2 * words`
//! words per entry (current window, then the previous one), which an entry
//! holds only while one of its windows has a touched block: an extent whose
//! coverage expired keeps its score in a map slot of 28 bytes until the
//! score has decayed away, and is then dropped. Freed slab places are reused
//! before the slab grows, so a steady working set allocates nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use parking_lot::{Mutex, MutexGuard};

/// Shards of the table (a power of two).
pub(super) const SHARDS: usize = 64;
const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// An entry holds no coverage bitmaps.
pub(super) const NO_BITS: u32 = u32::MAX;

/// What the table keeps of one touched extent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Entry {
    /// Requests since the last tick.
    pub hits: u32,
    /// Decayed score as of the last tick.
    pub score: f32,
    /// Decayed count of the distinct seconds with hits.
    pub recurrence: f32,
    /// Stamp of the last tick that found hits (0: none since the entry was
    /// made or cleared).
    pub last: u32,
    /// Index of the entry's bitmaps in its shard's slab, or [`NO_BITS`].
    pub bits: u32,
    /// Distinct blocks set in the two windows (kept as they change, so
    /// reading it never touches the slab).
    pub coverage: u32,
}

impl Entry {
    pub(super) const EMPTY: Entry = Entry {
        hits: 0,
        score: 0.0,
        recurrence: 0.0,
        last: 0,
        bits: NO_BITS,
        coverage: 0,
    };
}

/// A multiplicative hash with the product's high half folded into the low
/// one: keys are dense small integers (runs of extents), which a hash map
/// indexes by the low bits and tags by the high ones.
#[derive(Default, Clone, Copy)]
pub(super) struct KeyHasher(u64);

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(MIX);
        }
        self.0 ^= self.0 >> 32;
    }

    fn write_u32(&mut self, n: u32) {
        let x = (self.0 ^ u64::from(n)).wrapping_mul(MIX);
        self.0 = x ^ (x >> 32);
    }
}

type Map = HashMap<u32, Entry, BuildHasherDefault<KeyHasher>>;

/// One shard: its entries and their bitmaps.
#[derive(Default)]
pub(super) struct Shard {
    pub entries: Map,
    /// `2 * words` words per place: the current window, then the previous.
    pub slab: Vec<u64>,
    /// Places of the slab no entry holds (all zero).
    pub free: Vec<u32>,
}

impl Shard {
    /// A zeroed slab place for an entry's bitmaps: a freed one, else a
    /// new one at the end.
    pub(super) fn take_place(slab: &mut Vec<u64>, free: &mut Vec<u32>, words: usize) -> u32 {
        if let Some(p) = free.pop() {
            return p;
        }
        let p = (slab.len() / (2 * words)) as u32;
        slab.resize(slab.len() + 2 * words, 0);
        p
    }

    /// Give an entry's place back (zeroing it) and mark the entry as
    /// holding none (and so no coverage).
    pub(super) fn release(slab: &mut [u64], free: &mut Vec<u32>, e: &mut Entry, words: usize) {
        e.coverage = 0;
        if e.bits != NO_BITS {
            let base = e.bits as usize * 2 * words;
            if let Some(w) = slab.get_mut(base..base + 2 * words) {
                w.fill(0);
            }
            free.push(e.bits);
            e.bits = NO_BITS;
        }
    }

    /// Both windows of an entry's bitmaps (empty without a place).
    #[cfg(test)]
    pub(super) fn windows(&self, e: &Entry, words: usize) -> &[u64] {
        if e.bits == NO_BITS {
            return &[];
        }
        let base = e.bits as usize * 2 * words;
        self.slab.get(base..base + 2 * words).unwrap_or(&[])
    }

    /// Give memory back after the table shrank a lot (a burst of touches
    /// decayed away): the map's spare capacity, and the slab, compacted
    /// when most of it is free.
    pub(super) fn shrink(&mut self, words: usize) {
        let len = self.entries.len();
        if self.entries.capacity() > 64 && len * 4 < self.entries.capacity() {
            self.entries.shrink_to(len * 2);
        }
        let places = self.slab.len() / (2 * words);
        if places > 64 && self.free.len() * 2 > places {
            let mut slab = Vec::with_capacity((places - self.free.len()) * 2 * words);
            for e in self.entries.values_mut() {
                if e.bits != NO_BITS {
                    let base = e.bits as usize * 2 * words;
                    let new = (slab.len() / (2 * words)) as u32;
                    slab.extend_from_slice(self.slab.get(base..base + 2 * words).unwrap_or(&[]));
                    e.bits = new;
                }
            }
            slab.shrink_to_fit();
            self.slab = slab;
            self.free = Vec::new();
        }
    }

    /// Bytes the shard holds (its map's slots, the slab, the free list).
    pub(super) fn bytes(&self) -> usize {
        let slot = std::mem::size_of::<(u32, Entry)>() + 1;
        self.entries.capacity() * slot
            + self.slab.capacity() * std::mem::size_of::<u64>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }
}

/// A shard on its own cache line, so two shards' locks never share one.
#[repr(align(64))]
#[derive(Default)]
pub(super) struct Padded(Mutex<Shard>);

/// The shards.
pub(super) struct Table {
    shards: Box<[Padded]>,
}

impl Table {
    pub(super) fn new() -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// The shard of an extent and its key there.
    pub(super) fn split(extent: u64) -> (usize, u32) {
        (
            (extent as usize) & (SHARDS - 1),
            // Extents beyond 2^38 do not exist (slots are u32 per tier).
            (extent >> SHARD_BITS) as u32,
        )
    }

    /// The extent of a key in shard `shard`.
    pub(super) fn join(shard: usize, key: u32) -> u64 {
        (u64::from(key) << SHARD_BITS) | shard as u64
    }

    pub(super) fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        self.shards[shard & (SHARDS - 1)].0.lock()
    }

    /// Each shard in turn, locked.
    pub(super) fn each(&self) -> impl Iterator<Item = (usize, MutexGuard<'_, Shard>)> {
        self.shards.iter().enumerate().map(|(i, s)| (i, s.0.lock()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_and_join() {
        for e in [0u64, 1, 63, 64, 65, 16 << 20, (1 << 38) - 1] {
            let (s, k) = Table::split(e);
            assert_eq!(Table::join(s, k), e);
        }
        // Neighbours land in different shards.
        assert_ne!(Table::split(10).0, Table::split(11).0);
    }

    #[test]
    fn slab_places_are_reused_and_compacted() {
        let words = 4;
        let mut s = Shard::default();
        for k in 0..200u32 {
            let bits = Shard::take_place(&mut s.slab, &mut s.free, words);
            s.slab[bits as usize * 2 * words] = u64::from(k) + 1;
            s.entries.insert(
                k,
                Entry {
                    bits,
                    ..Entry::EMPTY
                },
            );
        }
        // 150 entries go, giving their places back zeroed.
        for k in 0..150u32 {
            let mut e = s.entries.remove(&k).unwrap();
            let Shard { slab, free, .. } = &mut s;
            Shard::release(slab, free, &mut e, words);
            assert_eq!(e.bits, NO_BITS);
        }
        assert_eq!(s.free.len(), 150);
        // A new entry reuses a freed place, zeroed.
        let p = Shard::take_place(&mut s.slab, &mut s.free, words);
        let e = Entry {
            bits: p,
            ..Entry::EMPTY
        };
        assert!(p < 150 && s.windows(&e, words).iter().all(|w| *w == 0));
        s.free.push(p);
        // Mostly free: compacted, each entry keeping its own bitmaps.
        s.shrink(words);
        assert_eq!(s.slab.len(), 50 * 2 * words);
        assert!(s.free.is_empty());
        for (k, e) in &s.entries {
            assert_eq!(s.windows(e, words)[0], u64::from(*k) + 1);
        }
    }
}
