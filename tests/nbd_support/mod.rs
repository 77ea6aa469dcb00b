//! Shared by the NBD protocol tests (tests/nbd_handshake.rs,
//! tests/nbd_transmission.rs): a test export with slow, failing and
//! panicking spots, a server started on 127.0.0.1, a small raw-bytes client
//! written here (independent of the server's codec), and the table drivers
//! the tests run their cases through. Each test file uses a part of it.
#![allow(dead_code)]

pub use std::collections::HashMap;
pub use std::future::Future;
pub use std::net::SocketAddr;
pub use std::sync::Arc;
pub use std::time::Duration;

pub use tierd::nbd::proto::*;
pub use tierd::nbd::{
    Export, ExportConn, ExportError, IoCtx, MemExport, RequestInfo, Server, ServerOptions,
    StatusRun,
};
pub use tokio::io::{AsyncReadExt, AsyncWriteExt};
pub use tokio::net::{TcpListener, TcpStream};
pub use tokio::sync::oneshot;
pub use tokio::task::JoinHandle;

pub const SIZE: u64 = 4 * 1024 * 1024;
/// Reads at this offset take a while.
pub const SLOW_AT: u64 = 1024 * 1024;
/// Reads and writes at this offset fail with an I/O error.
pub const FAIL_AT: u64 = 2 * 1024 * 1024;
pub const SLOW: Duration = Duration::from_millis(400);
/// Reads at this offset panic inside the export.
pub const PANIC_AT: u64 = 3 * 1024 * 1024;

/// A [`MemExport`] with a slow spot and a broken spot. It never answers at
/// once (`may_block: false` is always refused), so every request runs on a
/// blocking thread; it advertises fast zero but refuses every fast zero.
pub struct TestExport {
    pub mem: MemExport,
    /// The thread (name, id) each read ran on, in order.
    pub read_threads: std::sync::Mutex<Vec<(String, std::thread::ThreadId)>>,
    /// Every read sleeps this long (off the CPU, as on a slow device).
    pub read_sleep: Duration,
    /// What every connection's [`ExportConn::request`] was told, in order.
    pub seen: Arc<std::sync::Mutex<Vec<RequestInfo>>>,
}

/// The per-connection side of [`TestExport`]: keeps what it is told.
struct SeenConn(Arc<std::sync::Mutex<Vec<RequestInfo>>>);

impl ExportConn for SeenConn {
    fn hint(&mut self, _offset: u64, _len: u64) -> tierd::units::IoHint {
        tierd::units::IoHint::default()
    }

    fn request(&mut self, req: &RequestInfo) {
        self.0.lock().unwrap().push(*req);
    }
}

impl TestExport {
    pub fn new() -> Self {
        TestExport {
            mem: MemExport::new(SIZE),
            read_threads: Default::default(),
            read_sleep: Duration::ZERO,
            seen: Default::default(),
        }
    }

    /// Distinct threads that served reads.
    pub fn read_thread_count(&self) -> usize {
        let seen = self.read_threads.lock().unwrap();
        let ids: std::collections::HashSet<_> = seen.iter().map(|(_, id)| *id).collect();
        ids.len()
    }
}

