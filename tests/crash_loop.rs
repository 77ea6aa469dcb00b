//! Crash loop against the real daemon: `target/debug/tierd` on small images
//! (64 MiB SSD + 256 MiB HDD, 1 MiB extents) with the migrator running every
//! 100 ms and low promotion thresholds, so extents move between the tiers
//! while a raw NBD client (tests/raw_client) drives a mixed workload: writes
//! of 1-16 blocks, FUA writes, trims (partial and whole extents), flushes
//! and reads that must see the latest acknowledged data.
//!
//! The client keeps a model per 4 KiB block: the value its last *flushed*
//! write put there (FLUSH acknowledged, or the write itself was FUA) and the
//! values written since, which may or may not survive. A killer thread
//! SIGKILLs the daemon at a seeded random moment; the daemon restarts on the
//! same images and every block of the work area is read back: each must
//! hold its last flushed value or one of the values written after that
//! flush, never anything else (never data that was not written there).
//!
//! `TIERD_CRASH_CYCLES` (default 60) sets the number of kill cycles
//! (`TIERD_SOAK_CYCLES` too, for scripts/soak.sh); `TIERD_CRASH_SEED` the
//! seed (default fixed, printed on failure).

mod common;
mod durability_model;
mod raw_client;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use common::{Daemon, DaemonOptions, MIB};
use durability_model::{block_bytes, block_id, Model, BLOCK};
use raw_client::{Nbd, RawError};

/// Extents of the work area: more than the SSD holds, so some spill to the
/// HDD and the reserve keeps the migrator busy.
const AREA_EXTENTS: u64 = 96;
const BLOCKS_PER_EXTENT: u64 = MIB / BLOCK;
const AREA_BLOCKS: u64 = AREA_EXTENTS * BLOCKS_PER_EXTENT;
/// A hot set that starts on the HDD (written last) and gets promoted.
const HOT: std::ops::Range<u64> = 80..88;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|e| panic!("{name}={v:?} is not a number: {e}"))
    })
}

fn config_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("crash.toml");
    let cfg = r#"
[heat]
half-life = "2s"
coverage-window = "2s"

[migrate]
interval = "100ms"
bandwidth = 0
busy-inflight = 1000
max-backoff = "10ms"
heat-save-interval = "1s"
promote-min-score = 0.5
promote-margin = 0.0
promote-margin-abs = 0.1
dense-blocks = 1
"#;
    std::fs::write(&p, cfg).expect("writing the crash-loop config");
    p
}

/// Send SIGKILL to `pid` (the killer thread; the main thread reaps).
fn sigkill(pid: u32) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill(2) takes plain integers and has no memory effects; the
    // pid is our own unreaped child (only the main thread reaps it, after
    // joining this thread), so it cannot name another process.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

struct Figures {
    cycles: u64,
    writes: u64,
    fua: u64,
    flushes: u64,
    trims: u64,
    reads: u64,
    blocks_checked: u64,
    unflushed_lost: u64,
    unflushed_kept: u64,
}

