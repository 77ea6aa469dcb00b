//! Interop with libnbd's `nbdinfo` against the real daemon: the export's
//! size and block-size constraints as a client sees them, every advertised
//! capability (`--can`), the allocation map (`--map`, base:allocation)
//! before and after a write, and the export name set by `--export-name`
//! (`--list`).

mod common;

use common::{run, run_ok, show, tool, Daemon, DaemonOptions, MIB};
use serde_json::Value;

fn info_json(d: &Daemon) -> Value {
    let out = run_ok(tool("nbdinfo").arg("--json").arg(d.uri()));
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("nbdinfo --json output ({e}):\n{out}"))
}

fn export_size(d: &Daemon) -> u64 {
    let v = info_json(d);
    v["exports"][0]["export-size"]
        .as_u64()
        .expect("export-size in nbdinfo --json")
}

/// (offset, length, type, description) runs of `nbdinfo --map --json`.
fn map(d: &Daemon) -> Vec<(u64, u64, u64, String)> {
    let out = run_ok(tool("nbdinfo").args(["--map", "--json"]).arg(d.uri()));
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("nbdinfo --map --json output ({e}):\n{out}"));
    v.as_array()
        .expect("map is an array")
        .iter()
        .map(|e| {
            (
                e["offset"].as_u64().expect("offset"),
                e["length"].as_u64().expect("length"),
                e["type"].as_u64().expect("type"),
                e["description"].as_str().expect("description").to_string(),
            )
        })
        .collect()
}

#[test]
fn size_and_block_sizes() {
    let d = Daemon::start();
    let v = info_json(&d);
    let e = &v["exports"][0];
    assert_eq!(v["protocol"], "newstyle-fixed", "{v:#}");
    let size = e["export-size"].as_u64().expect("export-size");
    // 256 MiB SSD + 1 GiB HDD with 1 MiB extents: the capacity is a whole
    // number of extents, and well over half of the raw space.
    assert!(size > 0 && size & (MIB - 1) == 0, "export size {size}");
    assert!(size > 640 * MIB && size < 1280 * MIB, "export size {size}");
    assert_eq!(e["block_size_minimum"].as_u64(), Some(1), "{e:#}");
    assert_eq!(e["block_size_preferred"].as_u64(), Some(4096), "{e:#}");
    assert_eq!(e["block_size_maximum"].as_u64(), Some(33_554_432), "{e:#}");
    assert_eq!(e["is_read_only"], false, "{e:#}");
    let contexts = e["contexts"].as_array().expect("contexts");
    assert!(
        contexts.iter().any(|c| c == "base:allocation"),
        "base:allocation not offered: {e:#}"
    );

    // The plain `nbdinfo --size` agrees with the JSON.
    let plain = run_ok(tool("nbdinfo").arg("--size").arg(d.uri()));
    assert_eq!(plain.trim().parse::<u64>().expect("nbdinfo --size"), size);
}

#[test]
fn advertises_every_capability() {
    let d = Daemon::start();
    for cap in [
        "flush",
        "fua",
        "trim",
        "zero",
        "fast-zero",
        "df",
        "multi-conn",
        "cache",
    ] {
        let mut cmd = tool("nbdinfo");
        cmd.args(["--can", cap]).arg(d.uri());
        let out = run(&mut cmd);
        assert!(
            out.status.success(),
            "nbdinfo --can {cap}: {}",
            show(&common::describe(&cmd), &out)
        );
    }
    // Sanity: --can really discriminates (the export is writable).
    let out = run(tool("nbdinfo").args(["--is", "read-only"]).arg(d.uri()));
    assert_eq!(
        out.status.code(),
        Some(2),
        "nbdinfo --is read-only should exit 2 on a writable export: {}",
        show("nbdinfo --is read-only", &out)
    );
}

#[test]
fn map_fresh_volume_is_one_hole() {
    let d = Daemon::start();
    let size = export_size(&d);
    let runs = map(&d);
    assert_eq!(
        runs,
        vec![(0, size, 3, "hole,zero".to_string())],
        "a fresh volume should map as one hole,zero run"
    );
}

#[test]
fn map_after_write_shows_data_then_hole() {
    let d = Daemon::start();
    let size = export_size(&d);
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c", "write -P 0xab 0 1M", "-c", "flush"])
            .arg(d.uri()),
    );
    let runs = map(&d);
    assert_eq!(
        runs,
        vec![
            (0, MIB, 0, "data".to_string()),
            (MIB, size - MIB, 3, "hole,zero".to_string()),
        ],
        "after writing the first MiB"
    );
    // Also after a write in the middle of the volume: data, hole, data, hole.
    let mid = (size / 2) / MIB * MIB;
    run_ok(
        tool("qemu-io")
            .args(["-f", "raw", "-c"])
            .arg(format!("write -P 0xcd {mid} 4k"))
            .arg(d.uri()),
    );
    let runs = map(&d);
    assert_contiguous(&runs, size);
    assert_eq!(type_at(&runs, 0), 0, "{runs:?}");
    assert_eq!(type_at(&runs, MIB), 3, "{runs:?}");
    assert_eq!(type_at(&runs, mid - 1), 3, "{runs:?}");
    assert_eq!(type_at(&runs, mid), 0, "the write at {mid}: {runs:?}");
    assert_eq!(
        type_at(&runs, mid + 4095),
        0,
        "the write at {mid}: {runs:?}"
    );
    // The rest of the written extent was never written: it must read as
    // zeros (hole or not), and everything past that extent is a hole.
    assert_eq!(type_at(&runs, mid + 4096) & 2, 2, "{runs:?}");
    assert_eq!(type_at(&runs, mid + MIB - 1) & 2, 2, "{runs:?}");
    assert_eq!(type_at(&runs, mid + MIB), 3, "{runs:?}");
    assert_eq!(type_at(&runs, size - 1), 3, "{runs:?}");
}

type Run = (u64, u64, u64, String);

/// The map covers the export exactly, run after run.
fn assert_contiguous(runs: &[Run], size: u64) {
    let mut at = 0;
    for r in runs {
        assert_eq!(r.0, at, "map runs are not contiguous: {runs:?}");
        assert!(r.1 > 0, "empty map run: {runs:?}");
        at += r.1;
    }
    assert_eq!(at, size, "map does not cover the export: {runs:?}");
}

/// The block-status type of the run covering `offset`.
fn type_at(runs: &[Run], offset: u64) -> u64 {
    runs.iter()
        .find(|r| r.0 <= offset && offset < r.0 + r.1)
        .unwrap_or_else(|| panic!("no map run covers {offset}: {runs:?}"))
        .2
}

#[test]
fn export_name_flag_is_honoured() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--export-name".into(), "foo".into()],
        ..DaemonOptions::small()
    });
    let out = run_ok(tool("nbdinfo").args(["--list", "--json"]).arg(d.uri()));
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("nbdinfo --list --json output ({e}):\n{out}"));
    let names: Vec<&Value> = v["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .map(|e| &e["export-name"])
        .collect();
    // The named export and the default one (""), both answering as "foo".
    assert!(
        !names.is_empty() && names.iter().all(|n| *n == "foo"),
        "{v:#}"
    );
    run_ok(
        tool("nbdinfo")
            .arg("--size")
            .arg(format!("{}/foo", d.uri())),
    );
    let out = run(tool("nbdinfo")
        .arg("--size")
        .arg(format!("{}/bar", d.uri())));
    assert!(
        !out.status.success(),
        "export bar should not exist: {}",
        show("nbdinfo --size", &out)
    );
}
