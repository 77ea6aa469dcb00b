//! The SSD exposure bound on a real `tierd serve`: the SSD image dies
//! while the daemon runs, and nothing flushed more than the bound before
//! is lost.
//!
//! The daemon keeps its images and metadata store on a FUSE filesystem
//! (tests/power_fs) that can make one file fail every request with EIO, as
//! a dead disk does. Each trial starts a fresh daemon with
//! `durability.ssd-exposure` set; two writer connections write random runs
//! of 4 KiB blocks over their halves of a work area (about half the
//! capacity: new data on the SSD, writes into the write log over HDD
//! data, rewrites of SSD data), each sending FLUSH now and then and noting
//! when it was acknowledged. After a random time the writers stop and the
//! SSD image starts failing (the migrator, still running, meets the
//! failure wherever it is). A third connection then reads every block on
//! its own:
//! - a block whose newest write was acknowledged by a FLUSH more than the
//!   bound before the failure must read back that write;
//! - any block that reads at all must read its newest write (zeros if it
//!   was never written): never older data, never bytes no write wrote.
//!
//! `TIERD_CRASH_CYCLES` sets the number of trials (default 3; the
//! closing notes report runs of 100; `TIERD_SOAK_CYCLES`, from
//! `scripts/soak-crash-loop.sh --case ssd-loss`, runs a hundredth of it),
//! `TIERD_CRASH_SEED` the seed.

mod common;
mod durability_model;
mod power_fs;
mod raw_client;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};

use common::{env_u64, Daemon, DaemonOptions, MIB};
use durability_model::{block_bytes, block_id, BLOCK};
use power_fs::PowerFs;
use raw_client::{Nbd, RawError};

/// The bound the daemon keeps in these trials.
const BOUND: Duration = Duration::from_secs(3);
/// The work area: about half of the 16 + 64 − 4 MiB volume.
const AREA_BLOCKS: u64 = 40 * MIB / BLOCK;

/// Per block: its newest write's id (0: never written) and when a FLUSH
/// after that write's reply was acknowledged.
#[derive(Clone, Copy, Default)]
struct Block {
    id: u64,
    flushed: Option<Instant>,
}

/// A writer: random runs over `lo..hi`, a FLUSH after about one write in
/// ten, until `until`.
fn writer(
    addr: String,
    conn: u64,
    lo: u64,
    hi: u64,
    seed: u64,
    until: Instant,
    model: Arc<Mutex<Vec<Block>>>,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut c = Nbd::connect(&addr).unwrap_or_else(|e| panic!("writer {conn}: connect: {e}"));
    let mut seq = 0u64;
    let mut unflushed: Vec<u64> = Vec::new();
    let mut buf = vec![0u8; 16 * BLOCK as usize];
    while Instant::now() < until {
        let blocks = rng.gen_range(1..=16u64).min(hi - lo);
        let first = rng.gen_range(lo..=hi - blocks);
        seq += 1;
        let id = (seq << 8) | conn;
        let data = &mut buf[..(blocks * BLOCK) as usize];
        for k in 0..blocks {
            let s = (k * BLOCK) as usize;
            block_bytes(id, first + k, &mut data[s..s + BLOCK as usize]);
        }
        c.write(first * BLOCK, data, false)
            .unwrap_or_else(|e| panic!("writer {conn}: write: {e:?}"));
        {
            let mut m = model.lock();
            for b in first..first + blocks {
                m[b as usize] = Block { id, flushed: None };
            }
        }
        unflushed.extend(first..first + blocks);
        if rng.gen_bool(0.1) {
            c.flush()
                .unwrap_or_else(|e| panic!("writer {conn}: flush: {e:?}"));
            let now = Instant::now();
            let mut m = model.lock();
            for b in unflushed.drain(..) {
                // Only this writer writes its half: the newest write is
                // the one this FLUSH covers unless it already had one.
                let blk = &mut m[b as usize];
                blk.flushed.get_or_insert(now);
            }
        }
    }
}

#[derive(Default, Debug)]
struct Figures {
    trials: u64,
    /// Blocks flushed more than the bound before the SSD died (all must
    /// read back).
    covered: u64,
    /// Younger blocks that read back, and that read an error.
    younger_read: u64,
    younger_eio: u64,
}

fn config_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("loss.toml");
    let cfg = format!(
        r#"
[migrate]
interval = "200ms"

[durability]
ssd-exposure = "{}s"
"#,
        BOUND.as_secs()
    );
    std::fs::write(&p, cfg).expect("writing the test config");
    p
}

/// A daemon on fresh images `ssd-N.img`, `hdd-N.img` and store `meta-N` in
/// the power filesystem mounted at `mnt`.
fn start(dir: &std::path::Path, mnt: &std::path::Path, n: u64, cfg: &std::path::Path) -> Daemon {
    let mut opts = DaemonOptions {
        env: std::env::var("LOSS_LOG")
            .map(|v| vec![("RUST_LOG".to_string(), v)])
            .unwrap_or_default(),
        ssd_size: "16MiB".into(),
        hdd_size: "64MiB".into(),
        ..DaemonOptions::default()
    };
    let devices = [
        "--ssd".to_string(),
        mnt.join(format!("ssd-{n}.img")).display().to_string(),
        "--hdd".into(),
        mnt.join(format!("hdd-{n}.img")).display().to_string(),
        "--meta-dir".into(),
        mnt.join(format!("meta-{n}")).display().to_string(),
    ];
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
        dir.join(format!("control-{n}.sock")).display().to_string(),
    ]);
    Daemon::start_with(opts)
}

