//! Virtual time for benchmarks: a deterministic discrete-event scheduler for
//! threads. Participants run one at a time; a participant that waits for a
//! moment in virtual time yields, and the clock jumps to the earliest moment
//! any participant waits for (ties broken by arrival order). Because exactly
//! one thread runs at a time and the order is fixed, a run is reproducible
//! for a given seed. Participants never wait while holding a volume lock:
//! device models only advance a thread's own time, and the thread waits
//! after its request returns.
//!
//! The scheduler's time reaches the engine as two [`Clock`]s:
//! - [`VirtualClock`], the shared time: the volume's clock (heat, the
//!   migrator's token buckets); its [`Clock::sleep`] makes the calling
//!   participant wait, handing the turn to others (the migrator's pacing);
//! - [`DeviceClock`], each thread's own time: the timed devices' clock. It
//!   runs ahead of the shared time by the device time of what the thread did
//!   since it last waited, and its sleep never waits (a device sleeps while
//!   the volume may hold locks).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use tierd::clock::Clock;

struct State {
    now: Duration,
    waiting: BTreeMap<(Duration, u64), usize>,
    running: Option<usize>,
    seq: u64,
    next_id: usize,
    open: bool,
}

/// The scheduler; share it with [`Arc`].
pub struct VirtualSched {
    st: Mutex<State>,
    /// One condition variable per participant: only the one chosen to run
    /// is woken.
    cvs: Mutex<Vec<Arc<Condvar>>>,
}

/// A thread's own time, and the participant it runs.
#[derive(Default, Clone, Copy)]
struct Own {
    now: Duration,
    participant: Option<usize>,
}

thread_local! {
    /// The calling thread's [`Own`], and the scheduler (by address) it
    /// belongs to: a thread-local, since it is read on every device
    /// operation (a shared map of threads cost a tenth of a bench's time).
    static OWN: Cell<(usize, Own)> = const {
        Cell::new((
            0,
            Own {
                now: Duration::ZERO,
                participant: None,
            },
        ))
    };
}

impl Default for VirtualSched {
    fn default() -> Self {
        VirtualSched {
            st: Mutex::new(State {
                now: Duration::ZERO,
                waiting: BTreeMap::new(),
                running: None,
                seq: 0,
                next_id: 0,
                open: false,
            }),
            cvs: Mutex::new(Vec::new()),
        }
    }
}

/// One thread's handle on the scheduler.
pub struct Participant {
    sched: Arc<VirtualSched>,
    id: usize,
}

impl VirtualSched {
    /// A scheduler at time zero.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Virtual now.
    pub fn now(&self) -> Duration {
        self.st.lock().now
    }

    /// The shared time as a [`Clock`] for the engine.
    pub fn clock(self: &Arc<Self>) -> Arc<VirtualClock> {
        Arc::new(VirtualClock(self.clone()))
    }

    /// Each thread's own time as a [`Clock`] for the timed devices.
    pub fn device_clock(self: &Arc<Self>) -> Arc<DeviceClock> {
        Arc::new(DeviceClock(self.clone()))
    }

    /// The calling thread's own time and participant.
    fn own(&self) -> Own {
        let me = self.key();
        OWN.with(|c| match c.get() {
            (k, own) if k == me => own,
            _ => Own::default(),
        })
    }

    /// This scheduler's identity in [`OWN`].
    fn key(&self) -> usize {
        self as *const Self as usize
    }

    fn update_own(&self, f: impl FnOnce(&mut Own)) {
        let me = self.key();
        OWN.with(|c| {
            let mut own = match c.get() {
                (k, own) if k == me => own,
                _ => Own::default(),
            };
            f(&mut own);
            c.set((me, own));
        });
    }

    fn set_own_now(&self, t: Duration) {
        self.with_own(|own| *own = t);
    }

    fn with_own(&self, f: impl FnOnce(&mut Duration)) {
        self.update_own(|own| f(&mut own.now));
    }

    fn cv(&self, id: usize) -> Arc<Condvar> {
        let mut cvs = self.cvs.lock();
        while cvs.len() <= id {
            cvs.push(Arc::new(Condvar::new()));
        }
        cvs[id].clone()
    }

    fn dispatch(&self, st: &mut State) {
        if st.running.is_some() || !st.open {
            return;
        }
        if let Some(((t, _), id)) = st.waiting.pop_first() {
            st.now = st.now.max(t);
            st.running = Some(id);
            self.cv(id).notify_one();
        }
    }

    /// Run `n` participants, each calling `f(participant, index)` on its
    /// own thread, all starting at the current virtual time; returns their
    /// results in index order when every one has finished.
    pub fn phase<T: Send>(
        self: &Arc<Self>,
        n: usize,
        f: impl Fn(&Participant, usize) -> T + Sync,
    ) -> Vec<T> {
        let ids: Vec<usize> = {
            let mut st = self.st.lock();
            st.open = false;
            (0..n)
                .map(|_| {
                    let id = st.next_id;
                    st.next_id += 1;
                    let key = (st.now, st.seq);
                    st.seq += 1;
                    st.waiting.insert(key, id);
                    id
                })
                .collect()
        };
        std::thread::scope(|s| {
            let handles: Vec<_> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let p = Participant {
                        sched: self.clone(),
                        id: *id,
                    };
                    let f = &f;
                    s.spawn(move || {
                        p.enter();
                        p.wait_turn();
                        let r = f(&p, i);
                        p.leave();
                        r
                    })
                })
                .collect();
            {
                let mut st = self.st.lock();
                st.open = true;
                self.dispatch(&mut st);
            }
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(e) => std::panic::resume_unwind(e),
                })
                .collect()
        })
    }
}

