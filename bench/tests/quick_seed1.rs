//! `tierd bench --json --seed 1` (the quick preset, virtual clock) prints
//! exactly the record in benchmarks/bench-quick-seed1.json, recorded when
//! the SSD write log and shadows landed (re-record it, with the reason in
//! the commit, whenever behaviour changes on purpose): the virtual run is
//! deterministic, so any difference is a behaviour change. Only `wall_secs`
//! (the run's wall-clock time) is ignored. Its keys are all snake_case.
//!
//! Runs the `tierd` binary of this build (next to the test's `deps`
//! directory; `cargo build --workspace` first) or `TIERD_BIN`.

mod support;

use std::path::Path;
use std::process::Command;

use support::tierd_bin;

/// The only field that differs between two runs of one build.
const IGNORED: &str = "\"wall_secs\":";

/// Paths of the object keys in `v` that are not snake_case.
fn non_snake_keys(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let p = format!("{path}.{k}");
                if !k
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    out.push(p.clone());
                }
                non_snake_keys(v, &p, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| non_snake_keys(v, path, out)),
        _ => {}
    }
}

/// The record's lines, with the ignored field's value blanked.
fn normalized(json: &str) -> Vec<String> {
    let lines: Vec<String> = json
        .lines()
        .map(|l| match l.find(IGNORED) {
            Some(i) => format!("{}{IGNORED} (ignored)", &l[..i]),
            None => l.to_string(),
        })
        .collect();
    let n = lines.iter().filter(|l| l.contains(IGNORED)).count();
    assert_eq!(n, 1, "expected one {IGNORED} line");
    lines
}

#[test]
fn quick_bench_seed_1_matches_the_recorded_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let expected_path = root.join("benchmarks/bench-quick-seed1.json");
    let expected = std::fs::read_to_string(&expected_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", expected_path.display()));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-quick-seed1");
    let _ = std::fs::remove_dir_all(&out_dir);
    let mut cmd = Command::new(tierd_bin());
    cmd.args(["bench", "--json", "--seed", "1", "--out"])
        .arg(&out_dir)
        .current_dir(Path::new(env!("CARGO_TARGET_TMPDIR")));
    // The built-in heat and migration policy, whatever the environment
    // (TIERD_CONFIG and TIERD_* variables would change it).
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TIERD_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("running tierd bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tierd bench failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Every key in snake_case, as in every JSON output of tierd.
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("bench --json prints JSON");
    let mut bad = Vec::new();
    non_snake_keys(&v, "", &mut bad);
    assert!(bad.is_empty(), "keys not in snake_case: {bad:?}");
    let (want, got) = (normalized(&expected), normalized(&stdout));
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
        let from = i.saturating_sub(8);
        let show = |v: &[String]| v[from.min(v.len())..(i + 3).min(v.len())].join("\n");
        panic!(
            "bench JSON differs from {} at line {}:\n--- recorded\n{}\n--- this build\n{}",
            expected_path.display(),
            i + 1,
            show(&want),
            show(&got)
        );
    }
}
