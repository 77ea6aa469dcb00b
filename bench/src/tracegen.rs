//! Synthetic block traces of standard shapes, reproducible from a seed: the
//! shapes ([`Shape`]), their options ([`GenOptions`]), the records
//! ([`generate`]) and the header that names how they were made
//! ([`header`]). `tierd trace generate` writes them to a file; the policy
//! simulators and `tierd bench --trace` replay them.
//!
//! Common to every shape (docs/trace.md, "Generated shapes"):
//!
//! - The region is `region` bytes from offset 0, a whole number of 4 KiB
//!   blocks (`n` of them), at least 1 MiB. Every request is 4 KiB aligned
//!   and lies inside the region.
//! - Arrivals are Poisson at `rate` requests per second: the first request
//!   is at 0 and the gaps are exponential with mean `1 / rate`, so the
//!   trace lasts about `requests / rate` seconds; `t_ns` never decreases.
//!   Where a shape has two connections, each request picks its connection
//!   independently, so each connection's arrivals are Poisson too.
//! - The same options give the same records (the times and the requests
//!   come from two random streams seeded from `seed`); a different seed
//!   gives other records.
//! - Zipf ranks are drawn with the YCSB sampler ([`Zipf`]) and placed by
//!   the affine bijection [`Scramble`]: rank `r` (0 the most popular) is
//!   at unit `(r * a + c) mod m` of the `m` units, so neighbouring ranks
//!   land far apart and hot blocks are not grouped into hot extents, as
//!   with fio's `random_distribution=zipf`.
//!
//! The shapes:
//!
//! - **zipf**: 4 KiB requests, Zipf 0.99 over the region's `n` blocks,
//!   90 % reads (each request independently), connection 0.
//! - **shift**: zipf whose hot set moves: from request `requests / 2` to
//!   request `3 * requests / 4` (exclusive), rank `r` is placed where rank
//!   `(r + n / 2) mod n` was. With the affine bijection this moves every
//!   block by the same distance (half the region when `n` is even), and
//!   the blocks of the top `n / 2` ranks before and during the shift are
//!   disjoint. From `3 * requests / 4` on, the placement is the first one
//!   again.
//! - **scan-hot**: each request is, with probability 3/4, a 4 KiB read of
//!   the hot set (Zipf 0.99 over the `n / 8` blocks of the region's first
//!   eighth, connection 0) and, with probability 1/4, the next 256 KiB read
//!   of a sequential scan of the whole region (connection 1) that starts at
//!   0, ends with a shorter read where the region does not hold a whole
//!   256 KiB, and starts again at 0. All reads.
//! - **database**: an OLTP-like mix. Data: the first `n - n / 8` blocks,
//!   as 8 KiB pages; with probability 9/10 a request is a random 8 KiB read
//!   (67 %) or write (33 %) of a page drawn by Zipf 0.9 over the pages,
//!   connection 0. Log: the last `n / 8` blocks; with probability 1/10 a
//!   request is the next 4 KiB FUA write of a log appended from the log's
//!   start, wrapping to it at its end, connection 1. Over all requests:
//!   60.3 % reads, 39.7 % writes, 10 % FUA.

use std::fmt;
use std::str::FromStr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use tierd::trace::{Header, Op, Record};
use tierd::units::ByteSize;

use crate::workload::{Scramble, Zipf};

/// Bytes of a block: the unit of addresses, alignment and the Zipf shapes.
pub const BLOCK: u64 = 4096;
/// The smallest region a trace can cover.
pub const MIN_REGION: u64 = 1 << 20;
/// Bytes of a scan request of `scan-hot`.
pub const SCAN_LEN: u64 = 256 << 10;
/// Bytes of a data request of `database`.
pub const PAGE: u64 = 8192;

/// Seeds the request stream apart from the arrival times.
const CONTENT_SALT: u64 = 0x9E37_79B9_7F4A_7C15;

