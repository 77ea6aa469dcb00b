//! Opening a connection to a remote export: the socket (TCP or Unix),
//! fixed newstyle negotiation with `NBD_OPT_GO`, and TLS through
//! `NBD_OPT_STARTTLS` on a relay thread of its own.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_rustls::rustls;
use tracing::warn;

pub(super) use super::super::socket::Sock;
use super::super::wire::Wire;
use super::{proto, ClientError, Endpoint, Target, MAX_OPTION_REPLY, MAX_REQUEST};

/// Shut `sock` down both ways, waking a thread blocked on it.
pub(super) fn close(sock: &Sock) {
    // Already shut down or closed: nothing more to do.
    let _ = sock.shutdown(Shutdown::Both);
}

/// Open a plain stream to `endpoint` (TCP with Nagle off, or a Unix
/// socket), trying each address the host name resolves to.
fn connect(endpoint: &Endpoint, timeout: Duration) -> io::Result<Sock> {
    match endpoint {
        Endpoint::Tcp(addr) => {
            let mut last = io::Error::new(
                io::ErrorKind::NotFound,
                "the host name resolves to no address",
            );
            for a in addr.to_socket_addrs()? {
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        return Ok(Sock::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        Endpoint::Unix(p) => UnixStream::connect(p).map(Sock::Unix),
    }
}

/// What the handshake learned about the export.
#[derive(Debug, Clone, Copy)]
pub struct Export {
    /// Bytes.
    pub size: u64,
    /// Transmission flags (`proto::FLAG_*`).
    pub flags: u16,
    /// Longest request to send: the server's maximum block size, at most
    /// the client's own cap.
    pub max_request: u32,
}

impl Export {
    /// Whether the server advertised `flag` (`proto::FLAG_*`).
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

fn protocol(target: &Target, what: impl Into<String>) -> ClientError {
    ClientError::Protocol {
        target: target.to_string(),
        what: what.into(),
    }
}

/// Connect and negotiate the export with `NBD_OPT_GO`.
pub(super) fn handshake(
    target: &Target,
    tls: Option<&Arc<rustls::ClientConfig>>,
    timeout: Duration,
) -> Result<(Sock, Export), ClientError> {
    let tls_failure: std::cell::RefCell<Option<TlsFailure>> = Default::default();
    let io_err = |source| {
        let why = tls_failure.borrow().as_ref().and_then(|f| f.lock().clone());
        match why {
            Some(why) => ClientError::Refused {
                target: target.to_string(),
                export: target.export.clone(),
                why: format!("the TLS session failed: {why}"),
            },
            None => ClientError::Io {
                target: target.to_string(),
                source,
            },
        }
    };
    let mut s = connect(&target.endpoint, timeout).map_err(io_err)?;
    s.set_timeouts(Some(timeout)).map_err(io_err)?;
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).map_err(io_err)?;
    let magic = u64::from_be_bytes(greeting[0..8].try_into().unwrap_or_default());
    let opt = u64::from_be_bytes(greeting[8..16].try_into().unwrap_or_default());
    if magic != proto::NBDMAGIC || opt != proto::IHAVEOPT {
        return Err(protocol(target, "not a newstyle NBD server (bad greeting)"));
    }
    let sflags = u16::from_be_bytes([greeting[16], greeting[17]]);
    if sflags & proto::FLAG_FIXED_NEWSTYLE == 0 {
        return Err(protocol(target, "the server does not speak fixed newstyle"));
    }
    let mut cflags = proto::FLAG_C_FIXED_NEWSTYLE;
    if sflags & proto::FLAG_NO_ZEROES != 0 {
        cflags |= proto::FLAG_C_NO_ZEROES;
    }
    s.write_all(&cflags.to_be_bytes()).map_err(io_err)?;
    if let Some(name) = &target.tls_name {
        let config = tls.ok_or_else(|| ClientError::Refused {
            target: target.to_string(),
            export: target.export.clone(),
            why: "TLS (nbds://) needs the CA that signed the server's certificate (remote-tls-ca)"
                .into(),
        })?;
        s.write_all(&proto::encode_option(proto::OPT_STARTTLS, &[]))
            .map_err(io_err)?;
        let mut h = [0u8; proto::OPTION_REPLY_HEADER_LEN];
        s.read_exact(&mut h).map_err(io_err)?;
        let r = proto::parse_option_reply(&h).map_err(|e| protocol(target, e.to_string()))?;
        if r.len > MAX_OPTION_REPLY {
            return Err(protocol(target, format!("option reply of {} bytes", r.len)));
        }
        let mut data = vec![0u8; r.len as usize];
        s.read_exact(&mut data).map_err(io_err)?;
        if r.option != proto::OPT_STARTTLS || r.reply_type != proto::REP_ACK {
            return Err(ClientError::Refused {
                target: target.to_string(),
                export: target.export.clone(),
                why: format!(
                    "the server did not agree to TLS (reply {:#x}: {})",
                    r.reply_type,
                    String::from_utf8_lossy(&data)
                ),
            });
        }
        let (plain, failure) = start_tls(target, s, name, config.clone(), timeout)?;
        s = plain;
        *tls_failure.borrow_mut() = Some(failure);
        s.set_timeouts(Some(timeout)).map_err(io_err)?;
    }
    let mut go = Vec::with_capacity(8 + target.export.len());
    go.extend_from_slice(&(target.export.len() as u32).to_be_bytes());
    go.extend_from_slice(target.export.as_bytes());
    go.extend_from_slice(&1u16.to_be_bytes());
    go.extend_from_slice(&proto::INFO_BLOCK_SIZE.to_be_bytes());
    s.write_all(&proto::encode_option(proto::OPT_GO, &go))
        .map_err(io_err)?;
    let mut export: Option<(u64, u16)> = None;
    let mut max_request = MAX_REQUEST;
    loop {
        let mut h = [0u8; proto::OPTION_REPLY_HEADER_LEN];
        s.read_exact(&mut h).map_err(io_err)?;
        let r = proto::parse_option_reply(&h).map_err(|e| protocol(target, e.to_string()))?;
        if r.option != proto::OPT_GO {
            return Err(protocol(
                target,
                format!("reply to option {} while negotiating GO", r.option),
            ));
        }
        if r.len > MAX_OPTION_REPLY {
            return Err(protocol(target, format!("option reply of {} bytes", r.len)));
        }
        let mut data = vec![0u8; r.len as usize];
        s.read_exact(&mut data).map_err(io_err)?;
        match r.reply_type {
            proto::REP_ACK => break,
            proto::REP_INFO if data.len() >= 2 => {
                let typ = u16::from_be_bytes([data[0], data[1]]);
                if typ == proto::INFO_EXPORT && data.len() == 12 {
                    let size = u64::from_be_bytes(data[2..10].try_into().unwrap_or_default());
                    export = Some((size, u16::from_be_bytes([data[10], data[11]])));
                } else if typ == proto::INFO_BLOCK_SIZE && data.len() == 14 {
                    let max = u32::from_be_bytes(data[10..14].try_into().unwrap_or_default());
                    if max > 0 {
                        max_request = max_request.min(max);
                    }
                }
            }
            proto::REP_INFO => {}
            t if t & proto::REP_FLAG_ERROR != 0 => {
                let msg = String::from_utf8_lossy(&data).into_owned();
                let why = match t {
                    proto::REP_ERR_UNKNOWN => format!("no such export ({msg})"),
                    proto::REP_ERR_TLS_REQD => format!(
                        "the server requires TLS: use an nbds:// address and set remote-tls-ca ({msg})"
                    ),
                    proto::REP_ERR_UNSUP => {
                        format!("the server does not support NBD_OPT_GO ({msg})")
                    }
                    _ => format!("error {t:#x} ({msg})"),
                };
                return Err(ClientError::Refused {
                    target: target.to_string(),
                    export: target.export.clone(),
                    why,
                });
            }
            t => {
                return Err(protocol(
                    target,
                    format!("unexpected option reply type {t}"),
                ))
            }
        }
    }
    let (size, flags) =
        export.ok_or_else(|| protocol(target, "GO ended without the export's size"))?;
    s.set_timeouts(None).map_err(io_err)?;
    Ok((
        s,
        Export {
            size,
            flags,
            max_request: max_request.max(4096),
        },
    ))
}

/// Where the TLS relay leaves the error that ended its session.
type TlsFailure = Arc<Mutex<Option<String>>>;

/// Run TLS over `sock` on a thread of its own that relays between the
/// TLS session and one end of a socket pair; the other end is returned,
/// once the TLS handshake succeeded, with where the relay puts the error
/// that ends the session (a server that refuses the client's certificate
/// says so only after the handshake, in TLS 1.3).
fn start_tls(
    target: &Target,
    sock: Sock,
    name: &str,
    config: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<(Sock, TlsFailure), ClientError> {
    let io_err = |source| ClientError::Io {
        target: target.to_string(),
        source,
    };
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).map_err(|e| {
        ClientError::BadUri {
            uri: target.to_string(),
            why: format!("{name:?} is not a name a certificate can carry: {e}"),
        }
    })?;
    let (mine, relay_end) = UnixStream::pair().map_err(io_err)?;
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let failure = Arc::new(Mutex::new(None));
    let failed = failure.clone();
    std::thread::Builder::new()
        .name("tierd-remote-tls".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(format!("cannot start the TLS relay: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let connector = tokio_rustls::TlsConnector::from(config);
                let relay = async {
                    relay_end.set_nonblocking(true)?;
                    let plain = tokio::net::UnixStream::from_std(relay_end)?;
                    match sock {
                        Sock::Tcp(t) => {
                            t.set_nonblocking(true)?;
                            let t = tokio::net::TcpStream::from_std(t)?;
                            relay(
                                connector.connect(server_name, t).await,
                                plain,
                                &tx,
                                &failure,
                            )
                            .await;
                        }
                        Sock::Unix(u) => {
                            u.set_nonblocking(true)?;
                            let u = tokio::net::UnixStream::from_std(u)?;
                            relay(
                                connector.connect(server_name, u).await,
                                plain,
                                &tx,
                                &failure,
                            )
                            .await;
                        }
                    }
                    Ok::<(), io::Error>(())
                };
                if let Err(e) = relay.await {
                    let _ = tx.send(Err(e.to_string()));
                }
            });
        })
        .map_err(io_err)?;
    match rx.recv_timeout(timeout) {
        Ok(Ok(())) => Ok((Sock::Unix(mine), failed)),
        Ok(Err(why)) => Err(ClientError::Refused {
            target: target.to_string(),
            export: target.export.clone(),
            why: format!("TLS handshake failed: {why}"),
        }),
        Err(_) => Err(io_err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the TLS handshake did not finish in time",
        ))),
    }
}

/// Relay between a TLS session (once its handshake is done, reported on
/// `tx`) and the plain end, until either side ends.
async fn relay<S>(
    tls: io::Result<tokio_rustls::client::TlsStream<S>>,
    plain: tokio::net::UnixStream,
    tx: &std::sync::mpsc::Sender<Result<(), String>>,
    failure: &Mutex<Option<String>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let tls = match tls {
        Ok(t) => {
            let _ = tx.send(Ok(()));
            t
        }
        Err(e) => {
            let _ = tx.send(Err(e.to_string()));
            return;
        }
    };
    let (mut tr, mut tw) = tokio::io::split(tls);
    let (mut pr, mut pw) = plain.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut pr, &mut tw).await;
        let _ = tokio::io::AsyncWriteExt::shutdown(&mut tw).await;
    };
    let down = async {
        if let Err(e) = tokio::io::copy(&mut tr, &mut pw).await {
            // Before the plain end closes, so the handshake can say why.
            *failure.lock() = Some(e.to_string());
            warn!(error = %e, "the TLS session with the remote capacity tier failed");
        }
    };
    // Either side ending ends the relay: the client closed its end, or
    // the server closed the connection (the client's reader sees EOF).
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}
