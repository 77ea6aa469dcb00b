//! Volume geometry: extent size, slots per tier, the SSD reserve and the
//! logical capacity they give.
//!
//! Each device holds a superblock area of [`DATA_OFFSET`] bytes, then fixed
//! slots of one extent each. The logical volume has
//! `ssd_slots + hdd_slots - reserve_extents` extents: the reserve is SSD space
//! that is never promised to the logical address space, so demotion can
//! always bring the SSD back to `reserve_extents` free slots.

use serde::{Deserialize, Serialize};

/// Granularity of written-block tracking and of heat inside an extent.
pub const BLOCK_SIZE: u64 = 4096;
/// Bytes at the start of each device kept for the superblock.
pub const DATA_OFFSET: u64 = 1 << 20;
/// Smallest allowed extent size.
pub const MIN_EXTENT_SIZE: u64 = 64 << 10;

/// The smallest device (or image file) `tierd format` takes for either
/// tier, and the smallest `ssd-size` and `hdd-size` the configuration
/// accepts: room for the superblock and a few extents.
pub const MIN_DEVICE_SIZE: u64 = 8 << 20;
/// Largest allowed extent size.
pub const MAX_EXTENT_SIZE: u64 = 64 << 20;
/// Default extent size.
pub const DEFAULT_EXTENT_SIZE: u64 = 1 << 20;
/// Default reserve before the 25 % cap: Fusion Drive keeps about 4 GB free.
pub const DEFAULT_RESERVE: u64 = 4 << 30;

/// One of the two tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// The fast, small device.
    Ssd,
    /// The slow, big device.
    Hdd,
}

impl Tier {
    /// Both tiers, fastest first.
    pub const ALL: [Tier; 2] = [Tier::Ssd, Tier::Hdd];

    /// Index for per-tier arrays.
    pub fn index(self) -> usize {
        match self {
            Tier::Ssd => 0,
            Tier::Hdd => 1,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Ssd => "ssd",
            Tier::Hdd => "hdd",
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The fixed shape of a volume, decided at format time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Bytes per extent (a power of two).
    pub extent_size: u64,
    /// Extent slots on the SSD.
    pub ssd_slots: u32,
    /// Extent slots on the HDD.
    pub hdd_slots: u32,
    /// SSD slots held back from the logical capacity.
    pub reserve_extents: u32,
}

/// Why a geometry cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GeometryError {
    /// Extent size out of range or not a power of two.
    #[error("extent size {0} must be a power of two from 64KiB to 64MiB")]
    ExtentSize(u64),
    /// A device is too small to hold even one extent.
    #[error("the {tier} device ({}) is too small: it needs at least {} (the superblock and one extent)", crate::units::human_bytes(*.size), crate::units::human_bytes(*.need))]
    DeviceTooSmall { tier: Tier, size: u64, need: u64 },
    /// A device holds more slots than the format can address.
    #[error("the {0} device holds more than 2^32 extents: use a larger extent size")]
    TooManySlots(Tier),
    /// The reserve does not fit the SSD.
    #[error("reserve of {reserve} bytes does not fit the SSD's {ssd} bytes of extent slots")]
    Reserve { reserve: u64, ssd: u64 },
}

impl Geometry {
    /// The default reserve for an SSD of `ssd_size` bytes: 4 GiB, capped at
    /// 25 % of the SSD.
    pub fn default_reserve(ssd_size: u64) -> u64 {
        DEFAULT_RESERVE.min(ssd_size / 4)
    }

