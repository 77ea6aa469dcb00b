//! [`Bridge`]: any async stream that is not a plain socket (TLS after
//! `NBD_OPT_STARTTLS`, an in-memory stream) as a blocking [`Wire`], so
//! that the transmission loop serves it as it serves a socket. Each receive
//! and send is the stream's own async one, run to completion on the
//! connection's runtime by the serving thread that asked; the receiving
//! and the sending half are locked apart, so that a thread waiting for the
//! next request never holds up a reply. Shutting a side wakes whoever
//! waits on it: a receive then sees end of stream, a send fails.

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::fd::BorrowedFd;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::runtime::Handle;
use tokio::sync::{watch, Mutex};

use super::wire::Wire;

type Receiving = Pin<Box<dyn AsyncRead + Send>>;
type Sending = Pin<Box<dyn AsyncWrite + Send>>;

/// A handle on a bridged stream (cheap to clone: every handle is the same
/// stream).
pub(super) struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    rx: Mutex<Receiving>,
    tx: Mutex<Sending>,
    runtime: Handle,
    shut: watch::Sender<Shut>,
}

/// The sides shut so far.
#[derive(Debug, Clone, Copy, Default)]
struct Shut {
    receive: bool,
    send: bool,
}

impl Bridge {
    /// Bridge `stream`, driven on `runtime` (the one the stream belongs
    /// to).
    pub(super) fn new<S>(stream: S, runtime: Handle) -> Bridge
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rx, tx) = tokio::io::split(stream);
        Bridge {
            inner: Arc::new(Inner {
                rx: Mutex::new(Box::pin(rx)),
                tx: Mutex::new(Box::pin(tx)),
                runtime,
                shut: watch::Sender::new(Shut::default()),
            }),
        }
    }

    /// End the stream in order once every reply has gone out (a TLS
    /// stream sends its close_notify), unless its sending side was shut
    /// (the connection broke).
    pub(super) async fn close(&self) -> io::Result<()> {
        if self.inner.shut.borrow().send {
            return Ok(());
        }
        let mut tx = self.inner.tx.lock().await;
        tx.flush().await?;
        tx.shutdown().await
    }

    /// Run one send to completion: `Err` once the sending side is shut.
    fn send<T>(&self, op: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
        let mut shut = self.inner.shut.subscribe();
        self.inner.runtime.block_on(async {
            tokio::select! {
                biased;
                _ = shut.wait_for(|s| s.send) => Err(io::ErrorKind::BrokenPipe.into()),
                r = op => r,
            }
        })
    }
}

impl Read for Bridge {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let inner = &*self.inner;
        let mut shut = inner.shut.subscribe();
        inner.runtime.block_on(async {
            let mut rx = tokio::select! {
                biased;
                _ = shut.wait_for(|s| s.receive) => return Ok(0),
                rx = inner.rx.lock() => rx,
            };
            // A read is cancel-safe: what it would have returned stays in
            // the stream.
            tokio::select! {
                biased;
                _ = shut.wait_for(|s| s.receive) => Ok(0),
                r = rx.read(buf) => r,
            }
        })
    }
}

impl Write for Bridge {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    /// A write, flushed: what it took is on its way once it returns.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let tx = &self.inner.tx;
        self.send(async {
            let mut tx = tx.lock().await;
            let n = tx.write_vectored(bufs).await?;
            tx.flush().await?;
            Ok(n)
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        let tx = &self.inner.tx;
        self.send(async { tx.lock().await.flush().await })
    }
}

impl Wire for Bridge {
    fn try_clone(&self) -> io::Result<Bridge> {
        Ok(Bridge {
            inner: Arc::clone(&self.inner),
        })
    }

    fn peeks(&self) -> bool {
        false
    }

    fn ready(&self) -> io::Result<bool> {
        Ok(false)
    }

    fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shut.send_modify(|s| {
            s.receive |= matches!(how, Shutdown::Read | Shutdown::Both);
            s.send |= matches!(how, Shutdown::Write | Shutdown::Both);
        });
        Ok(())
    }

    fn splice_target(&self) -> Option<(BorrowedFd<'_>, bool)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bridged in-memory stream carries bytes both ways, and shutting
    /// it wakes a receive and a send that wait.
    #[test]
    fn bytes_go_both_ways_and_a_shut_side_stops_waiting() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (ours, theirs) = tokio::io::duplex(8);
        let mut b = Bridge::new(ours, rt.handle().clone());
        let (mut their_rx, mut their_tx) = tokio::io::split(theirs);
        let mut reader = b.try_clone().expect("clone");
        let got = std::thread::spawn(move || {
            let mut buf = [0u8; 5];
            reader.read_exact(&mut buf).map(|()| buf)
        });
        rt.block_on(their_tx.write_all(b"hello")).expect("sent");
        assert_eq!(&got.join().expect("join").expect("read"), b"hello");
        let mut writer = b.try_clone().expect("clone");
        let sent = std::thread::spawn(move || writer.write_all(b"world"));
        let mut buf = [0u8; 5];
        rt.block_on(their_rx.read_exact(&mut buf))
            .expect("received");
        assert_eq!(&buf, b"world");
        sent.join().expect("join").expect("write");
        // Nothing comes: the receive waits until the side is shut.
        let mut reader = b.try_clone().expect("clone");
        let waiting = std::thread::spawn(move || reader.read(&mut [0u8; 4]));
        std::thread::sleep(std::time::Duration::from_millis(20));
        b.shutdown(Shutdown::Read).expect("shut");
        assert_eq!(waiting.join().expect("join").expect("end of stream"), 0);
        // The peer reads nothing more: a send fills the 8-byte pipe and
        // waits until the side is shut.
        let mut writer = b.try_clone().expect("clone");
        let stuck = std::thread::spawn(move || writer.write_all(&[7u8; 64]));
        std::thread::sleep(std::time::Duration::from_millis(20));
        b.shutdown(Shutdown::Both).expect("shut");
        let e = stuck.join().expect("join").expect_err("a shut side fails");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert!(b.write(b"x").is_err(), "no send after the shut");
    }
}
