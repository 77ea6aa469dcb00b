//! A write the write log would take but that finds it full waits for room
//! (outside every lock) for at most what such a write took in place on
//! the HDD, then goes in place as before; room that write-back frees
//! meanwhile takes it. It waits only while the log is pressed: three
//! quarters full (then until below half) with no user reading from the
//! HDD; then write-back runs beside the users' writes, not only while the
//! HDD is free of users. Beside users' reads nothing changes: writes go in
//! place at once and write-back waits for idle time.

mod support;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use tierd::clock::{Clock, ManualClock};
use tierd::device::{BlockDevice, MemDevice};
use tierd::units::IoHint;
use tierd::volume::{Devices, Stats, Tier, Volume, VolumeOptions};

const BLK: u64 = 4096;

/// A manual clock that runs a hook (once) the next time a thread sleeps
/// on it: what a waiting write sees happen while it waits.
#[derive(Default)]
struct HookClock {
    manual: ManualClock,
    hook: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    sleeps: AtomicU64,
}

impl Clock for HookClock {
    fn now(&self) -> Duration {
        self.manual.now()
    }
    fn unix_secs(&self) -> u64 {
        self.manual.unix_secs()
    }
    fn sleep(&self, d: Duration) {
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        self.manual.advance(d);
        let hook = self.hook.lock().expect("hook").take();
        if let Some(h) = hook {
            h();
        }
    }
}

/// An HDD whose every write takes 20 ms on the clock.
struct SlowHdd {
    inner: Arc<MemDevice>,
    clock: Arc<HookClock>,
}

impl BlockDevice for SlowHdd {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.clock.manual.advance(Duration::from_millis(20));
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn name(&self) -> String {
        "slow-hdd".into()
    }
}

/// A write hint past the test beds' sequential cutoff (4 extents): a
/// stream's write to HDD data goes in place.
const STREAM: IoHint = IoHint {
    seq_run: 4 * EXTENT + 1,
};

struct Rig {
    vol: Arc<Volume>,
    clock: Arc<HookClock>,
    model: Vec<u8>,
}

/// 24 SSD slots (16 of them reserve: the log holds at most 14 segments
/// of 16 places), 64 HDD slots, the HDD slow to write (20 ms); extents
/// 0..32 on the HDD.
fn rig() -> Rig {
    let bed = Bed::new(24, 64, 16);
    let clock = Arc::new(HookClock::default());
    let devices = Devices {
        ssd: bed.ssd.clone() as Arc<dyn BlockDevice>,
        hdd: Arc::new(SlowHdd {
            inner: bed.hdd.clone(),
            clock: clock.clone(),
        }) as Arc<dyn BlockDevice>,
    };
    let opts = VolumeOptions {
        heat: bed.heat,
        clock: clock.clone(),
        ..Default::default()
    };
    let vol = Arc::new(Volume::open_with(devices, bed.store.clone(), opts).expect("open"));
    let mut model = model_of(&vol);
    for e in 0..32 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    assert_eq!(vol.log_usage().cap, 14);
    Rig { vol, clock, model }
}

fn stat(vol: &Volume, f: impl Fn(&Stats) -> &AtomicU64) -> u64 {
    Stats::get(f(vol.stats()))
}

/// Fill the log: one block at a time into extents 0..31 until a write
/// finds no room (the first such write waits for nothing: nothing tells
/// yet what going in place costs; it goes there and that measures it).
/// Returns how many writes were made.
fn fill_log(r: &mut Rig) -> u64 {
    let mut n = 0;
    'fill: for b in 0..EXTENT / BLK {
        for e in 0..31 {
            if stat(&r.vol, |s| &s.log_full) > 0 {
                break 'fill;
            }
            put(
                &r.vol,
                &mut r.model,
                e * EXTENT + b * BLK,
                &pattern(1000 + e * 16 + b, BLK as usize),
            );
            n += 1;
        }
    }
    n
}

