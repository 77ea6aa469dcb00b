//! The replayer's own NBD client: a plain socket (TCP or Unix), the fixed
//! newstyle handshake with `NBD_OPT_GO`, and requests and simple replies
//! written and read by whoever holds each half of the socket, so a sender
//! can keep any number of requests in flight while a reader takes the
//! replies as they come. The library's client (`tierd::nbd::client`) waits
//! for each reply on the calling thread, resends writes after a lost
//! connection and flushes on its own when too many are unflushed: right for
//! a capacity tier, wrong for a replay that must send exactly what the trace
//! did, when it did.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{bail, Context};
use tierd::nbd::client::{Endpoint, Target};
use tierd::nbd::proto;

/// Longest a connection attempt or a handshake reply may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest option reply read during the handshake.
const MAX_OPTION_REPLY: u32 = 64 * 1024;
/// Requests are cut to at most this many bytes unless the server asks for
/// less (tierd takes 32 MiB).
const MAX_REQUEST: u32 = 32 << 20;

/// One end of a connection.
pub enum Stream {
    /// TCP, Nagle off.
    Tcp(TcpStream),
    /// A Unix socket.
    Unix(UnixStream),
}

impl Stream {
    /// A second handle on the same socket (one thread writes, one reads).
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    /// Shut both directions down, waking a thread blocked on the socket.
    pub fn close(&self) {
        // Already closed: nothing more to do.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// Fail reads that wait longer than `t` (`None`: wait for ever).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// What the handshake learned about the export.
#[derive(Debug, Clone, Copy)]
pub struct Export {
    /// Bytes.
    pub size: u64,
    /// Transmission flags (`proto::FLAG_*`).
    pub flags: u16,
    /// Longest request sent.
    pub max_request: u32,
}

impl Export {
    /// Whether the server advertised `flag`.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// Open the socket and negotiate the export. TLS (`nbds://`) is refused:
/// the replayer speaks plain NBD.
pub fn connect(target: &Target) -> anyhow::Result<(Stream, Export)> {
    if target.tls_name.is_some() {
        bail!("{target}: the replayer speaks plain NBD; give an nbd:// or nbd+unix:// address");
    }
    let mut s = open(&target.endpoint)
        .with_context(|| format!("cannot reach {target} (is tierd serving there?)"))?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .with_context(|| format!("talking to {target}"))?;
    let export = negotiate(&mut s, &target.export)
        .with_context(|| format!("negotiating the export with {target}"))?;
    s.set_read_timeout(None)
        .with_context(|| format!("talking to {target}"))?;
    Ok((s, export))
}

fn open(endpoint: &Endpoint) -> io::Result<Stream> {
    match endpoint {
        Endpoint::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
        Endpoint::Tcp(addr) => {
            let mut last = io::Error::new(io::ErrorKind::NotFound, "no address for that host");
            for a in addr.to_socket_addrs()? {
                match TcpStream::connect_timeout(&a, HANDSHAKE_TIMEOUT) {
                    Ok(t) => {
                        t.set_nodelay(true)?;
                        return Ok(Stream::Tcp(t));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
    }
}

fn negotiate(s: &mut Stream, name: &str) -> anyhow::Result<Export> {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)
        .context("reading the greeting")?;
    let (magic, opt) = (u64_at(&greeting, 0), u64_at(&greeting, 8));
    if magic != proto::NBDMAGIC || opt != proto::IHAVEOPT {
        bail!("not a newstyle NBD server (bad greeting)");
    }
    let server = u16::from_be_bytes([greeting[16], greeting[17]]);
    if server & proto::FLAG_FIXED_NEWSTYLE == 0 {
        bail!("the server does not speak fixed newstyle");
    }
    let mut client = proto::FLAG_C_FIXED_NEWSTYLE;
    if server & proto::FLAG_NO_ZEROES != 0 {
        client |= proto::FLAG_C_NO_ZEROES;
    }
    s.write_all(&client.to_be_bytes())?;
    // NBD_OPT_GO: the name, and one information request (block sizes).
    let mut go = Vec::with_capacity(8 + name.len());
    go.extend_from_slice(&(name.len() as u32).to_be_bytes());
    go.extend_from_slice(name.as_bytes());
    go.extend_from_slice(&1u16.to_be_bytes());
    go.extend_from_slice(&proto::INFO_BLOCK_SIZE.to_be_bytes());
    s.write_all(&proto::encode_option(proto::OPT_GO, &go))?;
    let mut size_flags = None;
    let mut max_request = MAX_REQUEST;
    loop {
        let mut h = [0u8; proto::OPTION_REPLY_HEADER_LEN];
        s.read_exact(&mut h).context("reading an option reply")?;
        let r = proto::parse_option_reply(&h)?;
        if r.option != proto::OPT_GO || r.len > MAX_OPTION_REPLY {
            bail!(
                "unexpected option reply (option {}, {} bytes)",
                r.option,
                r.len
            );
        }
        let mut data = vec![0u8; r.len as usize];
        s.read_exact(&mut data).context("reading an option reply")?;
        let info = |t: u16| data.len() >= 2 && u16::from_be_bytes([data[0], data[1]]) == t;
        match r.reply_type {
            proto::REP_ACK => break,
            proto::REP_INFO if info(proto::INFO_EXPORT) && data.len() == 12 => {
                size_flags = Some((u64_at(&data, 2), u16::from_be_bytes([data[10], data[11]])));
            }
            proto::REP_INFO if info(proto::INFO_BLOCK_SIZE) && data.len() == 14 => {
                let max = u32::from_be_bytes([data[10], data[11], data[12], data[13]]);
                if max > 0 {
                    max_request = max_request.min(max);
                }
            }
            proto::REP_INFO => {}
            proto::REP_ERR_TLS_REQD => {
                bail!("the server requires TLS, which the replayer does not speak")
            }
            proto::REP_ERR_UNKNOWN => bail!("the server has no export named {name:?}"),
            t if t & proto::REP_FLAG_ERROR != 0 => bail!(
                "the server refused the export (error {t:#x}: {})",
                String::from_utf8_lossy(&data)
            ),
            t => bail!("unexpected option reply type {t}"),
        }
    }
    let (size, flags) = size_flags.context("the server did not say the export's size")?;
    Ok(Export {
        size,
        flags,
        max_request: max_request.max(4096),
    })
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
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
