//! A blocking, pipelined NBD client of one export: what tierd uses when its
//! capacity tier is another NBD server (nbdkit with any plugin, qemu-nbd,
//! rbd-nbd, another tierd). Any number of threads issue requests at once on
//! one connection; a reader thread hands each reply to the thread waiting
//! for it, so requests overlap as they would on a local disk's queue.
//!
//! When the connection is lost the next request connects again, with
//! backoff between attempts, and first sends again every write acknowledged
//! since the last completed FLUSH (the server may have lost those with its
//! cache), so a FLUSH that succeeds covers every write before it, whichever
//! connection took it. A request that cannot be answered within the
//! timeout fails with `TimedOut`; none waits longer.
//!
//! It speaks fixed newstyle, `NBD_OPT_GO` and simple replies, and TLS
//! (`nbds://`): after `NBD_OPT_STARTTLS` the TLS session runs on a thread
//! of its own that relays between the socket and a local socket pair, so
//! the reader thread and the writers keep using a plain stream.
//!
//! Split by job: `target` parses the addresses, `connect` opens a
//! connection and negotiates the export (TLS included), `raw` hands a
//! negotiated plain connection to a caller that pipelines its own
//! requests, this file keeps the connection in use and the requests on it.

mod connect;
mod raw;
mod target;

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio_rustls::rustls;
use tracing::{debug, info, warn};

use super::proto;

use super::wire::Wire;
pub use connect::Export;
use connect::{close, handshake, Sock};
pub use raw::{open_raw, RawConnection};
pub use target::{is_uri, Endpoint, Target};

/// The port NBD servers listen on unless told otherwise.
pub const DEFAULT_PORT: u16 = 10809;
/// Largest request sent: bigger transfers are cut (servers commonly take
/// 32 MiB at most).
const MAX_REQUEST: u32 = 32 << 20;
/// First pause after a failed connection attempt; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Longest a single connection attempt (connect and handshake) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest option reply read during the handshake.
const MAX_OPTION_REPLY: u32 = 64 * 1024;

/// Why the client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not an NBD URI this client understands.
    #[error("{uri:?} is not an NBD URI this client understands: {why}")]
    BadUri {
        /// The address given.
        uri: String,
        /// What is wrong with it.
        why: String,
    },
    /// Connecting, or talking during the handshake, failed.
    #[error("cannot reach {target}: {source}")]
    Io {
        /// The server.
        target: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The server broke the protocol.
    #[error("{target} broke the NBD protocol: {what}")]
    Protocol {
        /// The server.
        target: String,
        /// How.
        what: String,
    },
    /// The server refused the export.
    #[error("{target} refused export {export:?}: {why}")]
    Refused {
        /// The server.
        target: String,
        /// The export asked for.
        export: String,
        /// Its reason.
        why: String,
    },
}

/// How the client behaves when the server is slow or away.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Longest a request waits, reconnecting included, before it fails.
    pub timeout: Duration,
    /// Bytes of writes kept for sending again after a lost connection
    /// until a FLUSH covers them; past it a write flushes first.
    pub max_unflushed: usize,
    /// The TLS configuration `nbds://` targets need.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(30),
            max_unflushed: 64 << 20,
            tls: None,
        }
    }
}

/// How one request ended.
enum Outcome {
    /// The reply, with the data of a read.
    Done(Vec<u8>),
    /// The server's errno.
    Errno(u32),
    /// The connection died first; the request may be sent again.
    Lost,
}

/// One request waiting for its reply.
struct Slot {
    /// Bytes of data the reply carries (reads).
    len: usize,
    done: Mutex<Option<Outcome>>,
    cv: Condvar,
}

impl Slot {
    fn finish(&self, o: Outcome) {
        *self.done.lock() = Some(o);
        self.cv.notify_one();
    }
}

struct Pending {
    slots: HashMap<u64, Arc<Slot>>,
    dead: bool,
    /// We sent `NBD_CMD_DISC`: the server closing the connection now is
    /// the goodbye we asked for, not a loss.
    leaving: bool,
    /// When the link was first seen down: the kill, or the sending of the
    /// request whose missing reply killed it.
    down_since: Option<Instant>,
}

/// One live connection.
struct Conn {
    writer: Mutex<Sock>,
    pending: Mutex<Pending>,
    /// A clone to shut the socket down with, waking the reader.
    ctl: Sock,
}

