//! Block I/O traces: what a trace is (a [`Header`] and a time-ordered run
//! of [`Record`]s), tierd's own binary format with its [`TraceWriter`] and
//! [`TraceReader`], the importers of public formats ([`import`]), the fio
//! iolog exporter ([`export`]) and the figures `tierd trace info` prints
//! ([`stats`]). It knows nothing of volumes or NBD: a record is an
//! operation on a byte range at a time, whoever served or will replay it.
//!
//! The binary format (docs/trace.md has it byte by byte), all integers
//! little-endian:
//!
//! ```text
//! header   magic "TIERDTRC" | u16 version (1) | u16 header length | u32 flags (0)
//!          | u64 start_unix_ns | u64 volume_size | u16 source length | source (UTF-8)
//! records  24 bytes each: u64 t_ns | u64 offset | u32 len | u16 conn | u8 op | u8 flags
//! ```
//!
//! The header length covers everything from the magic to the first record,
//! so a later writer can append header fields that this reader skips.
//! Records are in non-decreasing `t_ns` order: the writer does not reorder
//! them and the reader does not check.

use std::fmt;
use std::io::{self, BufReader, BufWriter, Read, Write};

pub mod export;
pub mod import;
pub mod stats;

/// The first eight bytes of every tierd trace.
pub const MAGIC: [u8; 8] = *b"TIERDTRC";
/// The version this code writes and the only one it reads.
pub const VERSION: u16 = 1;
/// Bytes of one record.
pub const RECORD_LEN: usize = 24;
/// Bytes of the version 1 header before the source text.
pub const HEADER_FIXED_LEN: usize = 34;
/// The longest source text a header can hold (the header length is a u16).
pub const MAX_SOURCE_LEN: usize = u16::MAX as usize - HEADER_FIXED_LEN;
/// Record flag bit 0: the request asked for forced unit access.
pub const FLAG_FUA: u8 = 1;

/// What a request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Read `len` bytes.
    Read,
    /// Write `len` bytes.
    Write,
    /// Discard a range (its contents become unspecified; tierd reads zeros).
    Trim,
    /// Make a range read as zeros.
    Zero,
    /// Make every completed write durable (`offset` and `len` are 0).
    Flush,
}

impl Op {
    /// Every op, in code order.
    pub const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Trim, Op::Zero, Op::Flush];

    /// The op's code on disk.
    pub fn code(self) -> u8 {
        match self {
            Op::Read => 0,
            Op::Write => 1,
            Op::Trim => 2,
            Op::Zero => 3,
            Op::Flush => 4,
        }
    }

    /// The op of an on-disk code.
    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.get(usize::from(code)).copied()
    }

    /// Lower-case name (`read`, `write`, `trim`, `zero`, `flush`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Trim => "trim",
            Op::Zero => "zero",
            Op::Flush => "flush",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// When it was issued, in nanoseconds since the trace's start.
    pub t_ns: u64,
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
    /// Which connection (or disk, file, device: the importer says) issued it.
    pub conn: u16,
    /// What it did.
    pub op: Op,
    /// Forced unit access: durable before the reply.
    pub fua: bool,
}

/// What a trace says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// When the trace started, in nanoseconds since the Unix epoch (0 = unknown).
    pub start_unix_ns: u64,
    /// Size of the traced volume in bytes (0 = unknown).
    pub volume_size: u64,
    /// What made it, e.g. "tierd 0.1.0 recording" or "imported from msr-csv: hm_0.csv".
    pub source: String,
}

