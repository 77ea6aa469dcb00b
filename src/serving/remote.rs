//! The capacity tier on another NBD server: [`RemoteDevice`] puts the
//! [`crate::nbd::client::Client`] behind the [`BlockDevice`] trait, so the
//! volume stores its HDD tier on nbdkit, qemu-nbd, rbd-nbd or another tierd
//! exactly as on a local disk. A sync covers every write acknowledged
//! before it, even across a reconnection (the client sends them again),
//! and costs nothing when nothing was written since the last one, so a
//! FLUSH of data that lives on the SSD does not wait for the remote.

use std::io;

use crate::device::BlockDevice;
use crate::nbd::client::{Client, ClientError, ClientOptions, Target};

/// The HDD tier on a remote NBD export.
pub struct RemoteDevice {
    client: Client,
}

impl RemoteDevice {
    /// Connect to the export at `uri` (`nbd://host[:port]/export`,
    /// `nbd+unix:///export?socket=PATH`, or `nbds…` for TLS) with `opts`.
    pub fn connect(uri: &str, opts: ClientOptions) -> Result<RemoteDevice, ClientError> {
        let target = Target::parse(uri)?;
        let client = Client::connect(target, opts)?;
        Ok(RemoteDevice { client })
    }

    /// Whether the connection is up now.
    pub fn connected(&self) -> bool {
        self.client.connected()
    }
}

impl BlockDevice for RemoteDevice {
    fn size(&self) -> u64 {
        self.client.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.client.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.client.write_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.client.flush()
    }

    fn name(&self) -> String {
        self.client.target().to_string()
    }
}
