//! A reader-writer lock in four bytes, one per extent of the extent map.
//!
//! At sixteen million extents every byte of an extent's lock is 16 MiB of
//! resident memory: `parking_lot`'s lock takes eight, this one four. It is
//! a futex word (sleeping and waking through `atomic-wait`) with the same
//! policy as `parking_lot`'s: a writer that has to wait makes new readers
//! wait behind it, so a steady stream of readers cannot starve a writer;
//! `try_read` fails then too. It is not re-entrant: a thread that holds
//! the shared lock and asks for it again may wait for a writer that waits
//! for it.
//!
//! The word: bit 31 is set while a writer holds the lock, bit 30 while a
//! writer waits for it, bit 29 while anyone sleeps on the word (whoever
//! releases the lock then clears it and wakes them all: contention on one
//! extent is rare, so waking all is cheaper than keeping a queue), and the
//! low 29 bits count the readers.

use std::sync::atomic::{AtomicU32, Ordering};

/// A writer holds the lock.
const WRITER: u32 = 1 << 31;
/// A writer waits: new readers stand back.
const WRITER_WAITING: u32 = 1 << 30;
/// Someone sleeps on the word.
const PARKED: u32 = 1 << 29;
/// The readers' count.
const READERS: u32 = PARKED - 1;

/// Spins before sleeping: most holds are short (a lookup, one device I/O
/// on a fast SSD), and a futex sleep costs two system calls.
const SPINS: u32 = 64;

/// What a taker of one kind of hold waits for and does to the word.
struct How {
    /// Bits that keep it waiting.
    blocked: u32,
    /// The word once it holds the lock.
    taken: fn(u32) -> u32,
    /// Bits it sets while it sleeps.
    sleeping: u32,
}

/// A reader: waits while a writer holds the lock or waits for it.
const SHARED: How = How {
    blocked: WRITER | WRITER_WAITING,
    taken: add_reader,
    sleeping: PARKED,
};

/// A writer: waits while anyone holds the lock, and says it waits while it
/// sleeps. Taking the lock clears "a writer waits" even if another writer
/// still waits: that one sets it again when it wakes (every sleeper is
/// woken when this writer releases the lock).
const EXCLUSIVE: How = How {
    blocked: WRITER | READERS,
    taken: take_writer,
    sleeping: PARKED | WRITER_WAITING,
};

fn add_reader(s: u32) -> u32 {
    assert!(s & READERS != READERS, "an extent lock's readers overflow");
    s + 1
}

fn take_writer(s: u32) -> u32 {
    (s & !WRITER_WAITING) | WRITER
}

/// The lock.
#[derive(Debug, Default)]
pub(crate) struct RawLock(AtomicU32);

impl RawLock {
    /// A free lock.
    pub(crate) const fn new() -> RawLock {
        RawLock(AtomicU32::new(0))
    }

