//! The core library's layers point one way (docs/design.md draws them):
//! every `crate::` path in `src/` must name a module its own module may use.
//! A scan of the source text, comments left out: enough to catch an upward
//! import, a new cycle, or a new module nobody placed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of the library and the modules it may use, lowest
/// layer first. Keep in step with the diagram in docs/design.md.
const ALLOWED: &[(&str, &[&str])] = &[
    // Layer 0: shared vocabulary.
    ("units", &[]),
    // Layer 1: devices, metadata store, heat, time, the accept loop, traces.
    ("clock", &["units"]),
    ("listen", &["units"]),
    ("device", &["units", "clock"]),
    ("store", &["units", "device"]),
    ("heat", &["units", "clock"]),
    ("trace", &["units"]),
    // Layer 2: the volume.
    ("volume", &["units", "clock", "device", "store", "heat"]),
    // Layer 3: migration.
    (
        "migrate",
        &["units", "clock", "device", "store", "heat", "volume"],
    ),
    // Layer 4: the NBD protocol (pure: vocabulary and the accept loop) and the control
    // protocol's messages.
    ("nbd", &["units", "listen"]),
    ("control", &["units", "heat", "volume", "migrate"]),
    // Layer 5: configuration, then the serving layer on top.
    (
        "config",
        &[
            "units", "clock", "device", "store", "heat", "volume", "migrate", "nbd",
        ],
    ),
    (
        "serving",
        &[
            "units", "clock", "listen", "device", "store", "heat", "trace", "volume", "migrate",
            "nbd", "control", "config",
        ],
    ),
];

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without `//` comments (doc comments included) and without
/// the contents of string literals, so neither can name a module.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '"' && prev != '\\' {
                    in_str = false;
                    out.push('"');
                }
                prev = if prev == '\\' && c == '\\' { ' ' } else { c };
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' {
                in_str = true;
                out.push('"');
                prev = ' ';
                continue;
            }
            out.push(c);
        }
        out.push('\n');
    }
    out
}

/// Top-level module names that `crate::` paths in `code` refer to,
/// including the members of grouped imports (`use crate::{a::X, b};`).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` or an identifier ending in "crate"
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level members of the group, up to its closing brace.
            let mut depth = 0;
            let mut member = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_start = true,
                    c if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') => {
                        member.push(c)
                    }
                    _ if depth == 0 && at_start && !member.is_empty() => {
                        refs.insert(std::mem::take(&mut member));
                        at_start = false;
                    }
                    _ => {}
                }
            }
            if !member.is_empty() {
                refs.insert(member);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

/// The top-level module a file of `src/` belongs to (`None` for lib.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    if rel.components().count() == 1 {
        let stem = first.trim_end_matches(".rs").to_string();
        return (stem != "lib").then_some(stem);
    }
    Some(first.into_owned())
}

fn scan() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files.sort();
    // module -> used module -> files that use it
    let mut uses: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        let entry = uses.entry(module.clone()).or_default();
        for used in crate_refs(&code_only(&text)) {
            if used != module && used != "self" && used != "super" {
                entry
                    .entry(used)
                    .or_default()
                    .push(file.display().to_string());
            }
        }
    }
    uses
}

#[test]
fn every_module_has_a_place_in_the_layers() {
    let placed: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("read lib.rs");
    let declared: Vec<String> = code_only(&lib)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            Some(
                l.strip_prefix("mod ")?
                    .strip_suffix(';')?
                    .trim()
                    .to_string(),
            )
        })
        .collect();
    assert!(!declared.is_empty(), "no modules found in src/lib.rs");
    for m in &declared {
        assert!(
            placed.contains(m.as_str()),
            "module `{m}` is declared in src/lib.rs but has no layer in tests/layering.rs (and docs/design.md)"
        );
    }
    for m in &placed {
        assert!(
            declared.iter().any(|d| d == m),
            "tests/layering.rs places `{m}`, which src/lib.rs does not declare"
        );
    }
}

#[test]
fn imports_point_down_only() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, a)| (*m, a.iter().copied().collect()))
        .collect();
    let mut bad = Vec::new();
    for (module, used) in scan() {
        let Some(ok) = allowed.get(module.as_str()) else {
            bad.push(format!("`{module}` has no layer"));
            continue;
        };
        for (u, files) in used {
            if !ok.contains(u.as_str()) {
                bad.push(format!(
                    "`{module}` uses `crate::{u}` in {}",
                    files.join(", ")
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layers:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_allowed_table_itself_has_no_cycle_and_points_down() {
    // Each module may only use modules listed before it.
    for (i, (m, uses)) in ALLOWED.iter().enumerate() {
        for u in *uses {
            let j = ALLOWED.iter().position(|(x, _)| x == u);
            assert!(
                j.is_some_and(|j| j < i),
                "`{m}` may use `{u}`, which is not a lower module in the table"
            );
        }
    }
}

#[test]
fn the_scanner_sees_grouped_and_inline_paths() {
    let code = code_only(
        "use crate::{heat::X, volume::{A, B}};\n\
         // crate::nbd in a comment\n\
         let s = \"crate::config in a string\";\n\
         fn f() -> crate::migrate::Move { todo!() }\n\
         macro_rules! m { () => { $crate::store::S } }\n",
    );
    let refs = crate_refs(&code);
    let want: BTreeSet<String> = ["heat", "volume", "migrate"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(refs, want);
}
