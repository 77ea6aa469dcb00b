//! Device failures at the engine level: a volume on in-memory devices
//! wrapped in [`FaultDevice`]. A failing request gets an error (EIO through
//! the NBD export), every other request keeps working; a migration onto or
//! from a failing device leaves the extent where it was, readable and
//! counted, and a retry succeeds once the fault clears; a failed flush is an
//! error, never a success, and the next successful flush makes the data
//! durable. The last test runs the real NBD server over such a volume.

mod raw_client;

use std::sync::Arc;

use tierd::device::{BlockDevice, FaultDevice, FaultOp, FaultRule, MemDevice};
use tierd::nbd::{Export, IoCtx, Server, ServerOptions};
use tierd::serving::VolumeExport;
use tierd::store::{MemStore, MetaStore};
use tierd::units::Reason;
use tierd::volume::{Devices, FormatOptions, MoveOutcome, Stats, Tier, Volume};

const EXTENT: u64 = 64 * 1024;
const SSD_SLOTS: u64 = 16;
const HDD_SLOTS: u64 = 64;

/// Memory devices with the power model, wrapped for fault injection.
struct Rig {
    ssd_mem: Arc<MemDevice>,
    hdd_mem: Arc<MemDevice>,
    ssd: Arc<FaultDevice>,
    hdd: Arc<FaultDevice>,
    store: Arc<MemStore>,
}

impl Rig {
    fn new() -> Rig {
        let ssd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + SSD_SLOTS * EXTENT));
        let hdd_mem = Arc::new(MemDevice::with_power_model((1 << 20) + HDD_SLOTS * EXTENT));
        let mut rig = Rig {
            ssd: Arc::new(FaultDevice::new(ssd_mem.clone(), 1)),
            hdd: Arc::new(FaultDevice::new(hdd_mem.clone(), 2)),
            ssd_mem,
            hdd_mem,
            store: Arc::new(MemStore::new()),
        };
        let opts = FormatOptions {
            extent_size: EXTENT,
            reserve: Some(4 * EXTENT),
            force: false,
        };
        Volume::format(&rig.devices(), rig.store.as_ref(), &opts).expect("format");
        rig.rewrap();
        rig
    }

    /// Fresh fault wrappers over the same memory (as after a restart).
    fn rewrap(&mut self) {
        self.ssd = Arc::new(FaultDevice::new(self.ssd_mem.clone(), 11));
        self.hdd = Arc::new(FaultDevice::new(self.hdd_mem.clone(), 12));
    }

    fn devices(&self) -> Devices {
        Devices {
            ssd: self.ssd.clone() as Arc<dyn BlockDevice>,
            hdd: self.hdd.clone() as Arc<dyn BlockDevice>,
        }
    }

    fn open(&self) -> Arc<Volume> {
        let store: Arc<dyn MetaStore> = self.store.clone();
        Arc::new(Volume::open(self.devices(), store).expect("open"))
    }

    fn dev(&self, tier: Tier) -> &FaultDevice {
        match tier {
            Tier::Ssd => &self.ssd,
            Tier::Hdd => &self.hdd,
        }
    }

    fn power_cut(&self) {
        self.ssd_mem.power_cut();
        self.hdd_mem.power_cut();
        self.store.power_cut();
    }
}

/// Device byte range of the slot holding `extent`.
fn slot_range(vol: &Volume, extent: u64) -> (Tier, std::ops::Range<u64>) {
    let m = vol.mapping(extent).expect("extent is mapped");
    let start = vol.geometry().slot_offset(m.loc.slot);
    (m.loc.tier, start..start + EXTENT)
}

fn fill(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(37).wrapping_add((i / 512) as u8) | 1)
        .collect()
}

fn read(vol: &Volume, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    vol.read(offset, &mut buf).expect("read");
    buf
}