/// Why a trace cannot be read (or written in another format).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// Reading or writing failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The file is not a tierd trace.
    #[error("not a tierd trace: it does not start with \"TIERDTRC\"")]
    BadMagic,
    /// A version this build does not read.
    #[error("tierd trace version {0} is not supported (this build reads version {VERSION})")]
    Version(u16),
    /// The header is inconsistent.
    #[error("bad tierd trace header: {0}")]
    BadHeader(String),
    /// The file ends inside the header or a record.
    #[error("the trace ends inside {what} at byte {offset}: {got} of {want} bytes")]
    Truncated {
        /// "the header" or "a record".
        what: &'static str,
        /// Where the cut-off part starts.
        offset: u64,
        /// Bytes present.
        got: usize,
        /// Bytes needed.
        want: usize,
    },
    /// A record whose op code is unknown.
    #[error("record {index} (byte {offset}): unknown op code {code}")]
    BadOp {
        /// The record's index (0-based).
        index: u64,
        /// Where the record starts.
        offset: u64,
        /// The code.
        code: u8,
    },
    /// A record with flag bits this version does not define.
    #[error("record {index} (byte {offset}): unknown flag bits {flags:#04x}")]
    BadFlags {
        /// The record's index (0-based).
        index: u64,
        /// Where the record starts.
        offset: u64,
        /// The flags byte.
        flags: u8,
    },
    /// A line of a text format does not parse.
    #[error("{format} line {line}: {problem}")]
    Parse {
        /// The format's name.
        format: &'static str,
        /// The 1-based line number.
        line: u64,
        /// What is wrong.
        problem: String,
    },
    /// Detection found no known format.
    #[error(
        "cannot tell the trace's format from its first bytes; name it with --format ({})",
        import::Format::NAMES
    )]
    UnknownFormat,
    /// A format name that is not one.
    #[error("unknown trace format {0:?}: use one of {names}", names = import::Format::NAMES)]
    FormatName(String),
    /// The trace cannot be expressed in the export format.
    #[error("cannot export: {0}")]
    Export(String),
}

/// Writes a tierd trace: the header at once, then records as they come.
/// Buffered; [`finish`](Self::finish) flushes.
pub struct TraceWriter<W: Write> {
    w: BufWriter<W>,
    records: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Write `header` to `w`. Fails with `InvalidInput` when the source is
    /// longer than [`MAX_SOURCE_LEN`] bytes.
    pub fn new(w: W, header: &Header) -> io::Result<Self> {
        let source = header.source.as_bytes();
        if source.len() > MAX_SOURCE_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "trace source is {} bytes, more than the {MAX_SOURCE_LEN} a header holds",
                    source.len()
                ),
            ));
        }
        let mut w = BufWriter::new(w);
        let header_len = (HEADER_FIXED_LEN + source.len()) as u16;
        let mut buf = Vec::with_capacity(usize::from(header_len));
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&header_len.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        buf.extend_from_slice(&header.start_unix_ns.to_le_bytes());
        buf.extend_from_slice(&header.volume_size.to_le_bytes());
        buf.extend_from_slice(&(source.len() as u16).to_le_bytes());
        buf.extend_from_slice(source);
        w.write_all(&buf)?;
        Ok(Self { w, records: 0 })
    }

    /// Append one record.
    pub fn write(&mut self, r: &Record) -> io::Result<()> {
        self.w.write_all(&encode(r))?;
        self.records += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flush everything and hand back the writer.
    pub fn finish(self) -> io::Result<W> {
        self.w.into_inner().map_err(|e| e.into_error())
    }
}

/// The 24 bytes of a record.
fn encode(r: &Record) -> [u8; RECORD_LEN] {
    let mut b = [0u8; RECORD_LEN];
    b[0..8].copy_from_slice(&r.t_ns.to_le_bytes());
    b[8..16].copy_from_slice(&r.offset.to_le_bytes());
    b[16..20].copy_from_slice(&r.len.to_le_bytes());
    b[20..22].copy_from_slice(&r.conn.to_le_bytes());
    b[22] = r.op.code();
    b[23] = if r.fua { FLAG_FUA } else { 0 };
    b
}

/// Fill `buf` from `r` until it is full or the input ends; returns the
/// bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn le_u16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

