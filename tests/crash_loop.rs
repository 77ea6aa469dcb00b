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
//! Now and then the client goes quiet for a few migration rounds, so the
//! migrator sees an idle volume and writes logged blocks back from the SSD
//! write log: the kills land in writes to HDD extents (the log), in
//! write-backs, promotions and demotions. After the loop the test asserts
//! that kills found blocks in the write log (read from a copy of the
//! metadata store) and that rounds wrote logged blocks back.
//!
//! A second test runs the same loop with the HDD tier on nbdkit (file
//! plugin) over NBD, half as many cycles.
//!
//! `TIERD_CRASH_CYCLES` (default 60) sets the number of kill cycles
//! (`TIERD_SOAK_CYCLES` too, for scripts/soak.sh and
//! scripts/soak-crash-loop.sh); `TIERD_CRASH_SEED` the seed (decimal or
//! `0x` hex; default fixed, printed at the start).

mod common;
mod durability_model;
mod raw_client;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use common::{env_u64, Daemon, DaemonOptions, MIB};
use durability_model::{block_bytes, block_id, explain_bytes, Model, BLOCK};
use raw_client::{Nbd, RawError};

/// Extents of the work area: more than the SSD holds, so some spill to the
/// HDD and the reserve keeps the migrator busy.
const AREA_EXTENTS: u64 = 96;
const BLOCKS_PER_EXTENT: u64 = MIB / BLOCK;
const AREA_BLOCKS: u64 = AREA_EXTENTS * BLOCKS_PER_EXTENT;
/// A hot set that starts on the HDD (written last) and gets promoted.
const HOT: std::ops::Range<u64> = 80..88;
/// Per request, the chance that the client goes quiet (once per cycle) for
/// [`QUIET`]: four migration rounds, so at least two see an idle volume.
const QUIET_CHANCE: f64 = 0.001;
const QUIET: Duration = Duration::from_millis(400);

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
    /// Kills that found blocks in the SSD write log (in the durable
    /// records), and how many blocks in all.
    kills_with_logged: u64,
    logged_at_kills: u64,
    /// Kills that found shadows recorded.
    kills_with_shadows: u64,
    /// Migration rounds that wrote logged blocks back.
    write_back_rounds: u64,
    /// Quiet spells of the client (idle rounds for the write-back).
    quiet_spells: u64,
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
) -> Result<(), String> {
    let deadline = Instant::now() + max;
    let mut buf = vec![0u8; 16 * BLOCK as usize];
    let mut quiet = false;
    while Instant::now() < deadline {
        if !quiet && rng.gen_bool(QUIET_CHANCE) {
            // The client goes quiet for a few migration rounds: the
            // migrator sees an idle foreground and writes logged blocks
            // back (the kill may well land in the middle of that).
            quiet = true;
            fig.quiet_spells += 1;
            std::thread::sleep(QUIET);
            continue;
        }
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
                            let bytes = &got[s..s + BLOCK as usize];
                            let found = block_id(b, bytes);
                            if found != Some(want) {
                                return Err(format!(
                                    "live read of blocks {blk}..{} (block {b} at {:#x}, extent {}): block {b} does not return its last write {want} but {}; pending writes since its flush: {:?}",
                                    blk + n,
                                    b * BLOCK,
                                    b / BLOCKS_PER_EXTENT,
                                    match found {
                                        Some(id) => format!("write {id}"),
                                        None => explain_bytes(b, bytes),
                                    },
                                    model.pending.get(&b),
                                ));
                            }
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match r {
            Ok(()) => {}
            Err(RawError::Io(_)) => return Ok(()), // the daemon died
            Err(RawError::Errno(e)) => {
                return Err(format!("request failed with errno {e} on a live daemon"))
            }
        }
    }
    Ok(())
}

/// Keep the daemon's files (images, metadata, log) of a failed cycle next
/// to the test binaries and fail with `why`, the cycle and the log's tail.
fn fail_keeping_evidence(d: &mut Daemon, cycle: u64, why: &str) -> ! {
    d.kill9();
    let log = d.log();
    let keep = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(|t| t.join("crash-loop-failure")))
        .unwrap_or_else(|| std::env::temp_dir().join("tierd-crash-loop-failure"));
    let _ = std::fs::remove_dir_all(&keep);
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(d.data_dir())
        .arg(&keep)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let tail: Vec<&str> = log.lines().rev().take(80).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    panic!(
        "cycle {cycle}: {why}\ndaemon files {} {}\nlast lines of the daemon log:\n{}",
        if copied {
            "kept in"
        } else {
            "could not be copied to"
        },
        keep.display(),
        tail.join("\n")
    );
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
    crash_loop(cycles, None);
}

/// The same loop with the HDD tier on a remote NBD export (nbdkit's file
/// plugin on 127.0.0.1): every kill also cuts the daemon's connection to
/// the remote, and the restarted daemon connects again.
#[test]
fn sigkill_with_the_hdd_tier_on_nbdkit_never_loses_flushed_data_or_invents_data() {
    let cycles = env_u64("TIERD_SOAK_CYCLES")
        .or_else(|| env_u64("TIERD_CRASH_CYCLES"))
        .map_or(25, |n| n / 2);
    let dir = common::tempdir();
    let image = dir.path().join("remote.img");
    common::sparse_file(&image, 256 * MIB);
    let remote = common::Nbdkit::start(&image, &[]);
    let args = common::format_on_remote(dir.path(), &remote.uri(), "64MiB", "16MiB", "1MiB");
    crash_loop(cycles, Some((args, dir.path().join("meta"))));
    drop(remote);
}