#[test]
fn read_fault_fails_only_that_extent_with_eio() {
    let rig = Rig::new();
    let vol = rig.open();
    let (a, b) = (fill(1, EXTENT as usize), fill(2, EXTENT as usize));
    vol.write(0, &a, false).expect("write a");
    vol.write(3 * EXTENT, &b, false).expect("write b");
    let (tier, range) = slot_range(&vol, 0);
    rig.dev(tier)
        .add(FaultRule::new(&[FaultOp::Read]).range(range));

    let export = VolumeExport::new(vol.clone());
    let mut buf = vec![0u8; 4096];
    let err = export
        .read(4096, &mut buf, IoCtx::default())
        .expect_err("read of the failing extent");
    assert_eq!(err.errno(), 5, "EIO expected, got {err}");
    // A read spanning a good and a failing extent fails as a whole.
    let mut span = vec![0u8; 2 * EXTENT as usize];
    assert!(export
        .read(EXTENT / 2, &mut span, IoCtx::default())
        .is_err());
    // Everything else works: reads elsewhere, unmapped space, writes.
    assert_eq!(read(&vol, 3 * EXTENT, EXTENT as usize), b);
    assert_eq!(read(&vol, 10 * EXTENT, 4096), vec![0u8; 4096]);
    vol.write(5 * EXTENT, &a[..8192], false)
        .expect("write elsewhere");
    assert_eq!(read(&vol, 5 * EXTENT, 8192), a[..8192]);
    // Writes into the failing extent still land (only reads fail).
    vol.write(0, &b[..4096], true)
        .expect("write into failing extent");
    assert!(Stats::get(&vol.stats().dev_errors[tier.index()]) >= 2);
    assert!(rig.dev(tier).injected(FaultOp::Read) >= 2);

    rig.dev(tier).clear();
    let mut want = a.clone();
    want[..4096].copy_from_slice(&b[..4096]);
    assert_eq!(
        read(&vol, 0, EXTENT as usize),
        want,
        "readable once cleared"
    );
}

#[test]
fn counted_write_faults_fail_those_writes_and_leak_nothing() {
    let rig = Rig::new();
    let vol = rig.open();
    let total = SSD_SLOTS + HDD_SLOTS;
    let data = fill(3, 8192);
    rig.ssd.add(FaultRule::new(&[FaultOp::Write]).times(2));
    // First write to a new extent: allocation, then the device write fails.
    let export = VolumeExport::new(vol.clone());
    let err = export
        .write(0, &data, IoCtx::default())
        .expect_err("injected");
    assert_eq!(err.errno(), 5);
    assert!(
        vol.mapping(0).is_none(),
        "a failed first write maps nothing"
    );
    assert_eq!(read(&vol, 0, 8192), vec![0u8; 8192]);
    // An existing extent: the old data stays.
    rig.ssd.set_enabled(false);
    vol.write(EXTENT, &data, false).expect("write");
    rig.ssd.set_enabled(true);
    let other = fill(4, 8192);
    assert!(vol.write(EXTENT, &other, false).is_err());
    assert_eq!(
        read(&vol, EXTENT, 8192),
        data,
        "old data after a failed overwrite"
    );
    // The rule is spent: everything works again.
    vol.write(0, &data, false).expect("write after the faults");
    vol.write(EXTENT, &other, true)
        .expect("overwrite after the faults");
    assert_eq!(read(&vol, 0, 8192), data);
    assert_eq!(read(&vol, EXTENT, 8192), other);
    assert_eq!(rig.ssd.injected(FaultOp::Write), 2);
    let u = vol.usage();
    assert_eq!(
        u.mapped[0] + u.mapped[1] + u64::from(u.free[0] + u.free[1] + u.quarantined),
        total,
        "slot accounting after failed allocations: {u:?}"
    );
}

