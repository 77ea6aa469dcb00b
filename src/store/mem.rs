//! [`MemStore`]: an in-memory metadata store for tests. Like
//! [`crate::device::MemDevice`] it can simulate a power cut: everything
//! written since the last flush is lost.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use super::{MetaStore, StoreResult};

/// Volume keys and extent records in memory.
#[derive(Default)]
pub struct MemStore {
    keys: Mutex<BTreeMap<String, Vec<u8>>>,
    extents: Mutex<BTreeMap<u64, Vec<u8>>>,
    /// State as of the last flush.
    durable: Mutex<Durable>,
    /// Flushes so far.
    flushes: std::sync::atomic::AtomicU64,
}

type Durable = (BTreeMap<String, Vec<u8>>, BTreeMap<u64, Vec<u8>>);

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Lose everything written since the last flush.
    pub fn power_cut(&self) {
        let d = self.durable.lock();
        *self.keys.lock() = d.0.clone();
        *self.extents.lock() = d.1.clone();
    }

    /// Flushes so far.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Relaxed)
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
        let mut d = self.durable.lock();
        d.0 = self.keys.lock().clone();
        d.1 = self.extents.lock().clone();
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn clear(&self) -> StoreResult<()> {
        self.keys.lock().clear();
        self.extents.lock().clear();
        Ok(())
    }
}
