//! The NBD client the remote capacity tier uses (`tierd::nbd::client`),
//! against tierd's own server on a Unix socket: transfers at any offset, many threads at once, a server that goes away and comes back
//! (requests fail within the timeout, then succeed again), and the writes
//! acknowledged since the last flush sent again to a server that lost them,
//! and to one whose failed flush dropped them; a server that stops reading
//! fails a write within the timeout instead of holding it forever.
//! The same client against nbdkit, through the volume, is in
//! tests/remote_tier.rs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tierd::nbd::client::{Client, ClientOptions, Endpoint, Target};
use tierd::nbd::{Export, ExportError, IoCtx, MemExport, Server, ServerOptions, StatusRun};
use tokio::sync::oneshot;

const SIZE: u64 = 8 << 20;

/// A tierd NBD server over a memory export on a Unix socket, on its own
/// runtime, that can be stopped and started again on the same path.
struct Remote {
    rt: tokio::runtime::Runtime,
    path: PathBuf,
    stop: Option<(
        oneshot::Sender<()>,
        tokio::task::JoinHandle<std::io::Result<()>>,
    )>,
}

impl Remote {
    fn new(path: &Path) -> Remote {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        Remote {
            rt,
            path: path.to_path_buf(),
            stop: None,
        }
    }

    fn start(&mut self, export: Arc<dyn Export>) {
        let _ = std::fs::remove_file(&self.path);
        let listener = self
            .rt
            .block_on(async { tokio::net::UnixListener::bind(&self.path) })
            .expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let server = Server::new(export, ServerOptions::default());
        let task = self.rt.spawn(async move {
            server
                .serve_unix(listener, async {
                    let _ = rx.await;
                })
                .await
        });
        self.stop = Some((tx, task));
    }

    fn stop(&mut self) {
        if let Some((tx, task)) = self.stop.take() {
            let _ = tx.send(());
            self.rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), task).await })
                .expect("server stops")
                .expect("join")
                .expect("serve");
        }
        let _ = std::fs::remove_file(&self.path);
    }

    fn target(&self) -> Target {
        Target {
            endpoint: Endpoint::Unix(self.path.clone()),
            export: String::new(),
            tls_name: None,
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn opts(timeout: Duration) -> ClientOptions {
    ClientOptions {
        timeout,
        ..ClientOptions::default()
    }
}

#[test]
fn reads_and_writes_at_any_offset_and_refuses_past_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut remote = Remote::new(&dir.path().join("s"));
    let mem = Arc::new(MemExport::new(SIZE));
    remote.start(mem.clone());
    let c = Client::connect(remote.target(), opts(Duration::from_secs(10))).expect("connects");
    assert_eq!(c.size(), SIZE);
    // 5 MiB at an odd offset, in one request.
    let data = pattern(5 << 20, 7);
    c.write_at(&data, 4096 + 17).expect("write");
    c.flush().expect("flush");
    let mut back = vec![0u8; data.len()];
    c.read_at(&mut back, 4096 + 17).expect("read");
    assert!(back == data, "read back what was written");
    let e = c
        .read_at(&mut [0u8; 2], SIZE - 1)
        .expect_err("past the end");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("past the end"), "{e}");
    remote.stop();
}

#[test]
fn many_threads_share_one_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut remote = Remote::new(&dir.path().join("s"));
    remote.start(Arc::new(MemExport::new(SIZE)));
    let c = Arc::new(
        Client::connect(remote.target(), opts(Duration::from_secs(10))).expect("connects"),
    );
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let off = (u64::from(t) * 50 + i) * 16384;
                    let d = pattern(16384, t ^ i as u8);
                    c.write_at(&d, off).expect("write");
                    let mut b = vec![0u8; d.len()];
                    c.read_at(&mut b, off).expect("read");
                    assert!(b == d, "thread {t} request {i} read its own write");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    remote.stop();
}

