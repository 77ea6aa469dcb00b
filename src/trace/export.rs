//! Export to fio's iolog version 3, which `fio --read_iolog=FILE` replays
//! (through its nbd engine: `fio --ioengine=nbd --uri=nbd://HOST:PORT`).
//!
//! The log names one file, `device_name`: `add` and `open` at time 0, one
//! line per request, `close` at the last request's time. Timestamps are
//! microseconds since the trace's start (fio v3 logs are in µs; fio
//! replays the gaps between them). Reads and writes keep their op; a
//! flush is `sync 0 0`; trims and zeroes are both `trim` (fio has no
//! write-zeroes, and a trimmed tierd range reads as zeros too). What fio
//! cannot say is dropped: FUA, connections (one file, one stream), and
//! reads, writes, trims and zeroes of zero bytes (counted in
//! [`Exported::skipped`]).

use std::io::{BufWriter, Write};

use super::{Op, Record, TraceError};

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exported {
    /// Request lines written.
    pub written: u64,
    /// Records with nothing fio could replay (zero-length data requests).
    pub skipped: u64,
}

/// The longest file name fio's iolog parser takes (`%256s`).
const MAX_NAME: usize = 256;

/// Refuse a file name fio's iolog parser cannot read back.
pub fn check_device_name(name: &str) -> Result<(), TraceError> {
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_whitespace) {
        return Err(TraceError::Export(format!(
            "the device name {name:?} must be 1 to {MAX_NAME} bytes without whitespace (fio reads it with %256s)"
        )));
    }
    Ok(())
}

/// Write `records` as a fio v3 iolog on the file `device_name` to `out`.
/// Stops at the first record that is an error and returns it.
pub fn to_fio_iolog_v3(
    records: impl IntoIterator<Item = Result<Record, TraceError>>,
    device_name: &str,
    out: impl Write,
) -> Result<Exported, TraceError> {
    check_device_name(device_name)?;
    let mut out = BufWriter::new(out);
    let dev = device_name;
    writeln!(out, "fio version 3 iolog\n0 {dev} add\n0 {dev} open")?;
    let mut done = Exported::default();
    let mut last_us = 0u64;
    for r in records {
        let r = r?;
        // fio takes a timestamp that goes back as no delay; keep them in order.
        last_us = last_us.max(r.t_ns / 1000);
        let action = match r.op {
            Op::Read => "read",
            Op::Write => "write",
            Op::Trim | Op::Zero => "trim",
            Op::Flush => {
                writeln!(out, "{last_us} {dev} sync 0 0")?;
                done.written += 1;
                continue;
            }
        };
        if r.len == 0 {
            done.skipped += 1;
            continue;
        }
        writeln!(out, "{last_us} {dev} {action} {} {}", r.offset, r.len)?;
        done.written += 1;
    }
    writeln!(out, "{last_us} {dev} close")?;
    out.flush()?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::super::import::{from_reader, Format};
    use super::*;

    fn r(t_ns: u64, op: Op, offset: u64, len: u32) -> Record {
        Record {
            t_ns,
            offset,
            len,
            conn: 0,
            op,
            fua: false,
        }
    }

    fn export(records: &[Record], dev: &str) -> (String, Exported) {
        let mut out = Vec::new();
        let done = to_fio_iolog_v3(records.iter().copied().map(Ok), dev, &mut out).expect("export");
        (String::from_utf8(out).expect("text"), done)
    }

    #[test]
    fn the_log_is_fio_v3_in_microseconds() {
        let recs = [
            r(0, Op::Write, 0, 4096),
            r(1_500, Op::Read, 1 << 30, 65536),
            r(2_000_999, Op::Flush, 0, 0),
            r(3_000_000, Op::Trim, 8192, 4096),
            Record {
                fua: true,
                conn: 4,
                ..r(3_000_001, Op::Zero, 12288, 512)
            },
            r(4_000_000, Op::Read, 0, 0),
        ];
        let (text, done) = export(&recs, "nbd");
        assert_eq!(
            text,
            "fio version 3 iolog\n\
             0 nbd add\n\
             0 nbd open\n\
             0 nbd write 0 4096\n\
             1 nbd read 1073741824 65536\n\
             2000 nbd sync 0 0\n\
             3000 nbd trim 8192 4096\n\
             3000 nbd trim 12288 512\n\
             4000 nbd close\n"
        );
        assert_eq!(
            done,
            Exported {
                written: 5,
                skipped: 1
            }
        );
    }

    #[test]
    fn the_v3_importer_reads_the_export_back() {
        let mut recs = Vec::new();
        let ops = [Op::Read, Op::Write, Op::Trim, Op::Flush];
        for i in 0..200u64 {
            let op = ops[(i * 7 % 4) as usize];
            let (offset, len) = if op == Op::Flush {
                (0, 0)
            } else {
                ((i * 7919 % 1000) << 12, ((i % 16 + 1) * 512) as u32)
            };
            recs.push(r(i * 1_234_567, op, offset, len));
        }
        let (text, done) = export(&recs, "/dev/nbd0");
        assert_eq!(done.written, 200);
        let back = from_reader(
            std::io::Cursor::new(text.into_bytes()),
            Some(Format::FioIolog),
            "x",
        )
        .expect("import")
        .records;
        let back: Vec<Record> = back.collect::<Result<_, _>>().expect("records");
        assert_eq!(back.len(), recs.len());
        for (a, b) in recs.iter().zip(&back) {
            assert_eq!((a.op, a.offset, a.len), (b.op, b.offset, b.len));
            // Times survive to the microsecond.
            assert_eq!(a.t_ns / 1000 * 1000, b.t_ns);
        }
    }

    #[test]
    fn a_name_fio_cannot_read_is_refused() {
        for bad in ["", "my disk", &"x".repeat(257)] {
            let e = to_fio_iolog_v3(Vec::new(), bad, std::io::sink()).expect_err(bad);
            assert!(matches!(e, TraceError::Export(_)), "{e}");
        }
    }

    #[test]
    fn an_error_in_the_records_stops_the_export() {
        let recs = vec![
            Ok(r(0, Op::Read, 0, 512)),
            Err(TraceError::BadOp {
                index: 1,
                offset: 58,
                code: 9,
            }),
        ];
        let e = to_fio_iolog_v3(recs, "nbd", std::io::sink()).expect_err("error");
        assert!(matches!(e, TraceError::BadOp { index: 1, .. }), "{e}");
    }
}
