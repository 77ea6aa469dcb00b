//! What a trace does, in figures (`tierd trace info`): requests and bytes
//! by op, the 4 KiB blocks and 1 MiB extents it touches, its span, the
//! read/write ratio, its connections and how much it reuses blocks.
//!
//! The address figures (blocks, extents, span, reuse) count reads and
//! writes only: they are what a cache or a tier would hold. Trims and
//! zeroes count as requests with their bytes.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;

use super::{Op, Record};

/// Block size of the reuse and touched-block figures.
pub const BLOCK: u64 = 4096;
/// Extent size of the touched-extent figure (tierd's default extent).
pub const EXTENT: u64 = 1 << 20;

/// Gathers a trace's figures one record at a time.
#[derive(Debug, Default)]
pub struct TraceStats {
    records: u64,
    first_t: Option<u64>,
    last_t: u64,
    ops: BTreeMap<Op, (u64, u64)>,
    fua: u64,
    blocks: HashSet<u64>,
    extents: HashSet<u64>,
    accesses: u64,
    hits: u64,
    lowest: Option<u64>,
    highest_end: u64,
    conns: BTreeSet<u16>,
}

/// Requests and bytes of one op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct OpCount {
    /// Requests.
    pub count: u64,
    /// Bytes they cover (0 for flushes).
    pub bytes: u64,
}

/// A trace's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Records.
    pub records: u64,
    /// From the first record's time to the last one's, in ns.
    pub duration_ns: u64,
    /// Requests and bytes by op name (every op, in code order).
    pub ops: BTreeMap<&'static str, OpCount>,
    /// Requests with forced unit access.
    pub fua: u64,
    /// Distinct 4 KiB blocks read or written.
    pub blocks_4k: u64,
    /// Distinct 1 MiB extents read or written.
    pub extents_1m: u64,
    /// Lowest offset read or written (`None` without reads and writes).
    pub lowest_offset: Option<u64>,
    /// Highest end (offset + length) read or written.
    pub highest_end: Option<u64>,
    /// Read requests per write request (`None` without writes).
    pub read_write_ratio: Option<f64>,
    /// Bytes read per byte written (`None` without bytes written).
    pub read_write_bytes_ratio: Option<f64>,
    /// Distinct connections.
    pub connections: u64,
    /// 4 KiB block accesses: each read or write counts every block it touches.
    pub block_accesses: u64,
    /// Block accesses to a block accessed before.
    pub block_hits: u64,
    /// `block_hits / block_accesses` (0 without accesses): the hit ratio of
    /// an infinite cache.
    pub reuse: f64,
}

impl TraceStats {
    /// No records yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count one record.
    pub fn add(&mut self, r: &Record) {
        self.records += 1;
        self.first_t.get_or_insert(r.t_ns);
        self.last_t = self.last_t.max(r.t_ns);
        let e = self.ops.entry(r.op).or_default();
        e.0 += 1;
        if r.op != Op::Flush {
            e.1 += u64::from(r.len);
        }
        self.fua += u64::from(r.fua);
        self.conns.insert(r.conn);
        if !matches!(r.op, Op::Read | Op::Write) || r.len == 0 {
            return;
        }
        let end = r.offset.saturating_add(u64::from(r.len));
        self.lowest = Some(self.lowest.map_or(r.offset, |l| l.min(r.offset)));
        self.highest_end = self.highest_end.max(end);
        for b in r.offset / BLOCK..=(end - 1) / BLOCK {
            self.accesses += 1;
            if !self.blocks.insert(b) {
                self.hits += 1;
            }
        }
        for x in r.offset / EXTENT..=(end - 1) / EXTENT {
            self.extents.insert(x);
        }
    }

