//! How a run tells its progress: an indicatif bar on a terminal, or plain
//! lines (one per step, no carriage returns or escape codes) when the
//! output is a log or a pipe, so a run started from a script or a CI job
//! still shows where it is.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use indicatif::ProgressBar;

/// A run's progress display: suite `pos` of `len` and what it does now.
pub enum Progress {
    /// A redrawn bar (a terminal).
    Bar(ProgressBar),
    /// One plain line per message on stderr.
    Lines(Lines),
}

/// The state of [`Progress::Lines`].
pub struct Lines {
    started: Instant,
    pos: AtomicU64,
    len: AtomicU64,
}

impl Progress {
    /// Plain lines on stderr.
    pub fn lines() -> Progress {
        Progress::Lines(Lines {
            started: Instant::now(),
            pos: AtomicU64::new(0),
            len: AtomicU64::new(0),
        })
    }

    /// How many suites the run has.
    pub fn set_length(&self, len: u64) {
        match self {
            Progress::Bar(b) => b.set_length(len),
            Progress::Lines(l) => l.len.store(len, Ordering::Relaxed),
        }
    }

    /// What the run does now.
    pub fn message(&self, msg: &str) {
        match self {
            Progress::Bar(b) => {
                b.set_message(msg.to_string());
                b.tick();
            }
            Progress::Lines(l) => {
                let line = l.line(msg);
                // Progress is best effort: a closed stderr must not stop
                // the run.
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
        }
    }

    /// One more suite done.
    pub fn inc(&self) {
        match self {
            Progress::Bar(b) => b.inc(1),
            Progress::Lines(l) => {
                l.pos.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The run is over: clear the bar (lines stay).
    pub fn finish(&self) {
        if let Progress::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}

impl Lines {
    /// `[  12.3 s] suite 2/7: random/rand-read-4k-qd1 hybrid: 105 IOPS`
    fn line(&self, msg: &str) -> String {
        let (pos, len) = (
            self.pos.load(Ordering::Relaxed),
            self.len.load(Ordering::Relaxed),
        );
        let at = self.started.elapsed().as_secs_f64();
        if len == 0 {
            format!("[{at:>7.1} s] {msg}")
        } else {
            format!("[{at:>7.1} s] suite {}/{len}: {msg}", (pos + 1).min(len))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_plain_and_count_suites() {
        let p = Progress::lines();
        let Progress::Lines(l) = &p else {
            panic!("lines() makes lines");
        };
        assert!(l.line("pre-filling").ends_with("] pre-filling"));
        p.set_length(3);
        p.inc();
        let line = l.line("suite random");
        assert!(line.contains("suite 2/3: suite random"), "{line}");
        assert!(!line.contains('\r') && !line.contains('\x1b'), "{line:?}");
    }
}
