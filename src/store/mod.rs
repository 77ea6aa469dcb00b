//! The metadata store: our own small [`MetaStore`] trait over an embedded
//! key-value store, with a sled implementation ([`SledStore`]) and an
//! in-memory one ([`MemStore`]).
//!
//! Two namespaces: volume keys (format version, geometry, volume id) and the
//! extent map (logical extent index → encoded extent record). The store is
//! versioned by the [`FORMAT_VERSION_KEY`] key.

mod groups;
mod mem;
mod sled_store;

pub use mem::MemStore;
pub use sled_store::{SledStore, DEFAULT_CACHE};

/// Key under which the metadata format version is stored.
pub const FORMAT_VERSION_KEY: &str = "format-version";

/// Errors of the metadata store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded database failed.
    #[error("metadata store error: {0}")]
    Backend(String),
    /// An I/O error around the store (directory creation and the like).
    #[error("metadata store I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Io(io) => StoreError::Io(io),
            other => StoreError::Backend(other.to_string()),
        }
    }
}

/// Result of store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// What the volume needs from a metadata store.
///
/// Writes become durable only at [`MetaStore::flush`]; a crash may lose any
/// write made after the last flush, but never one made before it.
pub trait MetaStore: Send + Sync + 'static {
    /// Read a volume key.
    fn get(&self, key: &str) -> StoreResult<Option<Vec<u8>>>;
    /// Write a volume key.
    fn put(&self, key: &str, value: &[u8]) -> StoreResult<()>;
    /// Every extent record, in index order.
    fn load_extents(&self) -> StoreResult<Vec<(u64, Vec<u8>)>>;
    /// Every extent record, in index order, handed to `f` one by one
    /// until it returns false: a volume's open walks millions of records
    /// without holding them all at once (a store that can stream them
    /// says so by overriding this; the default loads them first).
    fn each_extent(&self, f: &mut dyn FnMut(u64, &[u8]) -> bool) -> StoreResult<()> {
        for (index, record) in self.load_extents()? {
            if !f(index, &record) {
                break;
            }
        }
        Ok(())
    }
    /// Write the record of one extent.
    fn put_extent(&self, index: u64, record: &[u8]) -> StoreResult<()>;
    /// Forget one extent (it becomes unmapped).
    fn remove_extent(&self, index: u64) -> StoreResult<()>;
    /// Make every write so far durable.
    fn flush(&self) -> StoreResult<()>;
    /// Remove every key and extent record (formatting over an old volume).
    fn clear(&self) -> StoreResult<()>;
}
