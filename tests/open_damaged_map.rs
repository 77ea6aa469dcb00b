//! Opening a volume walks its extent records one at a time (the metadata
//! store streams them): every form a mapping takes comes back as written,
//! and a damaged record (one that does not decode, an extent beyond the
//! volume, a slot claimed twice) refuses the open with a message naming
//! it and changes nothing, so the volume opens as before once the record
//! is mended.

mod support;

use std::sync::Arc;

use support::{Bed, EXTENT};
use tierd::store::MetaStore;
use tierd::volume::{Devices, Volume};

const KIB: u64 = 1024;

/// What the test wrote: (offset, bytes).
fn writes() -> Vec<(u64, Vec<u8>)> {
    vec![
        // A whole extent (a plain mapping).
        (0, vec![0x11; EXTENT as usize]),
        // One block in an extent (one run of written blocks).
        (3 * EXTENT + 8 * KIB, vec![0x22; 4096]),
        // Two runs in one extent (a bitmap).
        (5 * EXTENT, vec![0x33; 4096]),
        (5 * EXTENT + 32 * KIB, vec![0x44; 8192]),
        // The extent's tail from one point on.
        (7 * EXTENT + 40 * KIB, vec![0x55; 24 * KIB as usize]),
    ]
}

fn check(vol: &Volume, what: &str) {
    for (offset, data) in writes() {
        let mut got = vec![0u8; data.len()];
        vol.read(offset, &mut got).expect("read");
        assert!(got == data, "{what}: bytes at {offset} differ");
    }
    let mut gap = vec![0xffu8; 4096];
    vol.read(3 * EXTENT, &mut gap).expect("read");
    assert!(
        gap.iter().all(|&b| b == 0),
        "{what}: an unwritten block reads zeros"
    );
}

fn refused(devices: &Devices, store: &Arc<dyn MetaStore>, what: &str, needle: &str) {
    match Volume::open(devices.clone(), store.clone()) {
        Ok(_) => panic!("{what}: the open was not refused"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(needle),
                "{what}: {msg:?} does not say {needle:?}"
            );
        }
    }
}

#[test]
fn records_stream_back_and_a_damaged_one_refuses_the_open() {
    // 8 SSD slots, 24 HDD slots, 2 held back.
    let bed = Bed::new(8, 24, 2);
    let (devices, store): (Devices, Arc<dyn MetaStore>) = (bed.devices(), bed.store.clone());
    {
        let vol = bed.open();
        for (offset, data) in writes() {
            vol.write(offset, &data, false).expect("write");
        }
        check(&vol, "before the restart");
        vol.close().expect("close");
    }
    let records = store.load_extents().expect("load");
    assert!(records.len() >= 4, "every written extent has a record");
    let vol = bed.open();
    check(&vol, "after the restart");
    vol.close().expect("close");
    drop(vol);

    let (first, record) = records.first().cloned().expect("a record");
    let unused = (0..30).find(|e| records.iter().all(|(i, _)| i != e));
    let unused = unused.expect("an extent without a record");

    // Bytes that do not decode.
    store.put_extent(unused, &[0xee; 3]).expect("put");
    refused(&devices, &store, "garbage", &format!("extent {unused}"));
    store.remove_extent(unused).expect("remove");

    // An extent far beyond the volume.
    store.put_extent(1_000_000, &record).expect("put");
    refused(
        &devices,
        &store,
        "beyond",
        "extent 1000000 is beyond the volume",
    );
    store.remove_extent(1_000_000).expect("remove");

    // A second extent claiming the first one's slot.
    store.put_extent(unused, &record).expect("put");
    refused(&devices, &store, "twice", "owned twice");
    store.remove_extent(unused).expect("remove");

    assert_eq!(
        store.load_extents().expect("load"),
        records,
        "nothing changed"
    );
    let vol = bed.open();
    check(&vol, &format!("after the refusals (extent {first} kept)"));
}
