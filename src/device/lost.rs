//! [`LostDevice`]: the SSD of a volume opened without it (`tierd serve
//! --ssd-lost`). Every read and write fails with an I/O error naming why;
//! a sync succeeds (no write ever reached it, so there is nothing to make
//! durable, and the volume's flushes must go on for the HDD's sake). It
//! has no size of its own: the volume's geometry says what the SSD was.

use std::io;

use super::BlockDevice;

/// A device that is gone.
pub struct LostDevice {
    name: String,
}

impl LostDevice {
    /// The lost device once named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        LostDevice { name: name.into() }
    }

    fn gone(&self) -> io::Error {
        io::Error::other(format!(
            "{} is lost (serving with --ssd-lost): only data with an HDD copy can be read",
            self.name
        ))
    }
}

impl BlockDevice for LostDevice {
    fn size(&self) -> u64 {
        // Any offset the geometry asks for is "in range": each fails anyway.
        u64::MAX >> 2
    }

    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> io::Result<()> {
        Err(self.gone())
    }

    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        Err(self.gone())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn name(&self) -> String {
        self.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_and_write_fails_and_a_sync_has_nothing_to_do() {
        let d = LostDevice::new("/dev/ssd");
        let mut b = [0u8; 8];
        let e = d.read_at(&mut b, 0).unwrap_err();
        assert!(e.to_string().contains("/dev/ssd is lost"), "{e}");
        assert!(d.write_at(&b, 4096).is_err());
        assert!(d.sync().is_ok());
        assert_eq!(d.name(), "/dev/ssd");
    }
}
