//! [`EarlyWriteback`]: starts the kernel's write-back of a buffered
//! device's dirty pages once [`EVERY`] bytes were written since the last
//! start, on a thread of its own, so that what a later `fdatasync` has to
//! write stays near that bound.
//!
//! Without it the kernel holds a buffered image's writes until its own
//! thresholds (a tenth of memory, or 30 s): after a minute of random
//! writes on this machine's 24 GiB, the first sync of the HDD image wrote
//! about 1.5 GB of pages the user never asked to be durable, and every
//! operation behind that sync (the write log's write-back, a user's FLUSH)
//! waited for it: the log's write-back began 3–4 s into an idle spell.
//! The write-back started here does not wait for the pages to reach the
//! disk (`SYNC_FILE_RANGE_WRITE` only), and runs off the I/O threads (the
//! call may wait for room in the device's queue).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Bytes written between two starts of write-back.
pub(crate) const EVERY: u64 = 64 << 20;

struct Shared {
    pending: AtomicU64,
    stop: AtomicBool,
}

/// The thread that starts write-back, and what it is told.
pub(crate) struct EarlyWriteback {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl EarlyWriteback {
    /// Start the thread on a duplicate of `file` (closed when the thread
    /// ends, which [`Drop`] waits for). `None` if the file cannot be
    /// duplicated or the thread not started: writes then go as before.
    pub(crate) fn start(file: &File, name: &str) -> Option<EarlyWriteback> {
        let file = file.try_clone().ok()?;
        let shared = Arc::new(Shared {
            pending: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tierd-pagewb".into())
            .spawn(move || run(&file, &s))
            .map_err(|e| tracing::warn!("{name}: no early write-back thread: {e}"))
            .ok()?;
        Some(EarlyWriteback {
            shared,
            thread: Some(thread),
        })
    }

    /// `len` bytes were written: past [`EVERY`] since the last start, wake
    /// the thread.
    pub(crate) fn wrote(&self, len: u64) {
        let before = self.shared.pending.fetch_add(len, Ordering::Relaxed);
        if before < EVERY && before + len >= EVERY {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
    }

    /// Bytes written since write-back was last started (for tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> u64 {
        self.shared.pending.load(Ordering::Relaxed)
    }
}

fn run(file: &File, s: &Shared) {
    loop {
        std::thread::park();
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        if s.pending.load(Ordering::Relaxed) < EVERY {
            // A spurious wake-up (the count is left alone: the writer that
            // takes it past the bound wakes this thread again).
            continue;
        }
        // Bytes written until the call below are in the pages it starts
        // writing: none is lost by counting from zero again here.
        s.pending.store(0, Ordering::Relaxed);
        // SAFETY: sync_file_range takes a file descriptor and integers, no
        // memory; the descriptor is `file`'s, open for as long as this
        // borrow lives. Offset 0 and length 0 mean the whole file.
        let r =
            unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        if r != 0 {
            // Only an optimisation: the next sync writes what this did not.
            tracing::debug!("sync_file_range: {}", std::io::Error::last_os_error());
        }
    }
}

impl Drop for EarlyWriteback {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn write_back_starts_past_the_bound_and_the_thread_ends_with_it() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("img");
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(2 * EVERY).unwrap();
        let early = EarlyWriteback::start(&file, "img").unwrap();
        let chunk = vec![7u8; 1 << 20];
        for i in 0..(EVERY >> 20) - 1 {
            file.write_all_at(&chunk, i << 20).unwrap();
            early.wrote(1 << 20);
        }
        assert_eq!(
            early.pending(),
            EVERY - (1 << 20),
            "below the bound: nothing started"
        );
        file.write_all_at(&chunk, EVERY - (1 << 20)).unwrap();
        early.wrote(1 << 20);
        let t0 = std::time::Instant::now();
        while early.pending() != 0 {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the thread did not start write-back"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(early);
        let mut back = vec![0u8; 1 << 20];
        file.read_exact_at(&mut back, 3 << 20).unwrap();
        assert_eq!(back, chunk);
    }
}
