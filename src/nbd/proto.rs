//! The NBD wire format: constants, option and request parsing, and reply
//! encoding. Pure code with no I/O, so every message shape is unit-tested here.
//!
//! Parsers take byte slices whose length the caller has already bounded (an
//! option payload is at most [`MAX_OPTION_LEN`] bytes) and validate every
//! embedded length against what remains before allocating anything.
//! Encoders append to a `Vec<u8>` or return a fixed-size array.
//!
//! All values follow the NBD protocol document (`doc/proto.md` of the
//! NetworkBlockDevice/nbd project); fields are big-endian.

/// `NBDMAGIC`: first 8 bytes sent by the server.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle magic, also the magic of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic of every fixed-newstyle option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Size of a request header on the wire.
pub const REQUEST_HEADER_LEN: usize = 28;
/// Size of an option header (magic, option, length) on the wire.
pub const OPTION_HEADER_LEN: usize = 16;
/// Size of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Size of a structured reply chunk header.
pub const STRUCTURED_HEADER_LEN: usize = 20;

/// Largest option payload the server parses; longer ones are refused.
pub const MAX_OPTION_LEN: u32 = 64 * 1024;
/// Longest string (export name, query, message) the protocol allows.
pub const MAX_STRING_LEN: usize = 4096;

// Handshake flags (server, 16 bits).
/// Server supports fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Server can omit the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;

// Client flags (32 bits).
/// Client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client does not want the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;
/// Every client flag this server understands.
pub const KNOWN_CLIENT_FLAGS: u32 = FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES;

// Option types.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_PEEK_EXPORT: u32 = 4;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
/// Bit set in every error reply type.
pub const REP_FLAG_ERROR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
pub const REP_ERR_POLICY: u32 = REP_FLAG_ERROR | 2;
pub const REP_ERR_INVALID: u32 = REP_FLAG_ERROR | 3;
pub const REP_ERR_PLATFORM: u32 = REP_FLAG_ERROR | 4;
pub const REP_ERR_TLS_REQD: u32 = REP_FLAG_ERROR | 5;
pub const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_FLAG_ERROR | 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_FLAG_ERROR | 8;
pub const REP_ERR_TOO_BIG: u32 = REP_FLAG_ERROR | 9;
pub const REP_ERR_EXT_HEADER_REQD: u32 = REP_FLAG_ERROR | 10;

// Information types for `NBD_OPT_INFO` / `NBD_OPT_GO`.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags (16 bits).
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_RESIZE: u16 = 1 << 9;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Command types.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_RESIZE: u16 = 8;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;
pub const CMD_FLAG_PAYLOAD_LEN: u16 = 1 << 5;

// Structured reply flags and types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

// `base:allocation` status flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// Name of the one metadata context the server supports.
pub const CONTEXT_BASE_ALLOCATION: &str = "base:allocation";

// Error values.
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Why an option payload or header could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A magic number did not match.
    #[error("bad magic {0:#x}")]
    BadMagic(u64),
    /// The payload ended before a field it declares.
    #[error("payload truncated: needed {needed} bytes, {available} available")]
    Truncated { needed: usize, available: usize },
    /// Bytes were left over after the declared fields.
    #[error("{0} trailing bytes after the declared fields")]
    TrailingBytes(usize),
    /// A string is longer than the protocol allows.
    #[error("string of {0} bytes is longer than {MAX_STRING_LEN}")]
    StringTooLong(usize),
    /// A string is not valid UTF-8 or contains NUL.
    #[error("string is not valid UTF-8 without NUL")]
    BadString,
}

/// A bounds-checked reader over a byte slice.
struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.buf.len() {
            return Err(ProtoError::Truncated {
                needed: n,
                available: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u16(&mut self) -> Result<u16, ProtoError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, ProtoError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A string of `len` bytes; the length is checked before anything is copied.
    fn string(&mut self, len: u32) -> Result<String, ProtoError> {
        let len = len as usize;
        if len > MAX_STRING_LEN {
            return Err(ProtoError::StringTooLong(len));
        }
        let bytes = self.take(len)?;
        parse_string(bytes)
    }

    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn finish(&self) -> Result<(), ProtoError> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(ProtoError::TrailingBytes(n)),
        }
    }
}

