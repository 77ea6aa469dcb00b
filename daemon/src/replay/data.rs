//! What the replayer writes and what it expects to read back: every byte it
//! writes is a function of its address and of who wrote it (the fill, or
//! the trace's request number), so data in the wrong place or of the wrong
//! age is seen; and, for `--verify`, a model of what each 512-byte sector of
//! the footprint must hold after the replay, built from the requests in the
//! order they were sent and from when they were answered.

/// Who wrote a byte: the fill is 0, the trace's request `i` is `i + 1`.
pub type Writer = u32;

/// The fill's writer.
pub const FILL: Writer = 0;

/// The bytes `writer` puts at `[offset, offset + buf.len())`: never all
/// zero, different for every writer and every 8-byte word of the volume.
pub fn pattern(buf: &mut [u8], offset: u64, writer: Writer) {
    let salt = u64::from(writer).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995_0000_0001;
    let mut i = 0;
    while i < buf.len() {
        let at = offset + i as u64;
        let w = mix((at / 8) ^ salt).to_le_bytes();
        let skip = (at % 8) as usize;
        let n = (8 - skip).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&w[skip..skip + n]);
        i += n;
    }
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Bytes per sector of the model.
pub const SECTOR: u64 = 512;

/// What a sector must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// This writer's bytes.
    Data(Writer),
    /// Zeros (a write-zeroes covered it).
    Zeros,
    /// Anything: trimmed, written by two requests in flight at once, cut
    /// by a request that covered only part of it, or written by a request
    /// that failed or was never answered.
    Unknown,
}

#[derive(Debug, Clone, Copy)]
struct Cell {
    expect: Expect,
    /// When the last request that wrote it was answered (ns since the
    /// replay's start; `u64::MAX`: never).
    until: u64,
}

/// What each sector of `[start, start + len)` holds after a run.
pub struct Model {
    start: u64,
    cells: Vec<Cell>,
}

impl Model {
    /// Sectors of `[start, start + len)` (whole sectors) all holding the
    /// fill.
    pub fn new(start: u64, len: u64) -> Model {
        Model {
            start: start / SECTOR * SECTOR,
            cells: vec![
                Cell {
                    expect: Expect::Data(FILL),
                    until: 0,
                };
                len.div_ceil(SECTOR) as usize
            ],
        }
    }

    /// A request that changed `[offset, offset + len)` to `to`, sent at
    /// `sent` and answered at `answered` (`u64::MAX`: never; `to` is then
    /// [`Expect::Unknown`]). Apply requests in the order they were sent.
    pub fn apply(&mut self, offset: u64, len: u64, to: Expect, sent: u64, answered: u64) {
        let end = offset.saturating_add(len);
        let first = offset.saturating_sub(self.start) / SECTOR;
        let last = end.saturating_sub(self.start).div_ceil(SECTOR);
        for s in first..last.min(self.cells.len() as u64) {
            let lo = self.start + s * SECTOR;
            let whole = offset <= lo && end >= lo + SECTOR;
            let c = &mut self.cells[s as usize];
            if c.until > sent {
                // An earlier write was still in flight: either may win.
                c.expect = Expect::Unknown;
                c.until = c.until.max(answered);
            } else {
                c.expect = if whole { to } else { Expect::Unknown };
                c.until = answered;
            }
        }
    }

    /// What the sector holding byte `offset` must hold (`Unknown` outside
    /// the model).
    pub fn expect(&self, offset: u64) -> Expect {
        offset
            .checked_sub(self.start)
            .and_then(|d| self.cells.get((d / SECTOR) as usize))
            .map_or(Expect::Unknown, |c| c.expect)
    }
}

/// Sectors compared, left out, and found wrong (with the first wrong one).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Checked {
    /// Sectors compared.
    pub sectors: u64,
    /// Sectors whose contents the model does not know.
    pub unknown: u64,
    /// Sectors that differ from what the model expects.
    pub wrong: u64,
    /// The first wrong sector's offset and what it should have held.
    pub first_wrong: Option<String>,
}

