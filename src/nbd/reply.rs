//! Encoding the answer to one request: a simple reply or structured chunks
//! (NONE, OFFSET_DATA, ERROR, BLOCK_STATUS), and turning the export's
//! allocation runs into `base:allocation` descriptors.

use super::export::StatusRun;
use super::proto::{self, Descriptor};
use super::session::BASE_ALLOCATION_ID;

/// Most descriptors sent in one `base:allocation` chunk.
pub(super) const MAX_DESCRIPTORS: usize = 16 * 1024;

/// What a successful op produced.
pub(super) enum OpOutput {
    Done,
    Data { offset: u64, data: Vec<u8> },
    Status(Vec<Descriptor>),
}

/// An encoded reply: its header bytes, and read data sent right after.
pub(super) type Encoded = (Vec<u8>, Option<Vec<u8>>);

/// Turn export runs into at most `max` descriptors whose lengths sum to at
/// most `len`; adjacent runs with equal flags merge, empty runs are skipped,
/// and an empty answer becomes one descriptor of status 0 (always allowed).
pub(super) fn runs_to_descriptors(runs: &[StatusRun], len: u32, max: usize) -> Vec<Descriptor> {
    let max = max.max(1);
    let mut out: Vec<Descriptor> = Vec::new();
    let mut remaining = len;
    for run in runs {
        if remaining == 0 {
            break;
        }
        // Bounded by `remaining`, so it fits in u32.
        let n = u32::try_from(run.len.min(u64::from(remaining))).unwrap_or(remaining);
        if n == 0 {
            continue;
        }
        let mut flags = 0;
        if run.hole {
            flags |= proto::STATE_HOLE;
        }
        if run.zero {
            flags |= proto::STATE_ZERO;
        }
        let full = out.len() >= max;
        match out.last_mut() {
            Some(last) if last.flags == flags => last.len += n,
            _ if full => break,
            _ => out.push(Descriptor { len: n, flags }),
        }
        remaining -= n;
    }
    if out.is_empty() {
        out.push(Descriptor { len, flags: 0 });
    }
    out
}

/// Success without data.
pub(super) fn ok_reply(cookie: u64, structured: bool) -> Vec<u8> {
    if structured {
        let mut out = Vec::with_capacity(proto::STRUCTURED_HEADER_LEN);
        proto::encode_none_chunk(&mut out, cookie);
        out
    } else {
        proto::encode_simple_reply(0, cookie).to_vec()
    }
}

/// A failure with `errno` (0 becomes `EIO`) and, when structured, `msg`.
pub(super) fn error_reply(cookie: u64, structured: bool, errno: u32, msg: &str) -> Vec<u8> {
    // A zero errno would read as success: never send one for a failure.
    let errno = if errno == 0 { proto::EIO } else { errno };
    if structured {
        let mut out = Vec::new();
        proto::encode_error_chunk(&mut out, cookie, errno, msg);
        out
    } else {
        proto::encode_simple_reply(errno, cookie).to_vec()
    }
}

/// The header sent before `len` bytes of read data; `Err` holds the error
/// reply to send instead (no data follows it).
pub(super) fn read_reply_head(
    cookie: u64,
    structured: bool,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, Vec<u8>> {
    if !structured {
        return Ok(proto::encode_simple_reply(0, cookie).to_vec());
    }
    let mut head = Vec::with_capacity(proto::STRUCTURED_HEADER_LEN + 8);
    match proto::encode_offset_data_header(&mut head, cookie, offset, len, true) {
        Some(()) => Ok(head),
        // Unreachable with max_request below 4 GiB; fail cleanly anyway.
        None => Err(error_reply(
            cookie,
            true,
            proto::EOVERFLOW,
            "read too large for one chunk",
        )),
    }
}

/// The reply to an op that succeeded.
pub(super) fn success_reply(cookie: u64, structured: bool, out: OpOutput) -> Encoded {
    match out {
        OpOutput::Done => (ok_reply(cookie, structured), None),
        OpOutput::Data { offset, data } => {
            match read_reply_head(cookie, structured, offset, data.len()) {
                Ok(head) => (head, Some(data)),
                Err(head) => (head, None),
            }
        }
        OpOutput::Status(descs) => {
            let mut head = Vec::new();
            match proto::encode_block_status_chunk(
                &mut head,
                cookie,
                BASE_ALLOCATION_ID,
                &descs,
                true,
            ) {
                Some(()) => (head, None),
                None => (
                    error_reply(cookie, structured, proto::EIO, "bad block status"),
                    None,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(len: u64, hole: bool) -> StatusRun {
        StatusRun {
            len,
            hole,
            zero: hole,
        }
    }

    #[test]
    fn descriptors_clip_and_merge() {
        let runs = [run(100, true), run(50, true), run(1000, false)];
        let d = runs_to_descriptors(&runs, 200, 10);
        assert_eq!(
            d,
            vec![
                Descriptor {
                    len: 150,
                    flags: proto::STATE_HOLE | proto::STATE_ZERO
                },
                Descriptor { len: 50, flags: 0 },
            ]
        );
        let d = runs_to_descriptors(&runs, 200, 1);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].len, 150);
        // A run longer than u32 is clipped to the request.
        let d = runs_to_descriptors(&[run(1 << 40, false)], u32::MAX, 4);
        assert_eq!(
            d,
            vec![Descriptor {
                len: u32::MAX,
                flags: 0
            }]
        );
    }

    #[test]
    fn descriptors_fallback() {
        assert_eq!(
            runs_to_descriptors(&[], 512, 4),
            vec![Descriptor { len: 512, flags: 0 }]
        );
        assert_eq!(
            runs_to_descriptors(&[run(0, true)], 512, 4),
            vec![Descriptor { len: 512, flags: 0 }]
        );
    }

    #[test]
    fn error_reply_never_zero() {
        let r = error_reply(1, false, 0, "x");
        assert_eq!(&r[4..8], &proto::EIO.to_be_bytes());
    }
}
