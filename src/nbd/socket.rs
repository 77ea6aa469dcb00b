//! The socket side of the transmission loop: [`Sock`], a plain TCP or Unix
//! socket in blocking mode (the remote client's stream too), one of the
//! two [`Wire`]s; and, over any wire, its reading half under the reader's
//! buffer ([`Capped`], which after a long WRITE receives one request header
//! at a time and, on a wire that can tell, polls briefly for the next
//! request before it sleeps, see [`Poll`]; and [`receive`], which takes a
//! long payload straight from the wire into the thread's buffer); and its
//! writing half, [`Replies`], which gathers short replies into one send
//! and sends long READ data from the thread's buffer or, zero-copy, out of
//! its pipe.

use std::any::Any;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use super::proto;
use super::splice::{send_spliced, Pipe};
use super::wire::Wire;

/// Buffered reply bytes before a write reaches the socket regardless.
pub(super) const WRITE_BUFFER: usize = 256 * 1024;

/// Read data up to this long is copied into the reply buffer (to leave with
/// other replies); longer data is sent from the thread's own buffer.
pub(super) const COPY_LIMIT: usize = 16 * 1024;

/// Read buffer: many small requests come in with one receive.
pub(super) const READ_BUFFER: usize = 128 * 1024;

/// A WRITE payload with at least this much not yet buffered is received
/// straight into the thread's buffer.
pub(super) const DIRECT_RECEIVE: usize = 32 * 1024;

/// A connected plain socket in blocking mode.
pub(super) enum Sock {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl AsFd for Sock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl Sock {
    /// Time out blocking receives and sends after `t` (`None`: never).
    pub(super) fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Sock::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }

    /// Time out blocking sends after `t` (`None`: never); receives keep
    /// theirs.
    pub(super) fn set_send_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.set_write_timeout(t),
            Sock::Unix(s) => s.set_write_timeout(t),
        }
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix(s) => s.as_fd(),
        }
    }
}

impl Wire for Sock {
    fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
        })
    }

    fn peeks(&self) -> bool {
        true
    }

    /// Asked without the socket's lock (a receive would take it, against
    /// the kernel delivering the data); an interrupted ask says no.
    fn ready(&self) -> io::Result<bool> {
        let mut fds = [PollFd::new(self, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&Timespec::default())) {
            Ok(n) => Ok(n > 0),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        }
    }

    fn splice_target(&self) -> Option<(BorrowedFd<'_>, bool)> {
        // TCP may hold a head back for the data that follows it.
        Some((self.fd(), matches!(self, Sock::Tcp(_))))
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write_vectored(bufs),
            Sock::Unix(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The reading side of the socket, under the reader's buffer: one receive
/// takes at most `cap` bytes. After a long WRITE the next one is likely
/// long too, so the buffer then takes only the next request header: the
/// payload that would have followed it into the buffer is received
/// straight into the serving thread's buffer instead of copied out of it.
/// A receive that finds nothing waiting first polls ([`Poll`]).
pub(super) struct Capped<W> {
    pub(super) sock: W,
    pub(super) cap: usize,
    pub(super) poll: Poll,
}

impl<W: Wire> Read for Capped<W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.cap);
        let buf = &mut buf[..n];
        if self.poll.window.is_zero() {
            return self.sock.read(buf);
        }
        if self.poll.worth_it() {
            let start = Instant::now();
            loop {
                if self.sock.ready()? {
                    self.poll.caught();
                    return self.sock.read(buf);
                }
                if start.elapsed() >= self.poll.window {
                    self.poll.missed();
                    break;
                }
                // Give the CPU to anything runnable here: the client, when
                // it shares this CPU, is what the poll waits for.
                std::thread::yield_now();
            }
        }
        let start = Instant::now();
        let r = self.sock.read(buf);
        self.poll.slept(start.elapsed());
        r
    }
}

