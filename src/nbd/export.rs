//! The boundary between the NBD server and whatever it serves.
//!
//! [`Export`] is the small object-safe trait the server calls; the tiered
//! volume implements it, and so does [`MemExport`], a sparse in-memory export
//! used to test the protocol layer on its own. Methods are synchronous and may
//! block on device I/O: the server calls them from blocking threads.

use std::collections::BTreeMap;
use std::io;

use parking_lot::Mutex;

use crate::units::IoHint;

/// Why an export operation failed; each maps to one NBD errno.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The range lies (partly) outside the export.
    #[error("range {offset}+{len} is outside the export")]
    OutOfRange { offset: u64, len: u64 },
    /// No room to store the data.
    #[error("no space left: {0}")]
    NoSpace(String),
    /// The request is not valid for this export.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The operation is not supported (for example a zero that would not be fast).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// The export is read-only.
    #[error("export is read-only")]
    ReadOnly,
    /// A device failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl ExportError {
    /// The NBD error number sent to the client.
    pub fn errno(&self) -> u32 {
        match self {
            ExportError::OutOfRange { .. } | ExportError::Invalid(_) => 22, // EINVAL
            ExportError::NoSpace(_) => 28,                                  // ENOSPC
            ExportError::NotSupported(_) => 95,                             // ENOTSUP
            ExportError::ReadOnly => 1,                                     // EPERM
            ExportError::Io(_) => 5,                                        // EIO
        }
    }
}

/// One run of a block-status answer for `base:allocation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRun {
    /// Length of the run in bytes (never 0).
    pub len: u64,
    /// The run is not allocated (NBD_STATE_HOLE).
    pub hole: bool,
    /// The run reads as zeros (NBD_STATE_ZERO).
    pub zero: bool,
}

/// What the NBD server serves. All offsets and lengths are in bytes and are
/// checked against [`Export::size`] by the server before the call; an export
/// still checks them itself and answers [`ExportError::OutOfRange`].
pub trait Export: Send + Sync + 'static {
    /// Size of the export in bytes.
    fn size(&self) -> u64;
    /// Fill `buf` with the bytes at `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError>;
    /// Store `data` at `offset`; with `fua` it is durable before returning.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError>;
    /// [`Export::read`] with the connection's stream hint.
    fn read_hinted(&self, offset: u64, buf: &mut [u8], _hint: IoHint) -> Result<(), ExportError> {
        self.read(offset, buf)
    }
    /// [`Export::read_hinted`] without waiting for a device: `None` when
    /// that is not possible now (the server then runs the read on a
    /// blocking thread). Default: never.
    fn read_nowait(
        &self,
        _offset: u64,
        _buf: &mut [u8],
        _hint: IoHint,
    ) -> Option<Result<(), ExportError>> {
        None
    }
    /// [`Export::write_hinted`] (without FUA) without waiting for a device:
    /// `None` when not possible now (nothing was written). Default: never.
    fn write_nowait(
        &self,
        _offset: u64,
        _data: &[u8],
        _hint: IoHint,
    ) -> Option<Result<(), ExportError>> {
        None
    }
    /// [`Export::write`] with the connection's stream hint.
    fn write_hinted(
        &self,
        offset: u64,
        data: &[u8],
        fua: bool,
        _hint: IoHint,
    ) -> Result<(), ExportError> {
        self.write(offset, data, fua)
    }
    /// Make every write acknowledged so far durable.
    fn flush(&self) -> Result<(), ExportError>;
    /// Discard a range (its contents become unspecified; tierd makes them zero).
    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError>;
    /// Make a range read as zeros. `no_hole`: keep it allocated.
    /// `fast`: fail with [`ExportError::NotSupported`] rather than be slow.
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        fast: bool,
        fua: bool,
    ) -> Result<(), ExportError>;
    /// Hint that a range will be read soon.
    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError>;
    /// Allocation status from `offset`, covering at most `len` bytes, in at
    /// most `max_runs` runs (at least one run, the first starting at `offset`).
    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<StatusRun>, ExportError>;
}

const MEM_CHUNK: u64 = 64 * 1024;

/// A sparse in-memory export in 64 KiB chunks: unwritten chunks are holes.
pub struct MemExport {
    size: u64,
    chunks: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

impl MemExport {
    /// A new all-zero export of `size` bytes.
    pub fn new(size: u64) -> Self {
        MemExport {
            size,
            chunks: Mutex::new(BTreeMap::new()),
        }
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(ExportError::OutOfRange { offset, len }),
        }
    }

    /// Apply `f(chunk_index, range_in_chunk, range_in_request)` over a range.
    fn for_each_chunk(offset: u64, len: u64, mut f: impl FnMut(u64, usize, usize, usize)) {
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let idx = pos / MEM_CHUNK;
            let within = (pos % MEM_CHUNK) as usize;
            let n = ((MEM_CHUNK - within as u64).min(end - pos)) as usize;
            f(idx, within, n, (pos - offset) as usize);
            pos += n as u64;
        }
    }
}

impl Export for MemExport {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.check(offset, buf.len() as u64)?;
        let chunks = self.chunks.lock();
        Self::for_each_chunk(offset, buf.len() as u64, |idx, within, n, at| {
            let dst = &mut buf[at..at + n];
            match chunks.get(&idx) {
                Some(c) => dst.copy_from_slice(&c[within..within + n]),
                None => dst.fill(0),
            }
        });
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> Result<(), ExportError> {
        self.check(offset, data.len() as u64)?;
        let mut chunks = self.chunks.lock();
        Self::for_each_chunk(offset, data.len() as u64, |idx, within, n, at| {
            let c = chunks
                .entry(idx)
                .or_insert_with(|| vec![0u8; MEM_CHUNK as usize].into_boxed_slice());
            c[within..within + n].copy_from_slice(&data[at..at + n]);
        });
        Ok(())
    }

    fn flush(&self) -> Result<(), ExportError> {
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64, _fua: bool) -> Result<(), ExportError> {
        self.write_zeroes(offset, len, false, false, false)
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        _fast: bool,
        _fua: bool,
    ) -> Result<(), ExportError> {
        self.check(offset, len)?;
        let mut chunks = self.chunks.lock();
        Self::for_each_chunk(offset, len, |idx, within, n, _| {
            if n as u64 == MEM_CHUNK && !no_hole {
                chunks.remove(&idx);
            } else if let Some(c) = chunks.get_mut(&idx) {
                c[within..within + n].fill(0);
            }
        });
        Ok(())
    }

    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        self.check(offset, len)
    }

    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<StatusRun>, ExportError> {
        self.check(offset, len)?;
        let chunks = self.chunks.lock();
        let mut runs: Vec<StatusRun> = Vec::new();
        Self::for_each_chunk(offset, len, |idx, _, n, _| {
            let hole = !chunks.contains_key(&idx);
            match runs.last_mut() {
                Some(last) if last.hole == hole => last.len += n as u64,
                _ => runs.push(StatusRun {
                    len: n as u64,
                    hole,
                    zero: hole,
                }),
            }
        });
        runs.truncate(max_runs.max(1));
        Ok(runs)
    }
}
