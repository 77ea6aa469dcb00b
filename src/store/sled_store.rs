//! [`SledStore`]: the metadata store on sled, in a directory of its own.

use std::path::Path;

use super::groups::{decode_group, encode_group, group_key, read_key, set_entry, GROUP};
use super::{MetaStore, StoreResult};

/// The tree of extent groups.
const GROUPS_TREE: &str = "extent-groups";
/// The tree of one record per extent, before extents were grouped.
const LEGACY_TREE: &str = "extents";

/// A sled database with a tree for volume keys and one for extent records,
/// kept [`GROUP`] extents to a sled record (`groups.rs` says why and how).
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
    groups: sled::Tree,
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
        let groups = db.open_tree(GROUPS_TREE)?;
        // sled writes its configuration and creates its log without syncing
        // either, or the directory naming them.
        let conf = dir.join("conf");
        if conf.exists() {
            std::fs::File::open(&conf)?.sync_all()?;
        }
        let log = std::fs::File::open(dir.join("db"))?;
        log.sync_all()?;
        std::fs::File::open(dir)?.sync_all()?;
        let store = SledStore { db, groups, log };
        store.adopt_legacy()?;
        Ok(store)
    }

    /// The tree of one record per extent, if this store has one (opening a
    /// tree by name would create it).
    fn legacy(&self) -> StoreResult<Option<sled::Tree>> {
        let has = self
            .db
            .tree_names()
            .iter()
            .any(|n| n.as_ref() == LEGACY_TREE.as_bytes());
        Ok(if has {
            Some(self.db.open_tree(LEGACY_TREE)?)
        } else {
            None
        })
    }

    /// Move the records of a store written before extents were grouped
    /// (one sled record per extent, in the `extents` tree) into groups.
    ///
    /// Crash-safe by order: the groups are written and made durable
    /// before the old tree is emptied, and a store reopened in between
    /// adopts the same records again (nothing else writes before this
    /// returns).
    fn adopt_legacy(&self) -> StoreResult<()> {
        let Some(legacy) = self.legacy()? else {
            return Ok(());
        };
        if legacy.is_empty() {
            return Ok(());
        }
        let mut moved = 0u64;
        for item in legacy.iter() {
            let (k, v) = item?;
            self.put_extent(read_key(&k)?, &v)?;
            moved += 1;
        }
        self.flush()?;
        legacy.clear()?;
        self.flush()?;
        tracing::info!(records = moved, "metadata store: extent records grouped");
        Ok(())
    }

    /// Replace (`Some`) or remove (`None`) one extent's entry in its
    /// group, retrying when another thread changed the group meanwhile.
    fn splice(&self, index: u64, record: Option<&[u8]>) -> StoreResult<()> {
        let key = group_key(index);
        let mut old = self.groups.get(key)?;
        loop {
            let mut entries = match &old {
                Some(v) => decode_group(index / GROUP, v)?,
                None => Vec::new(),
            };
            set_entry(&mut entries, index, record);
            let new = if entries.is_empty() {
                None
            } else {
                Some(encode_group(&entries)?)
            };
            match self.groups.compare_and_swap(key, old.as_ref(), new)? {
                Ok(()) => return Ok(()),
                Err(e) => old = e.current,
            }
        }
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
        self.each_extent(&mut |index, record| {
            out.push((index, record.to_vec()));
            true
        })?;
        Ok(out)
    }

    fn each_extent(&self, f: &mut dyn FnMut(u64, &[u8]) -> bool) -> StoreResult<()> {
        for item in self.groups.iter() {
            let (k, v) = item?;
            for (index, record) in decode_group(read_key(&k)?, &v)? {
                if !f(index, &record) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn put_extent(&self, index: u64, record: &[u8]) -> StoreResult<()> {
        self.splice(index, Some(record))
    }

    fn remove_extent(&self, index: u64) -> StoreResult<()> {
        self.splice(index, None)
    }

    fn flush(&self) -> StoreResult<()> {
        self.db.flush()?;
        // sled's flush ends with sync_file_range only: see the type's docs.
        self.log.sync_data()?;
        Ok(())
    }

    fn clear(&self) -> StoreResult<()> {
        self.groups.clear()?;
        if let Some(legacy) = self.legacy()? {
            legacy.clear()?;
        }
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

    #[test]
    fn a_store_of_one_record_per_extent_is_grouped_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            // The layout before groups: the `extents` tree, key = index.
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            let t = db.open_tree(LEGACY_TREE).unwrap();
            for i in [3u64, 17, 18, 4000] {
                t.insert(i.to_be_bytes(), format!("r{i}").as_bytes())
                    .unwrap();
            }
            db.insert("k", "v").unwrap();
            db.flush().unwrap();
        }
        let want: Vec<(u64, Vec<u8>)> = [3u64, 17, 18, 4000]
            .iter()
            .map(|i| (*i, format!("r{i}").into_bytes()))
            .collect();
        {
            let s = SledStore::open(dir.path()).unwrap();
            assert_eq!(s.load_extents().unwrap(), want);
            assert_eq!(s.get("k").unwrap().as_deref(), Some(&b"v"[..]));
            assert!(s.db.open_tree(LEGACY_TREE).unwrap().is_empty());
            s.remove_extent(17).unwrap();
            s.flush().unwrap();
        }
        // Reopened: grouped once, and the removal holds.
        let s = SledStore::open(dir.path()).unwrap();
        let mut left = want;
        left.remove(1);
        assert_eq!(s.load_extents().unwrap(), left);
    }

    #[test]
    fn grouped_records_follow_a_model_across_reopens() {
        // Random puts and removes over a few groups, reopened (after a
        // flush) now and then: the store reads back what the model holds.
        let dir = tempfile::tempdir().unwrap();
        let mut model = std::collections::BTreeMap::<u64, Vec<u8>>::new();
        let mut s = SledStore::open(dir.path()).unwrap();
        let mut seed = 0x5eed_u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for step in 0..3000u64 {
            let index = next() % (GROUP * 5);
            if next() % 4 == 0 {
                s.remove_extent(index).unwrap();
                model.remove(&index);
            } else {
                let len = (next() % 80) as usize;
                let rec = vec![(step % 251) as u8; len];
                s.put_extent(index, &rec).unwrap();
                model.insert(index, rec);
            }
            if step % 500 == 499 {
                s.flush().unwrap();
                drop(s);
                s = SledStore::open(dir.path()).unwrap();
            }
            if step % 100 == 0 {
                let want: Vec<(u64, Vec<u8>)> =
                    model.iter().map(|(k, v)| (*k, v.clone())).collect();
                assert_eq!(s.load_extents().unwrap(), want, "step {step}");
                // Streamed, the same records; stopped, a prefix of them.
                let mut seen = Vec::new();
                s.each_extent(&mut |i, r| {
                    seen.push((i, r.to_vec()));
                    true
                })
                .unwrap();
                assert_eq!(seen, want, "streamed at step {step}");
                let mut first = Vec::new();
                s.each_extent(&mut |i, r| {
                    first.push((i, r.to_vec()));
                    first.len() < 3
                })
                .unwrap();
                assert_eq!(first, want[..want.len().min(3)], "stopped at step {step}");
            }
        }
    }

    #[test]
    fn threads_writing_extents_of_one_group_lose_none() {
        let dir = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(SledStore::open(dir.path()).unwrap());
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for round in 0..200u64 {
                        for i in (t..GROUP * 2).step_by(4) {
                            s.put_extent(i, &round.to_le_bytes()).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let all = s.load_extents().unwrap();
        assert_eq!(all.len() as u64, GROUP * 2);
        assert!(all.iter().all(|(_, r)| r == &199u64.to_le_bytes()));
        for i in 0..GROUP * 2 {
            s.remove_extent(i).unwrap();
        }
        assert!(s.load_extents().unwrap().is_empty());
        assert!(s.groups.is_empty(), "an empty group is not kept");
    }
}
