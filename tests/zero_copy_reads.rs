//! Zero-copy READs (`nbd-zero-copy`): a long read of data at rest in an
//! image file leaves the server as spliced page-cache pages, never copied.
//! Checked here on a volume over real image files:
//! - the pages a read handed out keep the extent's data even when the
//!   extent moves away and its slot is given to new data before the reader
//!   takes them (the slot is forgotten first);
//! - reads that are not one contiguous range at rest (unmapped, partly
//!   written, in the write log, across extents) take the copying path and
//!   still read right;
//! - over NBD, simple and structured replies, pipelined, carry the right
//!   bytes, and so does a copy of the whole export by nbdcopy (libnbd);
//!   with the switch off nothing is spliced.

mod nbd_support;

use std::os::fd::{AsFd, OwnedFd};
use std::process::Command;

use nbd_support::*;
use tierd::device::{BlockDevice, FileDevice};
use tierd::migrate::migrate_extent;
use tierd::serving::VolumeExport;
use tierd::store::{MemStore, MetaStore};
use tierd::units::{IoHint, Reason};
use tierd::volume::{Devices, FormatOptions, Loc, MoveOutcome, Stats, Tier, Volume, VolumeOptions};

const EXTENT: u64 = 256 * 1024;
const BLK: u64 = 4096;

/// A volume on two sparse image files in a temporary directory.
struct Rig {
    _dir: tempfile::TempDir,
    vol: Arc<Volume>,
}

fn rig(ssd_slots: u64, hdd_slots: u64, reserve_slots: u64) -> Rig {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let open = |name: &str, slots: u64| -> Arc<dyn BlockDevice> {
        let path = dir.path().join(name);
        FileDevice::create_image(&path, (1 << 20) + slots * EXTENT).expect("image");
        let dev = FileDevice::open(&path, false).expect("open");
        assert!(dev.splices(), "{name}: the target dir's filesystem splices");
        Arc::new(dev)
    };
    let devices = Devices {
        ssd: open("ssd.img", ssd_slots),
        hdd: open("hdd.img", hdd_slots),
    };
    let store: Arc<dyn MetaStore> = Arc::new(MemStore::new());
    let opts = FormatOptions {
        extent_size: EXTENT,
        reserve: Some(reserve_slots * EXTENT),
        force: false,
    };
    Volume::format(&devices, store.as_ref(), &opts).expect("format");
    let vol = Volume::open_with(devices, store, VolumeOptions::default()).expect("open");
    Rig {
        _dir: dir,
        vol: Arc::new(vol),
    }
}

/// Bytes distinct per seed and offset.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed * 131 + i as u64 / 3) % 251) as u8 + 1)
        .collect()
}

fn drain(r: &OwnedFd, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut got = 0;
    while got < len {
        let n = rustix::io::read(r, &mut out[got..]).expect("reading the pipe");
        assert!(n > 0, "the pipe ended after {got} of {len} bytes");
        got += n;
    }
    out
}

fn spliced(vol: &Volume) -> u64 {
    Stats::get(&vol.stats().spliced_reads)
}

fn read(vol: &Volume, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    vol.read(offset, &mut buf).expect("read");
    buf
}

/// Move `extent` to the HDD.
fn demote(vol: &Volume, extent: u64) {
    let out = migrate_extent(vol, extent, Tier::Hdd, Reason::Manual, &mut |_| {}).expect("move");
    assert!(matches!(out, MoveOutcome::Moved(_)), "{out:?}");
}

/// Extent 0 written in full (on the SSD) and spliced into a pipe that
/// nobody reads yet: its slot, the pipe (read end, write end) and the data.
fn splice_extent_0(vol: &Volume) -> (Loc, (OwnedFd, OwnedFd), Vec<u8>) {
    let old = bytes(1, EXTENT as usize);
    vol.write(0, &old, false).expect("write");
    vol.flush().expect("flush");
    let home = vol.mapping(0).expect("mapped").loc;
    assert_eq!(home.tier, Tier::Ssd);
    let (pr, pw) = rustix::pipe::pipe().expect("pipe");
    rustix::pipe::fcntl_setpipe_size(&pw, EXTENT as usize).expect("pipe size");
    vol.read_to_pipe(0, EXTENT, IoHint::default(), pw.as_fd())
        .expect("a full extent at rest splices")
        .expect("spliced");
    (home, (pr, pw), old)
}

