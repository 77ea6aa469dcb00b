//! Importers: public trace formats read as a stream of [`Record`]s, with
//! the format told by name or detected from the first bytes. The formats
//! and what each importer keeps, converts and skips are in docs/trace.md;
//! in short:
//!
//! - [`Format::Tierd`]: tierd's binary format, read as it is.
//! - [`Format::MsrCsv`]: MSR Cambridge CSV (SNIA IOTTA set 388), FILETIME
//!   timestamps, byte offsets and sizes; conn = the disk number.
//! - [`Format::FioIolog`]: fio's iolog versions 2 and 3; conn = the file
//!   name's index in order of first appearance.
//! - [`Format::Blkparse`]: blkparse's default text, the `Q` events only;
//!   conn = the device's index in order of first appearance.
//! - [`Format::CloudPhysicsCsv`]: libCacheSim's CloudPhysics CSV, whole
//!   seconds spread evenly over each second's records.
//!
//! Every text format: times are made relative to the first record (which
//! starts at 0); a record that goes back in time is clamped to the time
//! before it (counted in [`ImportStats::clamped`]), so the output is in
//! non-decreasing time order and otherwise in input order; a line that does
//! not parse ends the import with [`TraceError::Parse`], naming the format,
//! the 1-based line number and what is wrong; a line longer than
//! [`MAX_LINE`] bytes or not UTF-8 is such an error.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Header, Op, Record, TraceError, TraceReader, MAGIC};

/// A stream of records.
pub type Records = Box<dyn Iterator<Item = Result<Record, TraceError>>>;

/// The longest line a text importer accepts, in bytes.
pub const MAX_LINE: usize = 64 * 1024;

/// Bytes of a disk sector in blkparse and CloudPhysics traces.
const SECTOR: u64 = 512;

/// FILETIME (100 ns ticks since 1601-01-01 UTC) of the Unix epoch.
const FILETIME_UNIX_EPOCH: u64 = 116_444_736_000_000_000;

/// The trace formats this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// tierd's binary format.
    Tierd,
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    MsrCsv,
    /// fio iolog, version 2 or 3.
    FioIolog,
    /// blkparse's default text output.
    Blkparse,
    /// libCacheSim's CloudPhysics CSV: `version,time,op,size,lbn`.
    CloudPhysicsCsv,
}

impl Format {
    /// Every format.
    pub const ALL: [Format; 5] = [
        Format::Tierd,
        Format::MsrCsv,
        Format::FioIolog,
        Format::Blkparse,
        Format::CloudPhysicsCsv,
    ];

    /// The formats' names, for messages.
    pub const NAMES: &'static str = "tierd, msr-csv, fio-iolog, blkparse, cloudphysics-csv";

    /// The format's name (what `--format` takes).
    pub fn name(self) -> &'static str {
        match self {
            Format::Tierd => "tierd",
            Format::MsrCsv => "msr-csv",
            Format::FioIolog => "fio-iolog",
            Format::Blkparse => "blkparse",
            Format::CloudPhysicsCsv => "cloudphysics-csv",
        }
    }

    /// The format of a file that starts with `first_bytes` (a few KiB are
    /// plenty), if it is one of these: the tierd magic, else the first line
    /// that is neither blank nor a `#` comment decides.
    pub fn detect(first_bytes: &[u8]) -> Option<Format> {
        if first_bytes.starts_with(&MAGIC) {
            return Some(Format::Tierd);
        }
        let text = match std::str::from_utf8(first_bytes) {
            Ok(t) => t,
            // Text cut inside a character, or binary: detect on what is valid.
            Err(e) => std::str::from_utf8(&first_bytes[..e.valid_up_to()]).unwrap_or_default(),
        };
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))?;
        if fio_version(line).is_some() {
            return Some(Format::FioIolog);
        }
        let squeezed: String = line
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        if squeezed == "version,time,op,size,lbn" {
            return Some(Format::CloudPhysicsCsv);
        }
        if squeezed.starts_with("timestamp,hostname,disknumber,type,offset,size") {
            return Some(Format::MsrCsv);
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() == 7
            && digits(f[0])
            && digits(f[2])
            && (f[3].eq_ignore_ascii_case("read") || f[3].eq_ignore_ascii_case("write"))
        {
            return Some(Format::MsrCsv);
        }
        if f.len() == 5
            && digits(f[0])
            && digits(f[1])
            && !f[2].is_empty()
            && f[2].chars().all(|c| c.is_ascii_hexdigit())
            && digits(f[3])
            && digits(f[4])
        {
            return Some(Format::CloudPhysicsCsv);
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        if t.len() >= 7
            && blk_device(t[0]).is_some()
            && digits(t[1])
            && digits(t[2])
            && blk_time(t[3]).is_some()
        {
            return Some(Format::Blkparse);
        }
        None
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = TraceError;

    /// A format's name, case-insensitive; also `msr`, `fio`, `cloudphysics`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "msr" => Some(Format::MsrCsv),
            "fio" => Some(Format::FioIolog),
            "cloudphysics" => Some(Format::CloudPhysicsCsv),
            _ => None,
        };
        alias
            .or_else(|| Format::ALL.into_iter().find(|f| f.name() == lower))
            .ok_or_else(|| TraceError::FormatName(s.to_string()))
    }
}

