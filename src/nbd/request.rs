//! Reading and validating transmission-phase requests: the request header,
//! payloads to keep or to throw away, and the checks that turn a
//! [`Request`] into an [`Op`] for the export or a [`Refusal`] answered with
//! an errno before the export is ever called.

use super::export::{RequestInfo, RequestKind};
use super::proto::{self, Request};
use super::reply::MAX_DESCRIPTORS;
use super::session::Session;
use crate::units::IoHint;

/// A validated request ready to run against the export.
#[derive(Debug)]
pub(super) enum Op {
    Read {
        offset: u64,
        len: u32,
        hint: IoHint,
    },
    Write {
        offset: u64,
        data: Vec<u8>,
        fua: bool,
        hint: IoHint,
    },
    Flush,
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Cache {
        offset: u64,
        len: u32,
    },
    WriteZeroes {
        offset: u64,
        len: u32,
        no_hole: bool,
        fast: bool,
        fua: bool,
    },
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
    },
}

impl Op {
    /// What [`ExportConn::request`](super::ExportConn::request) is told of
    /// this op; `length` is the request's length field (a WRITE's payload
    /// may not be received yet).
    pub(super) fn info(&self, length: u32) -> RequestInfo {
        let (kind, offset, fua) = match self {
            Op::Read { offset, .. } => (RequestKind::Read, *offset, false),
            Op::Write { offset, fua, .. } => (RequestKind::Write, *offset, *fua),
            Op::Flush => (RequestKind::Flush, 0, false),
            Op::Trim { offset, fua, .. } => (RequestKind::Trim, *offset, *fua),
            Op::Cache { offset, .. } => (RequestKind::Cache, *offset, false),
            Op::WriteZeroes { offset, fua, .. } => (RequestKind::WriteZeroes, *offset, *fua),
            Op::BlockStatus { offset, .. } => (RequestKind::BlockStatus, *offset, false),
        };
        let len = if matches!(self, Op::Flush) {
            0
        } else {
            u64::from(length)
        };
        RequestInfo {
            kind,
            offset,
            len,
            fua,
        }
    }

    /// The command name (the metrics label) and payload bytes of the op.
    pub(super) fn label(&self) -> (&'static str, u64) {
        match self {
            Op::Read { len, .. } => ("read", u64::from(*len)),
            Op::Write { data, .. } => ("write", data.len() as u64),
            Op::Flush => ("flush", 0),
            Op::Trim { .. } => ("trim", 0),
            Op::Cache { .. } => ("cache", 0),
            Op::WriteZeroes { .. } => ("write_zeroes", 0),
            Op::BlockStatus { .. } => ("block_status", 0),
        }
    }
}

/// A request refused before it reaches the export.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) errno: u32,
    pub(super) msg: &'static str,
}

impl Refusal {
    /// Log the refusal of `req` and encode its error reply.
    pub(super) fn reply(&self, req: &Request, structured: bool) -> Vec<u8> {
        tracing::debug!(
            cookie = req.cookie,
            cmd = req.typ,
            errno = self.errno,
            "request refused: {}",
            self.msg
        );
        super::reply::error_reply(req.cookie, structured, self.errno, self.msg)
    }
}

/// End of stream in the middle of `what`.
fn eof_inside(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("end of stream inside {what}"),
    )
}

fn refuse(errno: u32, msg: &'static str) -> Refusal {
    Refusal { errno, msg }
}

