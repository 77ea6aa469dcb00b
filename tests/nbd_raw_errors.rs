//! Error handling of the real daemon's NBD transmission phase, driven by a
//! minimal raw-bytes client written here (fixed newstyle handshake,
//! NBD_OPT_GO, no structured replies, so every reply is a simple reply):
//! out-of-range and oversized requests, unknown commands and flags get the
//! right errno, write payloads are consumed even when refused, and the
//! connection keeps working after every error; TRIM reads back as zeros;
//! NBD_CMD_DISC replies to everything in flight before closing.
//! (tests/nbd_handshake.rs and tests/nbd_transmission.rs cover the server against an in-memory export.)

mod common;
mod raw_client;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{random_bytes, Daemon, DaemonOptions, MIB};
use raw_client::{
    go_payload, read_greeting, read_option_reply, request, send_option, CMD_DISC, CMD_FLUSH,
    CMD_READ, CMD_TRIM, CMD_WRITE, EINVAL, ENOSPC, OPT_GO, REP_ACK, REP_INFO, SIMPLE_REPLY_MAGIC,
};

const FLAG_FIXED_NEWSTYLE: u32 = 1;
const FLAG_NO_ZEROES: u32 = 2;
const INFO_EXPORT: u16 = 0;

const MAX_REQUEST: u32 = 32 * 1024 * 1024;

/// A raw NBD connection in the transmission phase.
struct Conn {
    s: TcpStream,
    size: u64,
    flags: u16,
    cookie: u64,
}

/// A simple reply.
#[derive(Debug)]
struct Reply {
    error: u32,
    cookie: u64,
}

impl Conn {
    fn connect(d: &Daemon) -> Conn {
        let mut s = TcpStream::connect(d.addr()).expect("connecting to tierd");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("setting a read timeout");
        s.set_nodelay(true).expect("TCP_NODELAY");
        // Checks NBDMAGIC and IHAVEOPT (newstyle).
        let hflags = read_greeting(&mut s).expect("server greeting");
        assert!(
            u32::from(hflags) & FLAG_FIXED_NEWSTYLE != 0,
            "server is not fixed newstyle"
        );
        let mut cflags = FLAG_FIXED_NEWSTYLE;
        if u32::from(hflags) & FLAG_NO_ZEROES != 0 {
            cflags |= FLAG_NO_ZEROES;
        }
        s.write_all(&cflags.to_be_bytes()).expect("client flags");

        // NBD_OPT_GO for the default export "" with no info requests.
        send_option(&mut s, OPT_GO, &go_payload("")).expect("sending NBD_OPT_GO");

        let (mut size, mut flags) = (None, 0);
        loop {
            // Checks the option reply magic.
            let (option, rtype, data) = read_option_reply(&mut s).expect("option reply");
            assert_eq!(option, OPT_GO, "option reply to the wrong option");
            let len = data.len();
            match rtype {
                REP_ACK => break,
                REP_INFO => {
                    let itype = u16::from_be_bytes([data[0], data[1]]);
                    if itype == INFO_EXPORT {
                        assert_eq!(len, 12, "NBD_INFO_EXPORT length");
                        size = Some(u64::from_be_bytes(data[2..10].try_into().expect("8 bytes")));
                        flags = u16::from_be_bytes([data[10], data[11]]);
                    }
                }
                t if t & (1 << 31) != 0 => panic!(
                    "NBD_OPT_GO refused: error {t:#x}: {}",
                    String::from_utf8_lossy(&data)
                ),
                t => panic!("unexpected option reply type {t}"),
            }
        }
        Conn {
            s,
            size: size.expect("NBD_OPT_GO sent no NBD_INFO_EXPORT"),
            flags,
            cookie: 0,
        }
    }

    /// Send a request header (and payload); return its cookie.
    fn send(&mut self, flags: u16, cmd: u16, offset: u64, len: u32, payload: &[u8]) -> u64 {
        self.cookie += 1;
        let h = request(flags, cmd, self.cookie, offset, len);
        self.s.write_all(&h).expect("sending a request header");
        self.s.write_all(payload).expect("sending a write payload");
        self.cookie
    }

