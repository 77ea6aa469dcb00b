//! Which reads the NBD server puts in its slow lane: a read is slow when
//! any extent it touches is mapped on the HDD (the volume's
//! `reads_from_hdd`, asked through the export's `read_is_slow`); reads of
//! SSD extents and of unmapped ones (zeros) are not, and the answer follows
//! an extent when it moves.

mod support;

use support::*;
use tierd::nbd::Export;
use tierd::serving::adapter::VolumeExport;
use tierd::volume::Tier;

#[test]
fn a_read_is_slow_when_any_extent_it_touches_is_on_the_hdd() {
    let bed = Bed::new(16, 48, 4);
    let vol = bed.open();
    let mut model = model_of(&vol);
    // Extent 3 on the HDD, extent 4 on the SSD, extent 9 never written.
    hdd_extent(&vol, &mut model, 3, 0, &pattern(3, 4096));
    put(&vol, &mut model, 4 * EXTENT, &pattern(4, 4096));
    assert_eq!(tier_of(&vol, 3), Some(Tier::Hdd));
    assert_eq!(tier_of(&vol, 4), Some(Tier::Ssd));
    assert_eq!(tier_of(&vol, 9), None);
    let export = VolumeExport::new(vol.clone());
    let cases = [
        ("inside the HDD extent", 3 * EXTENT + 4096, 4096, true),
        ("inside the SSD extent", 4 * EXTENT, 4096, false),
        ("an unmapped extent", 9 * EXTENT, 4096, false),
        (
            "the SSD extent and the HDD one",
            3 * EXTENT + EXTENT - 512,
            1024,
            true,
        ),
        ("the last byte of the HDD extent", 4 * EXTENT - 1, 1, true),
        (
            "the SSD extent and an unmapped one",
            4 * EXTENT + 4096,
            EXTENT,
            false,
        ),
        ("nothing", 3 * EXTENT, 0, false),
    ];
    for (what, offset, len, slow) in cases {
        assert_eq!(vol.reads_from_hdd(offset, len), slow, "{what}");
        assert_eq!(
            export.read_is_slow(offset, len),
            slow,
            "{what}, as exported"
        );
    }
    // The answer follows the mapping: extent 3 brought up is fast.
    migrate(&vol, 3, Tier::Ssd);
    assert!(!export.read_is_slow(3 * EXTENT, 4096), "after the move up");
    assert_reads(&vol, &model, "after the move");
}