/// Adaptive polling for the next request, as network stacks busy-poll a
/// queue before they sleep. A thread that sleeps in a receive is woken by
/// the client's next request through the scheduler, and on a VM an idle
/// CPU's wake-up costs tens of microseconds: at queue depth 1 that is most
/// of a request's round trip (docs/performance.md). So a receive that finds
/// nothing first asks again without blocking, yielding the CPU between
/// asks, for up to `window`, and sleeps only after that.
///
/// Polling is paid in CPU, so it runs only while it pays: a credit grows
/// when a poll catches a request (or a sleep ended within the window, so
/// a poll would have caught it) and shrinks twice as fast when a poll
/// times out. A client that pauses longer than the window between
/// requests soon stops being polled for; every request it sends within
/// the window again earns the poll back.
#[derive(Debug, Clone)]
pub(super) struct Poll {
    /// How long to poll; zero: never.
    pub(super) window: Duration,
    credit: u8,
}

/// Most credit [`Poll`] keeps: after a burst of quick requests, this many
/// timed-out polls in a row (halved: each costs two) stop polling.
const POLL_CREDIT: u8 = 8;

impl Poll {
    /// Poll for up to `window` (zero: never).
    pub(super) fn new(window: Duration) -> Poll {
        Poll {
            window,
            credit: if window.is_zero() { 0 } else { POLL_CREDIT },
        }
    }

    fn worth_it(&self) -> bool {
        self.credit > 0
    }

    fn caught(&mut self) {
        self.credit = (self.credit + 1).min(POLL_CREDIT);
    }

    fn missed(&mut self) {
        self.credit = self.credit.saturating_sub(2);
    }

    /// A blocking receive waited `waited`.
    fn slept(&mut self, waited: Duration) {
        if waited < self.window {
            self.caught();
        }
    }
}

/// The stream as a blocking socket when it is a tokio TCP or Unix stream;
/// else the stream back (to be bridged).
pub(super) fn into_blocking<S: 'static>(stream: S) -> Result<io::Result<Sock>, S> {
    let any: Box<dyn Any> = Box::new(stream);
    let any = match any.downcast::<tokio::net::TcpStream>() {
        Ok(tcp) => {
            return Ok(tcp.into_std().and_then(|s| {
                s.set_nonblocking(false)?;
                Ok(Sock::Tcp(s))
            }))
        }
        Err(any) => any,
    };
    let any = match any.downcast::<tokio::net::UnixStream>() {
        Ok(unix) => {
            return Ok(unix.into_std().and_then(|s| {
                s.set_nonblocking(false)?;
                Ok(Sock::Unix(s))
            }))
        }
        Err(any) => any,
    };
    match any.downcast::<S>() {
        Ok(s) => Err(*s),
        // Unreachable: the box was made from an S.
        Err(_) => unreachable!("a boxed stream is of its own type"),
    }
}

/// The write side: replies gathered in `buf` and sent together; long read
/// data goes out from the thread's buffer in the same system call.
pub(super) struct Replies<W> {
    pub(super) sock: W,
    pub(super) buf: Vec<u8>,
}

impl<W: Wire> Replies<W> {
    /// Queue (or send) one reply.
    pub(super) fn push(&mut self, head: &[u8], data: &[u8]) -> io::Result<()> {
        let fits = self.buf.len() + head.len() + data.len() <= WRITE_BUFFER;
        if data.len() <= COPY_LIMIT && fits {
            self.buf.extend_from_slice(head);
            self.buf.extend_from_slice(data);
            return Ok(());
        }
        let r = write_all_vectored(&mut self.sock, &[&self.buf, head, data])
            .and_then(|()| self.sock.flush());
        self.buf.clear();
        r
    }

    /// Send what is queued, then `head`, then `len` bytes out of `pipe`
    /// (a zero-copy READ reply; only on a wire with a
    /// [`splice_target`](Wire::splice_target)).
    pub(super) fn push_spliced(&mut self, head: &[u8], pipe: &Pipe, len: usize) -> io::Result<()> {
        self.buf.extend_from_slice(head);
        let r = match self.sock.splice_target() {
            Some((fd, more)) => send_spliced(fd, more, &self.buf, pipe, len),
            None => Err(io::Error::other("this stream takes no spliced pages")),
        };
        self.buf.clear();
        r
    }

    /// Send what is queued.
    pub(super) fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = self
            .sock
            .write_all(&self.buf)
            .and_then(|()| self.sock.flush());
        self.buf.clear();
        r
    }
}

