//! The documented recipes run as printed: the README's mount/use/unmount
//! recipe (nbdfuse, a loop device, ext4) against a running tierd, and
//! docs/remote.md's one-machine remote-tier set-up (nbdkit as the remote,
//! `tierd format`, `tierd serve`, stop). Each recipe is the indented code
//! block after a `<!-- recipe: NAME ... -->` marker in the document; its
//! lines run one by one in one bash, and the test fails if any line exits
//! non-zero or if a mount, a loop device or a process of the recipe is left
//! behind afterwards.
//!
//! What is substituted, mechanically, so that the test neither collides
//! with the machine's own /tmp/nbd, /mnt/tierd or port 10809 nor with a
//! parallel run:
//! - the paths `/tmp/nbd`, `/mnt/tierd` and `/tmp/tierd-remote` become
//!   directories of a private temp directory;
//! - the ports `10809` (tierd's NBD port) and `10900` (the remote's) become
//!   free ports, and the shell gets `TIERD_LISTEN` set to tierd's and
//!   `TIERD_METRICS_LISTEN` empty (tierd's documented environment keys),
//!   so a `tierd serve` of the recipe listens where the recipe says;
//! - `tierd` and `tierctl` are this build's, first on `PATH`;
//! - a `# ... use ... ...` comment line is where the test's own use of the
//!   mounted filesystem or the served export goes (checked the same way).
//!
//! Needs root (loop devices, mounts) and /dev/fuse, like tests/mount_ext4.rs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// How long a recipe may run.
const RECIPE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long what a recipe stopped may take to go.
const GRACE: Duration = Duration::from_secs(10);

/// The repository's root (where README.md is).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lines of the indented code block after `<!-- recipe: NAME` in
/// `doc` (continuation lines joined).
fn recipe(doc: &str, name: &str) -> Vec<String> {
    let path = root().join(doc);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let marker = format!("<!-- recipe: {name} ");
    let at = text
        .find(&marker)
        .unwrap_or_else(|| panic!("{doc} has no `{marker}...-->` marker"));
    let after = &text[at..];
    let mut lines = after.lines().skip(1).skip_while(|l| l.trim().is_empty());
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    for l in lines.by_ref() {
        let Some(code) = l.strip_prefix("    ") else {
            break;
        };
        match code.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(code);
                out.push(std::mem::take(&mut pending));
            }
        }
    }
    assert!(
        pending.is_empty(),
        "{doc}'s {name} recipe ends in a continuation"
    );
    assert!(
        out.len() >= 3,
        "{doc}'s {name} recipe is not an indented block after its marker: {out:?}"
    );
    out
}

/// Single-quote `s` for bash.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Where the recipe's paths and ports go in this run.
struct Subst {
    /// (as printed, as run)
    pairs: Vec<(String, String)>,
}

impl Subst {
    fn apply(&self, line: &str) -> String {
        let mut s = line.to_string();
        for (from, to) in &self.pairs {
            s = s.replace(from, to);
        }
        s
    }
}

/// A bash script that runs `lines` (after substitution) one by one and
/// stops with the line named when one fails; `use_lines` go where a
/// `# ... use ...` comment is.
fn script(lines: &[String], subst: &Subst, env: &[(&str, String)], use_lines: &[String]) -> String {
    let mut s = String::from("set -u\n");
    let bin = tierd_bin();
    let bindir = bin.parent().expect("the binaries' directory");
    s.push_str(&format!(
        "export PATH={}:\"$PATH\"\n",
        quote(&bindir.display().to_string())
    ));
    for (k, v) in env {
        s.push_str(&format!("export {k}={}\n", quote(v)));
    }
    let check = |s: &mut String, what: String, line: &str| {
        s.push_str(line);
        s.push('\n');
        s.push_str(&format!(
            "rc=$?; if [ $rc -ne 0 ]; then echo {} \"failed with status $rc\" >&2; exit 100; fi\n",
            quote(&format!("{what}: `{line}`"))
        ));
    };
    let mut used = false;
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim();
        if t.starts_with("# ...") && t.contains("use") {
            used = true;
            for (j, u) in use_lines.iter().enumerate() {
                check(&mut s, format!("the test's use of it, line {}", j + 1), u);
            }
            continue;
        }
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        check(&mut s, format!("recipe line {}", i + 1), &subst.apply(l));
    }
    assert!(used, "the recipe has no `# ... use ...` line: {lines:?}");
    s
}

