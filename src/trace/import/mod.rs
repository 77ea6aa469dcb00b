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
//!
//! Files: this one holds the [`Format`] detector and the ways in ([`open`],
//! [`from_reader`]); `text.rs` the line machinery every text format shares;
//! one file per format (`msr.rs`, `fio.rs`, `blkparse.rs`,
//! `cloudphysics.rs`); `stats.rs` what an import skipped and clamped.

mod blkparse;
mod cloudphysics;
mod fio;
mod msr;
mod stats;
#[cfg(test)]
mod tests;
mod text;

pub use stats::ImportStats;
pub use text::{Records, MAX_LINE};

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::str::FromStr;

use super::{Header, TraceError, TraceReader, MAGIC};
use blkparse::{blk_device, blk_time, Blkparse};
use cloudphysics::CloudPhysicsCsv;
use fio::{fio_version, FioIolog};
use msr::MsrCsv;
use text::{digits, text};

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
