//! The part every text importer shares: lines in (each at most
//! [`MAX_LINE`] bytes of UTF-8), a format's [`LineParser`] in the middle,
//! records out, relative to the first and never going back in time; and the
//! small field helpers the parsers use.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::str::FromStr;

use super::stats::ImportStats;
use crate::trace::{Header, Op, Record, TraceError};

/// A stream of records.
pub type Records = Box<dyn Iterator<Item = Result<Record, TraceError>>>;

/// The longest line a text importer accepts, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Bytes of a disk sector in blkparse and CloudPhysics traces.
const SECTOR: u64 = 512;

pub(super) fn text<R: Read + 'static, P: LineParser + 'static>(
    r: BufReader<R>,
    parser: P,
    source: String,
    stats: &ImportStats,
) -> (Header, Records) {
    let mut t = TextImport {
        r,
        parser,
        stats: stats.clone(),
        line: 0,
        buf: Vec::new(),
        queue: VecDeque::new(),
        error: None,
        ended: false,
        t0: None,
        last: 0,
    };
    // Read up to the first record: it may carry the wall-clock start.
    t.fill();
    let start_unix_ns = t
        .queue
        .front()
        .and_then(|raw| t.parser.unix_ns(raw))
        .unwrap_or(0);
    let header = Header {
        start_unix_ns,
        volume_size: 0,
        source,
    };
    (header, Box::new(t))
}

/// A record as a text parser produces it: the time in nanoseconds on the
/// format's own clock (absolute, u128 so that no clock overflows).
#[derive(Debug, Clone, Copy)]
pub(super) struct Raw {
    pub(super) t: u128,
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) conn: u16,
    pub(super) op: Op,
    pub(super) fua: bool,
}

impl Raw {
    /// A data request, checked that its end fits in 64 bits.
    pub(super) fn data(t: u128, offset: u64, len: u64, conn: u16, op: Op) -> Result<Raw, String> {
        let len = u32::try_from(len)
            .map_err(|_| format!("length {len} is more than a request can have (4 GiB - 1)"))?;
        if offset.checked_add(u64::from(len)).is_none() {
            return Err(format!(
                "offset {offset} + length {len} is past the end of any device"
            ));
        }
        Ok(Raw {
            t,
            offset,
            len,
            conn,
            op,
            fua: false,
        })
    }

    pub(super) fn flush(t: u128, conn: u16) -> Raw {
        Raw {
            t,
            offset: 0,
            len: 0,
            conn,
            op: Op::Flush,
            fua: false,
        }
    }
}

/// One text format's line syntax.
pub(super) trait LineParser {
    /// The format's name in errors.
    const FORMAT: &'static str;

    /// Parse one line (without its line end): push its records, if any.
    /// Blank lines and `#` comments never reach it.
    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        stats: &ImportStats,
    ) -> Result<(), String>;

    /// The input ended (or failed): push whatever is held back.
    fn finish(&mut self, _out: &mut VecDeque<Raw>) {}

    /// Wall-clock time of a record in ns since the Unix epoch, if known.
    fn unix_ns(&self, _raw: &Raw) -> Option<u64> {
        None
    }
}

/// Lines in, records out: the shared part of every text importer.
struct TextImport<R, P> {
    r: BufReader<R>,
    parser: P,
    stats: ImportStats,
    /// Lines read so far (the number of the current one).
    line: u64,
    buf: Vec<u8>,
    queue: VecDeque<Raw>,
    /// The error that ends the stream once the queue is out.
    error: Option<TraceError>,
    /// No more lines will be read.
    ended: bool,
    /// The first record's time.
    t0: Option<u128>,
    /// The last relative time handed out.
    last: u64,
}

impl<R: Read, P: LineParser> TextImport<R, P> {
    /// Read lines until a record is queued or the input ends.
    fn fill(&mut self) {
        while self.queue.is_empty() && !self.ended {
            if let Err(e) = self.step() {
                self.parser.finish(&mut self.queue);
                self.error = Some(e);
                self.ended = true;
            }
        }
    }

    /// Read and parse one line.
    fn step(&mut self) -> Result<(), TraceError> {
        self.buf.clear();
        let n = (&mut self.r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            self.parser.finish(&mut self.queue);
            self.ended = true;
            return Ok(());
        }
        self.line += 1;
        let parse_error = |line, problem: String| TraceError::Parse {
            format: P::FORMAT,
            line,
            problem,
        };
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
        } else if self.buf.len() > MAX_LINE {
            return Err(parse_error(
                self.line,
                format!("the line is longer than {MAX_LINE} bytes"),
            ));
        }
        let line = std::str::from_utf8(&self.buf)
            .map_err(|e| parse_error(self.line, format!("not UTF-8 text ({e})")))?;
        if is_blank_or_comment(line) {
            return Ok(());
        }
        self.parser
            .parse(line, &mut self.queue, &self.stats)
            .map_err(|p| parse_error(self.line, p))
    }

    /// The record of `raw`: relative to the first, never before the last.
    fn record(&mut self, raw: Raw) -> Record {
        let t0 = *self.t0.get_or_insert(raw.t);
        let t_ns = if raw.t < t0 + u128::from(self.last) {
            self.stats.clamp();
            self.last
        } else {
            u64::try_from(raw.t - t0).unwrap_or(u64::MAX)
        };
        self.last = t_ns;
        Record {
            t_ns,
            offset: raw.offset,
            len: raw.len,
            conn: raw.conn,
            op: raw.op,
            fua: raw.fua,
        }
    }
}

impl<R: Read, P: LineParser> Iterator for TextImport<R, P> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.fill();
        if let Some(raw) = self.queue.pop_front() {
            return Some(Ok(self.record(raw)));
        }
        self.error.take().map(Err)
    }
}

/// The trimmed comma-separated fields of a CSV `line`, or `None` for a
/// header row: the first line (`seen` says whether one came before) whose
/// first field is `header`, in any case.
pub(super) fn csv_fields<'a>(line: &'a str, seen: &mut bool, header: &str) -> Option<Vec<&'a str>> {
    let first = !std::mem::replace(seen, true);
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    (!(first && f[0].eq_ignore_ascii_case(header))).then_some(f)
}

/// A line that carries nothing: blank, or a `#` comment.
fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

pub(super) fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A decimal field, with its name in the error.
pub(super) fn num<T: FromStr>(s: &str, what: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    s.parse::<T>()
        .map_err(|e| format!("{what} {s:?} is not a number of the right size ({e})"))
}

/// `n` sectors of 512 bytes as bytes, with its name in the error.
pub(super) fn sectors(n: u64, what: &str) -> Result<u64, String> {
    n.checked_mul(SECTOR)
        .ok_or_else(|| format!("{what} {n} sectors overflows 64 bits of bytes"))
}

/// A stable small number per name, in order of first appearance
/// (saturating at `u16::MAX`).
pub(super) fn index_of<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u16>, key: K) -> u16 {
    let next = u16::try_from(map.len()).unwrap_or(u16::MAX);
    *map.entry(key).or_insert(next)
}
