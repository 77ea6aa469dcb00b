//! Bulk transfers before and after the replay (the fill, clearing a
//! forced volume, reading the footprint back for `--verify`): a list of
//! requests taken in order by several connections, each keeping a few in
//! flight, so many GiB go as fast as the daemon takes them and in nearly
//! the order given (at most connections × depth requests overtake one
//! another).

use std::io::{BufWriter, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context};
use tierd::nbd::client::Target;
use tierd::nbd::proto;

use super::nbd;
use super::progress::Progress;

/// One request of a bulk transfer.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// `proto::CMD_READ`, `CMD_WRITE`, `CMD_TRIM` or `CMD_FLUSH`.
    pub cmd: u16,
    /// First byte.
    pub offset: u64,
    /// Bytes (at most the export's largest request for reads and writes).
    pub len: u32,
}

/// Run `jobs` over `conns` connections, `depth` in flight on each. Writes
/// carry what `payload` puts in their buffer; reads hand their data to
/// `got`. The bar advances by each job's bytes. Any failed request fails
/// the whole transfer, naming it.
pub fn run(
    target: &Target,
    conns: usize,
    depth: usize,
    jobs: &[Job],
    payload: &(dyn Fn(&Job, &mut [u8]) + Sync),
    got: &(dyn Fn(&Job, &[u8]) + Sync),
    bar: &Progress,
) -> anyhow::Result<()> {
    let next = AtomicUsize::new(0);
    let conns = conns.clamp(1, jobs.len().max(1));
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..conns)
            .map(|_| s.spawn(|| worker(target, depth.max(1), jobs, &next, payload, got, bar)))
            .collect();
        let mut first = Ok(());
        for w in workers {
            let r = w
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a transfer thread panicked")));
            if first.is_ok() {
                if r.is_err() {
                    // Stop the others at their next job.
                    next.store(jobs.len(), Ordering::Relaxed);
                }
                first = r;
            }
        }
        first
    })
}

fn worker(
    target: &Target,
    depth: usize,
    jobs: &[Job],
    next: &AtomicUsize,
    payload: &(dyn Fn(&Job, &mut [u8]) + Sync),
    got: &(dyn Fn(&Job, &[u8]) + Sync),
    bar: &Progress,
) -> anyhow::Result<()> {
    let (stream, _) = nbd::connect(target)?;
    let mut r = stream.try_clone().context("cloning the socket")?;
    let mut w = BufWriter::with_capacity(64 << 10, stream);
    let mut buf = Vec::new();
    let mut in_flight = 0usize;
    let mut done = false;
    let fail = |j: &Job, e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "the {} of {} bytes at {} failed: {e}",
            nbd::cmd_name(j.cmd),
            j.len,
            j.offset,
        )
    };
    loop {
        // Send while there is room and work.
        while !done && in_flight < depth {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(j) = jobs.get(i) else {
                done = true;
                break;
            };
            let h = nbd::header(j.cmd, 0, i as u64, j.offset, j.len);
            let sent = w.write_all(&h).and_then(|()| {
                if j.cmd == proto::CMD_WRITE {
                    buf.resize(j.len as usize, 0);
                    payload(j, &mut buf);
                    w.write_all(&buf)
                } else {
                    Ok(())
                }
            });
            sent.map_err(|e| fail(j, &e))?;
            in_flight += 1;
        }
        w.flush().context("sending requests")?;
        if in_flight == 0 {
            break;
        }
        let (errno, cookie) = nbd::read_reply(&mut r).context("reading a reply")?;
        let Some(j) = usize::try_from(cookie).ok().and_then(|c| jobs.get(c)) else {
            bail!("the server answered a request never sent (cookie {cookie})");
        };
        if errno != 0 {
            bail!(fail(j, &format!("the server answered errno {errno}")));
        }
        if j.cmd == proto::CMD_READ {
            buf.resize(j.len as usize, 0);
            r.read_exact(&mut buf).map_err(|e| fail(j, &e))?;
            got(j, &buf);
        }
        in_flight -= 1;
        bar.inc(u64::from(j.len));
    }
    // Say goodbye; the server closes the connection.
    let _ = w.write_all(&nbd::header(proto::CMD_DISC, 0, 0, 0, 0));
    let _ = w.flush();
    Ok(())
}
