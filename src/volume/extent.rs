//! The extent map's entries: where a logical extent lives, which of its
//! 4 KiB blocks hold written data, and the two kinds of second copy an
//! extent can have, plus their encoding in the metadata store.
//!
//! - An extent on the **SSD** may keep a **shadow**: its old HDD slot, a
//!   clean copy of every block except those marked *stale* (written on the
//!   SSD since). Demoting it writes back only the stale blocks.
//! - An extent on the **HDD** may have blocks in the SSD **write log**: a
//!   write to an HDD extent lands in a free 4 KiB place of a log segment on
//!   the SSD, and the extent remembers where (`logged`). Reads take each
//!   block from its newest place; write-back copies logged blocks home.
//!
//! Record layout, version 1 (a plain mapping, the only one older releases
//! wrote): `[1u8][tier u8][slot u32 LE][kind u8]` followed, for kind 0
//! (partial), by the written-block bitmap as little-endian u64 words; kind 1
//! means every block is written. Version 2 (a mapping with a shadow or
//! logged blocks) is the same with a leading 2, then `[shadow u8]` (0 or 1)
//! and, with a shadow, `[slot u32][kind][stale bitmap]`, then
//! `[count u32]` logged blocks of `[block u32][segment slot u32][index u32]`.

use super::geometry::Tier;

/// A physical place: one slot on one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The tier.
    pub tier: Tier,
    /// The slot on that tier.
    pub slot: u32,
}

/// Which blocks of a mapped extent hold data; the others read as zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Every block.
    Full,
    /// A bitmap, one bit per block.
    Partial(Box<[u64]>),
}

impl Written {
    /// No block written, for `blocks` blocks.
    pub fn empty(blocks: u32) -> Self {
        Written::Partial(vec![0u64; (blocks as usize).div_ceil(64)].into_boxed_slice())
    }

    /// A bitmap of `blocks` blocks with `len` of them set from `first`.
    pub fn of_run(first: u32, len: u32, blocks: u32) -> Self {
        let mut w = Written::empty(blocks);
        if len > 0 {
            w.set_range(first, first + len - 1, true, blocks);
        }
        w
    }

    /// A partial bitmap's one run of set blocks, (first, length): (0, 0)
    /// when none is set; `None` for [`Written::Full`] or two runs or more.
    pub fn one_run(&self) -> Option<(u32, u32)> {
        let Written::Partial(words) = self else {
            return None;
        };
        // Without building the run list: this runs as a write guard lets
        // go of a partial mapping.
        let mut run: Option<(u32, u32)> = None;
        for (i, &word) in words.iter().enumerate() {
            if word == 0 {
                continue;
            }
            let start = word.trailing_zeros();
            let len = (word >> start).trailing_ones();
            if start + len < 64 && word >> (start + len) != 0 {
                return None;
            }
            let first = i as u32 * 64 + start;
            run = match run {
                None => Some((first, len)),
                Some((f, n)) if f + n == first => Some((f, n + len)),
                Some(_) => return None,
            };
        }
        Some(run.unwrap_or((0, 0)))
    }

    /// Whether block `b` is written.
    pub fn get(&self, b: u32) -> bool {
        match self {
            Written::Full => true,
            Written::Partial(w) => w[(b / 64) as usize] & (1u64 << (b % 64)) != 0,
        }
    }

    /// Whether every block in `first..=last` is written.
    pub fn all(&self, first: u32, last: u32) -> bool {
        match self {
            Written::Full => true,
            Written::Partial(_) => (first..=last).all(|b| self.get(b)),
        }
    }

    /// Whether no block is written.
    pub fn is_empty(&self) -> bool {
        match self {
            Written::Full => false,
            Written::Partial(w) => w.iter().all(|x| *x == 0),
        }
    }

