//! The open-loop replay: each request sent at its scheduled time whatever
//! the ones before it are doing, over N connections, with any number in
//! flight on each. Per connection, a sender thread makes the next
//! request's bytes ready, sleeps until it is due and writes it, and a
//! reader thread takes the replies in whatever order they come. Each
//! records its own times (send, reply), joined after the run: the two
//! never share a lock.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use tierd::nbd::client::Target;
use tierd::nbd::proto;
use tierd::trace::Op;

use super::data::pattern;
use super::nbd::{self, Export, Stream};
use super::progress::{Progress, Unit};

/// A reply must come within this long of the one before it on its
/// connection, or the replay fails (the daemon is stuck).
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);
/// The first request is due this long after the connections are up.
const LEAD: Duration = Duration::from_millis(100);
/// Bits of a cookie that number a request's pieces.
const PIECE_BITS: u32 = 20;

/// One request to send.
#[derive(Debug, Clone, Copy)]
pub struct Req {
    /// When it is due, ns after the replay's start (the trace's time
    /// divided by the speed).
    pub due_ns: u64,
    /// What.
    pub op: Op,
    /// Where (in the volume).
    pub offset: u64,
    /// Bytes.
    pub len: u32,
    /// Forced unit access (writes).
    pub fua: bool,
    /// The connection it goes on.
    pub slot: usize,
}

/// What happened to every request, by index.
#[derive(Debug, Clone)]
pub struct Timing {
    /// ns after the start when the replayer began sending it (`u64::MAX`:
    /// never).
    pub sent: Vec<u64>,
    /// ns after the start when the socket had taken it all.
    pub written: Vec<u64>,
    /// How late the replayer itself began sending it, ns: from when it
    /// could have gone (its due time, or the end of the send before it on
    /// its connection, if the daemon was not reading) to when it began.
    pub late: Vec<u64>,
    /// ns after the start when its (last) reply came (`u64::MAX`: never).
    pub answered: Vec<u64>,
    /// The server's errno (0: success).
    pub errno: Vec<u32>,
    /// Why a connection ended early, if one did.
    pub failure: Option<String>,
}

/// The NBD command, flags and pieces of a request.
fn command(r: &Req, export: &Export) -> (u16, u16) {
    let fua = if r.fua && export.has(proto::FLAG_SEND_FUA) {
        proto::CMD_FLAG_FUA
    } else {
        0
    };
    match r.op {
        Op::Read => (proto::CMD_READ, 0),
        Op::Write => (proto::CMD_WRITE, fua),
        Op::Trim => (proto::CMD_TRIM, 0),
        Op::Zero => (proto::CMD_WRITE_ZEROES, fua),
        Op::Flush => (proto::CMD_FLUSH, 0),
    }
}

/// Reads and writes are cut at the server's largest request; the rest go
/// whole.
fn pieces(r: &Req, export: &Export) -> impl Iterator<Item = (u64, u32)> {
    let max = match r.op {
        Op::Read | Op::Write => export.max_request,
        _ => u32::MAX,
    };
    nbd::pieces(r.offset, u64::from(r.len), max)
}

/// Play `reqs` (in due order) over `conns` connections to `target`.
pub fn replay(
    target: &Target,
    export: &Export,
    reqs: &[Req],
    conns: usize,
) -> anyhow::Result<Timing> {
    let mut mine: Vec<Vec<u32>> = vec![Vec::new(); conns];
    for (i, r) in reqs.iter().enumerate() {
        mine[r.slot].push(i as u32);
    }
    let streams = (0..conns)
        .map(|_| nbd::connect(target).map(|(s, _)| s))
        .collect::<anyhow::Result<Vec<Stream>>>()?;
    let answered = AtomicU64::new(0);
    let sent = AtomicU64::new(0);
    let over = AtomicBool::new(false);
    let bar = Progress::new("replaying", Unit::Requests, reqs.len() as u64);
    let start = Instant::now() + LEAD;
    let mut timing = Timing {
        sent: vec![u64::MAX; reqs.len()],
        written: vec![u64::MAX; reqs.len()],
        late: vec![0; reqs.len()],
        answered: vec![u64::MAX; reqs.len()],
        errno: vec![0; reqs.len()],
        failure: None,
    };
    std::thread::scope(|s| -> anyhow::Result<()> {
        let mut handles = Vec::new();
        for (stream, mine) in streams.into_iter().zip(&mine) {
            let rd = stream.try_clone().context("cloning a socket")?;
            rd.set_read_timeout(Some(REPLY_TIMEOUT))
                .context("setting the reply timeout")?;
            let lane = |count| Lane {
                mine,
                reqs,
                export,
                start,
                count,
            };
            let (tx_lane, rx_lane) = (lane(&sent), lane(&answered));
            let tx = s.spawn(move || send(stream, tx_lane));
            let rx = s.spawn(move || receive(rd, rx_lane));
            handles.push((tx, rx));
        }
        let progress = s.spawn(|| {
            while !over.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let a = answered.load(Ordering::Relaxed);
                // A reply may be counted before its send is.
                let t = sent.load(Ordering::Relaxed).max(a);
                bar.update(a, format!("{t} sent, {} in flight", t - a));
            }
        });
        for (tx, rx) in handles {
            let (sends, sent_err) = tx
                .join()
                .unwrap_or_else(|_| (Vec::new(), Some("the sender panicked".into())));
            let (replies, recv_err) = rx
                .join()
                .unwrap_or_else(|_| (Vec::new(), Some("the reader panicked".into())));
            for (i, t) in sends {
                let i = i as usize;
                (timing.sent[i], timing.written[i], timing.late[i]) = (t.begin, t.end, t.late);
            }
            for (i, t, e) in replies {
                timing.answered[i as usize] = t;
                timing.errno[i as usize] = e;
            }
            if timing.failure.is_none() {
                timing.failure = sent_err.or(recv_err);
            }
        }
        over.store(true, Ordering::Relaxed);
        let _ = progress.join();
        Ok(())
    })?;
    let done = timing.answered.iter().filter(|t| **t != u64::MAX).count();
    bar.finish(&format!("{done} of {} requests answered", reqs.len()));
    Ok(timing)
}

