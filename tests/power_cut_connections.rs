//! A FLUSH covers writes made on other connections, across a power cut of
//! a real `tierd serve`. The daemon keeps its images and metadata store on
//! a filesystem that loses every unsynced write when the power is cut
//! (tests/power_fs). Each cycle two writer connections write random runs
//! of 4 KiB blocks, a few requests in flight each; once both have had
//! replies, a third connection sends FLUSH and waits for it (one to three
//! times); the writers go on a little; then the daemon is SIGKILLed, the
//! power cut, and the daemon started again on what is left.
//!
//! A block's bytes name the write that made them: the connection and its
//! sequence number, and the block's own offset (tests/durability_model).
//! Every request is stamped from one counter when it is sent and when its
//! reply comes. A write is *covered* when its reply came before the last
//! acknowledged FLUSH was sent. After the restart each block of the work
//! area must hold a version that no covered write supersedes: the value it
//! had at the start of the cycle, or a write of this cycle, unless a
//! covered write to it was sent after that version's reply. A block
//! holding an older version of itself counts as **lost**; one holding
//! bytes of no write to that block as **invented**. Both must be zero.
//!
//! A second test runs the same cycles with a kill and no power cut.
//!
//! `TIERD_CRASH_CYCLES` / `TIERD_SOAK_CYCLES` set the number of cycles
//! (default 12; `scripts/soak-crash-loop.sh --case power-cut` runs thousands),
//! `TIERD_CRASH_SEED` the seed (printed at the start, decimal or `0x` hex).

mod common;
mod durability_model;
mod power_fs;
mod raw_client;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use common::{env_u64, Daemon, DaemonOptions, MIB};
use durability_model::{block_bytes, block_id, BLOCK};
use power_fs::PowerFs;
use raw_client::{Nbd, CMD_FLUSH, CMD_WRITE};

/// The work area: more than the SSD takes before its reserve, so writes
/// land on both tiers and in the SSD's write log.
const AREA_BLOCKS: u64 = 72 * MIB / BLOCK;
/// Writes each writer keeps in flight.
const WINDOW: usize = 4;
/// Longest wait for the writers to make progress: only a hang trips it.
const STALL: Duration = Duration::from_secs(60);

/// One write request: its id (block contents), first block and length,
/// and its stamps (`replied`: `None` if no reply came before the kill).
#[derive(Clone, Copy, Debug)]
struct Sent {
    id: u64,
    first: u64,
    blocks: u64,
    sent: u64,
    replied: Option<u64>,
}

/// The id of a write: the connection in the low byte, its sequence
/// number above (never 0: 0 is zeros).
fn write_id(conn: u64, seq: u64) -> u64 {
    (seq << 8) | conn
}

#[derive(Default, Debug)]
struct Figures {
    cycles: u64,
    writes_sent: u64,
    writes_replied: u64,
    flushes: u64,
    /// Blocks whose newest covered write was checked, and of those, how
    /// many held that write rather than a later one.
    covered_blocks: u64,
    covered_kept: u64,
    /// Blocks last written by a write the FLUSH did not cover: it
    /// survived, or the block held an earlier allowed version.
    uncovered_survived: u64,
    uncovered_dropped: u64,
    blocks_verified: u64,
    lost: u64,
    invented: u64,
    pages_lost_at_cuts: u64,
}