/// Write every byte of `parts`, in order, with vectored writes.
fn write_all_vectored(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut left = &mut slices[..];
    while !left.is_empty() {
        match w.write_vectored(left) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut left, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receive a WRITE payload of `len` bytes into the start of `buf`.
///
/// What the reader has buffered is copied. A rest of at least
/// [`DIRECT_RECEIVE`] bytes is then received straight into `buf` (through
/// the reader's buffer each byte would be copied twice); a shorter one
/// goes through the buffer, whose one receive may bring the next requests
/// too.
///
/// The reader's next receives are capped at one request header after a
/// long payload, and not capped after anything else (see [`Capped`]).
pub(super) fn receive<W: Wire>(
    rd: &mut BufReader<Capped<W>>,
    buf: &mut Vec<u8>,
    len: u32,
) -> io::Result<()> {
    let dst = room(buf, len as usize);
    let have = rd.buffer().len().min(dst.len());
    let long = dst.len() >= DIRECT_RECEIVE;
    if dst.len() - have < DIRECT_RECEIVE {
        rd.get_mut().cap = usize::MAX;
        rd.read_exact(dst)?;
    } else {
        rd.read_exact(&mut dst[..have])?;
        // The reader's buffer is empty now: the socket is next.
        rd.get_mut().sock.read_exact(&mut dst[have..])?;
    }
    rd.get_mut().cap = if long {
        proto::REQUEST_HEADER_LEN
    } else {
        usize::MAX
    };
    Ok(())
}

/// The first `n` bytes of `buf`, grown (zero-filled) only when shorter: the
/// buffer keeps the length it once had, so reuse costs no zero-filling.
pub(super) fn room(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if buf.len() < n {
        buf.resize(n, 0);
    }
    &mut buf[..n]
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use super::{Capped, Poll, Sock, POLL_CREDIT};

    fn capped(window: Duration) -> (Capped<Sock>, UnixStream) {
        let (a, b) = UnixStream::pair().expect("a socket pair");
        let c = Capped {
            sock: Sock::Unix(a),
            cap: usize::MAX,
            poll: Poll::new(window),
        };
        (c, b)
    }

    #[test]
    fn polling_stops_when_it_times_out_and_comes_back_when_requests_are_quick() {
        let mut p = Poll::new(Duration::from_micros(50));
        assert!(p.worth_it());
        for _ in 0..POLL_CREDIT / 2 {
            p.missed();
        }
        assert!(!p.worth_it(), "timed-out polls use the credit up");
        p.slept(Duration::from_millis(5));
        assert!(!p.worth_it(), "a long sleep earns nothing");
        p.slept(Duration::from_micros(10));
        assert!(
            p.worth_it(),
            "a request within the window earns the poll back"
        );
        for _ in 0..100 {
            p.caught();
        }
        assert_eq!(p.credit, POLL_CREDIT, "credit is capped");
        let off = Poll::new(Duration::ZERO);
        assert!(!off.worth_it(), "a zero window never polls");
    }

    #[test]
    fn a_polling_read_gets_data_sent_during_and_after_the_poll_and_end_of_stream() {
        let (mut c, mut peer) = capped(Duration::from_millis(1));
        // Data sent while the reader polls (and later, once it sleeps).
        let writer = std::thread::spawn(move || {
            for delay in [0u64, 200, 5_000] {
                std::thread::sleep(Duration::from_micros(delay));
                peer.write_all(&[delay as u8; 4])
                    .expect("the reader is there");
            }
            peer
        });
        let mut buf = [0u8; 4];
        for delay in [0u64, 200, 5_000] {
            c.read_exact(&mut buf).expect("the data arrives");
            assert_eq!(buf, [delay as u8; 4]);
        }
        drop(writer.join().expect("the writer ends"));
        assert_eq!(c.read(&mut buf).expect("end of stream"), 0);
    }

    #[test]
    fn a_polling_read_takes_at_most_the_cap() {
        let (mut c, mut peer) = capped(Duration::from_micros(100));
        c.cap = 3;
        peer.write_all(b"abcdef").expect("the reader is there");
        let mut buf = [0u8; 16];
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(c.read(&mut buf).expect("data"), 3);
        assert_eq!(&buf[..3], b"abc");
    }
}
