//! [`TimedDevice`]: gives any device the timing of a modelled drive.
//!
//! Two clocks:
//! - **real**: the I/O is done on the inner device, then the caller waits
//!   until the model's completion time with a precise sleep (a coarse sleep
//!   followed by a short spin: tokio's millisecond timer is too coarse for an
//!   SSD). When the real I/O itself took longer than the model allows, the
//!   request counts as an *overrun*.
//! - **virtual**: nothing sleeps. Each thread carries its own virtual time
//!   ([`set_virtual_now`]); an operation is submitted to the model at that
//!   time and advances it to the completion. The benchmark's scheduler then
//!   makes the thread wait, in virtual time, until then.
//!
//! One model instance per device, shared by every caller.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::model::{OpKind, TimingModel};
use super::BlockDevice;

/// Which clock a [`TimedDevice`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeMode {
    /// Wall-clock time: callers sleep until modelled completion.
    Real,
    /// Per-thread virtual time, advanced by each operation.
    Virtual,
}

thread_local! {
    static VNOW: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Set this thread's virtual time.
pub fn set_virtual_now(t: Duration) {
    VNOW.with(|c| c.set(t));
}

/// This thread's virtual time.
pub fn virtual_now() -> Duration {
    VNOW.with(|c| c.get())
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Time since the process-wide origin of real-mode models.
pub fn real_now() -> Duration {
    origin().elapsed()
}

/// Sleep until `deadline` (on the [`real_now`] scale) with sub-millisecond
/// precision.
pub fn sleep_until_precise(deadline: Duration) {
    const SPIN: Duration = Duration::from_micros(150);
    loop {
        let now = real_now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep(left - SPIN);
        } else {
            std::thread::yield_now();
        }
    }
}

/// A device with a drive's timing.
pub struct TimedDevice {
    inner: Arc<dyn BlockDevice>,
    model: Mutex<Box<dyn TimingModel>>,
    mode: TimeMode,
    ops: AtomicU64,
    overruns: AtomicU64,
}

impl TimedDevice {
    /// Wrap `inner` with `model` on the given clock.
    pub fn new(inner: Arc<dyn BlockDevice>, model: Box<dyn TimingModel>, mode: TimeMode) -> Self {
        TimedDevice {
            inner,
            model: Mutex::new(model),
            mode,
            ops: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
        }
    }

    /// Operations timed so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Real-clock operations whose real I/O took longer than the model.
    pub fn overruns(&self) -> u64 {
        self.overruns.load(Ordering::Relaxed)
    }

    fn timed<T>(
        &self,
        kind: OpKind,
        offset: u64,
        len: u64,
        io: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        self.ops.fetch_add(1, Ordering::Relaxed);
        match self.mode {
            TimeMode::Virtual => {
                let t = virtual_now();
                let r = io()?;
                let done = self.model.lock().submit(kind, offset, len, t);
                set_virtual_now(done.max(t));
                Ok(r)
            }
            TimeMode::Real => {
                let start = real_now();
                let done = self.model.lock().submit(kind, offset, len, start);
                let r = io()?;
                if real_now() > done {
                    self.overruns.fetch_add(1, Ordering::Relaxed);
                } else {
                    sleep_until_precise(done);
                }
                Ok(r)
            }
        }
    }
}

impl BlockDevice for TimedDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.timed(OpKind::Read, offset, len, || {
            self.inner.read_at(buf, offset)
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.timed(OpKind::Write, offset, buf.len() as u64, || {
            self.inner.write_at(buf, offset)
        })
    }

    fn sync(&self) -> io::Result<()> {
        self.timed(OpKind::Flush, 0, 0, || self.inner.sync())
    }

    fn name(&self) -> String {
        format!("{} ({} model)", self.inner.name(), self.model.lock().name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::model::ModelKind;
    use crate::device::NullDevice;

    #[test]
    fn virtual_time_advances_per_thread_and_real_time_sleeps() {
        let dev = TimedDevice::new(
            Arc::new(NullDevice::new(1 << 30)),
            ModelKind::SsdSata.build(1 << 30),
            TimeMode::Virtual,
        );
        set_virtual_now(Duration::from_secs(5));
        let mut buf = vec![0u8; 4096];
        dev.read_at(&mut buf, 0).unwrap();
        let t = virtual_now();
        assert!(
            t > Duration::from_secs(5) && t < Duration::from_secs(5) + Duration::from_millis(1)
        );
        let real = TimedDevice::new(
            Arc::new(NullDevice::new(1 << 30)),
            ModelKind::Hdd7200.build(1 << 30),
            TimeMode::Real,
        );
        let start = Instant::now();
        real.read_at(&mut buf, 1 << 29).unwrap();
        // A random HDD read takes milliseconds.
        assert!(start.elapsed() > Duration::from_millis(1));
        assert_eq!(real.ops(), 1);
    }
}