/// A writer connection: random runs of blocks, `WINDOW` in flight, until
/// the connection breaks (the kill). Counts replies in `replies`.
fn writer(
    addr: String,
    conn: u64,
    mut seq: u64,
    seed: u64,
    clock: Arc<AtomicU64>,
    replies: Arc<AtomicU64>,
) -> (Vec<Sent>, u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut c = Nbd::connect(&addr).unwrap_or_else(|e| panic!("writer {conn}: connect: {e}"));
    let mut log: Vec<Sent> = Vec::new();
    let mut by_cookie: HashMap<u64, usize> = HashMap::new();
    let mut buf = vec![0u8; 8 * BLOCK as usize];
    loop {
        while by_cookie.len() < WINDOW {
            let blocks = rng.gen_range(1..=8u64);
            let first = rng.gen_range(0..AREA_BLOCKS - blocks);
            seq += 1;
            let id = write_id(conn, seq);
            let data = &mut buf[..(blocks * BLOCK) as usize];
            for k in 0..blocks {
                let s = (k * BLOCK) as usize;
                block_bytes(id, first + k, &mut data[s..s + BLOCK as usize]);
            }
            log.push(Sent {
                id,
                first,
                blocks,
                sent: clock.fetch_add(1, Ordering::SeqCst),
                replied: None,
            });
            match c.send(0, CMD_WRITE, first * BLOCK, data.len() as u32, data) {
                Ok(cookie) => {
                    by_cookie.insert(cookie, log.len() - 1);
                }
                Err(_) => return (log, seq),
            }
        }
        match c.reply() {
            Ok((errno, cookie)) => {
                let stamp = clock.fetch_add(1, Ordering::SeqCst);
                let i = by_cookie
                    .remove(&cookie)
                    .unwrap_or_else(|| panic!("writer {conn}: reply for unknown cookie {cookie}"));
                assert_eq!(errno, 0, "writer {conn}: write {:?} failed", log[i]);
                log[i].replied = Some(stamp);
                replies.fetch_add(1, Ordering::SeqCst);
            }
            Err(_) => return (log, seq),
        }
    }
}

