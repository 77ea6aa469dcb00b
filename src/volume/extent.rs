//! The extent map's entries: where a logical extent lives and which of its
//! 4 KiB blocks hold written data, plus their encoding in the metadata store.
//!
//! Record layout: `[1u8 version][tier u8][slot u32 LE][kind u8]` followed,
//! for kind 0 (partial), by the written-block bitmap as little-endian u64
//! words. Kind 1 means every block is written.

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

/// A mapped extent: its place and its written blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Where it lives.
    pub loc: Loc,
    /// Which blocks hold data.
    pub written: Written,
}

/// Why an extent record does not decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("extent record is damaged: {0}")]
pub struct RecordError(pub &'static str);

impl Mapping {
    /// Encode for the metadata store.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(7);
        b.push(1u8);
        b.push(match self.loc.tier {
            Tier::Ssd => 0,
            Tier::Hdd => 1,
        });
        b.extend_from_slice(&self.loc.slot.to_le_bytes());
        match &self.written {
            Written::Full => b.push(1),
            Written::Partial(w) => {
                b.push(0);
                for word in w.iter() {
                    b.extend_from_slice(&word.to_le_bytes());
                }
            }
        }
        b
    }

    /// Decode a record of an extent with `blocks` blocks.
    pub fn decode(b: &[u8], blocks: u32) -> Result<Self, RecordError> {
        if b.len() < 7 {
            return Err(RecordError("too short"));
        }
        if b[0] != 1 {
            return Err(RecordError("unknown record version"));
        }
        let tier = match b[1] {
            0 => Tier::Ssd,
            1 => Tier::Hdd,
            _ => return Err(RecordError("unknown tier")),
        };
        let slot = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let written = match b[6] {
            1 if b.len() == 7 => Written::Full,
            0 => {
                let words = (blocks as usize).div_ceil(64);
                if b.len() != 7 + words * 8 {
                    return Err(RecordError("bitmap length does not match the extent size"));
                }
                let w: Vec<u64> = b[7..]
                    .chunks_exact(8)
                    .map(|c| {
                        let mut a = [0u8; 8];
                        a.copy_from_slice(c);
                        u64::from_le_bytes(a)
                    })
                    .collect();
                Written::Partial(w.into_boxed_slice())
            }
            _ => return Err(RecordError("unknown bitmap kind")),
        };
        Ok(Mapping {
            loc: Loc { tier, slot },
            written,
        })
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
    fn records_roundtrip() {
        let mut written = Written::empty(256);
        written.set_range(3, 200, true, 256);
        for m in [
            Mapping {
                loc: Loc {
                    tier: Tier::Hdd,
                    slot: 77,
                },
                written,
            },
            Mapping {
                loc: Loc {
                    tier: Tier::Ssd,
                    slot: 0,
                },
                written: Written::Full,
            },
        ] {
            assert_eq!(Mapping::decode(&m.encode(), 256).unwrap(), m);
        }
        assert!(Mapping::decode(&[1, 0, 0, 0, 0, 0, 0, 0], 256).is_err());
        assert!(Mapping::decode(&[2, 0, 0, 0, 0, 0, 1], 256).is_err());
        assert!(Mapping::decode(&[1, 5, 0, 0, 0, 0, 1], 256).is_err());
    }
}
