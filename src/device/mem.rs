//! [`MemDevice`]: a device held in memory, for tests. It keeps the durable
//! image (as of the last sync) apart from the live one, so a test can cut
//! the power and lose every write not yet synced.

use std::io;

use parking_lot::{Mutex, RwLock};

use super::{check_range, BlockDevice};

/// An in-memory device; its contents are lost when dropped.
pub struct MemDevice {
    data: RwLock<Vec<u8>>,
    /// The image as of the last sync, when power cuts are simulated.
    durable: Mutex<Option<Vec<u8>>>,
}

impl MemDevice {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: u64) -> Self {
        MemDevice {
            data: RwLock::new(vec![0; size as usize]),
            durable: Mutex::new(None),
        }
    }

    /// A device that keeps a durable image for [`MemDevice::power_cut`].
    pub fn with_power_model(size: u64) -> Self {
        let d = Self::new(size);
        *d.durable.lock() = Some(vec![0; size as usize]);
        d
    }

    /// A copy of the whole live contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().clone()
    }

    /// Lose every write since the last sync (needs the power model).
    pub fn power_cut(&self) {
        if let Some(d) = self.durable.lock().as_ref() {
            self.data.write().clone_from(d);
        }
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.data.read().len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let data = self.data.read();
        check_range(data.len() as u64, offset, buf.len())?;
        let start = offset as usize;
        buf.copy_from_slice(&data[start..start + buf.len()]);
        Ok(())
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Option<io::Result<()>> {
        Some(self.read_at(buf, offset))
    }

    fn write_at_nowait(&self, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
        Some(self.write_at(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut data = self.data.write();
        check_range(data.len() as u64, offset, buf.len())?;
        let start = offset as usize;
        data[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if let Some(d) = self.durable.lock().as_mut() {
            d.clone_from(&self.data.read());
        }
        Ok(())
    }

    fn name(&self) -> String {
        "memory".to_string()
    }
}
