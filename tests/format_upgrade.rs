//! The metadata store's format upgrade: a store as the previous release
//! left it (format-version "1", version-1 extent records, no
//! clean-shutdown key) opens with this build with every byte intact, and is
//! upgraded in place to version "2" (durably, before anything is served);
//! its old records stay readable and new states are written as version-2
//! records. A store of a newer format ("3") is refused with a message
//! naming both versions, and is left untouched. Both in process (memory
//! devices and store) and through `tierd serve` on image files and sled.

mod common;
mod raw_client;
mod support;

use std::process::Command;

use support::{assert_accounting, assert_reads, migrate, pattern, Bed, EXTENT};
use tierd::store::{MetaStore, SledStore, FORMAT_VERSION_KEY};
use tierd::volume::{MoveOutcome, Tier, Volume, VolumeError};

const BLK: u64 = 4096;

/// A version-1 extent record as the previous release wrote it: tier, slot
/// and either "every block written" or a one-word bitmap (16 blocks).
fn v1_record(tier: Tier, slot: u32, written: Option<u64>) -> Vec<u8> {
    let mut r = vec![1u8, if tier == Tier::Ssd { 0 } else { 1 }];
    r.extend_from_slice(&slot.to_le_bytes());
    match written {
        None => r.push(1),
        Some(bits) => {
            r.push(0);
            r.extend_from_slice(&bits.to_le_bytes());
        }
    }
    r
}

fn key(store: &dyn MetaStore, k: &str) -> Option<Vec<u8>> {
    store.get(k).expect("reading a store key")
}

/// Turn a freshly formatted bed into a volume of the previous release:
/// extents 0 (SSD slot 3, full), 1 (HDD slot 5, blocks 1..=3) and 4 (HDD
/// slot 0, full), their data on the devices (synced), the store holding
/// only what that release wrote. Returns the byte model.
fn previous_release(bed: &Bed) -> Vec<u8> {
    let store = bed.store.as_ref();
    let id = key(store, "volume-id").expect("volume id");
    let geo_raw = key(store, "geometry").expect("geometry");
    let geo: tierd::volume::Geometry = serde_json::from_slice(&geo_raw).expect("geometry json");
    let size = geo.capacity() as usize;
    let mut model = vec![0u8; size];
    let mut place = |tier: Tier, slot: u32, extent: u64, blocks: std::ops::Range<u64>, seed| {
        let dev: &dyn tierd::device::BlockDevice = match tier {
            Tier::Ssd => bed.ssd.as_ref(),
            Tier::Hdd => bed.hdd.as_ref(),
        };
        let data = pattern(seed, ((blocks.end - blocks.start) * BLK) as usize);
        dev.write_at(&data, geo.slot_offset(slot) + blocks.start * BLK)
            .expect("device write");
        dev.sync().expect("device sync");
        let at = (extent * EXTENT + blocks.start * BLK) as usize;
        model[at..at + data.len()].copy_from_slice(&data);
    };
    place(Tier::Ssd, 3, 0, 0..16, 1);
    place(Tier::Hdd, 5, 1, 1..4, 2);
    place(Tier::Hdd, 0, 4, 0..16, 3);
    store.clear().expect("clear");
    store.put("volume-id", &id).expect("put");
    store.put("geometry", &geo_raw).expect("put");
    store.put(FORMAT_VERSION_KEY, b"1").expect("put");
    store
        .put_extent(0, &v1_record(Tier::Ssd, 3, None))
        .expect("put");
    store
        .put_extent(1, &v1_record(Tier::Hdd, 5, Some(0b1110)))
        .expect("put");
    store
        .put_extent(4, &v1_record(Tier::Hdd, 0, None))
        .expect("put");
    store.flush().expect("flush");
    model
}

#[test]
fn a_store_of_the_previous_format_opens_intact_and_is_upgraded_in_place() {
    let bed = Bed::new(8, 16, 2);
    let mut model = previous_release(&bed);
    assert_eq!(key(bed.store.as_ref(), "clean-shutdown"), None);
    let vol = bed.open();
    assert_reads(&vol, &model, "the previous release's volume");
    assert_eq!(vol.mapping(1).expect("mapped").loc.slot, 5);
    assert_accounting(&vol, 24);
    assert_eq!(
        key(bed.store.as_ref(), FORMAT_VERSION_KEY),
        Some(b"2".to_vec())
    );
    assert_eq!(
        key(bed.store.as_ref(), "clean-shutdown"),
        Some(b"0".to_vec())
    );
    // The upgrade is durable before anything is served.
    drop(vol);
    bed.power_cut();
    assert_eq!(
        key(bed.store.as_ref(), FORMAT_VERSION_KEY),
        Some(b"2".to_vec()),
        "the upgrade was not flushed at open"
    );
    let vol = bed.open();
    assert_reads(&vol, &model, "after a power cut following the upgrade");
    // Untouched extents keep their version-1 records.
    for (e, rec) in bed.store.load_extents().expect("load") {
        assert_eq!(rec[0], 1, "extent {e} was rewritten: {rec:?}");
    }
    // New states get version-2 records: logged blocks, a shadow.
    let data = pattern(4, 100);
    vol.write(EXTENT + 9 * BLK + 1, &data, false)
        .expect("write");
    model[(EXTENT + 9 * BLK + 1) as usize..][..100].copy_from_slice(&data);
    assert_eq!(vol.usage().logged_blocks, 1);
    assert!(matches!(migrate(&vol, 4, Tier::Ssd), MoveOutcome::Moved(_)));
    assert!(vol.mapping(4).expect("mapped").shadow.is_some());
    let records: std::collections::HashMap<u64, Vec<u8>> = bed
        .store
        .load_extents()
        .expect("load")
        .into_iter()
        .collect();
    assert_eq!(records[&0][0], 1);
    assert_eq!(records[&1][0], 2);
    assert_eq!(records[&4][0], 2);
    vol.close().expect("close");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "upgraded, with new states, restarted");
    assert_eq!(vol.usage().shadows, 1);
    assert_accounting(&vol, 24);
}