/// One cycle's workload until the daemon dies; returns when a request fails
/// on the connection (the kill) or after `max` (then the caller kills).
fn workload(
    c: &mut Nbd,
    model: &mut Model,
    rng: &mut rand::rngs::StdRng,
    next_id: &mut u64,
    fig: &mut Figures,
    max: Duration,
) {
    let deadline = Instant::now() + max;
    let mut buf = vec![0u8; 16 * BLOCK as usize];
    while Instant::now() < deadline {
        let hot = rng.gen_bool(0.6);
        let blk = if hot {
            rng.gen_range(HOT.start * BLOCKS_PER_EXTENT..HOT.end * BLOCKS_PER_EXTENT)
        } else {
            rng.gen_range(0..AREA_BLOCKS)
        };
        let r: Result<(), RawError> = match rng.gen_range(0..100) {
            0..=44 => {
                let n = rng.gen_range(1..=16u64).min(AREA_BLOCKS - blk);
                let fua = rng.gen_bool(0.08);
                let id = *next_id;
                *next_id += 1;
                let data = &mut buf[..(n * BLOCK) as usize];
                for k in 0..n {
                    let s = (k * BLOCK) as usize;
                    block_bytes(id, blk + k, &mut data[s..s + BLOCK as usize]);
                    model.wrote(blk + k, id);
                }
                fig.writes += 1;
                let r = c.write(blk * BLOCK, data, fua);
                if r.is_ok() && fua {
                    fig.fua += 1;
                    for k in 0..n {
                        model.durable_now(blk + k, id);
                    }
                }
                r
            }
            45..=51 => {
                // Trim: a few blocks, or now and then a whole extent.
                let (start, n) = if rng.gen_bool(0.3) {
                    let e = blk / BLOCKS_PER_EXTENT;
                    (e * BLOCKS_PER_EXTENT, BLOCKS_PER_EXTENT)
                } else {
                    (blk, rng.gen_range(1..=64u64).min(AREA_BLOCKS - blk))
                };
                for k in start..start + n {
                    model.wrote(k, 0);
                }
                fig.trims += 1;
                c.trim(start * BLOCK, (n * BLOCK) as u32)
            }
            52..=59 => {
                let r = c.flush();
                if r.is_ok() {
                    fig.flushes += 1;
                    model.flushed();
                }
                r
            }
            _ => {
                let n = rng.gen_range(1..=16u64).min(AREA_BLOCKS - blk);
                match c.read(blk * BLOCK, (n * BLOCK) as u32) {
                    Ok(got) => {
                        fig.reads += 1;
                        for k in 0..n {
                            let b = blk + k;
                            let s = (k * BLOCK) as usize;
                            let want = model.current(b);
                            assert_eq!(
                                block_id(b, &got[s..s + BLOCK as usize]),
                                Some(want),
                                "live read of block {b} does not return its last write {want}"
                            );
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match r {
            Ok(()) => {}
            Err(RawError::Io(_)) => return, // the daemon died
            Err(RawError::Errno(e)) => panic!("request failed with errno {e} on a live daemon"),
        }
    }
}

/// Read the whole work area and check every block against the model.
fn verify(c: &mut Nbd, model: &mut Model, fig: &mut Figures, cycle: u64) {
    const CHUNK: u64 = 4 * MIB;
    let mut off = 0;
    while off < AREA_BLOCKS * BLOCK {
        let got = c
            .read(off, CHUNK as u32)
            .unwrap_or_else(|e| panic!("cycle {cycle}: reading back at {off}: {e:?}"));
        for (k, chunk) in got.chunks_exact(BLOCK as usize).enumerate() {
            let blk = off / BLOCK + k as u64;
            let allowed = model.allowed(blk);
            match block_id(blk, chunk) {
                Some(id) if allowed.contains(&id) => {
                    if model.pending.contains_key(&blk) {
                        if id == allowed[allowed.len() - 1] {
                            fig.unflushed_kept += 1;
                        } else {
                            fig.unflushed_lost += 1;
                        }
                    }
                    model.settle(blk, id);
                }
                other => panic!(
                    "cycle {cycle}: block {blk} holds {} but only {allowed:?} were ever written there since its last flush",
                    match other {
                        Some(id) => format!("write {id}"),
                        None => "bytes of no write at all".to_string(),
                    }
                ),
            }
            fig.blocks_checked += 1;
        }
        off += CHUNK;
    }
}

#[test]
fn sigkill_at_random_moments_never_loses_flushed_data_or_invents_data() {
    let cycles = env_u64("TIERD_SOAK_CYCLES")
        .or_else(|| env_u64("TIERD_CRASH_CYCLES"))
        .unwrap_or(60);
    let seed = env_u64("TIERD_CRASH_SEED").unwrap_or(0x7133_d0c4);
    eprintln!("crash loop: {cycles} cycles, seed {seed:#x} (TIERD_CRASH_SEED to replay)");
    let cfg_dir = common::tempdir();
    let cfg = config_file(cfg_dir.path());
    let mut opts = DaemonOptions::small();
    opts.log_level = "debug".into();
    opts.extra_args = vec!["--config".into(), cfg.display().to_string()];
    let mut d = Daemon::start_with(opts);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    let mut next_id = 1u64;
    let mut fig = Figures {
        cycles: 0,
        writes: 0,
        fua: 0,
        flushes: 0,
        trims: 0,
        reads: 0,
        blocks_checked: 0,
        unflushed_lost: 0,
        unflushed_kept: 0,
    };
    let started = Instant::now();

    // Spread data over the whole area first (one block per extent, then
    // the hot set written last so it starts on the HDD).
    {
        let mut c = Nbd::connect(&d.addr()).expect("connect");
        assert!(c.size >= AREA_EXTENTS * MIB, "volume too small: {}", c.size);
        let mut buf = vec![0u8; BLOCK as usize];
        for e in (0..AREA_EXTENTS).filter(|e| !HOT.contains(e)).chain(HOT) {
            for b in [0, 17, 200] {
                let blk = e * BLOCKS_PER_EXTENT + b;
                block_bytes(next_id, blk, &mut buf);
                model.wrote(blk, next_id);
                next_id += 1;
                c.write(blk * BLOCK, &buf, false).expect("seeding write");
            }
        }
        c.flush().expect("seeding flush");
        model.flushed();
    }

    let mut moved_total = 0usize;
    for cycle in 0..cycles {
        let log_before = d.log().len();
        let mut c =
            Nbd::connect(&d.addr()).unwrap_or_else(|e| panic!("cycle {cycle}: connect: {e}"));
        let pid = d.pid();
        let delay = Duration::from_millis(rng.gen_range(50..700));
        let armed = Arc::new(AtomicBool::new(true));
        let killer = {
            let armed = armed.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                if armed.load(Ordering::SeqCst) {
                    sigkill(pid);
                }
            })
        };
        workload(
            &mut c,
            &mut model,
            &mut rng,
            &mut next_id,
            &mut fig,
            delay + Duration::from_secs(5),
        );
        armed.store(false, Ordering::SeqCst);
        killer.join().expect("killer thread");
        drop(c);
        let log = d.log();
        moved_total += log
            .get(log_before..)
            .unwrap_or("")
            .matches(" moved")
            .count();
        d.kill9();
        d.restart();
        let mut c =
            Nbd::connect(&d.addr()).unwrap_or_else(|e| panic!("cycle {cycle}: reconnect: {e}"));
        verify(&mut c, &mut model, &mut fig, cycle);
        c.disc().ok();
        fig.cycles += 1;
    }
    d.terminate();
    eprintln!(
        "crash loop passed: {} kill cycles in {:.0?}; {} writes ({} FUA), {} trims, {} flushes, {} live reads checked; {} blocks verified after restarts; unflushed blocks after a kill: {} kept their last write, {} older; {} migrations logged",
        fig.cycles,
        started.elapsed(),
        fig.writes,
        fig.fua,
        fig.trims,
        fig.flushes,
        fig.reads,
        fig.blocks_checked,
        fig.unflushed_kept,
        fig.unflushed_lost,
        moved_total
    );
    assert_eq!(fig.cycles, cycles);
    assert!(
        fig.flushes > cycles && fig.fua > 0 && fig.trims > 0,
        "workload too thin"
    );
    assert!(
        moved_total > 0,
        "no migration happened during the crash loop: the test did not exercise moving extents"
    );
}
