//! The NBD server's slow lane (`ServerOptions::slow_lane`, tierd's
//! `server.nbd-slow-lane`), over real TCP on 127.0.0.1: while every
//! thread it lets slow READs have (three quarters) waits on the slow
//! device, a WRITE and a READ of the fast part are still read off the
//! socket and answered; the slow READs past the lane queue and are all
//! served, with their data, also when the client sends DISC behind them.
//! Without the capability or the lane (the controls) the same client gets
//! no answer until the slow device moves, as before the lane.

mod nbd_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use nbd_support::*;

/// Reads from here on wait for the gate and are slow.
const SLOW_FROM: u64 = SIZE / 2;
/// Threads per connection in these tests (a lane of three).
const THREADS: usize = 4;

/// A [`MemExport`] whose reads past [`SLOW_FROM`] wait until the gate is
/// opened, counting how many wait at once and in what order they started.
struct GatedExport {
    mem: MemExport,
    /// Say which reads are slow ([`Export::read_is_slow`]).
    lane: bool,
    open: Mutex<bool>,
    opened: Condvar,
    waiting: AtomicUsize,
    most_waiting: AtomicUsize,
    started: Mutex<Vec<u64>>,
}

impl GatedExport {
    fn new(lane: bool) -> GatedExport {
        GatedExport {
            mem: MemExport::new(SIZE),
            lane,
            open: Mutex::new(true),
            opened: Condvar::new(),
            waiting: AtomicUsize::new(0),
            most_waiting: AtomicUsize::new(0),
            started: Mutex::new(Vec::new()),
        }
    }

    fn set_open(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.opened.notify_all();
    }

    fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

impl Export for GatedExport {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8], ctx: IoCtx) -> Result<(), ExportError> {
        if offset >= SLOW_FROM {
            if !ctx.may_block {
                return Err(ExportError::WouldBlock);
            }
            self.started.lock().unwrap().push(offset);
            let now = self.waiting.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_waiting.fetch_max(now, Ordering::SeqCst);
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            drop(open);
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
        self.mem.read(offset, buf, ctx)
    }
    fn read_is_slow(&self, offset: u64, _len: u64) -> bool {
        self.lane && offset >= SLOW_FROM
    }
    fn write(&self, offset: u64, data: &[u8], ctx: IoCtx) -> Result<(), ExportError> {
        self.mem.write(offset, data, ctx)
    }
    fn flush(&self) -> Result<(), ExportError> {
        self.mem.flush()
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError> {
        self.mem.trim(offset, len, fua)
    }
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        fast: bool,
        fua: bool,
    ) -> Result<(), ExportError> {
        self.mem.write_zeroes(offset, len, no_hole, fast, fua)
    }
    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        self.mem.cache(offset, len)
    }
    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<StatusRun>, ExportError> {
        self.mem.block_status(offset, len, max_runs)
    }
}

/// Four threads of the connection's own, or (`own` false) four of the
/// runtime's blocking threads.
fn options(own: bool) -> ServerOptions {
    if own {
        ServerOptions {
            threads: THREADS,
            slow_lane: true,
            ..opts()
        }
    } else {
        ServerOptions {
            threads: 0,
            max_in_flight: THREADS,
            slow_lane: true,
            ..opts()
        }
    }
}

fn slow_offset(i: u64) -> u64 {
    SLOW_FROM + i * 4096
}

/// Fill the slow part with a pattern per 4 KiB block (gate open).
async fn fill_slow_part(c: &mut Client, blocks: u64) {
    for i in 0..blocks {
        c.write(0, 1000 + i, slow_offset(i), &pattern(4096, i as u8))
            .await;
        assert_eq!(c.result(1000 + i).await.0, 0);
    }
}

/// Wait (a while at most) until `n` reads wait at the gate.
async fn until_waiting(export: &GatedExport, n: usize) {
    for _ in 0..500 {
        if export.waiting() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} reads wait at the gate, not {n}", export.waiting());
}

async fn flash_requests_pass_a_full_slow_lane(own: bool) {
    let export = Arc::new(GatedExport::new(true));
    let srv = start_with(export.clone(), options(own)).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, false).await;
        let slow = 10u64;
        fill_slow_part(&mut c, slow).await;
        export.set_open(false);
        for i in 0..slow {
            c.request(0, CMD_READ, i + 1, slow_offset(i), 4096).await;
        }
        // Every thread the lane may have (three of four, or one of two
        // before the pool grows on a one-CPU machine) waits on the gate.
        until_waiting(&export, 1).await;
        c.write(0, 100, 0, &pattern(4096, 7)).await;
        c.request(0, CMD_READ, 101, 0, 4096).await;
        // Both are answered while the slow reads still wait.
        let mut fast = vec![c.next_reply().await.cookie(), c.next_reply().await.cookie()];
        fast.sort_unstable();
        assert_eq!(fast, [100, 101], "the fast requests are answered first");
        let in_lane = export.waiting();
        assert!(
            (1..THREADS).contains(&in_lane),
            "{in_lane} slow reads wait: the lane leaves a thread free"
        );
        export.set_open(true);
        for i in 0..slow {
            assert_eq!(c.result(i + 1).await, (0, pattern(4096, i as u8)));
        }
        assert_eq!(c.read(102, 0, 4096).await, pattern(4096, 7));
    })
    .await;
    srv.shutdown().await;
    let mut started = export.started.lock().unwrap().clone();
    started.sort_unstable();
    let sent: Vec<u64> = (0..10).map(slow_offset).collect();
    // Each slow read ran once (the fill's writes read nothing). The order
    // they start in is not kept: reads with a place each run on a thread
    // of their own, in whatever order those threads get to the export
    // (the queue's own order is tested in src/nbd/lanes.rs).
    assert_eq!(started, sent, "every slow read ran once");
    assert!(export.most_waiting.load(Ordering::SeqCst) < THREADS);
}

