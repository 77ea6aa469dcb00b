//! NBD transmission tests over real TCP sockets on 127.0.0.1: simple and
//! structured replies, the error table, block status, read-only exports,
//! bad request magic, out-of-order replies, disconnect and shutdown with
//! requests in flight, connection and in-flight limits, pipelining over many
//! connections, a duplex stream, and one `nbdinfo` interop check.
//!
//! The cases about errors, ordering, limits and shutdown run twice: on the
//! connection's own threads (the default), and with `threads = 0` on the
//! runtime's shared blocking threads (the module names keep the two loops
//! these once were).

mod nbd_support;

use nbd_support::*;
use tierd::nbd::RequestKind;

/// Generate one test per loop for each case `fn case(threads: usize)`.
macro_rules! on_both_loops {
    ($($case:ident),* $(,)?) => {
        mod threaded_loop {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::ServerOptions::default().threads).await
                }
            )*
        }
        mod async_loop {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(0).await
                }
            )*
        }
    };
}

on_both_loops!(
    errors_simple,
    errors_structured,
    replies_out_of_order,
    disc_answers_in_flight_requests_first,
    shutdown_finishes_in_flight_requests,
    tiny_in_flight_limits_still_progress,
    shutdown_answers_queued_requests_with_eshutdown,
    many_connections_and_pipelining,
    long_and_short_writes_interleaved,
    bad_request_magic_disconnects,
    client_vanishing_mid_request_frees_the_server,
    unix_socket_with_qemu_io,
    the_export_is_told_of_every_request_that_runs,
);

/// The test export served with `threads` per connection.
async fn start_on(threads: usize) -> Running {
    start_with(
        Arc::new(TestExport::new()),
        ServerOptions { threads, ..opts() },
    )
    .await
}

#[tokio::test]
async fn simple_replies_roundtrip() {
    let srv = start().await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, false).await;
        let data = pattern(70_000, 7);
        c.write(CMD_FLAG_FUA, 1, 4096, &data).await;
        assert_eq!(c.result(1).await.0, 0);
        assert_eq!(c.read(2, 4096, 70_000).await, data);
        let mut cookie = 3;
        let cases = [
            cmd("flush", 0, CMD_FLUSH, 0, 0, 0),
            cmd("flush with FUA", CMD_FLAG_FUA, CMD_FLUSH, 0, 0, 0),
            cmd("cache", 0, CMD_CACHE, 0, 65536, 0),
            cmd("zeroes", CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 4096, 100, 0),
        ];
        expect_errnos(&mut c, &mut cookie, &cases, false).await;
        let back = c.read(7, 4096, 200).await;
        assert_eq!(&back[..100], &[0u8; 100][..]);
        assert_eq!(&back[100..], &data[100..200]);
        assert_eq!(c.cmd(CMD_FLAG_FUA, CMD_TRIM, 8, 0, 128 * 1024).await, 0);
        assert_eq!(c.read(9, 4096, 70_000).await, vec![0u8; 70_000]);
        // FAST_ZERO passes through to the export, which refuses it here.
        assert_eq!(
            c.cmd(CMD_FLAG_FAST_ZERO, CMD_WRITE_ZEROES, 10, 0, 4096)
                .await,
            ENOTSUP
        );
        // Last byte of the export.
        c.write(0, 11, SIZE - 1, &[0xAB]).await;
        assert_eq!(c.result(11).await.0, 0);
        assert_eq!(c.read(12, SIZE - 1, 1).await, vec![0xAB]);
    })
    .await;
    srv.shutdown().await;
}

