//! MSR Cambridge CSV (SNIA IOTTA set 388): FILETIME timestamps, byte
//! offsets and sizes; conn = the disk number.

use std::collections::VecDeque;

use super::stats::ImportStats;
use super::text::{csv_fields, num, LineParser, Raw};
use crate::trace::Op;

/// FILETIME (100 ns ticks since 1601-01-01 UTC) of the Unix epoch.
const FILETIME_UNIX_EPOCH: u64 = 116_444_736_000_000_000;

/// MSR Cambridge CSV (docs/trace.md#msr-cambridge-csv).
#[derive(Default)]
pub(super) struct MsrCsv {
    seen_line: bool,
}

impl LineParser for MsrCsv {
    const FORMAT: &'static str = "msr-csv";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        _: &ImportStats,
    ) -> Result<(), String> {
        let Some(f) = csv_fields(line, &mut self.seen_line, "timestamp") else {
            return Ok(()); // a header some redistributions add
        };
        if f.len() != 7 {
            return Err(format!(
                "expected 7 comma-separated fields (Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime), found {}",
                f.len()
            ));
        }
        let ticks: u64 = num(f[0], "Timestamp")?;
        let disk: u64 = num(f[2], "DiskNumber")?;
        let op = if f[3].eq_ignore_ascii_case("read") {
            Op::Read
        } else if f[3].eq_ignore_ascii_case("write") {
            Op::Write
        } else {
            return Err(format!("Type {:?} is neither Read nor Write", f[3]));
        };
        let offset: u64 = num(f[4], "Offset")?;
        let size: u64 = num(f[5], "Size")?;
        let conn = u16::try_from(disk).unwrap_or(u16::MAX);
        out.push_back(Raw::data(u128::from(ticks) * 100, offset, size, conn, op)?);
        Ok(())
    }

    fn unix_ns(&self, raw: &Raw) -> Option<u64> {
        let ticks = u64::try_from(raw.t / 100).ok()?;
        ticks.checked_sub(FILETIME_UNIX_EPOCH)?.checked_mul(100)
    }
}
