//! The HDD tier in a Ceph RADOS pool: [`RadosDevice`] stores the device's
//! byte range as objects of `object-size` bytes (default 1 MiB, the
//! default extent size: one object per extent, the superblock area being
//! object 0), named `PREFIX.%016x` by index. An object never written reads
//! as zeros, and a short one is zero beyond its end, so nothing is written
//! to "format" the range. A write returns once RADOS has it durable on the
//! pool's acting OSDs, so a sync has nothing left to do. Requests to an
//! unreachable cluster fail after the configured timeout (librados's
//! operation timeouts), never hang. Each read and write is timed into the
//! device's [`LinkMeter`].
//!
//! The address: `rados://POOL[/PREFIX]?conf=PATH&size=SIZE[&user=NAME]
//! [&object-size=SIZE]`; librados is loaded at run time ([`super::librados`]).

use std::io;
use std::time::{Duration, Instant};

use super::librados::Pool;
use super::{BlockDevice, LinkEstimate, LinkMeter};
use crate::units::ByteSize;

/// Where a RADOS tier lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadosTarget {
    /// The pool.
    pub pool: String,
    /// Object names start with this (default `tierd`).
    pub prefix: String,
    /// The Ceph configuration file (monitors, keyring).
    pub conf: String,
    /// The Ceph user (default `admin`, i.e. `client.admin`).
    pub user: String,
    /// The device's size in bytes.
    pub size: u64,
    /// Bytes per object (default 1 MiB).
    pub object_size: u64,
}

/// Whether `s` names a RADOS tier.
pub fn is_rados_uri(s: &str) -> bool {
    s.starts_with("rados://")
}

impl RadosTarget {
    /// Parse `rados://POOL[/PREFIX]?conf=PATH&size=SIZE[&user=NAME][&object-size=SIZE]`.
    pub fn parse(uri: &str) -> Result<RadosTarget, String> {
        let bad = |why: &str| {
            format!(
                "{uri:?} is not a RADOS address (rados://POOL[/PREFIX]?conf=PATH&size=SIZE): {why}"
            )
        };
        let rest = uri
            .strip_prefix("rados://")
            .ok_or_else(|| bad("no rados:// scheme"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (pool, prefix) = match path.split_once('/') {
            Some((p, x)) if !x.is_empty() => (p, x),
            Some((p, _)) => (p, "tierd"),
            None => (path, "tierd"),
        };
        if pool.is_empty() {
            return Err(bad("no pool"));
        }
        let mut t = RadosTarget {
            pool: pool.to_string(),
            prefix: prefix.to_string(),
            conf: String::new(),
            user: "admin".into(),
            size: 0,
            object_size: 1 << 20,
        };
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(&format!("{kv:?} has no value")))?;
            let size = || {
                ByteSize::parse(v)
                    .map(|b| b.0)
                    .map_err(|e| bad(&format!("{k}: {e}")))
            };
            match k {
                "conf" => t.conf = v.to_string(),
                "user" => t.user = v.to_string(),
                "size" => t.size = size()?,
                "object-size" => t.object_size = size()?,
                _ => {
                    return Err(bad(&format!(
                        "unknown parameter {k:?} (conf, size, user, object-size)"
                    )))
                }
            }
        }
        if t.conf.is_empty() {
            return Err(bad("conf=PATH (the Ceph configuration file) is required"));
        }
        if t.size == 0 {
            return Err(bad("size=SIZE (the tier's size, e.g. 1TiB) is required"));
        }
        if !t.object_size.is_power_of_two() || !(4096..=(64 << 20)).contains(&t.object_size) {
            return Err(bad("object-size must be a power of two from 4KiB to 64MiB"));
        }
        Ok(t)
    }

    fn name(&self) -> String {
        format!("rados://{}/{}", self.pool, self.prefix)
    }
}

/// The HDD tier as objects in a RADOS pool.
pub struct RadosDevice {
    pool: Pool,
    target: RadosTarget,
    link: LinkMeter,
}

impl RadosDevice {
    /// Connect to the cluster of `uri` and open its pool; requests that
    /// the cluster cannot answer within `timeout` fail.
    pub fn open(uri: &str, timeout: Duration) -> io::Result<RadosDevice> {
        let target =
            RadosTarget::parse(uri).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let secs = timeout.as_secs().max(1).to_string();
        let options = [
            ("rados_osd_op_timeout", secs.clone()),
            ("rados_mon_op_timeout", secs.clone()),
            ("client_mount_timeout", secs),
        ];
        let pool = Pool::connect(&target.conf, &target.user, &options, &target.pool)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", target.name())))?;
        Ok(RadosDevice {
            pool,
            target,
            link: LinkMeter::default(),
        })
    }

    /// `[offset, offset+len)` cut at object boundaries:
    /// (object name, offset in it, offset in the buffer, length).
    fn pieces(&self, offset: u64, len: usize) -> Vec<(String, u64, usize, usize)> {
        let os = self.target.object_size;
        let mut out = Vec::new();
        let mut at = offset;
        let end = offset + len as u64;
        while at < end {
            let index = at / os;
            let within = at % os;
            let n = (os - within).min(end - at);
            out.push((
                format!("{}.{index:016x}", self.target.prefix),
                within,
                (at - offset) as usize,
                n as usize,
            ));
            at += n;
        }
        out
    }
}

impl BlockDevice for RadosDevice {
    fn size(&self) -> u64 {
        self.target.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        super::check_range(self.target.size, offset, buf.len())?;
        let t = Instant::now();
        for (oid, within, at, n) in self.pieces(offset, buf.len()) {
            let part = &mut buf[at..at + n];
            let got = self.pool.read(&oid, part, within)?.unwrap_or(0);
            // Never written, or written only up to here: zeros.
            part[got.min(n)..].fill(0);
        }
        self.link.record(buf.len() as u64, t.elapsed());
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        super::check_range(self.target.size, offset, buf.len())?;
        let t = Instant::now();
        for (oid, within, at, n) in self.pieces(offset, buf.len()) {
            self.pool.write(&oid, &buf[at..at + n], within)?;
        }
        self.link.record(buf.len() as u64, t.elapsed());
        Ok(())
    }

    fn link(&self) -> Option<LinkEstimate> {
        self.link.estimate()
    }

    fn sync(&self) -> io::Result<()> {
        // RADOS acknowledges a write once it is durable.
        Ok(())
    }

    fn name(&self) -> String {
        self.target.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let t = RadosTarget::parse("rados://tierd?conf=/c/ceph.conf&size=8GiB").expect("parses");
        assert_eq!(
            t,
            RadosTarget {
                pool: "tierd".into(),
                prefix: "tierd".into(),
                conf: "/c/ceph.conf".into(),
                user: "admin".into(),
                size: 8 << 30,
                object_size: 1 << 20,
            }
        );
        let t = RadosTarget::parse("rados://p/vol7?conf=c&size=1TiB&user=tier&object-size=4MiB")
            .expect("parses");
        assert_eq!(
            (t.prefix.as_str(), t.user.as_str(), t.object_size),
            ("vol7", "tier", 4 << 20)
        );
        for (bad, why) in [
            ("rados://?conf=c&size=1GiB", "no pool"),
            ("rados://p?size=1GiB", "conf=PATH"),
            ("rados://p?conf=c", "size=SIZE"),
            (
                "rados://p?conf=c&size=1GiB&object-size=3000",
                "power of two",
            ),
            ("rados://p?conf=c&size=1GiB&colour=red", "unknown parameter"),
        ] {
            let e = RadosTarget::parse(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(is_rados_uri("rados://p") && !is_rados_uri("/dev/sdb"));
    }
}