#[tokio::test]
async fn flash_requests_pass_a_full_slow_lane_on_own_threads() {
    flash_requests_pass_a_full_slow_lane(true).await;
}

#[tokio::test]
async fn flash_requests_pass_a_full_slow_lane_on_runtime_threads() {
    flash_requests_pass_a_full_slow_lane(false).await;
}

/// The controls: an export that does not say which reads are slow, or a
/// server without the lane (the default), gets the old behaviour, every
/// thread on the gate and the WRITE unanswered.
#[tokio::test]
async fn without_the_capability_a_write_waits_behind_slow_reads() {
    write_waits_behind_slow_reads(Arc::new(GatedExport::new(false)), options(true)).await;
}

#[tokio::test]
async fn without_the_lane_a_write_waits_behind_slow_reads() {
    let no_lane = ServerOptions {
        slow_lane: false,
        ..options(true)
    };
    assert!(!ServerOptions::default().slow_lane, "off by default");
    write_waits_behind_slow_reads(Arc::new(GatedExport::new(true)), no_lane).await;
}

async fn write_waits_behind_slow_reads(export: Arc<GatedExport>, options: ServerOptions) {
    let srv = start_with(export.clone(), options).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, false).await;
        export.set_open(false);
        for i in 0..10u64 {
            c.request(0, CMD_READ, i + 1, slow_offset(i), 4096).await;
        }
        until_waiting(&export, 2).await;
        c.write(0, 100, 0, &pattern(4096, 7)).await;
        let early = tokio::time::timeout(Duration::from_millis(500), c.next_reply()).await;
        assert!(early.is_err(), "nothing is answered while the gate is shut");
        export.set_open(true);
        assert_eq!(c.result(100).await.0, 0);
        for i in 0..10u64 {
            assert_eq!(c.result(i + 1).await.0, 0);
        }
    })
    .await;
    srv.shutdown().await;
}

/// DISC behind queued slow reads: every one is still answered, then the
/// connection closes.
#[tokio::test]
async fn disc_answers_queued_slow_reads_first() {
    let export = Arc::new(GatedExport::new(true));
    let srv = start_with(export.clone(), options(true)).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, false).await;
        let slow = 8u64;
        fill_slow_part(&mut c, slow).await;
        export.set_open(false);
        for i in 0..slow {
            c.request(0, CMD_READ, i + 1, slow_offset(i), 4096).await;
        }
        c.request(0, CMD_DISC, 99, 0, 0).await;
        until_waiting(&export, 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        export.set_open(true);
        for i in 0..slow {
            assert_eq!(c.result(i + 1).await, (0, pattern(4096, i as u8)));
        }
        c.expect_closed().await;
    })
    .await;
    srv.shutdown().await;
}

/// A byte budget that fits the lane's three READs being served and a WRITE,
/// not the queue: a queued slow READ holds only its overhead, so the queue
/// does not stop the reader, and one taken up from the queue is served past
/// the budget if it must, rather than wait for bytes that queued READs hold.
#[tokio::test]
async fn a_queue_longer_than_the_byte_budget_is_served() {
    let export = Arc::new(GatedExport::new(true));
    let options = ServerOptions {
        max_request: 64 * 1024,
        max_in_flight_bytes: 300_000,
        ..options(true)
    };
    let srv = start_with(export.clone(), options).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, false).await;
        let slow = 24u64;
        fill_slow_part(&mut c, slow).await;
        export.set_open(false);
        // 24 reads of 64 KiB: 1.5 MiB asked of a budget of 300 kB.
        for i in 0..slow {
            c.request(0, CMD_READ, i + 1, SLOW_FROM + i * 65536, 65536)
                .await;
        }
        until_waiting(&export, 1).await;
        c.write(0, 100, 0, &pattern(4096, 9)).await;
        assert_eq!(c.next_reply().await.cookie(), 100, "the write passes");
        export.set_open(true);
        for i in 0..slow {
            let (errno, data) = c.result(i + 1).await;
            assert_eq!((errno, data.len()), (0, 65536), "read {i}");
        }
        assert_eq!(c.read(101, 0, 4096).await, pattern(4096, 9));
    })
    .await;
    srv.shutdown().await;
}
