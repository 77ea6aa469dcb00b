//! Protocol tests of the NBD server over real TCP sockets on 127.0.0.1, driven
//! by a small raw-bytes client written here (plus one `nbdinfo` interop check
//! when that tool is installed).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tierd::nbd::proto::*;
use tierd::nbd::{Export, ExportError, IoCtx, MemExport, Server, ServerOptions, StatusRun};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const SIZE: u64 = 4 * 1024 * 1024;
/// Reads at this offset take a while.
const SLOW_AT: u64 = 1024 * 1024;
/// Reads and writes at this offset fail with an I/O error.
const FAIL_AT: u64 = 2 * 1024 * 1024;
const SLOW: Duration = Duration::from_millis(400);
/// Reads at this offset panic inside the export.
const PANIC_AT: u64 = 3 * 1024 * 1024;

/// A [`MemExport`] with a slow spot and a broken spot. It never answers at
/// once (`may_block: false` is always refused), so every request runs on a
/// blocking thread; it advertises fast zero but refuses every fast zero.
struct TestExport {
    mem: MemExport,
}

impl TestExport {
    fn new() -> Self {
        TestExport {
            mem: MemExport::new(SIZE),
        }
    }
}

fn io_err() -> ExportError {
    ExportError::Io(std::io::Error::other("injected device failure"))
}

impl Export for TestExport {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read(&self, offset: u64, buf: &mut [u8], ctx: IoCtx) -> Result<(), ExportError> {
        if !ctx.may_block {
            return Err(ExportError::WouldBlock);
        }
        if offset == SLOW_AT {
            std::thread::sleep(SLOW);
        }
        if offset == FAIL_AT {
            return Err(io_err());
        }
        if offset == PANIC_AT {
            panic!("injected export panic");
        }
        self.mem.read(offset, buf, ctx)
    }
    fn write(&self, offset: u64, data: &[u8], ctx: IoCtx) -> Result<(), ExportError> {
        if !ctx.may_block {
            return Err(ExportError::WouldBlock);
        }
        if offset == FAIL_AT {
            return Err(io_err());
        }
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
        if fast {
            return Err(ExportError::NotSupported("no fast zero here".into()));
        }
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
    fn can_fast_zero(&self) -> bool {
        true
    }
    fn can_multi_conn(&self) -> bool {
        self.mem.can_multi_conn()
    }
}

struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Tell the server to stop without waiting; the task to wait on, and
    /// the address it was serving.
    fn stop(mut self) -> (JoinHandle<std::io::Result<()>>, SocketAddr) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        (self.task, self.addr)
    }

    async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops")
            .expect("join")
            .expect("serve_tcp");
    }
}

/// Wait for a stopped server's accept loop to return cleanly.
async fn server_returns(task: JoinHandle<std::io::Result<()>>) {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("server returns")
        .unwrap()
        .unwrap();
}

fn opts() -> ServerOptions {
    ServerOptions {
        export_name: "disk".into(),
        description: "test disk".into(),
        ..ServerOptions::default()
    }
}

async fn start_with(export: Arc<dyn Export>, options: ServerOptions) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let server = Server::new(export, options);
    let task = tokio::spawn(async move {
        server
            .serve_tcp(listener, async {
                let _ = rx.await;
            })
            .await
    });
    Running {
        addr,
        stop: Some(tx),
        task,
    }
}

async fn start() -> Running {
    start_with(Arc::new(TestExport::new()), opts()).await
}

/// A parsed reply from the server.
#[derive(Debug)]
enum Reply {
    Simple {
        errno: u32,
        cookie: u64,
        data: Vec<u8>,
    },
    Chunk {
        flags: u16,
        typ: u16,
        cookie: u64,
        payload: Vec<u8>,
    },
}

impl Reply {
    fn cookie(&self) -> u64 {
        match self {
            Reply::Simple { cookie, .. } | Reply::Chunk { cookie, .. } => *cookie,
        }
    }
}

struct OptReply {
    option: u32,
    typ: u32,
    data: Vec<u8>,
}

