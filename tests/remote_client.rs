//! The NBD client the remote capacity tier uses (`tierd::nbd::client`),
//! against tierd's own server on a Unix socket: transfers at any offset, many threads at once, a server that goes away and comes back
//! (requests fail within the timeout, then succeed again), and the writes
//! acknowledged since the last flush sent again to a server that lost them.
//! The same client against nbdkit, through the volume, is in
//! tests/remote_tier.rs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tierd::nbd::client::{Client, ClientOptions, Endpoint, Target};
use tierd::nbd::{Export, MemExport, Server, ServerOptions};
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

    fn start(&mut self, export: Arc<MemExport>) {
        let _ = std::fs::remove_file(&self.path);
        let listener = self
            .rt
            .block_on(async { tokio::net::UnixListener::bind(&self.path) })
            .expect("bind");
        let (tx, rx) = oneshot::channel::<()>();
        let export: Arc<dyn Export> = export;
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