    /// Mark `first..=last` written (or not), collapsing to `Full` when every
    /// one of `blocks` blocks is.
    pub fn set_range(&mut self, first: u32, last: u32, value: bool, blocks: u32) {
        if let (Written::Full, true) = (&*self, value) {
            return;
        }
        if let Written::Full = self {
            let mut w = vec![u64::MAX; (blocks as usize).div_ceil(64)];
            if !blocks.is_multiple_of(64) {
                let n = w.len();
                w[n - 1] = (1u64 << (blocks % 64)) - 1;
            }
            *self = Written::Partial(w.into_boxed_slice());
        }
        if let Written::Partial(w) = self {
            for b in first..=last {
                let bit = 1u64 << (b % 64);
                if value {
                    w[(b / 64) as usize] |= bit;
                } else {
                    w[(b / 64) as usize] &= !bit;
                }
            }
            let full = (0..blocks).all(|b| w[(b / 64) as usize] & (1u64 << (b % 64)) != 0);
            if full {
                *self = Written::Full;
            }
        }
    }

    /// How many of `blocks` blocks are written.
    pub fn count(&self, blocks: u32) -> u32 {
        match self {
            Written::Full => blocks,
            Written::Partial(w) => w.iter().map(|x| x.count_ones()).sum(),
        }
    }

    /// Maximal runs `(first, count, written)` covering `first..=last`.
    pub fn runs(&self, first: u32, last: u32) -> Vec<(u32, u32, bool)> {
        let mut out: Vec<(u32, u32, bool)> = Vec::new();
        for b in first..=last {
            let w = self.get(b);
            match out.last_mut() {
                Some((_, n, v)) if *v == w => *n += 1,
                _ => out.push((b, 1, w)),
            }
        }
        out
    }
}

/// A place in the SSD write log: block `index` of log segment `slot` (an
/// SSD slot lent to the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogPos {
    /// The SSD slot of the segment.
    pub slot: u32,
    /// The 4 KiB place inside it.
    pub index: u32,
}

/// Bytes per sector: the unit a block is logged in part by.
pub const SECTOR: u64 = 512;

/// Every sector of a block ([`Logged::sectors`]).
pub const ALL_SECTORS: u8 = 0xff;

/// A block of an HDD extent whose newest data is in the write log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Logged {
    /// The block inside the extent.
    pub block: u32,
    /// Where its data is.
    pub at: LogPos,
    /// Which of the block's eight 512-byte sectors the log place holds
    /// (bit `i`: sector `i`); [`ALL_SECTORS`] for the whole block. A block
    /// logged in part was written on the HDD before: its other sectors'
    /// newest data is in the extent's HDD slot, so a write of part of it
    /// lands on flash without reading the rest off the HDD first.
    pub sectors: u8,
}

impl Logged {
    /// The whole block at `at`.
    pub fn whole(block: u32, at: LogPos) -> Self {
        Logged {
            block,
            at,
            sectors: ALL_SECTORS,
        }
    }

    /// Whether the log place holds the whole block.
    pub fn is_whole(&self) -> bool {
        self.sectors == ALL_SECTORS
    }

    /// The runs of sectors the log place holds, as byte ranges
    /// `(start, end)` inside the block.
    pub fn sector_runs(&self) -> Vec<(u64, u64)> {
        sector_runs(self.sectors)
    }
}

/// The runs of set bits of a sector mask, as byte ranges inside a block.
pub fn sector_runs(mask: u8) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in 0..8u64 {
        if mask & (1 << i) == 0 {
            continue;
        }
        match out.last_mut() {
            Some((_, end)) if *end == i * SECTOR => *end += SECTOR,
            _ => out.push((i * SECTOR, (i + 1) * SECTOR)),
        }
    }
    out
}

/// The sectors of a block that bytes `[start, end)` (offsets inside the
/// block, `start < end <= 4096`) cover whole, and whether they cover every
/// byte they touch (both ends on sector boundaries).
pub fn sectors_of(start: u64, end: u64) -> (u8, bool) {
    let aligned = start.is_multiple_of(SECTOR) && end.is_multiple_of(SECTOR);
    let mut mask = 0u8;
    for i in 0..8u64 {
        if start <= i * SECTOR && (i + 1) * SECTOR <= end {
            mask |= 1 << i;
        }
    }
    (mask, aligned)
}

/// The clean HDD copy an SSD extent keeps after a promotion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadow {
    /// Its HDD slot.
    pub slot: u32,
    /// Blocks written on the SSD since: the HDD copy of them is outdated.
    pub stale: Written,
}