/// A raw NBD client.
struct Client {
    s: TcpStream,
    structured: bool,
    /// Pending simple-reply reads: cookie -> length (to know the payload size).
    reads: HashMap<u64, u32>,
    /// Replies read while waiting for another cookie.
    stash: Vec<Reply>,
    size: u64,
    tflags: u16,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).await.unwrap();
        Client {
            s,
            structured: false,
            reads: HashMap::new(),
            stash: Vec::new(),
            size: 0,
            tflags: 0,
        }
    }

    /// Read the greeting and send client flags.
    async fn greet(addr: SocketAddr, client_flags: u32) -> Client {
        let mut c = Client::connect(addr).await;
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).await.unwrap();
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(u16::from_be_bytes([g[16], g[17]]), 3);
        c.s.write_u32(client_flags).await.unwrap();
        c
    }

    async fn send_opt(&mut self, option: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).await.unwrap();
    }

    async fn opt_reply(&mut self) -> OptReply {
        let magic = self.s.read_u64().await.unwrap();
        assert_eq!(magic, OPTION_REPLY_MAGIC);
        let option = self.s.read_u32().await.unwrap();
        let typ = self.s.read_u32().await.unwrap();
        let len = self.s.read_u32().await.unwrap();
        let mut data = vec![0u8; len as usize];
        self.s.read_exact(&mut data).await.unwrap();
        OptReply { option, typ, data }
    }

    /// Send an option and collect replies up to the final one (ACK or error).
    async fn opt(&mut self, option: u32, data: &[u8]) -> Vec<OptReply> {
        self.send_opt(option, data).await;
        let mut out = Vec::new();
        loop {
            let r = self.opt_reply().await;
            assert_eq!(r.option, option);
            let last = r.typ == REP_ACK || r.typ & REP_FLAG_ERROR != 0;
            out.push(r);
            if last {
                return out;
            }
        }
    }

    async fn structured_reply(&mut self) {
        let r = self.opt(OPT_STRUCTURED_REPLY, &[]).await;
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].typ, REP_ACK);
        self.structured = true;
    }

    async fn set_meta(&mut self, queries: &[&str]) -> Vec<OptReply> {
        self.opt(OPT_SET_META_CONTEXT, &meta_payload("", queries))
            .await
    }

    /// `NBD_OPT_GO`; on success records size and flags.
    async fn go(&mut self, name: &str, infos: &[u16]) -> Vec<OptReply> {
        let r = self.opt(OPT_GO, &info_payload(name, infos)).await;
        if r.last().map(|r| r.typ) == Some(REP_ACK) {
            for i in &r {
                if i.typ == REP_INFO && i.data[0..2] == [0, 0] {
                    self.size = u64::from_be_bytes(i.data[2..10].try_into().unwrap());
                    self.tflags = u16::from_be_bytes([i.data[10], i.data[11]]);
                }
            }
        }
        r
    }

    /// Connect, optionally negotiate structured replies and base:allocation, GO.
    async fn ready(addr: SocketAddr, structured: bool) -> Client {
        let mut c = Client::greet(addr, FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
        if structured {
            c.structured_reply().await;
            let r = c.set_meta(&["base:allocation"]).await;
            assert_eq!(r.len(), 2);
        }
        let r = c.go("", &[]).await;
        assert_eq!(r.last().unwrap().typ, REP_ACK);
        c
    }

    async fn request(&mut self, flags: u16, typ: u16, cookie: u64, offset: u64, length: u32) {
        let req = Request {
            flags,
            typ,
            cookie,
            offset,
            length,
        };
        if typ == CMD_READ {
            self.reads.insert(cookie, length);
        }
        self.s.write_all(&encode_request(&req)).await.unwrap();
    }

    async fn write(&mut self, flags: u16, cookie: u64, offset: u64, data: &[u8]) {
        self.request(flags, CMD_WRITE, cookie, offset, data.len() as u32)
            .await;
        self.s.write_all(data).await.unwrap();
    }

    /// Read the next reply message from the socket.
    async fn next_reply(&mut self) -> Reply {
        let magic = self.s.read_u32().await.unwrap();
        match magic {
            SIMPLE_REPLY_MAGIC => {
                let errno = self.s.read_u32().await.unwrap();
                let cookie = self.s.read_u64().await.unwrap();
                let mut data = Vec::new();
                if let Some(len) = self.reads.remove(&cookie) {
                    if errno == 0 {
                        data = vec![0u8; len as usize];
                        self.s.read_exact(&mut data).await.unwrap();
                    }
                }
                Reply::Simple {
                    errno,
                    cookie,
                    data,
                }
            }
            STRUCTURED_REPLY_MAGIC => {
                assert!(self.structured, "structured reply not negotiated");
                let flags = self.s.read_u16().await.unwrap();
                let typ = self.s.read_u16().await.unwrap();
                let cookie = self.s.read_u64().await.unwrap();
                let len = self.s.read_u32().await.unwrap();
                let mut payload = vec![0u8; len as usize];
                self.s.read_exact(&mut payload).await.unwrap();
                Reply::Chunk {
                    flags,
                    typ,
                    cookie,
                    payload,
                }
            }
            m => panic!("bad reply magic {m:#x}"),
        }
    }

    /// The next reply message for `cookie` (others are stashed).
    async fn reply_for(&mut self, cookie: u64) -> Reply {
        if let Some(i) = self.stash.iter().position(|r| r.cookie() == cookie) {
            return self.stash.remove(i);
        }
        loop {
            let r = tokio::time::timeout(Duration::from_secs(10), self.next_reply())
                .await
                .expect("reply in time");
            if r.cookie() == cookie {
                return r;
            }
            self.stash.push(r);
        }
    }

    /// All chunks (or the simple reply) of the reply to `cookie`.
    async fn full_reply(&mut self, cookie: u64) -> Vec<Reply> {
        let mut out = Vec::new();
        loop {
            let r = self.reply_for(cookie).await;
            let done = match &r {
                Reply::Simple { .. } => true,
                Reply::Chunk { flags, .. } => flags & REPLY_FLAG_DONE != 0,
            };
            out.push(r);
            if done {
                return out;
            }
        }
    }

    /// Errno of the reply to `cookie` (0 on success), and read data if any.
    async fn result(&mut self, cookie: u64) -> (u32, Vec<u8>) {
        let mut errno = 0;
        let mut data = Vec::new();
        for r in self.full_reply(cookie).await {
            match r {
                Reply::Simple {
                    errno: e, data: d, ..
                } => {
                    errno = e;
                    data = d;
                }
                Reply::Chunk { typ, payload, .. } => match typ {
                    REPLY_TYPE_NONE => {}
                    REPLY_TYPE_OFFSET_DATA => data.extend_from_slice(&payload[8..]),
                    REPLY_TYPE_ERROR => {
                        errno = u32::from_be_bytes(payload[0..4].try_into().unwrap());
                        let mlen = u16::from_be_bytes([payload[4], payload[5]]) as usize;
                        assert_eq!(payload.len(), 6 + mlen);
                    }
                    REPLY_TYPE_BLOCK_STATUS => data.extend_from_slice(&payload),
                    t => panic!("unexpected chunk type {t}"),
                },
            }
        }
        (errno, data)
    }

    async fn read(&mut self, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
        self.request(0, CMD_READ, cookie, offset, len).await;
        let (errno, data) = self.result(cookie).await;
        assert_eq!(errno, 0, "read {offset}+{len}");
        assert_eq!(data.len(), len as usize);
        data
    }

    /// Send a command without payload and return its errno.
    async fn cmd(&mut self, flags: u16, typ: u16, cookie: u64, offset: u64, len: u32) -> u32 {
        self.request(flags, typ, cookie, offset, len).await;
        self.result(cookie).await.0
    }

    /// Expect the server to close the connection.
    async fn expect_closed(&mut self) {
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut b))
            .await
            .expect("closed in time");
        assert!(matches!(r, Ok(0) | Err(_)), "expected EOF, got {r:?}");
    }
}