/// What an import passed over, as it goes: shared with the record stream,
/// complete once the stream has ended.
#[derive(Debug, Clone, Default)]
pub struct ImportStats(Arc<Mutex<Tally>>);

#[derive(Debug, Default)]
struct Tally {
    skipped: BTreeMap<String, u64>,
    clamped: u64,
}

impl ImportStats {
    /// Requests skipped, by reason (e.g. "SCSI opcode 35"), in reason order.
    pub fn skipped(&self) -> Vec<(String, u64)> {
        let t = self.0.lock();
        t.skipped.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Requests skipped in all.
    pub fn skipped_total(&self) -> u64 {
        self.0.lock().skipped.values().sum()
    }

    /// Records that went back in time and were given the previous time.
    pub fn clamped(&self) -> u64 {
        self.0.lock().clamped
    }

    fn skip(&self, reason: &str) {
        let mut t = self.0.lock();
        match t.skipped.get_mut(reason) {
            Some(n) => *n += 1,
            None => {
                t.skipped.insert(reason.to_string(), 1);
            }
        }
    }

    fn clamp(&self) {
        self.0.lock().clamped += 1;
    }
}

/// Open the trace at `path` in `format` (detected from its first bytes
/// when `None`): its header, then its records as they are read.
///
/// The header of an imported text trace has `volume_size` 0 (unknown),
/// `start_unix_ns` from the first record where the format has wall-clock
/// time (MSR) and 0 otherwise, and the source "imported from FORMAT: NAME".
pub fn open(path: &Path, format: Option<Format>) -> Result<(Header, Records), TraceError> {
    let i = open_with_stats(path, format)?;
    Ok((i.header, i.records))
}

/// An opened trace.
pub struct Import {
    /// Its header.
    pub header: Header,
    /// Its records, read as they are asked for.
    pub records: Records,
    /// Its format (as given, or detected).
    pub format: Format,
    /// What the import skipped and clamped so far.
    pub stats: ImportStats,
}

/// [`open`], also telling the format and what the import skipped and clamped.
pub fn open_with_stats(path: &Path, format: Option<Format>) -> Result<Import, TraceError> {
    let file = File::open(path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    from_reader(file, format, &name)
}

/// Import from any reader; `name` goes into the source of an imported
/// header ("imported from msr-csv: NAME").
pub fn from_reader<R: Read + 'static>(
    r: R,
    format: Option<Format>,
    name: &str,
) -> Result<Import, TraceError> {
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let format = match format {
        Some(f) => f,
        None => Format::detect(r.fill_buf()?).ok_or(TraceError::UnknownFormat)?,
    };
    let stats = ImportStats::default();
    let source = format!("imported from {}: {name}", format.name());
    let (header, records): (Header, Records) = match format {
        Format::Tierd => {
            let reader = TraceReader::new(r)?;
            (reader.header().clone(), Box::new(reader))
        }
        Format::MsrCsv => text(r, MsrCsv::default(), source, &stats),
        Format::FioIolog => text(r, FioIolog::default(), source, &stats),
        Format::Blkparse => text(r, Blkparse::default(), source, &stats),
        Format::CloudPhysicsCsv => text(r, CloudPhysicsCsv::default(), source, &stats),
    };
    Ok(Import {
        header,
        records,
        format,
        stats,
    })
}

fn text<R: Read + 'static, P: LineParser + 'static>(
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
struct Raw {
    t: u128,
    offset: u64,
    len: u32,
    conn: u16,
    op: Op,
    fua: bool,
}

impl Raw {
    /// A data request, checked that its end fits in 64 bits.
    fn data(t: u128, offset: u64, len: u64, conn: u16, op: Op) -> Result<Raw, String> {
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

    fn flush(t: u128, conn: u16) -> Raw {
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
trait LineParser {
    /// The format's name in errors.
    const FORMAT: &'static str;

    /// Parse one line (without its line end): push its records, if any.
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

/// A line that carries nothing: blank, or a `#` comment.
fn is_blank_or_comment(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A decimal field, with its name in the error.
fn num<T: FromStr>(s: &str, what: &str) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    s.parse::<T>()
        .map_err(|e| format!("{what} {s:?} is not a number of the right size ({e})"))
}

/// `n` sectors of 512 bytes as bytes, with its name in the error.
fn sectors(n: u64, what: &str) -> Result<u64, String> {
    n.checked_mul(SECTOR)
        .ok_or_else(|| format!("{what} {n} sectors overflows 64 bits of bytes"))
}

/// A stable small number per name, in order of first appearance
/// (saturating at `u16::MAX`).
fn index_of<K: std::hash::Hash + Eq>(map: &mut HashMap<K, u16>, key: K) -> u16 {
    let next = u16::try_from(map.len()).unwrap_or(u16::MAX);
    *map.entry(key).or_insert(next)
}

// ---------------------------------------------------------------- MSR

/// MSR Cambridge CSV (docs/trace.md#msr-cambridge-csv).
#[derive(Default)]
struct MsrCsv {
    seen_line: bool,
}

impl LineParser for MsrCsv {
    const FORMAT: &'static str = "msr-csv";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        _: &ImportStats,
    ) -> Result<(), String> {
        if is_blank_or_comment(line) {
            return Ok(());
        }
        let first = !self.seen_line;
        self.seen_line = true;
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if first && f[0].eq_ignore_ascii_case("timestamp") {
            return Ok(()); // a header some redistributions add
        }
        if f.len() != 7 {
            return Err(format!(
                "expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), found {}",
                f.len()
            ));
        }
        let ticks: u64 = num(f[0], "Timestamp")?;
        let disk: u64 = num(f[2], "DiskNumber")?;
        let op = if f[3].eq_ignore_ascii_case("read") {
            Op::Read
        } else if f[3].eq_ignore_ascii_case("write") {
            Op::Write
        } else {
            return Err(format!("Type {:?} is neither Read nor Write", f[3]));
        };
        let offset: u64 = num(f[4], "Offset")?;
        let size: u64 = num(f[5], "Size")?;
        let conn = u16::try_from(disk).unwrap_or(u16::MAX);
        out.push_back(Raw::data(u128::from(ticks) * 100, offset, size, conn, op)?);
        Ok(())
    }

    fn unix_ns(&self, raw: &Raw) -> Option<u64> {
        let ticks = u64::try_from(raw.t / 100).ok()?;
        ticks.checked_sub(FILETIME_UNIX_EPOCH)?.checked_mul(100)
    }
}

// ---------------------------------------------------------------- fio

/// The version of a fio iolog header line.
fn fio_version(line: &str) -> Option<u8> {
    // fio compares the line's start, as strncmp does.
    if line.starts_with("fio version 2 iolog") {
        Some(2)
    } else if line.starts_with("fio version 3 iolog") {
        Some(3)
    } else {
        None
    }
}

/// fio iolog v2 and v3 (docs/trace.md#fio-iolog).
#[derive(Default)]
struct FioIolog {
    version: Option<u8>,
    files: HashMap<String, u16>,
    /// v2: the time the last `wait` moved the clock to.
    clock: u128,
}

impl FioIolog {
    fn file_action(&mut self, file: &str, action: &str) -> Result<(), String> {
        index_of(&mut self.files, file.to_string());
        match action {
            "add" | "open" | "close" => Ok(()),
            _ => Err(format!(
                "unknown file action {action:?} (add, open or close)"
            )),
        }
    }

    fn io_action(&mut self, t: u128, f: &[&str], out: &mut VecDeque<Raw>) -> Result<(), String> {
        let [file, action, offset, length] = [f[0], f[1], f[2], f[3]];
        let conn = index_of(&mut self.files, file.to_string());
        let offset: u64 = num(offset, "offset")?;
        let length: u32 = num(length, "length")?;
        let op = match action {
            "read" => Op::Read,
            "write" => Op::Write,
            "trim" => Op::Trim,
            "sync" | "datasync" => {
                out.push_back(Raw::flush(t, conn));
                return Ok(());
            }
            "wait" if self.version == Some(2) => {
                // fio sleeps until `offset` milliseconds after the job
                // started (iolog.c), whatever the HOWTO says.
                self.clock = self.clock.max(u128::from(offset) * 1_000_000);
                return Ok(());
            }
            "wait" => {
                return Err(
                    "`wait` is not allowed in a version 3 iolog (its lines carry timestamps)"
                        .into(),
                )
            }
            _ => {
                return Err(format!(
                    "unknown action {action:?} (read, write, trim, sync, datasync{})",
                    if self.version == Some(2) {
                        ", wait"
                    } else {
                        ""
                    }
                ))
            }
        };
        out.push_back(Raw::data(t, offset, u64::from(length), conn, op)?);
        Ok(())
    }
}

impl LineParser for FioIolog {
    const FORMAT: &'static str = "fio-iolog";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        _: &ImportStats,
    ) -> Result<(), String> {
        if is_blank_or_comment(line) {
            return Ok(());
        }
        let line = line.trim();
        let Some(version) = self.version else {
            self.version = Some(fio_version(line).ok_or_else(|| {
                format!("expected the header `fio version 2 iolog` or `fio version 3 iolog`, found {line:?}")
            })?);
            return Ok(());
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        match (version, f.len()) {
            (2, 2) => self.file_action(f[0], f[1]),
            (2, 4) => self.io_action(self.clock, &f, out),
            (2, n) => Err(format!(
                "expected `FILE ACTION` or `FILE ACTION OFFSET LENGTH`, found {n} fields"
            )),
            (_, 3) => {
                num::<u64>(f[0], "timestamp")?;
                self.file_action(f[1], f[2])
            }
            (_, 5) => {
                let us: u64 = num(f[0], "timestamp")?;
                self.io_action(u128::from(us) * 1000, &f[1..], out)
            }
            (_, n) => Err(format!(
                "expected `TIMESTAMP FILE ACTION` or `TIMESTAMP FILE ACTION OFFSET LENGTH`, found {n} fields"
            )),
        }
    }
}

// ---------------------------------------------------------------- blkparse

/// `maj,min` of a blkparse event line.
fn blk_device(s: &str) -> Option<(u32, u32)> {
    let (maj, min) = s.split_once(',')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

/// `SECONDS.NANOSECONDS` of a blkparse event line, in ns.
fn blk_time(s: &str) -> Option<u128> {
    let (sec, ns) = s.split_once('.')?;
    if !digits(sec) || !digits(ns) || ns.len() > 9 {
        return None;
    }
    let scale = 10u128.pow(9 - ns.len() as u32);
    Some(sec.parse::<u128>().ok()? * 1_000_000_000 + ns.parse::<u128>().ok()? * scale)
}

/// blkparse default text output (docs/trace.md#blkparse).
#[derive(Default)]
struct Blkparse {
    devices: HashMap<(u32, u32), u16>,
}

impl LineParser for Blkparse {
    const FORMAT: &'static str = "blkparse";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        stats: &ImportStats,
    ) -> Result<(), String> {
        // dev cpu seq time pid action rwbs trailer...
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 7 || f[5] != "Q" || !digits(f[1]) || !digits(f[2]) {
            return Ok(()); // another event, a CPU header, the summary
        }
        let Some(dev) = blk_device(f[0]) else {
            return Ok(());
        };
        let t =
            blk_time(f[3]).ok_or_else(|| format!("time {:?} is not SECONDS.NANOSECONDS", f[3]))?;
        let conn = index_of(&mut self.devices, dev);
        let rwbs = f[6].as_bytes();
        // [F] one of D W R N [F][A][S][M]; older blkparse: W or R, then
        // A, B (barrier), S, M. A lone F (ftrace) is a flush.
        let preflush = rwbs.len() >= 2 && rwbs[0] == b'F';
        let (kind, mods) = match rwbs {
            [b'F'] => (b'F', &rwbs[1..]),
            _ if preflush => (rwbs[1], &rwbs[2..]),
            [k, rest @ ..] => (*k, rest),
            [] => return Err("empty RWBS field".into()),
        };
        let fua = mods.contains(&b'F');
        let flush_first = preflush || mods.contains(&b'B');
        let op = match kind {
            b'R' => Some(Op::Read),
            b'W' => Some(Op::Write),
            b'D' => Some(Op::Trim),
            b'N' | b'F' => None,
            _ => {
                return Err(format!(
                    "RWBS {:?} names no operation (R, W, D or N after an optional F)",
                    f[6]
                ))
            }
        };
        if kind == b'F' || (op.is_none() && flush_first) {
            out.push_back(Raw::flush(t, conn));
            return Ok(());
        }
        let Some(op) = op else {
            stats.skip("blkparse Q events without data (N)");
            return Ok(());
        };
        // sector + count [comm]; a packet command has `bytes (cdb) [comm]`.
        if f.len() < 10 || f[8] != "+" {
            stats.skip("blkparse packet-command Q events");
            return Ok(());
        }
        let offset = sectors(num(f[7], "sector")?, "sector")?;
        let len = sectors(num(f[9], "sector count")?, "sector count")?;
        if flush_first {
            out.push_back(Raw::flush(t, conn));
        }
        let mut raw = Raw::data(t, offset, len, conn, op)?;
        raw.fua = fua;
        out.push_back(raw);
        Ok(())
    }
}

// ---------------------------------------------------------------- CloudPhysics

/// libCacheSim's CloudPhysics CSV (docs/trace.md#cloudphysics-csv).
#[derive(Default)]
struct CloudPhysicsCsv {
    seen_line: bool,
    /// The second being gathered and its records so far.
    second: u64,
    group: Vec<Raw>,
}

impl CloudPhysicsCsv {
    /// Spread the gathered second's records evenly over it.
    fn flush_group(&mut self, out: &mut VecDeque<Raw>) {
        let n = self.group.len() as u128;
        let base = u128::from(self.second) * 1_000_000_000;
        for (i, mut raw) in self.group.drain(..).enumerate() {
            raw.t = base + i as u128 * 1_000_000_000 / n;
            out.push_back(raw);
        }
    }
}

impl LineParser for CloudPhysicsCsv {
    const FORMAT: &'static str = "cloudphysics-csv";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        stats: &ImportStats,
    ) -> Result<(), String> {
        if is_blank_or_comment(line) {
            return Ok(());
        }
        let first = !self.seen_line;
        self.seen_line = true;
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if first && f[0].eq_ignore_ascii_case("version") {
            return Ok(()); // the header
        }
        if f.len() != 5 {
            return Err(format!(
                "expected 5 comma-separated fields (version,time,op,size,lbn), found {}",
                f.len()
            ));
        }
        num::<u64>(f[0], "version")?;
        let second: u64 = num(f[1], "time")?;
        let hex = f[2]
            .strip_prefix("0x")
            .or_else(|| f[2].strip_prefix("0X"))
            .unwrap_or(f[2]);
        let opcode = u8::from_str_radix(hex, 16)
            .map_err(|_| format!("op {:?} is not a SCSI opcode in hex", f[2]))?;
        let size: u64 = num(f[3], "size")?;
        let lbn: u64 = num(f[4], "lbn")?;
        let op = match opcode {
            0x08 | 0x28 | 0x88 => Op::Read,
            0x0a | 0x2a | 0x8a => Op::Write,
            other => {
                stats.skip(&format!("SCSI opcode {other:02x}"));
                return Ok(());
            }
        };
        let raw = Raw::data(0, sectors(lbn, "lbn")?, size, 0, op)?;
        if second != self.second {
            self.flush_group(out);
            self.second = second;
        }
        self.group.push(raw);
        Ok(())
    }

    fn finish(&mut self, out: &mut VecDeque<Raw>) {
        self.flush_group(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn import(format: Option<Format>, text: &str) -> (Header, Vec<Record>, ImportStats) {
        let i =
            from_reader(std::io::Cursor::new(text.as_bytes().to_vec()), format, "t").expect("open");
        let (h, recs, stats) = (i.header, i.records, i.stats);
        let recs = recs
            .collect::<Result<Vec<_>, _>>()
            .unwrap_or_else(|e| panic!("import: {e}"));
        (h, recs, stats)
    }

    /// The error an import ends with, and the records before it.
    fn import_err(format: Format, text: &str) -> (Vec<Record>, TraceError) {
        let recs = from_reader(
            std::io::Cursor::new(text.as_bytes().to_vec()),
            Some(format),
            "t",
        )
        .expect("open")
        .records;
        let mut ok = Vec::new();
        for r in recs {
            match r {
                Ok(r) => ok.push(r),
                Err(e) => return (ok, e),
            }
        }
        panic!("{format}: no error in {text:?}");
    }

    fn assert_parse_error(e: &TraceError, format: &str, line: u64, words: &str) {
        match e {
            TraceError::Parse {
                format: f,
                line: l,
                problem,
            } => {
                assert_eq!((*f, *l), (format, line), "{e}");
                assert!(problem.contains(words), "{e}");
            }
            other => panic!("want a parse error, got {other:?}"),
        }
        assert!(
            e.to_string()
                .starts_with(&format!("{format} line {line}: ")),
            "{e}"
        );
    }

    fn rec(t_ns: u64, op: Op, offset: u64, len: u32, conn: u16) -> Record {
        Record {
            t_ns,
            offset,
            len,
            conn,
            op,
            fua: false,
        }
    }

    /// The first records of /work/traces/msr_hm_0_sample.csv (MSR
    /// Cambridge hm_0), and a read from further in.
    const MSR: &str = "\
128166385295514663,hm,0,Write,9056014336,2048,2833
128166385295514878,hm,0,Write,11855351808,512,2617
128166385295515175,hm,0,Write,5548077056,4096,2320
128166385301451520,hm,0,Write,3163095040,40960,3438
128166385301453920,hm,0,Write,3154132992,4096,1037
128166385310262180,hm,0,Read,7834402816,65536,11520
";

    #[test]
    fn msr_csv_is_read_with_filetime_and_bytes() {
        let (h, recs, _) = import(Some(Format::MsrCsv), MSR);
        // 128166385295514663 ticks: 2007-02-22 17:22:09.5514663 UTC.
        assert_eq!(h.start_unix_ns, 1_172_164_929_551_466_300);
        assert_eq!(h.volume_size, 0);
        assert_eq!(h.source, "imported from msr-csv: t");
        assert_eq!(recs.len(), 6);
        assert_eq!(recs[0], rec(0, Op::Write, 9056014336, 2048, 0));
        assert_eq!(recs[1], rec(21_500, Op::Write, 11855351808, 512, 0));
        assert_eq!(
            recs[3].t_ns,
            (128166385301451520 - 128166385295514663) * 100
        );
        assert_eq!(recs[5].op, Op::Read);
        assert_eq!(recs[5].len, 65536);
    }

    #[test]
    fn msr_csv_takes_a_header_any_case_and_disk_numbers() {
        let text = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n\
                    \n\
                    100,src1,2,READ,512,1024,5\n\
                    # a comment\n\
                    200,src1,70000,write,0,512,5\n";
        let (_, recs, _) = import(None, text);
        assert_eq!(
            recs,
            vec![
                rec(0, Op::Read, 512, 1024, 2),
                rec(10_000, Op::Write, 0, 512, u16::MAX)
            ]
        );
    }

    #[test]
    fn msr_csv_errors_name_the_line() {
        let (ok, e) = import_err(Format::MsrCsv, &format!("{MSR}1,hm,0,Erase,0,512,1\n"));
        assert_eq!(ok.len(), 6);
        assert_parse_error(&e, "msr-csv", 7, "Erase");
        let (_, e) = import_err(Format::MsrCsv, "1,hm,0,Read,0,512\n");
        assert_parse_error(&e, "msr-csv", 1, "expected 7");
        let (_, e) = import_err(Format::MsrCsv, "1,hm,0,Read,0,-5,1\n");
        assert_parse_error(&e, "msr-csv", 1, "Size \"-5\"");
        let (_, e) = import_err(Format::MsrCsv, "1,hm,0,Read,0,8589934592,1\n");
        assert_parse_error(&e, "msr-csv", 1, "length 8589934592");
        let (_, e) = import_err(Format::MsrCsv, "1,hm,0,Read,18446744073709551615,512,1\n");
        assert_parse_error(&e, "msr-csv", 1, "past the end");
    }

    #[test]
    fn backwards_time_is_clamped_and_counted() {
        let text = "1000,h,0,Read,0,512,1\n900,h,0,Read,512,512,1\n2000,h,0,Read,1024,512,1\n";
        let (_, recs, stats) = import(Some(Format::MsrCsv), text);
        let times: Vec<u64> = recs.iter().map(|r| r.t_ns).collect();
        assert_eq!(times, vec![0, 0, 100_000]);
        assert_eq!(recs[1].offset, 512, "input order is kept");
        assert_eq!(stats.clamped(), 1);
    }

    #[test]
    fn fio_v2_reads_ops_files_and_waits_as_milliseconds_since_start() {
        let text = "fio version 2 iolog\n\
                    /dev/sdb add\n\
                    /dev/sdc add\n\
                    /dev/sdb open\n\
                    /dev/sdb write 4096 8192\n\
                    /dev/sdb wait 5 0\n\
                    /dev/sdc read 0 4096\n\
                    /dev/sdb sync 0 0\n\
                    /dev/sdb wait 3 0\n\
                    /dev/sdb trim 8192 4096\n\
                    /dev/sdd datasync 0 0\n\
                    /dev/sdb close\n";
        let (h, recs, _) = import(None, text);
        assert_eq!(h.start_unix_ns, 0);
        assert_eq!(
            recs,
            vec![
                rec(0, Op::Write, 4096, 8192, 0),
                rec(5_000_000, Op::Read, 0, 4096, 1),
                rec(5_000_000, Op::Flush, 0, 0, 0),
                // `wait 3` is before the clock: no sleep.
                rec(5_000_000, Op::Trim, 8192, 4096, 0),
                rec(5_000_000, Op::Flush, 0, 0, 2),
            ]
        );
    }

    #[test]
    fn fio_v3_timestamps_are_microseconds() {
        let text = "fio version 3 iolog\n\
                    0 /dev/sdb add\n\
                    0 /dev/sdb open\n\
                    1200 /dev/sdb read 1074696192 4096\n\
                    1450 /dev/sdb write 7014912 4096\n\
                    2000 /dev/sdb sync 0 0\n\
                    2100 /dev/sdb close\n";
        let (_, recs, _) = import(Some(Format::FioIolog), text);
        assert_eq!(
            recs,
            vec![
                rec(0, Op::Read, 1074696192, 4096, 0),
                rec(250_000, Op::Write, 7014912, 4096, 0),
                rec(800_000, Op::Flush, 0, 0, 0),
            ]
        );
    }

    #[test]
    fn fio_errors_name_the_line() {
        let (_, e) = import_err(Format::FioIolog, "fio version 1 iolog\n");
        assert_parse_error(&e, "fio-iolog", 1, "expected the header");
        let (ok, e) = import_err(
            Format::FioIolog,
            "fio version 3 iolog\n0 f add\n10 f read 0 4096\n20 f wait 5 0\n",
        );
        assert_eq!(ok.len(), 1);
        assert_parse_error(&e, "fio-iolog", 4, "not allowed in a version 3");
        let (_, e) = import_err(Format::FioIolog, "fio version 2 iolog\nf add\nf sync\n");
        assert_parse_error(&e, "fio-iolog", 3, "unknown file action \"sync\"");
        let (_, e) = import_err(Format::FioIolog, "fio version 2 iolog\nf read x 4096\n");
        assert_parse_error(&e, "fio-iolog", 2, "offset \"x\"");
        let (_, e) = import_err(Format::FioIolog, "fio version 2 iolog\nf write 0 4096 7\n");
        assert_parse_error(&e, "fio-iolog", 2, "found 5 fields");
        let (_, e) = import_err(Format::FioIolog, "fio version 3 iolog\n5 f erase 0 1\n");
        assert_parse_error(&e, "fio-iolog", 2, "unknown action \"erase\"");
    }

    /// blkparse default output: a remap, queue, get, insert, issue and
    /// complete of the same I/O, then other kinds, message lines and the
    /// summary blkparse prints at the end.
    const BLKPARSE: &str = "\
  8,16   1        1     0.000000000  4162  A   R 1444645666 + 256 <- (8,17) 1444643618
  8,16   1        2     0.000001390  4162  Q   R 1444645666 + 256 [java]
  8,16   1        3     0.000006021  4162  G   R 1444645666 + 256 [java]
  8,16   1        4     0.000007162  4162  P   N [java]
  8,16   1        5     0.000009318  4162  I   R 1444645666 + 256 [java]
  8,16   1        0     0.000011417     0  m   N cfq4162S  insert_request
  8,16   1        6     0.000020000  4162  D   R 1444645666 + 256 [java]
  8,16   0        1     0.000500000     0  C   R 1444645666 + 256 [0]
  8,16   0        2     0.001000000   301  Q  WS 2048 + 8 [jbd2/sdb1-8]
  8,16   0        3     0.001000100   301  Q FWFS 4096 + 8 [jbd2/sdb1-8]
  8,16   0        4     0.001000200   301  Q  FN 0 + 0 [kworker/0:1]
  8,32   0        5     0.002000000   999  Q   D 100 + 2048 [fstrim]
  8,16   0        6     0.002500000   999  Q   N 0 + 0 [sg_inq]
  8,16   0        7     0.002600000   999  Q   R 36 (12 01 00 00 ..) [sg_inq]
CPU0 (8,16):
 Reads Queued:           1,      128KiB\t Writes Queued:           2,        8KiB
 Read Dispatches:        1,      128KiB\t Write Dispatches:        0,        0KiB
Total (8,16):
 Reads Queued:           1,      128KiB\t Writes Queued:           2,        8KiB

Throughput (R/W): 2560KiB/s / 160KiB/s
Events (8,16): 14 entries
Skips: 0 forward (0 -   0.0%)
";

    #[test]
    fn blkparse_takes_queue_events_only() {
        let (h, recs, stats) = import(None, BLKPARSE);
        assert_eq!(
            from_reader(std::io::Cursor::new(BLKPARSE), None, "t")
                .expect("open")
                .format,
            Format::Blkparse
        );
        assert_eq!(h.source, "imported from blkparse: t");
        let fua = |mut r: Record| {
            r.fua = true;
            r
        };
        assert_eq!(
            recs,
            vec![
                rec(0, Op::Read, 1444645666 * 512, 128 * 1024, 0),
                rec(998_610, Op::Write, 2048 * 512, 4096, 0),
                rec(998_710, Op::Flush, 0, 0, 0),
                fua(rec(998_710, Op::Write, 4096 * 512, 4096, 0)),
                rec(998_810, Op::Flush, 0, 0, 0),
                rec(1_998_610, Op::Trim, 100 * 512, 1024 * 1024, 1),
            ]
        );
        assert_eq!(
            stats.skipped(),
            vec![
                ("blkparse Q events without data (N)".to_string(), 1),
                ("blkparse packet-command Q events".to_string(), 1),
            ]
        );
    }

    #[test]
    fn blkparse_errors_name_the_line() {
        let (ok, e) = import_err(
            Format::Blkparse,
            "  8,0 0 1 0.000000000 1 Q R 8 + 8 [a]\n  8,0 0 2 0.0x0000001 1 Q R 8 + 8 [a]\n",
        );
        assert_eq!(ok.len(), 1);
        assert_parse_error(&e, "blkparse", 2, "time \"0.0x0000001\"");
        let (_, e) = import_err(Format::Blkparse, "8,0 0 1 1.0 1 Q X 8 + 8 [a]\n");
        assert_parse_error(&e, "blkparse", 1, "RWBS \"X\"");
        let (_, e) = import_err(Format::Blkparse, "8,0 0 1 1.0 1 Q W 8 + many [a]\n");
        assert_parse_error(&e, "blkparse", 1, "sector count \"many\"");
    }

    const CLOUDPHYSICS: &str = "\
version,time,op,size,lbn
1,5633898,2a,512,42932745
1,5633898,2a,512,42932746
1,5633898,28,6656,40409911
1,5633899,2a,6144,31954535
1,5633899,35,0,0
1,5633901,88,4096,6160447
";

    #[test]
    fn cloudphysics_spreads_each_second_and_skips_other_opcodes() {
        let (h, recs, stats) = import(None, CLOUDPHYSICS);
        assert_eq!(h.start_unix_ns, 0);
        assert_eq!(
            recs,
            vec![
                rec(0, Op::Write, 42932745 * 512, 512, 0),
                rec(333_333_333, Op::Write, 42932746 * 512, 512, 0),
                rec(666_666_666, Op::Read, 40409911 * 512, 6656, 0),
                rec(1_000_000_000, Op::Write, 31954535 * 512, 6144, 0),
                rec(3_000_000_000, Op::Read, 6160447 * 512, 4096, 0),
            ]
        );
        assert_eq!(stats.skipped(), vec![("SCSI opcode 35".to_string(), 1)]);
        assert_eq!(stats.skipped_total(), 1);
    }

    #[test]
    fn cloudphysics_errors_name_the_line_after_the_records_before_it() {
        let text = format!("{CLOUDPHYSICS}1,5633901,zz,4096,1\n");
        let (ok, e) = import_err(Format::CloudPhysicsCsv, &text);
        assert_eq!(ok.len(), 5, "the second in progress is handed out first");
        assert_parse_error(&e, "cloudphysics-csv", 8, "op \"zz\"");
        let (_, e) = import_err(
            Format::CloudPhysicsCsv,
            "version,time,op,size,lbn\n1,2,28\n",
        );
        assert_parse_error(&e, "cloudphysics-csv", 2, "expected 5");
    }

    #[test]
    fn over_long_and_non_utf8_lines_are_errors() {
        let long = format!("fio version 2 iolog\nf read 0 {}\n", "9".repeat(MAX_LINE));
        let (_, e) = import_err(Format::FioIolog, &long);
        assert_parse_error(&e, "fio-iolog", 2, "longer than");
        let recs = from_reader(
            std::io::Cursor::new(b"1,h,0,Read,0,512,1\n2,h\xff,0,Read,0,512,1\n".to_vec()),
            Some(Format::MsrCsv),
            "t",
        )
        .expect("open")
        .records;
        let e = recs.last().expect("an item").expect_err("an error");
        assert_parse_error(&e, "msr-csv", 2, "not UTF-8");
    }

    #[test]
    fn formats_are_detected_from_their_first_bytes() {
        assert_eq!(Format::detect(b"TIERDTRC\x01\x00"), Some(Format::Tierd));
        assert_eq!(Format::detect(MSR.as_bytes()), Some(Format::MsrCsv));
        assert_eq!(
            Format::detect(b"Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n"),
            Some(Format::MsrCsv)
        );
        assert_eq!(
            Format::detect(b"fio version 3 iolog\n0 f add\n"),
            Some(Format::FioIolog)
        );
        assert_eq!(
            Format::detect(b"\n# made by hand\nfio version 2 iolog\n"),
            Some(Format::FioIolog)
        );
        assert_eq!(Format::detect(BLKPARSE.as_bytes()), Some(Format::Blkparse));
        assert_eq!(
            Format::detect(CLOUDPHYSICS.as_bytes()),
            Some(Format::CloudPhysicsCsv)
        );
        assert_eq!(
            Format::detect(b"1,5633898,2a,512,42932745\n"),
            Some(Format::CloudPhysicsCsv)
        );
        // Cut inside a multi-byte character: the valid part decides.
        let mut cut = b"fio version 2 iolog\n/d\xc3\xa9v read 0 1\n".to_vec();
        cut.truncate(23);
        assert_eq!(Format::detect(&cut), Some(Format::FioIolog));
        for other in [
            &b""[..],
            b"\n\n",
            b"1 1 0 0\n2 1 0 0\n",
            b"hello, world\n",
            b"\x7fELF\x02\x01",
        ] {
            assert_eq!(Format::detect(other), None, "{other:?}");
        }
        let e = from_reader(std::io::Cursor::new(b"1 1 0 0\n".to_vec()), None, "t")
            .err()
            .expect("unknown");
        assert!(matches!(e, TraceError::UnknownFormat), "{e}");
    }

    #[test]
    fn format_names_parse_back() {
        for f in Format::ALL {
            assert_eq!(f.name().parse::<Format>().expect("name"), f);
            assert_eq!(f.to_string(), f.name());
            assert!(Format::NAMES.contains(f.name()));
        }
        assert_eq!("MSR".parse::<Format>().expect("alias"), Format::MsrCsv);
        assert_eq!("fio".parse::<Format>().expect("alias"), Format::FioIolog);
        assert!(matches!(
            "vscsi".parse::<Format>(),
            Err(TraceError::FormatName(n)) if n == "vscsi"
        ));
    }

    #[test]
    fn a_tierd_trace_is_read_through_the_same_door() {
        let h = Header {
            start_unix_ns: 7,
            volume_size: 1 << 30,
            source: "tierd 0.1.0 recording".into(),
        };
        let r = rec(5, Op::Zero, 4096, 4096, 3);
        let mut w = super::super::TraceWriter::new(Vec::new(), &h).expect("writer");
        w.write(&r).expect("write");
        let bytes = w.finish().expect("finish");
        let i = from_reader(std::io::Cursor::new(bytes), None, "x").expect("open");
        assert_eq!(i.format, Format::Tierd);
        let (h2, recs) = (i.header, i.records);
        assert_eq!(h2, h);
        assert_eq!(
            recs.map(|r| r.expect("record")).collect::<Vec<_>>(),
            vec![r]
        );
    }
}
