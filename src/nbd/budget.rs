//! The byte budget of one connection: request and reply data it may hold
//! in memory at once ([`ServerOptions::max_in_flight_bytes`], raised so
//! that the costliest single request always fits). The thread reading a
//! request takes its cost before it receives the payload; the cost comes
//! back once the reply is out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use super::lock::lock;
use super::options::ServerOptions;
use super::reply::MAX_DESCRIPTORS;

/// Bytes accounted to every in-flight request besides its data buffer.
pub(super) const REQUEST_OVERHEAD: u32 = 256;

/// Bytes of request data a connection may hold in memory.
pub(super) struct Budget {
    free: Mutex<Room>,
    freed: Condvar,
}

/// Budget bytes free, and whether a reader waits for some (only then is
/// there anyone to wake: a wake-up costs a system call).
struct Room {
    bytes: usize,
    /// Bytes taken past the budget ([`Budget::overdraw`]), paid back
    /// first by what is released.
    owed: usize,
    waiting: bool,
}

impl Budget {
    /// The budget of a connection served with `opts`.
    pub(super) fn new(opts: &ServerOptions) -> Budget {
        Budget {
            free: Mutex::new(Room {
                bytes: byte_budget(opts),
                owed: 0,
                waiting: false,
            }),
            freed: Condvar::new(),
        }
    }

    /// Take `cost` bytes, waiting for them; `false` if `stopping` turns
    /// true first (then [`Budget::wake`] is called).
    pub(super) fn acquire(&self, cost: usize, stopping: &AtomicBool) -> bool {
        let mut free = lock(&self.free);
        loop {
            if stopping.load(Ordering::Acquire) {
                return false;
            }
            if free.bytes >= cost {
                free.bytes -= cost;
                free.waiting = false;
                return true;
            }
            free.waiting = true;
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Take `cost` bytes without waiting, past the budget if it must be:
    /// for a slow READ taken off the slow lane's queue, which waited there
    /// holding [`REQUEST_OVERHEAD`] alone. Waiting instead could wait for
    /// ever, on bytes held by other queued READs; the overdraft is bounded
    /// by the lane (its places times the largest request). Readers wait
    /// until it is paid back.
    pub(super) fn overdraw(&self, cost: usize) {
        let mut free = lock(&self.free);
        let taken = free.bytes.min(cost);
        free.bytes -= taken;
        free.owed += cost - taken;
    }

    /// Give `cost` bytes back.
    pub(super) fn release(&self, cost: usize) {
        if cost == 0 {
            return;
        }
        let mut free = lock(&self.free);
        let paid = free.owed.min(cost);
        free.owed -= paid;
        free.bytes += cost - paid;
        if free.waiting {
            self.freed.notify_all();
        }
    }

    /// Wake a reader that waits for bytes (to see that it should stop).
    pub(super) fn wake(&self) {
        let _free = lock(&self.free);
        self.freed.notify_all();
    }
}

/// Byte budget of one connection: the configured one, raised so that the
/// costliest single request always fits (else it would wait forever).
pub(super) fn byte_budget(opts: &ServerOptions) -> usize {
    let largest = (opts.max_request as usize).max(8 * MAX_DESCRIPTORS);
    opts.max_in_flight_bytes
        .max(largest + REQUEST_OVERHEAD as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_fits_the_costliest_request() {
        let tiny = ServerOptions {
            max_request: 4096,
            max_in_flight_bytes: 1,
            ..ServerOptions::default()
        };
        let need = (8 * MAX_DESCRIPTORS) + REQUEST_OVERHEAD as usize;
        assert!(byte_budget(&tiny) >= need);
        let huge = ServerOptions {
            max_request: u32::MAX,
            ..ServerOptions::default()
        };
        assert!(byte_budget(&huge) >= u32::MAX as usize);
        assert_eq!(byte_budget(&ServerOptions::default()), 128 << 20);
    }

    #[test]
    fn an_overdraft_is_paid_back_before_bytes_are_free_again() {
        let opts = ServerOptions {
            max_request: 4096,
            max_in_flight_bytes: 0,
            ..ServerOptions::default()
        };
        let budget = Budget::new(&opts);
        let all = byte_budget(&opts);
        let stopping = AtomicBool::new(false);
        assert!(budget.acquire(all, &stopping));
        budget.overdraw(1000);
        // Half the budget back pays the 1000 owed first.
        budget.release(all / 2);
        assert_eq!(lock(&budget.free).bytes, all / 2 - 1000);
        budget.release(1000);
        budget.release(all - all / 2);
        assert_eq!(lock(&budget.free).bytes, all);
        assert_eq!(lock(&budget.free).owed, 0);
    }
}
