//! Model-based test of the volume: random reads, writes, trims, zeroes and
//! flushes, with restarts, checked byte-exact against a flat in-memory model.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tierd::device::{BlockDevice, MemDevice};
use tierd::store::{MemStore, MetaStore};
use tierd::volume::{Devices, FormatOptions, Tier, Volume};

const KIB: u64 = 1024;

fn setup(ssd: u64, hdd: u64, extent: u64, reserve: u64) -> (Devices, Arc<dyn MetaStore>) {
    let devices = Devices {
        ssd: Arc::new(MemDevice::new(ssd)) as Arc<dyn BlockDevice>,
        hdd: Arc::new(MemDevice::new(hdd)) as Arc<dyn BlockDevice>,
    };
    let store: Arc<dyn MetaStore> = Arc::new(MemStore::new());
    let opts = FormatOptions {
        extent_size: extent,
        reserve: Some(reserve),
        force: false,
    };
    Volume::format(&devices, store.as_ref(), &opts).unwrap();
    (devices, store)
}

/// Pick a range biased towards sector, block and extent boundaries.
fn range(rng: &mut impl Rng, size: u64, extent: u64) -> (u64, u64) {
    // Sector-aligned ranges too (as recorded block traces write): parts
    // of blocks the write log takes by their sectors.
    let sectors = rng.gen_bool(0.25);
    let offset = match rng.gen_range(0..3) {
        0 if sectors => rng.gen_range(0..size / 512) * 512,
        0 => rng.gen_range(0..size),
        1 => rng.gen_range(0..size / 4096) * 4096,
        _ => rng.gen_range(0..size / extent) * extent,
    };
    let max = (size - offset).min(3 * extent);
    let len = match rng.gen_range(0..3) {
        0 => rng.gen_range(1..=max.min(9000)),
        1 => rng.gen_range(1..=max),
        _ => (max / 4096).max(1).min(rng.gen_range(1..=64)) * 4096,
    };
    let len = len.min(max).max(1);
    if sectors && len >= 512 {
        return (offset, len / 512 * 512);
    }
    (offset, len)
}

#[test]
fn random_ops_match_the_model_across_restarts() {
    let extent = 64 * KIB;
    // 8 SSD slots + 24 HDD slots, 2 reserved: 30 logical extents.
    let (devices, store) = setup(
        1024 * KIB + 8 * extent,
        1024 * KIB + 24 * extent,
        extent,
        2 * extent,
    );
    let mut vol = Volume::open(devices.clone(), store.clone()).unwrap();
    let size = vol.size();
    assert_eq!(size, 30 * extent);
    let mut model = vec![0u8; size as usize];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x71e2d);
    for step in 0..4000 {
        let (offset, len) = range(&mut rng, size, extent);
        let (o, l) = (offset as usize, len as usize);
        match rng.gen_range(0..100) {
            0..=34 => {
                let data: Vec<u8> = (0..len).map(|_| rng.gen::<u8>() | 1).collect();
                let hint = tierd::units::IoHint::default();
                let inline = rng.gen_bool(0.5);
                match inline
                    .then(|| vol.write_nowait(offset, &data, hint))
                    .flatten()
                {
                    Some(r) => r.unwrap(),
                    None => vol.write(offset, &data, rng.gen_bool(0.1)).unwrap(),
                }
                model[o..o + l].copy_from_slice(&data);
            }
            35..=69 => {
                let mut buf = vec![0xAAu8; l];
                if rng.gen_bool(0.5) {
                    vol.read(offset, &mut buf).unwrap();
                } else {
                    // Memory devices never wait: the no-wait path must answer.
                    let hint = tierd::units::IoHint::default();
                    vol.read_nowait(offset, &mut buf, hint)
                        .expect("no wait")
                        .unwrap();
                }
                assert!(
                    buf == model[o..o + l],
                    "step {step}: read {offset}+{len} differs"
                );
            }
            70..=77 => {
                vol.discard(offset, len, true, rng.gen_bool(0.5), false)
                    .unwrap();
                model[o..o + l].fill(0);
            }
            78..=85 => {
                // TRIM: whole blocks become zeros, partial blocks keep data.
                vol.discard(offset, len, false, false, false).unwrap();
                let first = offset.div_ceil(4096) * 4096;
                let end = (offset + len) / 4096 * 4096;
                if first < end {
                    model[first as usize..end as usize].fill(0);
                }
            }
            86..=92 => vol.flush().unwrap(),
            93..=95 => {
                let runs = vol.block_status(offset, len, 16).unwrap();
                let mut pos = o;
                for r in &runs {
                    assert!(r.len > 0);
                    if r.zero {
                        assert!(
                            model[pos..pos + r.len as usize].iter().all(|b| *b == 0),
                            "step {step}: block status says zero at {pos}"
                        );
                    }
                    pos += r.len as usize;
                }
                assert!(pos <= o + l);
            }
            _ => {
                vol.flush().unwrap();
                drop(vol);
                vol = Volume::open(devices.clone(), store.clone()).unwrap();
            }
        }
        let u = vol.usage();
        let mapped = u.mapped[0] + u.mapped[1] + u.shadows + u64::from(u.log.segments);
        assert_eq!(
            mapped + u64::from(u.free[0] + u.free[1] + u.quarantined),
            32,
            "step {step}: slots leaked or owned twice"
        );
    }
    let mut all = vec![0u8; size as usize];
    vol.read(0, &mut all).unwrap();
    assert!(all == model);
}