#[tokio::test]
async fn structured_replies_roundtrip() {
    let srv = start().await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, true).await;
        let data = pattern(8192, 3);
        c.write(0, 1, 65536, &data).await;
        let r = c.full_reply(1).await;
        assert_eq!(r.len(), 1);
        assert!(matches!(
            r[0],
            Reply::Chunk {
                typ: REPLY_TYPE_NONE,
                flags: REPLY_FLAG_DONE,
                ..
            }
        ));
        // READ: a single OFFSET_DATA chunk with DONE, also with DF.
        for (cookie, flags) in [(2, 0), (3, CMD_FLAG_DF)] {
            c.request(flags, CMD_READ, cookie, 65536, 8192).await;
            let r = c.full_reply(cookie).await;
            assert_eq!(r.len(), 1);
            let (flags, typ, payload) = only_chunk(&r);
            assert_eq!((flags, typ), (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA));
            assert_eq!(u64::from_be_bytes(payload[0..8].try_into().unwrap()), 65536);
            assert_eq!(&payload[8..], &data[..]);
        }
        // Block status over hole / data / hole.
        c.request(0, CMD_BLOCK_STATUS, 4, 0, 3 * 65536).await;
        let (e, p) = c.result(4).await;
        assert_eq!(e, 0);
        let (_, d) = descriptors(&p);
        assert_eq!(
            d,
            vec![
                (65536, STATE_HOLE | STATE_ZERO),
                (65536, 0),
                (65536, STATE_HOLE | STATE_ZERO)
            ]
        );
        // REQ_ONE: exactly one descriptor, within the request.
        c.request(CMD_FLAG_REQ_ONE, CMD_BLOCK_STATUS, 5, 0, 3 * 65536)
            .await;
        let (_, p) = c.result(5).await;
        assert_eq!(descriptors(&p).1, vec![(65536, STATE_HOLE | STATE_ZERO)]);
        // Unaligned query: clipped to the request length.
        c.request(0, CMD_BLOCK_STATUS, 6, 100, 1000).await;
        let (_, p) = c.result(6).await;
        assert_eq!(descriptors(&p).1, vec![(1000, STATE_HOLE | STATE_ZERO)]);
        // Whole export.
        c.request(0, CMD_BLOCK_STATUS, 7, 0, SIZE as u32).await;
        let (_, p) = c.result(7).await;
        let total: u64 = descriptors(&p).1.iter().map(|d| u64::from(d.0)).sum();
        assert_eq!(total, SIZE);
        // Errors come as ERROR chunks with a message.
        c.request(0, CMD_READ, 8, SIZE, 1).await;
        let r = c.full_reply(8).await;
        let (flags, typ, payload) = only_chunk(&r);
        assert_eq!((flags, typ), (REPLY_FLAG_DONE, REPLY_TYPE_ERROR));
        assert_eq!(
            u32::from_be_bytes(payload[0..4].try_into().unwrap()),
            EINVAL
        );
        assert!(payload.len() > 6, "error message present");
    })
    .await;
    srv.shutdown().await;
}