/// Validate a protocol string: UTF-8, no NUL, at most [`MAX_STRING_LEN`] bytes.
pub fn parse_string(bytes: &[u8]) -> Result<String, ProtoError> {
    if bytes.len() > MAX_STRING_LEN {
        return Err(ProtoError::StringTooLong(bytes.len()));
    }
    if bytes.contains(&0) {
        return Err(ProtoError::BadString);
    }
    std::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| ProtoError::BadString)
}

/// The 16-byte header of a client option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option number (`OPT_*`).
    pub option: u32,
    /// Length of the payload that follows.
    pub len: u32,
}

/// Parse an option header; anything but `IHAVEOPT` as magic is fatal.
pub fn parse_option_header(buf: &[u8; OPTION_HEADER_LEN]) -> Result<OptionHeader, ProtoError> {
    let magic = u64::from_be_bytes([
        buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7],
    ]);
    if magic != IHAVEOPT {
        return Err(ProtoError::BadMagic(magic));
    }
    Ok(OptionHeader {
        option: u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]),
        len: u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]),
    })
}

/// The payload of `NBD_OPT_INFO` / `NBD_OPT_GO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    /// Export name (empty: the default export).
    pub name: String,
    /// Requested `INFO_*` items, in the client's order.
    pub requests: Vec<u16>,
}

/// Parse `u32 name length, name, u16 n, n × u16`; the whole payload must be used.
pub fn parse_info_request(payload: &[u8]) -> Result<InfoRequest, ProtoError> {
    let mut c = Cursor::new(payload);
    let name_len = c.u32()?;
    let name = c.string(name_len)?;
    let n = c.u16()? as usize;
    let needed = n * 2;
    if needed > c.remaining() {
        return Err(ProtoError::Truncated {
            needed,
            available: c.remaining(),
        });
    }
    let mut requests = Vec::with_capacity(n);
    for _ in 0..n {
        requests.push(c.u16()?);
    }
    c.finish()?;
    Ok(InfoRequest { name, requests })
}

/// The payload of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest {
    /// Export the contexts are for.
    pub export: String,
    /// Query strings, in the client's order.
    pub queries: Vec<String>,
}

/// Parse `u32 name length, name, u32 n, n × (u32 length, string)`.
pub fn parse_meta_context_request(payload: &[u8]) -> Result<MetaContextRequest, ProtoError> {
    let mut c = Cursor::new(payload);
    let name_len = c.u32()?;
    let export = c.string(name_len)?;
    let n = c.u32()? as usize;
    // Every query takes at least its 4-byte length: bound `n` before allocating.
    let min_needed = n.saturating_mul(4);
    if min_needed > c.remaining() {
        return Err(ProtoError::Truncated {
            needed: min_needed,
            available: c.remaining(),
        });
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.u32()?;
        queries.push(c.string(len)?);
    }
    c.finish()?;
    Ok(MetaContextRequest { export, queries })
}

/// A transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags (`CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`CMD_*`).
    pub typ: u16,
    /// Opaque value echoed in the reply.
    pub cookie: u64,
    /// Byte offset into the export.
    pub offset: u64,
    /// Length in bytes (the payload length for `CMD_WRITE`).
    pub length: u32,
}

/// Parse a 28-byte request header; a wrong magic is fatal for the connection.
pub fn parse_request(buf: &[u8; REQUEST_HEADER_LEN]) -> Result<Request, ProtoError> {
    let magic = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if magic != REQUEST_MAGIC {
        return Err(ProtoError::BadMagic(u64::from(magic)));
    }
    let mut b8 = [0u8; 8];
    b8.copy_from_slice(&buf[8..16]);
    let cookie = u64::from_be_bytes(b8);
    b8.copy_from_slice(&buf[16..24]);
    let offset = u64::from_be_bytes(b8);
    Ok(Request {
        flags: u16::from_be_bytes([buf[4], buf[5]]),
        typ: u16::from_be_bytes([buf[6], buf[7]]),
        cookie,
        offset,
        length: u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]]),
    })
}

