//! Hostile input against the real daemon (`target/debug/tierd`) over raw
//! TCP: malformed handshakes (bad magic, unknown client flags, truncated
//! headers, huge and lying option lengths, garbage), malformed requests
//! (bad magic, out-of-range and overflowing offsets, unknown commands and
//! flags, payloads over 32 MiB, disconnects inside a payload, DISC with
//! requests in flight). Each gets the protocol's answer — an error reply
//! where the stream can continue, a closed connection where it cannot —
//! and after each case a fresh connection writes and reads correctly, so
//! the daemon neither panicked nor wedged. Idle and slow clients are cut
//! off by `--handshake-timeout` and cannot exhaust `--max-connections`;
//! `--read-only` refuses every write.
//!
//! tests/nbd_handshake.rs and tests/nbd_transmission.rs cover the same server against an in-memory
//! export (option replies, flag checks); this file covers the daemon as
//! deployed, and what a hostile peer does to its connections.

mod common;
mod raw_client;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use common::{random_bytes, Daemon, DaemonOptions, MIB};
use raw_client::*;

/// Cases tried, for docs/reliability.md.
static TRIED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn tried() {
    TRIED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

fn raw(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// Connected, greeting read, client flags sent: ready for options.
fn at_options(addr: &str) -> TcpStream {
    let mut s = raw(addr);
    read_greeting(&mut s).expect("greeting");
    s.write_all(&3u32.to_be_bytes()).expect("client flags");
    s
}

/// The server closes the connection (EOF or reset) within 15 s, after at
/// most some bytes of replies.
fn expect_closed(s: &mut TcpStream, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return
            }
            Err(e) => panic!("{what}: waiting for the server to close: {e}"),
        }
        assert!(Instant::now() < deadline, "{what}: server did not close");
    }
}

/// A fresh client can still write and read back.
fn still_serving(d: &Daemon, what: &str, seed: u64) {
    let mut c = Nbd::connect(&d.addr()).unwrap_or_else(|e| panic!("after {what}: connect: {e}"));
    let data = random_bytes(8192, seed);
    let off = 100 * MIB + seed % 64 * 8192;
    c.write(off, &data, false)
        .unwrap_or_else(|e| panic!("after {what}: write: {e:?}"));
    let back = c
        .read(off, 8192)
        .unwrap_or_else(|e| panic!("after {what}: read: {e:?}"));
    assert!(back == data, "after {what}: read back differs");
    c.disc().ok();
}

fn errno_of(r: RawResult<impl Sized>) -> u32 {
    match r {
        Err(RawError::Errno(e)) => e,
        Err(RawError::Io(e)) => panic!("connection failed instead of an errno: {e}"),
        Ok(_) => 0,
    }
}