    fn reply(&mut self) -> Reply {
        assert_eq!(
            read_u32(&mut self.s),
            SIMPLE_REPLY_MAGIC,
            "simple reply magic"
        );
        let error = read_u32(&mut self.s);
        let cookie = read_u64(&mut self.s);
        Reply { error, cookie }
    }

    /// One request, one reply (checked to be for it); returns the errno.
    fn call(&mut self, flags: u16, cmd: u16, offset: u64, len: u32, payload: &[u8]) -> u32 {
        let cookie = self.send(flags, cmd, offset, len, payload);
        let r = self.reply();
        assert_eq!(r.cookie, cookie, "reply to the wrong request");
        r.error
    }

    fn read(&mut self, offset: u64, len: u32) -> Vec<u8> {
        let err = self.call(0, CMD_READ, offset, len, &[]);
        assert_eq!(err, 0, "READ {offset}+{len} failed with errno {err}");
        let mut buf = vec![0u8; len as usize];
        self.s.read_exact(&mut buf).expect("READ payload");
        buf
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let len = u32::try_from(data.len()).expect("write length");
        let err = self.call(0, CMD_WRITE, offset, len, data);
        assert_eq!(err, 0, "WRITE {offset}+{len} failed with errno {err}");
    }

    /// A normal READ of known data still works on this connection.
    fn assert_alive(&mut self, what: &str, known: &[u8]) {
        let got = self.read(0, known.len() as u32);
        assert!(
            got == known,
            "after {what}: a normal READ returned the wrong data"
        );
    }
}

fn read_u32(s: &mut TcpStream) -> u32 {
    let mut b = [0u8; 4];
    s.read_exact(&mut b).expect("reading from tierd");
    u32::from_be_bytes(b)
}

fn read_u64(s: &mut TcpStream) -> u64 {
    let mut b = [0u8; 8];
    s.read_exact(&mut b).expect("reading from tierd");
    u64::from_be_bytes(b)
}

#[test]
fn errors_get_the_right_errno_and_keep_the_connection() {
    let d = Daemon::start_with(DaemonOptions::small());
    let mut c = Conn::connect(&d);
    let size = c.size;
    assert!(size > 64 * MIB, "export size {size}");
    assert!(c.flags & 1 != 0, "NBD_FLAG_HAS_FLAGS not set");
    let known = random_bytes(4096, 99);
    c.write(0, &known);
    c.assert_alive("a write", &known);

    // READ past the end, and straddling the end.
    assert_eq!(c.call(0, CMD_READ, size, 4096, &[]), EINVAL, "READ at size");
    c.assert_alive("READ at size", &known);
    assert_eq!(
        c.call(0, CMD_READ, size - 4096, 8192, &[]),
        EINVAL,
        "READ straddling the end"
    );
    c.assert_alive("READ straddling the end", &known);

    // WRITE past the end: ENOSPC, and the payload is consumed (else it
    // would be parsed as the next request header).
    let payload = vec![0x5au8; 8192];
    assert_eq!(
        c.call(0, CMD_WRITE, size - 4096, 8192, &payload),
        ENOSPC,
        "WRITE straddling the end"
    );
    c.assert_alive("an out-of-range WRITE", &known);
    assert_eq!(
        c.read(size - 4096, 4096),
        vec![0u8; 4096],
        "a refused WRITE must write nothing"
    );

    // READ of max + 1.
    assert_eq!(
        c.call(0, CMD_READ, 0, MAX_REQUEST + 1, &[]),
        EINVAL,
        "READ of 32 MiB + 1"
    );
    c.assert_alive("an oversized READ", &known);
    // ... while exactly the maximum is fine.
    let big = c.read(0, MAX_REQUEST);
    assert_eq!(&big[..4096], &known[..], "32 MiB READ");

    // WRITE of 33 MiB: EINVAL, payload consumed, nothing written.
    let payload = vec![0xa5u8; 33 * MIB as usize];
    assert_eq!(
        c.call(0, CMD_WRITE, 0, payload.len() as u32, &payload),
        EINVAL,
        "WRITE of 33 MiB"
    );
    c.assert_alive("an oversized WRITE", &known);
    assert!(
        c.read(MIB, 4096) == vec![0u8; 4096],
        "a refused oversized WRITE must write nothing"
    );

    // Unknown command.
    assert_eq!(c.call(0, 99, 0, 4096, &[]), EINVAL, "command 99");
    c.assert_alive("an unknown command", &known);

    // Unknown flag bit on READ.
    assert_eq!(
        c.call(1 << 12, CMD_READ, 0, 4096, &[]),
        EINVAL,
        "READ with flag bit 12"
    );
    c.assert_alive("an unknown flag", &known);

    // FLUSH works after all that.
    assert_eq!(c.call(0, CMD_FLUSH, 0, 0, &[]), 0, "FLUSH");
    c.assert_alive("FLUSH", &known);
}

