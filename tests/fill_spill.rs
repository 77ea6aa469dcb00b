//! Filling a volume past its SSD with scattered small writes (one 4 KiB
//! write per extent, as `fio --rw=write:1020k --bs=4k` does on 1 MiB
//! extents) with admission at the miss on: the new data that spills to the
//! HDD once the SSD is full is not a miss. Nothing of it was ever on flash,
//! and admitting it would evict older data for it, a copy each way and two
//! flushes per spilled extent (a fill of a 64 GiB + 1 TiB volume of image
//! files queued an admission for nearly every extent it wrote, and each
//! admission's flush held the migrator for minutes). A later write that
//! finds such an extent on the HDD is a miss as before.

mod support;

use std::time::Duration;

use support::*;
use tierd::migrate::{admit_pending, MigrateConfig, Migrator};
use tierd::units::{ByteSize, Reason};
use tierd::volume::{Stats, Tier};

/// 16 SSD slots (4 of them the reserve) and 112 HDD slots: 124 extents.
const SSD: u64 = 16;
const HDD: u64 = 112;
const RESERVE: u64 = 4;

/// A bed with admission on, and a migrator with admission on as the
/// daemon runs it.
fn admitting() -> (Bed, std::sync::Arc<tierd::volume::Volume>, Migrator) {
    let bed = Bed::new(SSD, HDD, RESERVE);
    let vol = bed.open();
    vol.set_admission(true);
    let cfg = MigrateConfig {
        bandwidth: ByteSize(0),
        admission: true,
        ..MigrateConfig::default()
    };
    let m = Migrator::new(vol.clone(), vol.heat(), cfg);
    (bed, vol, m)
}

/// One 4 KiB write at the start of each extent of `extents`, each followed
/// by the admission thread's turn, a migration round every eighth write
/// (100 ms apart on the clock: the daemon runs a round a second while the
/// fill writes tens of thousands of extents a second).
fn fill(
    bed: &Bed,
    vol: &tierd::volume::Volume,
    m: &Migrator,
    model: &mut [u8],
    extents: std::ops::Range<u64>,
) {
    for e in extents {
        put(vol, model, e * EXTENT, &pattern(1000 + e, 4096));
        admit_pending(vol).expect("admit");
        if e % 8 == 7 {
            bed.clock.advance(Duration::from_millis(100));
            m.run_round();
        }
    }
}

fn notes(vol: &tierd::volume::Volume) -> u64 {
    vol.admissions_waiting() as u64 + Stats::get(&vol.stats().admissions_scanned)
}

#[test]
fn a_fill_past_the_ssd_admits_none_of_its_own_new_data() {
    let (bed, vol, m) = admitting();
    let mut model = model_of(&vol);
    let n = vol.geometry().logical_extents();
    assert_eq!(n, SSD + HDD - RESERVE);
    fill(&bed, &vol, &m, &mut model, 0..n);
    let stats = vol.stats();
    assert!(Stats::get(&stats.spills) > 0, "the fill spilled to the HDD");
    assert_eq!(notes(&vol), 0, "a spilled new extent is no miss");
    assert_eq!(Stats::get(&stats.admissions), 0);
    assert_eq!(stats.migrations_to(Tier::Ssd, Reason::Admit), 0);
    assert_eq!(stats.migrations_to(Tier::Hdd, Reason::Cold), 0);
    // The fill's bytes, and nothing else, reached the devices: the SSD
    // wrote at most twice the host's (the bound; here it writes
    // exactly the extents that landed on it).
    let host = n * 4096;
    let (ssd, hdd) = (dev_written(&vol, Tier::Ssd), dev_written(&vol, Tier::Hdd));
    assert!(ssd <= 2 * host, "SSD wrote {ssd} bytes for {host}");
    assert_eq!(ssd + hdd, host, "SSD {ssd} + HDD {hdd} bytes for {host}");
    assert_reads(&vol, &model, "after the fill");
    assert_accounting(&vol, SSD + HDD);
    vol.flush().expect("flush");
    drop(m);
    drop(vol);
    bed.power_cut();
    let vol = bed.open();
    assert_reads(&vol, &model, "after a power cut");
    assert_accounting(&vol, SSD + HDD);
}

#[test]
fn a_later_write_to_a_spilled_extent_is_a_miss() {
    let (bed, vol, m) = admitting();
    let mut model = model_of(&vol);
    // The SSD's free slots and a few past them: the last ones spill.
    fill(&bed, &vol, &m, &mut model, 0..SSD + 4);
    let spilled = (0..SSD + 4)
        .rev()
        .find(|e| tier_of(&vol, *e) == Some(Tier::Hdd))
        .expect("a spilled extent");
    assert_eq!(notes(&vol), 0);
    assert_eq!(Stats::get(&vol.stats().admissions), 0);
    assert!(vol.admission_keeps_copies(), "the HDD has room");
    // Written again, it was found on the HDD: noted (remembered or
    // waiting, as the ledger decides), as any miss.
    put(&vol, &mut model, spilled * EXTENT + 4096, &pattern(7, 4096));
    assert_eq!(notes(&vol), 1);
    admit_pending(&vol).expect("admit");
    assert_reads(&vol, &model, "after the rewrite");
    assert_accounting(&vol, SSD + HDD);
}