#[test]
fn a_server_away_fails_requests_within_the_timeout_and_is_used_again_when_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut remote = Remote::new(&dir.path().join("s"));
    let mem = Arc::new(MemExport::new(SIZE));
    remote.start(mem.clone());
    let c = Client::connect(remote.target(), opts(Duration::from_millis(1500))).expect("connects");
    c.write_at(&pattern(4096, 1), 0).expect("write");
    c.flush().expect("flush");
    remote.stop();
    let t = Instant::now();
    let e = c.read_at(&mut [0u8; 4096], 0).expect_err("server away");
    let took = t.elapsed();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("did not answer"), "{e}");
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(8),
        "failed after {took:?}, the timeout is 1.5 s"
    );
    assert!(!c.connected());
    remote.start(mem);
    let mut b = vec![0u8; 4096];
    c.read_at(&mut b, 0)
        .expect("read after the server came back");
    assert!(b == pattern(4096, 1));
    assert!(c.connected());
    remote.stop();
}

#[test]
fn writes_since_the_last_flush_reach_a_server_that_lost_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut remote = Remote::new(&dir.path().join("s"));
    remote.start(Arc::new(MemExport::new(SIZE)));
    let c = Client::connect(remote.target(), opts(Duration::from_secs(10))).expect("connects");
    let flushed = pattern(8192, 3);
    c.write_at(&flushed, 0).expect("write");
    c.flush().expect("flush");
    let unflushed = pattern(12288, 9);
    c.write_at(&unflushed, 1 << 20).expect("write");
    // The server restarts with an empty disk: it lost its cache, and with
    // it everything not flushed (and, here, the flushed data too, so the
    // test can tell what was sent again).
    remote.stop();
    let fresh = Arc::new(MemExport::new(SIZE));
    remote.start(fresh);
    c.flush()
        .expect("the flush covers the write from before the reconnection");
    let mut b = vec![0u8; unflushed.len()];
    c.read_at(&mut b, 1 << 20).expect("read");
    assert!(b == unflushed, "the unflushed write was sent again");
    let mut b = vec![0u8; flushed.len()];
    c.read_at(&mut b, 0).expect("read");
    assert!(
        b.iter().all(|&x| x == 0),
        "a flushed write is not sent again"
    );
    remote.stop();
}

/// A disk behind a volatile write cache whose failed flush drops what it
/// held, as Linux does with the dirty pages of a failed fsync: a later
/// flush then succeeds without them.
struct DroppingCache {
    disk: Arc<MemExport>,
    cache: Mutex<Vec<(u64, Vec<u8>)>>,
    fail_next_flush: AtomicBool,
}

impl Export for DroppingCache {
    fn size(&self) -> u64 {
        self.disk.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8], ctx: IoCtx) -> Result<(), ExportError> {
        self.disk.read(offset, buf, ctx)?;
        for (at, data) in self.cache.lock().expect("cache").iter() {
            let (start, end) = (
                (*at).max(offset),
                (at + data.len() as u64).min(offset + buf.len() as u64),
            );
            if start < end {
                let (b, d) = ((start - offset) as usize, (start - at) as usize);
                let n = (end - start) as usize;
                buf[b..b + n].copy_from_slice(&data[d..d + n]);
            }
        }
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], ctx: IoCtx) -> Result<(), ExportError> {
        self.cache
            .lock()
            .expect("cache")
            .push((offset, data.to_vec()));
        if ctx.fua {
            self.flush()?;
        }
        Ok(())
    }
    fn flush(&self) -> Result<(), ExportError> {
        let held = std::mem::take(&mut *self.cache.lock().expect("cache"));
        if self.fail_next_flush.swap(false, Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(5).into());
        }
        for (at, data) in held {
            self.disk.write(at, &data, IoCtx::blocking())?;
        }
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError> {
        self.flush()?;
        self.disk.trim(offset, len, fua)
    }
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        fast: bool,
        fua: bool,
    ) -> Result<(), ExportError> {
        self.flush()?;
        self.disk.write_zeroes(offset, len, no_hole, fast, fua)
    }
    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        self.disk.cache(offset, len)
    }
    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<StatusRun>, ExportError> {
        self.disk.block_status(offset, len, max_runs)
    }
}

