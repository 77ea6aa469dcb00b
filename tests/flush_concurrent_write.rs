//! A flush racing a write to a new extent. The flush syncs the devices and
//! then flushes the metadata store; a write that lands while the sync runs
//! must not have its new mapping made durable ahead of its data. Staged on
//! memory devices that keep only what was synced: the SSD's sync takes
//! its snapshot and then blocks until the write is done, the write reuses
//! a slot that holds older data, and after a power cut the written range
//! reads as the new data or as zeros (never written), never as the older
//! data of another extent.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use tierd::device::{BlockDevice, MemDevice};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Volume};

const EXTENT: u64 = 64 * 1024;

/// A memory device whose next sync, once armed, takes its snapshot and
/// then waits at two barriers (entered, release) before returning.
struct SlowSync {
    inner: Arc<MemDevice>,
    armed: AtomicBool,
    entered: Barrier,
    release: Barrier,
}

impl BlockDevice for SlowSync {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()?;
        if self.armed.swap(false, Ordering::AcqRel) {
            self.entered.wait();
            self.release.wait();
        }
        Ok(())
    }
    fn name(&self) -> String {
        "slow-sync ssd".into()
    }
}

#[test]
fn a_write_during_the_sync_never_has_its_mapping_persisted_without_its_data() {
    let ssd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + 16 * EXTENT));
    let hdd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + 64 * EXTENT));
    let store = Arc::new(MemStore::new());
    let ssd = Arc::new(SlowSync {
        inner: ssd_mem.clone(),
        armed: AtomicBool::new(false),
        entered: Barrier::new(2),
        release: Barrier::new(2),
    });
    let devices = Devices {
        ssd: ssd.clone(),
        hdd: hdd_mem.clone(),
    };
    let opts = FormatOptions {
        extent_size: EXTENT,
        reserve: Some(4 * EXTENT),
        force: false,
    };
    Volume::format(&devices, store.as_ref(), &opts).expect("format");
    let dyn_store: Arc<dyn MetaStore> = store.clone();
    let vol = Arc::new(Volume::open(devices, dyn_store).expect("open"));
    let old = vec![0xAAu8; EXTENT as usize];
    let new = vec![0xBBu8; EXTENT as usize];
    // Extent 0 takes SSD slot 0, extent 5 slot 1; then extent 0 is
    // trimmed, and once that is durable its slot (holding 0xAA) is free.
    vol.write(0, &old, false).expect("write old");
    vol.write(5 * EXTENT, &[0xCC; 4096], false)
        .expect("write 5");
    vol.flush().expect("flush");
    vol.discard(0, EXTENT, false, false, false).expect("trim");
    vol.flush().expect("flush the trim");
    vol.flush().expect("flush again");
    // An in-place write dirties the SSD, so the next flush syncs it.
    vol.write(5 * EXTENT, &[0xCD; 4096], false)
        .expect("in place");
    ssd.armed.store(true, Ordering::Release);
    let flusher = {
        let vol = vol.clone();
        std::thread::spawn(move || vol.flush())
    };
    ssd.entered.wait();
    // The sync has taken its snapshot: this write's data is not in it.
    vol.write(EXTENT, &new, false).expect("write new");
    ssd.release.wait();
    flusher.join().expect("flusher").expect("flush");
    drop(vol);

    ssd_mem.power_cut();
    hdd_mem.power_cut();
    store.power_cut();
    let devices = Devices {
        ssd: ssd_mem.clone(),
        hdd: hdd_mem.clone(),
    };
    let dyn_store: Arc<dyn MetaStore> = store.clone();
    let vol = Volume::open(devices, dyn_store).expect("reopen");
    let mut got = vec![0u8; EXTENT as usize];
    vol.read(EXTENT, &mut got).expect("read");
    assert!(
        got == new || got.iter().all(|&b| b == 0),
        "extent 1 reads neither its data nor zeros after the power cut: first byte {:#x}",
        got[0]
    );
}
