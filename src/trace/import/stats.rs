//! [`ImportStats`]: what an import passed over (requests skipped, by reason)
//! and how many records went back in time and were clamped.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// What an import passed over, as it goes: shared with the record stream,
/// complete once the stream has ended.
#[derive(Debug, Clone, Default)]
pub struct ImportStats(Arc<Mutex<Tally>>);

#[derive(Debug, Default)]
struct Tally {
    skipped: BTreeMap<String, u64>,
    clamped: u64,
}

impl ImportStats {
    /// Requests skipped, by reason (e.g. "SCSI opcode 35"), in reason order.
    pub fn skipped(&self) -> Vec<(String, u64)> {
        let t = self.0.lock();
        t.skipped.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Requests skipped in all.
    pub fn skipped_total(&self) -> u64 {
        self.0.lock().skipped.values().sum()
    }

    /// Records that went back in time and were given the previous time.
    pub fn clamped(&self) -> u64 {
        self.0.lock().clamped
    }

    pub(super) fn skip(&self, reason: &str) {
        let mut t = self.0.lock();
        match t.skipped.get_mut(reason) {
            Some(n) => *n += 1,
            None => {
                t.skipped.insert(reason.to_string(), 1);
            }
        }
    }

    pub(super) fn clamp(&self) {
        self.0.lock().clamped += 1;
    }
}
