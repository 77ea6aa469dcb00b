//! fio's iolog, versions 2 and 3; conn = the file name's index in order of
//! first appearance.

use std::collections::{HashMap, VecDeque};

use super::stats::ImportStats;
use super::text::{index_of, num, LineParser, Raw};
use crate::trace::Op;

/// The version of a fio iolog header line.
pub(super) fn fio_version(line: &str) -> Option<u8> {
    // fio compares the line's start, as strncmp does.
    if line.starts_with("fio version 2 iolog") {
        Some(2)
    } else if line.starts_with("fio version 3 iolog") {
        Some(3)
    } else {
        None
    }
}

/// fio iolog v2 and v3 (docs/trace.md#fio-iolog).
#[derive(Default)]
pub(super) struct FioIolog {
    version: Option<u8>,
    files: HashMap<String, u16>,
    /// v2: the time the last `wait` moved the clock to.
    clock: u128,
}

impl FioIolog {
    fn file_action(&mut self, file: &str, action: &str) -> Result<(), String> {
        index_of(&mut self.files, file.to_string());
        match action {
            "add" | "open" | "close" => Ok(()),
            _ => Err(format!(
                "unknown file action {action:?} (add, open or close)"
            )),
        }
    }

    fn io_action(&mut self, t: u128, f: &[&str], out: &mut VecDeque<Raw>) -> Result<(), String> {
        let [file, action, offset, length] = [f[0], f[1], f[2], f[3]];
        let conn = index_of(&mut self.files, file.to_string());
        let offset: u64 = num(offset, "offset")?;
        let length: u32 = num(length, "length")?;
        let op = match action {
            "read" => Op::Read,
            "write" => Op::Write,
            "trim" => Op::Trim,
            "sync" | "datasync" => {
                out.push_back(Raw::flush(t, conn));
                return Ok(());
            }
            "wait" if self.version == Some(2) => {
                // fio sleeps until `offset` milliseconds after the job
                // started (iolog.c), whatever the HOWTO says.
                self.clock = self.clock.max(u128::from(offset) * 1_000_000);
                return Ok(());
            }
            "wait" => {
                return Err(
                    "`wait` is not allowed in a version 3 iolog (its lines carry timestamps)"
                        .into(),
                )
            }
            _ => {
                return Err(format!(
                    "unknown action {action:?} (read, write, trim, sync, datasync{})",
                    if self.version == Some(2) {
                        ", wait"
                    } else {
                        ""
                    }
                ))
            }
        };
        out.push_back(Raw::data(t, offset, u64::from(length), conn, op)?);
        Ok(())
    }
}

impl LineParser for FioIolog {
    const FORMAT: &'static str = "fio-iolog";

    fn parse(
        &mut self,
        line: &str,
        out: &mut VecDeque<Raw>,
        _: &ImportStats,
    ) -> Result<(), String> {
        let line = line.trim();
        let Some(version) = self.version else {
            self.version = Some(fio_version(line).ok_or_else(|| {
                format!("expected the header `fio version 2 iolog` or `fio version 3 iolog`, found {line:?}")
            })?);
            return Ok(());
        };
        let f: Vec<&str> = line.split_whitespace().collect();
        match (version, f.len()) {
            (2, 2) => self.file_action(f[0], f[1]),
            (2, 4) => self.io_action(self.clock, &f, out),
            (2, n) => Err(format!(
                "expected `FILE ACTION` or `FILE ACTION OFFSET LENGTH`, found {n} fields"
            )),
            (_, 3) => {
                num::<u64>(f[0], "timestamp")?;
                self.file_action(f[1], f[2])
            }
            (_, 5) => {
                let us: u64 = num(f[0], "timestamp")?;
                self.io_action(u128::from(us) * 1000, &f[1..], out)
            }
            (_, n) => Err(format!(
                "expected `TIMESTAMP FILE ACTION` or `TIMESTAMP FILE ACTION OFFSET LENGTH`, found {n} fields"
            )),
        }
    }
}