#[test]
fn pages_in_flight_keep_their_data_when_the_slot_goes_to_new_data() {
    let r = rig(4, 8, 1);
    let vol = &r.vol;
    // A reader takes the pages and does not read them yet.
    let (home, (pr, _pw), old) = splice_extent_0(vol);
    assert_eq!(spliced(vol), 1);

    // The extent moves to the HDD; once that is durable its slot is free,
    // and new data takes it.
    demote(vol, 0);
    vol.flush().expect("flush");
    let mut reused = None;
    for e in 1..4 {
        vol.write(e * EXTENT, &bytes(10 + e, EXTENT as usize), false)
            .expect("write");
        if vol.mapping(e).expect("mapped").loc == home {
            reused = Some(e);
            break;
        }
    }
    let e = reused.expect("new data took the moved extent's slot");

    assert!(
        drain(&pr, EXTENT as usize) == old,
        "the reader saw other data than the extent's (the slot was reused under it)"
    );
    assert!(
        read(vol, 0, EXTENT as usize) == old,
        "extent 0 from the HDD"
    );
    assert!(
        read(vol, e * EXTENT, EXTENT as usize) == bytes(10 + e, EXTENT as usize),
        "extent {e} in the reused slot"
    );
}

#[test]
fn pages_in_flight_keep_their_data_when_the_slot_becomes_a_log_segment() {
    let r = rig(4, 8, 2);
    let vol = &r.vol;
    // Extent 1 lives on the HDD: writes to it go to the SSD write log.
    vol.write(EXTENT, &bytes(3, EXTENT as usize), false)
        .expect("write");
    vol.flush().expect("flush");
    demote(vol, 1);
    let (home, (pr, _pw), old) = splice_extent_0(vol);
    demote(vol, 0);
    vol.flush().expect("flush");
    // Every block of extent 1 again: the log takes the freed slot as a
    // segment and fills it.
    let new = bytes(4, EXTENT as usize);
    vol.write(EXTENT, &new, false).expect("write");
    let m = vol.mapping(1).expect("mapped");
    assert!(
        m.logged.iter().any(|l| l.at.slot == home.slot),
        "the log did not take the freed slot {}: {m:?}",
        home.slot
    );
    assert!(
        drain(&pr, EXTENT as usize) == old,
        "the reader saw other data than the extent's (the log reused the slot under it)"
    );
    assert!(
        read(vol, EXTENT, EXTENT as usize) == new,
        "extent 1 through the log"
    );
}

#[test]
fn reads_that_are_not_one_range_at_rest_are_copied_and_read_right() {
    let r = rig(4, 8, 1);
    let vol = &r.vol;
    let full = bytes(2, EXTENT as usize);
    vol.write(0, &full, false).expect("write");
    // Extent 1: one block written.
    vol.write(EXTENT + 3 * BLK, &bytes(3, BLK as usize), false)
        .expect("write");
    // Extent 2: on the HDD, one block newer in the write log.
    vol.write(2 * EXTENT, &bytes(4, EXTENT as usize), false)
        .expect("write");
    vol.flush().expect("flush");
    demote(vol, 2);
    vol.write(2 * EXTENT + BLK, &bytes(5, BLK as usize), false)
        .expect("write");
    let m = vol.mapping(2).expect("mapped");
    assert!(
        m.loc.tier == Tier::Hdd && !m.logged.is_empty(),
        "extent 2 should be on the HDD with a logged block: {m:?}"
    );

    let (pr, pw) = rustix::pipe::pipe().expect("pipe");
    rustix::pipe::fcntl_setpipe_size(&pw, 1 << 20).expect("pipe size");
    let cases = [
        ("partly written", EXTENT, EXTENT),
        ("in the write log", 2 * EXTENT, EXTENT),
        ("unmapped", 3 * EXTENT, EXTENT),
        ("across two extents", EXTENT - 8 * BLK, 16 * BLK),
        ("past the end", vol.size() - BLK, 2 * BLK),
    ];
    for (what, offset, len) in cases {
        assert!(
            vol.read_to_pipe(offset, len, IoHint::default(), pw.as_fd())
                .is_none(),
            "{what}: should take the copying path"
        );
    }
    assert_eq!(spliced(vol), 0, "nothing was spliced");
    let mut want = bytes(4, EXTENT as usize);
    want[BLK as usize..2 * BLK as usize].copy_from_slice(&bytes(5, BLK as usize));
    assert!(read(vol, 2 * EXTENT, EXTENT as usize) == want, "extent 2");

    // Part of a full extent splices, and is the right part.
    vol.read_to_pipe(5 * BLK, 20 * BLK, IoHint::default(), pw.as_fd())
        .expect("splices")
        .expect("spliced");
    assert!(drain(&pr, 20 * BLK as usize) == full[5 * BLK as usize..25 * BLK as usize]);
    assert_eq!(spliced(vol), 1);
    assert_eq!(
        Stats::get(&vol.stats().spliced_read_bytes),
        20 * BLK,
        "bytes spliced"
    );
}