/// Reads a tierd trace: [`new`](Self::new) reads and checks the header, then
/// the reader yields the records in file order. It stops after the first
/// error. Buffered internally.
pub struct TraceReader<R: Read> {
    r: BufReader<R>,
    header: Header,
    /// Byte offset of the next record.
    pos: u64,
    /// Index of the next record.
    index: u64,
    done: bool,
}

impl<R: Read> TraceReader<R> {
    /// Read and validate the header.
    pub fn new(r: R) -> Result<Self, TraceError> {
        let mut r = BufReader::new(r);
        let mut fixed = [0u8; HEADER_FIXED_LEN];
        let got = read_full(&mut r, &mut fixed)?;
        if got < MAGIC.len() || fixed[..MAGIC.len()] != MAGIC {
            return Err(TraceError::BadMagic);
        }
        let version = le_u16(&fixed[8..]);
        if got >= 10 && version != VERSION {
            return Err(TraceError::Version(version));
        }
        if got < HEADER_FIXED_LEN {
            return Err(TraceError::Truncated {
                what: "the header",
                offset: 0,
                got,
                want: HEADER_FIXED_LEN,
            });
        }
        let header_len = usize::from(le_u16(&fixed[10..]));
        let flags = le_u32(&fixed[12..]);
        if flags != 0 {
            return Err(TraceError::BadHeader(format!(
                "unknown header flags {flags:#x}"
            )));
        }
        let start_unix_ns = le_u64(&fixed[16..]);
        let volume_size = le_u64(&fixed[24..]);
        let source_len = usize::from(le_u16(&fixed[32..]));
        if header_len < HEADER_FIXED_LEN + source_len {
            return Err(TraceError::BadHeader(format!(
                "header length {header_len} is shorter than its {HEADER_FIXED_LEN} fixed bytes and {source_len}-byte source"
            )));
        }
        // The source, then any fields a later writer appended.
        let mut rest = vec![0u8; header_len - HEADER_FIXED_LEN];
        let got = read_full(&mut r, &mut rest)?;
        if got < rest.len() {
            return Err(TraceError::Truncated {
                what: "the header",
                offset: 0,
                got: HEADER_FIXED_LEN + got,
                want: header_len,
            });
        }
        rest.truncate(source_len);
        let source = String::from_utf8(rest)
            .map_err(|e| TraceError::BadHeader(format!("the source is not UTF-8: {e}")))?;
        Ok(Self {
            r,
            header: Header {
                start_unix_ns,
                volume_size,
                source,
            },
            pos: header_len as u64,
            index: 0,
            done: false,
        })
    }

    /// The trace's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        let mut b = [0u8; RECORD_LEN];
        let got = read_full(&mut self.r, &mut b)?;
        if got == 0 {
            return Ok(None);
        }
        let (index, offset) = (self.index, self.pos);
        if got < RECORD_LEN {
            return Err(TraceError::Truncated {
                what: "a record",
                offset,
                got,
                want: RECORD_LEN,
            });
        }
        let op = Op::from_code(b[22]).ok_or(TraceError::BadOp {
            index,
            offset,
            code: b[22],
        })?;
        let flags = b[23];
        if flags & !FLAG_FUA != 0 {
            return Err(TraceError::BadFlags {
                index,
                offset,
                flags,
            });
        }
        self.index += 1;
        self.pos += RECORD_LEN as u64;
        Ok(Some(Record {
            t_ns: le_u64(&b[0..]),
            offset: le_u64(&b[8..]),
            len: le_u32(&b[16..]),
            conn: le_u16(&b[20..]),
            op,
            fua: flags & FLAG_FUA != 0,
        }))
    }
}

