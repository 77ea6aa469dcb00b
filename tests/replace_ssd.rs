//! Replacing the SSD without downtime, the procedure of docs/operations.md
//! run against the real daemon while one NBD connection keeps writing and
//! verifying: `tierctl evacuate ssd`, `tierctl replace ssd NEW`, `tierctl
//! evacuate --cancel`. No request fails, every byte is intact, new data
//! lands on the new SSD, and the old SSD is refused at the next start
//! with the new path named, while the new one starts fine. The client's
//! I/O runs on its own thread, during every step.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

fn ok(sock: &Path, args: &[&str]) -> String {
    tierctl_ok(sock, args)
}

fn fails(sock: &Path, args: &[&str]) -> String {
    let out = run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .args(args));
    assert!(!out.status.success(), "tierctl {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn status(sock: &Path) -> Value {
    serde_json::from_str(&ok(sock, &["status", "--json"])).expect("JSON")
}

fn qemu_io(d: &Daemon, cmd: &str) {
    run_ok(tool("qemu-io").args(["-f", "raw", "-c", cmd, &d.uri()]));
}

#[test]
fn the_ssd_is_replaced_while_a_client_keeps_writing() {
    let mut d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), String::new()],
        ..DaemonOptions::small()
    });
    let sock = d.data_dir().join("control.sock");
    qemu_io(&d, "write -P 0x11 0 96M");
    let before = status(&sock);
    assert!(before["tiers"][0]["extents"].as_u64() > Some(0));

    // One connection writes and reads back 64 KiB blocks all along, on its
    // own thread, while the procedure runs.
    let client = Client::start(&d.uri());

    // A replacement before draining is refused.
    let new = d.dir().join("new-ssd.img");
    sparse_file(&new, 64 * MIB);
    let err = fails(&sock, &["replace", "ssd", &new.display().to_string()]);
    assert!(err.contains("not being drained"), "{err}");

    let n0 = client.done();
    ok(&sock, &["evacuate", "ssd"]);
    client.wait_for(n0 + 4);
    // The HDD's own image is refused.
    let err = fails(
        &sock,
        &[
            "replace",
            "ssd",
            &d.data_dir().join("hdd.img").display().to_string(),
        ],
    );
    assert!(err.contains("is the HDD"), "{err}");
    let n1 = client.done();
    let done = ok(&sock, &["replace", "ssd", &new.display().to_string()]);
    assert!(
        done.contains("the SSD is now") && done.contains("new-ssd.img"),
        "{done}"
    );
    client.wait_for(n1 + 4);
    let dev: Value = serde_json::from_str(&ok(
        &sock,
        &["device", &new.display().to_string(), "--json"],
    ))
    .expect("JSON");
    assert_eq!(dev["role"], "ssd");
    assert_eq!(dev["volume_id"], before["volume_id"]);
    // Replacing again with the same device is refused: it is in use.
    let err = fails(&sock, &["replace", "ssd", &new.display().to_string()]);
    assert!(err.contains("already this volume's ssd"), "{err}");

    // Draining ends: new data lands on the new SSD.
    ok(&sock, &["evacuate", "--cancel"]);
    qemu_io(&d, "write -P 0x99 100M 8M");
    let st = status(&sock);
    assert!(st["tiers"][0]["extents"].as_u64() >= Some(8), "{st}");
    ok(&sock, &["migrate", "now"]);
    let n2 = client.done();
    client.wait_for(n2 + 4);
    let (pairs, text) = client.stop();
    assert!(pairs >= 12, "{pairs} write/read pairs");
    assert!(
        !text.contains("failed") && !text.contains("rror"),
        "every request of the connection succeeded:\n{text}"
    );

    // Every byte intact.
    qemu_io(&d, "read -P 0x11 0 96M");
    qemu_io(&d, "read -P 0x99 100M 8M");

    // The old SSD (still at the default path) is refused, naming the new one.
    d.terminate();
    let out = run(Command::new(tierd_bin())
        .args(["serve", "--data-dir"])
        .arg(d.data_dir())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--control",
            "",
        ]));
    assert!(!out.status.success(), "the old SSD was accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("old SSD") && err.contains("new-ssd.img"),
        "{err}"
    );
    // With the new device in its place, the volume starts and reads back.
    std::fs::rename(&new, d.data_dir().join("ssd.img")).expect("rename");
    d.restart();
    qemu_io(&d, "read -P 0x11 0 96M");
    qemu_io(&d, "read -P 0x99 100M 8M");
    assert!(status(&sock)["tiers"][0]["extents"].as_u64() >= Some(8));
}