impl Participant {
    /// Claim the calling thread for this participant.
    fn enter(&self) {
        self.sched.update_own(|own| own.participant = Some(self.id));
    }

    fn wait_turn(&self) {
        let cv = self.sched.cv(self.id);
        let mut st = self.sched.st.lock();
        while st.running != Some(self.id) {
            cv.wait(&mut st);
        }
    }

    fn leave(&self) {
        OWN.with(|c| c.set((0, Own::default())));
        let mut st = self.sched.st.lock();
        if st.running == Some(self.id) {
            st.running = None;
        }
        self.sched.dispatch(&mut st);
    }

    /// Virtual now.
    pub fn now(&self) -> Duration {
        self.sched.now()
    }

    /// This thread's own time ([`DeviceClock`]).
    pub fn own_now(&self) -> Duration {
        self.sched.own().now
    }

    /// Set this thread's own time ([`DeviceClock`]).
    pub fn set_own_now(&self, t: Duration) {
        self.sched.set_own_now(t);
    }

    /// Wait until virtual time `t` (or yield, if `t` is not in the future).
    pub fn sleep_until(&self, t: Duration) {
        {
            let mut st = self.sched.st.lock();
            let key = (t.max(st.now), st.seq);
            st.seq += 1;
            st.waiting.insert(key, self.id);
            st.running = None;
            self.sched.dispatch(&mut st);
            if st.running == Some(self.id) {
                // Still the earliest: no hand-off needed.
                return;
            }
        }
        self.wait_turn();
    }
}

/// The scheduler's shared time as a [`Clock`] for the engine.
pub struct VirtualClock(pub Arc<VirtualSched>);

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        self.0.now()
    }

    /// The calling thread's own time: the device time it has done since it
    /// last waited counts.
    fn io_now(&self) -> Duration {
        self.0.own().now.max(self.0.now())
    }

    fn unix_secs(&self) -> u64 {
        self.0.now().as_secs()
    }

    /// The calling participant waits until `d` past the shared time, or
    /// until its own time if that is later (the device time of what it did
    /// since it last waited), then its own time is the shared time. Even a
    /// zero `d` hands the turn to a participant due at the same moment. A
    /// thread that is no participant has no turn to hand over: nothing
    /// happens.
    fn sleep(&self, d: Duration) {
        let own = self.0.own();
        let Some(id) = own.participant else {
            return;
        };
        let p = Participant {
            sched: self.0.clone(),
            id,
        };
        p.sleep_until(own.now.max(p.now() + d));
        p.set_own_now(p.now());
    }
}

/// Each thread's own virtual time as a [`Clock`] for the timed devices: a
/// device operation starts at the thread's own time and moves it to the
/// completion; nothing waits.
pub struct DeviceClock(pub Arc<VirtualSched>);

impl Clock for DeviceClock {
    fn now(&self) -> Duration {
        self.0.own().now
    }

    fn unix_secs(&self) -> u64 {
        self.now().as_secs()
    }

    fn sleep(&self, d: Duration) {
        self.0.with_own(|t| *t += d);
    }

    fn sleep_until(&self, deadline: Duration) {
        self.0.with_own(|t| *t = (*t).max(deadline));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participants_interleave_in_virtual_time_deterministically() {
        let run = || {
            let s = VirtualSched::new();
            let log = Mutex::new(Vec::new());
            s.phase(3, |p, i| {
                for k in 0..4u64 {
                    log.lock().push((p.now(), i));
                    p.sleep_until(p.now() + Duration::from_millis(10 * (i as u64 + 1) + k));
                }
            });
            (s.now(), log.into_inner())
        };
        let (end, a) = run();
        let (_, b) = run();
        assert_eq!(a, b, "deterministic");
        // Worker 2 sleeps 30..33 ms four times: ends at 126 ms.
        assert_eq!(end, Duration::from_millis(30 + 31 + 32 + 33));
        // Events are in time order.
        assert!(a.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn the_shared_clock_hands_the_turn_over_and_device_time_is_per_thread() {
        let s = VirtualSched::new();
        let (shared, dev) = (s.clock(), s.device_clock());
        let ms = Duration::from_millis;
        let log = Mutex::new(Vec::new());
        s.phase(2, |p, i| {
            // Device time runs ahead of the shared time; nothing waits.
            dev.sleep(ms(3 * (i as u64 + 1)));
            log.lock().push((i, p.now(), dev.now()));
            // The shared clock's sleep waits for the own time when later,
            // letting the other participant run meanwhile.
            shared.sleep(ms(1));
            log.lock().push((i, p.now(), dev.now()));
        });
        let log = log.into_inner();
        assert_eq!(
            log,
            [
                (0, ms(0), ms(3)),
                (1, ms(0), ms(6)),
                (0, ms(3), ms(3)),
                (1, ms(6), ms(6)),
            ]
        );
        // Outside a participant: no turn to hand over, own time from zero.
        shared.sleep(ms(1000));
        assert_eq!(shared.now(), ms(6));
        assert_eq!(dev.now(), ms(0));
        dev.sleep_until(ms(2));
        assert_eq!(dev.now(), ms(2));
    }
}