#[test]
fn malformed_handshakes_are_refused_and_the_daemon_keeps_serving() {
    let d = Daemon::start_with(DaemonOptions::small());
    let addr = d.addr();
    let mut seed = 1;
    let mut check = |what: &str| {
        tried();
        still_serving(&d, what, seed);
        seed += 1;
    };

    // Unknown client flags: the server must close.
    let mut s = raw(&addr);
    read_greeting(&mut s).expect("greeting");
    s.write_all(&0xffff_fff0u32.to_be_bytes()).expect("flags");
    expect_closed(&mut s, "unknown client flags");
    check("unknown client flags");

    // Client flags cut short, then gone.
    let mut s = raw(&addr);
    read_greeting(&mut s).expect("greeting");
    s.write_all(&[0, 0]).expect("half flags");
    drop(s);
    check("truncated client flags");

    // Option with bad magic: cannot resync, close.
    let mut s = at_options(&addr);
    let mut bad = Vec::new();
    bad.extend_from_slice(b"NOTOPTS!");
    bad.extend_from_slice(&OPT_GO.to_be_bytes());
    bad.extend_from_slice(&0u32.to_be_bytes());
    s.write_all(&bad).expect("bad option");
    expect_closed(&mut s, "bad option magic");
    check("bad option magic");

    // Truncated option header, then gone.
    let mut s = at_options(&addr);
    s.write_all(&IHAVEOPT.to_be_bytes()[..6]).expect("partial");
    s.shutdown(Shutdown::Write).expect("shutdown");
    expect_closed(&mut s, "truncated option header");
    check("truncated option header");

    // Option length far beyond any limit: close without reading it.
    for len in [u32::MAX, 0x8000_0000, 2 * 1024 * 1024] {
        let mut s = at_options(&addr);
        send_option_raw(&mut s, OPT_INFO, len, &[]).expect("huge option");
        expect_closed(&mut s, "huge option length");
        check("huge option length");
    }

    // Long but bounded option: discarded, NBD_REP_ERR_TOO_BIG, go on.
    let mut s = at_options(&addr);
    let junk = random_bytes(200 * 1024, 5);
    send_option(&mut s, OPT_INFO, &junk).expect("long option");
    let (opt, typ, _) = read_option_reply(&mut s).expect("reply");
    assert_eq!((opt, typ), (OPT_INFO, REP_ERR_TOO_BIG));
    assert!(matches!(go(&mut s), Ok(Ok(_))), "GO after a refused option");
    check("long option");

    // Option that promises more payload than it sends, then hangs up.
    let mut s = at_options(&addr);
    send_option_raw(&mut s, OPT_GO, 1000, &[0, 0, 0, 0, 0, 0]).expect("lying option");
    s.shutdown(Shutdown::Write).expect("shutdown");
    expect_closed(&mut s, "option payload cut short");
    check("option payload cut short");

    // Unknown option: NBD_REP_ERR_UNSUP, payload consumed, go on.
    let mut s = at_options(&addr);
    send_option(&mut s, 0xdead_beef, &[1, 2, 3, 4, 5]).expect("unknown option");
    let (opt, typ, _) = read_option_reply(&mut s).expect("reply");
    assert_eq!((opt, typ), (0xdead_beef, REP_ERR_UNSUP));
    check("unknown option");

    // GO whose name length runs past its payload; INFO request count too.
    for payload in [
        vec![0, 0, 0x10, 0, b'a'],
        vec![0, 0, 0, 1, b'a', 0, 9, 0, 1],
        vec![0xff, 0xff, 0xff, 0xff],
        vec![0, 0, 0, 0],
    ] {
        let mut s = at_options(&addr);
        send_option(&mut s, OPT_GO, &payload).expect("malformed GO");
        let (opt, typ, _) = read_option_reply(&mut s).expect("reply");
        assert_eq!((opt, typ), (OPT_GO, REP_ERR_INVALID), "payload {payload:?}");
        assert!(matches!(go(&mut s), Ok(Ok(_))), "GO after a malformed one");
        check("malformed GO");
    }

    // GO for an export that does not exist: refused, connection stays.
    let mut s = at_options(&addr);
    send_option(&mut s, OPT_GO, &go_payload("no-such-export")).expect("GO");
    let (_, typ, _) = read_option_reply(&mut s).expect("reply");
    assert_eq!(typ, REP_ERR_UNKNOWN);
    check("unknown export via GO");

    // EXPORT_NAME for an unknown export: the only answer is to close.
    let mut s = at_options(&addr);
    send_option(&mut s, OPT_EXPORT_NAME, b"no-such-export").expect("EXPORT_NAME");
    expect_closed(&mut s, "unknown export via EXPORT_NAME");
    check("unknown export via EXPORT_NAME");

    // Random garbage right after the greeting.
    for k in 0..8 {
        let mut s = raw(&addr);
        read_greeting(&mut s).expect("greeting");
        let g = random_bytes(4096, 100 + k);
        // The server may close before reading it all.
        let _ = s.write_all(&g);
        expect_closed(&mut s, "garbage after the greeting");
        check("garbage after the greeting");
    }

    // Clients that connect and leave at every point of the handshake.
    for cut in [0usize, 5, 18] {
        let mut s = raw(&addr);
        let mut g = vec![0u8; cut];
        s.read_exact(&mut g).expect("greeting bytes");
        drop(s);
        check("disconnect during the greeting");
    }
    eprintln!(
        "handshake cases tried: {}",
        TRIED.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn malformed_requests_get_errors_and_the_daemon_keeps_serving() {
    let d = Daemon::start_with(DaemonOptions::small());
    let addr = d.addr();
    let mut seed = 1000;
    let mut check = |what: &str| {
        tried();
        still_serving(&d, what, seed);
        seed += 1;
    };
    let mut c = Nbd::connect(&addr).expect("connect");
    let size = c.size;
    let data = random_bytes(4096, 7);

    let cases: Vec<(&str, u16, u16, u64, u32, u32)> = vec![
        ("read past the end", 0, CMD_READ, size - 4096, 8192, EINVAL),
        ("read at the end", 0, CMD_READ, size, 1, EINVAL),
        (
            "read offset overflow",
            0,
            CMD_READ,
            u64::MAX - 100,
            4096,
            EINVAL,
        ),
        ("read at u64::MAX", 0, CMD_READ, u64::MAX, 1, EINVAL),
        (
            "read over 32 MiB",
            0,
            CMD_READ,
            0,
            32 * 1024 * 1024 + 1,
            EINVAL,
        ),
        ("read of 4 GiB - 1", 0, CMD_READ, 0, u32::MAX, EINVAL),
        ("trim past the end", 0, CMD_TRIM, size - 1, 2, EINVAL),
        ("trim overflow", 0, CMD_TRIM, u64::MAX, u32::MAX, EINVAL),
        (
            "zeroes overflow",
            0,
            CMD_WRITE_ZEROES,
            u64::MAX - 1,
            4096,
            ENOSPC,
        ),
        ("unknown command 42", 0, 42, 0, 4096, EINVAL),
        ("unknown command 0xffff", 0, 0xffff, 0, 0, EINVAL),
        ("read with unknown flag", 1 << 15, CMD_READ, 0, 4096, EINVAL),
        ("flush with all flags", 0xffff, CMD_FLUSH, 0, 0, EINVAL),
        ("trim with unknown flag", 1 << 12, CMD_TRIM, 0, 4096, EINVAL),
    ];
    for (what, flags, typ, offset, len, want) in cases {
        let cookie = c.send(flags, typ, offset, len, &[]).expect("send");
        let (errno, got) = c.reply().expect("reply");
        assert_eq!((errno, got), (want, cookie), "{what}");
        // The same connection goes on working.
        c.write(4096, &data, false)
            .expect("write after a refused request");
        assert_eq!(c.read(4096, 4096).expect("read"), data, "{what}");
        check(what);
    }

    // Writes with a payload: refused, the payload consumed, stream in sync.
    for (what, offset, want) in [
        ("write past the end", size - 100, ENOSPC),
        ("write offset overflow", u64::MAX - 10, ENOSPC),
    ] {
        assert_eq!(errno_of(c.write(offset, &data, false)), want, "{what}");
        assert_eq!(c.read(4096, 4096).expect("read"), data, "{what}");
        check(what);
    }
    let cookie = c
        .send(1 << 14, CMD_WRITE, 0, 4096, &data)
        .expect("write with unknown flag");
    assert_eq!(c.reply().expect("reply"), (EINVAL, cookie));
    check("write with unknown flag");

    // A write over 32 MiB: refused with EINVAL, its payload skipped.
    let big = vec![0xabu8; 33 * MIB as usize];
    assert_eq!(errno_of(c.write(0, &big, false)), EINVAL, "write of 33 MiB");
    assert_eq!(c.read(4096, 4096).expect("read"), data);
    assert_eq!(
        c.read(0, 4096).expect("read"),
        vec![0u8; 4096],
        "the oversized write must not have been applied"
    );
    check("write over 32 MiB");
    // Exactly 32 MiB is allowed.
    let max = random_bytes(32 * MIB as usize, 9);
    c.write(8 * MIB, &max, false).expect("32 MiB write");
    assert!(c.read(8 * MIB, 32 * MIB as u32).expect("read") == max);
    check("write of exactly 32 MiB");

    // A bad request magic: no way to resync, the server closes.
    let mut hdr = request(0, CMD_READ, 1, 0, 4096);
    hdr[0] = 0x00;
    c.s.write_all(&hdr).expect("bad magic");
    expect_closed(&mut c.s, "bad request magic");
    check("bad request magic");

    // Truncated request header, then gone.
    let mut c = Nbd::connect(&addr).expect("connect");
    c.s.write_all(&request(0, CMD_READ, 1, 0, 4096)[..13])
        .expect("partial header");
    c.s.shutdown(Shutdown::Write).expect("shutdown");
    expect_closed(&mut c.s, "truncated request header");
    check("truncated request header");

    // Disconnect in the middle of a write payload: nothing of it applied.
    let region = 50 * MIB;
    let mut c = Nbd::connect(&addr).expect("connect");
    c.write(region, &vec![0x11u8; MIB as usize], true)
        .expect("before");
    let hdr = request(0, CMD_WRITE, 99, region, MIB as u32);
    c.s.write_all(&hdr).expect("header");
    c.s.write_all(&vec![0x22u8; 100 * 1024])
        .expect("part of the payload");
    drop(c);
    check("disconnect inside a write payload");
    let mut c = Nbd::connect(&addr).expect("connect");
    assert!(
        c.read(region, MIB as u32).expect("read") == vec![0x11u8; MIB as usize],
        "a write whose payload never fully arrived must not be applied"
    );

    // Header promises a huge write, client sends a little and vanishes.
    let hdr = request(0, CMD_WRITE, 98, 0, 32 * MIB as u32);
    c.s.write_all(&hdr).expect("header");
    c.s.write_all(&[1u8; 1000]).expect("a little");
    drop(c);
    check("huge write payload cut short");

    // DISC with requests in flight: every one is answered, then close.
    let mut c = Nbd::connect(&addr).expect("connect");
    let mut cookies = Vec::new();
    for i in 0..32u64 {
        let block = random_bytes(65536, 500 + i);
        cookies.push(
            c.send(0, CMD_WRITE, 60 * MIB + i * 65536, 65536, &block)
                .expect("pipelined write"),
        );
    }
    cookies.push(c.send(0, CMD_FLUSH, 0, 0, &[]).expect("flush"));
    c.disc().expect("disc");
    let mut answered = Vec::new();
    for _ in 0..cookies.len() {
        let (errno, cookie) = c.reply().expect("reply to an in-flight request");
        assert_eq!(errno, 0);
        answered.push(cookie);
    }
    answered.sort_unstable();
    assert_eq!(answered, cookies, "every request before DISC is answered");
    expect_closed(&mut c.s, "after DISC");
    check("DISC with requests in flight");
    let mut c = Nbd::connect(&addr).expect("connect");
    for i in 0..32u64 {
        assert!(
            c.read(60 * MIB + i * 65536, 65536).expect("read") == random_bytes(65536, 500 + i),
            "write {i} sent before DISC was not applied"
        );
    }

    // A client that sends requests but never reads its replies, then
    // leaves: the daemon must not hang or grow without bound.
    let mut s = Nbd::connect(&addr).expect("connect");
    s.s.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("write timeout");
    for _ in 0..4000 {
        if s.send(0, CMD_READ, 0, 1 << 20, &[]).is_err() {
            break; // the server stopped reading: backpressure works
        }
    }
    drop(s);
    check("requests without reading replies");

    // Garbage in the transmission phase.
    let mut c = Nbd::connect(&addr).expect("connect");
    let _ = c.s.write_all(&random_bytes(64 * 1024, 77));
    expect_closed(&mut c.s, "garbage requests");
    check("garbage requests");
    eprintln!(
        "bad inputs tried so far: {}",
        TRIED.load(std::sync::atomic::Ordering::Relaxed)
    );
}

#[test]
fn idle_and_slow_clients_are_timed_out_and_cannot_exhaust_the_daemon() {
    let mut opts = DaemonOptions::small();
    opts.extra_args = vec![
        "--handshake-timeout".into(),
        "1s".into(),
        "--max-connections".into(),
        "4".into(),
    ];
    let d = Daemon::start_with(opts);
    let addr = d.addr();

    // An idle client is dropped after the handshake timeout.
    let mut idle = raw(&addr);
    let t = Instant::now();
    read_greeting(&mut idle).expect("greeting");
    expect_closed(&mut idle, "idle client");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(6),
        "idle client closed after {took:?}, expected about 1 s"
    );
    tried();

    // A slowloris dribbling one byte at a time is dropped too.
    let mut slow = raw(&addr);
    read_greeting(&mut slow).expect("greeting");
    let t = Instant::now();
    let flags = 3u32.to_be_bytes();
    let opt = IHAVEOPT.to_be_bytes();
    let mut cut = false;
    for b in flags.iter().chain(opt.iter()) {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    if !cut {
        expect_closed(&mut slow, "slowloris");
    }
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "slowloris kept its slot"
    );
    tried();

    // Four idle clients take every slot: a fifth waits in the backlog (no
    // greeting), and is served once the idle ones time out.
    let hogs: Vec<TcpStream> = (0..4).map(|_| raw(&addr)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = raw(&addr);
    fifth
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let mut g = [0u8; 18];
    assert!(
        fifth.read_exact(&mut g).is_err(),
        "a fifth client got a greeting while 4 of 4 slots were taken"
    );
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let t = Instant::now();
    fifth
        .read_exact(&mut g)
        .expect("greeting once the hogs time out");
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(fifth);
    drop(hogs);
    tried();
    // After all that, a real client works.
    still_serving(&d, "connection-limit exhaustion", 4242);

    // A client in the transmission phase is not subject to the handshake
    // timeout: idle for longer, then it still works.
    let mut c = Nbd::connect(&addr).expect("connect");
    std::thread::sleep(Duration::from_millis(1500));
    c.write(0, &[5u8; 4096], false).expect("write after idling");
    assert_eq!(c.read(0, 4096).expect("read"), vec![5u8; 4096]);
}

#[test]
fn read_only_daemon_refuses_every_write_and_serves_reads() {
    let mut d = Daemon::start_with(DaemonOptions::small());
    {
        let mut c = Nbd::connect(&d.addr()).expect("connect");
        c.write(0, &[7u8; 8192], true)
            .expect("write before read-only");
        c.disc().ok();
    }
    d.terminate();
    // The same devices and metadata, now served read-only.
    let data = d.data_dir().to_path_buf();
    let mut opts = DaemonOptions::small();
    opts.extra_args = vec!["--read-only".into()];
    for (flag, name) in [
        ("--ssd", "ssd.img"),
        ("--hdd", "hdd.img"),
        ("--meta-dir", "meta"),
    ] {
        opts.extra_args.push(flag.into());
        opts.extra_args.push(data.join(name).display().to_string());
    }
    let ro = Daemon::start_with(opts);
    let mut c = Nbd::connect(&ro.addr()).expect("connect");
    assert_ne!(
        c.flags & FLAG_READ_ONLY,
        0,
        "NBD_FLAG_READ_ONLY not advertised"
    );
    assert_eq!(errno_of(c.write(0, &[1u8; 4096], false)), EPERM);
    assert_eq!(errno_of(c.trim(0, 4096)), EPERM);
    assert_eq!(errno_of(c.zeroes(0, 4096)), EPERM);
    assert_eq!(
        c.read(0, 8192).expect("read"),
        vec![7u8; 8192],
        "data written before"
    );
    c.flush().expect("flush is harmless on a read-only export");
    tried();
}

#[test]
fn tls_settings_refuse_to_serve_in_the_clear() {
    // Unusable TLS files must stop the start, naming the file, never
    // silently serve unencrypted (tests/tls.rs covers working TLS).
    let dir = common::tempdir();
    let pem = dir.path().join("cert.pem");
    common::write(&pem, b"-----BEGIN CERTIFICATE-----\n");
    let out = common::run(
        std::process::Command::new(common::tierd_bin())
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
            .args(["--ssd-size", "64MiB", "--hdd-size", "256MiB"])
            .arg("--tls-cert")
            .arg(&pem)
            .arg("--tls-key")
            .arg(&pem),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "tierd served with TLS settings:\n{err}"
    );
    assert!(
        err.contains("cannot set up NBD TLS") && err.contains("cert.pem"),
        "{err}"
    );
    // A half configuration is refused by validation, naming the key.
    let out = common::run(
        std::process::Command::new(common::tierd_bin())
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path().join("data2"))
            .arg("--tls-cert")
            .arg(&pem),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("tls-key"), "{err}");
}
