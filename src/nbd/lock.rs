//! [`lock`]: the serving threads' locks survive a panic in the export.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A lock that a panicking thread left behind is still usable: every guarded
/// state is consistent between statements.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
