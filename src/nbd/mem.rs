//! [`MemExport`]: a sparse in-memory [`Export`], used to test the protocol
//! layer on its own (and by anything that needs a scratch export).

use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::export::{Export, ExportError, IoCtx, StatusRun};

const MEM_CHUNK: u64 = 64 * 1024;

/// A sparse in-memory export in 64 KiB chunks: unwritten chunks are holes.
///
/// It supports every command: memory never waits, so a `may_block: false`
/// call always completes, zeroing is always fast, FUA and flush have
/// nothing to do, and one shared map keeps every connection consistent.
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

    fn read(&self, offset: u64, buf: &mut [u8], _ctx: IoCtx) -> Result<(), ExportError> {
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

    fn write(&self, offset: u64, data: &[u8], _ctx: IoCtx) -> Result<(), ExportError> {
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

    fn can_fast_zero(&self) -> bool {
        true
    }

    fn can_multi_conn(&self) -> bool {
        true
    }
}
