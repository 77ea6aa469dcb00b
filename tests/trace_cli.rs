//! `tierd trace import | info | export` on a generated MSR Cambridge CSV
//! whose figures are known in closed form: the tierd file has the
//! documented size, `info` gives the exact counts, bytes, blocks and reuse
//! for the CSV, the imported trace and the exported fio log alike, the fio
//! log has the documented lines, and a bad line fails naming the file and
//! the line. `tierd trace generate` writes each shape with its op mix
//! inside its region, the same bytes for the same seed, and refuses to
//! replace a file without `--force`.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;

/// FILETIME of 2007-02-22 17:00:00.3061629 UTC, the first MSR record.
const T0: u64 = 128_166_372_003_061_629;

/// 1000 requests, 1 ms apart, on three disks: request i reads (every
/// fourth) or writes 8 KiB at (i % 250) * 8 KiB, so 250 distinct 8 KiB
/// places = 500 4 KiB blocks, 2000 block accesses, 1500 of them hits.
fn msr_csv() -> String {
    let mut s = String::from("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n");
    for i in 0..1000u64 {
        let ty = if i % 4 == 0 { "Read" } else { "Write" };
        s.push_str(&format!(
            "{},hm,{},{ty},{},8192,{}\n",
            T0 + i * 10_000,
            i % 3,
            (i % 250) * 8192,
            1000 + i
        ));
    }
    s
}

fn tierd(args: &[&str]) -> String {
    let mut c = Command::new(tierd_bin());
    c.args(args).env("RUST_BACKTRACE", "0");
    run_ok(&mut c)
}