/// Shared body: a migration from `from` to `to` while `fault` is injected
/// on device `on`; the extent stays, reads right, the error is counted, and
/// the retry after clearing succeeds.
fn migration_fault(on: Tier, fault: FaultRule) {
    let rig = Rig::new();
    let vol = rig.open();
    let data = fill(7, EXTENT as usize);
    vol.write(2 * EXTENT, &data, true).expect("write");
    let from = vol.mapping(2).expect("mapped").loc;
    assert_eq!(from.tier, Tier::Ssd, "new writes land on the SSD");
    let to = Tier::Hdd;
    let free_before = [vol.free_slots(Tier::Ssd), vol.free_slots(Tier::Hdd)];
    let errs_before = Stats::get(&vol.stats().dev_errors[on.index()]);
    rig.dev(on).add(fault);

    let r = tierd::migrate::migrate_extent(&vol, 2, to, Reason::Manual, &mut |_| {});
    assert!(r.is_err(), "migration through a failing device: {r:?}");
    assert_eq!(
        vol.mapping(2).expect("still mapped").loc,
        from,
        "extent moved despite the error"
    );
    assert_eq!(Stats::get(&vol.stats().migration_errors), 1);
    assert!(Stats::get(&vol.stats().dev_errors[on.index()]) > errs_before);
    assert_eq!(
        [vol.free_slots(Tier::Ssd), vol.free_slots(Tier::Hdd)],
        free_before,
        "the destination slot was returned"
    );
    // Readable as long as the source device reads (a read fault on the
    // source also hits foreground reads of that slot, so clear first then).
    if on == to {
        assert_eq!(read(&vol, 2 * EXTENT, EXTENT as usize), data);
    }
    rig.dev(on).clear();
    assert_eq!(read(&vol, 2 * EXTENT, EXTENT as usize), data);

    let r =
        tierd::migrate::migrate_extent(&vol, 2, to, Reason::Manual, &mut |_| {}).expect("retry");
    assert!(matches!(r, MoveOutcome::Moved(_)), "retry: {r:?}");
    assert_eq!(vol.mapping(2).expect("mapped").loc.tier, to);
    assert_eq!(read(&vol, 2 * EXTENT, EXTENT as usize), data);
    // And it survives a power cut.
    drop(vol);
    rig.power_cut();
    let vol = rig.open();
    assert_eq!(vol.mapping(2).expect("mapped").loc.tier, to);
    assert_eq!(read(&vol, 2 * EXTENT, EXTENT as usize), data);
}

#[test]
fn migration_onto_failing_device_leaves_extent_and_retry_succeeds() {
    migration_fault(Tier::Hdd, FaultRule::new(&[FaultOp::Write]));
}

#[test]
fn migration_from_unreadable_device_leaves_extent_and_retry_succeeds() {
    let rule = FaultRule::new(&[FaultOp::Read]).range((1 << 20)..(1 << 20) + SSD_SLOTS * EXTENT);
    migration_fault(Tier::Ssd, rule);
}

#[test]
fn migration_with_failing_destination_sync_leaves_extent() {
    migration_fault(Tier::Hdd, FaultRule::new(&[FaultOp::Sync]).times(1));
}

#[test]
fn failed_flush_is_an_error_and_a_later_flush_makes_data_durable() {
    let mut rig = Rig::new();
    let vol = rig.open();
    let old = fill(10, 16384);
    let new = fill(11, 16384);
    vol.write(0, &old, false).expect("write");
    vol.flush().expect("flush");
    vol.write(0, &new, false).expect("overwrite");
    vol.write(4 * EXTENT, &new, false).expect("new extent");
    rig.ssd.add(FaultRule::new(&[FaultOp::Sync]).times(1));
    let export = VolumeExport::new(vol.clone());
    let err = export
        .flush()
        .expect_err("a failed sync must fail the flush");
    assert_eq!(err.errno(), 5);
    // FUA rides on the same flush: an error, never a silent success.
    rig.ssd.add(FaultRule::new(&[FaultOp::Sync]).times(1));
    assert!(
        export
            .write(8 * EXTENT, &new, IoCtx::default().with_fua(true))
            .is_err(),
        "FUA write with a failed sync"
    );
    // The next flush succeeds and must sync what the failed ones did not.
    vol.flush().expect("flush after the fault");
    drop(vol);
    rig.power_cut();
    rig.rewrap();
    let vol = rig.open();
    assert_eq!(
        read(&vol, 0, 16384),
        new,
        "overwrite durable after the good flush"
    );
    assert_eq!(read(&vol, 4 * EXTENT, 16384), new, "new extent durable");
    assert_eq!(
        read(&vol, 8 * EXTENT, 16384),
        new,
        "the FUA write's data too"
    );
}

