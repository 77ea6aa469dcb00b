//! Sequential-stream detection: which requests continue a stream, and how
//! long that stream has run. The answer ([`IoHint::seq_run`]) is what lets
//! [`HeatMap`](super::HeatMap) refuse heat to long sequential scans.
//!
//! Two detectors, and a request is sequential if either says so:
//! - A [`StreamDetector`] belongs to one connection and sees that
//!   connection's READs and WRITEs in the order the client sent them (the
//!   NBD server reads requests in order, so it asks for the hint there);
//!   its run lengths are exact.
//! - One [`VolumeStreams`] sees every connection's requests. A client with
//!   several connections (nbdfuse, qemu's multi-conn, the kernel's
//!   nbd-client) spreads one stream's requests over all of them, so each
//!   connection sees only every n-th piece, and they arrive slightly out of
//!   order. It keeps a small table of recent streams (as bcache keeps
//!   recent stream ends): a request that starts within [`SLACK`] of a
//!   stream's end, or just before its start, continues it, and the stream's
//!   bytes count only where they widen what it spans. A stream is
//!   sequential once it spans more than the cutoff *and* its bytes fill at
//!   least half of that span: random requests that happen to land near each
//!   other cover little of the span they hop across, and re-reads of a hot
//!   area add nothing, so a hot set never looks like a scan.

use parking_lot::Mutex;

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

/// How far from a recent stream's end (either way) a request may start and
/// still continue that stream in [`VolumeStreams`].
pub const SLACK: u64 = 1 << 20;

/// Streams the volume-wide table keeps.
pub const VOLUME_STREAMS: usize = 32;

#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    /// First byte.
    start: u64,
    /// Highest end seen.
    end: u64,
    /// Bytes that moved the end forward.
    bytes: u64,
    /// Last use (the table's clock), 0: empty.
    used: u64,
}

#[derive(Debug, Default)]
struct Table {
    streams: [Stream; VOLUME_STREAMS],
    clock: u64,
}

/// Streams over every connection of a volume (see the module docs).
#[derive(Debug, Default)]
pub struct VolumeStreams {
    table: Mutex<Table>,
}

impl VolumeStreams {
    /// A table with no stream yet.
    pub fn new() -> Self {
        VolumeStreams::default()
    }

    /// Account a READ or WRITE of `len` bytes at `offset`, from whichever
    /// connection, and return its hint: the span of the stream it
    /// continues if that stream is dense (bytes at least half the span),
    /// else 0.
    pub fn observe(&self, offset: u64, len: u64) -> IoHint {
        let end = offset.saturating_add(len);
        let mut t = self.table.lock();
        t.clock += 1;
        let clock = t.clock;
        let near = t
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                // Near its end, or just before its start (a piece that
                // overtook the first ones).
                s.used != 0
                    && offset <= s.end.saturating_add(SLACK)
                    && (offset >= s.end.saturating_sub(SLACK)
                        || (offset < s.start && end.saturating_add(SLACK) >= s.start))
            })
            .min_by_key(|(_, s)| s.end.abs_diff(offset).min(s.start.abs_diff(end)))
            .map(|(i, _)| i);
        let i = match near {
            Some(i) => {
                let s = &mut t.streams[i];
                // Only bytes outside what the stream spans already count.
                let before = end.min(s.start).saturating_sub(offset);
                let after = end.saturating_sub(offset.max(s.end));
                s.bytes = s.bytes.saturating_add(before + after);
                s.start = s.start.min(offset);
                s.end = s.end.max(end);
                i
            }
            None => {
                let i = (0..VOLUME_STREAMS)
                    .min_by_key(|i| t.streams[*i].used)
                    .unwrap_or(0);
                t.streams[i] = Stream {
                    start: offset,
                    end,
                    bytes: len,
                    used: 0,
                };
                i
            }
        };
        let s = &mut t.streams[i];
        s.used = clock;
        let span = s.end - s.start;
        IoHint {
            seq_run: if s.bytes.saturating_mul(2) >= span {
                span
            } else {
                0
            },
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

    const MIB: u64 = 1 << 20;

    #[test]
    fn one_stream_over_four_connections_out_of_order_is_one_stream() {
        let v = VolumeStreams::new();
        // 128 KiB pieces handed round-robin to four connections; each
        // group of four arrives in a shuffled order.
        let piece = 128 * 1024;
        let mut last = 0;
        for group in 0..64u64 {
            for k in [2u64, 0, 3, 1] {
                last = v.observe((group * 4 + k) * piece, piece).seq_run;
            }
        }
        assert_eq!(last, 32 * MIB, "the whole 32 MiB is one dense stream");
        // Each connection alone sees gaps: its detector never grows a run.
        let mut one = StreamDetector::new();
        let runs: Vec<u64> = (0..64u64)
            .map(|g| one.observe((g * 4) * piece, piece).seq_run)
            .collect();
        assert!(runs.iter().all(|r| *r == piece));
    }

    #[test]
    fn random_requests_near_each_other_never_look_sequential() {
        let v = VolumeStreams::new();
        // A hot 8 MiB area read at random, 20,000 times (re-reads and hops
        // of up to the slack): never a dense stream past 4 MiB.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = (x % (8 * MIB / 4096)) * 4096;
            let run = v.observe(off, 4096).seq_run;
            assert!(
                run <= 4 * MIB,
                "random reads counted as a {run}-byte stream"
            );
        }
        // A zipf-like hot set spread over 512 MiB: the same.
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = (x % (512 * MIB / 4096)) * 4096;
            assert!(v.observe(off, 4096).seq_run <= 4 * MIB);
        }
    }

    #[test]
    fn two_scans_far_apart_are_tracked_apart_and_gaps_are_tolerated() {
        let v = VolumeStreams::new();
        let (mut a, mut b) = (0, 0);
        for k in 0..40u64 {
            a = v.observe(k * MIB, MIB).seq_run;
            // The second scan skips 64 KiB after every MiB (metadata a
            // filesystem leaves between runs of a file).
            b = v.observe((1 << 30) + k * (MIB + 65536), MIB).seq_run;
        }
        assert_eq!(a, 40 * MIB);
        assert!(b > 39 * MIB, "{b}");
        // A request far from both starts a stream of its own.
        assert_eq!(v.observe(5 << 30, 4096).seq_run, 4096);
    }
}