/// A mapped extent: its place, its written blocks and its second copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Where it lives.
    pub loc: Loc,
    /// Which blocks hold data.
    pub written: Written,
    /// On the SSD only: the clean HDD copy kept since its promotion.
    pub shadow: Option<Shadow>,
    /// On the HDD only: blocks whose newest data is in the SSD write log,
    /// in block order.
    pub logged: Vec<Logged>,
}

/// Why an extent record does not decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("extent record is damaged: {0}")]
pub struct RecordError(pub &'static str);

/// A bitmap in a record: kind 1 every block; kind 2 runs of set blocks
/// (`[runs: u16][first: u16, length: u16]...`, taken when shorter, as
/// for an extent with a few writes in it: 6 bytes for one run where the
/// words of a 1 MiB extent take 32); kind 0 the words.
fn put_bitmap(b: &mut Vec<u8>, w: &Written) {
    match w {
        Written::Full => b.push(1),
        Written::Partial(words) => {
            let runs = set_runs(words);
            let short = runs.len() <= usize::from(u16::MAX)
                && runs.iter().all(|&(f, n)| f <= 0xffff && n <= 0xffff);
            if short && 2 + 4 * runs.len() < 8 * words.len() {
                b.push(2);
                b.extend_from_slice(&(runs.len() as u16).to_le_bytes());
                for (first, n) in runs {
                    b.extend_from_slice(&(first as u16).to_le_bytes());
                    b.extend_from_slice(&(n as u16).to_le_bytes());
                }
            } else {
                b.push(0);
                for word in words.iter() {
                    b.extend_from_slice(&word.to_le_bytes());
                }
            }
        }
    }
}

/// The runs of set bits in `words`: (first bit, length).
fn set_runs(words: &[u64]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for (i, &word) in words.iter().enumerate() {
        let mut w = word;
        while w != 0 {
            let start = w.trailing_zeros();
            let len = (w >> start).trailing_ones();
            let first = i as u32 * 64 + start;
            match runs.last_mut() {
                Some((f, n)) if *f + *n == first => *n += len,
                _ => runs.push((first, len)),
            }
            w = if start + len >= 64 {
                0
            } else {
                w & !(((1u64 << len) - 1) << start)
            };
        }
    }
    runs
}

/// A cursor over a record's bytes.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError("too short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, RecordError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bitmap(&mut self, blocks: u32) -> Result<Written, RecordError> {
        match self.u8()? {
            1 => Ok(Written::Full),
            0 => {
                let words = (blocks as usize).div_ceil(64);
                let raw = self
                    .take(words * 8)
                    .map_err(|_| RecordError("bitmap length does not match the extent size"))?;
                let mut w: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(c);
                        u64::from_le_bytes(a)
                    })
                    .collect();
                // Bits past the extent's last block mean nothing: dropped,
                // so that the bitmap stores again as runs within it.
                if !blocks.is_multiple_of(64) {
                    if let Some(last) = w.last_mut() {
                        *last &= (1u64 << (blocks % 64)) - 1;
                    }
                }
                Ok(Written::Partial(w.into_boxed_slice()))
            }
            2 => {
                let runs = self.u16()?;
                let mut w = vec![0u64; (blocks as usize).div_ceil(64)];
                for _ in 0..runs {
                    let first = u32::from(self.u16()?);
                    let n = u32::from(self.u16()?);
                    if n == 0 || first + n > blocks {
                        return Err(RecordError("bitmap run out of range"));
                    }
                    for b in first..first + n {
                        w[(b / 64) as usize] |= 1u64 << (b % 64);
                    }
                }
                Ok(Written::Partial(w.into_boxed_slice()))
            }
            _ => Err(RecordError("unknown bitmap kind")),
        }
    }
}

impl Mapping {
    /// A plain mapping: no shadow, nothing logged.
    pub fn plain(loc: Loc, written: Written) -> Self {
        Mapping {
            loc,
            written,
            shadow: None,
            logged: Vec::new(),
        }
    }

