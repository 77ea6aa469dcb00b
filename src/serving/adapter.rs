//! [`VolumeExport`]: the tiered [`Volume`] served as an NBD [`Export`], with
//! the sequential hint from a [`StreamDetector`] per client connection and
//! one [`VolumeStreams`] over all of them, every request told to the trace
//! [`Recorder`], and the one mapping of [`VolumeError`] to [`ExportError`].

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use super::recorder::Recorder;
use crate::heat::{StreamDetector, VolumeStreams};
use crate::nbd::{Export, ExportConn, ExportError, IoCtx, RequestInfo, StatusRun};
use crate::units::IoHint;
use crate::volume::{Volume, VolumeError};

/// A volume as an NBD export. Cheap to clone.
#[derive(Clone)]
pub struct VolumeExport {
    volume: Arc<Volume>,
    streams: Arc<VolumeStreams>,
    recorder: Arc<Recorder>,
}

impl VolumeExport {
    /// Serve `volume`.
    pub fn new(volume: Arc<Volume>) -> Self {
        VolumeExport {
            volume,
            streams: Arc::new(VolumeStreams::new()),
            recorder: Arc::new(Recorder::new()),
        }
    }

    /// Tell `recorder` of every request served.
    pub fn with_recorder(mut self, recorder: Arc<Recorder>) -> Self {
        self.recorder = recorder;
        self
    }

    /// The volume served.
    pub fn volume(&self) -> &Arc<Volume> {
        &self.volume
    }
}

/// The export error for a volume error; device errors keep their source.
pub fn export_error(e: VolumeError) -> ExportError {
    match e {
        VolumeError::OutOfRange { offset, len, .. } => ExportError::OutOfRange { offset, len },
        VolumeError::NoSpace => ExportError::NoSpace(e.to_string()),
        VolumeError::Io { source, .. } => ExportError::Io(source),
        other => ExportError::Io(std::io::Error::other(other)),
    }
}

/// Per-connection state: the connection's sequential streams, the
/// volume's, which see every connection, and the recorder with the
/// connection's number in a trace.
struct Streams {
    own: StreamDetector,
    all: Arc<VolumeStreams>,
    recorder: Arc<Recorder>,
    conn: u16,
}

impl ExportConn for Streams {
    fn hint(&mut self, offset: u64, len: u64) -> IoHint {
        let own = self.own.observe(offset, len);
        let all = self.all.observe(offset, len);
        IoHint {
            seq_run: own.seq_run.max(all.seq_run),
        }
    }

    fn request(&mut self, req: &RequestInfo) {
        self.recorder.record(self.conn, req);
    }
}

impl Export for VolumeExport {
    fn size(&self) -> u64 {
        self.volume.size()
    }

    fn read(&self, offset: u64, buf: &mut [u8], ctx: IoCtx) -> Result<(), ExportError> {
        if ctx.may_block {
            return self
                .volume
                .read_hinted(offset, buf, ctx.hint)
                .map_err(export_error);
        }
        match self.volume.read_nowait(offset, buf, ctx.hint) {
            Some(r) => r.map_err(export_error),
            None => Err(ExportError::WouldBlock),
        }
    }

    fn read_is_slow(&self, offset: u64, len: u64) -> bool {
        self.volume.reads_from_hdd(offset, len)
    }

    fn read_or_wait(
        &self,
        offset: u64,
        buf: &mut [u8],
        ctx: IoCtx,
        before_wait: &mut dyn FnMut(),
    ) -> Result<(), ExportError> {
        self.volume
            .read_or_wait(offset, buf, ctx.hint, before_wait)
            .map_err(export_error)
    }

    fn read_to_pipe(
        &self,
        offset: u64,
        len: u64,
        pipe: BorrowedFd<'_>,
        ctx: IoCtx,
    ) -> Option<Result<(), ExportError>> {
        self.volume
            .read_to_pipe(offset, len, ctx.hint, pipe)
            .map(|r| r.map_err(export_error))
    }

    fn write(&self, offset: u64, data: &[u8], ctx: IoCtx) -> Result<(), ExportError> {
        if ctx.may_block {
            return self
                .volume
                .write_hinted(offset, data, ctx.fua, ctx.hint)
                .map_err(export_error);
        }
        // A FUA write always waits for the devices.
        if ctx.fua {
            return Err(ExportError::WouldBlock);
        }
        match self.volume.write_nowait(offset, data, ctx.hint) {
            Some(r) => r.map_err(export_error),
            None => Err(ExportError::WouldBlock),
        }
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.volume.flush().map_err(export_error)
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError> {
        self.volume
            .discard(offset, len, false, false, fua)
            .map_err(export_error)
    }

    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        _fast: bool,
        fua: bool,
    ) -> Result<(), ExportError> {
        // Zeroing is always fast here: metadata plus at most two partial
        // blocks per extent.
        self.volume
            .discard(offset, len, true, no_hole, fua)
            .map_err(export_error)
    }

    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        self.volume.check(offset, len).map_err(export_error)
    }

    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<StatusRun>, ExportError> {
        let runs = self
            .volume
            .block_status(offset, len, max_runs)
            .map_err(export_error)?;
        Ok(runs
            .into_iter()
            .map(|r| StatusRun {
                len: r.len,
                hole: r.hole,
                zero: r.zero,
            })
            .collect())
    }

    fn connect(&self) -> Box<dyn ExportConn> {
        Box::new(Streams {
            own: StreamDetector::new(),
            all: self.streams.clone(),
            recorder: self.recorder.clone(),
            conn: self.recorder.connection(),
        })
    }

    fn can_fast_zero(&self) -> bool {
        // See write_zeroes: never slow.
        true
    }

    fn can_multi_conn(&self) -> bool {
        // One volume behind every connection; a flush covers all writes.
        true
    }
}
