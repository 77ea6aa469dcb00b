//! Recording the requests the daemon serves into a trace file
//! (`tierctl trace start FILE` / `tierctl trace stop`; the format is
//! docs/trace.md). Every NBD connection's [`ExportConn`] tells the
//! [`Recorder`] of each request that runs, in the order its client sent
//! them: time since the recording started, kind, range, FUA flag and a
//! connection number. While nothing records, that costs one relaxed atomic
//! load per request; while a recording runs, a lock and 24 bytes into a
//! buffered file. A recording ends when it is stopped, when it reaches its
//! size limit, when writing it fails (the error is kept for `status`), or
//! when the daemon shuts down; the file is then complete and readable by
//! `tierd trace info` and `tierd bench --trace`.
//!
//! [`ExportConn`]: crate::nbd::ExportConn

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::nbd::{RequestInfo, RequestKind};
use crate::trace::{Header, Op, Record, TraceWriter, RECORD_LEN};

/// Why recording could not start or stop.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A recording runs already.
    #[error("a trace is being recorded already, into {0} (tierctl trace stop first)")]
    Busy(PathBuf),
    /// Nothing records.
    #[error("no trace is being recorded")]
    Idle,
    /// The file exists and may not be replaced.
    #[error("{0} exists: choose another file, or --force to replace it")]
    Exists(PathBuf),
    /// A relative path: the daemon's working directory is not the caller's.
    #[error("{0} is not an absolute path (the daemon's working directory is not yours)")]
    Relative(PathBuf),
    /// Creating or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The trace file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
}

/// How a recording stands or ended: the control protocol's message.
pub use crate::control::TraceStatus as RecordingStatus;

struct Recording {
    writer: TraceWriter<BufWriter<File>>,
    path: PathBuf,
    started: Instant,
    header_bytes: u64,
    max_bytes: u64,
}

impl Recording {
    fn status(&self, active: bool, ended: Option<String>) -> RecordingStatus {
        let records = self.writer.records();
        RecordingStatus {
            path: self.path.clone(),
            active,
            records,
            bytes: self.header_bytes + records * RECORD_LEN as u64,
            secs: self.started.elapsed().as_secs_f64(),
            max_bytes: self.max_bytes,
            ended,
        }
    }
}

/// The daemon's trace recorder; one per export, shared by its connections.
#[derive(Default)]
pub struct Recorder {
    on: AtomicBool,
    current: Mutex<Option<Recording>>,
    /// The last recording that ended.
    last: Mutex<Option<RecordingStatus>>,
    next_conn: AtomicU32,
}

/// The trace's operation for a request of `kind`; `None` for requests that
/// move no data (cache hints, block status).
fn op_of(kind: RequestKind) -> Option<Op> {
    match kind {
        RequestKind::Read => Some(Op::Read),
        RequestKind::Write => Some(Op::Write),
        RequestKind::Trim => Some(Op::Trim),
        RequestKind::WriteZeroes => Some(Op::Zero),
        RequestKind::Flush => Some(Op::Flush),
        RequestKind::Cache | RequestKind::BlockStatus => None,
    }
}

impl Recorder {
    /// A recorder that records nothing yet.
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// A number for a new connection (wraps after 65,536 connections).
    pub fn connection(&self) -> u16 {
        self.next_conn.fetch_add(1, Ordering::Relaxed) as u16
    }

