//! [`MemStore`]: an in-memory metadata store for tests.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::{MetaStore, StoreResult};

/// Volume keys and extent records in memory.
#[derive(Default)]
pub struct MemStore {
    keys: Mutex<BTreeMap<String, Vec<u8>>>,
    extents: Mutex<BTreeMap<u64, Vec<u8>>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl MetaStore for MemStore {
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.keys.lock().get(key).cloned())
    }

    fn put(&self, key: &str, value: &[u8]) -> StoreResult<()> {
        self.keys.lock().insert(key.to_string(), value.to_vec());
        Ok(())
    }

    fn load_extents(&self) -> StoreResult<Vec<(u64, Vec<u8>)>> {
        Ok(self
            .extents
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect())
    }

    fn put_extent(&self, index: u64, record: &[u8]) -> StoreResult<()> {
        self.extents.lock().insert(index, record.to_vec());
        Ok(())
    }

    fn remove_extent(&self, index: u64) -> StoreResult<()> {
        self.extents.lock().remove(&index);
        Ok(())
    }

    fn flush(&self) -> StoreResult<()> {
        Ok(())
    }

    fn clear(&self) -> StoreResult<()> {
        self.keys.lock().clear();
        self.extents.lock().clear();
        Ok(())
    }
}