    /// The geometry for two devices of the given sizes. `reserve` defaults to
    /// [`Geometry::default_reserve`]; it is rounded up to whole extents.
    pub fn compute(
        ssd_size: u64,
        hdd_size: u64,
        extent_size: u64,
        reserve: Option<u64>,
    ) -> Result<Self, GeometryError> {
        if !extent_size.is_power_of_two()
            || !(MIN_EXTENT_SIZE..=MAX_EXTENT_SIZE).contains(&extent_size)
        {
            return Err(GeometryError::ExtentSize(extent_size));
        }
        let slots = |tier: Tier, size: u64| -> Result<u32, GeometryError> {
            let n = size.saturating_sub(DATA_OFFSET) / extent_size;
            if n == 0 {
                return Err(GeometryError::DeviceTooSmall {
                    tier,
                    size,
                    need: DATA_OFFSET + extent_size,
                });
            }
            u32::try_from(n).map_err(|_| GeometryError::TooManySlots(tier))
        };
        let ssd_slots = slots(Tier::Ssd, ssd_size)?;
        let hdd_slots = slots(Tier::Hdd, hdd_size)?;
        let reserve = reserve.unwrap_or_else(|| Self::default_reserve(ssd_size));
        let reserve_extents = reserve.div_ceil(extent_size);
        if reserve_extents > u64::from(ssd_slots) {
            return Err(GeometryError::Reserve {
                reserve,
                ssd: u64::from(ssd_slots) * extent_size,
            });
        }
        Ok(Geometry {
            extent_size,
            ssd_slots,
            hdd_slots,
            reserve_extents: reserve_extents as u32,
        })
    }

    /// Number of logical extents.
    pub fn logical_extents(&self) -> u64 {
        u64::from(self.ssd_slots) + u64::from(self.hdd_slots) - u64::from(self.reserve_extents)
    }

    /// Logical capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.logical_extents() * self.extent_size
    }

    /// Slots on a tier.
    pub fn slots(&self, tier: Tier) -> u32 {
        match tier {
            Tier::Ssd => self.ssd_slots,
            Tier::Hdd => self.hdd_slots,
        }
    }

    /// Device byte offset of a slot.
    pub fn slot_offset(&self, slot: u32) -> u64 {
        DATA_OFFSET + u64::from(slot) * self.extent_size
    }

    /// Tracked blocks per extent.
    pub fn blocks_per_extent(&self) -> u32 {
        (self.extent_size / BLOCK_SIZE) as u32
    }

    /// Bytes a device of this tier must have.
    pub fn min_device_size(&self, tier: Tier) -> u64 {
        DATA_OFFSET + u64::from(self.slots(tier)) * self.extent_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn default_image_geometry() {
        let g = Geometry::compute(4 * GIB, 32 * GIB, MIB, None).unwrap();
        assert_eq!(g.ssd_slots, 4095);
        assert_eq!(g.hdd_slots, 32767);
        // 25 % of a 4 GiB SSD is below the 4 GiB default.
        assert_eq!(g.reserve_extents, 1024);
        assert_eq!(g.capacity(), (4095 + 32767 - 1024) * MIB);
        assert_eq!(g.slot_offset(2), MIB + 2 * MIB);
        assert_eq!(g.blocks_per_extent(), 256);
    }

    #[test]
    fn reserve_is_4gib_on_big_ssds_and_rounds_up() {
        let g = Geometry::compute(128 * GIB, 1024 * GIB, MIB, None).unwrap();
        assert_eq!(g.reserve_extents, 4096);
        let g = Geometry::compute(GIB, GIB, MIB, Some(MIB + 1)).unwrap();
        assert_eq!(g.reserve_extents, 2);
        let g = Geometry::compute(GIB, GIB, MIB, Some(0)).unwrap();
        assert_eq!(g.logical_extents(), 2 * 1023);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            Geometry::compute(GIB, GIB, 3 * MIB, None),
            Err(GeometryError::ExtentSize(3 * MIB))
        );
        assert_eq!(
            Geometry::compute(GIB, GIB, 32 << 10, None),
            Err(GeometryError::ExtentSize(32 << 10))
        );
        assert!(matches!(
            Geometry::compute(MIB, GIB, MIB, None),
            Err(GeometryError::DeviceTooSmall {
                tier: Tier::Ssd,
                ..
            })
        ));
        assert!(matches!(
            Geometry::compute(GIB, GIB, MIB, Some(2 * GIB)),
            Err(GeometryError::Reserve { .. })
        ));
    }
}
