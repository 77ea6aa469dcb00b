//! blkparse's default text output, the `Q` events only; conn = the
//! device's index in order of first appearance.

use std::collections::{HashMap, VecDeque};

use super::stats::ImportStats;
use super::text::{digits, index_of, num, sectors, LineParser, Raw};
use crate::trace::Op;

/// `maj,min` of a blkparse event line.
pub(super) fn blk_device(s: &str) -> Option<(u32, u32)> {
    let (maj, min) = s.split_once(',')?;
    Some((maj.parse().ok()?, min.parse().ok()?))
}

/// `SECONDS.NANOSECONDS` of a blkparse event line, in ns.
pub(super) fn blk_time(s: &str) -> Option<u128> {
    let (sec, ns) = s.split_once('.')?;
    if !digits(sec) || !digits(ns) || ns.len() > 9 {
        return None;
    }
    let scale = 10u128.pow(9 - ns.len() as u32);
    Some(sec.parse::<u128>().ok()? * 1_000_000_000 + ns.parse::<u128>().ok()? * scale)
}

/// blkparse default text output (docs/trace.md#blkparse).
#[derive(Default)]
pub(super) struct Blkparse {
    devices: HashMap<(u32, u32), u16>,
}

impl LineParser for Blkparse {
    const FORMAT: &'static str = "blkparse";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        stats: &ImportStats,
    ) -> Result<(), String> {
        // dev cpu seq time pid action rwbs trailer...
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 7 || f[5] != "Q" || !digits(f[1]) || !digits(f[2]) {
            return Ok(()); // another event, a CPU header, the summary
        }
        let Some(dev) = blk_device(f[0]) else {
            return Ok(());
        };
        let t =
            blk_time(f[3]).ok_or_else(|| format!("time {:?} is not SECONDS.NANOSECONDS", f[3]))?;
        let conn = index_of(&mut self.devices, dev);
        let rwbs = f[6].as_bytes();
        // [F] one of D W R N [F][A][S][M]; older blkparse: W or R, then
        // A, B (barrier), S, M. A lone F (ftrace) is a flush.
        let preflush = rwbs.len() >= 2 && rwbs[0] == b'F';
        let (kind, mods) = match rwbs {
            [b'F'] => (b'F', &rwbs[1..]),
            _ if preflush => (rwbs[1], &rwbs[2..]),
            [k, rest @ ..] => (*k, rest),
            [] => return Err("empty RWBS field".into()),
        };
        let fua = mods.contains(&b'F');
        let flush_first = preflush || mods.contains(&b'B');
        let op = match kind {
            b'R' => Some(Op::Read),
            b'W' => Some(Op::Write),
            b'D' => Some(Op::Trim),
            b'N' | b'F' => None,
            _ => {
                return Err(format!(
                    "RWBS {:?} names no operation (R, W, D or N after an optional F)",
                    f[6]
                ))
            }
        };
        if kind == b'F' || (op.is_none() && flush_first) {
            out.push_back(Raw::flush(t, conn));
            return Ok(());
        }
        let Some(op) = op else {
            stats.skip("blkparse Q events without data (N)");
            return Ok(());
        };
        // sector + count [comm]; a packet command has `bytes (cdb) [comm]`.
        if f.len() < 10 || f[8] != "+" {
            stats.skip("blkparse packet-command Q events");
            return Ok(());
        }
        let offset = sectors(num(f[7], "sector")?, "sector")?;
        let len = sectors(num(f[9], "sector count")?, "sector count")?;
        if flush_first {
            out.push_back(Raw::flush(t, conn));
        }
        let mut raw = Raw::data(t, offset, len, conn, op)?;
        raw.fua = fua;
        out.push_back(raw);
        Ok(())
    }
}