    /// Whether the HDD shadow holds every written block (leaving the SSD is
    /// then a mapping change alone); false without a shadow.
    pub fn shadow_clean(&self, blocks: u32) -> bool {
        self.shadow
            .as_ref()
            .is_some_and(|s| (0..blocks).all(|b| !(self.written.get(b) && s.stale.get(b))))
    }

    /// The log place of block `b`, if its newest data (all of it, or some
    /// of its sectors) is in the log.
    pub fn logged_at(&self, b: u32) -> Option<LogPos> {
        self.logged_entry(b).map(|l| l.at)
    }

    /// The log entry of block `b`, if any.
    pub fn logged_entry(&self, b: u32) -> Option<&Logged> {
        self.logged
            .binary_search_by_key(&b, |l| l.block)
            .ok()
            .map(|i| &self.logged[i])
    }

    /// Every slot this mapping owns (its own, and its shadow's).
    pub fn slots(&self) -> impl Iterator<Item = Loc> {
        let shadow = self.shadow.as_ref().map(|s| Loc {
            tier: Tier::Hdd,
            slot: s.slot,
        });
        std::iter::once(self.loc).chain(shadow)
    }

    /// Encode for the metadata store: version 1 for a plain mapping (what
    /// older releases read), version 2 for one with a shadow or blocks
    /// logged whole, version 3 (each logged block with its sector mask)
    /// once a block is logged in part.
    pub fn encode(&self) -> Vec<u8> {
        let plain = self.shadow.is_none() && self.logged.is_empty();
        let parts = self.logged.iter().any(|l| !l.is_whole());
        let mut b = Vec::with_capacity(7);
        b.push(if plain {
            1u8
        } else if parts {
            3u8
        } else {
            2u8
        });
        b.push(match self.loc.tier {
            Tier::Ssd => 0,
            Tier::Hdd => 1,
        });
        b.extend_from_slice(&self.loc.slot.to_le_bytes());
        put_bitmap(&mut b, &self.written);
        if plain {
            return b;
        }
        match &self.shadow {
            None => b.push(0),
            Some(s) => {
                b.push(1);
                b.extend_from_slice(&s.slot.to_le_bytes());
                put_bitmap(&mut b, &s.stale);
            }
        }
        b.extend_from_slice(&(self.logged.len() as u32).to_le_bytes());
        for l in &self.logged {
            b.extend_from_slice(&l.block.to_le_bytes());
            b.extend_from_slice(&l.at.slot.to_le_bytes());
            b.extend_from_slice(&l.at.index.to_le_bytes());
            if parts {
                b.push(l.sectors);
            }
        }
        b
    }