pub fn io_err() -> ExportError {
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
        let me = std::thread::current();
        if let Ok(mut seen) = self.read_threads.lock() {
            seen.push((me.name().unwrap_or("").to_string(), me.id()));
        }
        if !self.read_sleep.is_zero() {
            std::thread::sleep(self.read_sleep);
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
    fn connect(&self) -> Box<dyn ExportConn> {
        Box::new(SeenConn(Arc::clone(&self.seen)))
    }
}

pub struct Running {
    pub addr: SocketAddr,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Tell the server to stop without waiting; the task to wait on, and
    /// the address it was serving.
    pub fn stop(mut self) -> (JoinHandle<std::io::Result<()>>, SocketAddr) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        (self.task, self.addr)
    }

    pub async fn shutdown(mut self) {
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
pub async fn server_returns(task: JoinHandle<std::io::Result<()>>) {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("server returns")
        .unwrap()
        .unwrap();
}

pub fn opts() -> ServerOptions {
    ServerOptions {
        export_name: "disk".into(),
        description: "test disk".into(),
        ..ServerOptions::default()
    }
}

pub async fn start_with(export: Arc<dyn Export>, options: ServerOptions) -> Running {
    start_at("127.0.0.1:0", export, options).await
}

/// Serve on `bind` (an address with port 0 for a free port).
pub async fn start_at(bind: &str, export: Arc<dyn Export>, options: ServerOptions) -> Running {
    let listener = TcpListener::bind(bind).await.unwrap();
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

pub async fn start() -> Running {
    start_with(Arc::new(TestExport::new()), opts()).await
}

/// A parsed reply from the server.
#[derive(Debug)]
pub enum Reply {
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
    pub fn cookie(&self) -> u64 {
        match self {
            Reply::Simple { cookie, .. } | Reply::Chunk { cookie, .. } => *cookie,
        }
    }
}

pub struct OptReply {
    pub option: u32,
    pub typ: u32,
    pub data: Vec<u8>,
}

/// A raw NBD client.
pub struct Client {
    pub s: TcpStream,
    pub structured: bool,
    /// Pending simple-reply reads: cookie -> length (to know the payload size).
    pub reads: HashMap<u64, u32>,
    /// Replies read while waiting for another cookie.
    pub stash: Vec<Reply>,
    pub size: u64,
    pub tflags: u16,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
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
    pub async fn greet(addr: SocketAddr, client_flags: u32) -> Client {
        let mut c = Client::connect(addr).await;
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).await.unwrap();
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(u16::from_be_bytes([g[16], g[17]]), 3);
        c.s.write_u32(client_flags).await.unwrap();
        c
    }

    pub async fn send_opt(&mut self, option: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.s.write_all(&b).await.unwrap();
    }

    pub async fn opt_reply(&mut self) -> OptReply {
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
    pub async fn opt(&mut self, option: u32, data: &[u8]) -> Vec<OptReply> {
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

    pub async fn structured_reply(&mut self) {
        let r = self.opt(OPT_STRUCTURED_REPLY, &[]).await;
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].typ, REP_ACK);
        self.structured = true;
    }

    pub async fn set_meta(&mut self, queries: &[&str]) -> Vec<OptReply> {
        self.opt(OPT_SET_META_CONTEXT, &meta_payload("", queries))
            .await
    }

    /// `NBD_OPT_GO`; on success records size and flags.
    pub async fn go(&mut self, name: &str, infos: &[u16]) -> Vec<OptReply> {
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
    pub async fn ready(addr: SocketAddr, structured: bool) -> Client {
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

    pub async fn request(&mut self, flags: u16, typ: u16, cookie: u64, offset: u64, length: u32) {
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

    pub async fn write(&mut self, flags: u16, cookie: u64, offset: u64, data: &[u8]) {
        self.request(flags, CMD_WRITE, cookie, offset, data.len() as u32)
            .await;
        self.s.write_all(data).await.unwrap();
    }

    /// Read the next reply message from the socket.
    pub async fn next_reply(&mut self) -> Reply {
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
    pub async fn reply_for(&mut self, cookie: u64) -> Reply {
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
    pub async fn full_reply(&mut self, cookie: u64) -> Vec<Reply> {
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
    pub async fn result(&mut self, cookie: u64) -> (u32, Vec<u8>) {
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

    pub async fn read(&mut self, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
        self.request(0, CMD_READ, cookie, offset, len).await;
        let (errno, data) = self.result(cookie).await;
        assert_eq!(errno, 0, "read {offset}+{len}");
        assert_eq!(data.len(), len as usize);
        data
    }

    /// Send a command without payload and return its errno.
    pub async fn cmd(&mut self, flags: u16, typ: u16, cookie: u64, offset: u64, len: u32) -> u32 {
        self.request(flags, typ, cookie, offset, len).await;
        self.result(cookie).await.0
    }

    /// Expect the server to close the connection.
    pub async fn expect_closed(&mut self) {
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), self.s.read(&mut b))
            .await
            .expect("closed in time");
        assert!(matches!(r, Ok(0) | Err(_)), "expected EOF, got {r:?}");
    }
}

pub fn info_payload(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        p.extend_from_slice(&i.to_be_bytes());
    }
    p
}

pub fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
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

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub fn descriptors(payload: &[u8]) -> (u32, Vec<(u32, u32)>) {
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

pub async fn with_timeout<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .expect("test timed out")
}

/// One request of a table and the errno its reply must carry (0: success).
pub struct Case {
    pub what: &'static str,
    pub flags: u16,
    pub typ: u16,
    pub offset: u64,
    pub len: u32,
    /// WRITE payload (`len` is its length).
    pub data: Vec<u8>,
    pub errno: u32,
}

/// A case without payload.
pub fn cmd(what: &'static str, flags: u16, typ: u16, offset: u64, len: u32, errno: u32) -> Case {
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
pub fn write(what: &'static str, flags: u16, offset: u64, data: Vec<u8>, errno: u32) -> Case {
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
pub async fn expect_errnos(c: &mut Client, cookie: &mut u64, cases: &[Case], usable: bool) {
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
pub async fn expect_single_replies(c: &mut Client, cases: &[(u32, &[u8], u32)]) {
    for (option, data, typ) in cases {
        let r = c.opt(*option, data).await;
        assert_eq!(r.len(), 1, "option {option}");
        assert_eq!(r[0].typ, *typ, "option {option}");
    }
}

/// The single chunk of a reply: (flags, type, payload).
pub fn only_chunk(r: &[Reply]) -> (u16, u16, &[u8]) {
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

/// A READ right after an error still works.
pub async fn still_usable(c: &mut Client, cookie: &mut u64, what: &str) {
    *cookie += 1;
    assert_eq!(c.read(*cookie, 0, 6).await, b"marker", "after {what}");
}
