//! The replayer's side of NBD: a plain connection negotiated by the
//! library (`tierd::nbd::client::open_raw`), and requests and simple
//! replies written and read by whoever holds each half of the socket, so a
//! sender can keep any number of requests in flight while a reader takes
//! the replies as they come. The library's `Client` waits for each reply on
//! the calling thread, resends writes after a lost connection and flushes
//! on its own when too many are unflushed: right for a capacity tier, wrong
//! for a replay that must send exactly what the trace did, when it did.

use std::io::{self, Read};
use std::time::Duration;

use anyhow::bail;
use tierd::nbd::client::{open_raw, ClientError, Target};
use tierd::nbd::proto;

pub use tierd::nbd::client::{Export, RawConnection as Stream};

/// Longest a connection attempt or a handshake step may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Open the socket and negotiate the export (the library's handshake, as
/// tierd's capacity-tier client does it). TLS (`nbds://`) is refused: the
/// replayer speaks plain NBD.
pub fn connect(target: &Target) -> anyhow::Result<(Stream, Export)> {
    if target.tls_name.is_some() {
        bail!("{target}: the replayer speaks plain NBD; give an nbd:// or nbd+unix:// address");
    }
    open_raw(target, HANDSHAKE_TIMEOUT).map_err(|e| match e {
        ClientError::Io { source, .. } => anyhow::Error::new(source)
            .context(format!("cannot reach {target} (is tierd serving there?)")),
        e => anyhow::Error::new(e).context(format!("negotiating the export with {target}")),
    })
}

/// The 28-byte header of a request.
pub fn header(typ: u16, flags: u16, cookie: u64, offset: u64, length: u32) -> [u8; 28] {
    proto::encode_request(&proto::Request {
        flags,
        typ,
        cookie,
        offset,
        length,
    })
}

/// A command's name for messages.
pub fn cmd_name(cmd: u16) -> &'static str {
    match cmd {
        proto::CMD_READ => "READ",
        proto::CMD_WRITE => "WRITE",
        proto::CMD_FLUSH => "FLUSH",
        proto::CMD_TRIM => "TRIM",
        proto::CMD_WRITE_ZEROES => "WRITE_ZEROES",
        _ => "request",
    }
}

/// Read one simple reply's header: `(errno, cookie)`. A read's data
/// follows it; the caller knows how long it is.
pub fn read_reply(r: &mut impl Read) -> io::Result<(u32, u64)> {
    let mut h = [0u8; proto::SIMPLE_REPLY_LEN];
    r.read_exact(&mut h)?;
    proto::parse_simple_reply(&h).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The pieces `(offset, len)` a request of `len` bytes at `offset` is cut
/// into, each at most `max` bytes (one empty piece for an empty request).
pub fn pieces(offset: u64, len: u64, max: u32) -> impl Iterator<Item = (u64, u32)> {
    let max = u64::from(max.max(1));
    let n = len.div_ceil(max).max(1);
    (0..n).map(move |i| {
        let at = i * max;
        (offset + at, (len - at.min(len)).min(max) as u32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_cut_into_pieces_of_at_most_max() {
        let p: Vec<_> = pieces(100, 10, 4).collect();
        assert_eq!(p, vec![(100, 4), (104, 4), (108, 2)]);
        assert_eq!(pieces(7, 0, 4).collect::<Vec<_>>(), vec![(7, 0)]);
        assert_eq!(pieces(0, 8, 4).count(), 2);
    }
}