#[test]
fn power_cut_after_a_failed_flush_keeps_old_or_new_never_garbage() {
    let mut rig = Rig::new();
    let vol = rig.open();
    let old = fill(20, 8192);
    let new = fill(21, 8192);
    vol.write(EXTENT, &old, false).expect("write");
    vol.flush().expect("flush");
    vol.write(EXTENT, &new, false).expect("overwrite");
    vol.write(6 * EXTENT, &new, false).expect("new extent");
    rig.ssd.add(FaultRule::new(&[FaultOp::Sync]));
    assert!(vol.flush().is_err());
    drop(vol);
    rig.power_cut();
    rig.rewrap();
    let vol = rig.open();
    let got = read(&vol, EXTENT, 8192);
    assert!(
        got == old || got == new,
        "overwritten block holds neither value"
    );
    let got = read(&vol, 6 * EXTENT, 8192);
    assert!(
        got == vec![0u8; 8192] || got == new,
        "new block holds neither zeros nor its data"
    );
}

/// Random faults on every operation of both devices: each request either
/// succeeds or fails; a successful read returns what a model allows (the
/// last successful write, or a failed write since, which may or may not
/// have landed).
#[test]
fn random_faults_never_return_wrong_data() {
    use rand::{Rng, SeedableRng};
    let rig = Rig::new();
    for d in [&rig.ssd, &rig.hdd] {
        d.add(FaultRule::new(&[FaultOp::Read, FaultOp::Write, FaultOp::Sync]).probability(0.05));
    }
    let vol = rig.open();
    let blocks = 40 * EXTENT / 4096;
    // Per block: allowed values (0 = zeros, else the seed written).
    let mut allowed: Vec<Vec<u8>> = vec![vec![0]; blocks as usize];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let (mut ok, mut failed) = (0u64, 0u64);
    for step in 0..3000u32 {
        let b = rng.gen_range(0..blocks);
        let n = rng.gen_range(1..=4u64).min(blocks - b);
        match rng.gen_range(0..10) {
            0..=4 => {
                let seed = (step % 250 + 1) as u8;
                let data: Vec<u8> = (0..n * 4096).map(|_| seed).collect();
                let r = vol.write(b * 4096, &data, rng.gen_bool(0.1));
                for blk in b..b + n {
                    let a = &mut allowed[blk as usize];
                    if r.is_ok() {
                        *a = vec![seed];
                    } else {
                        a.push(seed);
                    }
                }
                if r.is_ok() {
                    ok += 1
                } else {
                    failed += 1
                }
            }
            5 => {
                let r = vol.discard(b * 4096, n * 4096, false, false, false);
                for blk in b..b + n {
                    let a = &mut allowed[blk as usize];
                    if r.is_ok() {
                        *a = vec![0];
                    } else {
                        a.push(0);
                    }
                }
            }
            6 => {
                let _ = vol.flush();
            }
            _ => {
                let mut buf = vec![0u8; (n * 4096) as usize];
                match vol.read(b * 4096, &mut buf) {
                    Ok(()) => {
                        ok += 1;
                        for (k, chunk) in buf.chunks(4096).enumerate() {
                            let blk = b as usize + k;
                            let v = chunk[0];
                            assert!(
                                chunk.iter().all(|x| *x == v) && allowed[blk].contains(&v),
                                "step {step}: block {blk} reads {v}, allowed {:?}",
                                allowed[blk]
                            );
                            allowed[blk] = vec![v];
                        }
                    }
                    Err(_) => failed += 1,
                }
            }
        }
    }
    let injected = rig.ssd.injected_total() + rig.hdd.injected_total();
    assert!(failed > 20 && ok > 1000, "ok {ok}, failed {failed}");
    assert!(injected >= failed / 2, "injected {injected}");
    eprintln!("random faults: {ok} ok, {failed} failed requests, {injected} faults injected");
}