/// A trace's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Zipf 0.99 over scattered 4 KiB blocks, 90 % reads.
    Zipf,
    /// Zipf whose hot set moves away at the middle and back at three quarters.
    Shift,
    /// A Zipf hot set on an eighth of the region and a sequential scan of it all.
    ScanHot,
    /// OLTP: random 8 KiB reads and writes over the data, a FUA log.
    Database,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 4] = [Shape::Zipf, Shape::Shift, Shape::ScanHot, Shape::Database];

    /// The shape's name (`zipf`, `shift`, `scan-hot`, `database`).
    pub fn name(self) -> &'static str {
        match self {
            Shape::Zipf => "zipf",
            Shape::Shift => "shift",
            Shape::ScanHot => "scan-hot",
            Shape::Database => "database",
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Shape {
    type Err = GenError;

    fn from_str(s: &str) -> Result<Self, GenError> {
        Shape::ALL
            .into_iter()
            .find(|shape| shape.name() == s)
            .ok_or_else(|| GenError::Shape(s.to_string()))
    }
}

/// Why a shape name or options are refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenError {
    /// Not a shape's name.
    #[error("unknown trace shape {0:?}: use one of zipf, shift, scan-hot, database")]
    Shape(String),
    /// The region is too small or not whole blocks.
    #[error("the region must be a multiple of 4 KiB and at least 1 MiB, not {0} bytes")]
    Region(u64),
    /// The rate is not a positive number.
    #[error("the rate must be a positive number of requests per second, not {0}")]
    Rate(f64),
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenOptions {
    /// The shape.
    pub shape: Shape,
    /// Bytes of the address span, from offset 0.
    pub region: u64,
    /// Records to generate.
    pub requests: u64,
    /// Requests per second (Poisson arrivals).
    pub rate: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl GenOptions {
    /// The defaults: a 4 GiB region, 200,000 requests at 2,000 per second
    /// (100 s), seed 1.
    pub fn defaults(shape: Shape) -> Self {
        GenOptions {
            shape,
            region: 4 << 30,
            requests: 200_000,
            rate: 2000.0,
            seed: 1,
        }
    }

    /// Refuse options [`generate`] cannot honour: a region that is not a
    /// whole number of 4 KiB blocks or under 1 MiB, a rate that is not a
    /// positive finite number.
    pub fn check(&self) -> Result<(), GenError> {
        if self.region < MIN_REGION || !self.region.is_multiple_of(BLOCK) {
            return Err(GenError::Region(self.region));
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(GenError::Rate(self.rate));
        }
        Ok(())
    }
}

/// The trace's header: `volume_size` is the region, `start_unix_ns` 0 (a
/// generated trace has no wall-clock time) and the source is the command
/// that makes the same trace again, e.g. `tierd 0.1.0 trace generate zipf
/// --region 4GiB --requests 200000 --rate 2000 --seed 1`.
pub fn header(opts: &GenOptions) -> Header {
    Header {
        start_unix_ns: 0,
        volume_size: opts.region,
        source: format!(
            "tierd {} trace generate {} --region {} --requests {} --rate {} --seed {}",
            env!("CARGO_PKG_VERSION"),
            opts.shape,
            ByteSize(opts.region),
            opts.requests,
            opts.rate,
            opts.seed
        ),
    }
}

/// The records of the trace `opts` describes, in time order (module docs).
///
/// # Panics
///
/// When [`GenOptions::check`] refuses `opts`; check options from a user
/// first.
pub fn generate(opts: &GenOptions) -> impl Iterator<Item = Record> {
    if let Err(e) = opts.check() {
        panic!("tracegen::generate: {e}");
    }
    Gen::new(opts)
}

/// What a shape draws requests from.
enum Draw {
    /// `zipf` and `shift` (`shifted`: the shift's window of requests).
    Zipf {
        zipf: Zipf,
        perm: Scramble,
        n: u64,
        shifted: Option<(u64, u64)>,
    },
    /// `scan-hot`.
    ScanHot {
        zipf: Zipf,
        perm: Scramble,
        region: u64,
        cursor: u64,
    },
    /// `database`.
    Database {
        zipf: Zipf,
        perm: Scramble,
        log_start: u64,
        log_blocks: u64,
        log_next: u64,
    },
}

struct Gen {
    draw: Draw,
    /// Requests made so far.
    i: u64,
    requests: u64,
    /// Arrival time of the next request, ns.
    t_ns: f64,
    /// Mean gap between arrivals, ns.
    mean_gap_ns: f64,
    times: StdRng,
    content: StdRng,
}

impl Gen {
    fn new(opts: &GenOptions) -> Self {
        let n = opts.region / BLOCK;
        let draw = match opts.shape {
            Shape::Zipf | Shape::Shift => Draw::Zipf {
                zipf: Zipf::new(n, 0.99),
                perm: Scramble::new(n),
                n,
                shifted: (opts.shape == Shape::Shift).then(|| {
                    let r = u128::from(opts.requests);
                    (opts.requests / 2, (r * 3 / 4) as u64)
                }),
            },
            Shape::ScanHot => Draw::ScanHot {
                zipf: Zipf::new(n / 8, 0.99),
                perm: Scramble::new(n / 8),
                region: opts.region,
                cursor: 0,
            },
            Shape::Database => {
                let log_blocks = n / 8;
                let data_blocks = n - log_blocks;
                let pages = data_blocks * BLOCK / PAGE;
                Draw::Database {
                    zipf: Zipf::new(pages, 0.9),
                    perm: Scramble::new(pages),
                    log_start: data_blocks * BLOCK,
                    log_blocks,
                    log_next: 0,
                }
            }
        };
        Gen {
            draw,
            i: 0,
            requests: opts.requests,
            t_ns: 0.0,
            mean_gap_ns: 1e9 / opts.rate,
            times: StdRng::seed_from_u64(opts.seed),
            content: StdRng::seed_from_u64(opts.seed ^ CONTENT_SALT),
        }
    }

    /// The request at index `i` (time aside).
    fn request(&mut self, i: u64) -> Record {
        let rng = &mut self.content;
        let (offset, len, conn, op, fua) = match &mut self.draw {
            Draw::Zipf {
                zipf,
                perm,
                n,
                shifted,
            } => {
                let mut rank = zipf.sample(rng);
                if let Some((from, to)) = *shifted {
                    if (from..to).contains(&i) {
                        rank = (rank + *n / 2) % *n;
                    }
                }
                let op = if rng.gen_bool(0.9) {
                    Op::Read
                } else {
                    Op::Write
                };
                (perm.chunk(rank) * BLOCK, BLOCK, 0, op, false)
            }
            Draw::ScanHot {
                zipf,
                perm,
                region,
                cursor,
            } => {
                if rng.gen_bool(0.25) {
                    let offset = *cursor;
                    let len = SCAN_LEN.min(*region - offset);
                    *cursor = if offset + len == *region {
                        0
                    } else {
                        offset + len
                    };
                    (offset, len, 1, Op::Read, false)
                } else {
                    let block = perm.chunk(zipf.sample(rng));
                    (block * BLOCK, BLOCK, 0, Op::Read, false)
                }
            }
            Draw::Database {
                zipf,
                perm,
                log_start,
                log_blocks,
                log_next,
            } => {
                if rng.gen_bool(0.1) {
                    let offset = *log_start + *log_next * BLOCK;
                    *log_next = (*log_next + 1) % *log_blocks;
                    (offset, BLOCK, 1, Op::Write, true)
                } else {
                    let page = perm.chunk(zipf.sample(rng));
                    let op = if rng.gen_bool(0.67) {
                        Op::Read
                    } else {
                        Op::Write
                    };
                    (page * PAGE, PAGE, 0, op, false)
                }
            }
        };
        Record {
            t_ns: 0,
            offset,
            // Every length is at most SCAN_LEN.
            len: len as u32,
            conn,
            op,
            fua,
        }
    }
}

impl Iterator for Gen {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        if self.i >= self.requests {
            return None;
        }
        let i = self.i;
        self.i += 1;
        if i > 0 {
            // Exponential gap: -ln(U) with U in (0, 1].
            let u: f64 = 1.0 - self.times.gen::<f64>();
            self.t_ns += -u.ln() * self.mean_gap_ns;
        }
        let mut r = self.request(i);
        r.t_ns = self.t_ns as u64;
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.requests - self.i).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    const MIB: u64 = 1 << 20;

    fn opts(shape: Shape, region: u64, requests: u64, seed: u64) -> GenOptions {
        GenOptions {
            region,
            requests,
            seed,
            ..GenOptions::defaults(shape)
        }
    }

    fn records(o: &GenOptions) -> Vec<Record> {
        generate(o).collect()
    }

    /// `part` of `whole` as a fraction.
    fn share(part: usize, whole: usize) -> f64 {
        part as f64 / whole as f64
    }

    fn assert_near(what: &str, got: f64, want: f64, tolerance: f64) {
        assert!(
            (got - want).abs() <= tolerance,
            "{what}: {got:.4}, want {want} ± {tolerance}"
        );
    }

    /// Access counts of 4 KiB blocks.
    fn block_counts<'a>(rs: impl IntoIterator<Item = &'a Record>) -> HashMap<u64, usize> {
        let mut counts = HashMap::new();
        for r in rs {
            *counts.entry(r.offset / BLOCK).or_default() += 1;
        }
        counts
    }

    /// The `k` most accessed blocks (ties to the lower block).
    fn top(counts: &HashMap<u64, usize>, k: usize) -> Vec<(u64, usize)> {
        let mut v: Vec<(u64, usize)> = counts.iter().map(|(b, c)| (*b, *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(k);
        v
    }

    #[test]
    fn shapes_parse_by_name_and_unknown_names_are_refused() {
        for shape in Shape::ALL {
            assert_eq!(shape.name().parse::<Shape>(), Ok(shape));
            assert_eq!(shape.to_string(), shape.name());
        }
        let e = "Zipf".parse::<Shape>().unwrap_err();
        assert_eq!(e, GenError::Shape("Zipf".into()));
        assert!(
            e.to_string().contains("zipf, shift, scan-hot, database"),
            "{e}"
        );
    }

    #[test]
    fn options_are_checked() {
        for shape in Shape::ALL {
            assert_eq!(GenOptions::defaults(shape).check(), Ok(()));
        }
        let ok = opts(Shape::Zipf, MIB, 10, 1);
        assert_eq!(ok.check(), Ok(()));
        for region in [0, BLOCK, MIB - BLOCK, MIB + 512] {
            let o = GenOptions {
                region,
                ..ok.clone()
            };
            assert_eq!(o.check(), Err(GenError::Region(region)));
        }
        for rate in [0.0, -1.0, f64::INFINITY] {
            let o = GenOptions { rate, ..ok.clone() };
            assert_eq!(o.check(), Err(GenError::Rate(rate)));
        }
        let o = GenOptions {
            rate: f64::NAN,
            ..ok.clone()
        };
        assert!(matches!(o.check(), Err(GenError::Rate(r)) if r.is_nan()));
    }

    #[test]
    fn the_header_gives_the_region_and_the_command_that_makes_the_trace() {
        let h = header(&GenOptions {
            rate: 500.5,
            ..opts(Shape::ScanHot, 64 * MIB, 1000, 7)
        });
        assert_eq!(h.volume_size, 64 * MIB);
        assert_eq!(h.start_unix_ns, 0);
        assert_eq!(
            h.source,
            format!(
                "tierd {} trace generate scan-hot --region 64MiB --requests 1000 --rate 500.5 --seed 7",
                env!("CARGO_PKG_VERSION")
            )
        );
        let h = header(&GenOptions::defaults(Shape::Database));
        assert!(
            h.source
                .ends_with("database --region 4GiB --requests 200000 --rate 2000 --seed 1"),
            "{}",
            h.source
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_trace_and_another_seed_another() {
        for shape in Shape::ALL {
            let a = records(&opts(shape, 16 * MIB, 2000, 5));
            assert_eq!(a, records(&opts(shape, 16 * MIB, 2000, 5)), "{shape}");
            let b = records(&opts(shape, 16 * MIB, 2000, 6));
            let same_place = a
                .iter()
                .zip(&b)
                .filter(|(x, y)| (x.offset, x.op) == (y.offset, y.op))
                .count();
            assert!(same_place < 1000, "{shape}: {same_place} of 2000 alike");
            assert_ne!(a.last().map(|r| r.t_ns), b.last().map(|r| r.t_ns));
        }
    }

    #[test]
    fn requests_are_aligned_inside_the_region_and_in_time_order() {
        // 259 blocks: no power of two, an odd number of them, and a region
        // that is not a whole number of 8 KiB pages or 256 KiB scans.
        for region in [MIB + 3 * BLOCK, 64 * MIB] {
            for shape in Shape::ALL {
                let o = opts(shape, region, 20_000, 3);
                let g = generate(&o);
                assert_eq!(g.size_hint(), (20_000, Some(20_000)));
                let rs: Vec<Record> = g.collect();
                assert_eq!(rs.len(), 20_000);
                assert_eq!(rs[0].t_ns, 0);
                for (i, r) in rs.iter().enumerate() {
                    let what = format!("{shape} region {region} record {i}: {r:?}");
                    assert!(r.offset.is_multiple_of(BLOCK), "{what}");
                    assert!(
                        r.len > 0 && u64::from(r.len).is_multiple_of(BLOCK),
                        "{what}"
                    );
                    assert!(r.offset + u64::from(r.len) <= region, "{what}");
                    assert!(matches!(r.op, Op::Read | Op::Write), "{what}");
                    if i > 0 {
                        assert!(r.t_ns >= rs[i - 1].t_ns, "{what}");
                    }
                }
                // Poisson at 2,000/s: 19,999 gaps of 0.5 ms on average.
                let secs = rs[rs.len() - 1].t_ns as f64 / 1e9;
                assert_near(&format!("{shape}: duration"), secs, 19_999.0 / 2000.0, 0.3);
            }
        }
    }

    #[test]
    fn op_mixes_and_connections_are_the_specified_ones() {
        let region = 64 * MIB;
        let n = 50_000;
        for shape in [Shape::Zipf, Shape::Shift] {
            let rs = records(&opts(shape, region, n, 11));
            let reads = rs.iter().filter(|r| r.op == Op::Read).count();
            assert_near(&format!("{shape} reads"), share(reads, rs.len()), 0.9, 0.02);
            assert!(rs.iter().all(|r| r.len == 4096 && r.conn == 0 && !r.fua));
        }

        let rs = records(&opts(Shape::ScanHot, region, n, 11));
        assert!(rs.iter().all(|r| r.op == Op::Read && !r.fua));
        let scans: Vec<&Record> = rs.iter().filter(|r| r.conn == 1).collect();
        assert_near("scan share", share(scans.len(), rs.len()), 0.25, 0.02);
        assert!(scans.iter().all(|r| u64::from(r.len) == SCAN_LEN));
        for r in rs.iter().filter(|r| r.conn == 0) {
            assert!(r.len == 4096 && r.offset < region / 8, "hot read {r:?}");
        }

        let rs = records(&opts(Shape::Database, region, n, 11));
        let log_start = region - region / 8;
        let (log, data): (Vec<&Record>, Vec<&Record>) = rs.iter().partition(|r| r.conn == 1);
        assert_near("log share", share(log.len(), rs.len()), 0.1, 0.02);
        for r in &log {
            assert!(r.op == Op::Write && r.fua && r.len == 4096, "{r:?}");
            assert!(r.offset >= log_start, "{r:?}");
        }
        let data_reads = data.iter().filter(|r| r.op == Op::Read).count();
        assert_near("data reads", share(data_reads, data.len()), 0.67, 0.02);
        for r in &data {
            assert!(!r.fua && u64::from(r.len) == PAGE, "{r:?}");
            assert!(
                r.offset.is_multiple_of(PAGE) && r.offset + PAGE <= log_start,
                "{r:?}"
            );
        }
        // The log is appended in order and wraps at the end of the region.
        let blocks = region / 8 / BLOCK;
        for (i, r) in log.iter().enumerate() {
            assert_eq!(
                r.offset,
                log_start + i as u64 % blocks * BLOCK,
                "log write {i}"
            );
        }
        assert!(log.len() as u64 > blocks, "the log wraps");
    }

    #[test]
    fn zipf_puts_most_requests_on_the_top_percent_of_blocks_scattered_over_the_region() {
        let region = 64 * MIB;
        let blocks = (region / BLOCK) as usize;
        let rs = records(&opts(Shape::Zipf, region, 100_000, 2));
        let counts = block_counts(&rs);
        let k = blocks / 100;
        let hot = top(&counts, k);
        let hot_share = share(hot.iter().map(|h| h.1).sum(), rs.len());
        // Zipf 0.99 gives the top 1 % of 16,384 ranks
        // sum(i^-0.99, i <= 163) / sum(i^-0.99, i <= 16384) of the draws.
        let zeta = |m: usize| (1..=m).map(|i| (i as f64).powf(-0.99)).sum::<f64>();
        let want = zeta(k) / zeta(blocks);
        assert!(want > 0.5, "{want}");
        assert_near("top 1 % share", hot_share, want, 0.03);
        // Uniform would give each block 100,000 / 16,384 = 6 requests.
        assert!(hot[0].1 > 5000, "{hot:?}");
        // Scattered: the hot blocks are in nearly every 1 MiB extent.
        let extents: HashSet<u64> = hot.iter().map(|h| h.0 * BLOCK / MIB).collect();
        assert!(extents.len() > 50, "{} of 64 extents", extents.len());
    }

    #[test]
    fn shift_moves_the_hot_set_to_other_blocks_and_back() {
        let region = 64 * MIB;
        let n = 40_000;
        let rs = records(&opts(Shape::Shift, region, n, 4));
        let phase = |from: u64, to: u64| block_counts(&rs[from as usize..to as usize]);
        let k = (region / BLOCK / 100) as usize;
        let set = |c: &HashMap<u64, usize>, k: usize| -> HashSet<u64> {
            top(c, k).into_iter().map(|h| h.0).collect()
        };
        let before = phase(0, n / 2);
        let during = phase(n / 2, n * 3 / 4);
        let after = phase(n * 3 / 4, n);
        let (a, b) = (set(&before, k), set(&during, k));
        assert_eq!(a.intersection(&b).count(), 0, "hot sets before and during");
        // The share of a phase's requests on the first hot set: most of
        // them before and again after three quarters, next to none while
        // shifted, when as many go to the new hot set.
        let on = |c: &HashMap<u64, usize>, set: &HashSet<u64>, total: u64| {
            share(
                c.iter().filter(|e| set.contains(e.0)).map(|e| *e.1).sum(),
                total as usize,
            )
        };
        let first = on(&before, &a, n / 2);
        assert!(first > 0.5, "{first}");
        assert!(on(&during, &a, n / 4) < 0.01);
        assert_near("shifted", on(&during, &b, n / 4), first, 0.05);
        assert_near("back", on(&after, &a, n / 4), first, 0.05);
    }

    #[test]
    fn the_scan_reads_the_whole_region_in_order_and_starts_again() {
        // 4 MiB and 12 KiB: 16 scans of 256 KiB and one of 12 KiB a pass.
        let region = 4 * MIB + 3 * BLOCK;
        let rs = records(&opts(Shape::ScanHot, region, 4000, 9));
        let scans: Vec<&Record> = rs.iter().filter(|r| r.conn == 1).collect();
        assert!(scans.len() > 17 * 40, "{} scans", scans.len());
        let mut want = 0;
        for (i, r) in scans.iter().enumerate() {
            let len = SCAN_LEN.min(region - want);
            assert_eq!((r.offset, u64::from(r.len)), (want, len), "scan {i}");
            want = (want + len) % region;
        }
        let hot_end = (region / BLOCK / 8) * BLOCK;
        assert!(rs
            .iter()
            .filter(|r| r.conn == 0)
            .all(|r| r.offset + u64::from(r.len) <= hot_end));
    }
}
