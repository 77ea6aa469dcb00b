//! The timing models against their datasheets' figures.

use super::*;
use rand::{Rng, SeedableRng};

const TB: u64 = 1 << 40;

/// `ops` operations from `qd` closed-loop workers: each op goes to the
/// worker free first, `next(worker, k)` says what it is. Returns the
/// last completion.
fn closed_loop(
    model: &mut dyn TimingModel,
    qd: usize,
    ops: u64,
    mut next: impl FnMut(usize, u64) -> (OpKind, u64, u64),
) -> Duration {
    let mut free = vec![Duration::ZERO; qd];
    let mut last = Duration::ZERO;
    for k in 0..ops {
        let (w, t) = free
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| **t)
            .map(|(i, t)| (i, *t))
            .unwrap();
        let (kind, off, len) = next(w, k);
        free[w] = model.submit(kind, off, len, t);
        last = last.max(free[w]);
    }
    last
}

/// IOPS of `qd` closed-loop workers doing random `len`-byte ops.
fn iops(
    model: &mut dyn TimingModel,
    kind: OpKind,
    span: u64,
    len: u64,
    qd: usize,
    ops: usize,
) -> f64 {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let last = closed_loop(model, qd, ops as u64, |_, _| {
        (kind, rng.gen_range(0..span / 4096) * 4096, len)
    });
    ops as f64 / last.as_secs_f64()
}

#[test]
fn hdd_7200_random_4k_qd1_full_span_is_70_to_100_iops() {
    let mut m = HddModel::new(HddParams::HDD_7200, TB);
    let v = iops(&mut m, OpKind::Read, TB, 4096, 1, 2000);
    assert!((70.0..=100.0).contains(&v), "{v}");
}

#[test]
fn hdd_queueing_helps_and_sequential_reads_run_at_zone_rate() {
    let mut m = HddModel::new(HddParams::HDD_7200, TB);
    let q32 = iops(&mut m, OpKind::Read, TB, 4096, 32, 4000);
    assert!(q32 > 150.0, "SPTF at QD 32: {q32}");
    let mut m = HddModel::new(HddParams::HDD_7200, TB);
    let mut t = Duration::ZERO;
    let len = 256 << 10;
    for i in 0..4000u64 {
        t = m.submit(OpKind::Read, i * len, len, t);
    }
    let rate = 4000.0 * len as f64 / t.as_secs_f64();
    assert!(
        rate > 0.9 * 205e6 && rate < 211e6,
        "outer-zone sequential rate {rate}"
    );
    // Inner zone is slower.
    let mut m = HddModel::new(HddParams::HDD_7200, TB);
    let base = TB - 4000 * len;
    let mut t = Duration::ZERO;
    for i in 0..4000u64 {
        t = m.submit(OpKind::Read, base + i * len, len, t);
    }
    let inner = 4000.0 * len as f64 / t.as_secs_f64();
    assert!(inner < 0.6 * rate, "inner {inner} vs outer {rate}");
}

/// MB/s of `qd` closed-loop workers reading `len`-byte pieces
/// sequentially, worker w from its own cursor (`streams`: each worker a
/// stream of its own, spread over the disk as the bench spreads them)
/// or from one shared cursor whose pieces are handed out in pairs
/// swapped (a queue that reorders them).
fn seq_rate(p: HddParams, qd: usize, len: u64, streams: bool, pieces: u64) -> f64 {
    let mut m = HddModel::new(p, TB);
    let mut cursors = spread_cursors(qd);
    let last = closed_loop(&mut m, qd, pieces, |w, k| {
        let off = if streams {
            let o = cursors[w];
            cursors[w] += len;
            o
        } else if qd > 1 {
            (k ^ 1) * len
        } else {
            k * len
        };
        (OpKind::Read, off, len)
    });
    (pieces * len) as f64 / last.as_secs_f64() / 1e6
}

/// One start offset per worker, an eighth of the disk apart.
fn spread_cursors(qd: usize) -> Vec<u64> {
    (0..qd as u64).map(|w| w * (TB / 8)).collect()
}

