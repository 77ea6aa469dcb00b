//! The slow lane of one connection: how many of its threads may wait on
//! READs the export calls slow ([`Export::read_is_slow`]: tierd's reads of
//! data on the HDD), and the queue, in order of arrival, of the slow READs
//! read off the stream while that many are being served.
//!
//! Without it, a connection whose threads all sit on HDD reads reads no
//! more requests: a WRITE the SSD would take in a tenth of a millisecond
//! waits on the socket until an HDD read is done (msr-web0 replayed at
//! fill 0.7: mean write 600 to 6,100 times the pure SSD's, in the bench and
//! through the daemon alike). With it, a slow READ that finds its lane full
//! is queued here and the thread reads on; the thread that ends a slow
//! READ takes the next queued one before it reads again, so slow READs
//! keep their order and the lane stays full while they wait, and at least
//! a quarter of the threads are always left to read requests and serve
//! what flash serves.
//!
//! [`Export::read_is_slow`]: super::export::Export::read_is_slow

use std::collections::VecDeque;
use std::sync::Mutex;

use super::lock::lock;
use crate::units::IoHint;

/// A slow READ waiting for its lane. `cost`: the budget bytes it holds
/// while served; while queued it holds the request overhead alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Parked {
    pub(super) cookie: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) hint: IoHint,
    pub(super) cost: usize,
}

struct State {
    /// Slow READs being served.
    busy: usize,
    /// Slow READs waiting, oldest first.
    parked: VecDeque<Parked>,
}

/// Slow READs served at once at most by a connection that may have
/// `threads` serving threads now: three quarters of them (no bound for a
/// connection of one thread, where nothing could be let by).
pub(super) fn lane_cap(threads: usize) -> usize {
    if threads < 2 {
        usize::MAX
    } else {
        threads - threads.div_ceil(4)
    }
}

/// What becomes of a slow READ read off the stream ([`Lanes::enter`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// Serve it now: it has a place in the lane.
    Serve,
    /// It is queued; serve this one, the oldest queued, in the place.
    ServeQueued(Parked),
    /// It is queued; the lane is full.
    Queued,
}

/// One connection's slow lane.
pub(super) struct Lanes {
    state: Mutex<State>,
}

impl Lanes {
    /// An empty lane.
    pub(super) fn new() -> Lanes {
        Lanes {
            state: Mutex::new(State {
                busy: 0,
                parked: VecDeque::new(),
            }),
        }
    }

    /// A slow READ was read off the stream by a connection that may have
    /// `threads` threads now. With a place free in the lane, the caller
    /// takes it (until [`Lanes::next`]) to serve the oldest slow READ
    /// waiting: this one, or, when others are queued (the lane has grown
    /// with the thread count since), the first of them, this one queued
    /// behind.
    pub(super) fn enter(&self, read: Parked, threads: usize) -> Entry {
        let mut s = lock(&self.state);
        if s.busy < lane_cap(threads) {
            s.busy += 1;
            return match s.parked.pop_front() {
                None => Entry::Serve,
                Some(first) => {
                    s.parked.push_back(read);
                    Entry::ServeQueued(first)
                }
            };
        }
        s.parked.push_back(read);
        Entry::Queued
    }

    /// The slow READ this thread served is done: the next queued one, which
    /// keeps its place in the lane, or `None` and the place is given up.
    pub(super) fn next(&self) -> Option<Parked> {
        let mut s = lock(&self.state);
        let next = s.parked.pop_front();
        if next.is_none() {
            s.busy -= 1;
        }
        next
    }

    /// Slow READs queued now.
    #[cfg(test)]
    pub(super) fn queued(&self) -> usize {
        lock(&self.state).parked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(cookie: u64) -> Parked {
        Parked {
            cookie,
            offset: cookie * 4096,
            len: 4096,
            hint: IoHint::default(),
            cost: 64,
        }
    }

    #[test]
    fn a_quarter_of_the_threads_stays_out_of_the_slow_lane() {
        assert_eq!(lane_cap(16), 12);
        assert_eq!(lane_cap(4), 3);
        assert_eq!(lane_cap(2), 1);
        assert_eq!(lane_cap(5), 3);
        assert_eq!(lane_cap(1), usize::MAX);
    }

    #[test]
    fn slow_reads_past_the_lane_queue_in_order_and_keep_the_lane_full() {
        let lanes = Lanes::new();
        for c in 0..3 {
            assert_eq!(
                lanes.enter(read(c), 4),
                Entry::Serve,
                "read {c} is served at once"
            );
        }
        for c in 3..6 {
            assert_eq!(lanes.enter(read(c), 4), Entry::Queued, "read {c} waits");
        }
        assert_eq!(lanes.queued(), 3);
        // Each ending read hands its place to the oldest waiting one.
        assert_eq!(lanes.next().map(|p| p.cookie), Some(3));
        assert_eq!(lanes.next().map(|p| p.cookie), Some(4));
        // A read arriving while others wait queues behind them, even with
        // no place free, so order holds.
        assert_eq!(lanes.enter(read(6), 4), Entry::Queued);
        assert_eq!(lanes.next().map(|p| p.cookie), Some(5));
        assert_eq!(lanes.next().map(|p| p.cookie), Some(6));
        // Nothing waits: places are given up one by one, then a new read
        // is served at once.
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.enter(read(7), 4), Entry::Serve);
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.enter(read(8), 4), Entry::Serve);
    }

    #[test]
    fn a_lane_grown_with_the_threads_serves_the_oldest_waiting_read_first() {
        let lanes = Lanes::new();
        // Two threads now: a lane of one.
        assert_eq!(lanes.enter(read(0), 2), Entry::Serve);
        assert_eq!(lanes.enter(read(1), 2), Entry::Queued);
        assert_eq!(lanes.enter(read(2), 2), Entry::Queued);
        // The pool may have 16 threads now: the next slow read takes a
        // place, for the oldest queued read; it queues behind the rest.
        assert_eq!(lanes.enter(read(3), 16), Entry::ServeQueued(read(1)));
        assert_eq!(lanes.queued(), 2);
        assert_eq!(lanes.enter(read(4), 16), Entry::ServeQueued(read(2)));
        assert_eq!(lanes.next(), Some(read(3)));
        assert_eq!(lanes.next(), Some(read(4)));
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.next(), None);
        assert_eq!(lanes.queued(), 0);
    }
}
