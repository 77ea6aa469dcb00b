//! libCacheSim's CloudPhysics CSV: whole seconds spread evenly over each
//! second's records; opcodes other than reads and writes are skipped.

use std::collections::VecDeque;

use super::stats::ImportStats;
use super::text::{csv_fields, num, sectors, LineParser, Raw};
use crate::trace::Op;

/// libCacheSim's CloudPhysics CSV (docs/trace.md#cloudphysics-csv).
#[derive(Default)]
pub(super) struct CloudPhysicsCsv {
    seen_line: bool,
    /// The second being gathered and its records so far.
    second: u64,
    group: Vec<Raw>,
}

impl CloudPhysicsCsv {
    /// Spread the gathered second's records evenly over it.
    fn flush_group(&mut self, out: &mut VecDeque<Raw>) {
        let n = self.group.len() as u128;
        let base = u128::from(self.second) * 1_000_000_000;
        for (i, mut raw) in self.group.drain(..).enumerate() {
            raw.t = base + i as u128 * 1_000_000_000 / n;
            out.push_back(raw);
        }
    }
}

impl LineParser for CloudPhysicsCsv {
    const FORMAT: &'static str = "cloudphysics-csv";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        stats: &ImportStats,
    ) -> Result<(), String> {
        let Some(f) = csv_fields(line, &mut self.seen_line, "version") else {
            return Ok(()); // the header
        };
        if f.len() != 5 {
            return Err(format!(
                "expected 5 comma-separated fields (version,time,op,size,lbn), found {}",
                f.len()
            ));
        }
        num::<u64>(f[0], "version")?;
        let second: u64 = num(f[1], "time")?;
        let hex = f[2]
            .strip_prefix("0x")
            .or_else(|| f[2].strip_prefix("0X"))
            .unwrap_or(f[2]);
        let opcode = u8::from_str_radix(hex, 16)
            .map_err(|_| format!("op {:?} is not a SCSI opcode in hex", f[2]))?;
        let size: u64 = num(f[3], "size")?;
        let lbn: u64 = num(f[4], "lbn")?;
        let op = match opcode {
            0x08 | 0x28 | 0x88 => Op::Read,
            0x0a | 0x2a | 0x8a => Op::Write,
            other => {
                stats.skip(&format!("SCSI opcode {other:02x}"));
                return Ok(());
            }
        };
        let raw = Raw::data(0, sectors(lbn, "lbn")?, size, 0, op)?;
        if second != self.second {
            self.flush_group(out);
            self.second = second;
        }
        self.group.push(raw);
        Ok(())
    }

    fn finish(&mut self, out: &mut VecDeque<Raw>) {
        self.flush_group(out);
    }
}