/// Encode a request header (used by tests and clients).
pub fn encode_request(req: &Request) -> [u8; REQUEST_HEADER_LEN] {
    let mut b = [0u8; REQUEST_HEADER_LEN];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&req.flags.to_be_bytes());
    b[6..8].copy_from_slice(&req.typ.to_be_bytes());
    b[8..16].copy_from_slice(&req.cookie.to_be_bytes());
    b[16..24].copy_from_slice(&req.offset.to_be_bytes());
    b[24..28].copy_from_slice(&req.length.to_be_bytes());
    b
}

/// The server's first 18 bytes: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub fn encode_server_greeting(flags: u16) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&flags.to_be_bytes());
    b
}

/// Append an option reply: magic, option, reply type, length, data.
///
/// `data` longer than `u32::MAX` cannot occur: option replies are built from
/// bounded strings.
pub fn encode_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Data of `NBD_REP_SERVER`: u32 name length, name, then a description.
pub fn encode_rep_server(name: &str, description: &str) -> Vec<u8> {
    let mut d = Vec::with_capacity(4 + name.len() + description.len());
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(description.as_bytes());
    d
}

/// Data of `NBD_REP_INFO` / `NBD_INFO_EXPORT`.
pub fn encode_info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut d = Vec::with_capacity(12);
    d.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    d.extend_from_slice(&size.to_be_bytes());
    d.extend_from_slice(&flags.to_be_bytes());
    d
}

/// Data of `NBD_REP_INFO` / `NBD_INFO_BLOCK_SIZE`.
pub fn encode_info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut d = Vec::with_capacity(14);
    d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    d.extend_from_slice(&min.to_be_bytes());
    d.extend_from_slice(&preferred.to_be_bytes());
    d.extend_from_slice(&max.to_be_bytes());
    d
}

/// Data of `NBD_REP_INFO` carrying a string (`INFO_NAME`, `INFO_DESCRIPTION`).
pub fn encode_info_string(info_type: u16, s: &str) -> Vec<u8> {
    let mut d = Vec::with_capacity(2 + s.len());
    d.extend_from_slice(&info_type.to_be_bytes());
    d.extend_from_slice(s.as_bytes());
    d
}

/// Data of `NBD_REP_META_CONTEXT`: u32 context id, name.
pub fn encode_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut d = Vec::with_capacity(4 + name.len());
    d.extend_from_slice(&id.to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, flags, and 124 zeroes unless
/// the client negotiated `NO_ZEROES`.
pub fn encode_export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut d = Vec::with_capacity(134);
    d.extend_from_slice(&size.to_be_bytes());
    d.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        d.extend_from_slice(&[0u8; 124]);
    }
    d
}

/// A simple reply header; for a successful read the data follows it.
pub fn encode_simple_reply(errno: u32, cookie: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0u8; SIMPLE_REPLY_LEN];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&errno.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk header.
pub fn encode_structured_header(
    flags: u16,
    typ: u16,
    cookie: u64,
    len: u32,
) -> [u8; STRUCTURED_HEADER_LEN] {
    let mut b = [0u8; STRUCTURED_HEADER_LEN];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&typ.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// Append a `NONE` chunk (always with `DONE`).
pub fn encode_none_chunk(out: &mut Vec<u8>, cookie: u64) {
    out.extend_from_slice(&encode_structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_NONE,
        cookie,
        0,
    ));
}