#[test]
fn hdd_sequential_reads_keep_their_rate_when_they_queue() {
    let p = HddParams::HDD_5400;
    let len = 256 << 10;
    let qd1 = seq_rate(p, 1, len, false, 2000);
    assert!(qd1 > 0.9 * 150.0, "QD 1 sequential {qd1} MB/s");
    // One stream, QD 4, pieces reaching the drive out of order: the
    // read-ahead buffer keeps the media streaming.
    let qd4 = seq_rate(p, 4, len, false, 2000);
    assert!(qd4 > 0.9 * qd1, "QD 4 out of order {qd4} vs QD 1 {qd1}");
    // Four streams spread over the disk: a seek per 2 MiB of read-ahead
    // instead of per request (a third of one stream's rate or more;
    // without read-ahead it was a tenth).
    let four = seq_rate(p, 4, len, true, 2000);
    assert!(four > qd1 / 3.0, "four streams {four} vs one {qd1}");
    assert!(four < qd1, "four streams cannot beat one: {four} vs {qd1}");
}

#[test]
fn hdd_sequential_write_streams_are_destaged_together() {
    // Four streams of 256 KiB writes at QD 4, closed loop, each worker
    // its own stream spread over the disk, then a FLUSH: at least a
    // third of one stream's rate (without gathering, a seek per write).
    let rate = |qd: usize| {
        let mut m = HddModel::new(HddParams::HDD_5400, TB);
        let len = 256u64 << 10;
        let mut cursors = spread_cursors(qd);
        let last = closed_loop(&mut m, qd, 2000, |w, _| {
            cursors[w] += len;
            (OpKind::Write, cursors[w] - len, len)
        });
        let end = m.submit(OpKind::Flush, 0, 0, last);
        2000.0 * len as f64 / end.as_secs_f64() / 1e6
    };
    let one = rate(1);
    let four = rate(4);
    assert!(one > 0.8 * 150.0, "one stream {one} MB/s");
    assert!(four > one / 3.0, "four streams {four} vs one {one}");
    assert!(
        four < one * 1.05,
        "four streams cannot beat one: {four} vs {one}"
    );
}

#[test]
fn hdd_write_cache_completes_early_and_flush_waits() {
    let mut m = HddModel::new(HddParams::HDD_7200, TB);
    let w = m.submit(OpKind::Write, TB / 2, 4096, Duration::ZERO);
    assert!(w < Duration::from_micros(500), "{w:?}");
    let f = m.submit(OpKind::Flush, 0, 0, w);
    assert!(
        f > Duration::from_millis(2),
        "flush waits for the destage: {f:?}"
    );
}

#[test]
fn ssd_sata_scales_with_queue_depth() {
    let mut m = SsdModel::new(SsdParams::SSD_SATA);
    let q1 = iops(&mut m, OpKind::Read, TB, 4096, 1, 20000);
    assert!((9000.0..=12000.0).contains(&q1), "QD1 {q1}");
    let mut m = SsdModel::new(SsdParams::SSD_SATA);
    let q32 = iops(&mut m, OpKind::Read, TB, 4096, 32, 100000);
    assert!((85000.0..=110000.0).contains(&q32), "QD32 {q32}");
}

#[test]
fn ssd_link_carries_a_write_while_a_read_waits_for_flash() {
    let mut m = SsdModel::new(SsdParams::SSD_SATA);
    let t0 = Duration::from_secs(1);
    let read_done = m.submit(OpKind::Read, 0, 1 << 20, t0);
    let write_done = m.submit(OpKind::Write, 1 << 30, 4096, t0);
    // The 1 MiB read's flash time is ~2.6 ms; the write needs the link
    // for 7.4 us after 25 us of overhead.
    assert!(
        write_done - t0 < Duration::from_micros(100),
        "write waited for the read: {:?}",
        write_done - t0
    );
    assert!(
        read_done - t0 > Duration::from_millis(4),
        "read {:?}",
        read_done - t0
    );
    // Transfers never overlap: a second read ready at the same moment
    // as the first transfers after it.
    let mut m = SsdModel::new(SsdParams::SSD_SATA);
    let a = m.submit(OpKind::Read, 0, 1 << 20, t0);
    let b = m.submit(OpKind::Read, 1 << 20, 1 << 20, t0);
    assert!(b - a >= Duration::from_micros(1900), "{a:?} {b:?}");
}

