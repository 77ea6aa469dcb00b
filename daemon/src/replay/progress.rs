//! Progress of the replayer's long steps on stderr: a bar on a terminal,
//! else a plain line every few seconds (a log or a pipe gets no escape
//! codes), and always a last line saying how the step ended. Updated from
//! any thread.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use parking_lot::Mutex;
use tierd::units::human_bytes;

/// Seconds between two plain lines.
const LINE_EVERY: Duration = Duration::from_secs(10);

/// What a step counts.
#[derive(Clone, Copy)]
pub enum Unit {
    /// Bytes of a known total.
    Bytes,
    /// Requests of a known total.
    Requests,
    /// Nothing: a wait.
    Wait,
}

/// One step's progress.
pub struct Progress {
    bar: Option<ProgressBar>,
    what: String,
    unit: Unit,
    total: u64,
    pos: AtomicU64,
    msg: Mutex<String>,
    started: Instant,
    last_line: Mutex<Instant>,
}

impl Progress {
    /// Start a step of `total` units (ignored for a wait).
    pub fn new(what: &str, unit: Unit, total: u64) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (b, template) = match unit {
                Unit::Bytes => (
                    ProgressBar::new(total),
                    "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
                ),
                Unit::Requests => (
                    ProgressBar::new(total),
                    "{msg} [{bar:30}] {human_pos}/{human_len} ({elapsed})",
                ),
                Unit::Wait => (ProgressBar::new_spinner(), "{spinner} {msg} ({elapsed})"),
            };
            b.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_message(what.to_string());
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        let p = Progress {
            bar,
            what: what.to_string(),
            unit,
            total,
            pos: AtomicU64::new(0),
            msg: Mutex::new(String::new()),
            started: Instant::now(),
            last_line: Mutex::new(Instant::now()),
        };
        if p.bar.is_none() {
            p.line(&p.text());
        }
        p
    }

    /// `n` more units done.
    pub fn inc(&self, n: u64) {
        self.pos.fetch_add(n, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.inc(n);
        }
        self.maybe_line();
    }

    /// `pos` units done.
    pub fn set(&self, pos: u64) {
        self.pos.store(pos, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.set_position(pos);
        }
        self.maybe_line();
    }

    /// What the step is waiting for or doing now.
    pub fn message(&self, msg: String) {
        self.set_message(msg);
        self.maybe_line();
    }

    /// `pos` units done, and what the step does now (one line for both).
    pub fn update(&self, pos: u64, msg: String) {
        self.set_message(msg);
        self.set(pos);
    }

    fn set_message(&self, msg: String) {
        if let Some(b) = &self.bar {
            b.set_message(format!("{}: {msg}", self.what));
        }
        *self.msg.lock() = msg;
    }

    /// The step is over: clear the bar and say `how` on one line.
    pub fn finish(&self, how: &str) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.line(&format!("{}: {how}", self.what));
    }

    fn maybe_line(&self) {
        if self.bar.is_some() {
            return;
        }
        let due = self.last_line.try_lock().is_some_and(|mut last| {
            let due = last.elapsed() >= LINE_EVERY;
            if due {
                *last = Instant::now();
            }
            due
        });
        if due {
            self.line(&self.text());
        }
    }

    fn text(&self) -> String {
        let pos = self.pos.load(Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let mut t = match self.unit {
            Unit::Bytes => format!(
                "{}: {} of {} ({}/s)",
                self.what,
                human_bytes(pos),
                human_bytes(self.total),
                human_bytes((pos as f64 / secs) as u64)
            ),
            Unit::Requests => format!("{}: {pos} of {}", self.what, self.total),
            Unit::Wait => self.what.clone(),
        };
        let msg = self.msg.lock();
        if !msg.is_empty() {
            t.push_str(": ");
            t.push_str(&msg);
        }
        t
    }

    fn line(&self, text: &str) {
        let at = self.started.elapsed().as_secs_f64();
        // Best effort: a closed stderr must not stop the run.
        let _ = writeln!(std::io::stderr().lock(), "[{at:>7.1} s] {text}");
    }
}