/// Append the header and offset of an `OFFSET_DATA` chunk carrying
/// `data_len` bytes; the caller sends the data right after.
///
/// Returns `None` when `8 + data_len` does not fit the 32-bit length field.
pub fn encode_offset_data_header(
    out: &mut Vec<u8>,
    cookie: u64,
    offset: u64,
    data_len: usize,
    done: bool,
) -> Option<()> {
    let len = u32::try_from(data_len.checked_add(8)?).ok()?;
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    out.extend_from_slice(&encode_structured_header(
        flags,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        len,
    ));
    out.extend_from_slice(&offset.to_be_bytes());
    Some(())
}

/// Longest prefix of `msg` that fits in `max` bytes on a char boundary.
fn truncate_str(msg: &str, max: usize) -> &str {
    if msg.len() <= max {
        return msg;
    }
    let mut end = max;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    &msg[..end]
}

/// Append an `ERROR` chunk with `DONE`: errno, message length, message
/// (truncated to [`MAX_STRING_LEN`] bytes).
pub fn encode_error_chunk(out: &mut Vec<u8>, cookie: u64, errno: u32, msg: &str) {
    let msg = truncate_str(msg, MAX_STRING_LEN);
    let len = 6 + msg.len() as u32;
    out.extend_from_slice(&encode_structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        len,
    ));
    out.extend_from_slice(&errno.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg.as_bytes());
}

/// One `base:allocation` extent descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Length in bytes (nonzero).
    pub len: u32,
    /// `STATE_*` flags.
    pub flags: u32,
}

/// Append a `BLOCK_STATUS` chunk for context `context_id`.
///
/// Returns `None` (appending nothing) if `descriptors` is empty or the chunk
/// length would not fit in 32 bits.
pub fn encode_block_status_chunk(
    out: &mut Vec<u8>,
    cookie: u64,
    context_id: u32,
    descriptors: &[Descriptor],
    done: bool,
) -> Option<()> {
    if descriptors.is_empty() {
        return None;
    }
    let len = descriptors
        .len()
        .checked_mul(8)
        .and_then(|n| n.checked_add(4))
        .and_then(|n| u32::try_from(n).ok())?;
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    out.reserve(STRUCTURED_HEADER_LEN + len as usize);
    out.extend_from_slice(&encode_structured_header(
        flags,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        len,
    ));
    out.extend_from_slice(&context_id.to_be_bytes());
    for d in descriptors {
        out.extend_from_slice(&d.len.to_be_bytes());
        out.extend_from_slice(&d.flags.to_be_bytes());
    }
    Some(())
}

/// A client option: `IHAVEOPT`, option, payload length, payload.
pub fn encode_option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(OPTION_HEADER_LEN + data.len());
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// The 20-byte header of a server's option reply.
pub const OPTION_REPLY_HEADER_LEN: usize = 20;

/// A server's option reply header, as a client reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionReply {
    /// The option it answers.
    pub option: u32,
    /// `REP_*`.
    pub reply_type: u32,
    /// Length of the data that follows.
    pub len: u32,
}

/// Parse an option reply header; a wrong magic is fatal.
pub fn parse_option_reply(buf: &[u8; OPTION_REPLY_HEADER_LEN]) -> Result<OptionReply, ProtoError> {
    let mut b8 = [0u8; 8];
    b8.copy_from_slice(&buf[0..8]);
    let magic = u64::from_be_bytes(b8);
    if magic != OPTION_REPLY_MAGIC {
        return Err(ProtoError::BadMagic(magic));
    }
    Ok(OptionReply {
        option: u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]),
        reply_type: u32::from_be_bytes([buf[12], buf[13], buf[14], buf[15]]),
        len: u32::from_be_bytes([buf[16], buf[17], buf[18], buf[19]]),
    })
}

