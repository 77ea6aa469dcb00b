//! The importers against sample lines of every format.

use super::*;
use crate::trace::{Op, Record};

fn import(format: Option<Format>, text: &str) -> (Header, Vec<Record>, ImportStats) {
    let i = from_reader(std::io::Cursor::new(text.as_bytes().to_vec()), format, "t").expect("open");
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
