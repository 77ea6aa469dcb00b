//! A negotiated plain connection handed to a caller that speaks the
//! transmission phase itself: `tierd trace replay` keeps any number of
//! requests in flight from one thread and takes the replies on another,
//! sending exactly what a trace did, when it did, where [`super::Client`]
//! waits for each reply, resends writes after a lost connection and
//! flushes on its own.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use super::super::wire::Wire;
use super::connect::{handshake, Export, Sock};
use super::{ClientError, Target};

/// One end of a plain (not TLS) NBD connection past its handshake.
pub struct RawConnection(Sock);

/// Connect to `target` and negotiate its export with `NBD_OPT_GO`, each
/// step waiting at most `timeout`; the connection then has no timeouts.
/// `nbds://` targets are refused: this connection is plain.
pub fn open_raw(
    target: &Target,
    timeout: Duration,
) -> Result<(RawConnection, Export), ClientError> {
    if target.tls_name.is_some() {
        return Err(ClientError::Refused {
            target: target.to_string(),
            export: target.export.clone(),
            why: "a raw connection speaks plain NBD: give an nbd:// or nbd+unix:// address".into(),
        });
    }
    let (sock, export) = handshake(target, None, timeout)?;
    sock.set_timeouts(None).map_err(|source| ClientError::Io {
        target: target.to_string(),
        source,
    })?;
    Ok((RawConnection(sock), export))
}

impl RawConnection {
    /// A second handle on the same socket (one thread writes, one reads).
    pub fn try_clone(&self) -> io::Result<RawConnection> {
        self.0.try_clone().map(RawConnection)
    }

    /// Shut both directions down, waking a thread blocked on the socket.
    pub fn close(&self) {
        // Already shut down or closed: nothing more to do.
        let _ = self.0.shutdown(Shutdown::Both);
    }

    /// Fail reads that wait longer than `t` (`None`: wait for ever). The
    /// socket's, so it holds for every handle on it.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match &self.0 {
            Sock::Tcp(s) => s.set_read_timeout(t),
            Sock::Unix(s) => s.set_read_timeout(t),
        }
    }
}

impl Read for RawConnection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for RawConnection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}