enum CallError {
    Errno(u32),
    Lost,
    Timeout,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.pending.lock().dead
    }

    /// When a dead connection was first seen down (`None` while it lives).
    fn down_since(&self) -> Option<Instant> {
        let p = self.pending.lock();
        p.dead.then_some(p.down_since).flatten()
    }

    /// Fail every waiting request as lost and close the socket.
    fn kill(&self, why: &str) {
        self.kill_since(why, Instant::now());
    }

    /// [`kill`](Self::kill), the link down since `since`.
    fn kill_since(&self, why: &str, since: Instant) {
        let (slots, leaving) = {
            let mut p = self.pending.lock();
            if p.dead {
                return;
            }
            p.dead = true;
            p.down_since = Some(since);
            (std::mem::take(&mut p.slots), p.leaving)
        };
        if leaving {
            debug!(
                why,
                "the remote capacity tier closed the connection after our disconnect"
            );
        } else {
            warn!(
                why,
                in_flight = slots.len(),
                "connection to the remote capacity tier lost"
            );
        }
        close(&self.ctl);
        for s in slots.into_values() {
            s.finish(Outcome::Lost);
        }
    }

    /// The reader thread: hand each reply to its request until the
    /// connection fails.
    fn read_replies(self: Arc<Self>, mut sock: Sock) {
        let why = loop {
            let mut h = [0u8; proto::SIMPLE_REPLY_LEN];
            if let Err(e) = sock.read_exact(&mut h) {
                break format!("reading a reply: {e}");
            }
            let (errno, cookie) = match proto::parse_simple_reply(&h) {
                Ok(r) => r,
                Err(e) => break format!("bad reply: {e}"),
            };
            let slot = self.pending.lock().slots.remove(&cookie);
            let Some(slot) = slot else {
                break format!("reply to unknown request {cookie:#x}");
            };
            if errno != 0 {
                slot.finish(Outcome::Errno(errno));
                continue;
            }
            let mut data = vec![0u8; slot.len];
            if let Err(e) = sock.read_exact(&mut data) {
                slot.finish(Outcome::Lost);
                break format!("reading reply data: {e}");
            }
            slot.finish(Outcome::Done(data));
        };
        self.kill(&why);
    }

    /// Send one request and wait for its reply until `deadline`.
    fn call(
        &self,
        req: &proto::Request,
        payload: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<Vec<u8>, CallError> {
        let slot = Arc::new(Slot {
            len: if req.typ == proto::CMD_READ {
                req.length as usize
            } else {
                0
            },
            done: Mutex::new(None),
            cv: Condvar::new(),
        });
        {
            let mut p = self.pending.lock();
            if p.dead {
                return Err(CallError::Lost);
            }
            p.slots.insert(req.cookie, slot.clone());
        }
        let sent_at = Instant::now();
        let sent = {
            let mut w = self.writer.lock();
            w.write_all(&proto::encode_request(req))
                .and_then(|()| payload.map_or(Ok(()), |d| w.write_all(d)))
        };
        if let Err(e) = sent {
            self.kill(&format!("sending a request: {e}"));
            return Err(CallError::Lost);
        }
        let mut done = slot.done.lock();
        while done.is_none() {
            if slot.cv.wait_until(&mut done, deadline).timed_out() && done.is_none() {
                drop(done);
                // The link has been down since this request went out.
                self.kill_since("a request got no reply within the timeout", sent_at);
                return Err(CallError::Timeout);
            }
        }
        match done.take() {
            Some(Outcome::Done(d)) => Ok(d),
            // The server is going away (nbdkit answers so after SIGTERM
            // while it waits for clients to leave): leave, and try again
            // on the next connection.
            Some(Outcome::Errno(proto::ESHUTDOWN)) => {
                drop(done);
                self.kill("the server is shutting down (ESHUTDOWN)");
                Err(CallError::Lost)
            }
            Some(Outcome::Errno(e)) => Err(CallError::Errno(e)),
            Some(Outcome::Lost) | None => Err(CallError::Lost),
        }
    }
}

/// The current connection and the reconnection state.
struct Link {
    current: Option<Arc<Conn>>,
    next_try: Instant,
    backoff: Duration,
    last_error: String,
    lost_since: Option<Instant>,
}

/// Writes acknowledged since the last completed FLUSH, to send again on a
/// new connection.
#[derive(Default)]
struct Unflushed {
    writes: Vec<Kept>,
    bytes: usize,
    next_seq: u64,
}

/// A write kept for sending again. It is kept from before it is sent, so a
/// reconnection that happens while it is in flight sends it too (before
/// the caller's own retry: the same bytes, so the order does not matter).
struct Kept {
    seq: u64,
    offset: u64,
    data: Arc<[u8]>,
    /// The server acknowledged it: a FLUSH sent from now on covers it.
    acked: bool,
}