#[test]
fn new_writes_land_on_ssd_until_full_then_spill_to_hdd() {
    let extent = 64 * KIB;
    let (devices, store) = setup(
        1024 * KIB + 4 * extent,
        1024 * KIB + 8 * extent,
        extent,
        extent,
    );
    let vol = Volume::open(devices, store).unwrap();
    for i in 0..6 {
        vol.write(i * extent + 100, b"hello", false).unwrap();
    }
    let tiers: Vec<Tier> = (0..6).map(|i| vol.mapping(i).unwrap().loc.tier).collect();
    assert_eq!(
        tiers,
        [
            Tier::Ssd,
            Tier::Ssd,
            Tier::Ssd,
            Tier::Ssd,
            Tier::Hdd,
            Tier::Hdd
        ]
    );
    assert_eq!(vol.mapping(7), None);
    // Unwritten bytes around a small first write read as zeros.
    let mut buf = vec![1u8; 4096];
    vol.read(0, &mut buf).unwrap();
    assert!(buf[..100].iter().all(|b| *b == 0));
    assert_eq!(&buf[100..105], b"hello");
    assert!(buf[105..].iter().all(|b| *b == 0));
}

#[test]
fn trim_frees_whole_extents_and_slots_come_back_after_flush() {
    let extent = 64 * KIB;
    let (devices, store) = setup(1024 * KIB + 2 * extent, 1024 * KIB + 2 * extent, extent, 0);
    let vol = Volume::open(devices, store).unwrap();
    let data = vec![7u8; (4 * extent) as usize];
    vol.write(0, &data, false).unwrap();
    assert_eq!(vol.usage().free, [0, 0]);
    vol.discard(0, 2 * extent, false, false, false).unwrap();
    assert_eq!(vol.mapping(0), None);
    assert_eq!(vol.usage().quarantined, 2);
    // Allocation flushes to recycle quarantined slots when nothing is free.
    vol.write(0, b"x", false).unwrap();
    assert_eq!(vol.usage().quarantined, 0);
    let mut buf = vec![9u8; 2];
    vol.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"x\0");
    // Out of range is an error, not a panic.
    assert!(vol.write(4 * extent - 1, b"ab", false).is_err());
    assert!(vol.read(u64::MAX, &mut buf).is_err());
}