#[test]
fn trim_reads_back_zeros() {
    let d = Daemon::start_with(DaemonOptions::small());
    let mut c = Conn::connect(&d);
    assert!(c.flags & (1 << 5) != 0, "NBD_FLAG_SEND_TRIM not set");
    let data = random_bytes(2 * MIB as usize, 7);
    c.write(4 * MIB, &data);
    assert!(
        c.read(4 * MIB, 2 * MIB as u32) == data,
        "read back before TRIM"
    );

    // A whole extent ...
    assert_eq!(c.call(0, CMD_TRIM, 4 * MIB, MIB as u32, &[]), 0, "TRIM");
    assert!(
        c.read(4 * MIB, MIB as u32) == vec![0u8; MIB as usize],
        "a trimmed extent must read as zeros"
    );
    // ... and 64 KiB (block aligned) inside the next one.
    let (off, len) = (5 * MIB + 256 * 1024, 64 * 1024u32);
    assert_eq!(c.call(0, CMD_TRIM, off, len, &[]), 0, "TRIM");
    assert!(
        c.read(off, len) == vec![0u8; len as usize],
        "a trimmed range must read as zeros"
    );
    let rest = c.read(5 * MIB, MIB as u32);
    let base = MIB as usize;
    assert!(
        rest[..256 * 1024] == data[base..base + 256 * 1024]
            && rest[320 * 1024..] == data[base + 320 * 1024..],
        "TRIM touched data outside its range"
    );
    // Out-of-range TRIM is refused and harmless.
    let size = c.size;
    assert_eq!(c.call(0, CMD_TRIM, size, 4096, &[]), EINVAL, "TRIM at size");
    assert!(c.read(5 * MIB, MIB as u32) == rest, "after a refused TRIM");
}

#[test]
fn disc_replies_to_in_flight_requests_then_closes() {
    let d = Daemon::start_with(DaemonOptions::small());
    let mut c = Conn::connect(&d);
    let data = random_bytes(MIB as usize, 8);

    // Pipeline writes and reads without waiting, then DISC.
    let mut expected = Vec::new();
    for i in 0..8u64 {
        expected.push((c.send(0, CMD_WRITE, i * MIB, MIB as u32, &data), false));
    }
    for i in 0..8u64 {
        expected.push((c.send(0, CMD_READ, 100 * MIB + i * 4096, 4096, &[]), true));
    }
    expected.push((c.send(0, CMD_FLUSH, 0, 0, &[]), false));
    c.send(0, CMD_DISC, 0, 0, &[]);

    // Every in-flight request gets its reply (in any order) ...
    let mut pending = expected.clone();
    while !pending.is_empty() {
        let r = c.reply();
        assert_eq!(r.error, 0, "request {} failed", r.cookie);
        let i = pending
            .iter()
            .position(|(k, _)| *k == r.cookie)
            .unwrap_or_else(|| panic!("reply for unknown cookie {}", r.cookie));
        let (_, is_read) = pending.remove(i);
        if is_read {
            let mut buf = vec![0u8; 4096];
            c.s.read_exact(&mut buf).expect("READ payload before DISC");
            assert!(buf == vec![0u8; 4096], "unwritten area read non-zero");
        }
    }
    // ... then the server closes the connection (DISC has no reply).
    let mut rest = Vec::new();
    let n =
        c.s.read_to_end(&mut rest)
            .expect("the server should close the connection after DISC");
    assert_eq!(n, 0, "unexpected bytes after the last reply: {n}");

    // The writes sent before DISC were done.
    let mut c2 = Conn::connect(&d);
    for i in 0..8u64 {
        assert!(
            c2.read(i * MIB, MIB as u32) == data,
            "write {i} before DISC is missing"
        );
    }
}