fn trial(
    n: u64,
    seed: u64,
    dir: &std::path::Path,
    mnt: &std::path::Path,
    fs: &PowerFs,
    cfg: &std::path::Path,
    fig: &mut Figures,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let d = start(dir, mnt, n, cfg);
    let model = Arc::new(Mutex::new(vec![Block::default(); AREA_BLOCKS as usize]));
    let until = Instant::now() + Duration::from_millis(rng.gen_range(4000..9000));
    let half = AREA_BLOCKS / 2;
    let writers: Vec<_> = (0..2u64)
        .map(|k| {
            let (addr, model, wseed) = (d.addr(), model.clone(), rng.gen());
            std::thread::spawn(move || {
                writer(addr, k + 1, k * half, (k + 1) * half, wseed, until, model)
            })
        })
        .collect();
    for w in writers {
        w.join().expect("a writer panicked");
    }
    // The SSD dies.
    let died = Instant::now();
    fs.fail(&format!("ssd-{n}.img"));
    let model = model.lock().clone();
    // What the daemon says the failure lost (migration paused first, so
    // nothing changes between the answer and the reads): exactly the
    // blocks that read an error.
    let sock = dir.join(format!("control-{n}.sock"));
    common::tierctl_ok(&sock, &["migrate", "pause"]);
    let lost: serde_json::Value = serde_json::from_str(&common::tierctl_ok(
        &sock,
        &["--json", "placement", "--ssd-only", "--max-runs", "1000000"],
    ))
    .expect("tierctl placement --ssd-only --json");
    let runs: Vec<(u64, u64)> = lost["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["offset"].as_u64().unwrap_or(0),
                r["len"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let is_lost = |b: u64| {
        runs.iter()
            .any(|&(at, n)| (at..at + n).contains(&(b * BLOCK)))
    };
    let mut c =
        Nbd::connect(&d.addr()).unwrap_or_else(|e| panic!("trial {n}: reader connect: {e}"));
    for (b, m) in model.iter().enumerate() {
        let b = b as u64;
        let read = c.read(b * BLOCK, BLOCK as u32);
        assert_eq!(
            read.is_err(),
            is_lost(b),
            "trial {n}: block {b} reads {}, yet tierctl placement --ssd-only {} it",
            if read.is_err() {
                "an error"
            } else {
                "its data"
            },
            if is_lost(b) { "lists" } else { "does not list" }
        );
        let covered = m
            .flushed
            .is_some_and(|f| died.saturating_duration_since(f) > BOUND);
        fig.covered += u64::from(covered);
        match read {
            Ok(got) => {
                let id = block_id(b, &got);
                assert_eq!(
                    id,
                    Some(m.id),
                    "trial {n} (seed {seed:#x}): block {b} reads {id:?}, its newest write is {:#x}",
                    m.id
                );
                fig.younger_read += u64::from(!covered);
            }
            Err(RawError::Errno(e)) => {
                assert!(
                    !covered,
                    "trial {n} (seed {seed:#x}): block {b} (write {:#x}) was flushed {:?} before the SSD died, yet reads errno {e}\n{}",
                    m.id,
                    died.saturating_duration_since(m.flushed.unwrap_or(died)),
                    d.log()
                );
                fig.younger_eio += 1;
            }
            Err(e) => panic!("trial {n}: reading block {b}: {e:?}"),
        }
    }
    // The reads met the failure: the status says so.
    let text = common::tierctl_ok(&sock, &["status"]);
    assert!(
        text.contains("the SSD has failed") && text.contains("placement --ssd-only"),
        "{text}"
    );
    fig.trials += 1;
    if std::env::var("LOSS_LOG").is_ok() {
        eprintln!("{}", d.log());
    }
    drop(c);
    drop(d);
    for f in [format!("ssd-{n}.img"), format!("hdd-{n}.img")] {
        let _ = std::fs::remove_file(mnt.join(f));
    }
    let _ = std::fs::remove_dir_all(mnt.join(format!("meta-{n}")));
}

#[test]
fn a_dying_ssd_loses_nothing_flushed_before_the_bound() {
    common::require_root("the failing filesystem (FUSE)");
    // The soak runs a hundredth of its cycles here (each trial takes
    // seconds); the model test takes the rest.
    let trials = env_u64("TIERD_SOAK_CYCLES")
        .map(|n| (n / 100).max(1))
        .or_else(|| env_u64("TIERD_CRASH_CYCLES"))
        .unwrap_or(3);
    let seed = env_u64("TIERD_CRASH_SEED").unwrap_or(0x55d_0055);
    eprintln!("SSD loss under a {BOUND:?} bound: {trials} trials, seed {seed:#x}");
    let dir = common::tempdir();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("creating the mount point");
    let fs = PowerFs::mount(&mnt);
    let cfg = config_file(dir.path());
    let mut fig = Figures::default();
    let started = Instant::now();
    for n in 0..trials {
        trial(
            n,
            seed.wrapping_add(n),
            dir.path(),
            &mnt,
            &fs,
            &cfg,
            &mut fig,
        );
    }
    eprintln!("{fig:?} in {:.0?}", started.elapsed());
    assert!(
        fig.covered > 0,
        "no block was flushed long enough before the failure"
    );
}