impl Checked {
    /// Compare `got`, read at `offset` (sector-aligned, whole sectors),
    /// with what `expect` says each sector holds.
    pub fn compare(&mut self, got: &[u8], offset: u64, expect: impl Fn(u64) -> Expect) {
        let mut want = vec![0u8; SECTOR as usize];
        for (i, sector) in got.chunks(SECTOR as usize).enumerate() {
            let at = offset + i as u64 * SECTOR;
            let e = expect(at);
            match e {
                Expect::Unknown => {
                    self.unknown += 1;
                    continue;
                }
                Expect::Zeros => want.fill(0),
                Expect::Data(w) => pattern(&mut want, at, w),
            }
            self.sectors += 1;
            if sector != &want[..sector.len()] {
                self.wrong += 1;
                if self.first_wrong.is_none() {
                    let what = match e {
                        Expect::Data(FILL) => "the fill's data".to_string(),
                        Expect::Data(w) => format!("the data of the trace's request {w}"),
                        _ => "zeros".to_string(),
                    };
                    self.first_wrong = Some(format!("byte {at} should hold {what}"));
                }
            }
        }
    }

    /// Add another part's counts.
    pub fn merge(&mut self, o: Checked) {
        self.sectors += o.sectors;
        self.unknown += o.unknown;
        self.wrong += o.wrong;
        if self.first_wrong.is_none() {
            self.first_wrong = o.first_wrong;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_depend_on_address_and_writer_and_cut_anywhere() {
        let mut a = vec![0u8; 64];
        pattern(&mut a, 4096, 3);
        let mut b = vec![0u8; 64];
        pattern(&mut b, 4096, 4);
        assert_ne!(a, b);
        assert!(a.iter().any(|x| *x != 0));
        // Any sub-range is the same bytes as the whole.
        let mut part = vec![0u8; 13];
        pattern(&mut part, 4096 + 5, 3);
        assert_eq!(part, a[5..18]);
    }

    #[test]
    fn the_model_knows_the_last_write_unless_two_overlapped_in_time() {
        let mut m = Model::new(0, 8 * SECTOR);
        assert_eq!(m.expect(0), Expect::Data(FILL));
        // Sector 0: written at 10, answered 20; then again at 30.
        m.apply(0, SECTOR, Expect::Data(1), 10, 20);
        m.apply(0, SECTOR, Expect::Data(2), 30, 40);
        assert_eq!(m.expect(0), Expect::Data(2));
        // Sector 1: a second write sent while the first was in flight.
        m.apply(SECTOR, SECTOR, Expect::Data(3), 10, 50);
        m.apply(SECTOR, SECTOR, Expect::Data(4), 20, 30);
        assert_eq!(m.expect(SECTOR), Expect::Unknown);
        // ... until one sent after both were answered.
        m.apply(SECTOR, SECTOR, Expect::Data(5), 60, 70);
        assert_eq!(m.expect(SECTOR), Expect::Data(5));
        // Part of a sector, a failed write, zeros.
        m.apply(2 * SECTOR + 100, 10, Expect::Data(6), 1, 2);
        assert_eq!(m.expect(2 * SECTOR), Expect::Unknown);
        m.apply(3 * SECTOR, SECTOR, Expect::Unknown, 1, u64::MAX);
        assert_eq!(m.expect(3 * SECTOR), Expect::Unknown);
        m.apply(4 * SECTOR, 2 * SECTOR, Expect::Zeros, 1, 2);
        assert_eq!(m.expect(5 * SECTOR + 7), Expect::Zeros);
        assert_eq!(m.expect(9 * SECTOR), Expect::Unknown);
    }

    #[test]
    fn comparing_finds_a_wrong_sector_and_skips_unknown_ones() {
        let mut got = vec![0u8; 3 * SECTOR as usize];
        pattern(&mut got, 0, 7);
        got[SECTOR as usize + 3] ^= 1;
        let mut c = Checked::default();
        c.compare(&got, 0, |at| {
            if at == 2 * SECTOR {
                Expect::Unknown
            } else {
                Expect::Data(7)
            }
        });
        assert_eq!((c.sectors, c.unknown, c.wrong), (2, 1, 1));
        assert!(c.first_wrong.unwrap().contains("byte 512"));
    }
}
