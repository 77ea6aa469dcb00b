//! Concurrent writes through the volume: sector-sized writes from many
//! threads into the same fresh 4 KiB blocks and extents must all survive (the
//! zero padding of first writes must never clobber a neighbour).

use std::sync::Arc;
use std::thread;

use tierd::device::{BlockDevice, MemDevice};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Volume};

#[test]
fn parallel_sector_writes_to_fresh_blocks_all_survive() {
    let extent = 64 * 1024u64;
    let devices = Devices {
        ssd: Arc::new(MemDevice::new((1 << 20) + 4 * extent)) as Arc<dyn BlockDevice>,
        hdd: Arc::new(MemDevice::new((1 << 20) + 8 * extent)) as Arc<dyn BlockDevice>,
    };
    let store: Arc<dyn MetaStore> = Arc::new(MemStore::new());
    let opts = FormatOptions {
        extent_size: extent,
        reserve: Some(0),
        force: false,
    };
    Volume::format(&devices, store.as_ref(), &opts).expect("format");
    for round in 0..20u8 {
        let vol = Arc::new(Volume::open(devices.clone(), store.clone()).expect("open"));
        // 8 threads, each owning every 8th 512-byte sector of the first
        // 64 KiB of a fresh region.
        let base = u64::from(round % 4) * 2 * extent;
        vol.discard(base, 2 * extent, false, false, false)
            .expect("trim");
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let vol = vol.clone();
                thread::spawn(move || {
                    for s in (t..256).step_by(8) {
                        let data = [(s as u8) ^ round; 512];
                        vol.write(base + s * 512, &data, false).expect("write");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer thread");
        }
        let mut back = vec![0u8; 256 * 512];
        vol.read(base, &mut back).expect("read");
        for s in 0..256usize {
            assert!(
                back[s * 512..(s + 1) * 512]
                    .iter()
                    .all(|b| *b == (s as u8) ^ round),
                "round {round}: sector {s} lost its write"
            );
        }
        vol.flush().expect("flush");
    }
}