/// A pipelined NBD client of one export (see the module docs).
pub struct Client {
    target: Target,
    opts: ClientOptions,
    export: Export,
    link: Mutex<Link>,
    cookie: AtomicU64,
    unflushed: Mutex<Unflushed>,
    /// Held by a FLUSH from before its request to the removal of what it
    /// covers, so two flushes do not interleave.
    flushing: Mutex<()>,
}

fn errno_error(target: &Target, errno: u32, what: &str) -> io::Error {
    let kind = match errno {
        proto::EPERM => io::ErrorKind::PermissionDenied,
        proto::EINVAL | proto::EOVERFLOW => io::ErrorKind::InvalidInput,
        proto::ENOSPC => io::ErrorKind::StorageFull,
        proto::ENOTSUP => io::ErrorKind::Unsupported,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(
        kind,
        format!("{target}: {what} failed on the server (errno {errno})"),
    )
}

impl Client {
    /// Connect to `target` and negotiate its export. A server that cannot
    /// be reached now is an error (not retried): the start-up should say so.
    pub fn connect(target: Target, opts: ClientOptions) -> Result<Client, ClientError> {
        let (sock, export) = handshake(
            &target,
            opts.tls.as_ref(),
            ATTEMPT_TIMEOUT.min(opts.timeout),
        )?;
        let conn = Self::start_conn(&target, sock, opts.timeout)?;
        info!(remote = %target, size = export.size, flags = format!("{:#x}", export.flags), "connected to the remote capacity tier");
        Ok(Client {
            target,
            opts,
            export,
            link: Mutex::new(Link {
                current: Some(conn),
                next_try: Instant::now(),
                backoff: FIRST_BACKOFF,
                last_error: String::new(),
                lost_since: None,
            }),
            cookie: AtomicU64::new(1),
            unflushed: Mutex::new(Unflushed::default()),
            flushing: Mutex::new(()),
        })
    }

    fn start_conn(
        target: &Target,
        sock: Sock,
        timeout: Duration,
    ) -> Result<Arc<Conn>, ClientError> {
        let io_err = |source| ClientError::Io {
            target: target.to_string(),
            source,
        };
        // A server that stops reading must not hold a sender (and every
        // thread behind the writer's lock) forever: a send that cannot go
        // out within the request timeout fails and the connection is left.
        // Receives have no timeout: the reader waits for replies, and a
        // request with none within its deadline shuts the socket down.
        sock.set_send_timeout(Some(timeout)).map_err(io_err)?;
        let reader = sock.try_clone().map_err(io_err)?;
        let ctl = sock.try_clone().map_err(io_err)?;
        let conn = Arc::new(Conn {
            writer: Mutex::new(sock),
            pending: Mutex::new(Pending {
                slots: HashMap::new(),
                dead: false,
                leaving: false,
                down_since: None,
            }),
            ctl,
        });
        let c = conn.clone();
        std::thread::Builder::new()
            .name("tierd-remote".into())
            .spawn(move || c.read_replies(reader))
            .map_err(io_err)?;
        Ok(conn)
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.export.size
    }

    /// The export's transmission flags (`FLAG_*`).
    pub fn flags(&self) -> u16 {
        self.export.flags
    }

    /// The server and export.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Whether a connection is up now (no request is sent to find out).
    pub fn connected(&self) -> bool {
        self.link
            .lock()
            .current
            .as_ref()
            .is_some_and(|c| !c.is_dead())
    }

    fn unreachable(&self, link: &Link) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the remote capacity tier {} did not answer within {:?}: {}",
                self.target,
                self.opts.timeout,
                if link.last_error.is_empty() {
                    "no reply"
                } else {
                    &link.last_error
                }
            ),
        )
    }

    /// The live connection, connecting again (with backoff) until
    /// `deadline` when it was lost.
    fn conn(&self, deadline: Instant) -> io::Result<Arc<Conn>> {
        loop {
            let mut link = self.link.lock();
            if let Some(c) = &link.current {
                if !c.is_dead() {
                    return Ok(c.clone());
                }
                let since = c.down_since().unwrap_or_else(Instant::now);
                link.current = None;
                link.lost_since.get_or_insert(since);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.unreachable(&link));
            }
            if now < link.next_try {
                let wake = link.next_try.min(deadline);
                drop(link);
                std::thread::sleep(wake - now);
                continue;
            }
            let attempt = ATTEMPT_TIMEOUT.min(deadline - now);
            match self.reconnect(attempt, deadline) {
                Ok(c) => {
                    let down = link
                        .lost_since
                        .take()
                        .map_or(Duration::ZERO, |t| t.elapsed());
                    info!(remote = %self.target, down_for = ?down, "reconnected to the remote capacity tier");
                    link.current = Some(c.clone());
                    link.backoff = FIRST_BACKOFF;
                    link.last_error.clear();
                    return Ok(c);
                }
                Err(e) => {
                    warn!(remote = %self.target, error = %e, retry_in = ?link.backoff, "cannot reconnect to the remote capacity tier");
                    link.last_error = e;
                    link.next_try = Instant::now() + link.backoff;
                    link.backoff = (link.backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// A new connection with the unflushed writes sent again on it.
    fn reconnect(&self, attempt: Duration, deadline: Instant) -> Result<Arc<Conn>, String> {
        let (sock, export) =
            handshake(&self.target, self.opts.tls.as_ref(), attempt).map_err(|e| e.to_string())?;
        if export.size != self.export.size {
            return Err(format!(
                "the export's size changed from {} to {} bytes",
                self.export.size, export.size
            ));
        }
        let conn =
            Self::start_conn(&self.target, sock, self.opts.timeout).map_err(|e| e.to_string())?;
        let writes: Vec<(u64, Arc<[u8]>)> = self
            .unflushed
            .lock()
            .writes
            .iter()
            .map(|k| (k.offset, k.data.clone()))
            .collect();
        for (off, data) in &writes {
            for (o, piece) in self.pieces(*off, data.len()) {
                let start = (o - off) as usize;
                let req = self.request(proto::CMD_WRITE, o, piece);
                let chunk = &data[start..start + piece as usize];
                match conn.call(&req, Some(chunk), deadline) {
                    Ok(_) => {}
                    Err(CallError::Errno(e)) => {
                        return Err(format!(
                            "sending an unflushed write again failed on the server (errno {e})"
                        ))
                    }
                    Err(_) => {
                        return Err(
                            "the new connection failed while unflushed writes were sent again"
                                .into(),
                        )
                    }
                }
            }
        }
        if !writes.is_empty() {
            info!(remote = %self.target, writes = writes.len(), "sent the unflushed writes again after reconnecting");
        }
        Ok(conn)
    }

    fn request(&self, typ: u16, offset: u64, length: u32) -> proto::Request {
        proto::Request {
            flags: 0,
            typ,
            cookie: self.cookie.fetch_add(1, Ordering::Relaxed),
            offset,
            length,
        }
    }

    /// `[offset, offset+len)` cut into requests the server takes.
    fn pieces(&self, offset: u64, len: usize) -> impl Iterator<Item = (u64, u32)> {
        let max = u64::from(self.export.max_request);
        let end = offset + len as u64;
        let mut at = offset;
        std::iter::from_fn(move || {
            (at < end).then(|| {
                let n = (end - at).min(max);
                let r = (at, n as u32);
                at += n;
                r
            })
        })
    }

    /// Send one request, reconnecting as needed, until the deadline.
    fn call(
        &self,
        typ: u16,
        offset: u64,
        length: u32,
        payload: Option<&[u8]>,
        what: &str,
    ) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + self.opts.timeout;
        loop {
            let conn = self.conn(deadline)?;
            let req = self.request(typ, offset, length);
            match conn.call(&req, payload, deadline) {
                Ok(d) => return Ok(d),
                Err(CallError::Errno(e)) => return Err(errno_error(&self.target, e, what)),
                Err(CallError::Lost) => continue,
                Err(CallError::Timeout) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "{}: {what} got no reply within {:?}",
                            self.target, self.opts.timeout
                        ),
                    ))
                }
            }
        }
    }

    fn check(&self, offset: u64, len: usize) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.export.size => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "I/O at {offset}+{len} past the end of {} ({} bytes)",
                    self.target, self.export.size
                ),
            )),
        }
    }

    /// Read `buf.len()` bytes at `offset`.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(offset, buf.len())?;
        for (o, n) in self.pieces(offset, buf.len()) {
            let data = self.call(proto::CMD_READ, o, n, None, "a read")?;
            let start = (o - offset) as usize;
            buf[start..start + n as usize].copy_from_slice(&data);
        }
        Ok(())
    }

    /// Write `buf` at `offset`; durable after the next [`flush`](Self::flush).
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(offset, buf.len())?;
        if self.export.flags & proto::FLAG_READ_ONLY != 0 {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} is read-only", self.target),
            ));
        }
        let keep = self.export.flags & proto::FLAG_SEND_FLUSH != 0;
        let seq = keep.then(|| {
            let mut u = self.unflushed.lock();
            let seq = u.next_seq;
            u.next_seq += 1;
            u.writes.push(Kept {
                seq,
                offset,
                data: Arc::from(buf),
                acked: false,
            });
            u.bytes += buf.len();
            seq
        });
        let sent = self.pieces(offset, buf.len()).try_for_each(|(o, n)| {
            let start = (o - offset) as usize;
            self.call(
                proto::CMD_WRITE,
                o,
                n,
                Some(&buf[start..start + n as usize]),
                "a write",
            )
            .map(drop)
        });
        let Some(seq) = seq else {
            return sent;
        };
        let over = {
            let mut u = self.unflushed.lock();
            match &sent {
                Ok(()) => {
                    if let Some(k) = u.writes.iter_mut().find(|k| k.seq == seq) {
                        k.acked = true;
                    }
                }
                // A failed write is not sent again.
                Err(_) => {
                    if let Some(i) = u.writes.iter().position(|k| k.seq == seq) {
                        let k = u.writes.remove(i);
                        u.bytes -= k.data.len();
                    }
                }
            }
            u.bytes > self.opts.max_unflushed
        };
        sent?;
        if over {
            self.flush()?;
        }
        Ok(())
    }

    /// Make every write before it durable on the server (`NBD_CMD_FLUSH`);
    /// without a write since the last flush it sends nothing.
    pub fn flush(&self) -> io::Result<()> {
        if self.export.flags & proto::FLAG_SEND_FLUSH == 0 {
            return Ok(());
        }
        let _one = self.flushing.lock();
        // What this FLUSH covers: the writes acknowledged before it is sent.
        let covered: Vec<u64> = {
            let u = self.unflushed.lock();
            u.writes.iter().filter(|k| k.acked).map(|k| k.seq).collect()
        };
        if covered.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.call(proto::CMD_FLUSH, 0, 0, None, "a flush") {
            // A server whose flush failed may have dropped the data it
            // could not make durable (a failed fsync leaves the pages
            // clean), so a later flush on this connection could succeed
            // without them. Leave it: the next request reconnects and sends
            // every kept write again before anything else.
            if let Some(c) = self.link.lock().current.as_ref() {
                c.kill("a flush failed");
            }
            return Err(e);
        }
        let mut u = self.unflushed.lock();
        let before = std::mem::take(&mut u.writes);
        u.writes = before
            .into_iter()
            .filter(|k| covered.binary_search(&k.seq).is_err())
            .collect();
        u.bytes = u.writes.iter().map(|k| k.data.len()).sum();
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(c) = self.link.lock().current.take() {
            // A polite disconnect; the reader thread ends when the socket
            // closes, which is then no loss to report.
            c.pending.lock().leaving = true;
            let req = self.request(proto::CMD_DISC, 0, 0);
            let _ = c.writer.lock().write_all(&proto::encode_request(&req));
            close(&c.ctl);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris() {
        let t = Target::parse("nbd://example.com/disk").expect("parses");
        assert_eq!(t.endpoint, Endpoint::Tcp("example.com:10809".into()));
        assert_eq!(t.export, "disk");
        let t = Target::parse("nbd://127.0.0.1:10900").expect("parses");
        assert_eq!(t.endpoint, Endpoint::Tcp("127.0.0.1:10900".into()));
        assert_eq!(t.export, "");
        let t = Target::parse("nbd://[::1]:10900/x").expect("parses");
        assert_eq!(t.endpoint, Endpoint::Tcp("[::1]:10900".into()));
        let t = Target::parse("nbd://[::1]/x").expect("parses");
        assert_eq!(t.endpoint, Endpoint::Tcp("[::1]:10809".into()));
        let t = Target::parse("nbd+unix:///e?socket=/run/s.sock").expect("parses");
        assert_eq!(t.endpoint, Endpoint::Unix("/run/s.sock".into()));
        assert_eq!(t.export, "e");
        assert_eq!(t.tls_name, None);
        let t = Target::parse("nbds://[::1]:7/x").expect("parses");
        assert_eq!(t.tls_name.as_deref(), Some("::1"));
        let t = Target::parse("nbds://store.example/x").expect("parses");
        assert_eq!(t.tls_name.as_deref(), Some("store.example"));
        assert_eq!(t.to_string(), "nbds://store.example:10809/x");
        let t = Target::parse("nbds+unix:///x?socket=/s&tls-hostname=h").expect("parses");
        assert_eq!(t.tls_name.as_deref(), Some("h"));
        for bad in [
            "nbd://",
            "nbd://h:port/x",
            "nbd+unix:///e",
            "http://x",
            "nbdx://h",
        ] {
            let e = Target::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(bad), "{e}");
        }
        assert!(is_uri("nbd://h") && is_uri("nbd+unix:///?socket=s") && is_uri("nbds://h"));
        assert!(!is_uri("/dev/sdb"));
    }
}