    /// The figures so far.
    pub fn summary(&self) -> Summary {
        let get = |op| self.ops.get(&op).copied().unwrap_or_default();
        let ops = Op::ALL
            .into_iter()
            .map(|op| {
                let (count, bytes) = get(op);
                (op.name(), OpCount { count, bytes })
            })
            .collect();
        let (reads, read_bytes) = get(Op::Read);
        let (writes, write_bytes) = get(Op::Write);
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        Summary {
            records: self.records,
            duration_ns: self.last_t - self.first_t.unwrap_or(self.last_t),
            ops,
            fua: self.fua,
            blocks_4k: self.blocks.len() as u64,
            extents_1m: self.extents.len() as u64,
            lowest_offset: self.lowest,
            highest_end: self.lowest.map(|_| self.highest_end),
            read_write_ratio: ratio(reads, writes),
            read_write_bytes_ratio: ratio(read_bytes, write_bytes),
            connections: self.conns.len() as u64,
            block_accesses: self.accesses,
            block_hits: self.hits,
            reuse: if self.accesses == 0 {
                0.0
            } else {
                self.hits as f64 / self.accesses as f64
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(t_ns: u64, op: Op, offset: u64, len: u32, conn: u16) -> Record {
        Record {
            t_ns,
            offset,
            len,
            conn,
            op,
            fua: false,
        }
    }

    #[test]
    fn figures_of_a_small_trace() {
        let mut s = TraceStats::new();
        for rec in [
            r(100, Op::Write, 0, 8192, 0),          // blocks 0, 1
            r(200, Op::Read, 4096, 8192, 1),        // blocks 1 (hit), 2
            r(300, Op::Read, 1 << 20, 512, 1),      // block 256, extent 1
            r(400, Op::Write, 2048, 1024, 0),       // block 0 (hit)
            r(500, Op::Trim, 10 << 20, 1 << 20, 2), // not an access
            r(600, Op::Flush, 0, 0, 2),             //
            r(700, Op::Read, 3 << 20, 0, 0),        // empty: no blocks
            Record {
                fua: true,
                ..r(900, Op::Zero, 0, 4096, 0)
            },
        ] {
            s.add(&rec);
        }
        let m = s.summary();
        assert_eq!(m.records, 8);
        assert_eq!(m.duration_ns, 800);
        assert_eq!(
            m.ops["read"],
            OpCount {
                count: 3,
                bytes: 8704
            }
        );
        assert_eq!(
            m.ops["write"],
            OpCount {
                count: 2,
                bytes: 9216
            }
        );
        assert_eq!(
            m.ops["trim"],
            OpCount {
                count: 1,
                bytes: 1 << 20
            }
        );
        assert_eq!(
            m.ops["zero"],
            OpCount {
                count: 1,
                bytes: 4096
            }
        );
        assert_eq!(m.ops["flush"], OpCount { count: 1, bytes: 0 });
        assert_eq!(m.fua, 1);
        assert_eq!((m.blocks_4k, m.extents_1m), (4, 2));
        assert_eq!(m.lowest_offset, Some(0));
        assert_eq!(m.highest_end, Some((1 << 20) + 512));
        assert_eq!(m.read_write_ratio, Some(1.5));
        assert_eq!(m.connections, 3);
        assert_eq!((m.block_accesses, m.block_hits), (6, 2));
        assert!((m.reuse - 2.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn an_empty_trace_has_no_span_or_ratio() {
        let m = TraceStats::new().summary();
        assert_eq!((m.records, m.duration_ns, m.blocks_4k), (0, 0, 0));
        assert_eq!((m.lowest_offset, m.highest_end), (None, None));
        assert_eq!(m.read_write_ratio, None);
        assert_eq!(m.reuse, 0.0);
    }

    #[test]
    fn a_request_at_the_very_end_of_the_address_space_is_counted() {
        let mut s = TraceStats::new();
        s.add(&r(0, Op::Read, u64::MAX - 4095, 4096, 0)); // its end saturates
        let m = s.summary();
        assert_eq!((m.blocks_4k, m.block_accesses), (1, 1));
        assert_eq!(m.highest_end, Some(u64::MAX));
    }
}