/// Wait until every counter in `counts` reaches its target.
fn wait_for(counts: &[Arc<AtomicU64>], targets: &[u64], what: &str) {
    let deadline = Instant::now() + STALL;
    while counts
        .iter()
        .zip(targets)
        .any(|(c, &t)| c.load(Ordering::SeqCst) < t)
    {
        assert!(
            Instant::now() < deadline,
            "the writers made no progress for {STALL:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What each block of the area may hold after the cut, from its value at
/// the start of the cycle (`base`) and the cycle's writes.
struct Block {
    /// (id, sent, replied) of every write of the cycle to the block.
    writes: Vec<(u64, u64, Option<u64>)>,
}

/// Check one block: `got` is the id its bytes name (None: no write's).
/// `flush_at` is when the last acknowledged FLUSH was sent.
fn judge(
    blk: u64,
    got: Option<u64>,
    base: u64,
    cycle: Option<&Block>,
    flush_at: Option<u64>,
    fig: &mut Figures,
) -> Result<(), String> {
    let none = Block { writes: Vec::new() };
    let writes = &cycle.unwrap_or(&none).writes;
    let covered = |replied: Option<u64>| match (replied, flush_at) {
        (Some(r), Some(f)) => r < f,
        _ => false,
    };
    // A version is superseded once a covered write to the block was sent
    // after its reply (the base "replied" before the cycle began).
    let superseded = |replied: Option<u64>| match replied {
        None => false,
        Some(r) => writes
            .iter()
            .any(|&(_, sent, rep)| covered(rep) && sent > r),
    };
    let mut allowed: Vec<(u64, Option<u64>)> = Vec::new();
    if !superseded(Some(0)) {
        allowed.push((base, Some(0)));
    }
    for &(id, _, rep) in writes {
        if !superseded(rep) {
            allowed.push((id, rep));
        }
    }
    let Some(id) = got else {
        fig.invented += 1;
        return Err(format!(
            "block {blk} holds bytes of no write to it; allowed {allowed:?}"
        ));
    };
    if !allowed.iter().any(|&(a, _)| a == id) {
        fig.lost += 1;
        return Err(format!(
            "block {blk} holds write {id:#x} (or zeros: 0), which a covered write superseded; allowed (id, replied) {allowed:?}; the cycle's writes (id, sent, replied) {writes:?}; last FLUSH sent at {flush_at:?}"
        ));
    }
    if writes.is_empty() {
        return Ok(());
    }
    let newest_covered = writes
        .iter()
        .filter(|&&(_, _, rep)| covered(rep))
        .max_by_key(|&&(_, _, rep)| rep);
    if let Some(&(cid, _, _)) = newest_covered {
        fig.covered_blocks += 1;
        fig.covered_kept += u64::from(cid == id);
    }
    let last = writes.iter().max_by_key(|&&(_, sent, _)| sent);
    if let Some(&(lid, _, rep)) = last {
        if !covered(rep) {
            if lid == id {
                fig.uncovered_survived += 1;
            } else {
                fig.uncovered_dropped += 1;
            }
        }
    }
    Ok(())
}

fn config_file(dir: &std::path::Path) -> std::path::PathBuf {
    // The migrator busy too: promotions, demotions and write-backs run
    // while the writers write and the power goes.
    let p = dir.join("power.toml");
    let cfg = r#"
[heat]
half-life = "2s"

[migrate]
interval = "100ms"
bandwidth = 0
max-backoff = "10ms"
promote-min-score = 0.5
promote-margin = 0.0
dense-blocks = 1
"#;
    std::fs::write(&p, cfg).expect("writing the power-cut test config");
    p
}

/// The daemon's volume on a [`PowerFs`] mounted in its directory.
fn start(fs_dir: &std::path::Path, cfg: &std::path::Path) -> Daemon {
    let mut opts = DaemonOptions::small();
    let mnt = fs_dir.join("mnt");
    let devices = [
        "--ssd".to_string(),
        mnt.join("ssd.img").display().to_string(),
        "--hdd".into(),
        mnt.join("hdd.img").display().to_string(),
        "--meta-dir".into(),
        mnt.join("meta").display().to_string(),
    ];
    // `serve` formats only its embedded default images: format these.
    common::run_ok(
        std::process::Command::new(common::tierd_bin())
            .arg("format")
            .args(&devices)
            .args(["--ssd-size", &opts.ssd_size, "--hdd-size", &opts.hdd_size])
            .args(["--extent-size", &opts.extent_size])
            .env_remove("RUST_LOG"),
    );
    opts.extra_args = vec!["--config".into(), cfg.display().to_string()];
    opts.extra_args.extend(devices);
    opts.extra_args.extend([
        "--control".into(),
        fs_dir.join("control.sock").display().to_string(),
    ]);
    Daemon::start_with(opts)
}

fn run(cycles: u64, cut: bool) -> Figures {
    let seed = env_u64("TIERD_CRASH_SEED").unwrap_or(0x5eed_c0de);
    let what = if cut { "power cut" } else { "kill -9" };
    eprintln!(
        "{what} across connections: {cycles} cycles, seed {seed:#x} (TIERD_CRASH_SEED to replay)"
    );
    common::require_root("the power-cut filesystem (FUSE)");
    let dir = common::tempdir();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("creating the mount point");
    let fs = PowerFs::mount(&mnt);
    let cfg = config_file(dir.path());
    let mut d = start(dir.path(), &cfg);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut base: HashMap<u64, u64> = HashMap::new();
    let mut seqs = [0u64; 2];
    let mut fig = Figures::default();
    let started = Instant::now();

    for cycle in 0..cycles {
        let clock = Arc::new(AtomicU64::new(1));
        let replies: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let writers: Vec<_> = (0..2u64)
            .map(|k| {
                let (addr, clock, replies) = (d.addr(), clock.clone(), replies[k as usize].clone());
                let (seq, wseed) = (seqs[k as usize], rng.gen());
                std::thread::spawn(move || writer(addr, k + 1, seq, wseed, clock, replies))
            })
            .collect();

        // The third connection: FLUSH once both writers have had replies.
        let mut f = Nbd::connect(&d.addr())
            .unwrap_or_else(|e| panic!("cycle {cycle}: flusher connect: {e}"));
        let mut flush_at = None;
        let mut done = [0u64; 2];
        for _ in 0..rng.gen_range(1..=3) {
            for (k, t) in done.iter_mut().enumerate() {
                *t = replies[k].load(Ordering::SeqCst) + rng.gen_range(1..40);
            }
            wait_for(&replies, &done, "replies before a FLUSH");
            let at = clock.fetch_add(1, Ordering::SeqCst);
            let cookie = f
                .send(0, CMD_FLUSH, 0, 0, &[])
                .unwrap_or_else(|e| panic!("cycle {cycle}: sending FLUSH: {e}"));
            let (errno, got) = f
                .reply()
                .unwrap_or_else(|e| panic!("cycle {cycle}: FLUSH reply: {e}"));
            assert_eq!((errno, got), (0, cookie), "cycle {cycle}: FLUSH failed");
            flush_at = Some(at);
            fig.flushes += 1;
        }
        // A little more writing the FLUSH does not cover, then the cut.
        for (k, t) in done.iter_mut().enumerate() {
            *t = replies[k].load(Ordering::SeqCst) + rng.gen_range(0..30);
        }
        wait_for(&replies, &done, "replies after the FLUSH");
        d.kill9();
        if cut {
            fig.pages_lost_at_cuts += fs.power_cut();
        }
        drop(f);
        let mut blocks: HashMap<u64, Block> = HashMap::new();
        for (k, w) in writers.into_iter().enumerate() {
            let (log, seq) = w.join().expect("a writer thread panicked");
            seqs[k] = seq;
            for s in log {
                fig.writes_sent += 1;
                fig.writes_replied += u64::from(s.replied.is_some());
                for b in s.first..s.first + s.blocks {
                    blocks
                        .entry(b)
                        .or_insert_with(|| Block { writes: Vec::new() })
                        .writes
                        .push((s.id, s.sent, s.replied));
                }
            }
        }

        d.restart();
        let mut c =
            Nbd::connect(&d.addr()).unwrap_or_else(|e| panic!("cycle {cycle}: reconnect: {e}"));
        let mut errors = Vec::new();
        let mut seen = HashSet::new();
        const CHUNK: u64 = 4 * MIB;
        for off in (0..AREA_BLOCKS * BLOCK).step_by(CHUNK as usize) {
            let got = c
                .read(off, CHUNK as u32)
                .unwrap_or_else(|e| panic!("cycle {cycle}: reading back at {off}: {e:?}"));
            for (k, bytes) in got.chunks_exact(BLOCK as usize).enumerate() {
                let blk = off / BLOCK + k as u64;
                let id = block_id(blk, bytes);
                let b = base.get(&blk).copied().unwrap_or(0);
                match judge(blk, id, b, blocks.get(&blk), flush_at, &mut fig) {
                    Ok(()) => {
                        if let Some(id) = id {
                            base.insert(blk, id);
                        }
                    }
                    Err(e) => errors.push(e),
                }
                seen.insert(blk);
                fig.blocks_verified += 1;
            }
        }
        c.disc().ok();
        assert_eq!(seen.len() as u64, AREA_BLOCKS);
        assert!(
            errors.is_empty(),
            "{what} across connections, seed {seed:#x}, cycle {cycle}: {} lost, {} invented; first: {:#?}",
            fig.lost,
            fig.invented,
            &errors[..errors.len().min(5)]
        );
        fig.cycles += 1;
    }
    d.terminate();
    eprintln!(
        "{what} across connections passed: {} cycles in {:.0?}, seed {seed:#x}; {} writes sent, {} replied, {} FLUSHes; {} blocks verified; {} blocks with covered writes ({} kept the newest covered write, the rest a later one); blocks last written by uncovered writes: {} survived, {} came back older; lost {}, invented {}; {} unsynced pages dropped at cuts; {} syncs",
        fig.cycles,
        started.elapsed(),
        fig.writes_sent,
        fig.writes_replied,
        fig.flushes,
        fig.blocks_verified,
        fig.covered_blocks,
        fig.covered_kept,
        fig.uncovered_survived,
        fig.uncovered_dropped,
        fig.lost,
        fig.invented,
        fig.pages_lost_at_cuts,
        fs.figures().syncs,
    );
    drop(fs);
    fig
}

fn cycles() -> u64 {
    env_u64("TIERD_SOAK_CYCLES")
        .or_else(|| env_u64("TIERD_CRASH_CYCLES"))
        .unwrap_or(12)
}

#[test]
fn a_flush_covers_other_connections_writes_across_a_power_cut() {
    let n = cycles();
    let fig = run(n, true);
    assert_eq!(fig.cycles, n);
    assert_eq!((fig.lost, fig.invented), (0, 0));
    assert!(
        fig.covered_blocks > 0 && fig.writes_replied > 0,
        "no covered write was checked: {fig:?}"
    );
    assert!(
        fig.pages_lost_at_cuts > 0 && fig.uncovered_dropped > 0,
        "no cut dropped anything: the power model was not exercised: {fig:?}"
    );
}

#[test]
fn a_flush_covers_other_connections_writes_across_kill9() {
    let n = cycles().div_ceil(2);
    let fig = run(n, false);
    assert_eq!(fig.cycles, n);
    assert_eq!((fig.lost, fig.invented), (0, 0));
    assert!(
        fig.covered_blocks > 0,
        "no covered write was checked: {fig:?}"
    );
}