#[test]
fn a_write_finding_the_log_full_waits_its_in_place_time_then_goes_in_place() {
    let mut r = rig();
    let taken = fill_log(&mut r);
    assert_eq!(
        taken,
        14 * 16 + 1,
        "224 places, then the write that found none"
    );
    let vol = r.vol.clone();
    // The first write that found no room went in place without a wait.
    assert_eq!(stat(&vol, |s| &s.log_waits), 0);
    assert_eq!(stat(&vol, |s| &s.log_full), 1);
    // Not pressed (a user reads the HDD): the next goes in place at once.
    assert!(!vol.log_pressed(false));
    let t0 = r.clock.now();
    put(
        &vol,
        &mut r.model,
        30 * EXTENT + 14 * BLK,
        &pattern(4, BLK as usize),
    );
    assert_eq!(stat(&vol, |s| &s.log_waits), 0);
    assert_eq!(stat(&vol, |s| &s.log_full), 2);
    assert_eq!(r.clock.now() - t0, Duration::from_millis(20));
    // Pressed (no reads; the migrator's look): the next waits what those
    // took in place (20 ms), no room comes, and it goes in place too: 20
    // ms of waiting, then 20 ms of writing.
    assert!(vol.log_pressed(true));
    let sleeps0 = r.clock.sleeps.load(Ordering::Relaxed);
    let t0 = r.clock.now();
    put(
        &vol,
        &mut r.model,
        30 * EXTENT + 15 * BLK,
        &pattern(5, BLK as usize),
    );
    assert_eq!(stat(&vol, |s| &s.log_waits), 1);
    assert_eq!(stat(&vol, |s| &s.log_wait_timeouts), 1);
    assert_eq!(stat(&vol, |s| &s.log_wait_ns), 20_000_000);
    assert_eq!(stat(&vol, |s| &s.log_full), 3);
    assert!(r.clock.sleeps.load(Ordering::Relaxed) > sleeps0);
    assert_eq!(r.clock.now() - t0, Duration::from_millis(40));
    assert_reads(&vol, &r.model, "after the writes in place");
    // A write into a block the log holds needs no room: no wait.
    put(&vol, &mut r.model, 0, &pattern(7, BLK as usize));
    assert_eq!(stat(&vol, |s| &s.log_waits), 1);
    // Nor does a stream's write (the log leaves those to the HDD).
    vol.write_hinted(31 * EXTENT, &pattern(8, 4 * BLK as usize), false, STREAM)
        .expect("stream write");
    r.model[(31 * EXTENT) as usize..(31 * EXTENT + 4 * BLK) as usize]
        .copy_from_slice(&pattern(8, 4 * BLK as usize));
    assert_eq!(stat(&vol, |s| &s.log_waits), 1);
    assert_reads(&vol, &r.model, "after a rewrite of a logged block");
}

#[test]
fn a_write_waiting_for_room_takes_what_write_back_frees_meanwhile() {
    let mut r = rig();
    fill_log(&mut r);
    let vol = r.vol.clone();
    assert_eq!(logged_blocks(&vol, 0).len(), 8);
    assert!(vol.log_pressed(true), "full, no reads, in place measured");
    // While the next write waits (it holds no lock: the write-back takes
    // extent 0's), extent 0's logged blocks go home.
    let wb = vol.clone();
    *r.clock.hook.lock().expect("hook") = Some(Box::new(move || {
        let out = write_back(&wb, &[0]);
        assert!(
            matches!(out[..], [(0, tierd::volume::MoveOutcome::Moved(_))]),
            "{out:?}"
        );
    }));
    let full = stat(&vol, |s| &s.log_full);
    let at = 5 * EXTENT + 15 * BLK;
    assert!(logged_blocks(&vol, 5).len() < 16);
    put(&vol, &mut r.model, at, &pattern(4242, BLK as usize));
    assert!(r.clock.hook.lock().expect("hook").is_none(), "the hook ran");
    assert!(logged_blocks(&vol, 0).is_empty());
    assert!(
        logged_blocks(&vol, 5).contains(&15),
        "the write took the freed room"
    );
    assert_eq!(stat(&vol, |s| &s.log_full), full, "not in place");
    assert_eq!(stat(&vol, |s| &s.log_waits), 1);
    assert_eq!(stat(&vol, |s| &s.log_wait_timeouts), 0);
    assert_reads(&vol, &r.model, "after the wait");
    assert_accounting(&vol, 24 + 64);
    // The data survives a flush and a look from a fresh read.
    vol.flush().expect("flush");
    assert_reads(&vol, &r.model, "after a flush");
}