    /// Take the shared lock if no writer holds it or waits for it. (`then`,
    /// not `then_some`: a guard made eagerly and dropped on failure would
    /// release a hold never taken.)
    pub(crate) fn try_read(&self) -> Option<ReadGuard<'_>> {
        self.try_take(&SHARED).then(|| ReadGuard(self))
    }

    /// Wait for the shared lock.
    pub(crate) fn read(&self) -> ReadGuard<'_> {
        self.take(&SHARED);
        ReadGuard(self)
    }

    /// Take the exclusive lock if nobody holds it.
    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_>> {
        self.try_take(&EXCLUSIVE).then(|| WriteGuard(self))
    }

    /// Wait for the exclusive lock.
    pub(crate) fn write(&self) -> WriteGuard<'_> {
        self.take(&EXCLUSIVE);
        WriteGuard(self)
    }

    /// Take the lock `how` asks for if nothing blocks it now.
    fn try_take(&self, how: &How) -> bool {
        let mut s = self.0.load(Ordering::Relaxed);
        while s & how.blocked == 0 {
            match self.0.compare_exchange_weak(
                s,
                (how.taken)(s),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
        false
    }

    /// Wait for the lock `how` asks for: spin a little, then sleep.
    fn take(&self, how: &How) {
        let mut spins = 0;
        loop {
            if self.try_take(how) {
                return;
            }
            let s = self.0.load(Ordering::Relaxed);
            if s & how.blocked == 0 {
                // Freed meanwhile: try again at once.
                continue;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            self.sleep(s, how.sleeping);
        }
    }

    /// Set `bits` in the word `s` and sleep while it stays so (returning
    /// at once if it changed first). The kernel compares the word before
    /// sleeping, so a release between the set and the sleep (which clears
    /// `PARKED`) is never missed.
    fn sleep(&self, s: u32, bits: u32) {
        let want = s | bits;
        if want == s
            || self
                .0
                .compare_exchange(s, want, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            atomic_wait::wait(&self.0, want);
        }
    }

    /// Wake every sleeper if `prev` says there are some (and clear the mark,
    /// unless the caller's release already did).
    fn wake(&self, prev: u32, cleared: bool) {
        if prev & PARKED == 0 {
            return;
        }
        if !cleared && self.0.fetch_and(!PARKED, Ordering::Relaxed) & PARKED == 0 {
            // Another release cleared it and woke them.
            return;
        }
        atomic_wait::wake_all(&self.0);
    }

    #[cfg(test)]
    fn word(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The shared lock, released when dropped.
#[must_use]
#[derive(Debug)]
pub(crate) struct ReadGuard<'a>(&'a RawLock);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        let prev = self.0 .0.fetch_sub(1, Ordering::Release);
        // The last reader out lets the sleepers (a writer waiting, and
        // readers waiting behind it) try again.
        if prev & READERS == 1 {
            self.0.wake(prev, false);
        }
    }
}

/// The exclusive lock, released when dropped.
#[must_use]
#[derive(Debug)]
pub(crate) struct WriteGuard<'a>(&'a RawLock);

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        // Clears the writer, "a writer waits" and the sleepers' mark at
        // once: every sleeper wakes and sets again what it still needs.
        let prev = self.0 .0.swap(0, Ordering::Release);
        self.0.wake(prev, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn the_lock_is_four_bytes() {
        assert_eq!(std::mem::size_of::<RawLock>(), 4);
    }

    #[test]
    fn readers_share_and_a_writer_excludes() {
        let l = RawLock::new();
        let a = l.read();
        let b = l.try_read().expect("readers share");
        assert!(l.try_write().is_none(), "readers exclude a writer");
        drop((a, b));
        let w = l.try_write().expect("free");
        assert!(l.try_read().is_none() && l.try_write().is_none());
        drop(w);
        assert_eq!(l.word(), 0, "nothing left behind");
    }

    #[test]
    fn a_waiting_writer_holds_back_new_readers_and_gets_the_lock() {
        let l = Arc::new(RawLock::new());
        let r = l.read();
        let w = {
            let l = l.clone();
            std::thread::spawn(move || {
                let _g = l.write();
            })
        };
        let start = Instant::now();
        while l.word() & WRITER_WAITING == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "writer never waited"
            );
            std::thread::yield_now();
        }
        assert!(l.try_read().is_none(), "a waiting writer goes first");
        drop(r);
        w.join().expect("writer");
        assert!(l.try_read().is_some());
        assert_eq!(l.word(), 0);
    }

    #[test]
    fn threads_hammering_one_lock_never_overlap_a_writer() {
        // Each writer makes the pair unequal for a moment; a reader that
        // ever sees them differ saw a writer's hold overlap its own.
        let l = Arc::new(RawLock::new());
        let pair = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let (l, pair) = (l.clone(), pair.clone());
                std::thread::spawn(move || {
                    let mut torn = 0;
                    for i in 0..20_000u64 {
                        if (i + t) % 3 == 0 {
                            let _g = if i % 2 == 0 {
                                l.write()
                            } else {
                                match l.try_write() {
                                    Some(g) => g,
                                    None => continue,
                                }
                            };
                            let v = pair.0.load(Ordering::Relaxed) + 1;
                            pair.0.store(v, Ordering::Relaxed);
                            std::hint::spin_loop();
                            pair.1.store(v, Ordering::Relaxed);
                        } else {
                            let _g = l.read();
                            if pair.0.load(Ordering::Relaxed) != pair.1.load(Ordering::Relaxed) {
                                torn += 1;
                            }
                        }
                    }
                    torn
                })
            })
            .collect();
        let torn: u32 = threads.into_iter().map(|t| t.join().expect("thread")).sum();
        assert_eq!(torn, 0);
        assert_eq!(l.word(), 0, "every hold released, nobody left asleep");
        assert!(pair.0.load(Ordering::Relaxed) > 0);
    }
}
