//! [`FaultDevice`]: a wrapper around any [`BlockDevice`] that injects I/O
//! errors, for reliability tests. Rules select which operations fail (reads,
//! writes, syncs), optionally only inside a byte range, only a number of
//! times, or only with a probability drawn from a seeded generator (so a
//! failing run can be replayed). Injection can be switched off and on at
//! runtime without removing the rules.
//!
//! An injected failure never reaches the wrapped device: a failed write
//! leaves the old bytes in place, and a failed sync leaves unsynced writes
//! unsynced (with [`super::MemDevice::with_power_model`], a power cut then
//! loses them).

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::BlockDevice;

/// Kinds of operation a rule can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// `read_at`.
    Read,
    /// `write_at`.
    Write,
    /// `sync` (flush to stable storage).
    Sync,
}

/// Which requests fail. Build with [`FaultRule::new`] and the modifiers.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    ops: Vec<FaultOp>,
    /// Only I/O overlapping this byte range (syncs ignore the range).
    range: Option<Range<u64>>,
    /// Fail at most this many more times (`None`: unlimited).
    remaining: Option<u64>,
    /// Chance that a matching request fails (1.0: always).
    probability: f64,
}

impl FaultRule {
    /// Fail every matching request of the kinds `ops`.
    pub fn new(ops: &[FaultOp]) -> Self {
        FaultRule {
            ops: ops.to_vec(),
            range: None,
            remaining: None,
            probability: 1.0,
        }
    }

    /// Fail reads, writes and syncs: a dead device.
    pub fn dead() -> Self {
        Self::new(&[FaultOp::Read, FaultOp::Write, FaultOp::Sync])
    }

    /// Only reads and writes overlapping `range` (bytes of the device).
    pub fn range(mut self, range: Range<u64>) -> Self {
        self.range = Some(range);
        self
    }

    /// Only the next `n` matching requests (then the rule is spent).
    pub fn times(mut self, n: u64) -> Self {
        self.remaining = Some(n);
        self
    }

    /// Each matching request fails with probability `p` (clamped to 0..=1).
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = if p.is_nan() { 0.0 } else { p.clamp(0.0, 1.0) };
        self
    }

    fn matches(&self, op: FaultOp, offset: u64, len: usize) -> bool {
        if !self.ops.contains(&op) || self.remaining == Some(0) {
            return false;
        }
        match (&self.range, op) {
            (_, FaultOp::Sync) | (None, _) => true,
            (Some(r), _) => {
                let end = offset.saturating_add((len as u64).max(1));
                offset < r.end && r.start < end
            }
        }
    }
}

/// A small seeded generator (xorshift64*): reproducible, no dependency.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

struct State {
    rules: Vec<FaultRule>,
    rng: Rng,
}

/// A device that fails requests according to its rules.
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    state: Mutex<State>,
    enabled: AtomicBool,
    injected: [AtomicU64; 3],
}

impl FaultDevice {
    /// Wrap `inner`; `seed` drives probabilistic rules.
    pub fn new(inner: Arc<dyn BlockDevice>, seed: u64) -> Self {
        FaultDevice {
            inner,
            state: Mutex::new(State {
                rules: Vec::new(),
                rng: Rng::new(seed),
            }),
            enabled: AtomicBool::new(true),
            injected: Default::default(),
        }
    }

    /// Add a rule (rules are checked in order; the first that fires wins).
    pub fn add(&self, rule: FaultRule) {
        self.state.lock().rules.push(rule);
    }

    /// Remove every rule: the device works again.
    pub fn clear(&self) {
        self.state.lock().rules.clear();
    }

    /// Switch injection on or off, keeping the rules.
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Failures injected so far of one kind.
    pub fn injected(&self, op: FaultOp) -> u64 {
        self.injected[op as usize].load(Ordering::Relaxed)
    }

    /// Failures injected so far, all kinds.
    pub fn injected_total(&self) -> u64 {
        self.injected
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    /// Whether this request fails; counts it if so.
    fn check(&self, op: FaultOp, offset: u64, len: usize) -> io::Result<()> {
        if !self.enabled.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut st = self.state.lock();
        let State { rules, rng } = &mut *st;
        for rule in rules.iter_mut() {
            if !rule.matches(op, offset, len) {
                continue;
            }
            if rule.probability < 1.0 && rng.unit() >= rule.probability {
                continue;
            }
            if let Some(n) = rule.remaining.as_mut() {
                *n -= 1;
            }
            self.injected[op as usize].fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::other(format!(
                "injected {op:?} fault on {} at {offset}+{len}",
                self.inner.name()
            )));
        }
        Ok(())
    }
}

impl BlockDevice for FaultDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(FaultOp::Read, offset, buf.len())?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(FaultOp::Write, offset, buf.len())?;
        self.inner.write_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.check(FaultOp::Sync, 0, 0)?;
        self.inner.sync()
    }

    fn link(&self) -> Option<super::LinkEstimate> {
        self.inner.link()
    }

    fn model_busy(&self) -> Option<std::time::Duration> {
        self.inner.model_busy()
    }

    fn model_busy_here(&self) -> Option<std::time::Duration> {
        self.inner.model_busy_here()
    }

    fn name(&self) -> String {
        format!("{} (fault injection)", self.inner.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    fn dev() -> FaultDevice {
        FaultDevice::new(Arc::new(MemDevice::new(1 << 20)), 7)
    }

    #[test]
    fn range_rule_fails_only_overlapping_io() {
        let d = dev();
        d.add(FaultRule::new(&[FaultOp::Read]).range(8192..12288));
        let mut buf = [0u8; 4096];
        assert!(d.read_at(&mut buf, 0).is_ok());
        assert!(
            d.read_at(&mut buf, 4096).is_ok(),
            "ends where the range starts"
        );
        assert!(d.read_at(&mut buf, 6000).is_err(), "overlaps the start");
        assert!(d.read_at(&mut buf, 12287).is_err(), "last byte");
        assert!(d.read_at(&mut buf, 12288).is_ok());
        assert!(d.write_at(&buf, 8192).is_ok(), "writes are not in the rule");
        assert_eq!(d.injected(FaultOp::Read), 2);
    }

    #[test]
    fn counted_rule_is_spent_and_failed_writes_change_nothing() {
        let d = dev();
        d.write_at(&[1u8; 16], 0).unwrap();
        d.add(FaultRule::new(&[FaultOp::Write]).times(2));
        assert!(d.write_at(&[9u8; 16], 0).is_err());
        assert!(d.write_at(&[9u8; 16], 0).is_err());
        let mut back = [0u8; 16];
        d.read_at(&mut back, 0).unwrap();
        assert_eq!(back, [1u8; 16], "a failed write must not reach the device");
        assert!(d.write_at(&[9u8; 16], 0).is_ok());
        assert_eq!(d.injected_total(), 2);
    }

    #[test]
    fn switch_and_probability_are_reproducible() {
        let run = |seed| {
            let d = FaultDevice::new(Arc::new(MemDevice::new(4096)), seed);
            d.add(FaultRule::new(&[FaultOp::Sync]).probability(0.5));
            (0..200).map(|_| d.sync().is_err()).collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1), "same seed, same faults");
        let fails = a.iter().filter(|f| **f).count();
        assert!((60..140).contains(&fails), "{fails} of 200 at p=0.5");
        let d = dev();
        d.add(FaultRule::dead());
        assert!(d.sync().is_err());
        d.set_enabled(false);
        assert!(d.sync().is_ok());
        d.set_enabled(true);
        assert!(d.sync().is_err());
        d.clear();
        assert!(d.sync().is_ok());
    }
}
