//! [`SledStore`]: the metadata store on sled, in a directory of its own.

use std::path::Path;

use super::{MetaStore, StoreResult};

/// A sled database with a tree for volume keys and one for extents.
///
/// sled's periodic background flush is switched off: metadata reaches disk
/// when tierd flushes it, after the data it describes.
///
/// sled 0.34's own flush is not durable: on Linux it writes its log and
/// asks for it with `sync_file_range`, which neither commits the file's
/// growth nor flushes a drive's write cache, and it never calls `fsync`
/// (sled issues #1452, #1351). A power cut after an acknowledged NBD FLUSH
/// lost the mappings it covered (`tests/power_cut_connections.rs`: 940
/// covered blocks read back as zeros). So [`MetaStore::flush`] makes the
/// log durable itself with `fdatasync` on sled's log file after sled's
/// flush, and opening the store syncs its directory and configuration
/// file, which sled never syncs either.
pub struct SledStore {
    db: sled::Db,
    extents: sled::Tree,
    /// sled's log file, synced after each flush.
    log: std::fs::File,
}

/// The most memory sled's page cache takes by default (`meta-cache`):
/// sled's own default is 1 GiB, which a large volume's records fill. The
/// mapping lives in tierd's own map, so the store is read at open and
/// written at mapping changes; a small cache costs those writes an
/// occasional page read.
pub const DEFAULT_CACHE: u64 = 64 << 20;

impl SledStore {
    /// Open (creating if needed) the store in `dir`, with the default
    /// cache ([`DEFAULT_CACHE`]).
    pub fn open(dir: &Path) -> StoreResult<Self> {
        Self::open_with_cache(dir, DEFAULT_CACHE)
    }

    /// Open (creating if needed) the store in `dir`; sled's page cache
    /// takes at most `cache` bytes.
    pub fn open_with_cache(dir: &Path, cache: u64) -> StoreResult<Self> {
        std::fs::create_dir_all(dir)?;
        // A store just dropped in this process may hold its file lock for a
        // moment (sled lets go of it from a background thread): a reopen
        // right after a close waits up to half a second for it. Another
        // process holding the lock is refused after that.
        let mut tries = 0;
        let db = loop {
            match sled::Config::new()
                .path(dir)
                .cache_capacity(cache)
                .flush_every_ms(None)
                .open()
            {
                Err(sled::Error::Io(e))
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.to_string().contains("could not acquire lock") =>
                {
                    tries += 1;
                    if tries >= 10 {
                        return Err(sled::Error::Io(e).into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                r => break r?,
            }
        };
        let extents = db.open_tree("extents")?;
        // sled writes its configuration and creates its log without syncing
        // either, or the directory naming them.
        let conf = dir.join("conf");
        if conf.exists() {
            std::fs::File::open(&conf)?.sync_all()?;
        }
        let log = std::fs::File::open(dir.join("db"))?;
        log.sync_all()?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(SledStore { db, extents, log })
    }

    /// Whether `dir` already holds a sled database.
    pub fn exists(dir: &Path) -> bool {
        dir.join("conf").exists() || dir.join("db").exists()
    }
}

impl MetaStore for SledStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.db.get(key.as_bytes())?.map(|v| v.to_vec()))
    }

    fn put(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.db.insert(key.as_bytes(), value)?;
        Ok(())
    }

    fn load_extents(&self) -> StoreResult<Vec<(u64, Vec<u8>)>> {
        let mut out = Vec::new();
        for item in self.extents.iter() {
            let (k, v) = item?;
            let key: [u8; 8] = k.as_ref().try_into().map_err(|_| {
                super::StoreError::Backend(format!("extent key of {} bytes", k.len()))
            })?;
            out.push((u64::from_be_bytes(key), v.to_vec()));
        }
        Ok(out)
    }

    fn put_extent(&self, index: u64, record: &[u8]) -> StoreResult<()> {
        self.extents.insert(index.to_be_bytes(), record)?;
        Ok(())
    }

    fn remove_extent(&self, index: u64) -> StoreResult<()> {
        self.extents.remove(index.to_be_bytes())?;
        Ok(())
    }

    fn flush(&self) -> StoreResult<()> {
        self.db.flush()?;
        // sled's flush ends with sync_file_range only: see the type's docs.
        self.log.sync_data()?;
        Ok(())
    }

    fn clear(&self) -> StoreResult<()> {
        self.extents.clear()?;
        self.db.clear()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopen_after_flush() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = SledStore::open(dir.path()).unwrap();
            s.put("k", b"v").unwrap();
            s.put_extent(7, b"seven").unwrap();
            s.put_extent(3, b"three").unwrap();
            s.put_extent(9, b"nine").unwrap();
            s.remove_extent(9).unwrap();
            s.flush().unwrap();
        }
        assert!(SledStore::exists(dir.path()));
        let s = SledStore::open(dir.path()).unwrap();
        assert_eq!(s.get("k").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(s.get("missing").unwrap(), None);
        let ext = s.load_extents().unwrap();
        assert_eq!(ext, vec![(3, b"three".to_vec()), (7, b"seven".to_vec())]);
    }
}
