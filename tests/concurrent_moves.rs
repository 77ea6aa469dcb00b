//! Moves on two threads at once, as the daemon runs them: admissions (the
//! admission thread) and write-backs, demotions and promotions (the
//! migrator's thread), while writers keep rewriting blocks of the same
//! extents and their write log. Every read, at any moment, returns bytes
//! written to that block (never another block's, never a torn mix), and
//! each writer reads back its own last write; afterwards every block holds
//! its last write. The 10,000-cycle kill soak once read another extent's
//! bytes through an admission racing a write-back (tests/admission.rs has
//! that interleaving made certain); this runs the mix at random.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use support::*;
use tierd::migrate::{admit_pending, migrate_extent, write_back_batch};
use tierd::units::Reason;
use tierd::volume::{MoveOutcome, Tier, Volume};

const EXTENTS: u64 = 6;
const BPE: u64 = EXTENT / 4096;
const BLOCKS: u64 = EXTENTS * BPE;
const WRITERS: u64 = 2;

/// Block `b`'s bytes for write `seq`: both named in every word.
fn content(b: u64, seq: u64) -> Vec<u8> {
    let mut out = vec![0u8; 4096];
    for (i, w) in out.chunks_exact_mut(8).enumerate() {
        let v = if i % 2 == 0 { b } else { seq };
        w.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// The write whose bytes block `b` holds, or why they are no write of it.
fn decode(b: u64, got: &[u8]) -> Result<u64, String> {
    let word = |i: usize| u64::from_le_bytes(got[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let (block, seq) = (word(0), word(1));
    if block != b {
        return Err(format!("bytes of block {block} (write {seq})"));
    }
    if got != content(b, seq).as_slice() {
        return Err(format!("a torn mix, starting as write {seq}"));
    }
    Ok(seq)
}

fn read_block(vol: &Volume, b: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    vol.read(b * 4096, &mut buf).expect("read");
    buf
}

#[test]
fn reads_never_see_another_blocks_bytes_while_two_threads_move_extents() {
    let bed = Bed::new(8, 16, 2);
    let vol = bed.open();
    vol.set_admission(true);
    for b in 0..BLOCKS {
        vol.write(b * 4096, &content(b, 0), false).expect("fill");
    }
    vol.flush().expect("flush");
    // All on the HDD: writes there take the write log.
    for e in 0..EXTENTS {
        if tier_of(&vol, e) == Some(Tier::Ssd) {
            let out =
                migrate_extent(&vol, e, Tier::Hdd, Reason::Manual, &mut |_| {}).expect("demote");
            assert!(matches!(out, MoveOutcome::Moved(_)), "{out:?}");
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let written_back = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (vol, done) = (vol.clone(), done.clone());
            thread::spawn(move || -> Result<Vec<u64>, String> {
                let mut last = vec![0u64; BLOCKS as usize];
                let mut seq = 0u64;
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ w;
                while !done.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Writer w owns the blocks b with b % WRITERS == w.
                    let b = (x % (BLOCKS / WRITERS)) * WRITERS + w;
                    seq += 1;
                    let s = seq * WRITERS + w;
                    vol.write(b * 4096, &content(b, s), false)
                        .map_err(|e| format!("write of block {b}: {e}"))?;
                    last[b as usize] = s;
                    let own = decode(b, &read_block(&vol, b))?;
                    if own != s {
                        return Err(format!("block {b} reads write {own} after write {s}"));
                    }
                    // Any block, the other writer's too: bytes of it.
                    let other = (x >> 20) % BLOCKS;
                    decode(other, &read_block(&vol, other))
                        .map_err(|e| format!("block {other}: {e}"))?;
                    if seq.is_multiple_of(64) {
                        vol.flush().map_err(|e| format!("flush: {e}"))?;
                    }
                }
                Ok(last)
            })
        })
        .collect();
    let admitter = {
        let (vol, done, admitted) = (vol.clone(), done.clone(), admitted.clone());
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                for e in 0..EXTENTS {
                    // A read miss notes the extent for admission.
                    let _ = read_block(&vol, e * BPE);
                }
                let got = admit_pending(&vol).expect("admit");
                admitted.fetch_add(got.moved, Ordering::Relaxed);
            }
        })
    };
    let migrator = {
        let (vol, done, written_back) = (vol.clone(), done.clone(), written_back.clone());
        thread::spawn(move || {
            let all: Vec<u64> = (0..EXTENTS).collect();
            let mut round = 0u64;
            while !done.load(Ordering::Relaxed) {
                round += 1;
                let out = write_back_batch(&vol, &all, &mut |_| {}).expect("write-back");
                written_back.fetch_add(
                    out.iter()
                        .filter(|(_, o)| matches!(o, MoveOutcome::Moved(_)))
                        .count() as u64,
                    Ordering::Relaxed,
                );
                // Down again, by a mapping change or a copy, and now and
                // then up by the migrator's own promotion.
                let e = round % EXTENTS;
                let to = if round.is_multiple_of(5) {
                    Tier::Ssd
                } else {
                    Tier::Hdd
                };
                migrate_extent(&vol, e, to, Reason::Manual, &mut |_| {}).expect("move");
            }
        })
    };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3)
        || (admitted.load(Ordering::Relaxed) < 20 || written_back.load(Ordering::Relaxed) < 20)
            && start.elapsed() < Duration::from_secs(60)
    {
        thread::sleep(Duration::from_millis(50));
    }
    done.store(true, Ordering::Relaxed);
    admitter.join().expect("admitter");
    migrator.join().expect("migrator");
    let lasts: Vec<Vec<u64>> = writers
        .into_iter()
        .map(|h| {
            h.join()
                .expect("writer")
                .unwrap_or_else(|e| panic!("live read: {e}"))
        })
        .collect();
    let (a, wb) = (
        admitted.load(Ordering::Relaxed),
        written_back.load(Ordering::Relaxed),
    );
    assert!(
        a >= 20 && wb >= 20,
        "the moves did not overlap enough to test anything: {a} admissions, {wb} write-backs"
    );
    for b in 0..BLOCKS {
        let want = lasts[(b % WRITERS) as usize][b as usize];
        let got = decode(b, &read_block(&vol, b)).unwrap_or_else(|e| panic!("block {b}: {e}"));
        assert_eq!(got, want, "block {b} after the run");
    }
    vol.flush().expect("flush");
    eprintln!("{a} admissions and {wb} write-backs committed alongside the writers");
}