fn info_payload(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        p.extend_from_slice(&i.to_be_bytes());
    }
    p
}

fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        p.extend_from_slice(&(q.len() as u32).to_be_bytes());
        p.extend_from_slice(q.as_bytes());
    }
    p
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn descriptors(payload: &[u8]) -> (u32, Vec<(u32, u32)>) {
    let id = u32::from_be_bytes(payload[0..4].try_into().unwrap());
    let d = payload[4..]
        .chunks(8)
        .map(|c| {
            (
                u32::from_be_bytes(c[0..4].try_into().unwrap()),
                u32::from_be_bytes(c[4..8].try_into().unwrap()),
            )
        })
        .collect();
    (id, d)
}

async fn with_timeout<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("test timed out")
}

/// One request of a table and the errno its reply must carry (0: success).
struct Case {
    what: &'static str,
    flags: u16,
    typ: u16,
    offset: u64,
    len: u32,
    /// WRITE payload (`len` is its length).
    data: Vec<u8>,
    errno: u32,
}

/// A case without payload.
fn cmd(what: &'static str, flags: u16, typ: u16, offset: u64, len: u32, errno: u32) -> Case {
    Case {
        what,
        flags,
        typ,
        offset,
        len,
        data: Vec::new(),
        errno,
    }
}

/// A WRITE case carrying `data`.
fn write(what: &'static str, flags: u16, offset: u64, data: Vec<u8>, errno: u32) -> Case {
    Case {
        what,
        flags,
        typ: CMD_WRITE,
        offset,
        len: data.len() as u32,
        data,
        errno,
    }
}

