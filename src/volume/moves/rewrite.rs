//! What a copy into a shadow writes: the stale blocks of an SSD extent,
//! and the clean ones beside them where rewriting them saves the HDD a
//! write (one write per extent, and neighbouring extents in one).

use super::super::extent::{Mapping, Shadow};
use super::super::geometry::BLOCK_SIZE;

/// Clean bytes a copy into a shadow rewrites to save a separate HDD write:
/// about what a disk transfers in the half turn a write waits on average
/// (5.6 ms at 5,400 rpm and 75 to 150 MB/s, 4.2 ms at 7,200 rpm and 100 to
/// 210 MB/s), so rewriting them costs no more than the write it saves
/// (and less beside users, whose queued requests each write waits behind).
const REWRITE_MAX: u64 = 512 << 10;

/// The blocks of SSD extent `m` a copy into its shadow `s` writes: the
/// stale ones; the clean ones between two of them, where the gap is at
/// most [`REWRITE_MAX`] and every block in it is written (their HDD copy
/// already holds what the SSD does, so rewriting them changes nothing);
/// and, where that makes the stale blocks of a stretch of written blocks
/// one write, the rest of the stretch if that adds at most [`REWRITE_MAX`]
/// in all, so that the copies of
/// extents whose shadows neighbour each other continue each other and go
/// in one write (`Volume::copy_items`). A 70/30 working set's old extents,
/// written at random while they were read, took about 25 HDD writes of
/// 42 KiB apiece each when only the stale blocks went
/// (benchmarks/daemon-shift.sh). A write into the extent meanwhile bumps
/// its generation (`Volume::shared_write`, `stale_first`), so a copy that
/// read a block before it changed is not committed; and shadows are
/// trusted only after a clean shutdown, so a copy a crash interrupts
/// leaves nothing to trust.
pub(super) fn through_clean_gaps(m: &Mapping, s: &Shadow, blocks: u32) -> Vec<bool> {
    let most = (REWRITE_MAX / BLOCK_SIZE) as u32;
    let mut copy = vec![false; blocks as usize];
    let mut b = 0;
    while b < blocks {
        if !m.written.get(b) {
            b += 1;
            continue;
        }
        // One stretch of written blocks: start..b.
        let start = b;
        let mut stale: Vec<u32> = Vec::new();
        while b < blocks && m.written.get(b) {
            if s.stale.get(b) {
                stale.push(b);
            }
            b += 1;
        }
        let (Some(&lo), Some(&hi)) = (stale.first(), stale.last()) else {
            continue;
        };
        copy[lo as usize] = true;
        let mut one = true;
        for w in stale.windows(2) {
            let fill = w[1] - w[0] - 1 <= most;
            one &= fill;
            let from = if fill { w[0] + 1 } else { w[1] };
            copy[from as usize..=w[1] as usize].fill(true);
        }
        // One write already: its edges too, where they add little.
        if one && (lo - start) + (b - 1 - hi) <= most {
            copy[start as usize..b as usize].fill(true);
        }
    }
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::extent::{Loc, Written};
    use crate::volume::geometry::Tier;

    fn shadowed(written: &[(u32, u32)], stale: &[u32]) -> (Mapping, Shadow) {
        let blocks = 256;
        let mut w = Written::empty(blocks);
        for &(a, b) in written {
            w.set_range(a, b, true, blocks);
        }
        let mut st = Written::empty(blocks);
        for &b in stale {
            st.set_range(b, b, true, blocks);
        }
        let loc = Loc {
            tier: Tier::Ssd,
            slot: 0,
        };
        let shadow = Shadow { slot: 3, stale: st };
        let mut m = Mapping::plain(loc, w);
        m.shadow = Some(shadow.clone());
        (m, shadow)
    }

    fn copied(written: &[(u32, u32)], stale: &[u32]) -> Vec<u32> {
        let (m, s) = shadowed(written, stale);
        let c = through_clean_gaps(&m, &s, 256);
        (0..256).filter(|&b| c[b as usize]).collect()
    }

    #[test]
    fn one_stale_block_of_a_full_extent_goes_alone() {
        assert_eq!(copied(&[(0, 255)], &[100]), vec![100]);
    }

    #[test]
    fn stale_blocks_far_apart_go_apart_and_near_ones_with_the_gap() {
        // 0 and 255: the gap (254 blocks) is past the bound, so is the rest.
        assert_eq!(copied(&[(0, 255)], &[0, 255]), vec![0, 255]);
        // 10, 20 and 200: 11..=19 filled, 21..=199 (179 blocks) not; the
        // edges (10 + 55 blocks) would be, but not with the long gap left.
        let mut want: Vec<u32> = (10..=20).collect();
        want.push(200);
        assert_eq!(copied(&[(0, 255)], &[10, 20, 200]), want);
    }

    #[test]
    fn stale_blocks_spread_over_the_extent_take_it_whole() {
        let stale: Vec<u32> = (0..20).map(|k| 30 + k * 10).collect();
        assert_eq!(copied(&[(0, 255)], &stale), (0..256).collect::<Vec<_>>());
    }

    #[test]
    fn unwritten_blocks_are_never_written_through() {
        // Two stretches: 0..=99 with stale 50 (the edges, 99 blocks, are
        // within the bound: whole), 101..=255 with none (untouched).
        assert_eq!(
            copied(&[(0, 99), (101, 255)], &[50]),
            (0..100).collect::<Vec<_>>()
        );
    }
}
