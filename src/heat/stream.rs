//! Sequential-stream detection per client connection: which requests
//! continue a contiguous stream, and how long that stream has run. The
//! answer ([`IoHint::seq_run`]) is what lets [`HeatMap`](super::HeatMap)
//! refuse heat to long sequential scans.
//!
//! A [`StreamDetector`] belongs to one connection and must see that
//! connection's READs and WRITEs in the order the client sent them (the NBD
//! server reads requests in order, so it asks for the hint there); then the
//! run lengths are exact.

use crate::units::IoHint;

/// Streams tracked per connection.
pub const STREAMS: usize = 4;

/// The last few contiguous streams of one connection: for each, where its
/// next request would start and how many bytes it has run so far.
#[derive(Debug, Default)]
pub struct StreamDetector {
    /// (next offset, run length, last use), most recent use wins.
    slots: [(u64, u64, u64); STREAMS],
    clock: u64,
}

impl StreamDetector {
    /// A detector with no stream seen yet.
    pub fn new() -> Self {
        StreamDetector::default()
    }

    /// Account a READ or WRITE of `len` bytes at `offset` and return its hint.
    pub fn observe(&mut self, offset: u64, len: u64) -> IoHint {
        self.clock += 1;
        let end = offset.saturating_add(len);
        let slot = match self.slots.iter().position(|s| s.0 == offset && s.1 > 0) {
            Some(i) => {
                self.slots[i].1 = self.slots[i].1.saturating_add(len);
                i
            }
            None => {
                // Replace the least recently used stream.
                let i = (0..STREAMS).min_by_key(|i| self.slots[*i].2).unwrap_or(0);
                self.slots[i].1 = len;
                i
            }
        };
        self.slots[slot].0 = end;
        self.slots[slot].2 = self.clock;
        IoHint {
            seq_run: self.slots[slot].1,
        }
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;

    #[test]
    fn contiguous_requests_grow_a_run_and_interleaved_streams_are_kept_apart() {
        let mut s = StreamDetector::default();
        assert_eq!(s.observe(0, 4096).seq_run, 4096);
        assert_eq!(s.observe(4096, 4096).seq_run, 8192);
        // Another stream interleaved with the first.
        assert_eq!(s.observe(1 << 30, 4096).seq_run, 4096);
        assert_eq!(s.observe(8192, 4096).seq_run, 12288);
        assert_eq!(s.observe((1 << 30) + 4096, 4096).seq_run, 8192);
        // A random jump starts over.
        assert_eq!(s.observe(77 * 4096, 4096).seq_run, 4096);
    }
}