/// Every recoverable error returns its errno and leaves the connection usable.
async fn error_cases(structured: bool, threads: usize) {
    let small = ServerOptions {
        max_request: 64 * 1024,
        threads,
        ..opts()
    };
    let srv = start_with(Arc::new(TestExport::new()), small).await;
    let mut c = Client::ready(srv.addr, structured).await;
    c.write(0, 1, 0, b"marker").await;
    assert_eq!(c.result(1).await.0, 0);
    let mut cookie = 100;

    let cases = [
        cmd("read past end", 0, CMD_READ, SIZE - 10, 11, EINVAL),
        cmd("read offset overflow", 0, CMD_READ, u64::MAX - 1, 4, EINVAL),
        cmd("read too long", 0, CMD_READ, 0, 64 * 1024 + 1, EINVAL),
        cmd("trim past end", 0, CMD_TRIM, SIZE, 1, EINVAL),
        cmd("trim overflow", 0, CMD_TRIM, u64::MAX, 2, EINVAL),
        cmd("cache past end", 0, CMD_CACHE, SIZE, 4096, EINVAL),
        cmd("zeroes past end", 0, CMD_WRITE_ZEROES, SIZE - 1, 2, ENOSPC),
        cmd("zeroes overflow", 0, CMD_WRITE_ZEROES, u64::MAX, 1, ENOSPC),
        cmd(
            "block status past end",
            0,
            CMD_BLOCK_STATUS,
            SIZE,
            1,
            EINVAL,
        ),
        cmd(
            "block status zero length",
            0,
            CMD_BLOCK_STATUS,
            0,
            0,
            EINVAL,
        ),
        cmd("unknown command", 0, 99, 0, 0, EINVAL),
        cmd("resize", 0, CMD_RESIZE, 0, 0, EINVAL),
        cmd(
            "read with NO_HOLE",
            CMD_FLAG_NO_HOLE,
            CMD_READ,
            0,
            6,
            EINVAL,
        ),
        cmd(
            "trim with REQ_ONE",
            CMD_FLAG_REQ_ONE,
            CMD_TRIM,
            0,
            6,
            EINVAL,
        ),
        cmd("flush with unknown flag", 1 << 9, CMD_FLUSH, 0, 0, EINVAL),
        cmd(
            "zeroes with DF",
            CMD_FLAG_DF,
            CMD_WRITE_ZEROES,
            0,
            6,
            EINVAL,
        ),
        cmd(
            "block status with NO_HOLE",
            CMD_FLAG_NO_HOLE,
            CMD_BLOCK_STATUS,
            0,
            6,
            EINVAL,
        ),
        cmd("device read error", 0, CMD_READ, FAIL_AT, 512, EIO),
        cmd("export panic", 0, CMD_READ, PANIC_AT, 512, EIO),
    ];
    expect_errnos(&mut c, &mut cookie, &cases, true).await;
    if !structured {
        // DF needs structured replies; BLOCK_STATUS too.
        let cases = [
            cmd("DF without structured", CMD_FLAG_DF, CMD_READ, 0, 6, EINVAL),
            cmd(
                "block status without structured",
                0,
                CMD_BLOCK_STATUS,
                0,
                6,
                EINVAL,
            ),
        ];
        expect_errnos(&mut c, &mut cookie, &cases, true).await;
    }

    // Writes with a payload: the payload is consumed whatever the error.
    let payload = pattern(4096, 9);
    let cases = [
        write("write past end", 0, SIZE - 100, payload.clone(), ENOSPC),
        write(
            "write offset overflow",
            0,
            u64::MAX - 10,
            payload.clone(),
            ENOSPC,
        ),
        write(
            "write with REQ_ONE",
            CMD_FLAG_REQ_ONE,
            0,
            payload.clone(),
            EINVAL,
        ),
        write("device write error", 0, FAIL_AT, payload, EIO),
        // Larger than max_request: discarded in chunks, then EINVAL.
        write("oversized write", 0, 0, pattern(1024 * 1024 + 3, 1), EINVAL),
    ];
    expect_errnos(&mut c, &mut cookie, &cases, true).await;

    // Zero-length requests succeed (and do nothing), without payload...
    let cases = [
        write("zero-length write", 0, 0, Vec::new(), 0),
        cmd("zero-length read", 0, CMD_READ, 0, 0, 0),
        cmd("zero-length trim at the end", 0, CMD_TRIM, SIZE, 0, 0),
        cmd("zero-length zeroes", 0, CMD_WRITE_ZEROES, 0, 0, 0),
        cmd("zero-length cache", 0, CMD_CACHE, 0, 0, 0),
        // ...but not past the end.
        cmd(
            "zero-length read past the end",
            0,
            CMD_READ,
            SIZE + 1,
            0,
            EINVAL,
        ),
    ];
    expect_errnos(&mut c, &mut cookie, &cases, false).await;
    still_usable(&mut c, &mut cookie, "zero length").await;
    srv.shutdown().await;
}

async fn errors_simple(threads: usize) {
    with_timeout(error_cases(false, threads)).await;
}

async fn errors_structured(threads: usize) {
    with_timeout(error_cases(true, threads)).await;
}

#[tokio::test]
async fn block_status_needs_a_context() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;
    c.structured_reply().await;
    // SET that selects nothing.
    assert_eq!(c.set_meta(&[]).await.len(), 1);
    assert_eq!(c.go("", &[]).await.last().unwrap().typ, REP_ACK);
    assert_eq!(c.cmd(0, CMD_BLOCK_STATUS, 1, 0, 4096).await, EINVAL);
    assert_eq!(c.read(2, 0, 16).await, vec![0; 16]);
    srv.shutdown().await;
}

