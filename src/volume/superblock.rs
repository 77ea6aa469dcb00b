//! The on-device superblock, and detection of what else a device may carry
//! (filesystems, partition tables) so that formatting never destroys data
//! by accident.
//!
//! Layout (little-endian, at device offset 0, [`SUPERBLOCK_SIZE`] bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `TIERDSB\0` |
//! | 8 | 4 | format version |
//! | 12 | 1 | role: 1 = ssd, 2 = hdd |
//! | 13 | 3 | zero |
//! | 16 | 16 | volume UUID |
//! | 32 | 8 | extent size |
//! | 40 | 8 | device size at format |
//! | 48 | 8 | data offset |
//! | 56 | 8 | slots |
//! | 64 | 8 | format time, Unix seconds |
//! | 72 | 4 | CRC-32 of bytes 0..72 |

use uuid::Uuid;

use super::geometry::Tier;

/// Superblock magic.
pub const MAGIC: &[u8; 8] = b"TIERDSB\0";
/// The on-disk format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes written for the superblock.
pub const SUPERBLOCK_SIZE: usize = 4096;
/// Bytes read from a device to recognise what it carries.
pub const PROBE_SIZE: usize = 68 * 1024;

const BODY: usize = 72;

/// The identity of one device of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// On-disk format version.
    pub version: u32,
    /// Which tier the device is.
    pub role: Tier,
    /// The volume it belongs to.
    pub volume_id: Uuid,
    /// Extent size of the volume.
    pub extent_size: u64,
    /// Device size when formatted.
    pub device_size: u64,
    /// Where extent slots begin.
    pub data_offset: u64,
    /// Number of slots on this device.
    pub slots: u64,
    /// When it was formatted (Unix seconds).
    pub created: u64,
}

/// Why bytes do not decode as a superblock.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SuperblockError {
    /// No tierd magic.
    #[error("no tierd superblock")]
    NoMagic,
    /// A tierd superblock of a version this build does not know.
    #[error("tierd superblock of unknown format version {0} (this build reads version {FORMAT_VERSION})")]
    UnknownVersion(u32),
    /// Checksum mismatch.
    #[error("tierd superblock checksum mismatch: the superblock is damaged")]
    Checksum,
    /// A field has an impossible value.
    #[error("tierd superblock field {0} is invalid")]
    Field(&'static str),
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

impl Superblock {
    /// Encode into a [`SUPERBLOCK_SIZE`] buffer.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SUPERBLOCK_SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12] = match self.role {
            Tier::Ssd => 1,
            Tier::Hdd => 2,
        };
        b[16..32].copy_from_slice(self.volume_id.as_bytes());
        b[32..40].copy_from_slice(&self.extent_size.to_le_bytes());
        b[40..48].copy_from_slice(&self.device_size.to_le_bytes());
        b[48..56].copy_from_slice(&self.data_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.slots.to_le_bytes());
        b[64..72].copy_from_slice(&self.created.to_le_bytes());
        let crc = crc32fast::hash(&b[..BODY]);
        b[BODY..BODY + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode from the first bytes of a device (at least 76 bytes).
    pub fn decode(b: &[u8]) -> Result<Self, SuperblockError> {
        if b.len() < BODY + 4 || &b[0..8] != MAGIC {
            return Err(SuperblockError::NoMagic);
        }
        let version = u32_at(b, 8);
        if version != FORMAT_VERSION {
            return Err(SuperblockError::UnknownVersion(version));
        }
        if crc32fast::hash(&b[..BODY]) != u32_at(b, BODY) {
            return Err(SuperblockError::Checksum);
        }
        let role = match b[12] {
            1 => Tier::Ssd,
            2 => Tier::Hdd,
            _ => return Err(SuperblockError::Field("role")),
        };
        let mut id = [0u8; 16];
        id.copy_from_slice(&b[16..32]);
        Ok(Superblock {
            version,
            role,
            volume_id: Uuid::from_bytes(id),
            extent_size: u64_at(b, 32),
            device_size: u64_at(b, 40),
            data_offset: u64_at(b, 48),
            slots: u64_at(b, 56),
            created: u64_at(b, 64),
        })
    }
}

/// What the first [`PROBE_SIZE`] bytes of a device say it already holds, if
/// anything worth refusing to overwrite.
pub fn detect_content(b: &[u8]) -> Option<String> {
    let at = |off: usize, magic: &[u8]| {
        b.len() >= off + magic.len() && &b[off..off + magic.len()] == magic
    };
    if at(0, MAGIC) {
        return Some(match Superblock::decode(b) {
            Ok(sb) => format!(
                "a tierd superblock ({} of volume {})",
                sb.role, sb.volume_id
            ),
            Err(e) => format!("a tierd superblock ({e})"),
        });
    }
    let known: [(usize, &[u8], &str); 9] = [
        (512, b"EFI PART", "a GPT partition table"),
        (1080, &[0x53, 0xEF], "an ext2/ext3/ext4 filesystem"),
        (0, b"XFSB", "an XFS filesystem"),
        (65600, b"_BHRfS_M", "a btrfs filesystem"),
        (4086, b"SWAPSPACE2", "a swap area"),
        (4086, b"SWAP-SPACE", "a swap area"),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (512, b"LABELONE", "an LVM physical volume"),
        (3, b"NTFS    ", "an NTFS filesystem"),
    ];
    for (off, magic, what) in known {
        if at(off, magic) {
            return Some(what.to_string());
        }
    }
    if at(510, &[0x55, 0xAA]) {
        return Some("a partition table or boot sector (MBR signature)".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            role: Tier::Hdd,
            volume_id: Uuid::new_v4(),
            extent_size: 1 << 20,
            device_size: 1 << 30,
            data_offset: 1 << 20,
            slots: 1023,
            created: 1_700_000_000,
        }
    }

    #[test]
    fn roundtrip() {
        let sb = sample();
        let bytes = sb.encode();
        assert_eq!(bytes.len(), SUPERBLOCK_SIZE);
        assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    }

    #[test]
    fn damage_is_detected() {
        let mut bytes = sample().encode();
        bytes[40] ^= 1;
        assert_eq!(Superblock::decode(&bytes), Err(SuperblockError::Checksum));
        let mut bytes = sample().encode();
        bytes[8] = 9;
        assert_eq!(
            Superblock::decode(&bytes),
            Err(SuperblockError::UnknownVersion(9))
        );
        assert_eq!(
            Superblock::decode(&[0u8; 4096]),
            Err(SuperblockError::NoMagic)
        );
        assert_eq!(
            Superblock::decode(b"TIERDSB"),
            Err(SuperblockError::NoMagic)
        );
    }

    #[test]
    fn detects_foreign_content() {
        let mut b = vec![0u8; PROBE_SIZE];
        assert_eq!(detect_content(&b), None);
        b[1080] = 0x53;
        b[1081] = 0xEF;
        assert!(detect_content(&b).unwrap().contains("ext"));
        let mut b = vec![0u8; PROBE_SIZE];
        b[510] = 0x55;
        b[511] = 0xAA;
        assert!(detect_content(&b).unwrap().contains("partition"));
        let mut b = vec![0u8; PROBE_SIZE];
        b[512..520].copy_from_slice(b"EFI PART");
        assert!(detect_content(&b).unwrap().contains("GPT"));
        let b = sample().encode();
        assert!(detect_content(&b)
            .unwrap()
            .contains("tierd superblock (hdd"));
    }
}
