//! docs/bench.md shows what the recorded quick run holds: its tables
//! between the `doc-tables` markers are exactly what the command named in
//! the opening marker prints (run as written, from the repository's root),
//! and the progress line it quotes counts the quick preset's suites.
//!
//! Runs the `tierd` binary of this build (`cargo build --workspace`
//! first) or `TIERD_BIN`.

mod support;

use std::path::Path;
use std::process::Command;

use support::tierd_bin;

const OPEN: &str = "<!-- doc-tables: ";
const CLOSE: &str = "<!-- end doc-tables -->";

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn bench_md() -> String {
    std::fs::read_to_string(root().join("docs/bench.md")).expect("reading docs/bench.md")
}

#[test]
fn the_headline_tables_are_what_the_record_prints() {
    let doc = bench_md();
    let start = doc
        .find(OPEN)
        .expect("docs/bench.md has no <!-- doc-tables: COMMAND --> marker");
    let rest = &doc[start + OPEN.len()..];
    let end_cmd = rest.find(" -->").expect("the marker is not closed");
    let command = &rest[..end_cmd];
    let body = &rest[end_cmd + " -->".len()..];
    let body = &body[..body.find(CLOSE).expect("no <!-- end doc-tables --> marker")];
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"tierd"), "{command}");
    let out = Command::new(tierd_bin())
        .args(&words[1..])
        .current_dir(root())
        .output()
        .expect("running the documented command");
    assert!(
        out.status.success(),
        "`{command}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        body.trim(),
        printed.trim(),
        "docs/bench.md's tables differ from what `{command}` prints: paste its output between the markers"
    );
    // The record's own tables are there: every case and every finding.
    assert!(printed.contains("| zipf/zipf0.99-ws0.5x |"), "{printed}");
    assert!(
        printed.contains("| landing/first-reserve/pure-ssd |"),
        "{printed}"
    );
}

#[test]
fn the_quoted_progress_line_counts_the_quick_suites() {
    let doc = bench_md();
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = flat
        .find("] suite ")
        .expect("docs/bench.md quotes no progress line");
    let counted = &flat[at + "] suite ".len()..];
    let counted = &counted[..counted.find(':').expect("suite N/M:")];
    let (_, total) = counted.split_once('/').expect("suite N/M");
    let quick = tierd_bench::suites::SUITES
        .iter()
        .filter(|(_, q)| *q)
        .count();
    assert_eq!(
        total.parse::<usize>().ok(),
        Some(quick),
        "docs/bench.md quotes `suite {counted}`, the quick preset runs {quick} suites"
    );
}