#[tokio::test]
async fn read_only_export() {
    let ro = ServerOptions {
        read_only: true,
        ..opts()
    };
    let mem = MemExport::new(SIZE);
    mem.write(0, b"ro-data", IoCtx::default()).unwrap();
    let srv = start_with(Arc::new(mem), ro).await;
    let mut c = Client::ready(srv.addr, false).await;
    assert_ne!(c.tflags & FLAG_READ_ONLY, 0);
    let mut cookie = 1;
    let cases = [
        write("write", 0, 0, pattern(5000, 1), EPERM),
        cmd("trim", 0, CMD_TRIM, 0, 4096, EPERM),
        cmd("zeroes", 0, CMD_WRITE_ZEROES, 0, 4096, EPERM),
        cmd("flush", 0, CMD_FLUSH, 0, 0, 0),
    ];
    expect_errnos(&mut c, &mut cookie, &cases, false).await;
    assert_eq!(c.read(cookie, 0, 7).await, b"ro-data");
    srv.shutdown().await;
}

async fn replies_out_of_order(threads: usize) {
    let srv = start_on(threads).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, true).await;
        let t0 = std::time::Instant::now();
        c.request(0, CMD_READ, 1, SLOW_AT, 4096).await;
        c.request(0, CMD_READ, 2, 0, 4096).await;
        // The fast read is answered first, well before the slow one is done.
        let first = c.next_reply().await;
        assert_eq!(first.cookie(), 2);
        assert!(t0.elapsed() < SLOW);
        let (e, d) = c.result(1).await;
        assert_eq!((e, d.len()), (0, 4096));
        assert!(t0.elapsed() >= SLOW);
    })
    .await;
    srv.shutdown().await;
}

async fn disc_answers_in_flight_requests_first(threads: usize) {
    let srv = start_on(threads).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, false).await;
        c.write(0, 1, SLOW_AT, b"slow").await;
        assert_eq!(c.result(1).await.0, 0);
        c.request(0, CMD_READ, 2, SLOW_AT, 4).await;
        c.request(0, CMD_READ, 3, SLOW_AT, 4).await;
        c.request(0, CMD_DISC, 4, 0, 0).await;
        assert_eq!(c.result(2).await, (0, b"slow".to_vec()));
        assert_eq!(c.result(3).await, (0, b"slow".to_vec()));
        c.expect_closed().await;
    })
    .await;
    srv.shutdown().await;
}

async fn shutdown_finishes_in_flight_requests(threads: usize) {
    // A loopback address of its own: the port freed at the end cannot be
    // taken by another test's 127.0.0.1:0 listener, which would accept the
    // final connect and make "no longer accepting" fail for no fault here.
    let bind = format!("127.83.{}.1:0", threads % 250);
    let srv = start_at(
        &bind,
        Arc::new(TestExport::new()),
        ServerOptions { threads, ..opts() },
    )
    .await;
    let mut c = Client::ready(srv.addr, false).await;
    // A second client still in the handshake is simply dropped.
    let mut idle = Client::greet(srv.addr, 3).await;
    c.request(0, CMD_READ, 1, SLOW_AT, 4096).await;
    // Let the server read the request before it is told to stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (task, addr) = srv.stop();
    assert_eq!(c.result(1).await, (0, vec![0; 4096]));
    c.expect_closed().await;
    idle.expect_closed().await;
    server_returns(task).await;
    // No longer accepting.
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn connection_limit() {
    let srv = start_with(
        Arc::new(MemExport::new(SIZE)),
        ServerOptions {
            max_connections: 1,
            ..opts()
        },
    )
    .await;
    let mut first = Client::ready(srv.addr, false).await;
    // The second connection waits in the backlog: no greeting yet.
    let mut second = Client::connect(srv.addr).await;
    let mut g = [0u8; 18];
    let early = tokio::time::timeout(Duration::from_millis(200), second.s.read_exact(&mut g)).await;
    assert!(early.is_err(), "second connection served beyond the limit");
    first.request(0, CMD_DISC, 1, 0, 0).await;
    first.expect_closed().await;
    tokio::time::timeout(Duration::from_secs(5), second.s.read_exact(&mut g))
        .await
        .expect("served once the first is gone")
        .unwrap();
    assert_eq!(&g[0..8], b"NBDMAGIC");
    srv.shutdown().await;
}

async fn tiny_in_flight_limits_still_progress(threads: usize) {
    let tight = ServerOptions {
        threads,
        max_in_flight: 1,
        max_in_flight_bytes: 1,
        max_request: 8192,
        ..opts()
    };
    let srv = start_with(Arc::new(TestExport::new()), tight).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, true).await;
        // Pipeline writes, reads, block status and errors without waiting.
        for i in 0..8u64 {
            c.write(0, i, i * 8192, &pattern(8192, i as u8)).await;
        }
        for i in 0..8u64 {
            c.request(0, CMD_READ, 10 + i, i * 8192, 8192).await;
        }
        c.request(0, CMD_BLOCK_STATUS, 20, 0, SIZE as u32).await;
        c.request(0, CMD_READ, 21, 0, 8193).await;
        for i in 0..8u64 {
            assert_eq!(c.result(i).await.0, 0);
        }
        for i in 0..8u64 {
            assert_eq!(c.result(10 + i).await, (0, pattern(8192, i as u8)));
        }
        assert_eq!(c.result(20).await.0, 0);
        assert_eq!(c.result(21).await.0, EINVAL);
    })
    .await;
    srv.shutdown().await;
}

