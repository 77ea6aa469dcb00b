//! Block devices: the small object-safe [`BlockDevice`] trait every tier is
//! stored on, with a file/block-device implementation ([`FileDevice`]) and an
//! in-memory one for tests ([`MemDevice`]), a fault-injecting wrapper for
//! reliability tests ([`FaultDevice`]), a data-less device for virtual-time
//! benchmarks ([`NullDevice`]), a wrapper that times every operation per
//! operation and I/O class ([`MeteredDevice`]) and a wrapper that gives any device the timing
//! of a modelled drive on a [`crate::clock::Clock`] ([`TimedDevice`], models
//! in [`model`]), the HDD tier in a Ceph RADOS pool ([`rados`], librados
//! loaded at run time), and the measured link of a remote tier
//! ([`LinkMeter`]).

mod early;
mod fault;
mod file;
mod librados;
mod link;
mod lost;
mod mem;
mod meter;
pub mod model;
mod null;
pub mod rados;
mod timed;

pub use fault::{FaultDevice, FaultOp, FaultRule};
pub use file::{FileDevice, FsLimit, ImageError};
pub use link::{LinkEstimate, LinkMeter};
pub use lost::LostDevice;
pub use mem::MemDevice;
pub use meter::{ClassGuard, IoClass, IoMeter, IoOp, Latencies, MeteredDevice, IO_BUCKETS};
pub use null::NullDevice;
pub use timed::TimedDevice;

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// A fixed-size, byte-addressed device with positioned I/O.
///
/// Reads and writes are whole: they either transfer every byte or fail.
/// Implementations are shared between threads.
pub trait BlockDevice: Send + Sync + 'static {
    /// Size of the device in bytes.
    fn size(&self) -> u64;
    /// Read `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Read without waiting for the medium: `None` when the data is not at
    /// hand (not in the page cache, or the device cannot tell), so the
    /// caller may serve the read inline and fall back to a thread otherwise.
    fn read_at_nowait(&self, _buf: &mut [u8], _offset: u64) -> Option<io::Result<()>> {
        None
    }
    /// Write all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Write without waiting (into the page cache): `None` when that is not
    /// possible now; nothing was written then.
    fn write_at_nowait(&self, _buf: &[u8], _offset: u64) -> Option<io::Result<()>> {
        None
    }
    /// Move `len` bytes at `offset` into the pipe `pipe` without copying
    /// them (splice: the pipe takes references to the cached pages). `None`
    /// when the device cannot (not a plain file, a modelled or faulty
    /// device, zero-copy off); nothing was moved then. On `Some(Err)` part
    /// of the data may be in the pipe. The caller keeps the pipe's capacity
    /// at least `len`.
    ///
    /// A page handed out so stays shared with the device's cache until the
    /// pipe's reader is done with it, so a range whose data dies and is
    /// then written with other data must be [`forget`](Self::forget)ten
    /// first, or the reader could see the new data.
    fn read_to_pipe(
        &self,
        _pipe: BorrowedFd<'_>,
        _offset: u64,
        _len: usize,
    ) -> Option<io::Result<()>> {
        None
    }
    /// The data of `[offset, offset+len)` is dead and the range is about to
    /// be written with other data: detach it from anything
    /// [`read_to_pipe`](Self::read_to_pipe) handed out, so pages already in a
    /// pipe keep their old contents. The range reads as zeros or stays as
    /// it was, unspecified. A no-op for a device that never splices.
    fn forget(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    /// A remote tier's link as measured so far (round trip, bandwidth);
    /// `None` for a local device, or before anything was measured.
    /// Wrappers pass it on.
    fn link(&self) -> Option<LinkEstimate> {
        None
    }
    /// Time a modelled drive spent working so far, on its model's clock
    /// (for a disk its head time: seeks, rotation and transfers, the
    /// users' requests and the tiers' own copies alike); `None` for a
    /// device without a timing model. Wrappers pass it on.
    fn model_busy(&self) -> Option<Duration> {
        None
    }
    /// The part of [`BlockDevice::model_busy`] spent on the calling
    /// thread's own requests so far: what they cost the drive's mechanism,
    /// never their wait in its queue behind other threads' requests.
    /// `None` for a device without a model that keeps mechanism time.
    /// Wrappers pass it on.
    fn model_busy_here(&self) -> Option<Duration> {
        None
    }
    /// Make every completed write durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
    /// A human name for messages (the path, or "memory").
    fn name(&self) -> String;
}

/// Check that `[offset, offset+len)` lies within a device of `size` bytes.
pub(crate) fn check_range(size: u64, offset: u64, len: usize) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("device I/O at {offset}+{len} past the end ({size} bytes)"),
        )),
    }
}