    /// Decode a record of an extent with `blocks` blocks (either version).
    pub fn decode(b: &[u8], blocks: u32) -> Result<Self, RecordError> {
        let mut r = Reader(b);
        let version = r.u8()?;
        if !(1..=3).contains(&version) {
            return Err(RecordError("unknown record version"));
        }
        let tier = match r.u8()? {
            0 => Tier::Ssd,
            1 => Tier::Hdd,
            _ => return Err(RecordError("unknown tier")),
        };
        let slot = r.u32()?;
        let written = r.bitmap(blocks)?;
        let mut m = Mapping::plain(Loc { tier, slot }, written);
        if version >= 2 {
            m.shadow = match r.u8()? {
                0 => None,
                1 => {
                    let slot = r.u32()?;
                    Some(Shadow {
                        slot,
                        stale: r.bitmap(blocks)?,
                    })
                }
                _ => return Err(RecordError("unknown shadow flag")),
            };
            let n = r.u32()?;
            if n > blocks {
                return Err(RecordError("more logged blocks than the extent has"));
            }
            for _ in 0..n {
                let block = r.u32()?;
                let at = LogPos {
                    slot: r.u32()?,
                    index: r.u32()?,
                };
                let sectors = if version == 3 { r.u8()? } else { ALL_SECTORS };
                if block >= blocks || at.index >= blocks {
                    return Err(RecordError("logged block out of range"));
                }
                if m.logged.last().is_some_and(|l| l.block >= block) {
                    return Err(RecordError("logged blocks out of order"));
                }
                if sectors == 0 {
                    return Err(RecordError("a logged block with no sector"));
                }
                if sectors != ALL_SECTORS && !m.written.get(block) {
                    return Err(RecordError("a block logged in part but never written"));
                }
                m.logged.push(Logged { block, at, sectors });
            }
            if m.shadow.is_some() && m.loc.tier != Tier::Ssd {
                return Err(RecordError("a shadow on an HDD extent"));
            }
            if !m.logged.is_empty() && m.loc.tier != Tier::Hdd {
                return Err(RecordError("logged blocks on an SSD extent"));
            }
        }
        if !r.0.is_empty() {
            return Err(RecordError("trailing bytes"));
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_ranges_and_collapse() {
        let mut w = Written::empty(16);
        assert!(w.is_empty());
        w.set_range(2, 4, true, 16);
        assert!(w.all(2, 4));
        assert!(!w.all(1, 4));
        assert_eq!(
            w.runs(0, 6),
            vec![(0, 2, false), (2, 3, true), (5, 2, false)]
        );
        w.set_range(0, 15, true, 16);
        assert_eq!(w, Written::Full);
        w.set_range(15, 15, false, 16);
        assert!(!w.get(15) && w.get(14));
        w.set_range(0, 14, false, 16);
        assert!(w.is_empty());
    }

    #[test]
    fn a_bitmap_of_few_runs_is_stored_as_runs_and_reads_back() {
        let blocks = 256;
        let loc = Loc {
            tier: Tier::Hdd,
            slot: 9,
        };
        let mut w = Written::empty(blocks);
        w.set_range(5, 5, true, blocks);
        let one = Mapping::plain(loc, w.clone()).encode();
        // version, tier, slot, kind, one run: 1 + 1 + 4 + 1 + 2 + 4.
        assert_eq!(one.len(), 13, "{one:?}");
        assert_eq!(Mapping::decode(&one, blocks).unwrap().written, w);
        // Runs crossing words, at the ends, and many of them.
        let mut seed = 7u64;
        for case in 0..200 {
            let mut w = Written::empty(blocks);
            let pieces = 1 + case % 40;
            for _ in 0..pieces {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let first = ((seed >> 33) % u64::from(blocks)) as u32;
                let last = (first + ((seed >> 20) % 70) as u32).min(blocks - 1);
                w.set_range(first, last, true, blocks);
            }
            w.set_range(255, 255, case % 3 == 0, blocks);
            let mut m = Mapping::plain(
                Loc {
                    tier: Tier::Ssd,
                    slot: 3,
                },
                w.clone(),
            );
            m.shadow = Some(Shadow {
                slot: 4,
                stale: w.clone(),
            });
            let rec = m.encode();
            assert_eq!(Mapping::decode(&rec, blocks).unwrap(), m, "case {case}");
            if let Written::Partial(words) = &w {
                let runs = set_runs(words);
                let want = match runs.as_slice() {
                    [] => Some((0, 0)),
                    [r] => Some(*r),
                    _ => None,
                };
                assert_eq!(w.one_run(), want, "case {case}");
            }
            // Never longer than the words would be.
            assert!(rec.len() <= 1 + 1 + 4 + 33 + 1 + 4 + 33 + 4, "case {case}");
        }
        // A record written before runs existed (kind 0, the words) still reads.
        let mut old = vec![1u8, 1, 9, 0, 0, 0, 0];
        let mut words = [0u64; 4];
        words[0] = 1 << 5;
        for x in words {
            old.extend_from_slice(&x.to_le_bytes());
        }
        let mut want = Written::empty(blocks);
        want.set_range(5, 5, true, blocks);
        assert_eq!(Mapping::decode(&old, blocks).unwrap().written, want);
        // Bits past a short extent's last block (an old record's words)
        // are dropped, and the mapping stores again as runs within it.
        let mut past = vec![1u8, 0, 0, 0, 0, 0, 0];
        past.extend_from_slice(&((1u64 << 16) | 1).to_le_bytes());
        let m = Mapping::decode(&past, 16).unwrap();
        assert_eq!(m.written, Written::of_run(0, 1, 16));
        assert_eq!(Mapping::decode(&m.encode(), 16).unwrap(), m);
        // A run past the extent is refused.
        let bad = [1u8, 1, 9, 0, 0, 0, 2, 1, 0, 250, 0, 10, 0];
        assert!(Mapping::decode(&bad, blocks).is_err());
    }

    #[test]
    fn sector_masks() {
        assert_eq!(sectors_of(0, 4096), (ALL_SECTORS, true));
        assert_eq!(sectors_of(512, 1536), (0b0000_0110, true));
        // 3 KiB from the block's start, as MSR's 3072-byte writes.
        assert_eq!(sectors_of(0, 3072), (0b0011_1111, true));
        assert!(!sectors_of(100, 1100).1);
        assert_eq!(sector_runs(0b1100_0110), vec![(512, 1536), (3072, 4096)]);
        assert_eq!(sector_runs(ALL_SECTORS), vec![(0, 4096)]);
    }

    #[test]
    fn a_record_logging_part_of_an_unwritten_block_is_refused() {
        let m = Mapping {
            logged: vec![Logged {
                block: 1,
                at: LogPos { slot: 0, index: 0 },
                sectors: 1,
            }],
            ..Mapping::plain(
                Loc {
                    tier: Tier::Hdd,
                    slot: 5,
                },
                Written::empty(256),
            )
        };
        assert!(Mapping::decode(&m.encode(), 256).is_err());
    }

    #[test]
    fn records_roundtrip() {
        let mut written = Written::empty(256);
        written.set_range(3, 200, true, 256);
        for m in [
            Mapping::plain(
                Loc {
                    tier: Tier::Hdd,
                    slot: 77,
                },
                written.clone(),
            ),
            Mapping::plain(
                Loc {
                    tier: Tier::Ssd,
                    slot: 0,
                },
                Written::Full,
            ),
            Mapping {
                shadow: Some(Shadow {
                    slot: 9,
                    stale: written.clone(),
                }),
                ..Mapping::plain(
                    Loc {
                        tier: Tier::Ssd,
                        slot: 3,
                    },
                    Written::Full,
                )
            },
            Mapping {
                logged: vec![
                    Logged::whole(4, LogPos { slot: 2, index: 0 }),
                    Logged::whole(
                        200,
                        LogPos {
                            slot: 7,
                            index: 255,
                        },
                    ),
                ],
                ..Mapping::plain(
                    Loc {
                        tier: Tier::Hdd,
                        slot: 5,
                    },
                    written.clone(),
                )
            },
            Mapping {
                logged: vec![
                    Logged::whole(4, LogPos { slot: 2, index: 0 }),
                    Logged {
                        block: 100,
                        at: LogPos { slot: 7, index: 3 },
                        sectors: 0b0000_0110,
                    },
                ],
                ..Mapping::plain(
                    Loc {
                        tier: Tier::Hdd,
                        slot: 5,
                    },
                    written,
                )
            },
        ] {
            let enc = m.encode();
            let plain = m.shadow.is_none() && m.logged.is_empty();
            let parts = m.logged.iter().any(|l| !l.is_whole());
            let version = match (plain, parts) {
                (true, _) => 1,
                (false, false) => 2,
                (false, true) => 3,
            };
            assert_eq!(enc[0], version, "{m:?}");
            assert_eq!(Mapping::decode(&enc, 256).unwrap(), m);
            // Every truncation is refused, never misread.
            for n in 0..enc.len() {
                assert!(Mapping::decode(&enc[..n], 256).is_err(), "{m:?} cut at {n}");
            }
        }
        // A version-1 record as the previous release wrote it.
        let old = [1u8, 1, 77, 0, 0, 0, 1];
        assert_eq!(
            Mapping::decode(&old, 256).unwrap(),
            Mapping::plain(
                Loc {
                    tier: Tier::Hdd,
                    slot: 77
                },
                Written::Full
            )
        );
        assert!(Mapping::decode(&[1, 0, 0, 0, 0, 0, 0, 0], 256).is_err());
        assert!(Mapping::decode(&[4, 0, 0, 0, 0, 0, 1], 256).is_err());
        assert!(Mapping::decode(&[2, 0, 0, 0, 0, 0, 1], 256).is_err());
        assert!(Mapping::decode(&[1, 5, 0, 0, 0, 0, 1], 256).is_err());
    }
}
