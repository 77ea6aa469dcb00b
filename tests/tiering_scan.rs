//! Scan resistance: once a hot set lives on the SSD, a sequential read of
//! twice the SSD's size (as an NBD connection would send it) earns no heat
//! and evicts nothing.

mod support;

use support::*;
use tierd::units::IoHint;
use tierd::volume::Tier;

#[test]
fn a_long_sequential_scan_does_not_evict_the_hot_set() {
    let bed = Bed::new(8, 32, 2);
    let vol = bed.open();
    let m = bed.migrator(&vol);
    // 30 extents of data, copied in as one long stream (it earns no heat);
    // the first 8 allocations land on the SSD.
    for e in 0..30 {
        let hint = IoHint {
            seq_run: (e + 1) * EXTENT,
        };
        vol.write_hinted(e * EXTENT, &pattern(e, EXTENT as usize), false, hint)
            .expect("write");
    }
    let hot = [20u64, 21, 22, 23];
    for _ in 0..3 {
        for e in hot {
            heat_up(&vol, e, 2);
        }
        bed.round(&m, 1);
    }
    for e in hot {
        assert_eq!(tier_of(&vol, e), Some(Tier::Ssd), "hot extent {e} promoted");
    }
    // Sequential scan of 16 extents (2x the SSD) in 128 KiB requests, with
    // the stream hint a connection computes; the hot set stays warm.
    let mut buf = vec![0u8; 128 << 10];
    for round in 0..4 {
        // Each pass is a new stream from offset 0, as a reconnecting
        // backup would be; the first 4 extents are below the cutoff.
        let mut run = 0u64;
        for off in (0..16 * EXTENT).step_by(buf.len()) {
            run += buf.len() as u64;
            vol.read_hinted(off, &mut buf, IoHint { seq_run: run })
                .expect("scan");
        }
        for e in hot {
            heat_up(&vol, e, 1);
        }
        bed.round(&m, 2);
        for e in hot {
            assert_eq!(
                tier_of(&vol, e),
                Some(Tier::Ssd),
                "round {round}: hot extent {e} evicted"
            );
        }
    }
    assert!(vol.heat().bypassed() > 0);
    for e in 4..16 {
        if !hot.contains(&e) {
            assert_eq!(vol.heat().score(e), 0.0, "scanned extent {e} earned heat");
        }
    }
}