#[test]
fn ssd_work_booked_for_later_does_not_hold_up_a_read_done_before_it() {
    // On a virtual clock a participant may run ahead: a 1 MiB read
    // submitted for 10 s (the bench's migrator after a wait on the HDD)
    // takes every flash unit then. A 4 KiB read at 1 s, submitted after
    // it, is done at once, as on a drive, where the later read is not
    // there yet.
    let mut m = SsdModel::new(SsdParams::SSD_SATA);
    let ahead = m.submit(OpKind::Read, 0, 1 << 20, Duration::from_secs(10));
    assert!(ahead > Duration::from_secs(10));
    let t0 = Duration::from_secs(1);
    let now = m.submit(OpKind::Read, 1 << 30, 4096, t0);
    assert!(
        now - t0 < Duration::from_micros(200),
        "a read at 1 s waited for work booked at 10 s: {:?}",
        now - t0
    );
    // Work that does not fit before the later booking goes after it.
    let t1 = ahead - Duration::from_micros(10);
    let after = m.submit(OpKind::Read, 2 << 30, 1 << 20, t1);
    assert!(after > ahead, "{after:?} {ahead:?}");
}

#[test]
fn ssd_write_cliff_after_the_buffer_fills() {
    let mut p = SsdParams::SSD_SATA;
    p.write_buffer = 64 << 20;
    let mut m = SsdModel::new(p);
    let mut t = Duration::ZERO;
    let mut first = Duration::ZERO;
    for i in 0..4096u64 {
        let start = t;
        t = m.submit(OpKind::Write, i * (1 << 20), 1 << 20, t);
        if i == 0 {
            first = t - start;
        }
        if i == 4095 {
            assert!(
                t - start > first * 2,
                "late writes slower: {:?} vs {:?}",
                t - start,
                first
            );
        }
    }
}

#[test]
fn remote_pays_a_round_trip_per_request_and_shares_its_bandwidth() {
    let mut m = ModelKind::Remote1ms.build(TB);
    // QD 1, 4 KiB: a round trip and the service, about 1.1 ms.
    let t = closed_loop(m.as_mut(), 1, 1000, |_, k| (OpKind::Read, k * 4096, 4096));
    let iops = 1000.0 / t.as_secs_f64();
    assert!((850.0..950.0).contains(&iops), "QD 1: {iops}");
    // Requests overlap at the server: QD 32 is ~32x QD 1.
    let mut m = ModelKind::Remote1ms.build(TB);
    let t = closed_loop(m.as_mut(), 32, 32_000, |_, k| {
        (OpKind::Read, k * 4096, 4096)
    });
    let iops32 = 32_000.0 / t.as_secs_f64();
    assert!(iops32 > 25.0 * iops, "QD 32: {iops32}");
    // Large transfers are held to the link's bandwidth.
    let mut m = ModelKind::Remote1ms.build(TB);
    let t = closed_loop(m.as_mut(), 16, 2000, |_, k| {
        (OpKind::Write, k << 20, 1 << 20)
    });
    let bw = 2000.0 * f64::from(1u32 << 20) / t.as_secs_f64();
    assert!((1.0e9..1.26e9).contains(&bw), "bandwidth {bw}");
    assert!(!ModelKind::Remote1ms.is_ssd() && ModelKind::SsdSata.is_ssd());
    assert_eq!(ModelKind::names(true), "ssd-sata or ssd-nvme");
    assert_eq!(ModelKind::names(false), "hdd-5400, hdd-7200 or remote-1ms");
}
