//! The NBD wire format: option and request parsing, and reply encoding,
//! over the protocol's constants (magics, sizes, flags, option, command and
//! reply types, errnos), which live in `consts.rs` and are re-exported here.
//! Pure code with no I/O, so every message shape is unit-tested here.
//!
//! Parsers take byte slices whose length the caller has already bounded (an
//! option payload is at most [`MAX_OPTION_LEN`] bytes) and validate every
//! embedded length against what remains before allocating anything.
//! Encoders append to a `Vec<u8>` or return a fixed-size array.
//!
//! All values follow the NBD protocol document (`doc/proto.md` of the
//! NetworkBlockDevice/nbd project); fields are big-endian.

mod consts;
#[cfg(test)]
mod tests;

pub use consts::*;

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