/// Through the real NBD server on TCP: a READ of a failing region gets EIO
/// and another READ on the same connection succeeds.
#[test]
fn nbd_read_of_failing_region_gets_eio_and_connection_keeps_working() {
    use raw_client::{Nbd, RawError, EIO};
    let rig = Rig::new();
    let vol = rig.open();
    let good = fill(30, 65536);
    vol.write(0, &good, false).expect("write");
    vol.write(EXTENT, &good, false).expect("write");
    let (tier, range) = slot_range(&vol, 1);
    rig.dev(tier)
        .add(FaultRule::new(&[FaultOp::Read]).range(range));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let server = Server::new(
        Arc::new(VolumeExport::new(vol.clone())),
        ServerOptions::default(),
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = rt.spawn(async move {
        server
            .serve_tcp(listener, async {
                let _ = stop_rx.await;
            })
            .await
    });

    let mut c = Nbd::connect(&addr).expect("connect");
    match c.read(EXTENT, 4096) {
        Err(RawError::Errno(e)) => assert_eq!(e, EIO),
        other => panic!("read of the failing region: {other:?}"),
    }
    assert_eq!(c.read(0, 4096).expect("good read"), good[..4096]);
    match c.read(EXTENT + 8192, 512) {
        Err(RawError::Errno(e)) => assert_eq!(e, EIO),
        other => panic!("second read of the failing region: {other:?}"),
    }
    c.write(2 * EXTENT, &good[..4096], true)
        .expect("write on the same connection");
    assert_eq!(c.read(2 * EXTENT, 4096).expect("read back"), good[..4096]);
    c.disc().expect("disc");
    let _ = stop_tx.send(());
    rt.block_on(serving).expect("join").expect("serve");
    assert!(rig.dev(tier).injected(FaultOp::Read) >= 2);
}

#[test]
fn health_turns_degraded_on_device_errors_and_failed_flushes_and_says_why() {
    use tierd::migrate::{MigrateConfig, Migrator};
    use tierd::serving::service::status_line;
    use tierd::serving::{ConnectionProbe, Live};
    let rig = Rig::new();
    let vol = rig.open();
    let migrator = Arc::new(Migrator::new(
        vol.clone(),
        vol.heat(),
        MigrateConfig::default(),
    ));
    let live = Live::new(
        vol.clone(),
        vol.heat(),
        migrator,
        None,
        ConnectionProbe::default(),
    );
    live.sample();
    let h = live.health();
    assert_eq!(h.state, "ok", "{h:?}");
    assert_eq!(status_line(&h), "serving; health ok");

    // A failed read: degraded, naming device errors and the tier counts.
    vol.write(0, &fill(1, 16384), false).expect("write");
    rig.ssd.add(FaultRule::new(&[FaultOp::Read]).times(1));
    assert!(vol.read(0, &mut [0u8; 4096]).is_err());
    live.sample();
    let h = live.health();
    assert_eq!(h.state, "degraded", "{h:?}");
    assert!(
        h.problems[0].contains("device errors") && h.problems[0].contains("SSD 1"),
        "{h:?}"
    );
    assert!(status_line(&h).starts_with("serving; DEGRADED: device errors"));

    // A failed flush is a second problem, and a good flush clears it.
    rig.hdd.add(FaultRule::new(&[FaultOp::Sync]).times(1));
    vol.write(4 * EXTENT, &fill(2, 16384), false)
        .expect("write");
    let _ = vol.write(40 * EXTENT, &fill(3, 16384), false);
    // Whichever device the writes dirtied, fail its sync.
    rig.ssd.add(FaultRule::new(&[FaultOp::Sync]).times(1));
    assert!(vol.flush().is_err());
    let h = live.health();
    assert!(
        h.problems.iter().any(|p| p.contains("latest flush failed")),
        "{h:?}"
    );
    assert!(h.metadata_dirty, "{h:?}");
    rig.ssd.clear();
    rig.hdd.clear();
    vol.flush().expect("flush after the faults");
    let h = live.health();
    assert!(!h.problems.iter().any(|p| p.contains("flush")), "{h:?}");
    assert!(
        !h.metadata_dirty && h.metadata_flush_age_secs < 5.0,
        "{h:?}"
    );

    // The status snapshot carries the same health.
    let st = live.status().health;
    assert_eq!((st.state, st.problems), (h.state, h.problems));
}

/// A write into HDD data finds the write log without a place while the
/// SSD is lent to promotions with clean copies: it evicts some and
/// flushes, and that flush fails. The write fails, and the extent it was
/// writing stays mapped as it was (it vanished from the map and read as
/// zeros, its log places leaked).
#[test]
fn a_failed_flush_while_making_room_in_the_log_keeps_the_extent() {
    let rig = Rig::new();
    let vol = rig.open();
    let hdd_data = fill(40, EXTENT as usize);
    vol.write(40 * EXTENT, &hdd_data, true).expect("write");
    let out = tierd::migrate::migrate_extent(&vol, 40, Tier::Hdd, Reason::Manual, &mut |_| {})
        .expect("demote");
    assert!(matches!(out, MoveOutcome::Moved(_)), "{out:?}");
    // Promoted extents with clean HDD copies fill the SSD.
    let mut promoted = 0;
    for e in 0..SSD_SLOTS + 4 {
        vol.write(e * EXTENT, &fill(e as u8, EXTENT as usize), true)
            .expect("write");
        if vol.mapping(e).expect("mapped").loc.tier == Tier::Ssd {
            let out =
                tierd::migrate::migrate_extent(&vol, e, Tier::Hdd, Reason::Manual, &mut |_| {})
                    .expect("demote");
            assert!(matches!(out, MoveOutcome::Moved(_)), "{out:?}");
        }
    }
    for e in 0..SSD_SLOTS + 4 {
        let out = tierd::migrate::migrate_extent(&vol, e, Tier::Ssd, Reason::Manual, &mut |_| {})
            .expect("promote");
        if matches!(out, MoveOutcome::Moved(_)) {
            promoted += 1;
        }
    }
    vol.flush().expect("flush");
    assert_eq!(vol.free_slots(Tier::Ssd), 0, "{promoted} promoted");
    assert!(vol.usage().shadows > 0);
    // Unflushed data on the SSD, whose sync then fails.
    let ssd_extent = (0..SSD_SLOTS + 4)
        .find(|&e| vol.mapping(e).is_some_and(|m| m.loc.tier == Tier::Ssd))
        .expect("an extent on the SSD");
    let mut ssd_data = fill(ssd_extent as u8, EXTENT as usize);
    ssd_data[..4096].copy_from_slice(&fill(97, 4096));
    vol.write(ssd_extent * EXTENT, &ssd_data[..4096], false)
        .expect("write on the SSD");
    let free = vol.free_slots(Tier::Hdd);
    rig.ssd.add(FaultRule::new(&[FaultOp::Sync]));
    let r = vol.write(40 * EXTENT + 8192, &fill(99, 4096), false);
    assert!(r.is_err(), "the write whose room could not be made: {r:?}");
    rig.ssd.clear();
    assert_eq!(read(&vol, ssd_extent * EXTENT, EXTENT as usize), ssd_data);
    let m = vol.mapping(40).expect("the extent is still mapped");
    assert_eq!(m.loc.tier, Tier::Hdd);
    assert_eq!(read(&vol, 40 * EXTENT, EXTENT as usize), hdd_data);
    vol.flush().expect("flush once the fault clears");
    assert!(vol.free_slots(Tier::Hdd) <= free);
    // And the write goes through now.
    let new = fill(98, 4096);
    vol.write(40 * EXTENT + 8192, &new, false)
        .expect("write again");
    let mut want = hdd_data.clone();
    want[8192..12288].copy_from_slice(&new);
    assert_eq!(read(&vol, 40 * EXTENT, EXTENT as usize), want);
}
