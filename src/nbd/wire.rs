//! [`Wire`]: a connection's stream as the transmission loop uses it, with
//! blocking receive and send. The loop is one for every connection; the
//! wire is the only difference between them, as nbdkit swaps a
//! connection's receive and send for TLS and keeps one loop:
//!
//! - a plain TCP or Unix socket ([`Sock`](super::socket::Sock)): the
//!   kernel's receive and send, and it can tell that a request waits
//!   without reading it (polling and solo serving use that) and take
//!   spliced pages (zero-copy READs);
//! - any other stream ([`Bridge`](super::bridge::Bridge): TLS after
//!   STARTTLS, an in-memory stream): the stream's own async receive and
//!   send, run to completion on the connection's runtime.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::BorrowedFd;

/// A connection's stream, as each serving thread reads and writes it: one
/// handle for the reader, one for the writer, one to ask and shut with
/// ([`Wire::try_clone`]).
pub(super) trait Wire: Read + Write + Send + Sync + Sized + 'static {
    /// Another handle on the same stream.
    fn try_clone(&self) -> io::Result<Self>;

    /// Whether [`Wire::ready`] can tell that bytes wait (without it, the
    /// loop neither polls for the next request nor serves solo).
    fn peeks(&self) -> bool;

    /// Whether bytes wait to be read, asked without waiting and without
    /// reading them; `false` where the wire cannot tell.
    fn ready(&self) -> io::Result<bool>;

    /// Shut the receiving side, the sending side or both: a receive then
    /// sees end of stream, a send fails, and neither waits any more.
    fn shutdown(&self, how: Shutdown) -> io::Result<()>;

    /// The socket that spliced pages can be sent to, and whether it may
    /// hold a reply's head back for them (MSG_MORE); `None` where the data
    /// must be copied.
    fn splice_target(&self) -> Option<(BorrowedFd<'_>, bool)>;
}