/// Check a request. `Ok(None)`: valid but zero-length, answered at once.
/// On success also returns the data bytes it will hold in memory (a WRITE's
/// payload is not read yet: its [`Op::Write::data`] is empty).
pub(super) fn validate(
    req: &Request,
    session: &Session,
    max_request: u32,
) -> Result<Option<(Op, u32)>, Refusal> {
    use proto::{
        CMD_FLAG_DF, CMD_FLAG_FAST_ZERO, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE, CMD_FLAG_REQ_ONE, EINVAL,
        ENOSPC, EPERM,
    };
    let caps = &session.caps;
    let offset = req.offset;
    let len = req.length;
    let in_range = offset
        .checked_add(u64::from(len))
        .is_some_and(|end| end <= session.size);
    // FUA (and FAST_ZERO) only when advertised.
    let fua_flag = if caps.fua { CMD_FLAG_FUA } else { 0 };
    let flags_ok = |allowed: u16| req.flags & !allowed == 0;
    let fua = req.flags & CMD_FLAG_FUA != 0;
    match req.typ {
        proto::CMD_READ => {
            let allowed = if session.structured {
                fua_flag | CMD_FLAG_DF
            } else {
                fua_flag
            };
            if !flags_ok(allowed) {
                return Err(refuse(EINVAL, "invalid flags for READ"));
            }
            if len > max_request {
                return Err(refuse(EINVAL, "read longer than the maximum payload"));
            }
            if !in_range {
                return Err(refuse(EINVAL, "read beyond the end of the export"));
            }
            if len == 0 {
                return Ok(None);
            }
            Ok(Some((
                Op::Read {
                    offset,
                    len,
                    hint: IoHint::default(),
                },
                len,
            )))
        }
        proto::CMD_WRITE => {
            if !flags_ok(fua_flag) {
                return Err(refuse(EINVAL, "invalid flags for WRITE"));
            }
            if len > max_request {
                return Err(refuse(EINVAL, "write longer than the maximum payload"));
            }
            if caps.read_only {
                return Err(refuse(EPERM, "export is read-only"));
            }
            if !in_range {
                return Err(refuse(ENOSPC, "write beyond the end of the export"));
            }
            if len == 0 {
                return Ok(None);
            }
            let op = Op::Write {
                offset,
                data: Vec::new(),
                fua,
                hint: IoHint::default(),
            };
            Ok(Some((op, len)))
        }
        proto::CMD_FLUSH => {
            if !caps.flush {
                return Err(refuse(EINVAL, "flush is not supported"));
            }
            if !flags_ok(fua_flag) {
                return Err(refuse(EINVAL, "invalid flags for FLUSH"));
            }
            Ok(Some((Op::Flush, 0)))
        }
        proto::CMD_TRIM => {
            if !caps.trim {
                return Err(refuse(EINVAL, "trim is not supported"));
            }
            if !flags_ok(fua_flag) {
                return Err(refuse(EINVAL, "invalid flags for TRIM"));
            }
            if caps.read_only {
                return Err(refuse(EPERM, "export is read-only"));
            }
            if !in_range {
                return Err(refuse(EINVAL, "trim beyond the end of the export"));
            }
            if len == 0 {
                return Ok(None);
            }
            Ok(Some((Op::Trim { offset, len, fua }, 0)))
        }
        proto::CMD_CACHE => {
            if !caps.cache {
                return Err(refuse(EINVAL, "cache is not supported"));
            }
            if !flags_ok(fua_flag) {
                return Err(refuse(EINVAL, "invalid flags for CACHE"));
            }
            if !in_range {
                return Err(refuse(EINVAL, "cache beyond the end of the export"));
            }
            if len == 0 {
                return Ok(None);
            }
            Ok(Some((Op::Cache { offset, len }, 0)))
        }
        proto::CMD_WRITE_ZEROES => {
            if !caps.zero {
                return Err(refuse(EINVAL, "write zeroes is not supported"));
            }
            let fast_flag = if caps.fast_zero {
                CMD_FLAG_FAST_ZERO
            } else {
                0
            };
            if !flags_ok(fua_flag | CMD_FLAG_NO_HOLE | fast_flag) {
                return Err(refuse(EINVAL, "invalid flags for WRITE_ZEROES"));
            }
            if caps.read_only {
                return Err(refuse(EPERM, "export is read-only"));
            }
            if !in_range {
                return Err(refuse(ENOSPC, "write zeroes beyond the end of the export"));
            }
            if len == 0 {
                return Ok(None);
            }
            let op = Op::WriteZeroes {
                offset,
                len,
                no_hole: req.flags & CMD_FLAG_NO_HOLE != 0,
                fast: req.flags & CMD_FLAG_FAST_ZERO != 0,
                fua,
            };
            Ok(Some((op, 0)))
        }
        proto::CMD_BLOCK_STATUS => {
            if !flags_ok(fua_flag | CMD_FLAG_REQ_ONE) {
                return Err(refuse(EINVAL, "invalid flags for BLOCK_STATUS"));
            }
            if !session.structured || !session.base_allocation {
                return Err(refuse(EINVAL, "no metadata context negotiated"));
            }
            if len == 0 {
                return Err(refuse(EINVAL, "zero-length block status"));
            }
            if !in_range {
                return Err(refuse(EINVAL, "block status beyond the end of the export"));
            }
            let req_one = req.flags & CMD_FLAG_REQ_ONE != 0;
            let reply_bytes = if req_one {
                8
            } else {
                8 * MAX_DESCRIPTORS as u32
            };
            Ok(Some((
                Op::BlockStatus {
                    offset,
                    len,
                    req_one,
                },
                reply_bytes,
            )))
        }
        _ => Err(refuse(EINVAL, "unknown command")),
    }
}