impl<R: Read> Iterator for TraceReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(source: &str) -> Header {
        Header {
            start_unix_ns: 1_700_000_000_123_456_789,
            volume_size: 36 << 30,
            source: source.to_string(),
        }
    }

    /// One record of every op, with and without FUA, and extreme values.
    fn sample() -> Vec<Record> {
        let mut v = Vec::new();
        for (i, op) in Op::ALL.into_iter().enumerate() {
            for fua in [false, true] {
                v.push(Record {
                    t_ns: (i as u64) * 1000 + u64::from(fua),
                    offset: (i as u64) << 40 | 4096,
                    len: 4096 * (i as u32 + 1),
                    conn: i as u16 * 7,
                    op,
                    fua,
                });
            }
        }
        v.push(Record {
            t_ns: u64::MAX,
            offset: u64::MAX,
            len: u32::MAX,
            conn: u16::MAX,
            op: Op::Flush,
            fua: true,
        });
        v
    }

    fn write_all(h: &Header, records: &[Record]) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), h).expect("header");
        for r in records {
            w.write(r).expect("record");
        }
        assert_eq!(w.records(), records.len() as u64);
        w.finish().expect("finish")
    }

    fn read_all(bytes: &[u8]) -> Result<(Header, Vec<Record>), TraceError> {
        let r = TraceReader::new(bytes)?;
        let h = r.header().clone();
        Ok((h, r.collect::<Result<Vec<_>, _>>()?))
    }

    #[test]
    fn every_op_and_flag_round_trips() {
        let h = header("tierd 0.1.0 recording");
        let recs = sample();
        let bytes = write_all(&h, &recs);
        assert_eq!(
            bytes.len(),
            HEADER_FIXED_LEN + h.source.len() + RECORD_LEN * recs.len()
        );
        let (h2, recs2) = read_all(&bytes).expect("read back");
        assert_eq!(h2, h);
        assert_eq!(recs2, recs);
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let h = Header {
            start_unix_ns: 0x0102030405060708,
            volume_size: 0x1122334455667788,
            source: "ab".into(),
        };
        let r = Record {
            t_ns: 5,
            offset: 0x1000,
            len: 512,
            conn: 3,
            op: Op::Zero,
            fua: true,
        };
        let bytes = write_all(&h, &[r]);
        let mut want = b"TIERDTRC".to_vec();
        want.extend_from_slice(&[1, 0, 36, 0, 0, 0, 0, 0]); // version, header length, flags
        want.extend_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
        want.extend_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        want.extend_from_slice(&[2, 0, b'a', b'b']);
        want.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 0x10, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 2, 0, 0, 3, 0, 3, 1]);
        assert_eq!(bytes, want);
    }

    #[test]
    fn a_long_source_round_trips_and_a_too_long_one_is_refused() {
        let long = "é".repeat(MAX_SOURCE_LEN / 2) + "x"; // exactly MAX_SOURCE_LEN bytes
        assert_eq!(long.len(), MAX_SOURCE_LEN);
        let h = header(&long);
        let bytes = write_all(&h, &sample());
        let (h2, recs) = read_all(&bytes).expect("read back");
        assert_eq!(h2.source, long);
        assert_eq!(recs, sample());

        let too_long = header(&(long + "y"));
        let err = TraceWriter::new(Vec::new(), &too_long)
            .err()
            .expect("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn appended_header_fields_are_skipped() {
        let h = header("src");
        let mut bytes = write_all(&h, &sample());
        // A later writer's extra 6 header bytes after the source.
        let header_len = HEADER_FIXED_LEN + 3;
        bytes.splice(header_len..header_len, [9u8; 6]);
        bytes[10..12].copy_from_slice(&((header_len + 6) as u16).to_le_bytes());
        let (h2, recs) = read_all(&bytes).expect("read back");
        assert_eq!(h2, h);
        assert_eq!(recs, sample());
    }

    #[test]
    fn a_truncated_last_record_names_its_byte_offset() {
        let h = header("x");
        let bytes = write_all(&h, &sample()[..3]);
        let cut = &bytes[..bytes.len() - 10];
        let mut r = TraceReader::new(cut).expect("header");
        assert!(r.next().expect("first").is_ok());
        assert!(r.next().expect("second").is_ok());
        match r.next() {
            Some(Err(TraceError::Truncated {
                what,
                offset,
                got,
                want,
            })) => {
                assert_eq!(what, "a record");
                assert_eq!(offset, (HEADER_FIXED_LEN + 1 + 2 * RECORD_LEN) as u64);
                assert_eq!((got, want), (14, 24));
            }
            other => panic!("want Truncated, got {other:?}"),
        }
        assert!(r.next().is_none(), "the reader stops after an error");
        let msg = read_all(cut).expect_err("truncated").to_string();
        assert!(msg.contains("byte 83"), "{msg}");
    }

    #[test]
    fn a_truncated_header_is_an_error() {
        let bytes = write_all(&header("source"), &[]);
        for cut in [12, HEADER_FIXED_LEN - 1, HEADER_FIXED_LEN + 2] {
            match TraceReader::new(&bytes[..cut]) {
                Err(TraceError::Truncated { what, .. }) => assert_eq!(what, "the header"),
                Err(e) => panic!("cut at {cut}: {e}"),
                Ok(_) => panic!("cut at {cut}: accepted"),
            }
        }
        // A header and no records is an empty trace.
        let (_, recs) = read_all(&bytes).expect("empty");
        assert!(recs.is_empty());
    }

    #[test]
    fn bad_magic_version_flags_and_lengths_are_refused() {
        let good = write_all(&header("s"), &sample());
        let mut bad = good.clone();
        bad[0] = b't';
        assert!(matches!(
            TraceReader::new(&bad[..]),
            Err(TraceError::BadMagic)
        ));
        assert!(matches!(
            TraceReader::new(&b"TIERD"[..]),
            Err(TraceError::BadMagic)
        ));
        assert!(matches!(
            TraceReader::new(&b"fio version 3 iolog\n"[..]),
            Err(TraceError::BadMagic)
        ));
        let mut bad = good.clone();
        bad[8] = 2;
        assert!(matches!(
            TraceReader::new(&bad[..]),
            Err(TraceError::Version(2))
        ));
        let mut bad = good.clone();
        bad[12] = 1;
        assert!(matches!(
            TraceReader::new(&bad[..]),
            Err(TraceError::BadHeader(_))
        ));
        let mut bad = good.clone();
        bad[10] = 30; // header length shorter than the fixed part
        assert!(matches!(
            TraceReader::new(&bad[..]),
            Err(TraceError::BadHeader(_))
        ));
        let mut bad = good;
        bad[HEADER_FIXED_LEN] = 0xff; // the source is not UTF-8
        assert!(matches!(
            TraceReader::new(&bad[..]),
            Err(TraceError::BadHeader(_))
        ));
    }

    #[test]
    fn unknown_op_codes_and_flags_name_the_record() {
        let h = header("");
        let mut bytes = write_all(&h, &sample()[..4]);
        let third = HEADER_FIXED_LEN + 2 * RECORD_LEN;
        bytes[third + 22] = 5;
        let err = read_all(&bytes).expect_err("bad op");
        assert!(
            matches!(err, TraceError::BadOp { index: 2, code: 5, offset } if offset == third as u64),
            "{err:?}"
        );
        assert!(err.to_string().contains("record 2"), "{err}");
        bytes[third + 22] = 1;
        bytes[third + 23] = 0x82;
        let err = read_all(&bytes).expect_err("bad flags");
        assert!(
            matches!(
                err,
                TraceError::BadFlags {
                    index: 2,
                    flags: 0x82,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn op_codes_are_stable() {
        for (code, op) in Op::ALL.into_iter().enumerate() {
            assert_eq!(op.code(), code as u8);
            assert_eq!(Op::from_code(code as u8), Some(op));
        }
        assert_eq!(Op::from_code(5), None);
        assert_eq!(Op::Trim.to_string(), "trim");
    }
}
