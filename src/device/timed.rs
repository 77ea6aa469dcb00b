//! [`TimedDevice`]: gives any device the timing of a modelled drive.
//!
//! Each operation is submitted to the model at the device's clock's
//! [`Clock::now`], the I/O is done on the inner device, and then the caller
//! waits with [`Clock::sleep_until`] until the model's completion time:
//! - on the real clock ([`crate::clock::SystemClock`]) that is a precise
//!   sleep; when the real I/O itself took longer than the model allows, the
//!   request counts as an *overrun*;
//! - on a virtual clock nothing sleeps: the clock moves on to the
//!   completion (the benchmark's per-thread device clock, or a test's
//!   [`crate::clock::ManualClock`]).
//!
//! One model instance per device, shared by every caller.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use parking_lot::Mutex;

use super::model::{OpKind, TimingModel};
use super::{BlockDevice, LinkEstimate, LinkMeter};
use crate::clock::Clock;

/// A device with a drive's timing.
pub struct TimedDevice {
    inner: Arc<dyn BlockDevice>,
    model: Mutex<Box<dyn TimingModel>>,
    clock: Arc<dyn Clock>,
    ops: AtomicU64,
    overruns: AtomicU64,
    /// The modelled link, measured on the device's clock, for a model of
    /// a remote tier.
    link: Option<LinkMeter>,
    /// Time with an operation in flight, for a model that keeps no
    /// mechanism time of its own: (total, end of the last span counted).
    spans: Mutex<(Duration, Duration)>,
    /// The model's mechanism time per submitting thread (for a model that
    /// keeps it): what each thread's own requests cost the drive.
    by_thread: Mutex<HashMap<ThreadId, Duration>>,
}

impl TimedDevice {
    /// Wrap `inner` with `model`, timed on `clock`.
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        model: Box<dyn TimingModel>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let link = model.remote().then(LinkMeter::default);
        TimedDevice {
            inner,
            model: Mutex::new(model),
            link,
            clock,
            spans: Mutex::new((Duration::ZERO, Duration::ZERO)),
            by_thread: Mutex::new(HashMap::new()),
            ops: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
        }
    }

    /// Operations timed so far.
    pub fn ops(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }

    /// Operations whose I/O took longer than the model (real clock).
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
        let start = self.clock.now();
        let done = {
            let mut model = self.model.lock();
            let before = model.mechanism_time();
            let done = model.submit(kind, offset, len, start);
            if let (Some(a), Some(b)) = (before, model.mechanism_time()) {
                *self
                    .by_thread
                    .lock()
                    .entry(std::thread::current().id())
                    .or_default() += b.saturating_sub(a);
            }
            done
        };
        {
            // The union of the spans [start, done]: submissions come in
            // nearly in time order (on the virtual clock each thread's own
            // time), so a span overlapping the last one counted adds only
            // what reaches past it.
            let mut s = self.spans.lock();
            let from = start.max(s.1);
            if done > from {
                s.0 += done - from;
                s.1 = done;
            }
        }
        let r = io()?;
        if self.clock.now() > done {
            self.overruns.fetch_add(1, Ordering::Relaxed);
        } else {
            self.clock.sleep_until(done);
        }
        if let Some(l) = &self.link {
            if kind != OpKind::Flush {
                l.record(len, self.clock.now().saturating_sub(start));
            }
        }
        Ok(r)
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

    fn link(&self) -> Option<LinkEstimate> {
        match &self.link {
            Some(l) => l.estimate(),
            None => self.inner.link(),
        }
    }

    fn name(&self) -> String {
        format!("{} ({} model)", self.inner.name(), self.model.lock().name())
    }

    fn model_busy(&self) -> Option<Duration> {
        Some(
            self.model
                .lock()
                .mechanism_time()
                .unwrap_or_else(|| self.spans.lock().0),
        )
    }

    fn model_busy_here(&self) -> Option<Duration> {
        self.model.lock().mechanism_time()?;
        Some(
            self.by_thread
                .lock()
                .get(&std::thread::current().id())
                .copied()
                .unwrap_or_default(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::clock::{ManualClock, SystemClock};
    use crate::device::model::ModelKind;
    use crate::device::NullDevice;

    #[test]
    fn virtual_time_advances_per_thread_and_real_time_sleeps() {
        let clock = Arc::new(ManualClock::new());
        let dev = TimedDevice::new(
            Arc::new(NullDevice::new(1 << 30)),
            ModelKind::SsdSata.build(1 << 30),
            clock.clone(),
        );
        clock.advance(Duration::from_secs(5));
        let mut buf = vec![0u8; 4096];
        dev.read_at(&mut buf, 0).unwrap();
        let t = clock.now();
        assert!(
            t > Duration::from_secs(5) && t < Duration::from_secs(5) + Duration::from_millis(1)
        );
        let real = TimedDevice::new(
            Arc::new(NullDevice::new(1 << 30)),
            ModelKind::Hdd7200.build(1 << 30),
            Arc::new(SystemClock::default()),
        );
        let start = Instant::now();
        real.read_at(&mut buf, 1 << 29).unwrap();
        // A random HDD read takes milliseconds.
        assert!(start.elapsed() > Duration::from_millis(1));
        assert_eq!(real.ops(), 1);
    }

    #[test]
    fn each_thread_sees_the_mechanism_time_of_its_own_requests() {
        let clock = Arc::new(ManualClock::new());
        let dev = Arc::new(TimedDevice::new(
            Arc::new(NullDevice::new(1 << 30)),
            ModelKind::Hdd7200.build(1 << 30),
            clock,
        ));
        assert_eq!(dev.model_busy_here(), Some(Duration::ZERO));
        let mut buf = vec![0u8; 4096];
        dev.read_at(&mut buf, 1 << 29).unwrap();
        let mine = dev.model_busy_here().unwrap();
        assert!(mine > Duration::ZERO);
        let other = {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                dev.read_at(&mut buf, 1 << 20).unwrap();
                dev.read_at(&mut buf, 3 << 28).unwrap();
                dev.model_busy_here().unwrap()
            })
            .join()
            .unwrap()
        };
        assert!(other > Duration::ZERO);
        // The other thread's requests are not this one's.
        assert_eq!(dev.model_busy_here(), Some(mine));
        assert_eq!(dev.model_busy(), Some(mine + other));
        // A model that keeps no mechanism time says nothing.
        let ssd = TimedDevice::new(
            Arc::new(NullDevice::new(1 << 30)),
            ModelKind::SsdSata.build(1 << 30),
            Arc::new(ManualClock::new()),
        );
        ssd.read_at(&mut buf, 0).unwrap();
        assert_eq!(ssd.model_busy_here(), None);
    }
}
