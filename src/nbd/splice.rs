//! Zero-copy READ replies on plain sockets. A serving thread keeps one
//! [`Pipe`]; the export fills it with references to the cached pages of
//! the data ([`Export::read_to_pipe`](super::Export::read_to_pipe)), and
//! [`send_spliced`] sends the reply header and then moves those pages to
//! the socket with `splice`. The server copies none of the data: the
//! kernel's socket layer takes the pages themselves (on loopback the client
//! copies them out once, as it would anyway).
//!
//! The transmission loop uses it on plain sockets for READs longer than its
//! copy limit, when the export answers; anything else takes the copying path. A pipe holds at
//! most [`PIPE_ROOM`] bytes (the default limit of `F_SETPIPE_SZ` for a
//! process without `CAP_SYS_RESOURCE`), so longer READs are copied.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::SendFlags;
use rustix::pipe::SpliceFlags;
use rustix::pipe::{fcntl_getpipe_size, fcntl_setpipe_size, pipe_with, splice, PipeFlags};

/// The room asked for a thread's pipe (`/proc/sys/fs/pipe-max-size` by
/// default).
pub(super) const PIPE_ROOM: usize = 1 << 20;

/// One thread's pipe: pages go in at `w`, the socket takes them out of `r`.
pub(super) struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    room: usize,
}

impl Pipe {
    /// A new pipe, as large as the system allows up to [`PIPE_ROOM`].
    pub(super) fn new() -> io::Result<Pipe> {
        let (r, w) = pipe_with(PipeFlags::CLOEXEC)?;
        let room = match fcntl_setpipe_size(&w, PIPE_ROOM) {
            Ok(n) => n,
            // Over the limit for this process: keep the size it has.
            Err(_) => fcntl_getpipe_size(&w)?,
        };
        Ok(Pipe { r, w, room })
    }

    /// Bytes the pipe holds at most.
    pub(super) fn room(&self) -> usize {
        self.room
    }

    /// Where the export puts the data.
    pub(super) fn input(&self) -> BorrowedFd<'_> {
        self.w.as_fd()
    }
}

/// Send `head` in full, then `len` bytes out of `pipe`, to `sock`. `more`:
/// the socket may hold the head back for the data (MSG_MORE, TCP). On an
/// error the pipe may still hold data: the caller drops it.
pub(super) fn send_spliced(
    sock: BorrowedFd<'_>,
    more: bool,
    head: &[u8],
    pipe: &Pipe,
    len: usize,
) -> io::Result<()> {
    let flags = if more {
        SendFlags::MORE | SendFlags::NOSIGNAL
    } else {
        SendFlags::NOSIGNAL
    };
    let mut sent = 0;
    while sent < head.len() {
        match rustix::net::send(sock, &head[sent..], flags) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mut left = len;
    while left > 0 {
        match splice(&pipe.r, None, sock, None, left, SpliceFlags::empty()) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the read's pipe ran dry before its data was sent",
                ))
            }
            Ok(n) => left -= n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A serving thread's pipe for zero-copy READs.
pub(super) enum Spliced {
    /// None made yet.
    Untried,
    /// The pipe.
    Ready(Pipe),
    /// No pipe could be made: READs are copied.
    Off,
}

impl Spliced {
    /// The pipe, made on first use, if it can take `len` bytes.
    pub(super) fn get(&mut self, len: usize) -> Option<&Pipe> {
        if matches!(self, Spliced::Untried) {
            *self = match Pipe::new() {
                Ok(p) => Spliced::Ready(p),
                Err(e) => {
                    tracing::debug!("no pipe for zero-copy reads, copying them: {e}");
                    Spliced::Off
                }
            };
        }
        match self {
            Spliced::Ready(p) if len <= p.room() => Some(p),
            _ => None,
        }
    }

    /// Drop the pipe (it may hold stale data); a new one is made next time.
    pub(super) fn discard(&mut self) {
        if matches!(self, Spliced::Ready(_)) {
            *self = Spliced::Untried;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_pipe_gets_room_and_its_data_reaches_the_socket_after_the_head() {
        let pipe = Pipe::new().unwrap();
        assert!(pipe.room() >= 64 * 1024, "room {}", pipe.room());
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let n = data.len().min(pipe.room());
        let mut w = std::fs::File::from(pipe.w.try_clone().unwrap());
        w.write_all(&data[..n]).unwrap();
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        send_spliced(a.as_fd(), false, b"HEAD", &pipe, n).unwrap();
        drop(a);
        let got = reader.join().unwrap();
        assert_eq!(&got[..4], b"HEAD");
        assert_eq!(&got[4..], &data[..n]);
    }
}