async fn shutdown_answers_queued_requests_with_eshutdown(threads: usize) {
    let one = ServerOptions {
        threads,
        max_in_flight: 1,
        ..opts()
    };
    let srv = start_with(Arc::new(TestExport::new()), one).await;
    let mut c = Client::ready(srv.addr, false).await;
    c.request(0, CMD_READ, 1, SLOW_AT, 512).await;
    // Waits for the single in-flight slot.
    c.request(0, CMD_READ, 2, 0, 512).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (task, _) = srv.stop();
    assert_eq!(c.result(2).await.0, ESHUTDOWN);
    assert_eq!(c.result(1).await, (0, vec![0; 512]));
    c.expect_closed().await;
    server_returns(task).await;
}

/// Long WRITE payloads are received past the reader's buffer, and after
/// one the reader takes only a header at a time until a short request
/// comes: long and short writes sent back to back in one send, then reads
/// of them, all land where they belong.
async fn long_and_short_writes_interleaved(threads: usize) {
    let srv = start_on(threads).await;
    let addr = srv.addr;
    with_timeout(async move {
        let mut c = Client::ready(addr, true).await;
        // (offset, length): long, long, short, long, short, short, long.
        let writes: [(u64, usize); 7] = [
            (0, 256 * 1024),
            (256 * 1024, 300 * 1024 + 512),
            (600 * 1024, 4096),
            (640 * 1024, 40 * 1024),
            (700 * 1024, 512),
            (704 * 1024, 8192),
            (768 * 1024, 200 * 1024),
        ];
        // One send: headers and payloads arrive together, so the reader's
        // buffer holds the start of long payloads as well as whole short
        // requests.
        let mut wire = Vec::new();
        let req = |typ, cookie, offset, length| Request {
            flags: 0,
            typ,
            cookie,
            offset,
            length,
        };
        for (i, (offset, len)) in writes.iter().enumerate() {
            wire.extend_from_slice(&encode_request(&req(
                CMD_WRITE,
                i as u64,
                *offset,
                *len as u32,
            )));
            wire.extend_from_slice(&pattern(*len, i as u8 + 1));
        }
        c.s.write_all(&wire).await.expect("sending");
        for i in 0..writes.len() as u64 {
            assert_eq!(c.result(i).await.0, 0, "write {i}");
        }
        // The reads only once the writes are done (NBD orders nothing
        // between requests in flight), again in one send.
        wire.clear();
        for (i, (offset, len)) in writes.iter().enumerate() {
            wire.extend_from_slice(&encode_request(&req(
                CMD_READ,
                100 + i as u64,
                *offset,
                *len as u32,
            )));
        }
        c.s.write_all(&wire).await.expect("sending");
        for (i, (offset, len)) in writes.iter().enumerate() {
            let (e, d) = c.result(100 + i as u64).await;
            assert_eq!(e, 0, "read {i}");
            assert!(
                d == pattern(*len, i as u8 + 1),
                "write {i} at {offset}+{len}"
            );
        }
    })
    .await;
    srv.shutdown().await;
}

