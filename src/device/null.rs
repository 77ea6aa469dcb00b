//! [`NullDevice`]: a device that stores almost nothing. Its first MiB (the
//! superblock area) is kept in memory; beyond it reads return zeros and
//! writes are dropped. The virtual-time benchmark runs the real engine over
//! it (with a timing model) so a Fusion-sized volume needs no disk.

use std::io;

use parking_lot::RwLock;

use super::{check_range, BlockDevice};

/// Bytes at the start that are really stored.
const HEAD: u64 = 1 << 20;

/// A data-less device of a given size.
pub struct NullDevice {
    size: u64,
    head: RwLock<Vec<u8>>,
}

impl NullDevice {
    /// A device of `size` bytes.
    pub fn new(size: u64) -> Self {
        NullDevice {
            size,
            head: RwLock::new(vec![0; HEAD.min(size) as usize]),
        }
    }
}

impl BlockDevice for NullDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        buf.fill(0);
        let head = self.head.read();
        if offset < head.len() as u64 {
            let n = (head.len() - offset as usize).min(buf.len());
            buf[..n].copy_from_slice(&head[offset as usize..offset as usize + n]);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        let mut head = self.head.write();
        if offset < head.len() as u64 {
            let n = (head.len() - offset as usize).min(buf.len());
            head[offset as usize..offset as usize + n].copy_from_slice(&buf[..n]);
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn name(&self) -> String {
        "null".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_head_and_drops_the_rest() {
        let d = NullDevice::new(4 << 20);
        d.write_at(b"superblock", 0).unwrap();
        d.write_at(b"data", 2 << 20).unwrap();
        let mut b = [0u8; 10];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"superblock");
        d.read_at(&mut b, 2 << 20).unwrap();
        assert_eq!(b, [0u8; 10]);
        assert!(d.read_at(&mut b, 4 << 20).is_err());
    }
}