/// Parse a simple reply header into `(errno, cookie)`; a wrong magic
/// (a structured reply the client never asked for among them) is fatal.
pub fn parse_simple_reply(buf: &[u8; SIMPLE_REPLY_LEN]) -> Result<(u32, u64), ProtoError> {
    let magic = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if magic != SIMPLE_REPLY_MAGIC {
        return Err(ProtoError::BadMagic(u64::from(magic)));
    }
    let mut b8 = [0u8; 8];
    b8.copy_from_slice(&buf[8..16]);
    Ok((
        u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        u64::from_be_bytes(b8),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be32(v: u32) -> [u8; 4] {
        v.to_be_bytes()
    }

    #[test]
    fn magics_and_values() {
        assert_eq!(&NBDMAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
        assert_eq!(REP_ERR_UNSUP, 0x8000_0001);
        assert_eq!(REP_ERR_TOO_BIG, 0x8000_0009);
        assert_eq!(REPLY_TYPE_ERROR, 32769);
        assert_eq!(FLAG_SEND_FAST_ZERO, 2048);
    }

    #[test]
    fn greeting() {
        let g = encode_server_greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..18], &[0, 3]);
    }

    #[test]
    fn option_header() {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[8..12].copy_from_slice(&be32(OPT_GO));
        b[12..16].copy_from_slice(&be32(77));
        assert_eq!(
            parse_option_header(&b),
            Ok(OptionHeader {
                option: OPT_GO,
                len: 77
            })
        );
        b[0] = 0;
        assert!(matches!(
            parse_option_header(&b),
            Err(ProtoError::BadMagic(_))
        ));
    }

    fn info_payload(name: &[u8], reqs: &[u16]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&(name.len() as u32).to_be_bytes());
        p.extend_from_slice(name);
        p.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
        for r in reqs {
            p.extend_from_slice(&r.to_be_bytes());
        }
        p
    }

    #[test]
    fn info_request_ok() {
        let p = info_payload(b"disk", &[INFO_NAME, INFO_BLOCK_SIZE]);
        let r = parse_info_request(&p).unwrap();
        assert_eq!(r.name, "disk");
        assert_eq!(r.requests, vec![INFO_NAME, INFO_BLOCK_SIZE]);
        let r = parse_info_request(&info_payload(b"", &[])).unwrap();
        assert_eq!(r.name, "");
        assert!(r.requests.is_empty());
    }

    #[test]
    fn info_request_malformed() {
        // Name length larger than the payload.
        let mut p = info_payload(b"disk", &[]);
        p[0..4].copy_from_slice(&be32(1000));
        assert!(matches!(
            parse_info_request(&p),
            Err(ProtoError::Truncated { .. })
        ));
        // Huge name length: refused without allocation.
        p[0..4].copy_from_slice(&be32(u32::MAX));
        assert!(matches!(
            parse_info_request(&p),
            Err(ProtoError::StringTooLong(_))
        ));
        // Count of requests larger than what follows.
        let mut p = info_payload(b"d", &[1]);
        let at = 4 + 1;
        p[at..at + 2].copy_from_slice(&500u16.to_be_bytes());
        assert!(matches!(
            parse_info_request(&p),
            Err(ProtoError::Truncated { .. })
        ));
        // Trailing bytes.
        let mut p = info_payload(b"d", &[1]);
        p.push(0);
        assert_eq!(parse_info_request(&p), Err(ProtoError::TrailingBytes(1)));
        // Too short for the name length.
        assert!(parse_info_request(&[0, 0]).is_err());
        // Missing the request count.
        assert!(parse_info_request(&[0, 0, 0, 0]).is_err());
        // Bad strings.
        assert_eq!(
            parse_info_request(&info_payload(b"a\0b", &[])),
            Err(ProtoError::BadString)
        );
        assert_eq!(
            parse_info_request(&info_payload(&[0xff, 0xfe], &[])),
            Err(ProtoError::BadString)
        );
    }

    fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&(name.len() as u32).to_be_bytes());
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            p.extend_from_slice(&(q.len() as u32).to_be_bytes());
            p.extend_from_slice(q.as_bytes());
        }
        p
    }

    #[test]
    fn meta_context_ok() {
        let r =
            parse_meta_context_request(&meta_payload("", &["base:allocation", "base:"])).unwrap();
        assert_eq!(r.export, "");
        assert_eq!(r.queries, vec!["base:allocation", "base:"]);
        let r = parse_meta_context_request(&meta_payload("x", &[])).unwrap();
        assert!(r.queries.is_empty());
    }

    #[test]
    fn meta_context_malformed() {
        // Query count far beyond what the payload could hold.
        let mut p = meta_payload("", &[]);
        p[4..8].copy_from_slice(&be32(u32::MAX));
        assert!(matches!(
            parse_meta_context_request(&p),
            Err(ProtoError::Truncated { .. })
        ));
        // Query length beyond the payload.
        let mut p = meta_payload("", &["base:"]);
        p[8..12].copy_from_slice(&be32(100));
        assert!(matches!(
            parse_meta_context_request(&p),
            Err(ProtoError::Truncated { .. })
        ));
        // Query length beyond the string limit.
        p[8..12].copy_from_slice(&be32(5000));
        assert_eq!(
            parse_meta_context_request(&p),
            Err(ProtoError::StringTooLong(5000))
        );
        // Trailing bytes.
        let mut p = meta_payload("", &["base:"]);
        p.extend_from_slice(&[1, 2]);
        assert_eq!(
            parse_meta_context_request(&p),
            Err(ProtoError::TrailingBytes(2))
        );
        assert!(parse_meta_context_request(&[]).is_err());
    }

    #[test]
    fn client_side_codec_reads_what_the_server_side_writes() {
        let opt = encode_option(OPT_GO, b"abc");
        let mut h = [0u8; OPTION_HEADER_LEN];
        h.copy_from_slice(&opt[..OPTION_HEADER_LEN]);
        assert_eq!(
            parse_option_header(&h),
            Ok(OptionHeader {
                option: OPT_GO,
                len: 3
            })
        );
        assert_eq!(&opt[OPTION_HEADER_LEN..], b"abc");
        let mut out = Vec::new();
        encode_option_reply(&mut out, OPT_GO, REP_ERR_UNKNOWN, b"xy");
        let mut r = [0u8; OPTION_REPLY_HEADER_LEN];
        r.copy_from_slice(&out[..OPTION_REPLY_HEADER_LEN]);
        assert_eq!(
            parse_option_reply(&r),
            Ok(OptionReply {
                option: OPT_GO,
                reply_type: REP_ERR_UNKNOWN,
                len: 2
            })
        );
        r[0] ^= 1;
        assert!(matches!(
            parse_option_reply(&r),
            Err(ProtoError::BadMagic(_))
        ));
        let s = encode_simple_reply(EIO, 77);
        assert_eq!(parse_simple_reply(&s), Ok((EIO, 77)));
        let st = encode_structured_header(0, REPLY_TYPE_NONE, 77, 0);
        let mut st16 = [0u8; SIMPLE_REPLY_LEN];
        st16.copy_from_slice(&st[..SIMPLE_REPLY_LEN]);
        assert!(matches!(
            parse_simple_reply(&st16),
            Err(ProtoError::BadMagic(_))
        ));
    }

    #[test]
    fn request_roundtrip() {
        let req = Request {
            flags: CMD_FLAG_FUA,
            typ: CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 512,
        };
        let b = encode_request(&req);
        assert_eq!(&b[0..4], &[0x25, 0x60, 0x95, 0x13]);
        assert_eq!(parse_request(&b), Ok(req));
        let mut bad = b;
        bad[3] ^= 1;
        assert!(matches!(parse_request(&bad), Err(ProtoError::BadMagic(_))));
    }

    #[test]
    fn option_replies() {
        let mut out = Vec::new();
        encode_option_reply(&mut out, OPT_LIST, REP_SERVER, &encode_rep_server("ab", ""));
        assert_eq!(&out[0..8], &OPTION_REPLY_MAGIC.to_be_bytes());
        assert_eq!(&out[8..12], &be32(OPT_LIST));
        assert_eq!(&out[12..16], &be32(REP_SERVER));
        assert_eq!(&out[16..20], &be32(6));
        assert_eq!(&out[20..], &[0, 0, 0, 2, b'a', b'b']);

        let e = encode_info_export(1 << 30, FLAG_HAS_FLAGS);
        assert_eq!(e.len(), 12);
        assert_eq!(&e[0..2], &[0, 0]);
        assert_eq!(&e[2..10], &(1u64 << 30).to_be_bytes());
        assert_eq!(&e[10..12], &[0, 1]);
        let b = encode_info_block_size(1, 4096, 1 << 25);
        assert_eq!(b.len(), 14);
        assert_eq!(&b[0..2], &[0, 3]);
        assert_eq!(&b[10..14], &be32(1 << 25));
        assert_eq!(encode_info_string(INFO_NAME, "n"), vec![0, 1, b'n']);
        assert_eq!(encode_meta_context(7, "base:allocation")[..4], be32(7));
        assert_eq!(encode_export_name_reply(5, 1, false).len(), 134);
        assert_eq!(encode_export_name_reply(5, 1, true).len(), 10);
    }

    #[test]
    fn simple_and_structured_replies() {
        let s = encode_simple_reply(EINVAL, 9);
        assert_eq!(&s[0..4], &be32(SIMPLE_REPLY_MAGIC));
        assert_eq!(&s[4..8], &be32(22));
        assert_eq!(&s[8..16], &9u64.to_be_bytes());

        let mut out = Vec::new();
        encode_none_chunk(&mut out, 3);
        assert_eq!(out.len(), 20);
        assert_eq!(&out[0..4], &be32(STRUCTURED_REPLY_MAGIC));
        assert_eq!(&out[4..6], &REPLY_FLAG_DONE.to_be_bytes());
        assert_eq!(&out[6..8], &REPLY_TYPE_NONE.to_be_bytes());
        assert_eq!(&out[16..20], &be32(0));

        let mut out = Vec::new();
        encode_offset_data_header(&mut out, 3, 4096, 512, true).unwrap();
        assert_eq!(out.len(), 28);
        assert_eq!(&out[6..8], &REPLY_TYPE_OFFSET_DATA.to_be_bytes());
        assert_eq!(&out[16..20], &be32(520));
        assert_eq!(&out[20..28], &4096u64.to_be_bytes());
        let mut none = Vec::new();
        assert!(encode_offset_data_header(&mut none, 3, 0, usize::MAX, true).is_none());

        let mut out = Vec::new();
        encode_error_chunk(&mut out, 4, EIO, "boom");
        assert_eq!(&out[6..8], &REPLY_TYPE_ERROR.to_be_bytes());
        assert_eq!(&out[16..20], &be32(10));
        assert_eq!(&out[20..24], &be32(EIO));
        assert_eq!(&out[24..26], &[0, 4]);
        assert_eq!(&out[26..], b"boom");

        let mut out = Vec::new();
        let long = "é".repeat(3000); // 6000 bytes; truncated on a char boundary
        encode_error_chunk(&mut out, 4, EIO, &long);
        let mlen = u16::from_be_bytes([out[24], out[25]]) as usize;
        assert!(mlen <= MAX_STRING_LEN);
        assert!(std::str::from_utf8(&out[26..]).is_ok());
        assert_eq!(out.len(), 26 + mlen);

        let mut out = Vec::new();
        let d = [
            Descriptor {
                len: 65536,
                flags: STATE_HOLE | STATE_ZERO,
            },
            Descriptor { len: 512, flags: 0 },
        ];
        encode_block_status_chunk(&mut out, 5, 1, &d, true).unwrap();
        assert_eq!(&out[6..8], &REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
        assert_eq!(&out[16..20], &be32(20));
        assert_eq!(&out[20..24], &be32(1));
        assert_eq!(&out[24..28], &be32(65536));
        assert_eq!(&out[28..32], &be32(3));
        assert_eq!(&out[32..36], &be32(512));
        assert_eq!(&out[36..40], &be32(0));
        assert!(encode_block_status_chunk(&mut Vec::new(), 5, 1, &[], true).is_none());
    }
}
