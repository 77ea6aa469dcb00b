//! A device wrapper that holds one write (or, built with
//! [`Gate::on_reads`], one read), chosen by a predicate, once armed, until
//! the test releases it: a way to stop a write (a migration's copy, a
//! foreground write) or a user's read at an exact point and act meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use tierd::device::BlockDevice;

/// Which write to hold: `(buffer length, offset)`.
type Hold = Box<dyn Fn(usize, u64) -> bool + Send + Sync>;

/// Holds the first write `hold` chooses after [`Gate::arm`].
pub struct Gate {
    inner: Arc<dyn BlockDevice>,
    hold: Hold,
    reads: bool,
    armed: AtomicBool,
    state: Mutex<(bool, bool)>, // (a write is held, released)
    cv: Condvar,
}

impl Gate {
    pub fn new(
        inner: Arc<dyn BlockDevice>,
        hold: impl Fn(usize, u64) -> bool + Send + Sync + 'static,
    ) -> Arc<Self> {
        Gate::holding(inner, Box::new(hold), false)
    }

    fn holding(inner: Arc<dyn BlockDevice>, hold: Hold, reads: bool) -> Arc<Self> {
        Arc::new(Gate {
            inner,
            hold,
            reads,
            armed: AtomicBool::new(false),
            state: Mutex::new((false, false)),
            cv: Condvar::new(),
        })
    }

    /// A gate that holds reads instead of writes.
    #[allow(dead_code)]
    pub fn on_reads(
        inner: Arc<dyn BlockDevice>,
        hold: impl Fn(usize, u64) -> bool + Send + Sync + 'static,
    ) -> Arc<Self> {
        Gate::holding(inner, Box::new(hold), true)
    }

    /// Hold here if `len`/`offset` is the one to hold (once armed).
    fn maybe_hold(&self, len: usize, offset: u64) {
        if (self.hold)(len, offset) && self.armed.swap(false, Ordering::AcqRel) {
            let mut st = self.state.lock().expect("gate lock");
            st.0 = true;
            self.cv.notify_all();
            while !st.1 {
                st = self.cv.wait(st).expect("gate wait");
            }
        }
    }

    /// Hold the next write `hold` chooses.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Wait until a write is held.
    pub fn wait_held(&self) {
        let mut st = self.state.lock().expect("gate lock");
        while !st.0 {
            st = self.cv.wait(st).expect("gate wait");
        }
    }

    /// Let the held write go on.
    pub fn release(&self) {
        let mut st = self.state.lock().expect("gate lock");
        st.1 = true;
        self.cv.notify_all();
    }
}

impl BlockDevice for Gate {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        if self.reads {
            self.maybe_hold(buf.len(), offset);
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if !self.reads {
            self.maybe_hold(buf.len(), offset);
        }
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn name(&self) -> String {
        self.inner.name()
    }
}
