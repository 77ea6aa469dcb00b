//! Pins: ranges of extents an operator keeps on one tier. They persist in
//! the metadata store, steer where new extents are allocated, and the
//! migrator honours them on its next round.

use serde::{Deserialize, Serialize};

use super::geometry::Tier;
use super::{Volume, VolumeError, VolumeResult, PINS_KEY};

/// A pin: extents `start..end` kept on `tier` (`None`: explicitly unpinned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// First extent.
    pub start: u64,
    /// One past the last extent.
    pub end: u64,
    /// The tier, or `None` for an unpin overriding earlier pins.
    pub tier: Option<Tier>,
}

/// Which tier a list of pins (later entries overriding earlier) puts an
/// extent on.
pub fn pin_in(pins: &[Pin], extent: u64) -> Option<Tier> {
    pins.iter()
        .rev()
        .find(|p| p.start <= extent && extent < p.end)
        .and_then(|p| p.tier)
}

impl Volume {
    /// Pin the extents overlapping `[offset, offset+len)` to `tier`
    /// (`None`: unpin them). Pins persist in the metadata store; the
    /// migrator honours them on its next round.
    pub fn pin(&self, offset: u64, len: u64, tier: Option<Tier>) -> VolumeResult<()> {
        self.check(offset, len.max(1))?;
        let es = self.geo.extent_size;
        let (start, end) = (offset / es, (offset + len.max(1)).div_ceil(es));
        let mut pins = self.pins.write();
        let mut new: Vec<Pin> = pins
            .iter()
            .copied()
            .filter(|p| !(start <= p.start && p.end <= end))
            .collect();
        // An unpin needs an entry only to override an earlier pin it
        // overlaps in part; one that overrides nothing would stay in the
        // list (and in status' count of pins) for nothing.
        if tier.is_some() || new.iter().any(|p| p.start < end && start < p.end) {
            new.push(Pin { start, end, tier });
        }
        let room = u64::from(self.geo.ssd_slots - self.reserve_target());
        let pinned: u64 = pinned_ranges(&new, Tier::Ssd, self.geo.logical_extents())
            .iter()
            .map(|r| r.end - r.start)
            .sum();
        if pinned > room {
            return Err(VolumeError::Pin(format!(
                "{pinned} extents would be pinned to the SSD, which has room for {room} outside the reserve"
            )));
        }
        let json = serde_json::to_vec(&new).map_err(|e| VolumeError::Corrupt(e.to_string()))?;
        self.store.put(PINS_KEY, &json)?;
        self.mark_meta_dirty();
        *pins = new;
        Ok(())
    }

    /// The pin in force for an extent.
    pub(crate) fn pin_of(&self, extent: u64) -> Option<Tier> {
        pin_in(&self.pins.read(), extent)
    }

    /// All pin entries, later overriding earlier.
    pub(crate) fn pins(&self) -> Vec<Pin> {
        self.pins.read().clone()
    }
}

/// The extents `pins` put on `tier`, as disjoint ranges in order (later
/// pins overriding earlier), within a volume of `extents`: the pins' ends
/// cut the volume into pieces each of which one pin (or none) decides, so
/// this costs the pins, not the volume's size.
pub fn pinned_ranges(pins: &[Pin], tier: Tier, extents: u64) -> Vec<std::ops::Range<u64>> {
    let mut cuts: Vec<u64> = pins.iter().flat_map(|p| [p.start, p.end]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .filter(|w| pin_in(pins, w[0]) == Some(tier))
        .map(|w| w[0]..w[1].min(extents))
        .filter(|r| !r.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_count_follows_overrides() {
        let pin = |start, end, tier| Pin { start, end, tier };
        let pins = [
            pin(0, 100, Some(Tier::Ssd)),
            pin(40, 60, None),
            pin(50, 55, Some(Tier::Hdd)),
            pin(90, 120, Some(Tier::Ssd)),
        ];
        let by_scan = (0..200)
            .filter(|e| pin_in(&pins, *e) == Some(Tier::Ssd))
            .count() as u64;
        let count = |pins: &[Pin], tier, extents| -> u64 {
            pinned_ranges(pins, tier, extents)
                .iter()
                .map(|r| r.end - r.start)
                .sum()
        };
        assert_eq!(count(&pins, Tier::Ssd, 200), by_scan);
        assert_eq!(by_scan, 40 + 60);
        assert_eq!(count(&pins, Tier::Hdd, 200), 5);
        assert_eq!(count(&pins, Tier::Ssd, 110), 90, "clipped to the volume");
        assert_eq!(count(&[], Tier::Ssd, 200), 0);
    }

    #[test]
    fn pinned_ranges_resolve_overrides() {
        let pin = |start, end, tier| Pin { start, end, tier };
        let pins = [
            pin(0, 100, Some(Tier::Ssd)),
            pin(10, 20, Some(Tier::Hdd)),
            pin(30, 40, None),
            pin(200, 300, Some(Tier::Ssd)),
        ];
        assert_eq!(
            pinned_ranges(&pins, Tier::Ssd, 250),
            vec![0..10, 20..30, 40..100, 200..250]
        );
        assert!(pinned_ranges(&[], Tier::Ssd, 10).is_empty());
    }
}
