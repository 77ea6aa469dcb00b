//! A short READ goes down to the device once. The NBD server tries it
//! without waiting, holding its socket, and where part of it would wait
//! it hands the socket on and waits from there: no part of the read is
//! read twice, and the server is told exactly once, before the first wait.
//! Checked on a volume over devices that answer a read without waiting
//! only while they are told the data is at hand (a page cache), directly
//! (`Volume::read_or_wait`, a block logged in part among them) and through
//! the NBD server.

mod nbd_support;

use std::sync::atomic::{AtomicU64, Ordering};

use nbd_support::*;
use tierd::device::{BlockDevice, MemDevice};
use tierd::serving::VolumeExport;
use tierd::store::{MemStore, MetaStore};
use tierd::units::{IoHint, Reason};
use tierd::volume::{
    Devices, FormatOptions, MoveOutcome, Tier, Volume, VolumeOptions, MIN_EXTENT_SIZE,
};

const EXTENT: u64 = MIN_EXTENT_SIZE;

/// A memory device whose reads without waiting answer only while it has
/// some "at hand" left (each such read takes one); it counts both kinds
/// of read and the bytes each read.
struct Cache {
    mem: MemDevice,
    at_hand: AtomicU64,
    nowait: AtomicU64,
    waited: AtomicU64,
    bytes: AtomicU64,
}

