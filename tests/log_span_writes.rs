//! Writes in place into an HDD extent that holds logged blocks: outside
//! the span from its first logged block to its last they run under the
//! extent's shared lock, beside a write-back of that span (which rereads
//! and rewrites the HDD across it); inside the span they take the write
//! lock. Run side by side on two threads, round after round, the volume
//! reads back as the last writes made it.

mod support;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use tierd::device::{BlockDevice, MemDevice};
use tierd::volume::Devices;

use support::*;

const BLK: u64 = 4096;

/// Logged blocks: eight (a span write-back's least), spanning 4..=13 with
/// 11 and 12 inside the span but not logged.
const LOGGED: [u64; 8] = [4, 5, 6, 7, 8, 9, 10, 13];

/// Blocks the writer thread writes in place: outside the span, and inside
/// it but not logged.
const IN_PLACE: [u64; 8] = [0, 1, 2, 3, 14, 15, 11, 12];

/// The bed's HDD, a span's read taking a moment of real time: the window
/// in which a write in place could slip between the span's read and its
/// rewrite.
struct LingeringHdd(Arc<MemDevice>);

impl BlockDevice for LingeringHdd {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_at(buf, offset)?;
        if buf.len() as u64 >= 8 * BLK {
            thread::sleep(Duration::from_micros(300));
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }
    fn name(&self) -> String {
        "lingering-hdd".into()
    }
}

#[test]
fn writes_in_place_beside_a_span_write_back_lose_nothing() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open_on(Devices {
        ssd: bed.ssd.clone() as Arc<dyn BlockDevice>,
        hdd: Arc::new(LingeringHdd(bed.hdd.clone())) as Arc<dyn BlockDevice>,
    });
    let mut model = model_of(&vol);
    hdd_extent(&vol, &mut model, 0, 0, &pattern(1, EXTENT as usize));
    for round in 0..200u64 {
        vol.set_write_log(true);
        for &b in &LOGGED {
            put(
                &vol,
                &mut model,
                b * BLK,
                &pattern(round * 100 + b, BLK as usize),
            );
        }
        let logged: Vec<u64> = logged_blocks(&vol, 0)
            .iter()
            .map(|b| u64::from(*b))
            .collect();
        assert_eq!(logged, LOGGED, "round {round}");
        // The log off: the writer's writes go in place.
        vol.set_write_log(false);
        let w = vol.clone();
        let (stop, started) = (Arc::new(AtomicBool::new(false)), Arc::new(Barrier::new(2)));
        let (stop2, started2) = (stop.clone(), started.clone());
        // The writer writes until the write-back is done (at least a few).
        let writer = thread::spawn(move || {
            let mut last = Vec::new();
            started2.wait();
            let mut k = 0u64;
            while k < 8 || !stop2.load(Ordering::Relaxed) {
                let b = IN_PLACE[(k % 8) as usize];
                let data = pattern(round * 10_000 + k, BLK as usize);
                w.write(b * BLK, &data, false).expect("write in place");
                last.push((b, data));
                k += 1;
            }
            last
        });
        started.wait();
        let out = write_back(&vol, &[0]);
        stop.store(true, Ordering::Relaxed);
        for (b, data) in writer.join().expect("writer") {
            model[(b * BLK) as usize..((b + 1) * BLK) as usize].copy_from_slice(&data);
        }
        assert_eq!(out.len(), 1, "{out:?}");
        assert_reads(&vol, &model, &format!("round {round}"));
        // Whatever the write-back left (it gives way to a write meanwhile)
        // goes home now, before the next round logs the blocks again.
        if !logged_blocks(&vol, 0).is_empty() {
            write_back(&vol, &[0]);
        }
        assert!(logged_blocks(&vol, 0).is_empty(), "round {round}");
        assert_reads(&vol, &model, &format!("round {round}, written back"));
    }
    vol.flush().expect("flush");
    drop(vol);
    let vol = bed.open();
    assert_reads(&vol, &model, "after a restart");
    assert_accounting(&vol, 8 + 16);
}