/// The crash loop; `remote` gives the `serve` arguments of a volume on a
/// remote HDD tier and its metadata directory.
fn crash_loop(cycles: u64, remote: Option<(Vec<String>, std::path::PathBuf)>) {
    let seed = env_u64("TIERD_CRASH_SEED").unwrap_or(0x7133_d0c4);
    eprintln!("crash loop: {cycles} cycles, seed {seed:#x} (TIERD_CRASH_SEED to replay)");
    let cfg_dir = common::tempdir();
    let cfg = config_file(cfg_dir.path());
    let mut opts = DaemonOptions::small();
    opts.log_level = "debug".into();
    opts.extra_args = vec!["--config".into(), cfg.display().to_string()];
    let meta = remote.as_ref().map(|(args, meta)| {
        opts.extra_args.extend(args.iter().cloned());
        meta.clone()
    });
    let mut d = Daemon::start_with(opts);
    let meta = meta.unwrap_or_else(|| d.data_dir().join("meta"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Model::default();
    let mut next_id = 1u64;
    let mut fig = Figures {
        cycles: 0,
        kills_with_logged: 0,
        logged_at_kills: 0,
        kills_with_shadows: 0,
        write_back_rounds: 0,
        quiet_spells: 0,
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
        let run = workload(
            &mut c,
            &mut model,
            &mut rng,
            &mut next_id,
            &mut fig,
            delay + Duration::from_secs(5),
        );
        armed.store(false, Ordering::SeqCst);
        if let Err(why) = run {
            killer.join().expect("killer thread");
            fail_keeping_evidence(&mut d, cycle, &why);
        }
        killer.join().expect("killer thread");
        drop(c);
        d.kill9();
        let log = d.log();
        let this_cycle = log.get(log_before..).unwrap_or("");
        moved_total += this_cycle.matches(" moved").count();
        fig.write_back_rounds += rounds_with(this_cycle, "written_back");
        let (logged, shadows) = recorded_states(&meta);
        fig.logged_at_kills += logged;
        fig.kills_with_logged += u64::from(logged > 0);
        fig.kills_with_shadows += u64::from(shadows > 0);
        d.restart();
        let mut c =
            Nbd::connect(&d.addr()).unwrap_or_else(|e| panic!("cycle {cycle}: reconnect: {e}"));
        verify(&mut c, &mut model, &mut fig, cycle);
        c.disc().ok();
        fig.cycles += 1;
    }
    d.terminate();
    eprintln!(
        "crash loop passed: {} kill cycles in {:.0?}; {} writes ({} FUA), {} trims, {} flushes, {} live reads checked; {} blocks verified after restarts; unflushed blocks after a kill: {} kept their last write, {} older; {} migrations logged; {} kills found blocks in the write log ({} in all), {} found shadows; {} rounds wrote logged blocks back ({} quiet spells)",
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
        moved_total,
        fig.kills_with_logged,
        fig.logged_at_kills,
        fig.kills_with_shadows,
        fig.write_back_rounds,
        fig.quiet_spells
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
    assert!(
        fig.kills_with_logged > 0,
        "no kill found a block in the SSD write log: writes to HDD extents were not exercised"
    );
    assert!(
        fig.write_back_rounds > 0,
        "no migration round wrote logged blocks back to the HDD"
    );
}

/// Debug lines of migration rounds in `log` whose `field` is not zero.
fn rounds_with(log: &str, field: &str) -> u64 {
    let pat = format!("{field}: ");
    log.lines()
        .filter(|l| l.contains("migration round"))
        .filter(|l| {
            l.split(&pat)
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > 0)
        })
        .count() as u64
}

/// Logged blocks and shadows in the extent records of the (stopped)
/// daemon's metadata store, read from a copy so the store itself is left
/// as the crash left it.
fn recorded_states(meta: &std::path::Path) -> (u64, u64) {
    fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).expect("creating the store copy");
        for e in std::fs::read_dir(from).expect("listing the metadata store") {
            let e = e.expect("store entry");
            let target = to.join(e.file_name());
            if e.file_type().expect("file type").is_dir() {
                copy_dir(&e.path(), &target);
            } else {
                std::fs::copy(e.path(), &target).expect("copying a store file");
            }
        }
    }
    let scratch = common::tempdir();
    let copy = scratch.path().join("meta");
    copy_dir(meta, &copy);
    let store = tierd::store::SledStore::open(&copy).expect("opening the store copy");
    let records =
        tierd::store::MetaStore::load_extents(&store).expect("loading the extent records");
    let (mut logged, mut shadows) = (0, 0);
    for (e, rec) in records {
        let m = tierd::volume::Mapping::decode(&rec, BLOCKS_PER_EXTENT as u32)
            .unwrap_or_else(|err| panic!("extent {e}: {err}"));
        logged += m.logged.len() as u64;
        shadows += u64::from(m.shadow.is_some());
    }
    (logged, shadows)
}