impl Cache {
    fn new(size: u64) -> Cache {
        Cache {
            mem: MemDevice::new(size),
            at_hand: AtomicU64::new(u64::MAX),
            nowait: AtomicU64::new(0),
            waited: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// The next `n` reads without waiting answer; later ones would wait.
    /// The counts start again.
    fn at_hand(&self, n: u64) {
        self.at_hand.store(n, Ordering::SeqCst);
        for c in [&self.nowait, &self.waited, &self.bytes] {
            c.store(0, Ordering::SeqCst);
        }
    }

    /// (reads that answered without waiting, reads that waited, bytes).
    fn counts(&self) -> (u64, u64, u64) {
        (
            self.nowait.load(Ordering::SeqCst),
            self.waited.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
        )
    }
}

impl BlockDevice for Cache {
    fn size(&self) -> u64 {
        self.mem.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.waited.fetch_add(1, Ordering::SeqCst);
        self.bytes.fetch_add(buf.len() as u64, Ordering::SeqCst);
        self.mem.read_at(buf, offset)
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Option<std::io::Result<()>> {
        let took = self
            .at_hand
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        took.ok()?;
        self.nowait.fetch_add(1, Ordering::SeqCst);
        self.bytes.fetch_add(buf.len() as u64, Ordering::SeqCst);
        Some(self.mem.read_at(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.mem.write_at(buf, offset)
    }

    fn sync(&self) -> std::io::Result<()> {
        self.mem.sync()
    }

    fn name(&self) -> String {
        "cache".into()
    }
}

/// A volume over two counting devices, with its first two extents
/// written (distinct bytes, on the SSD), the SSD, and the data.
fn rig() -> (Arc<Volume>, Arc<Cache>, Vec<u8>) {
    let (vol, ssd, _, data) = rig_both();
    (vol, ssd, data)
}

/// [`rig`], with the HDD as well.
fn rig_both() -> (Arc<Volume>, Arc<Cache>, Arc<Cache>, Vec<u8>) {
    let ssd = Arc::new(Cache::new(16 << 20));
    let hdd = Arc::new(Cache::new(64 << 20));
    let devices = Devices {
        ssd: ssd.clone(),
        hdd: hdd.clone(),
    };
    let store: Arc<dyn MetaStore> = Arc::new(MemStore::new());
    let opts = FormatOptions {
        extent_size: EXTENT,
        reserve: Some(2 * EXTENT),
        force: false,
    };
    Volume::format(&devices, store.as_ref(), &opts).expect("format");
    let vol = Volume::open_with(devices, store, VolumeOptions::default()).expect("open");
    let data: Vec<u8> = (0..2 * EXTENT).map(|i| (i % 251) as u8 + 1).collect();
    vol.write(0, &data, false).expect("write");
    // New data lands on the SSD: reading it back touches only the SSD.
    hdd.at_hand(u64::MAX);
    let mut back = vec![0u8; data.len()];
    vol.read(0, &mut back).expect("read back");
    assert_eq!(back, data);
    assert_eq!(hdd.counts(), (0, 0, 0), "the data is on the SSD");
    (Arc::new(vol), ssd, hdd, data)
}

/// 8 KiB across the boundary of extents 0 and 1: one piece in each.
const AT: u64 = EXTENT - 4096;
const LEN: usize = 8192;

#[test]
fn a_read_is_told_once_before_it_waits_and_reads_nothing_twice() {
    let (vol, ssd, data) = rig();
    let want = &data[AT as usize..AT as usize + LEN];
    let read = |told: &mut u32| {
        let mut buf = vec![0u8; LEN];
        let mut hook = || *told += 1;
        vol.read_or_wait(AT, &mut buf, IoHint::default(), &mut hook)
            .expect("read");
        buf
    };
    // Everything at hand: answered without waiting, nothing told.
    ssd.at_hand(u64::MAX);
    let mut told = 0;
    assert_eq!(read(&mut told), want);
    assert_eq!(told, 0, "nothing waited");
    assert_eq!(ssd.counts(), (2, 0, LEN as u64));
    // The first piece at hand, the second not: told once, and the first
    // piece is not read again (going down twice read it twice: 3 reads,
    // 12 KiB).
    ssd.at_hand(1);
    let mut told = 0;
    assert_eq!(read(&mut told), want);
    assert_eq!(told, 1, "told before the wait");
    assert_eq!(ssd.counts(), (1, 1, LEN as u64));
    // Nothing at hand: told once, before the first piece.
    ssd.at_hand(0);
    let mut told = 0;
    assert_eq!(read(&mut told), want);
    assert_eq!(told, 1);
    assert_eq!(ssd.counts(), (0, 2, LEN as u64));
    // Unmapped space touches no device and never waits.
    ssd.at_hand(0);
    let mut told = 0;
    let mut buf = vec![1u8; LEN];
    let mut hook = || told += 1;
    vol.read_or_wait(4 * EXTENT, &mut buf, IoHint::default(), &mut hook)
        .expect("read");
    assert_eq!(buf, vec![0u8; LEN]);
    assert_eq!((told, ssd.counts()), (0, (0, 0, 0)));
}

/// A block logged in part (sector-aligned bytes written over data on the
/// HDD) reads as its HDD block with the log's sectors laid over it, going
/// down once: the HDD block and the logged sectors each read once, the
/// hook told once, whichever of the two would wait.
#[test]
fn a_block_logged_in_part_reads_right_and_once() {
    let (vol, ssd, hdd, mut data) = rig_both();
    let moved = tierd::migrate::migrate_extent(&vol, 0, Tier::Hdd, Reason::Manual, &mut |_| {})
        .expect("demote extent 0");
    assert!(matches!(moved, MoveOutcome::Moved(_)), "{moved:?}");
    // 3 KiB from sector 1 of block 3: logged by its sectors, the HDD's
    // block left as it is.
    let (at, part) = (3 * 4096 + 512, vec![0xa5u8; 3072]);
    vol.write(at, &part, false).expect("write part of a block");
    data[at as usize..at as usize + part.len()].copy_from_slice(&part);
    let m = vol.mapping(0).expect("mapped");
    assert_eq!(m.loc.tier, Tier::Hdd);
    assert_eq!(
        m.logged
            .iter()
            .map(|l| (l.block, l.sectors))
            .collect::<Vec<_>>(),
        vec![(3, 0b0111_1110)],
        "logged in part"
    );
    // Blocks 2..6: one HDD run, the sectors of block 3 over it.
    let (from, len) = (2 * 4096u64, 4 * 4096usize);
    let want = &data[from as usize..from as usize + len];
    // (HDD at hand, SSD at hand) -> (told, HDD counts, SSD counts).
    let cases = [
        ((u64::MAX, u64::MAX), (0, (1, 0), (1, 0))),
        ((0, u64::MAX), (1, (0, 1), (0, 1))),
        ((u64::MAX, 0), (1, (1, 0), (0, 1))),
        ((0, 0), (1, (0, 1), (0, 1))),
    ];
    for ((h, s), (want_told, want_hdd, want_ssd)) in cases {
        hdd.at_hand(h);
        ssd.at_hand(s);
        let mut told = 0;
        let mut buf = vec![0u8; len];
        let mut hook = || told += 1;
        vol.read_or_wait(from, &mut buf, IoHint::default(), &mut hook)
            .expect("read");
        assert!(buf == want, "the bytes read ({h}, {s} at hand)");
        let (hn, hw, hb) = hdd.counts();
        let (sn, sw, sb) = ssd.counts();
        assert_eq!(
            (told, (hn, hw), (sn, sw), hb, sb),
            (want_told, want_hdd, want_ssd, len as u64, part.len() as u64),
            "({h}, {s} at hand)"
        );
    }
}

#[test]
fn a_read_that_cannot_wait_still_answers_none_and_reads_once_when_it_may() {
    let (vol, ssd, data) = rig();
    let want = &data[AT as usize..AT as usize + LEN];
    let mut buf = vec![0u8; LEN];
    ssd.at_hand(1);
    assert!(
        vol.read_nowait(AT, &mut buf, IoHint::default()).is_none(),
        "the second piece would wait"
    );
    ssd.at_hand(0);
    vol.read_hinted(AT, &mut buf, IoHint::default())
        .expect("read");
    assert_eq!(buf, want);
    assert_eq!(
        ssd.counts(),
        (0, 2, LEN as u64),
        "a read that may wait waits"
    );
}

/// Through the server: a short READ whose second half is not at hand
/// reads each byte once and answers the right data, on the connection's
/// own threads and on the runtime's.
#[tokio::test]
async fn over_nbd_a_short_read_goes_down_once() {
    for threads in [ServerOptions::default().threads, 0] {
        let (vol, ssd, data) = rig();
        let export = Arc::new(VolumeExport::new(vol));
        let srv = start_with(export, ServerOptions { threads, ..opts() }).await;
        let mut c = Client::ready(srv.addr, true).await;
        for (at_hand, want_counts) in [(u64::MAX, (2, 0)), (1, (1, 1)), (0, (0, 2))] {
            ssd.at_hand(at_hand);
            let got = c.read(7, AT, LEN as u32).await;
            assert_eq!(got, &data[AT as usize..AT as usize + LEN]);
            let (nowait, waited, bytes) = ssd.counts();
            assert_eq!(
                ((nowait, waited), bytes),
                (want_counts, LEN as u64),
                "threads = {threads}, {at_hand} at hand"
            );
        }
        srv.shutdown().await;
    }
}
