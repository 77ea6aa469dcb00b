//! The durability model shared by the crash tests: blocks hold data that
//! names the write it came from, and per block the model knows the last
//! flushed value and the values written since, so after a crash it can tell
//! whether a block holds something it is allowed to hold.
#![allow(dead_code)]

use std::collections::HashMap;

/// Bytes per modelled block.
pub const BLOCK: u64 = 4096;

/// Contents of a block holding write `id` (0: zeros).
pub fn block_bytes(id: u64, blk: u64, out: &mut [u8]) {
    if id == 0 {
        out.fill(0);
        return;
    }
    let word = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ blk;
    for (i, w) in out.chunks_exact_mut(8).enumerate() {
        let v = if i == 0 {
            id
        } else {
            word.wrapping_add(i as u64)
        };
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// Which write a block's contents came from, if they are exactly one.
pub fn block_id(blk: u64, got: &[u8]) -> Option<u64> {
    let mut first = [0u8; 8];
    first.copy_from_slice(&got[..8]);
    let id = u64::from_le_bytes(first);
    let mut want = vec![0u8; BLOCK as usize];
    block_bytes(id, blk, &mut want);
    (want == got).then_some(id)
}

/// What a block that matches no write of `blk` holds instead, for failure
/// messages: another block's write, the first 8 bytes of a write whose
/// tail differs (a torn or mixed block), zeros in part, or plain garbage.
pub fn explain_bytes(blk: u64, got: &[u8]) -> String {
    let mut first = [0u8; 8];
    first.copy_from_slice(&got[..8]);
    let id = u64::from_le_bytes(first);
    if got.iter().all(|&b| b == 0) {
        return "zeros".to_string();
    }
    let mut want = vec![0u8; BLOCK as usize];
    if id != 0 {
        block_bytes(id, blk, &mut want);
        let same = got
            .chunks_exact(8)
            .zip(want.chunks_exact(8))
            .filter(|(a, b)| a == b)
            .count();
        // Which block the rest of the bytes were written for: the second
        // word is word + 1 with word = id * K ^ blk.
        let mut second = [0u8; 8];
        second.copy_from_slice(&got[8..16]);
        let other =
            u64::from_le_bytes(second).wrapping_sub(1) ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        return format!(
            "write {id} by its first word, {same} of {} words as written to block {blk}; the second word names block {other}",
            got.len() / 8
        );
    }
    let zero_words = got
        .chunks_exact(8)
        .filter(|w| w.iter().all(|&b| b == 0))
        .count();
    format!("garbage ({zero_words} zero words of {})", got.len() / 8)
}

/// What may be in each block after a crash.
#[derive(Default)]
pub struct Model {
    /// Last flushed value per block (absent: 0, never written).
    pub durable: HashMap<u64, u64>,
    /// Values written since the block's last flush, in order; the last one
    /// is what a read must return while the daemon lives.
    pub pending: HashMap<u64, Vec<u64>>,
}

impl Model {
    pub fn current(&self, blk: u64) -> u64 {
        self.pending
            .get(&blk)
            .and_then(|v| v.last().copied())
            .unwrap_or_else(|| self.durable.get(&blk).copied().unwrap_or(0))
    }

    pub fn wrote(&mut self, blk: u64, id: u64) {
        self.pending.entry(blk).or_default().push(id);
    }

    /// A FUA write of `id` was acknowledged: it is durable.
    pub fn durable_now(&mut self, blk: u64, id: u64) {
        // Only if no later write was started (the client is sequential,
        // so the FUA write is the block's last one).
        self.pending.remove(&blk);
        self.durable.insert(blk, id);
    }

    /// A FLUSH was acknowledged: every acknowledged write is durable.
    pub fn flushed(&mut self) {
        for (blk, vals) in self.pending.drain() {
            if let Some(v) = vals.last() {
                self.durable.insert(blk, *v);
            }
        }
    }

    pub fn allowed(&self, blk: u64) -> Vec<u64> {
        let mut a = vec![self.durable.get(&blk).copied().unwrap_or(0)];
        if let Some(p) = self.pending.get(&blk) {
            a.extend_from_slice(p);
        }
        a
    }

    /// After recovery the block holds `id`: that is now its only state.
    pub fn settle(&mut self, blk: u64, id: u64) {
        self.pending.remove(&blk);
        self.durable.insert(blk, id);
    }
}