#[test]
fn a_pressed_log_goes_back_beside_users_until_half_empty() {
    let mut r = rig();
    let vol = r.vol.clone();
    r.model[(31 * EXTENT) as usize..(31 * EXTENT + 4 * BLK) as usize]
        .copy_from_slice(&pattern(31, 4 * BLK as usize));
    let cfg = tierd::migrate::MigrateConfig {
        bandwidth: tierd::units::ByteSize(0),
        admission: false,
        ..tierd::migrate::MigrateConfig::default()
    };
    let m = tierd::migrate::Migrator::new(vol.clone(), vol.heat(), cfg);
    // A user writes the HDD in place just before each round (a stream's
    // write), or reads it.
    let busy_round = |r: &Rig, read: bool| {
        r.clock.manual.advance(Duration::from_secs(1));
        if read {
            let mut buf = vec![0u8; BLK as usize];
            r.vol.read(31 * EXTENT, &mut buf).expect("read");
        } else {
            r.vol
                .write_hinted(31 * EXTENT, &pattern(31, 4 * BLK as usize), false, STREAM)
                .expect("stream write");
        }
        m.run_round()
    };
    // Before any write found the log full, nothing says what going in
    // place costs: a full log is not pressed.
    'fill: for b in 0..EXTENT / BLK {
        for e in 0..31 {
            if vol.log_usage().used >= 224 {
                break 'fill;
            }
            put(
                &vol,
                &mut r.model,
                e * EXTENT + b * BLK,
                &pattern(e * 16 + b, BLK as usize),
            );
        }
    }
    assert!(!vol.log_pressed(true));
    let rep = busy_round(&r, false);
    assert_eq!(rep.written_back, 0, "{rep:?}");
    // A write finds it full and goes in place (20 ms): now it is pressed,
    // but not beside a user's reads: those come first.
    put(
        &vol,
        &mut r.model,
        30 * EXTENT + 15 * BLK,
        &pattern(3, BLK as usize),
    );
    assert_eq!(stat(&vol, |s| &s.log_full), 1);
    let rep = busy_round(&r, true);
    assert_eq!(rep.written_back, 0, "{rep:?}");
    assert!(!vol.log_pressing());
    // Beside a user's writes, a round writes it back to below half, not
    // empty.
    let rep = busy_round(&r, false);
    assert!(rep.written_back > 0, "{rep:?}");
    let used = vol.log_usage().used;
    assert!(used * 2 < 224, "written back to below half: {used}");
    assert!(used > 0, "not emptied beside users: {used}");
    assert!(!vol.log_pressing());
    // Back up to 160 of 224 (under three quarters): not pressed, and the
    // log waits for the HDD to be free of users again.
    'more: for b in 0..EXTENT / BLK {
        for e in 0..31 {
            if vol.log_usage().used >= 160 {
                break 'more;
            }
            if logged_blocks(&vol, e).contains(&(b as u32)) {
                continue;
            }
            put(
                &vol,
                &mut r.model,
                e * EXTENT + b * BLK,
                &pattern(500 + e * 16 + b, BLK as usize),
            );
        }
    }
    let rep = busy_round(&r, false);
    assert_eq!(rep.written_back, 0, "{rep:?}");
    assert_eq!(vol.log_usage().used, 160);
    assert!(!vol.log_pressing());
    assert_reads(&vol, &r.model, "after write-back beside users");
    assert_eq!(
        vol.usage().mapped[Tier::Hdd.index()],
        32,
        "nothing moved but the log"
    );
}

/// An HDD whose every write takes 2 ms of real time.
struct RealSlowHdd(Arc<MemDevice>);

impl BlockDevice for RealSlowHdd {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::thread::sleep(Duration::from_millis(2));
        self.0.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.sync()
    }
    fn name(&self) -> String {
        "real-slow-hdd".into()
    }
}

#[test]
fn the_write_back_thread_drains_a_pressed_log_beside_a_writer() {
    let bed = Bed::new(24, 64, 16);
    let devices = Devices {
        ssd: bed.ssd.clone() as Arc<dyn BlockDevice>,
        hdd: Arc::new(RealSlowHdd(bed.hdd.clone())) as Arc<dyn BlockDevice>,
    };
    // The real clock: the thread runs in real time, as in the daemon.
    let opts = VolumeOptions {
        heat: bed.heat,
        ..Default::default()
    };
    let vol = Arc::new(Volume::open_with(devices, bed.store.clone(), opts).expect("open"));
    let mut model = model_of(&vol);
    for e in 0..32 {
        hdd_extent(&vol, &mut model, e, 0, &pattern(e, EXTENT as usize));
    }
    // No round within the test (the first comes after an hour): only the
    // write-back thread can write the log back.
    let cfg = tierd::migrate::MigrateConfig {
        bandwidth: tierd::units::ByteSize(0),
        admission: false,
        interval: Duration::from_secs(3600),
        ..tierd::migrate::MigrateConfig::default()
    };
    let m = Arc::new(tierd::migrate::Migrator::new(vol.clone(), vol.heat(), cfg));
    let handle = m.spawn().expect("spawn the migrator");
    // One writer, one new block at a time over extents 0..31, for at most
    // 30 s: the log fills, a write goes in place (2 ms: now it is pressed),
    // the thread writes it back beside the writer, and writes wait for the
    // room it frees.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut k = 0u64;
    let done = |v: &Volume| {
        stat(v, |s| &s.written_back_blocks) > 0
            && stat(v, |s| &s.log_waits) > 0
            && stat(v, |s| &s.log_writes) > 300
    };
    while !done(&vol) && std::time::Instant::now() < deadline {
        let (e, b) = (k % 31, (k / 31) % (EXTENT / BLK));
        put(
            &vol,
            &mut model,
            e * EXTENT + b * BLK,
            &pattern(7000 + k, BLK as usize),
        );
        k += 1;
    }
    handle.stop();
    assert!(
        done(&vol),
        "after {k} writes: written back {} blocks, {} writes waited, {} to the log (224 fill it)",
        stat(&vol, |s| &s.written_back_blocks),
        stat(&vol, |s| &s.log_waits),
        stat(&vol, |s| &s.log_writes)
    );
    assert_reads(&vol, &model, "after write-back beside the writer");
    assert_accounting(&vol, 24 + 64);
}