/// The volume's contents: every extent but the last written, extent 1 only
/// in part (so reads mix spliced and copied replies).
fn fill(vol: &Volume) -> Vec<u8> {
    let mut model = vec![0u8; vol.size() as usize];
    let extents = vol.size() / EXTENT;
    for e in 0..extents - 1 {
        let (at, len) = if e == 1 {
            (e * EXTENT + 4 * BLK, 8 * BLK)
        } else {
            (e * EXTENT, EXTENT)
        };
        let data = bytes(20 + e, len as usize);
        vol.write(at, &data, false).expect("write");
        model[at as usize..(at + len) as usize].copy_from_slice(&data);
    }
    vol.flush().expect("flush");
    model
}

async fn serve(vol: &Arc<Volume>, zero_copy: bool) -> Running {
    let export: Arc<dyn Export> = Arc::new(VolumeExport::new(Arc::clone(vol)));
    start_with(
        export,
        ServerOptions {
            zero_copy,
            ..opts()
        },
    )
    .await
}

/// READs of 20 KiB, 64 KiB and a whole extent at several places, eight in
/// flight at a time, checked against the model.
async fn pipelined_reads(addr: SocketAddr, structured: bool, model: &[u8]) {
    let mut c = Client::ready(addr, structured).await;
    let sizes = [20 * 1024u64, 64 * 1024, EXTENT];
    let mut reqs = Vec::new();
    for (i, len) in sizes.iter().cycle().take(24).enumerate() {
        let extent = (i as u64 * 5) % (model.len() as u64 / EXTENT);
        let offset = (extent * EXTENT + (i as u64 % 3) * BLK).min(model.len() as u64 - len);
        reqs.push((i as u64 + 1, offset, *len));
    }
    for batch in reqs.chunks(8) {
        for &(cookie, offset, len) in batch {
            c.request(0, CMD_READ, cookie, offset, len as u32).await;
        }
        for &(cookie, offset, len) in batch.iter().rev() {
            let (errno, data) = c.result(cookie).await;
            assert_eq!(errno, 0, "read {offset}+{len}");
            assert!(
                data == model[offset as usize..(offset + len) as usize],
                "read {offset}+{len} (structured: {structured}) carried other bytes"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbd_reads_are_spliced_and_carry_the_right_bytes() {
    let r = rig(16, 16, 2);
    let model = fill(&r.vol);
    let server = serve(&r.vol, true).await;
    with_timeout(pipelined_reads(server.addr, false, &model)).await;
    let simple = spliced(&r.vol);
    assert!(simple > 0, "simple replies: no read was spliced");
    with_timeout(pipelined_reads(server.addr, true, &model)).await;
    assert!(
        spliced(&r.vol) > simple,
        "structured replies: no read was spliced"
    );

    // A client no one here wrote: nbdcopy copies the export through libnbd.
    let nbdcopy =
        which("nbdcopy").expect("nbdcopy is missing: scripts/test.sh installs libnbd-bin");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temp dir");
    let out = dir.path().join("copy.img");
    let before = spliced(&r.vol);
    let uri = format!("nbd://{}/disk", server.addr);
    let (o, copy) = tokio::task::spawn_blocking(move || {
        let o = Command::new(nbdcopy)
            .args([uri.as_str(), out.to_str().expect("utf-8 path")])
            .output()
            .expect("running nbdcopy");
        (o, std::fs::read(&out))
    })
    .await
    .expect("join");
    assert!(
        o.status.success(),
        "nbdcopy: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        copy.expect("the copy") == model,
        "nbdcopy's copy differs from the volume"
    );
    assert!(spliced(&r.vol) > before, "nbdcopy's reads were not spliced");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_zero_copy_off_every_read_is_copied() {
    let r = rig(16, 16, 2);
    let model = fill(&r.vol);
    let server = serve(&r.vol, false).await;
    with_timeout(pipelined_reads(server.addr, true, &model)).await;
    assert_eq!(spliced(&r.vol), 0, "a read was spliced with zero-copy off");
    server.shutdown().await;
}

/// `which` without the daemon test helpers.
fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(tool))
            .find(|p| p.is_file())
    })
}