/// One long NBD connection (qemu-io reading commands from a pipe) that
/// writes a 64 KiB block and reads it back with a pattern check, over and
/// over on its own thread, each command answered before the next is sent
/// (qemu-io takes one command per read of its input).
struct Client {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pairs: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    thread: std::thread::JoinHandle<String>,
}

impl Client {
    fn start(uri: &str) -> Client {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let stop = Arc::new(AtomicBool::new(false));
        let pairs = Arc::new(AtomicUsize::new(0));
        // stdbuf: qemu-io's answers line by line, not when its buffer fills.
        let mut child = Command::new(require("stdbuf"))
            .arg("-oL")
            .arg(require("qemu-io"))
            .args(["-f", "raw", uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("qemu-io");
        let seen = Arc::new(Mutex::new(String::new()));
        let reader = {
            let (seen, mut out) = (seen.clone(), child.stdout.take().expect("stdout"));
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut s) = seen.lock() {
                        s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            })
        };
        let (stop2, pairs2) = (stop.clone(), pairs.clone());
        let thread = std::thread::spawn(move || {
            let mut to = child.stdin.take().expect("stdin");
            let mut answered = 0usize;
            let mut step = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let off = (130 + (step % 32)) << 20;
                let p = 0x20 + (step % 64);
                for cmd in [
                    format!("write -P {p} {off} 64k"),
                    format!("read -P {p} {off} 64k"),
                ] {
                    writeln!(to, "{cmd}").expect("to qemu-io");
                    to.flush().expect("flush");
                    answered += 1;
                    let ok = wait_until(std::time::Duration::from_secs(30), || {
                        seen.lock()
                            .map(|s| s.matches(" 65536/65536 bytes").count() >= answered)
                            .unwrap_or(false)
                    });
                    assert!(
                        ok,
                        "the connection stalled at {cmd:?}: {:?}",
                        seen.lock().map(|s| s.clone())
                    );
                }
                pairs2.fetch_add(1, Ordering::Relaxed);
                step += 1;
            }
            writeln!(to, "quit").expect("quit");
            drop(to);
            let out = child.wait_with_output().expect("qemu-io ends");
            reader.join().expect("reader");
            let text = seen.lock().map(|s| s.clone()).unwrap_or_default();
            text + &String::from_utf8_lossy(&out.stderr)
        });
        Client {
            stop,
            pairs,
            thread,
        }
    }

    /// Pairs done so far.
    fn done(&self) -> usize {
        self.pairs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Wait until `n` pairs are done.
    fn wait_for(&self, n: usize) {
        let ok = wait_until(std::time::Duration::from_secs(60), || self.done() >= n);
        assert!(ok, "the client stopped making progress at {}", self.done());
    }

    /// Stop; the pairs done and everything qemu-io said.
    fn stop(self) -> (usize, String) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let text = self.thread.join().expect("client thread");
        (self.pairs.load(std::sync::atomic::Ordering::Relaxed), text)
    }
}

/// In-process: the replacement's crash and fault cases on memory devices
/// that keep only what was synced.
mod engine {
    use std::sync::Arc;