#[test]
fn writes_a_failed_flush_dropped_are_sent_again_before_the_next_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut remote = Remote::new(&dir.path().join("s"));
    let disk = Arc::new(MemExport::new(SIZE));
    let server = Arc::new(DroppingCache {
        disk: disk.clone(),
        cache: Mutex::new(Vec::new()),
        fail_next_flush: AtomicBool::new(false),
    });
    remote.start(server.clone());
    let c = Client::connect(remote.target(), opts(Duration::from_secs(10))).expect("connects");
    let data = pattern(16384, 5);
    c.write_at(&data, 1 << 20).expect("write");
    server.fail_next_flush.store(true, Ordering::SeqCst);
    assert!(c.flush().is_err(), "the server's failed flush is an error");
    c.flush().expect("a later flush");
    let mut b = vec![0u8; data.len()];
    disk.read(1 << 20, &mut b, IoCtx::blocking())
        .expect("read the disk");
    assert!(
        b == data,
        "the write the failed flush dropped is on the server's disk after the next flush"
    );
    remote.stop();
}

/// A server that negotiates an export on a Unix socket and then never reads
/// another byte, holding the connection open until `done` is dropped.
fn server_that_stops_reading(
    path: &Path,
) -> (std::thread::JoinHandle<()>, std::sync::mpsc::Sender<()>) {
    use std::io::{Read, Write};
    use tierd::nbd::proto;
    let listener = std::os::unix::net::UnixListener::bind(path).expect("bind");
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.write_all(&proto::encode_server_greeting(
            proto::FLAG_FIXED_NEWSTYLE | proto::FLAG_NO_ZEROES,
        ))
        .expect("greeting");
        let mut flags = [0u8; 4];
        s.read_exact(&mut flags).expect("client flags");
        let mut h = [0u8; proto::OPTION_HEADER_LEN];
        s.read_exact(&mut h).expect("option header");
        let opt = proto::parse_option_header(&h).expect("option");
        assert_eq!(opt.option, proto::OPT_GO);
        let mut data = vec![0u8; opt.len as usize];
        s.read_exact(&mut data).expect("GO's data");
        let mut out = Vec::new();
        let info = proto::encode_info_export(SIZE, proto::FLAG_HAS_FLAGS | proto::FLAG_SEND_FLUSH);
        proto::encode_option_reply(&mut out, proto::OPT_GO, proto::REP_INFO, &info);
        proto::encode_option_reply(&mut out, proto::OPT_GO, proto::REP_ACK, &[]);
        s.write_all(&out).expect("GO's replies");
        // From here on nothing is read; the listener stays open, so a
        // reconnection is accepted by the kernel and never answered.
        let _ = wait.recv();
        drop((s, listener));
    });
    (t, done)
}

#[test]
fn a_server_that_stops_reading_fails_a_write_within_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s");
    let (server, done) = server_that_stops_reading(&path);
    let target = Target {
        endpoint: Endpoint::Unix(path),
        export: String::new(),
        tls_name: None,
    };
    let timeout = Duration::from_secs(2);
    let c = Arc::new(Client::connect(target, opts(timeout)).expect("connects"));
    let (tx, rx) = std::sync::mpsc::channel();
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || {
            // Far more than a socket buffer holds: the send blocks.
            let data = vec![7u8; 4 << 20];
            let start = Instant::now();
            let r = c.write_at(&data, 0);
            let _ = tx.send((r.is_err(), start.elapsed()));
        })
    };
    let (failed, took) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the write returned instead of hanging on the stalled send");
    assert!(failed, "a write the server never read is an error");
    assert!(took < Duration::from_secs(15), "it failed after {took:?}");
    writer.join().expect("writer");
    drop(done);
    server.join().expect("server");
}

#[test]
fn a_missing_export_or_server_is_a_clear_error_at_connect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut remote = Remote::new(&dir.path().join("s"));
    let missing = Client::connect(remote.target(), opts(Duration::from_secs(2)))
        .err()
        .expect("nothing listens")
        .to_string();
    assert!(missing.contains("cannot reach"), "{missing}");
    remote.start(Arc::new(MemExport::new(SIZE)));
    let mut t = remote.target();
    t.export = "nope".into();
    let e = Client::connect(t, opts(Duration::from_secs(2)))
        .err()
        .expect("no such export")
        .to_string();
    assert!(e.contains("refused export \"nope\""), "{e}");
    remote.stop();
}