#[test]
fn a_store_of_a_newer_format_is_refused_and_left_alone() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    vol.write(0, &pattern(1, 5000), false).expect("write");
    vol.close().expect("close");
    drop(vol);
    bed.store.put(FORMAT_VERSION_KEY, b"3").expect("put");
    bed.store.flush().expect("flush");
    let keys = ["format-version", "clean-shutdown", "volume-id", "geometry"];
    let before: Vec<_> = keys.iter().map(|k| key(bed.store.as_ref(), k)).collect();
    let extents = bed.store.load_extents().expect("load");
    let store: std::sync::Arc<dyn MetaStore> = bed.store.clone();
    let err = match Volume::open(bed.devices(), store) {
        Ok(_) => panic!("a store of format version 3 was opened"),
        Err(e) => e,
    };
    assert!(
        matches!(&err, VolumeError::UnknownStoreVersion { found } if found == "3"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("format version 3") && msg.contains("versions 1 to 2"),
        "the refusal should name the version found and those this build reads: {msg}"
    );
    let after: Vec<_> = keys.iter().map(|k| key(bed.store.as_ref(), k)).collect();
    assert_eq!(after, before, "the refused store changed");
    assert_eq!(bed.store.load_extents().expect("load"), extents);
}

/// A sled store of the daemon, opened while the daemon is stopped.
fn with_store<T>(d: &common::Daemon, f: impl FnOnce(&SledStore) -> T) -> T {
    let store = SledStore::open(&d.data_dir().join("meta")).expect("opening the metadata store");
    let r = f(&store);
    store.flush().expect("flushing the metadata store");
    r
}

#[test]
fn tierd_serve_upgrades_a_previous_store_and_refuses_a_newer_one() {
    let mut d = common::Daemon::start_with(common::DaemonOptions::small());
    let data = common::random_bytes(3 * 4096 + 7, 11);
    let at = 5 * common::MIB + 100;
    {
        let mut c = raw_client::Nbd::connect(&d.addr()).expect("connect");
        c.write(at, &data, false).expect("write");
        c.flush().expect("flush");
        c.disc().ok();
    }
    d.terminate();
    // Back to what the previous release left: version 1, no clean-shutdown
    // key, version-1 records only.
    with_store(&d, |s| {
        for (e, rec) in s.load_extents().expect("load") {
            assert_eq!(rec[0], 1, "extent {e} has a version-2 record: {rec:?}");
        }
        s.put(FORMAT_VERSION_KEY, b"1").expect("put");
    });
    {
        let db = sled::open(d.data_dir().join("meta")).expect("opening sled");
        db.remove("clean-shutdown").expect("remove");
        db.flush().expect("flush");
    }
    with_store(&d, |s| {
        assert_eq!(key(s, "clean-shutdown"), None);
    });
    d.restart();
    {
        let mut c = raw_client::Nbd::connect(&d.addr()).expect("connect");
        let got = c.read(at, data.len() as u32).expect("read");
        assert!(got == data, "data changed across the upgrade");
        c.disc().ok();
    }
    d.terminate();
    with_store(&d, |s| {
        assert_eq!(key(s, FORMAT_VERSION_KEY), Some(b"2".to_vec()));
        assert_eq!(key(s, "clean-shutdown"), Some(b"1".to_vec()));
        s.put(FORMAT_VERSION_KEY, b"3").expect("put");
    });
    let mut cmd = Command::new(common::tierd_bin());
    cmd.arg("serve")
        .arg("--data-dir")
        .arg(d.data_dir())
        .args(["--listen", "127.0.0.1:0"])
        .args(["--ssd-size", "64MiB", "--hdd-size", "256MiB"])
        .args(["--extent-size", "1MiB"])
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("TIERD_CONFIG");
    let what = common::describe(&cmd);
    let out = common::run_timeout(&mut cmd, common::START_TIMEOUT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", common::show(&what, &out));
    assert!(
        stderr.contains("format version 3") && stderr.contains("versions 1 to 2"),
        "{}",
        common::show(&what, &out)
    );
    with_store(&d, |s| {
        assert_eq!(key(s, FORMAT_VERSION_KEY), Some(b"3".to_vec()));
    });
}