    /// Start recording into `path` (absolute), at most `max_bytes` (0: no
    /// limit); `force` replaces an existing file. The file is created with
    /// mode 0600: it shows how the volume is used.
    pub fn start(
        &self,
        path: &Path,
        max_bytes: u64,
        force: bool,
        volume_size: u64,
    ) -> Result<RecordingStatus, RecordError> {
        if !path.is_absolute() {
            return Err(RecordError::Relative(path.to_path_buf()));
        }
        let mut cur = self.current.lock();
        if let Some(r) = cur.as_ref() {
            return Err(RecordError::Busy(r.path.clone()));
        }
        let io = |source| RecordError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut open = OpenOptions::new();
        open.write(true).mode(0o600);
        if force {
            open.create(true).truncate(true);
        } else {
            open.create_new(true);
        }
        let file = open.open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                RecordError::Exists(path.to_path_buf())
            } else {
                io(e)
            }
        })?;
        let header = Header {
            start_unix_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            volume_size,
            source: format!("tierd {} recording", env!("CARGO_PKG_VERSION")),
        };
        let header_bytes = (crate::trace::HEADER_FIXED_LEN + header.source.len()) as u64;
        let writer = TraceWriter::new(BufWriter::new(file), &header).map_err(io)?;
        let rec = Recording {
            writer,
            path: path.to_path_buf(),
            started: Instant::now(),
            header_bytes,
            max_bytes,
        };
        let status = rec.status(true, None);
        *cur = Some(rec);
        self.on.store(true, Ordering::Release);
        Ok(status)
    }

    /// Stop recording: the file is flushed and complete.
    pub fn stop(&self) -> Result<RecordingStatus, RecordError> {
        self.end("stopped").ok_or(RecordError::Idle)?
    }

    /// Stop a recording that runs, for shutdown (nothing when none does).
    pub fn shutdown(&self) {
        if let Some(Err(e)) = self.end("shutdown") {
            tracing::warn!("finishing the trace recording: {e}");
        }
    }

    /// The recording under way, else the last one that ended.
    pub fn status(&self) -> Option<RecordingStatus> {
        if let Some(r) = self.current.lock().as_ref() {
            return Some(r.status(true, None));
        }
        self.last.lock().clone()
    }

    /// End the recording under way (`None`: none was).
    fn end(&self, why: &str) -> Option<Result<RecordingStatus, RecordError>> {
        let rec = self.current.lock().take()?;
        self.on.store(false, Ordering::Release);
        Some(self.finish(rec, why.to_string()))
    }

    fn finish(&self, rec: Recording, why: String) -> Result<RecordingStatus, RecordError> {
        let status = rec.status(false, Some(why));
        let path = rec.path.clone();
        let result = rec
            .writer
            .finish()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .and_then(|f| f.sync_all());
        let status = match result {
            Ok(()) => status,
            Err(e) => {
                let mut s = status;
                s.ended = Some(format!("finishing the file failed: {e}"));
                *self.last.lock() = Some(s);
                return Err(RecordError::Io { path, source: e });
            }
        };
        *self.last.lock() = Some(status.clone());
        Ok(status)
    }

    /// Record one request of connection `conn`.
    pub fn record(&self, conn: u16, req: &RequestInfo) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let Some(op) = op_of(req.kind) else {
            return;
        };
        let mut cur = self.current.lock();
        let Some(rec) = cur.as_mut() else {
            return;
        };
        let r = Record {
            t_ns: rec.started.elapsed().as_nanos() as u64,
            offset: req.offset,
            len: u32::try_from(req.len).unwrap_or(u32::MAX),
            conn,
            op,
            fua: req.fua,
        };
        let full = rec.max_bytes > 0
            && rec.header_bytes + (rec.writer.records() + 1) * RECORD_LEN as u64 > rec.max_bytes;
        let why = if full {
            Some("size limit".to_string())
        } else {
            match rec.writer.write(&r) {
                Ok(()) => None,
                Err(e) => Some(format!("writing failed: {e}")),
            }
        };
        if let Some(why) = why {
            if let Some(rec) = cur.take() {
                self.on.store(false, Ordering::Release);
                drop(cur);
                tracing::warn!(path = %rec.path.display(), "trace recording ended: {why}");
                if let Err(e) = self.finish(rec, why) {
                    tracing::warn!("finishing the trace recording: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceReader;

    fn req(kind: RequestKind, offset: u64, len: u64) -> RequestInfo {
        RequestInfo {
            kind,
            offset,
            len,
            fua: false,
        }
    }

    #[test]
    fn records_what_it_is_told_until_stopped_and_the_file_reads_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.trace");
        let r = Recorder::new();
        r.record(0, &req(RequestKind::Read, 0, 4096)); // before the start
        r.start(&path, 0, false, 1 << 30).expect("start");
        let c = r.connection();
        r.record(c, &req(RequestKind::Write, 8192, 4096));
        r.record(c, &req(RequestKind::BlockStatus, 0, 1 << 20)); // no data: skipped
        r.record(c, &req(RequestKind::WriteZeroes, 0, 65536));
        r.record(c, &req(RequestKind::Flush, 0, 0));
        assert!(matches!(
            r.start(&path, 0, true, 0),
            Err(RecordError::Busy(_))
        ));
        let s = r.stop().expect("stop");
        assert_eq!((s.records, s.active), (3, false));
        assert_eq!(s.ended.as_deref(), Some("stopped"));
        r.record(c, &req(RequestKind::Read, 0, 4096)); // after the stop
        assert!(matches!(r.stop(), Err(RecordError::Idle)));
        let rd = TraceReader::new(File::open(&path).expect("open")).expect("header");
        assert_eq!(rd.header().volume_size, 1 << 30);
        let recs: Vec<Record> = rd.map(|x| x.expect("record")).collect();
        let ops: Vec<(Op, u64, u32)> = recs.iter().map(|x| (x.op, x.offset, x.len)).collect();
        assert_eq!(
            ops,
            vec![
                (Op::Write, 8192, 4096),
                (Op::Zero, 0, 65536),
                (Op::Flush, 0, 0)
            ]
        );
        assert!(recs.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            s.bytes,
            "the status counts the file's bytes"
        );
    }

    #[test]
    fn a_file_that_exists_needs_force_and_a_size_limit_ends_the_recording() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.trace");
        std::fs::write(&path, b"keep me").expect("write");
        let r = Recorder::new();
        assert!(matches!(
            r.start(&path, 0, false, 0),
            Err(RecordError::Exists(_))
        ));
        assert_eq!(std::fs::read(&path).expect("read"), b"keep me");
        assert!(matches!(
            r.start(Path::new("relative.trace"), 0, false, 0),
            Err(RecordError::Relative(_))
        ));
        // Room for the header and two records.
        let s = r.start(&path, 0, true, 0).expect("start");
        r.stop().expect("stop");
        let limit = s.bytes + 2 * RECORD_LEN as u64;
        r.start(&path, limit, true, 0).expect("start");
        for i in 0..5 {
            r.record(1, &req(RequestKind::Read, i * 4096, 4096));
        }
        let st = r.status().expect("status");
        assert!(!st.active);
        assert_eq!(st.records, 2);
        assert_eq!(st.ended.as_deref(), Some("size limit"));
        let n = TraceReader::new(File::open(&path).expect("open"))
            .expect("header")
            .count();
        assert_eq!(n, 2);
    }
}
