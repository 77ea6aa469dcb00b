//! An image file larger than its filesystem allows for one file (16 TiB on
//! ext4 with 4 KiB blocks, which caps a file at 16 TiB − 4 KiB): `tierd
//! format` and `tierd serve` say which file, the filesystem's limit and
//! what to do, keep the system's own word (File too large), and leave no
//! image behind, so that trying again with a smaller size just works.
//!
//! Runs on ext4 with 4 KiB blocks: the target directory's filesystem when
//! it is one (as on the project's machines), else a small ext4 image
//! mounted on a loop device for the test (then it needs root, mkfs.ext4
//! and mount, as tests/mount_ext4.rs does).

mod common;
mod start_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{require_root, run_ok, run_quiet, sparse_file, tempdir, tool, MIB};
use start_support::{fails, succeeds, tierd_in};

/// `statfs` magic number of ext2/3/4.
const EXT_MAGIC: u64 = 0xEF53;

/// A directory on ext4 with 4 KiB blocks; unmounts its loop mount on drop.
struct Ext4Dir {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    mounted: bool,
}

impl Ext4Dir {
    fn new() -> Ext4Dir {
        let tmp = tempdir();
        if is_ext_4k(tmp.path()) {
            let dir = tmp.path().to_path_buf();
            return Ext4Dir {
                _tmp: tmp,
                dir,
                mounted: false,
            };
        }
        require_root("a 16 TiB image on a filesystem other than ext4");
        let image = tmp.path().join("ext4.img");
        sparse_file(&image, 64 * MIB);
        run_ok(
            tool("mkfs.ext4")
                .args(["-q", "-F", "-b", "4096"])
                .arg(&image),
        );
        let dir = tmp.path().join("mnt");
        std::fs::create_dir_all(&dir).expect("creating the mount point");
        run_ok(
            tool("mount")
                .args(["-t", "ext4", "-o", "loop"])
                .arg(&image)
                .arg(&dir),
        );
        assert!(
            is_ext_4k(&dir),
            "the loop mount is not ext4 with 4 KiB blocks"
        );
        Ext4Dir {
            _tmp: tmp,
            dir,
            mounted: true,
        }
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Ext4Dir {
    fn drop(&mut self) {
        if self.mounted {
            let t = Duration::from_secs(30);
            if !run_quiet(Command::new("umount").arg(&self.dir), t) {
                run_quiet(Command::new("umount").arg("-l").arg(&self.dir), t);
            }
        }
    }
}

fn is_ext_4k(path: &Path) -> bool {
    rustix::fs::statfs(path)
        .map(|st| st.f_type as u64 == EXT_MAGIC && st.f_bsize == 4096)
        .unwrap_or(false)
}

/// What every refusal of a 16 TiB HDD image must say.
fn assert_explained(err: &str, hdd: &Path) {
    let head = format!("cannot make {} 16TiB", hdd.display());
    assert_eq!(err.matches(&head).count(), 1, "which file, once: {err}");
    assert!(err.contains("File too large"), "the system's word: {err}");
    assert!(
        err.contains("caps one file at 16TiB − 4KiB"),
        "the filesystem's limit: {err}"
    );
    assert!(
        err.contains("use a smaller hdd-size (--hdd-size, TIERD_HDD_SIZE"),
        "what to do: {err}"
    );
    assert!(err.contains("XFS"), "the way around it: {err}");
}

#[test]
fn format_explains_a_16_tib_image_and_leaves_nothing_behind() {
    let fs = Ext4Dir::new();
    let data = fs.path().join("v");
    let args = |hdd: &'static str| {
        let mut a = vec!["format", "--data-dir", "v", "--ssd-size", "1GiB"];
        a.extend(["--hdd-size", hdd]);
        a
    };
    let err = fails(&mut tierd_in(fs.path(), &args("16TiB")));
    assert_explained(&err, Path::new("v/hdd.img"));
    for img in ["ssd.img", "hdd.img"] {
        assert!(
            !data.join(img).exists(),
            "{img} is left behind after the refusal"
        );
    }
    // Just below ext4's limit, and after the refusal, it works.
    let (out, _) = succeeds(&mut tierd_in(fs.path(), &args("15TiB")));
    assert!(out.contains("formatted"), "{out}");
}

#[test]
fn serve_explains_a_16_tib_default_image_and_leaves_nothing_behind() {
    let fs = Ext4Dir::new();
    let data = fs.path().join("d");
    let args = [
        "serve",
        "--data-dir",
        "d",
        "--hdd-size",
        "16TiB",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
        "--control",
        "",
    ];
    let err = fails(&mut tierd_in(fs.path(), &args));
    assert_explained(&err, Path::new("d/hdd.img"));
    for img in ["ssd.img", "hdd.img"] {
        assert!(
            !data.join(img).exists(),
            "{img} is left behind after the refusal"
        );
    }
}
