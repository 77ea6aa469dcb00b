//! [`NullDevice`]: a device that stores nothing. Reads return zeros and
//! writes are dropped; the virtual-time benchmark runs the real engine over
//! it (with a timing model) so a Fusion-sized volume fits in no memory.

use std::io;

use super::{check_range, BlockDevice};

/// A data-less device of a given size.
pub struct NullDevice {
    size: u64,
}

impl NullDevice {
    /// A device of `size` bytes.
    pub fn new(size: u64) -> Self {
        NullDevice { size }
    }
}

impl BlockDevice for NullDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        buf.fill(0);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn name(&self) -> String {
        "null".to_string()
    }
}