/// Send every case in turn (cookies from `*cookie` on) and check its errno;
/// with `usable`, also check after each that the connection still serves a
/// READ of the marker (see [`still_usable`]).
async fn expect_errnos(c: &mut Client, cookie: &mut u64, cases: &[Case], usable: bool) {
    for case in cases {
        let id = *cookie;
        *cookie += 1;
        if case.typ == CMD_WRITE {
            c.write(case.flags, id, case.offset, &case.data).await;
        } else {
            c.request(case.flags, case.typ, id, case.offset, case.len)
                .await;
        }
        let got = c.result(id).await.0;
        assert_eq!(got, case.errno, "{}", case.what);
        if usable {
            still_usable(c, cookie, case.what).await;
        }
    }
}

/// Send each option in turn; each must get exactly one reply, of the type given.
async fn expect_single_replies(c: &mut Client, cases: &[(u32, &[u8], u32)]) {
    for (option, data, typ) in cases {
        let r = c.opt(*option, data).await;
        assert_eq!(r.len(), 1, "option {option}");
        assert_eq!(r[0].typ, *typ, "option {option}");
    }
}

/// The single chunk of a reply: (flags, type, payload).
fn only_chunk(r: &[Reply]) -> (u16, u16, &[u8]) {
    let Reply::Chunk {
        flags,
        typ,
        payload,
        ..
    } = &r[0]
    else {
        panic!("structured reply expected");
    };
    (*flags, *typ, payload)
}

