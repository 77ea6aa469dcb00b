//! An independent NBD client against a real tierd process: the `nbd` crate's
//! blocking client (fixed newstyle, `NBD_OPT_EXPORT_NAME` with the 124 zero
//! bytes, simple replies, one request in flight) writes, reads back and
//! verifies data, across a reconnect and a SIGTERM restart of the daemon.
//!
//! Needs the daemon binary: `cargo build --workspace` (or set TIERD_BIN).

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nbd::client::{handshake, NbdClient};

const MIB: u64 = 1024 * 1024;

fn tierd_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TIERD_BIN") {
        return PathBuf::from(p);
    }
    // target/debug/deps/<test binary> -> target/debug/tierd
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    dir.join(format!("tierd{}", std::env::consts::EXE_SUFFIX))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// A running `tierd serve`; killed on drop unless stopped with SIGTERM.
struct Tierd {
    child: Option<Child>,
    port: u16,
}

impl Tierd {
    fn start(data_dir: &Path) -> Tierd {
        let bin = tierd_bin();
        assert!(
            bin.is_file(),
            "no tierd binary at {}: build it first: cargo build --workspace",
            bin.display()
        );
        let port = free_port();
        let mut child = Command::new(&bin)
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--ssd-size", "64MiB", "--hdd-size", "256MiB"])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(["--log-level", "info"])
            .env_remove("RUST_LOG")
            .env_remove("TIERD_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", bin.display()));

        // Forward the log lines; signal once tierd is listening.
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("tierd: {line}");
                if line.contains("serving NBD over TCP") {
                    let _ = tx.send(());
                }
            }
        });
        let mut t = Tierd {
            child: Some(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if rx.recv_timeout(Duration::from_millis(100)).is_ok() {
                return t;
            }
            if let Some(status) = t.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("tierd exited before listening: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "tierd did not listen within 60 s"
            );
        }
    }

    fn connect(&self) -> (NbdClient<TcpStream>, u64) {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to tierd");
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let export = handshake(&mut s, b"").expect("nbd crate handshake with tierd");
        assert!(!export.readonly, "tierd exports read-write");
        assert!(export.send_flush, "tierd advertises NBD_CMD_FLUSH");
        let size = export.size;
        (NbdClient::new(s, &export), size)
    }

    /// SIGTERM and wait for the exit status.
    fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: plain kill(2) on the pid of our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("tierd did not exit within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tierd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Deterministic, position-dependent bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write_at(c: &mut NbdClient<TcpStream>, off: u64, data: &[u8]) {
    c.seek(SeekFrom::Start(off)).unwrap();
    // The crate's client sends the whole buffer as one NBD_CMD_WRITE.
    c.write_all(data)
        .unwrap_or_else(|e| panic!("write {} bytes at {off}: {e}", data.len()));
}

fn read_at(c: &mut NbdClient<TcpStream>, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xA5; len];
    c.seek(SeekFrom::Start(off)).unwrap();
    c.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("read {len} bytes at {off}: {e}"));
    buf
}

#[test]
fn nbd_crate_client_writes_and_reads_back_through_tierd() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let tierd = Tierd::start(tmp.path());
    let (mut c, size) = tierd.connect();
    assert!(
        (128 * MIB..=320 * MIB).contains(&size) && size % 4096 == 0,
        "unexpected export size {size} for 64 MiB SSD + 256 MiB HDD"
    );

    // (offset, length, seed): block-aligned, unaligned, across an extent
    // boundary, a multi-extent request, and the last bytes of the export.
    let writes: Vec<(u64, usize, u64)> = vec![
        (0, 4096, 1),
        (MIB + 512, 1000, 2),
        (2 * MIB - 4096, 8192, 3),
        (5 * MIB + 4096, (3 * MIB) as usize, 4),
        (size - 4096, 4096, 5),
    ];
    // Never written: reads as zeroes.
    assert_eq!(read_at(&mut c, 40 * MIB, 64 * 1024), vec![0; 64 * 1024]);

    for &(off, len, seed) in &writes {
        write_at(&mut c, off, &pattern(seed, len));
    }
    for &(off, len, seed) in &writes {
        assert!(
            read_at(&mut c, off, len) == pattern(seed, len),
            "data at {off}+{len} differs from what was written"
        );
    }
    // Bytes around a small unaligned write keep their old (zero) value.
    let around = read_at(&mut c, MIB, 2048);
    assert_eq!(&around[..512], &[0; 512][..]);
    assert_eq!(&around[512..1512], &pattern(2, 1000)[..]);
    assert_eq!(&around[1512..], &[0; 536][..]);
    // Overwrite part of an earlier write.
    write_at(&mut c, 5 * MIB + 4096 + 100, &pattern(6, 300));
    let mut expect = pattern(4, 4096);
    expect[100..400].copy_from_slice(&pattern(6, 300));
    assert_eq!(read_at(&mut c, 5 * MIB + 4096, 4096), expect);
    c.flush().expect("NBD_CMD_FLUSH");
    drop(c);

    // A second connection sees the same data.
    let (mut c, size2) = tierd.connect();
    assert_eq!(size2, size);
    assert_eq!(read_at(&mut c, size - 4096, 4096), pattern(5, 4096));
    drop(c);

    // SIGTERM: clean exit; a restart on the same data dir serves the data.
    let status = tierd.stop();
    assert!(
        status.success(),
        "tierd exit status after SIGTERM: {status}"
    );
    let tierd = Tierd::start(tmp.path());
    let (mut c, size3) = tierd.connect();
    assert_eq!(size3, size);
    for &(off, len, seed) in &writes[..3] {
        assert!(
            read_at(&mut c, off, len) == pattern(seed, len),
            "data at {off}+{len} lost across a restart"
        );
    }
    assert_eq!(read_at(&mut c, 5 * MIB + 4096, 4096), expect);
    assert_eq!(read_at(&mut c, size - 4096, 4096), pattern(5, 4096));
    drop(c);
    assert!(tierd.stop().success());
}
