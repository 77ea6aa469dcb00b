//! A real filesystem on the real daemon: the export is exposed as a file by
//! `nbdfuse`, attached to a loop device, formatted with ext4 and mounted; a
//! tree of a few hundred files is written and checksummed (sha256sum);
//! after unmounting everything and a clean SIGTERM restart of tierd, the
//! same tree reads back with identical checksums and `e2fsck -fn` finds the
//! filesystem clean. Needs root (loop devices, mount) and /dev/fuse.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{
    random_bytes, require, require_root, run_ok, run_ok_timeout, run_quiet, tool, wait_until,
    write, Daemon, KIB, MIB,
};

const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The export attached as nbdfuse file → loop device → mounted ext4, torn
/// down in reverse order on drop, also when the test fails.
struct Attached {
    fuse_dir: PathBuf,
    nbdfuse: Option<Child>,
    loopdev: Option<String>,
    mnt: Option<PathBuf>,
}

impl Attached {
    /// nbdfuse the export to `<dir>/fuse/disk` and attach a loop device.
    fn attach(d: &Daemon, tag: &str) -> Attached {
        let fuse_dir = d.dir().join(format!("fuse-{tag}"));
        std::fs::create_dir_all(&fuse_dir).expect("creating the nbdfuse mount point");
        let pidfile = d.dir().join(format!("nbdfuse-{tag}.pid"));
        let log = d.dir().join(format!("nbdfuse-{tag}.log"));
        let logf = File::create(&log).expect("creating the nbdfuse log");
        let child = Command::new(require("nbdfuse"))
            .arg("-P")
            .arg(&pidfile)
            .arg(fuse_dir.join("disk"))
            .arg(d.uri())
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("cloning the log handle"))
            .stderr(logf)
            .spawn()
            .expect("spawning nbdfuse");
        let mut a = Attached {
            fuse_dir,
            nbdfuse: Some(child),
            loopdev: None,
            mnt: None,
        };
        let ready = wait_until(common::START_TIMEOUT, || {
            let exited = a
                .nbdfuse
                .as_mut()
                .expect("nbdfuse child")
                .try_wait()
                .expect("polling nbdfuse")
                .is_some();
            exited || pidfile.exists()
        });
        let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
        assert!(ready, "nbdfuse did not become ready:\n{}", log_text());
        let disk = a.fuse_dir.join("disk");
        assert!(
            disk.is_file(),
            "nbdfuse exited or shows no {}:\n{}",
            disk.display(),
            log_text()
        );
        let dev = run_ok(tool("losetup").args(["-f", "--show"]).arg(&disk));
        let dev = dev.trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        a.loopdev = Some(dev);
        a
    }

    fn dev(&self) -> &str {
        self.loopdev.as_deref().expect("attached loop device")
    }

    fn mount(&mut self, mnt: &Path) {
        std::fs::create_dir_all(mnt).expect("creating the mount point");
        run_ok(tool("mount").args(["-t", "ext4"]).arg(self.dev()).arg(mnt));
        self.mnt = Some(mnt.to_path_buf());
    }

    fn umount(&mut self) {
        let mnt = self.mnt.take().expect("mounted");
        run_ok(tool("umount").arg(&mnt));
    }

    /// Tear down cleanly, asserting every step (the non-failing path).
    fn detach(mut self) {
        if self.mnt.is_some() {
            self.umount();
        }
        let dev = self.loopdev.take().expect("attached loop device");
        run_ok(tool("losetup").arg("-d").arg(&dev));
        run_ok(tool("fusermount3").arg("-u").arg(&self.fuse_dir));
        let mut child = self.nbdfuse.take().expect("nbdfuse child");
        let exited = wait_until(CLEANUP_TIMEOUT, || {
            child.try_wait().expect("polling nbdfuse").is_some()
        });
        assert!(exited, "nbdfuse did not exit after fusermount3 -u");
        let st = child.wait().expect("reaping nbdfuse");
        assert!(st.success(), "nbdfuse exited with {st}");
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Some(mnt) = self.mnt.take() {
            if !run_quiet(Command::new("umount").arg(&mnt), CLEANUP_TIMEOUT) {
                run_quiet(Command::new("umount").arg("-l").arg(&mnt), CLEANUP_TIMEOUT);
            }
        }
        if let Some(dev) = self.loopdev.take() {
            run_quiet(Command::new("losetup").arg("-d").arg(&dev), CLEANUP_TIMEOUT);
        }
        if let Some(mut child) = self.nbdfuse.take() {
            if !run_quiet(
                Command::new("fusermount3").arg("-u").arg(&self.fuse_dir),
                CLEANUP_TIMEOUT,
            ) {
                run_quiet(
                    Command::new("fusermount3").arg("-uz").arg(&self.fuse_dir),
                    CLEANUP_TIMEOUT,
                );
            }
            if !wait_until(CLEANUP_TIMEOUT, || matches!(child.try_wait(), Ok(Some(_)))) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// Write a deterministic tree under `root`: `files` files of random sizes
/// (a quarter up to 1 MiB, the rest up to 64 KiB, some empty) spread over
/// nested directories. Returns the relative paths, sorted.
fn make_tree(root: &Path, files: usize) -> Vec<String> {
    let sizes = random_bytes(files * 8, 4242);
    let mut paths = Vec::new();
    for i in 0..files {
        let r = u64::from_le_bytes(sizes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let size = match i % 4 {
            0 => r % (MIB + 1),
            _ if i % 37 == 5 => 0,
            _ => r % (64 * KIB),
        } as usize;
        let rel = format!("d{}/s{}/file-{i:04}.bin", i % 7, i % 3);
        let path = root.join(&rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("creating tree dirs");
        write(&path, &random_bytes(size, 10_000 + i as u64));
        paths.push(rel);
    }
    paths.sort();
    paths
}

/// Relative paths of all regular files under `root` (minus lost+found).
fn list_files(root: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        {
            let e = e.expect("dir entry");
            let p = e.path();
            let ft = e.file_type().expect("file type");
            if ft.is_dir() {
                if e.file_name() != "lost+found" {
                    walk(base, &p, out);
                }
            } else {
                let rel = p.strip_prefix(base).expect("under the root");
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

/// `sha256sum` of `paths` relative to `root`: its output, one line a file.
fn checksums(root: &Path, paths: &[String]) -> String {
    let out = run_ok_timeout(
        tool("sha256sum").args(paths).current_dir(root),
        Duration::from_secs(300),
    );
    assert_eq!(out.lines().count(), paths.len(), "sha256sum output:\n{out}");
    out
}

#[test]
fn ext4_on_nbdfuse_loop_survives_restart() {
    require_root("mount_ext4");
    for t in [
        "nbdfuse",
        "fusermount3",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "mount",
        "umount",
        "sha256sum",
    ] {
        require(t);
    }
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse missing: modprobe fuse (scripts/test.sh tries)"
    );

    let mut d = Daemon::start();
    let staging = d.dir().join("staging");
    let paths = make_tree(&staging, 300);
    let manifest = checksums(&staging, &paths);
    write(&d.dir().join("manifest.sha256"), manifest.as_bytes());

    // First life: mkfs, mount, copy the tree in, unmount everything.
    let mnt = d.dir().join("mnt");
    let mut a = Attached::attach(&d, "1");
    run_ok(tool("mkfs.ext4").args(["-q", "-F"]).arg(a.dev()));
    a.mount(&mnt);
    run_ok_timeout(
        tool("cp").arg("-a").arg(staging.join(".")).arg(&mnt),
        Duration::from_secs(300),
    );
    assert_eq!(list_files(&mnt), paths, "file list right after copying");
    a.detach();

    // Restart tierd cleanly.
    d.terminate();
    d.restart();

    // Second life: everything is there with the same checksums.
    let mut a = Attached::attach(&d, "2");
    a.mount(&mnt);
    assert_eq!(list_files(&mnt), paths, "file list after the restart");
    let again = checksums(&mnt, &paths);
    if again != manifest {
        let bad: Vec<_> = manifest
            .lines()
            .zip(again.lines())
            .filter(|(x, y)| x != y)
            .map(|(x, _)| x.to_string())
            .collect();
        panic!(
            "{} of {} files changed across the restart, e.g.:\n{}",
            bad.len(),
            paths.len(),
            bad.iter().take(10).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    // sha256sum -c agrees.
    run_ok(
        tool("sha256sum")
            .args(["-c", "--quiet"])
            .arg(d.dir().join("manifest.sha256"))
            .current_dir(&mnt),
    );
    a.umount();

    // The filesystem is clean.
    run_ok_timeout(
        tool("e2fsck").args(["-f", "-n"]).arg(a.dev()),
        Duration::from_secs(300),
    );
    a.detach();
    d.terminate();
}