#[tokio::test]
async fn export_name_with_and_without_zeroes() {
    let srv = start().await;
    for (flags, name) in [(FLAG_C_FIXED_NEWSTYLE, "disk"), (3, "")] {
        let mut c = Client::greet(srv.addr, flags).await;
        c.send_opt(OPT_EXPORT_NAME, name.as_bytes()).await;
        let size = c.s.read_u64().await.unwrap();
        let tflags = c.s.read_u16().await.unwrap();
        assert_eq!(size, SIZE);
        assert_ne!(tflags & FLAG_HAS_FLAGS, 0);
        assert_eq!(tflags & FLAG_SEND_DF, 0, "no DF without structured replies");
        if flags & FLAG_C_NO_ZEROES == 0 {
            let mut z = [1u8; 124];
            c.s.read_exact(&mut z).await.unwrap();
            assert_eq!(z, [0u8; 124]);
        }
        // Transmission works right after.
        c.write(0, 1, 0, b"hello").await;
        assert_eq!(c.result(1).await.0, 0);
        assert_eq!(c.read(2, 0, 5).await, b"hello");
    }
    // An unknown export name cannot be refused politely: the server hangs up.
    let mut c = Client::greet(srv.addr, 3).await;
    c.send_opt(OPT_EXPORT_NAME, b"nope").await;
    c.expect_closed().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn unknown_client_flags_close() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 1 | (1 << 7)).await;
    c.expect_closed().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn list_info_and_go() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;

    let r = c.opt(OPT_LIST, &[]).await;
    assert_eq!(r.len(), 3);
    let mut names = Vec::new();
    for s in &r[..2] {
        assert_eq!(s.typ, REP_SERVER);
        let n = u32::from_be_bytes(s.data[0..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(s.data[4..4 + n].to_vec()).unwrap());
    }
    names.sort();
    assert_eq!(names, vec!["", "disk"]);
    assert_eq!(r[2].typ, REP_ACK);
    let r = c.opt(OPT_LIST, b"x").await;
    assert_eq!(r.last().unwrap().typ, REP_ERR_INVALID);

    // INFO with every item requested.
    let r = c
        .opt(
            OPT_INFO,
            &info_payload("disk", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]),
        )
        .await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    let mut seen = HashMap::new();
    for i in &r[..r.len() - 1] {
        assert_eq!(i.typ, REP_INFO);
        seen.insert(
            u16::from_be_bytes([i.data[0], i.data[1]]),
            i.data[2..].to_vec(),
        );
    }
    let export = &seen[&INFO_EXPORT];
    assert_eq!(u64::from_be_bytes(export[0..8].try_into().unwrap()), SIZE);
    let tflags = u16::from_be_bytes([export[8], export[9]]);
    for f in [
        FLAG_HAS_FLAGS,
        FLAG_SEND_FLUSH,
        FLAG_SEND_FUA,
        FLAG_SEND_TRIM,
        FLAG_SEND_WRITE_ZEROES,
        FLAG_SEND_FAST_ZERO,
        FLAG_SEND_CACHE,
        FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(tflags & f, 0, "flag {f:#x}");
    }
    assert_eq!(
        tflags & (FLAG_READ_ONLY | FLAG_ROTATIONAL | FLAG_SEND_DF),
        0
    );
    let bs = &seen[&INFO_BLOCK_SIZE];
    assert_eq!(bs.len(), 12);
    assert_eq!(u32::from_be_bytes(bs[0..4].try_into().unwrap()), 1);
    assert_eq!(u32::from_be_bytes(bs[4..8].try_into().unwrap()), 4096);
    assert_eq!(u32::from_be_bytes(bs[8..12].try_into().unwrap()), 32 << 20);
    assert_eq!(seen[&INFO_NAME], b"disk");
    assert_eq!(seen[&INFO_DESCRIPTION], b"test disk");

    // INFO without requests still has EXPORT and BLOCK_SIZE, not NAME.
    let r = c.opt(OPT_INFO, &info_payload("", &[])).await;
    let types: Vec<u16> = r[..r.len() - 1]
        .iter()
        .map(|i| u16::from_be_bytes([i.data[0], i.data[1]]))
        .collect();
    assert!(types.contains(&INFO_EXPORT) && types.contains(&INFO_BLOCK_SIZE));
    assert!(!types.contains(&INFO_NAME));

    // Unknown export and malformed payloads: errors, handshake goes on.
    let mut bad = info_payload("disk", &[]);
    bad[3] = 200; // name length beyond the payload
    expect_single_replies(
        &mut c,
        &[
            (OPT_GO, &info_payload("other", &[]), REP_ERR_UNKNOWN),
            (OPT_GO, &bad, REP_ERR_INVALID),
            (OPT_INFO, &[0, 0], REP_ERR_INVALID),
        ],
    )
    .await;

    // Then GO works and enters transmission.
    let r = c.go("disk", &[INFO_BLOCK_SIZE]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    assert_eq!(c.size, SIZE);
    assert_eq!(c.read(1, 0, 512).await, vec![0u8; 512]);
    srv.shutdown().await;
}

