//! A small blocking NBD client written for the reliability tests: it speaks
//! the fixed-newstyle handshake and simple replies byte by byte over any
//! `Read + Write` stream, so tests can also send what a real client never
//! would (bad magic, truncated headers, huge lengths) and see exactly what
//! comes back. Written from the protocol description, independent of the
//! server's own codec.
//!
//! Each integration test file compiles this module on its own and uses only
//! part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) | 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) | 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) | 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) | 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) | 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) | 9;

pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const FLAG_FUA: u16 = 1;
pub const FLAG_READ_ONLY: u16 = 1 << 1;

pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;

/// A request failed: the connection broke, or the server answered an errno.
#[derive(Debug)]
pub enum RawError {
    Io(io::Error),
    Errno(u32),
}

impl From<io::Error> for RawError {
    fn from(e: io::Error) -> Self {
        RawError::Io(e)
    }
}

pub type RawResult<T> = Result<T, RawError>;

pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

pub fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Read the server greeting; returns its handshake flags.
pub fn read_greeting<S: Read>(s: &mut S) -> io::Result<u16> {
    let mut g = [0u8; 18];
    s.read_exact(&mut g)?;
    if be64(&g[0..8]) != NBDMAGIC || be64(&g[8..16]) != IHAVEOPT {
        return Err(io::Error::other(format!("bad greeting {g:02x?}")));
    }
    Ok(u16::from_be_bytes([g[16], g[17]]))
}

/// Send an option header and payload (`len` may lie about the payload).
pub fn send_option_raw<S: Write>(s: &mut S, opt: u32, len: u32, data: &[u8]) -> io::Result<()> {
    let mut m = Vec::with_capacity(16 + data.len());
    m.extend_from_slice(&IHAVEOPT.to_be_bytes());
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(data);
    s.write_all(&m)?;
    s.flush()
}

pub fn send_option<S: Write>(s: &mut S, opt: u32, data: &[u8]) -> io::Result<()> {
    send_option_raw(s, opt, data.len() as u32, data)
}

/// One option reply: (option, reply type, payload).
pub fn read_option_reply<S: Read>(s: &mut S) -> io::Result<(u32, u32, Vec<u8>)> {
    let mut h = [0u8; 20];
    s.read_exact(&mut h)?;
    if be64(&h[0..8]) != REPLY_MAGIC {
        return Err(io::Error::other(format!("bad option reply magic {h:02x?}")));
    }
    let len = be32(&h[16..20]);
    if len > 1 << 20 {
        return Err(io::Error::other(format!("option reply of {len} bytes")));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data)?;
    Ok((be32(&h[8..12]), be32(&h[12..16]), data))
}

/// Payload of OPT_GO/OPT_INFO for the default export, no info requests.
pub fn go_payload(name: &str) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&0u16.to_be_bytes());
    p
}

/// Send OPT_GO and read replies up to the final one. Ok((size, flags)) on
/// ACK; Err(reply type) on an error reply.
pub fn go<S: Read + Write>(s: &mut S) -> io::Result<Result<(u64, u16), u32>> {
    send_option(s, OPT_GO, &go_payload(""))?;
    let mut info = None;
    loop {
        let (opt, typ, data) = read_option_reply(s)?;
        if opt != OPT_GO {
            return Err(io::Error::other(format!("reply to option {opt}, not GO")));
        }
        match typ {
            REP_INFO if data.len() >= 12 && data[0..2] == [0, 0] => {
                info = Some((be64(&data[2..10]), u16::from_be_bytes([data[10], data[11]])));
            }
            REP_INFO => {}
            REP_ACK => {
                return info
                    .map(Ok)
                    .ok_or_else(|| io::Error::other("GO acknowledged without NBD_INFO_EXPORT"))
            }
            err => return Ok(Err(err)),
        }
    }
}

/// Encode a request header.
pub fn request(flags: u16, typ: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&typ.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&len.to_be_bytes());
    h
}

/// A client in the transmission phase with simple replies.
pub struct Nbd<S: Read + Write = TcpStream> {
    pub s: S,
    pub size: u64,
    pub flags: u16,
    cookie: u64,
}

impl Nbd<TcpStream> {
    /// Connect and negotiate with OPT_GO (fixed newstyle, no zeroes).
    pub fn connect(addr: &str) -> io::Result<Self> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Self::handshake(s)
    }
}

impl<S: Read + Write> Nbd<S> {
    /// Run the handshake over a connected stream.
    pub fn handshake(mut s: S) -> io::Result<Self> {
        read_greeting(&mut s)?;
        s.write_all(&3u32.to_be_bytes())?;
        match go(&mut s)? {
            Ok((size, flags)) => Ok(Nbd {
                s,
                size,
                flags,
                cookie: 1,
            }),
            Err(t) => Err(io::Error::other(format!("GO refused with {t:#x}"))),
        }
    }

    fn next_cookie(&mut self) -> u64 {
        self.cookie += 1;
        self.cookie
    }

    /// Send a request header (and payload); returns its cookie.
    pub fn send(
        &mut self,
        flags: u16,
        typ: u16,
        offset: u64,
        len: u32,
        data: &[u8],
    ) -> io::Result<u64> {
        let c = self.next_cookie();
        let mut m = request(flags, typ, c, offset, len).to_vec();
        m.extend_from_slice(data);
        self.s.write_all(&m)?;
        self.s.flush()?;
        Ok(c)
    }

    /// Read one simple reply header: (errno, cookie).
    pub fn reply(&mut self) -> io::Result<(u32, u64)> {
        let mut r = [0u8; 16];
        self.s.read_exact(&mut r)?;
        if be32(&r[0..4]) != SIMPLE_REPLY_MAGIC {
            return Err(io::Error::other(format!("bad reply magic {r:02x?}")));
        }
        Ok((be32(&r[4..8]), be64(&r[8..16])))
    }

    fn expect(&mut self, cookie: u64) -> RawResult<()> {
        let (errno, got) = self.reply()?;
        if got != cookie {
            return Err(RawError::Io(io::Error::other(format!(
                "reply for cookie {got}, expected {cookie}"
            ))));
        }
        if errno != 0 {
            return Err(RawError::Errno(errno));
        }
        Ok(())
    }

    pub fn read(&mut self, offset: u64, len: u32) -> RawResult<Vec<u8>> {
        let c = self.send(0, CMD_READ, offset, len, &[])?;
        self.expect(c)?;
        let mut buf = vec![0u8; len as usize];
        self.s.read_exact(&mut buf)?;
        Ok(buf)
    }

    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> RawResult<()> {
        let flags = if fua { FLAG_FUA } else { 0 };
        let c = self.send(flags, CMD_WRITE, offset, data.len() as u32, data)?;
        self.expect(c)
    }

    pub fn flush(&mut self) -> RawResult<()> {
        let c = self.send(0, CMD_FLUSH, 0, 0, &[])?;
        self.expect(c)
    }

    pub fn trim(&mut self, offset: u64, len: u32) -> RawResult<()> {
        let c = self.send(0, CMD_TRIM, offset, len, &[])?;
        self.expect(c)
    }

    pub fn zeroes(&mut self, offset: u64, len: u32) -> RawResult<()> {
        let c = self.send(0, CMD_WRITE_ZEROES, offset, len, &[])?;
        self.expect(c)
    }

    /// Send NBD_CMD_DISC (no reply comes).
    pub fn disc(&mut self) -> io::Result<()> {
        self.send(0, CMD_DISC, 0, 0, &[]).map(|_| ())
    }
}