async fn many_connections_and_pipelining(threads: usize) {
    let srv = start_on(threads).await;
    let addr = srv.addr;
    with_timeout(async move {
        let mut tasks = Vec::new();
        for n in 0..16u64 {
            tasks.push(tokio::spawn(async move {
                let mut c = Client::ready(addr, n % 2 == 0).await;
                let base = n * 128 * 1024;
                // 32 pipelined writes, then 32 pipelined reads.
                for i in 0..32u64 {
                    c.write(0, i, base + i * 4096, &pattern(4096, (n + i) as u8))
                        .await;
                }
                for i in 0..32u64 {
                    assert_eq!(c.result(i).await.0, 0);
                }
                for i in 0..32u64 {
                    c.request(0, CMD_READ, 100 + i, base + i * 4096, 4096).await;
                }
                for i in (0..32u64).rev() {
                    let (e, d) = c.result(100 + i).await;
                    assert_eq!(e, 0);
                    assert_eq!(d, pattern(4096, (n + i) as u8));
                }
                c.request(0, CMD_DISC, 999, 0, 0).await;
                c.expect_closed().await;
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    srv.shutdown().await;
}

#[tokio::test]
async fn serve_stream_over_duplex() {
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let server = Server::new(Arc::new(MemExport::new(SIZE)), ServerOptions::default());
    let task = tokio::spawn(async move { server.serve_stream(server_side).await });
    let (mut r, mut w) = tokio::io::split(client_side);
    let mut g = [0u8; 18];
    r.read_exact(&mut g).await.unwrap();
    assert_eq!(&g[0..8], b"NBDMAGIC");
    w.write_u32(3).await.unwrap();
    let mut opt = Vec::new();
    opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
    opt.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes());
    w.write_all(&opt).await.unwrap();
    assert_eq!(r.read_u64().await.unwrap(), SIZE);
    let _flags = r.read_u16().await.unwrap();
    let req = |typ, cookie, length| {
        encode_request(&Request {
            flags: 0,
            typ,
            cookie,
            offset: 0,
            length,
        })
    };
    w.write_all(&req(CMD_WRITE, 1, 3)).await.unwrap();
    w.write_all(b"abc").await.unwrap();
    let mut rep = [0u8; 16];
    r.read_exact(&mut rep).await.unwrap();
    assert_eq!(rep, encode_simple_reply(0, 1));
    w.write_all(&req(CMD_READ, 2, 3)).await.unwrap();
    r.read_exact(&mut rep).await.unwrap();
    assert_eq!(rep, encode_simple_reply(0, 2));
    let mut d = [0u8; 3];
    r.read_exact(&mut d).await.unwrap();
    assert_eq!(&d, b"abc");
    w.write_all(&req(CMD_DISC, 3, 0)).await.unwrap();
    task.await.unwrap().unwrap();
}

/// Interop check with libnbd's `nbdinfo`, when installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbdinfo_interop() {
    // scripts/test.sh installs nbdinfo; without it this test fails, never skips.
    let version = std::process::Command::new("nbdinfo")
        .arg("--version")
        .output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "nbdinfo is not installed (libnbd-bin): run scripts/test.sh, which installs it"
    );
    let mem = MemExport::new(SIZE);
    mem.write(65536, &[1u8; 65536], IoCtx::default()).unwrap();
    let srv = start_with(Arc::new(mem), opts()).await;
    let uri = format!("nbd://127.0.0.1:{}/disk", srv.addr.port());

    let out = tokio::process::Command::new("nbdinfo")
        .args(["--json", &uri])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = &json["exports"][0];
    assert_eq!(export["export-size"], SIZE);
    assert_eq!(export["is_read_only"], false);
    assert_eq!(export["can_multi_conn"], true);

    let out = tokio::process::Command::new("nbdinfo")
        .args(["--map", &uri])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // offset, length, type: hole, data, hole.
    assert_eq!(rows.len(), 3, "{map}");
    assert_eq!(&rows[0][..3], &["0", "65536", "3"]);
    assert_eq!(&rows[1][..3], &["65536", "65536", "0"]);
    assert_eq!(rows[2][0], "131072");
    assert_eq!(rows[2][2], "3");
    srv.shutdown().await;
}

async fn bad_request_magic_disconnects(threads: usize) {
    let srv = start_on(threads).await;
    let mut c = Client::ready(srv.addr, false).await;
    assert_eq!(c.read(1, 0, 8).await, vec![0; 8]);
    let mut hdr = encode_request(&Request {
        flags: 0,
        typ: CMD_READ,
        cookie: 2,
        offset: 0,
        length: 8,
    });
    hdr[0] ^= 0xff;
    c.s.write_all(&hdr).await.unwrap();
    c.expect_closed().await;
    srv.shutdown().await;
}

/// A client that disappears with a slow request in flight and half a write
/// payload sent: the connection's threads end, and the server still serves
/// and shuts down at once.
async fn client_vanishing_mid_request_frees_the_server(threads: usize) {
    let srv = start_on(threads).await;
    with_timeout(async {
        let mut gone = Client::ready(srv.addr, true).await;
        gone.request(0, CMD_READ, 1, SLOW_AT, 4096).await;
        let hdr = encode_request(&Request {
            flags: 0,
            typ: CMD_WRITE,
            cookie: 2,
            offset: 0,
            length: 8192,
        });
        gone.s.write_all(&hdr).await.unwrap();
        gone.s.write_all(&[7u8; 100]).await.unwrap();
        drop(gone);
        let mut c = Client::ready(srv.addr, false).await;
        c.write(0, 3, 4096, b"still here").await;
        assert_eq!(c.result(3).await.0, 0);
        assert_eq!(c.read(4, 4096, 10).await, b"still here");
        // The half-sent write never reached the export.
        assert_eq!(c.read(5, 0, 100).await, vec![0; 100]);
    })
    .await;
    let (task, _) = srv.stop();
    server_returns(task).await;
}

/// A Unix-socket listener (what `tierd serve --unix` uses), driven by
/// qemu-io: pipelined writes, a read-back with a pattern check, a flush.
async fn unix_socket_with_qemu_io(threads: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nbd.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let server = Server::new(
        Arc::new(MemExport::new(SIZE)),
        ServerOptions { threads, ..opts() },
    );
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .serve_unix(listener, async {
                let _ = rx.await;
            })
            .await
    });
    let uri = format!("nbd+unix:///disk?socket={}", path.display());
    let out = tokio::process::Command::new("qemu-io")
        .args(["-f", "raw", &uri])
        .args([
            "-c",
            "aio_write -P 0xab 0 64k",
            "-c",
            "aio_write -P 0xcd 64k 64k",
        ])
        .args(["-c", "aio_flush", "-c", "flush"])
        .args(["-c", "read -P 0xab 0 64k", "-c", "read -P 0xcd 64k 64k"])
        .output()
        .await
        .expect("qemu-io runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{uri}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("Pattern verification failed"), "{text}");
    assert_eq!(text.matches("read 65536/65536 bytes").count(), 2, "{text}");
    let _ = tx.send(());
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("server stops")
        .expect("join")
        .expect("serve_unix");
}

/// Plain TCP connections are served by the connection's own threads by
/// default, and by the runtime's shared threads with `threads = 0`.
#[tokio::test]
async fn threads_option_picks_the_loop() {
    for (threads, want) in [(16, true), (0, false)] {
        let export = Arc::new(TestExport::new());
        let srv = start_with(export.clone(), ServerOptions { threads, ..opts() }).await;
        let mut c = Client::ready(srv.addr, true).await;
        for i in 0..4 {
            assert_eq!(c.read(i, i * 4096, 16).await, vec![0; 16]);
        }
        srv.shutdown().await;
        let seen = export.read_threads.lock().unwrap().clone();
        assert_eq!(seen.len(), 4);
        assert!(
            seen.iter().all(|(n, _)| (n == "tierd-nbd") == want),
            "threads = {threads}: reads ran on {seen:?}"
        );
    }
}

/// The threaded loop's pool: requests that wait off the CPU (a slow device)
/// grow it to the configured count, so that they are served side by side.
#[tokio::test]
async fn waiting_requests_grow_the_thread_pool() {
    let threads = 12;
    let export = Arc::new(TestExport {
        read_sleep: Duration::from_millis(20),
        ..TestExport::new()
    });
    let srv = start_with(export.clone(), ServerOptions { threads, ..opts() }).await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, true).await;
        // Rounds of pipelined reads, each round as deep as the pool may be.
        for round in 0..8u64 {
            for i in 0..threads as u64 {
                c.request(0, CMD_READ, round * 100 + i, i * 4096, 512).await;
            }
            for i in 0..threads as u64 {
                assert_eq!(c.result(round * 100 + i).await, (0, vec![0; 512]));
            }
        }
    })
    .await;
    srv.shutdown().await;
    assert_eq!(
        export.read_thread_count(),
        threads,
        "the pool reached its full count"
    );
}