/// Read a request header. `Ok(false)`: clean end of stream before its first
/// byte.
pub(super) fn read_header<R: std::io::Read>(
    rd: &mut R,
    hdr: &mut [u8; proto::REQUEST_HEADER_LEN],
) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < hdr.len() {
        let n = match rd.read(&mut hdr[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            if filled == 0 {
                return Ok(false);
            }
            return Err(eof_inside("a request header"));
        }
        filled += n;
    }
    Ok(true)
}

/// Read and drop `n` bytes (a refused WRITE's payload).
pub(super) fn discard<R: std::io::Read>(rd: &mut R, n: u64) -> std::io::Result<()> {
    let copied = std::io::copy(&mut std::io::Read::take(&mut *rd, n), &mut std::io::sink())?;
    if copied != n {
        return Err(eof_inside("a payload"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::session::Caps;
    use crate::nbd::MemExport;

    fn session(caps: Caps) -> Session {
        Session {
            structured: true,
            base_allocation: true,
            size: 1 << 20,
            caps,
        }
    }

    fn req(typ: u16, flags: u16) -> Request {
        Request {
            flags,
            typ,
            cookie: 1,
            offset: 0,
            length: 4096,
        }
    }

    fn errno(r: Result<Option<(Op, u32)>, Refusal>) -> u32 {
        match r {
            Ok(_) => 0,
            Err(r) => r.errno,
        }
    }

    #[test]
    fn commands_the_export_cannot_serve_are_refused() {
        let all = Caps::of(&MemExport::new(1 << 20), false);
        let s = session(all);
        for typ in [proto::CMD_FLUSH, proto::CMD_TRIM, proto::CMD_CACHE] {
            assert_eq!(errno(validate(&req(typ, 0), &s, 1 << 20)), 0);
        }
        let fast = req(proto::CMD_WRITE_ZEROES, proto::CMD_FLAG_FAST_ZERO);
        assert_eq!(errno(validate(&fast, &s, 1 << 20)), 0);
        let none = Caps {
            flush: false,
            fua: false,
            trim: false,
            zero: false,
            fast_zero: false,
            cache: false,
            ..all
        };
        let s = session(none);
        for typ in [
            proto::CMD_FLUSH,
            proto::CMD_TRIM,
            proto::CMD_CACHE,
            proto::CMD_WRITE_ZEROES,
        ] {
            assert_eq!(errno(validate(&req(typ, 0), &s, 1 << 20)), proto::EINVAL);
        }
        let fua_write = req(proto::CMD_WRITE, proto::CMD_FLAG_FUA);
        assert_eq!(errno(validate(&fua_write, &s, 1 << 20)), proto::EINVAL);
        assert_eq!(errno(validate(&req(proto::CMD_WRITE, 0), &s, 1 << 20)), 0);
    }
}