fn since(start: Instant) -> u64 {
    Instant::now().saturating_duration_since(start).as_nanos() as u64
}

/// What a connection's sender or reader works with.
#[derive(Clone, Copy)]
struct Lane<'a> {
    /// Indices of the requests on this connection, in due order.
    mine: &'a [u32],
    /// All requests.
    reqs: &'a [Req],
    /// The export.
    export: &'a Export,
    /// The replay's start.
    start: Instant,
    /// Requests sent (the sender) or answered (the reader), for progress.
    count: &'a AtomicU64,
}

/// When one request was sent, in ns after the start.
#[derive(Debug, Clone, Copy)]
struct Sent {
    /// The sender began handing it to the socket.
    begin: u64,
    /// The socket had taken all of it.
    end: u64,
    /// How late the sender itself was: from when the request could have
    /// gone (its due time, or the end of the send before it if that ended
    /// later) to `begin`.
    late: u64,
}

/// Send `mine` at their times, each in one write as soon as it is due
/// (its bytes made ready before). Returns when each was sent, and why it
/// stopped early.
fn send(mut stream: Stream, lane: Lane) -> (Vec<(u32, Sent)>, Option<String>) {
    let mut out = Vec::with_capacity(lane.mine.len());
    // Wake on time: the kernel's default slack lets a sleep overrun by
    // 50 µs. Best effort: without it requests are sent a little later,
    // which the report shows.
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let mut buf = Vec::new();
    let mut prev_end = 0u64;
    let result = (|| -> std::io::Result<()> {
        for &i in lane.mine {
            let r = &lane.reqs[i as usize];
            buf.clear();
            let (cmd, flags) = command(r, lane.export);
            for (p, (offset, len)) in pieces(r, lane.export).enumerate() {
                let cookie = (u64::from(i) << PIECE_BITS) | p as u64;
                buf.extend_from_slice(&nbd::header(cmd, flags, cookie, offset, len));
                if cmd == proto::CMD_WRITE {
                    let at = buf.len();
                    buf.resize(at + len as usize, 0);
                    pattern(&mut buf[at..], offset, i + 1);
                }
            }
            let due = lane.start + Duration::from_nanos(r.due_ns);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let begin = since(lane.start);
            // The daemon may stop reading its socket (it has as many
            // requests in flight as it takes): this waits, and the wait
            // is the daemon's, counted in the latency.
            stream.write_all(&buf)?;
            let end = since(lane.start);
            let late = begin.saturating_sub(r.due_ns.max(prev_end));
            out.push((i, Sent { begin, end, late }));
            prev_end = end;
            lane.count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })();
    match result {
        Ok(()) => (out, None),
        Err(e) => {
            // Wake the reader: nothing more comes.
            stream.close();
            (out, Some(format!("sending a request: {e}")))
        }
    }
}

/// Take the replies of `mine`. Returns each answered request's reply time
/// and errno, and why it stopped early.
fn receive(mut stream: Stream, lane: Lane) -> (Vec<(u32, u64, u32)>, Option<String>) {
    let mut out = Vec::with_capacity(lane.mine.len());
    // Requests of several pieces: pieces still to come, worst errno.
    let mut partial: HashMap<u32, (usize, u32)> = HashMap::new();
    let mut left = lane.mine.len();
    let mut buf = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        while left > 0 {
            let (errno, cookie) = nbd::read_reply(&mut stream).context("reading a reply")?;
            let i = (cookie >> PIECE_BITS) as u32;
            let p = (cookie & ((1 << PIECE_BITS) - 1)) as usize;
            let r = lane
                .reqs
                .get(i as usize)
                .with_context(|| format!("a reply to a request never sent (cookie {cookie})"))?;
            let (_, len) = pieces(r, lane.export)
                .nth(p)
                .with_context(|| format!("a reply to a request never sent (cookie {cookie})"))?;
            if r.op == Op::Read && errno == 0 {
                buf.resize(len as usize, 0);
                stream
                    .read_exact(&mut buf)
                    .context("reading a read's data")?;
            }
            let n = pieces(r, lane.export).count();
            let e = if n == 1 {
                Some(errno)
            } else {
                let slot = partial.entry(i).or_insert((n, 0));
                slot.0 -= 1;
                slot.1 = slot.1.max(errno);
                let done = (slot.0 == 0).then_some(slot.1);
                if done.is_some() {
                    partial.remove(&i);
                }
                done
            };
            if let Some(e) = e {
                out.push((i, since(lane.start), e));
                left -= 1;
                lane.count.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    })();
    // Done (or failed): say goodbye so the server closes its end.
    let _ = stream.write_all(&nbd::header(proto::CMD_DISC, 0, 0, 0, 0));
    match result {
        Ok(()) => (out, None),
        Err(e) => {
            stream.close();
            (out, Some(format!("{e:#}")))
        }
    }
}
