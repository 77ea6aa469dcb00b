//! New data that spills to the HDD keeps the volume's order on the disk:
//! each extent goes to the slot its nearest HDD neighbour's distance points
//! at, so streams written at the same time in different parts of the
//! volume each get a run of slots of their own (rather than taking turns at
//! the lowest free slot, which costs a drive one positioning per extent).

use std::sync::Arc;

use tierd::device::{BlockDevice, MemDevice};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Tier, Volume};

const KIB: u64 = 1024;
const EXTENT: u64 = 64 * KIB;

/// A volume of 4 SSD and 64 HDD slots (one reserved), its SSD filled by
/// extents 0..4.
fn volume_with_a_full_ssd() -> Volume {
    let devices = Devices {
        ssd: Arc::new(MemDevice::new(1024 * KIB + 4 * EXTENT)) as Arc<dyn BlockDevice>,
        hdd: Arc::new(MemDevice::new(1024 * KIB + 64 * EXTENT)) as Arc<dyn BlockDevice>,
    };
    let store: Arc<dyn MetaStore> = Arc::new(MemStore::new());
    let opts = FormatOptions {
        extent_size: EXTENT,
        reserve: Some(EXTENT),
        force: false,
    };
    Volume::format(&devices, store.as_ref(), &opts).expect("format");
    let vol = Volume::open(devices, store).expect("open");
    for e in 0..4 {
        vol.write(e * EXTENT, b"ssd", false).expect("write");
        assert_eq!(vol.mapping(e).map(|m| m.loc.tier), Some(Tier::Ssd));
    }
    vol
}

fn hdd_slot(vol: &Volume, extent: u64) -> u32 {
    let m = vol.mapping(extent).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Hdd, "extent {extent}");
    m.loc.slot
}

#[test]
fn two_streams_spilled_at_once_each_stay_in_order_on_the_hdd() {
    let vol = volume_with_a_full_ssd();
    // Two sequential streams of new data, taking turns request by request.
    for i in 0..10 {
        vol.write((10 + i) * EXTENT, &[1; 4096], false).expect("a");
        vol.write((40 + i) * EXTENT, &[2; 4096], false).expect("b");
    }
    for (start, name) in [(10, "a"), (40, "b")] {
        let slots: Vec<u32> = (start..start + 10).map(|e| hdd_slot(&vol, e)).collect();
        assert!(
            slots.windows(2).all(|w| w[1] == w[0] + 1),
            "stream {name} is not contiguous on the HDD: {slots:?}"
        );
    }
    // Stream a started with no HDD neighbour (the lowest slot); b as far
    // past a's first extent as it is in the volume.
    assert_eq!(hdd_slot(&vol, 10), 0);
    assert_eq!(hdd_slot(&vol, 40), 30);
}

#[test]
fn a_taken_goal_gives_the_next_free_slot_after_it() {
    let vol = volume_with_a_full_ssd();
    vol.write(10 * EXTENT, b"x", false).expect("write");
    vol.write(11 * EXTENT, b"x", false).expect("write");
    assert_eq!((hdd_slot(&vol, 10), hdd_slot(&vol, 11)), (0, 1));
    // Extent 5 has no HDD neighbour before it: the lowest free slot.
    vol.write(5 * EXTENT, b"x", false).expect("write");
    assert_eq!(hdd_slot(&vol, 5), 2);
    // Extent 12 belongs at slot 2, taken: the next free one.
    vol.write(12 * EXTENT, b"x", false).expect("write");
    assert_eq!(hdd_slot(&vol, 12), 3);
    // Far ahead in the volume, far ahead on the disk.
    vol.write(60 * EXTENT, b"x", false).expect("write");
    assert_eq!(hdd_slot(&vol, 60), 3 + 48);
}
