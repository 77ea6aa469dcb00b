//! The capacity tier on another NBD server: [`RemoteDevice`] puts the
//! [`crate::nbd::client::Client`] behind the [`BlockDevice`] trait, so the
//! volume stores its HDD tier on nbdkit, qemu-nbd, rbd-nbd or another tierd
//! exactly as on a local disk. A sync covers every write acknowledged
//! before it, even across a reconnection (the client sends them again),
//! and costs nothing when nothing was written since the last one, so a
//! FLUSH of data that lives on the SSD does not wait for the remote. Every
//! read and write is timed into the device's [`LinkMeter`], so the
//! migrator knows the link's round trip and bandwidth.

use std::io;
use std::time::Instant;

use crate::device::{BlockDevice, LinkEstimate, LinkMeter};
use crate::nbd::client::{Client, ClientError, ClientOptions, Target};

/// The HDD tier on a remote NBD export.
pub struct RemoteDevice {
    client: Client,
    /// Round trip and bandwidth, measured on every read and write.
    link: LinkMeter,
}

impl RemoteDevice {
    /// Connect to the export at `uri` (`nbd://host[:port]/export`,
    /// `nbd+unix:///export?socket=PATH`, or `nbds…` for TLS) with `opts`.
    pub fn connect(uri: &str, opts: ClientOptions) -> Result<RemoteDevice, ClientError> {
        let target = Target::parse(uri)?;
        let client = Client::connect(target, opts)?;
        Ok(RemoteDevice {
            client,
            link: LinkMeter::default(),
        })
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
        let t = Instant::now();
        self.client.read_at(buf, offset)?;
        self.link.record(buf.len() as u64, t.elapsed());
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let t = Instant::now();
        self.client.write_at(buf, offset)?;
        self.link.record(buf.len() as u64, t.elapsed());
        Ok(())
    }

    fn link(&self) -> Option<LinkEstimate> {
        self.link.estimate()
    }

    fn sync(&self) -> io::Result<()> {
        self.client.flush()
    }

    fn name(&self) -> String {
        self.client.target().to_string()
    }
}