/// Run `script` in bash in `cwd`; panics with its output unless it exits 0.
/// Its output goes to files, not pipes: a process it leaves behind would
/// hold a pipe open and a reader waiting for its end.
fn run_script(script: &str, cwd: &Path, what: &str) -> String {
    let file = cwd.join(format!("{what}.sh"));
    write(&file, script.as_bytes());
    let (out_path, err_path) = (
        cwd.join(format!("{what}.out")),
        cwd.join(format!("{what}.err")),
    );
    let create = |p: &Path| {
        std::fs::File::create(p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()))
    };
    let mut cmd = Command::new("bash");
    cmd.arg("--noprofile")
        .arg("--norc")
        .arg(&file)
        .current_dir(cwd)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(create(&out_path))
        .stderr(create(&err_path));
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawning bash for {what}: {e}"));
    let mut status = None;
    let finished = wait_until(RECIPE_TIMEOUT, || {
        status = child.try_wait().expect("polling bash");
        status.is_some()
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
    }
    let text = |p: &Path| String::from_utf8_lossy(&read(p)).into_owned();
    let (stdout, stderr) = (text(&out_path), text(&err_path));
    let ok = status.is_some_and(|s| s.success());
    assert!(
        ok,
        "the {what} recipe {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- script ---\n{script}",
        match status {
            Some(s) => format!("exited with {s}"),
            None => format!("did not finish within {RECIPE_TIMEOUT:?}"),
        }
    );
    stdout
}

/// Mount points under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("reading mountinfo");
    let d = dir.display().to_string();
    info.lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .filter(|m| m.starts_with(&d))
        .map(String::from)
        .collect()
}

/// Loop devices whose backing file is under `dir`.
fn loops_under(dir: &Path) -> Vec<String> {
    let d = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let back = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            back.trim()
                .starts_with(&d)
                .then(|| format!("/dev/{name} ({})", back.trim()))
        })
        .collect()
}

/// Processes (other than `except`) whose command line names `dir` or one
/// of `ports`, or whose working directory is in `dir`.
fn processes_of(dir: &Path, ports: &[u16], except: &[u32]) -> Vec<String> {
    let d = dir.display().to_string();
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            if pid == me || except.contains(&pid) {
                return None;
            }
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let args: Vec<String> = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let cwd = std::fs::read_link(e.path().join("cwd")).ok();
            // A port of the recipe, as an address (`127.0.0.1:PORT`,
            // `nbd://…:PORT/`) or after `-p`/`--port` (nbdkit).
            let names_port = |i: usize, a: &String| {
                ports.iter().any(|p| {
                    let p = p.to_string();
                    a.contains(&format!("127.0.0.1:{p}"))
                        || (a == &p && i > 0 && matches!(args[i - 1].as_str(), "-p" | "--port"))
                })
            };
            let ours = args
                .iter()
                .enumerate()
                .any(|(i, a)| a.contains(&d) || names_port(i, a))
                || cwd.is_some_and(|c| c.starts_with(dir));
            ours.then(|| format!("{pid}: {}", args.join(" ")))
        })
        .collect()
}

/// What a recipe left behind: mounts, loop devices, processes.
fn leftovers(dir: &Path, ports: &[u16], except: &[u32]) -> Vec<String> {
    let mut v: Vec<String> = mounts_under(dir)
        .into_iter()
        .map(|m| format!("mount {m}"))
        .collect();
    v.extend(loops_under(dir).into_iter().map(|l| format!("loop {l}")));
    v.extend(
        processes_of(dir, ports, except)
            .into_iter()
            .map(|p| format!("process {p}")),
    );
    v
}

/// Assert nothing of the recipe is left (after a grace period for what it
/// stopped to go).
fn assert_clean(dir: &Path, ports: &[u16], except: &[u32], what: &str) {
    let mut left = Vec::new();
    let clean = wait_until(GRACE, || {
        left = leftovers(dir, ports, except);
        left.is_empty()
    });
    assert!(clean, "the {what} recipe left behind:\n{}", left.join("\n"));
}