/// [`ExportConn::request`] hears of every request that runs, in the order
/// sent, with its kind, range and FUA flag; a refused request (out of
/// range) and DISC are not among them.
async fn the_export_is_told_of_every_request_that_runs(threads: usize) {
    let export = Arc::new(TestExport::new());
    let server = start_with(
        Arc::clone(&export) as Arc<dyn Export>,
        ServerOptions { threads, ..opts() },
    )
    .await;
    let mut c = Client::ready(server.addr, true).await;
    c.write(CMD_FLAG_FUA, 1, 4096, &pattern(8192, 3)).await;
    assert_eq!(c.result(1).await.0, 0);
    assert_eq!(c.read(2, 4096, 512).await.len(), 512);
    assert_eq!(c.cmd(0, CMD_FLUSH, 3, 0, 0).await, 0);
    assert_eq!(c.cmd(CMD_FLAG_FUA, CMD_TRIM, 4, 65536, 4096).await, 0);
    assert_eq!(c.cmd(0, CMD_WRITE_ZEROES, 5, 8192, 1024).await, 0);
    assert_eq!(c.cmd(0, CMD_CACHE, 6, 0, 65536).await, 0);
    c.request(0, CMD_BLOCK_STATUS, 7, 0, 65536).await;
    assert!(!c.full_reply(7).await.is_empty());
    // Past the end: refused by the server, never run.
    assert_ne!(c.cmd(0, CMD_READ, 8, SIZE, 512).await, 0);
    c.request(0, CMD_DISC, 9, 0, 0).await;
    c.expect_closed().await;
    let info = |kind, offset, len, fua| RequestInfo {
        kind,
        offset,
        len,
        fua,
    };
    let seen = export.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            info(RequestKind::Write, 4096, 8192, true),
            info(RequestKind::Read, 4096, 512, false),
            info(RequestKind::Flush, 0, 0, false),
            info(RequestKind::Trim, 65536, 4096, true),
            info(RequestKind::WriteZeroes, 8192, 1024, false),
            info(RequestKind::Cache, 0, 65536, false),
            info(RequestKind::BlockStatus, 0, 65536, false),
        ]
    );
    server.shutdown().await;
}