#[tokio::test]
async fn unsupported_and_invalid_options() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;
    let too_long = vec![0u8; 100 * 1024];
    expect_single_replies(
        &mut c,
        &[
            (OPT_STARTTLS, &[], REP_ERR_UNSUP),
            (OPT_EXTENDED_HEADERS, &[], REP_ERR_UNSUP),
            (OPT_PEEK_EXPORT, &[], REP_ERR_UNSUP),
            (4242, &[], REP_ERR_UNSUP),
            (OPT_STRUCTURED_REPLY, b"junk", REP_ERR_INVALID),
            // An over-long option is consumed and refused.
            (77, &too_long, REP_ERR_TOO_BIG),
        ],
    )
    .await;
    // Still in the handshake.
    let r = c.opt(OPT_LIST, &[]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    // ABORT: ACK, then close.
    let r = c.opt(OPT_ABORT, &[]).await;
    assert_eq!(r[0].typ, REP_ACK);
    c.expect_closed().await;

    // An absurd option length is a hard disconnect.
    let mut c = Client::greet(srv.addr, 3).await;
    let mut b = Vec::new();
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&OPT_GO.to_be_bytes());
    b.extend_from_slice(&u32::MAX.to_be_bytes());
    c.s.write_all(&b).await.unwrap();
    c.expect_closed().await;

    // So is a bad option magic.
    let mut c = Client::greet(srv.addr, 3).await;
    c.s.write_all(&[0u8; 16]).await.unwrap();
    c.expect_closed().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn meta_contexts() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;
    // SET before structured replies: invalid.
    let r = c.set_meta(&["base:allocation"]).await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].typ, REP_ERR_INVALID);
    c.structured_reply().await;

    let ctx_name = |r: &OptReply| String::from_utf8(r.data[4..].to_vec()).unwrap();
    for queries in [
        &[][..],
        &["base:"][..],
        &["base:allocation", "x-foo:bar"][..],
    ] {
        let r = c
            .opt(OPT_LIST_META_CONTEXT, &meta_payload("disk", queries))
            .await;
        assert_eq!(r.len(), 2, "{queries:?}");
        assert_eq!(r[0].typ, REP_META_CONTEXT);
        assert_eq!(ctx_name(&r[0]), "base:allocation");
        assert_eq!(r[1].typ, REP_ACK);
    }
    let r = c
        .opt(
            OPT_LIST_META_CONTEXT,
            &meta_payload("", &["qemu:dirty-bitmap:x"]),
        )
        .await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].typ, REP_ACK);
    let r = c
        .opt(OPT_LIST_META_CONTEXT, &meta_payload("nope", &[]))
        .await;
    assert_eq!(r[0].typ, REP_ERR_UNKNOWN);
    let mut bad = meta_payload("", &["base:"]);
    bad[11] = 99; // query length beyond the payload
    assert_eq!(
        c.opt(OPT_SET_META_CONTEXT, &bad).await[0].typ,
        REP_ERR_INVALID
    );

    // SET: unknown contexts omitted; "base:" selects nothing.
    let r = c.set_meta(&["base:", "x-foo:bar"]).await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].typ, REP_ACK);
    let r = c.set_meta(&["x-foo:bar", "base:allocation"]).await;
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].typ, REP_META_CONTEXT);
    assert_eq!(ctx_name(&r[0]), "base:allocation");
    let id = u32::from_be_bytes(r[0].data[0..4].try_into().unwrap());

    let r = c.go("disk", &[]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    assert_ne!(c.tflags & FLAG_SEND_DF, 0);
    c.request(0, CMD_BLOCK_STATUS, 1, 0, 4096).await;
    let r = c.full_reply(1).await;
    assert_eq!(r.len(), 1);
    let (flags, typ, payload) = only_chunk(&r);
    assert_eq!(flags, REPLY_FLAG_DONE);
    assert_eq!(typ, REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(
        descriptors(payload),
        (id, vec![(4096, STATE_HOLE | STATE_ZERO)])
    );
    srv.shutdown().await;
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

/// A READ right after an error still works.
async fn still_usable(c: &mut Client, cookie: &mut u64, what: &str) {
    *cookie += 1;
    assert_eq!(c.read(*cookie, 0, 6).await, b"marker", "after {what}");
}

/// Every recoverable error returns its errno and leaves the connection usable.
async fn error_cases(structured: bool) {
    let small = ServerOptions {
        max_request: 64 * 1024,
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

#[tokio::test]
async fn errors_simple() {
    with_timeout(error_cases(false)).await;
}

#[tokio::test]
async fn errors_structured() {
    with_timeout(error_cases(true)).await;
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

#[tokio::test]
async fn bad_request_magic_disconnects() {
    let srv = start().await;
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

#[tokio::test]
async fn replies_out_of_order() {
    let srv = start().await;
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

#[tokio::test]
async fn disc_answers_in_flight_requests_first() {
    let srv = start().await;
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

#[tokio::test]
async fn shutdown_finishes_in_flight_requests() {
    let srv = start().await;
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

#[tokio::test]
async fn tiny_in_flight_limits_still_progress() {
    let tight = ServerOptions {
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

#[tokio::test]
async fn shutdown_answers_queued_requests_with_eshutdown() {
    let one = ServerOptions {
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

#[tokio::test]
async fn handshake_timeout() {
    let srv = start_with(
        Arc::new(MemExport::new(SIZE)),
        ServerOptions {
            handshake_timeout: Duration::from_millis(200),
            ..opts()
        },
    )
    .await;
    let mut c = Client::greet(srv.addr, 3).await;
    let t0 = std::time::Instant::now();
    c.expect_closed().await;
    assert!(t0.elapsed() >= Duration::from_millis(150));
    srv.shutdown().await;
}

#[tokio::test]
async fn many_connections_and_pipelining() {
    let srv = start().await;
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
    if std::process::Command::new("nbdinfo")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("nbdinfo not installed; skipping");
        return;
    }
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