fn info_json(path: &Path) -> Value {
    let text = tierd(&["trace", "info", &path.display().to_string(), "--json"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The figures every form of the generated trace must give.
fn check_summary(what: &str, v: &Value) {
    let s = &v["summary"];
    let want = [
        ("records", 1000),
        ("duration_ns", 999_000_000),
        ("blocks_4k", 500),
        ("extents_1m", 2),
        ("lowest_offset", 0),
        ("highest_end", 250 * 8192),
        ("connections", 3),
        ("block_accesses", 2000),
        ("block_hits", 1500),
        ("fua", 0),
    ];
    for (key, n) in want {
        assert_eq!(s[key], Value::from(n), "{what}: {key} in {v:#}");
    }
    assert_eq!(s["reuse"], Value::from(0.75), "{what}");
    assert_eq!(s["read_write_ratio"], Value::from(250.0 / 750.0), "{what}");
    assert_eq!(s["ops"]["read"]["count"], Value::from(250), "{what}");
    assert_eq!(s["ops"]["read"]["bytes"], Value::from(250 * 8192), "{what}");
    assert_eq!(s["ops"]["write"]["count"], Value::from(750), "{what}");
    assert_eq!(
        s["ops"]["write"]["bytes"],
        Value::from(750 * 8192),
        "{what}"
    );
    for op in ["trim", "zero", "flush"] {
        assert_eq!(s["ops"][op]["count"], Value::from(0), "{what}: {op}");
    }
}

#[test]
fn import_info_and_export_agree_on_the_numbers() {
    let dir = tempdir();
    let csv = dir.path().join("gen.csv");
    let trc = dir.path().join("gen.trc");
    let log = dir.path().join("gen.fio");
    write(&csv, msr_csv().as_bytes());

    // The CSV read directly, its format detected.
    let v = info_json(&csv);
    assert_eq!(v["format"], "msr-csv");
    assert_eq!(v["source"], "imported from msr-csv: gen.csv");
    // 2007-02-22 17:00:00.3061629 UTC in ns since the Unix epoch.
    assert_eq!(
        v["start_unix_ns"],
        Value::from(1_172_163_600_306_162_900u64)
    );
    check_summary("csv", &v);

    // Imported: header (34 bytes and the source) and 24 bytes a record.
    tierd(&[
        "trace",
        "import",
        &csv.display().to_string(),
        &trc.display().to_string(),
    ]);
    let source = "imported from msr-csv: gen.csv";
    assert_eq!(read(&trc).len(), 34 + source.len() + 1000 * 24);
    let v = info_json(&trc);
    assert_eq!(v["format"], "tierd");
    assert_eq!(v["source"], source);
    assert_eq!(
        v["start_unix_ns"],
        Value::from(1_172_163_600_306_162_900u64)
    );
    check_summary("tierd", &v);
    let text = tierd(&["trace", "info", &trc.display().to_string()]);
    for want in [
        "records      1000 over 0.999 s",
        "read         250, 1.95 MiB",
        "touched      500 4 KiB blocks",
        "connections  3",
        "reuse        0.7500 (1500 of 2000 4 KiB block accesses",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }

    // Exported for fio: add, open, a line a request in µs, close.
    tierd(&[
        "trace",
        "export",
        &trc.display().to_string(),
        &log.display().to_string(),
        "--to",
        "fio-iolog",
        "--device",
        "/dev/nbd0",
    ]);
    let fio = String::from_utf8(read(&log)).expect("text");
    let lines: Vec<&str> = fio.lines().collect();
    assert_eq!(lines.len(), 3 + 1000 + 1);
    assert_eq!(
        lines[..5],
        [
            "fio version 3 iolog",
            "0 /dev/nbd0 add",
            "0 /dev/nbd0 open",
            "0 /dev/nbd0 read 0 8192",
            "1000 /dev/nbd0 write 8192 8192",
        ]
    );
    assert_eq!(lines[1003], "999000 /dev/nbd0 close");
    // Read back: the same requests on one connection (one file).
    let v = info_json(&log);
    assert_eq!(v["format"], "fio-iolog");
    assert_eq!(v["summary"]["connections"], Value::from(1));
    assert_eq!(v["summary"]["block_hits"], Value::from(1500));
    assert_eq!(
        v["summary"]["ops"]["write"]["bytes"],
        Value::from(750 * 8192)
    );
}

#[test]
fn errors_name_the_file_and_the_line() {
    let dir = tempdir();
    let csv = dir.path().join("bad.csv");
    let mut text = msr_csv();
    text.push_str("128166372013061629,hm,0,Erase,0,512,9\n");
    write(&csv, text.as_bytes());
    let out_path = dir.path().join("bad.trc");
    let mut c = Command::new(tierd_bin());
    c.args(["trace", "import"])
        .arg(&csv)
        .arg(&out_path)
        .env("RUST_BACKTRACE", "0");
    let out = run(&mut c);
    assert!(!out.status.success(), "{}", show("import", &out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&csv.display().to_string()) && err.contains("msr-csv line 1002"),
        "{err}"
    );
    assert!(!out_path.exists(), "a failed import leaves no output");

    // An unknown format, and a file that is not there.
    let junk = dir.path().join("junk.txt");
    write(&junk, b"hello\n");
    for (file, want) in [
        (junk, "name it with --format"),
        (dir.path().join("missing.trc"), "No such file"),
    ] {
        let mut c = Command::new(tierd_bin());
        c.args(["trace", "info"])
            .arg(&file)
            .env("RUST_BACKTRACE", "0");
        let out = run(&mut c);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&file.display().to_string()) && err.contains(want),
            "{err}"
        );
    }
}

#[test]
fn generated_shapes_have_their_mix_inside_the_region() {
    let dir = tempdir();
    let region: u64 = 256 * MIB;
    // Shape, read share, connections, FUA share.
    let shapes = [
        ("zipf", 0.9, 1, 0.0),
        ("shift", 0.9, 1, 0.0),
        ("scan-hot", 1.0, 2, 0.0),
        ("database", 0.9 * 0.67, 2, 0.1),
    ];
    for (shape, reads, connections, fua) in shapes {
        let trc = dir.path().join(format!("{shape}.trc"));
        tierd(&[
            "trace",
            "generate",
            shape,
            &trc.display().to_string(),
            "--requests",
            "5000",
            "--region",
            "256MiB",
            "--seed",
            "3",
        ]);
        let v = info_json(&trc);
        assert_eq!(v["format"], "tierd", "{shape}");
        assert_eq!(v["volume_size"], Value::from(region), "{shape}");
        let source = v["source"].as_str().unwrap_or_default();
        assert!(
            source.ends_with(&format!(
                "trace generate {shape} --region 256MiB --requests 5000 --rate 2000 --seed 3"
            )),
            "{shape}: {source}"
        );
        let s = &v["summary"];
        let what = format!("{shape}: {v:#}");
        assert_eq!(s["records"], Value::from(5000), "{what}");
        assert_eq!(s["connections"], Value::from(connections), "{what}");
        let count = |op: &str| s["ops"][op]["count"].as_u64().unwrap_or(u64::MAX);
        assert_eq!(count("read") + count("write"), 5000, "{what}");
        let read_share = count("read") as f64 / 5000.0;
        assert!(
            (read_share - reads).abs() <= 0.02,
            "reads {read_share}: {what}"
        );
        let fua_share = s["fua"].as_u64().unwrap_or(u64::MAX) as f64 / 5000.0;
        assert!((fua_share - fua).abs() <= 0.02, "FUA {fua_share}: {what}");
        let lowest = s["lowest_offset"].as_u64().unwrap_or(u64::MAX);
        let highest = s["highest_end"].as_u64().unwrap_or(u64::MAX);
        assert!(lowest < highest && highest <= region, "{what}");
        // 4,999 gaps of 0.5 ms on average.
        let secs = s["duration_ns"].as_u64().unwrap_or_default() as f64 / 1e9;
        assert!((secs - 2.5).abs() < 0.25, "{secs} s: {what}");
    }

    // The same options give the same bytes.
    let again = dir.path().join("again.trc");
    tierd(&[
        "trace",
        "generate",
        "database",
        &again.display().to_string(),
        "--requests=5000",
        "--region=256MiB",
        "--seed=3",
    ]);
    assert!(read(&again) == read(&dir.path().join("database.trc")));

    // An existing file is refused, and kept, without --force.
    let trc = dir.path().join("zipf.trc");
    let before = read(&trc);
    let args = ["trace", "generate", "zipf", "--requests", "10"];
    let mut c = Command::new(tierd_bin());
    c.args(args).arg(&trc).env("RUST_BACKTRACE", "0");
    let out = run(&mut c);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", show("generate", &out));
    assert!(
        err.contains(&trc.display().to_string()) && err.contains("--force"),
        "{err}"
    );
    assert!(
        read(&trc) == before,
        "a refused generate leaves the file alone"
    );
    let mut c = Command::new(tierd_bin());
    c.args(args).arg(&trc).arg("--force");
    run_ok(&mut c);
    assert_eq!(info_json(&trc)["summary"]["records"], Value::from(10));

    // Without options, the defaults `--help` gives.
    let dflt = dir.path().join("defaults.trc");
    tierd(&["trace", "generate", "shift", &dflt.display().to_string()]);
    let header = read(&dflt);
    let source_len = usize::from(u16::from_le_bytes([header[32], header[33]]));
    let source = String::from_utf8_lossy(&header[34..34 + source_len]).into_owned();
    let help = tierd(&["trace", "generate", "--help"]);
    let options = source.split(" shift ").nth(1).unwrap_or_default();
    let words: Vec<&str> = options.split(' ').collect();
    assert_eq!(words.len(), 8, "{source}");
    for pair in words.chunks(2) {
        let want = format!("{} <", pair[0]);
        let line = help.lines().find(|l| l.contains(&want)).unwrap_or_default();
        assert!(
            line.contains(&format!("[default: {}]", pair[1])),
            "{pair:?} of {source:?} against {help}"
        );
    }

    // Options the generator cannot honour are refused before any file is made.
    let bad = dir.path().join("bad.trc");
    let mut c = Command::new(tierd_bin());
    c.args(["trace", "generate", "zipf", "--region", "1000000"])
        .arg(&bad)
        .env("RUST_BACKTRACE", "0");
    let out = run(&mut c);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("multiple of 4 KiB"),
        "{err}"
    );
    assert!(!bad.exists());
}