/// Cleans up after a failed recipe: unmounts, detaches and kills what is
/// left of it, so a failure leaves the machine as it was.
struct Sweep {
    dir: PathBuf,
    ports: Vec<u16>,
    except: Vec<u32>,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let t = Duration::from_secs(10);
        let mut mounts = mounts_under(&self.dir);
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in &mounts {
            if !run_quiet(Command::new("umount").arg(m), t) {
                run_quiet(Command::new("umount").arg("-l").arg(m), t);
            }
        }
        for l in loops_under(&self.dir) {
            if let Some(dev) = l.split_whitespace().next() {
                run_quiet(Command::new("losetup").arg("-d").arg(dev), t);
            }
        }
        for m in mounts_under(&self.dir) {
            run_quiet(Command::new("fusermount3").arg("-uz").arg(&m), t);
        }
        for p in processes_of(&self.dir, &self.ports, &self.except) {
            if let Some(pid) = p.split(':').next().and_then(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill(2) of a process this test's recipe started
                // (found by its command line or working directory).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

#[test]
fn the_readme_mount_recipe_runs_as_printed_and_leaves_nothing() {
    require_root("the README's mount recipe");
    for t in [
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "mount",
        "umount",
        "fusermount3",
    ] {
        require(t);
    }
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing (FUSE)"
    );
    let lines = recipe("README.md", "mount");
    let d = Daemon::start();
    let tmp = tempdir();
    let dir = tmp.path();
    let subst = Subst {
        pairs: vec![
            ("/tmp/nbd".into(), dir.join("nbd").display().to_string()),
            ("/mnt/tierd".into(), dir.join("mnt").display().to_string()),
            ("10809".into(), d.port().to_string()),
        ],
    };
    let _sweep = Sweep {
        dir: dir.to_path_buf(),
        ports: vec![],
        except: vec![d.pid()],
    };
    let mnt = dir.join("mnt").display().to_string();
    let use_lines = vec![
        format!(
            "head -c 3M /dev/urandom > {} && sync",
            quote(&format!("{mnt}/file"))
        ),
        format!(
            "sha256sum {} > {}",
            quote(&format!("{mnt}/file")),
            quote(&dir.join("sum").display().to_string())
        ),
        format!("df {} | grep -q {}", quote(&mnt), quote(&mnt)),
    ];
    let s = script(&lines, &subst, &[], &use_lines);
    run_script(&s, dir, "readme-mount");
    assert_clean(dir, &[], &[d.pid()], "README mount");
    assert!(
        read(&dir.join("sum")).len() > 64,
        "the use step wrote no checksum"
    );
}

#[test]
fn the_remote_tier_recipe_runs_as_printed_and_leaves_nothing() {
    for t in ["nbdkit", "nbdinfo", "qemu-io", "timeout", "truncate"] {
        require(t);
    }
    let lines = recipe("docs/remote.md", "remote-tier");
    let tmp = tempdir();
    let dir = tmp.path();
    let work = dir.join("remote");
    let (tierd_port, remote_port) = (free_port(), free_port());
    let subst = Subst {
        pairs: vec![
            ("/tmp/tierd-remote".into(), work.display().to_string()),
            ("10809".into(), tierd_port.to_string()),
            ("10900".into(), remote_port.to_string()),
        ],
    };
    let ports = [tierd_port, remote_port];
    let _sweep = Sweep {
        dir: dir.to_path_buf(),
        ports: ports.to_vec(),
        except: vec![],
    };
    let uri = format!("nbd://127.0.0.1:{tierd_port}");
    let use_lines = vec![
        format!("qemu-io -f raw -c 'write -P 0x5a 1M 4M' -c flush {uri} | grep -q 'wrote 4194304/4194304'"),
        format!("qemu-io -f raw -c 'read -P 0x5a 1M 4M' {uri} | grep -q 'read 4194304/4194304'"),
        format!("nbdinfo --size {uri}"),
    ];
    let env = [
        ("TIERD_LISTEN", format!("127.0.0.1:{tierd_port}")),
        ("TIERD_METRICS_LISTEN", String::new()),
    ];
    let s = script(&lines, &subst, &env, &use_lines);
    let out = run_script(&s, dir, "remote-tier");
    assert!(
        out.lines()
            .any(|l| l.trim().parse::<u64>().is_ok_and(|n| n > 0)),
        "nbdinfo --size printed no size:\n{out}"
    );
    assert_clean(dir, &ports, &[], "remote-tier");
}