    use tierd::device::{BlockDevice, FaultDevice, FaultOp, FaultRule, MemDevice};
    use tierd::migrate::{MigrateConfig, Migrator};
    use tierd::store::{MemStore, MetaStore};
    use tierd::volume::{Devices, FormatOptions, Tier, Volume, VolumeError};

    const EXTENT: u64 = 64 * 1024;
    const SIZE: u64 = (1 << 20) + 16 * EXTENT;

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| seed ^ (i / 4096) as u8).collect()
    }

    fn open(
        ssd: &Arc<dyn BlockDevice>,
        hdd: &Arc<dyn BlockDevice>,
        store: &Arc<MemStore>,
    ) -> Result<Arc<Volume>, VolumeError> {
        let store: Arc<dyn MetaStore> = store.clone();
        Volume::open(
            Devices {
                ssd: ssd.clone(),
                hdd: hdd.clone(),
            },
            store,
        )
        .map(Arc::new)
    }

    /// A migrator that has drained the SSD of `vol` (being drained) in at
    /// most 100 rounds, if it could.
    fn drain_ssd(vol: &Arc<Volume>) -> Migrator {
        let m = Migrator::new(vol.clone(), vol.heat(), MigrateConfig::default());
        for _ in 0..100 {
            if vol.occupying(Tier::Ssd) == 0 {
                break;
            }
            m.run_round();
        }
        m
    }

    fn read(vol: &Volume, at: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        vol.read(at, &mut b).expect("read");
        b
    }

    /// Memory devices (the SSD, the HDD and a spare SSD) and a store, with
    /// the first two formatted as a volume.
    struct Rig {
        ssd_mem: Arc<MemDevice>,
        hdd_mem: Arc<MemDevice>,
        new_mem: Arc<MemDevice>,
        store: Arc<MemStore>,
        ssd: Arc<dyn BlockDevice>,
        hdd: Arc<dyn BlockDevice>,
    }

    impl Rig {
        fn formatted() -> Rig {
            let ssd_mem = Arc::new(MemDevice::with_power_model(SIZE));
            let hdd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + 64 * EXTENT));
            let (ssd, hdd): (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) =
                (ssd_mem.clone(), hdd_mem.clone());
            let store = Arc::new(MemStore::new());
            let opts = FormatOptions {
                extent_size: EXTENT,
                reserve: Some(4 * EXTENT),
                force: false,
            };
            let devices = Devices {
                ssd: ssd.clone(),
                hdd: hdd.clone(),
            };
            Volume::format(&devices, store.as_ref(), &opts).expect("format");
            Rig {
                ssd_mem,
                hdd_mem,
                new_mem: Arc::new(MemDevice::with_power_model(SIZE)),
                store,
                ssd,
                hdd,
            }
        }
    }

    #[test]
    fn replacement_survives_power_cuts_refuses_the_old_ssd_and_fails_cleanly() {
        let Rig {
            ssd_mem,
            hdd_mem,
            new_mem,
            store,
            ssd,
            hdd,
        } = Rig::formatted();
        let new_faulty = Arc::new(FaultDevice::new(new_mem.clone(), 7));
        let vol = open(&ssd, &hdd, &store).expect("open");
        let a = pattern(1, 8 * EXTENT as usize);
        vol.write(0, &a, false).expect("write");
        vol.flush().expect("flush");
        assert!(vol.usage().mapped[0] > 0);

        // Not drained: refused.
        let err = vol
            .replace_ssd(new_faulty.clone(), "/new", false)
            .expect_err("not drained");
        assert!(err.to_string().contains("not being drained"), "{err}");
        vol.set_evacuating(Some(Tier::Ssd)).expect("set draining");
        // Drained but not yet emptied: refused, nothing changes.
        let err = vol
            .replace_ssd(new_faulty.clone(), "/new", false)
            .expect_err("not empty");
        assert!(err.to_string().contains("still holds"), "{err}");
        let m = Migrator::new(vol.clone(), vol.heat(), MigrateConfig::default());
        for _ in 0..100 {
            m.run_round();
            if vol.occupying(Tier::Ssd) == 0 {
                break;
            }
        }
        assert_eq!(vol.occupying(Tier::Ssd), 0);

        // The new device fails its superblock write: the old SSD stays in
        // place, the volume keeps serving, and a second try works.
        new_faulty.add(FaultRule::new(&[FaultOp::Write]).times(1));
        assert!(vol.replace_ssd(new_faulty.clone(), "/new", false).is_err());
        assert_eq!(read(&vol, 0, a.len()), a);
        let b = pattern(2, 2 * EXTENT as usize);
        vol.write(20 * EXTENT, &b, false)
            .expect("write while drained");
        vol.replace_ssd(new_faulty.clone(), "/new", false)
            .expect("replace");
        // Draining ends: new data lands on the new SSD.
        vol.set_evacuating(None).expect("set draining");
        let c = pattern(3, 4 * EXTENT as usize);
        vol.write(40 * EXTENT, &c, false).expect("write");
        vol.flush().expect("flush");
        assert!(vol.usage().mapped[0] >= 4, "new data is on the new SSD");
        let d = pattern(4, EXTENT as usize);
        vol.write(50 * EXTENT, &d, false).expect("unflushed write");
        drop(m);
        drop(vol);

        // Power cut: what was flushed is there on the new SSD.
        for mem in [&ssd_mem, &hdd_mem, &new_mem] {
            mem.power_cut();
        }
        store.power_cut();
        let new: Arc<dyn BlockDevice> = new_mem.clone();
        match open(&ssd, &hdd, &store) {
            Err(VolumeError::ReplacedSsd { replaced_by, .. }) => assert_eq!(replaced_by, "/new"),
            other => panic!("the old SSD must be refused, got {:?}", other.map(|_| ())),
        }
        let vol = open(&new, &hdd, &store).expect("open with the new SSD");
        assert_eq!(read(&vol, 0, a.len()), a);
        assert_eq!(read(&vol, 20 * EXTENT, b.len()), b);
        assert_eq!(read(&vol, 40 * EXTENT, c.len()), c);
    }

    #[test]
    fn a_failed_replacement_and_a_power_cut_leave_the_old_ssd_in_service() {
        let Rig {
            ssd_mem,
            hdd_mem,
            new_mem,
            store,
            ssd,
            hdd,
        } = Rig::formatted();
        let vol = open(&ssd, &hdd, &store).expect("open");
        let a = pattern(5, 8 * EXTENT as usize);
        vol.write(0, &a, false).expect("write");
        vol.set_evacuating(Some(Tier::Ssd)).expect("set draining");
        let m = drain_ssd(&vol);
        assert_eq!(vol.occupying(Tier::Ssd), 0, "drained within 100 rounds");
        let new_faulty = Arc::new(FaultDevice::new(new_mem.clone(), 9));
        // A failing sync of the new device after its superblock: refused.
        new_faulty.add(FaultRule::new(&[FaultOp::Sync]).times(1));
        assert!(vol.replace_ssd(new_faulty.clone(), "/new", false).is_err());
        assert_eq!(read(&vol, 0, a.len()), a);
        drop(m);
        drop(vol);
        for mem in [&ssd_mem, &hdd_mem, &new_mem] {
            mem.power_cut();
        }
        store.power_cut();
        // Nothing recorded the replacement: the old SSD opens, data intact.
        let vol = open(&ssd, &hdd, &store).expect("the old SSD still opens");
        assert_eq!(read(&vol, 0, a.len()), a);
    }

    /// A store whose next flushes fail when armed (the metadata device
    /// erring while the replacement is recorded).
    struct FlakyStore {
        inner: Arc<MemStore>,
        fail_flushes: std::sync::atomic::AtomicU32,
    }

    impl MetaStore for FlakyStore {
        fn get(&self, key: &str) -> tierd::store::StoreResult<Option<Vec<u8>>> {
            self.inner.get(key)
        }
        fn put(&self, key: &str, value: &[u8]) -> tierd::store::StoreResult<()> {
            self.inner.put(key, value)
        }
        fn load_extents(&self) -> tierd::store::StoreResult<Vec<(u64, Vec<u8>)>> {
            self.inner.load_extents()
        }
        fn put_extent(&self, index: u64, record: &[u8]) -> tierd::store::StoreResult<()> {
            self.inner.put_extent(index, record)
        }
        fn remove_extent(&self, index: u64) -> tierd::store::StoreResult<()> {
            self.inner.remove_extent(index)
        }
        fn flush(&self) -> tierd::store::StoreResult<()> {
            use std::sync::atomic::Ordering;
            if self
                .fail_flushes
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(tierd::store::StoreError::Io(std::io::Error::other(
                    "injected metadata flush failure",
                )));
            }
            self.inner.flush()
        }
        fn clear(&self) -> tierd::store::StoreResult<()> {
            self.inner.clear()
        }
    }

    #[test]
    fn a_failed_record_of_the_replacement_is_undone_and_the_old_ssd_stays() {
        // Step 3 fails: the new device has its superblock, but the flush
        // that records it in the store fails. The record is put back; the
        // volume keeps serving on the old SSD; after a power cut the old
        // SSD opens, and a retry replaces it.
        let Rig {
            ssd_mem,
            hdd_mem,
            new_mem,
            store,
            ssd,
            hdd,
        } = Rig::formatted();
        let flaky = Arc::new(FlakyStore {
            inner: store.clone(),
            fail_flushes: std::sync::atomic::AtomicU32::new(0),
        });
        let meta: Arc<dyn MetaStore> = flaky.clone();
        let vol = Arc::new(
            Volume::open(
                Devices {
                    ssd: ssd.clone(),
                    hdd: hdd.clone(),
                },
                meta,
            )
            .expect("open"),
        );
        let a = pattern(6, 8 * EXTENT as usize);
        vol.write(0, &a, false).expect("write");
        vol.set_evacuating(Some(Tier::Ssd)).expect("set draining");
        let m = drain_ssd(&vol);
        assert_eq!(vol.occupying(Tier::Ssd), 0, "drained within 100 rounds");
        vol.flush().expect("flush");
        drop(m);
        // Step 1's flush has nothing to write (no store flush); step 3's
        // fails.
        flaky
            .fail_flushes
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let new: Arc<dyn BlockDevice> = new_mem.clone();
        let err = vol
            .replace_ssd(new.clone(), "/new", false)
            .expect_err("the record's flush failed");
        assert!(err.to_string().contains("injected"), "{err}");
        assert_eq!(read(&vol, 0, a.len()), a);
        let b = pattern(7, EXTENT as usize);
        vol.write(20 * EXTENT, &b, false).expect("write on");
        vol.flush().expect("a later flush records nothing of it");
        drop(vol);
        for mem in [&ssd_mem, &hdd_mem, &new_mem] {
            mem.power_cut();
        }
        store.power_cut();
        let vol = open(&ssd, &hdd, &store).expect("the old SSD still opens");
        assert_eq!(read(&vol, 0, a.len()), a);
        assert_eq!(read(&vol, 20 * EXTENT, b.len()), b);
        // A retry works (the new device carries the failed attempt's
        // superblock of this volume, which is no content to refuse).
        vol.set_evacuating(Some(Tier::Ssd)).expect("set draining");
        let m = drain_ssd(&vol);
        vol.replace_ssd(new.clone(), "/new", false)
            .expect("the retry replaces it");
        vol.flush().expect("flush");
        drop(m);
        drop(vol);
        let vol = open(&new, &hdd, &store).expect("the new SSD opens");
        assert_eq!(read(&vol, 0, a.len()), a);
        assert_eq!(read(&vol, 20 * EXTENT, b.len()), b);
    }
}