/// The threaded loop serves a client that keeps one request in flight on
/// the thread that read it (no hand-off of the socket to a second thread
/// per request), and a client that pipelines is still served side by side
/// right after: the credit for serving so is lost at once.
#[tokio::test]
async fn one_request_at_a_time_stays_on_one_thread_and_pipelining_spreads() {
    let export = Arc::new(TestExport {
        read_sleep: Duration::from_millis(2),
        ..TestExport::new()
    });
    let srv = start_with(
        export.clone(),
        ServerOptions {
            threads: 8,
            ..opts()
        },
    )
    .await;
    with_timeout(async {
        let mut c = Client::ready(srv.addr, true).await;
        // 64 requests arriving alone earn the credit; the last 30 of 200
        // run solo.
        for i in 0..200u64 {
            assert_eq!(c.read(i, i * 4096, 512).await, vec![0; 512]);
        }
        let seen = export.read_threads.lock().unwrap().clone();
        let late: std::collections::HashSet<_> = seen[170..].iter().map(|(_, id)| *id).collect();
        assert_eq!(
            late.len(),
            1,
            "one request at a time: the last 30 reads ran on {} threads",
            late.len()
        );
        export.read_threads.lock().unwrap().clear();
        for round in 0..4u64 {
            for i in 0..8u64 {
                c.request(0, CMD_READ, 1000 + round * 100 + i, i * 4096, 512)
                    .await;
            }
            for i in 0..8u64 {
                assert_eq!(c.result(1000 + round * 100 + i).await, (0, vec![0; 512]));
            }
        }
    })
    .await;
    srv.shutdown().await;
    assert!(
        export.read_thread_count() >= 4,
        "pipelined reads after a solo phase ran on {} threads",
        export.read_thread_count()
    );
}
