//! Placement simulators: what the classic policies (LRU, LFU, ARC, an
//! smq-like multiqueue, S3-FIFO) and the offline optimum would get on a block trace
//! for a given SSD size, to judge tierd's own policy against. This module
//! owns the trace reduction (requests to unit references), the byte
//! accounting every policy shares, [`simulate`] and [`curve`]; each policy
//! lives in its own submodule ([`lru`], [`lfu`], [`arc`], [`smq`],
//! [`popular`], [`optimal`]).
//!
//! **Model.** The volume is cut into units of [`SimConfig::unit`] bytes
//! (tierd's extent, 1 MiB by default); the SSD holds
//! [`SimConfig::capacity_units`] of them. A request touching several units
//! is several references, one per unit in address order, each carrying the
//! bytes of that unit it covers (a zero-length request is none). Each
//! policy sees the references in trace order and nothing else; the trace's
//! time matters only to smq.
//!
//! **Accounting** (the same for every policy, so they compare):
//! - a reference whose unit is resident (on the SSD) when it arrives is a
//!   *hit*: its bytes count in `read_hit_bytes` or `write_hit_bytes`; a hit
//!   write also counts in `ssd_write_bytes` and makes the unit *dirty*
//!   (its only current copy is on the SSD);
//! - any other reference is a miss, served by the HDD. The policy may then
//!   *admit* the unit: the copy HDD → SSD counts the unit in
//!   `promoted_bytes` and `ssd_write_bytes`, and the unit is clean (the copy
//!   holds what the HDD holds, including a write just served there). A
//!   write covering the whole unit copies nothing (dm-cache's "fast
//!   promote"): its bytes go to the SSD (`ssd_write_bytes`) and the unit is
//!   dirty. It is still a miss;
//! - evicting a dirty unit copies it back (`demoted_bytes` += unit); a clean
//!   one is dropped for free. Units still resident at the end of the trace
//!   cost nothing more.
//!
//! **Policies.** Demand policies serve hits and decide on misses: LRU, LFU
//! (with aging) and ARC admit every missed unit, reads and writes alike;
//! smq admits by its promotion rule. The popularity oracle knows how often
//! each unit will be read (not when) and keeps the most read ones: the
//! ceiling of any online policy on a trace of independent references. The
//! optimum is offline: it knows the
//! future and maximises read hits (a write can always land on flash in
//! tierd, so writes do not need their unit resident); it may bypass, and
//! admits a unit no earlier than its last reference before a read. Its
//! objective counts read *references*: when every reference covers the
//! same number of bytes (whole units, or fixed-size aligned requests) that
//! is the most read-hit bytes any strategy can get; with mixed sizes a
//! policy can in principle beat it in bytes (weighted caching is not solved
//! by a greedy rule). See each submodule for the details and
//! docs/bench.md, "The classic policies and the optimum".
//!
//! A unit of 0 bytes is taken as 1. Every policy runs in O(n log n) or
//! better over n references; [`curve`] reduces the trace once for all its
//! runs.

pub mod arc;
pub mod lfu;
pub(crate) mod list;
pub mod lru;
pub mod optimal;
pub mod popular;
pub mod s3;
pub mod smq;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// One request of a trace, reduced to what placement sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Access {
    /// When it was issued, ns (any origin; only smq reads it).
    pub t_ns: u64,
    /// Byte offset in the volume.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// A write (else a read).
    pub write: bool,
}

/// A placement policy to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// Least recently used, admit every miss.
    Lru,
    /// Least frequently used with aging, admit every miss.
    Lfu,
    /// Megiddo & Modha's adaptive replacement cache, admit every miss.
    Arc,
    /// A simplified dm-cache stochastic multiqueue (v1 promotion rule).
    Smq,
    /// S3-FIFO over read misses (tierd's admission order).
    S3fifo,
    /// The popularity oracle: the units most read over the whole trace,
    /// kept from their first reference (the online ceiling under
    /// independent references).
    Popular,
    /// The offline optimum for read hits (Belady with bypass and lazy
    /// admission).
    Optimal,
}

impl PolicyKind {
    /// Every policy, the optimum last.
    pub const ALL: [PolicyKind; 7] = [
        PolicyKind::Lru,
        PolicyKind::Lfu,
        PolicyKind::Arc,
        PolicyKind::Smq,
        PolicyKind::S3fifo,
        PolicyKind::Popular,
        PolicyKind::Optimal,
    ];

    /// Its name: `lru`, `lfu`, `arc`, `smq`, `popular`, `optimal`.
    pub fn name(&self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Lfu => "lfu",
            PolicyKind::Arc => "arc",
            PolicyKind::Smq => "smq",
            PolicyKind::S3fifo => "s3fifo",
            PolicyKind::Popular => "popular",
            PolicyKind::Optimal => "optimal",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name [`PolicyKind::from_str`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {0:?}; policies: lru, lfu, arc, smq, popular, optimal")]
pub struct UnknownPolicy(pub String);

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    /// A name as [`PolicyKind::name`] gives it, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// The simulated SSD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SimConfig {
    /// Bytes per unit (extent).
    pub unit: u64,
    /// SSD units available for data.
    pub capacity_units: u64,
}

/// What one policy got on one trace with one SSD size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimResult {
    /// The policy.
    pub policy: PolicyKind,
    /// SSD units available for data.
    pub capacity_units: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Read bytes served by the SSD.
    pub read_hit_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Write bytes landing on an SSD-resident unit.
    pub write_hit_bytes: u64,
    /// Bytes copied HDD → SSD (admissions that needed a copy).
    pub promoted_bytes: u64,
    /// Bytes copied SSD → HDD (evictions of units written while resident).
    pub demoted_bytes: u64,
    /// Host writes to resident units (and whole-unit writes that admitted
    /// their unit) plus promoted bytes.
    pub ssd_write_bytes: u64,
}

fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

impl SimResult {
    /// Read bytes served by the SSD over read bytes (0 without reads).
    pub fn read_hit_share(&self) -> f64 {
        share(self.read_hit_bytes, self.read_bytes)
    }

    /// (read hits + write hits) over (reads + writes), in bytes (0 without
    /// requests).
    pub fn hit_share(&self) -> f64 {
        share(
            self.read_hit_bytes + self.write_hit_bytes,
            self.read_bytes + self.write_bytes,
        )
    }

    /// Bytes migrated (promoted + demoted) per byte the host read or wrote
    /// (0 without requests).
    pub fn migration_per_host_byte(&self) -> f64 {
        share(
            self.promoted_bytes + self.demoted_bytes,
            self.read_bytes + self.write_bytes,
        )
    }
}

/// Simulate one policy on one SSD size.
pub fn simulate(kind: PolicyKind, cfg: &SimConfig, accesses: &[Access]) -> SimResult {
    let trace = Trace::new(cfg.unit, accesses);
    run(kind, cfg.capacity_units, &trace)
}

/// Hit share against SSD size: one [`SimResult`] per capacity for each
/// policy (the "how big an SSD do I need?" curve), policy by policy in the
/// order of `kinds`, each in the order of `capacities`. The trace is
/// reduced to references once.
pub fn curve(
    kinds: &[PolicyKind],
    unit: u64,
    capacities: &[u64],
    accesses: &[Access],
) -> Vec<SimResult> {
    let trace = Trace::new(unit, accesses);
    kinds
        .iter()
        .flat_map(|&k| capacities.iter().map(move |&c| (k, c)))
        .map(|(k, c)| run(k, c, &trace))
        .collect()
}

fn run(kind: PolicyKind, capacity: u64, trace: &Trace) -> SimResult {
    let mut led = Ledger::new(trace, capacity);
    if capacity == 0 {
        // No SSD: every reference misses, nothing is admitted.
        for r in &trace.refs {
            led.access(r, false);
        }
    } else {
        match kind {
            PolicyKind::Lru => lru::run(capacity, trace, &mut led),
            PolicyKind::Lfu => lfu::run(capacity, trace, &mut led),
            PolicyKind::Arc => arc::run(capacity, trace, &mut led),
            PolicyKind::Smq => smq::run(capacity, trace, &mut led),
            PolicyKind::S3fifo => s3::run(capacity, trace, &mut led),
            PolicyKind::Popular => popular::run(capacity, trace, &mut led),
            PolicyKind::Optimal => optimal::run(capacity, trace, &mut led),
        }
    }
    led.finish(kind, capacity)
}

/// One reference: the part of a request that falls in one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ref {
    /// The request's time, ns.
    pub(crate) t_ns: u64,
    /// Dense id of the unit (`Trace::units[id]` is its number).
    pub(crate) id: usize,
    /// Bytes of the unit the request covers.
    pub(crate) bytes: u64,
    /// A write.
    pub(crate) write: bool,
    /// It covers the whole unit.
    pub(crate) whole: bool,
}

impl Ref {
    /// A write of the whole unit: admitting on it copies nothing.
    pub(crate) fn fast(&self) -> bool {
        self.write && self.whole
    }
}

/// A trace reduced to unit references, units numbered densely in order of
/// first reference.
#[derive(Debug, Clone)]
pub(crate) struct Trace {
    /// Bytes per unit (at least 1).
    pub(crate) unit: u64,
    /// The references in trace order.
    pub(crate) refs: Vec<Ref>,
    /// Unit number (offset / unit) of each dense id.
    pub(crate) units: Vec<u64>,
}

impl Trace {
    pub(crate) fn new(unit: u64, accesses: &[Access]) -> Self {
        let unit = unit.max(1);
        let mut ids: HashMap<u64, usize> = HashMap::new();
        let mut units = Vec::new();
        let mut refs = Vec::with_capacity(accesses.len());
        for a in accesses {
            let end = a.offset.saturating_add(a.len);
            let mut u = a.offset / unit;
            let mut start = a.offset;
            while start < end {
                let unit_end = (u * unit).saturating_add(unit);
                let stop = end.min(unit_end);
                let id = *ids.entry(u).or_insert_with(|| {
                    units.push(u);
                    units.len() - 1
                });
                let bytes = stop - start;
                refs.push(Ref {
                    t_ns: a.t_ns,
                    id,
                    bytes,
                    write: a.write,
                    whole: bytes == unit,
                });
                start = stop;
                u += 1;
            }
        }
        Trace { unit, refs, units }
    }
}

/// The byte accounting every policy shares (see the module docs), with
/// checks (in debug builds) that a policy's hits, admissions and evictions
/// agree with what is resident and that it stays within its capacity.
#[derive(Debug)]
pub(crate) struct Ledger {
    unit: u64,
    capacity: u64,
    resident: Vec<bool>,
    dirty: Vec<bool>,
    held: u64,
    read_bytes: u64,
    read_hit_bytes: u64,
    write_bytes: u64,
    write_hit_bytes: u64,
    promoted_bytes: u64,
    demoted_bytes: u64,
    ssd_write_bytes: u64,
}

impl Ledger {
    fn new(trace: &Trace, capacity: u64) -> Self {
        let n = trace.units.len();
        Ledger {
            unit: trace.unit,
            capacity,
            resident: vec![false; n],
            dirty: vec![false; n],
            held: 0,
            read_bytes: 0,
            read_hit_bytes: 0,
            write_bytes: 0,
            write_hit_bytes: 0,
            promoted_bytes: 0,
            demoted_bytes: 0,
            ssd_write_bytes: 0,
        }
    }

    /// Count reference `r`; `hit`: its unit is resident.
    pub(crate) fn access(&mut self, r: &Ref, hit: bool) {
        debug_assert_eq!(hit, self.resident[r.id], "hit disagrees with residency");
        if r.write {
            self.write_bytes += r.bytes;
            if hit {
                self.write_hit_bytes += r.bytes;
                self.ssd_write_bytes += r.bytes;
                self.dirty[r.id] = true;
            }
        } else {
            self.read_bytes += r.bytes;
            if hit {
                self.read_hit_bytes += r.bytes;
            }
        }
    }

    /// Admit `r`'s unit after it missed.
    pub(crate) fn admit(&mut self, r: &Ref) {
        debug_assert!(!self.resident[r.id], "admitting a resident unit");
        self.resident[r.id] = true;
        self.held += 1;
        debug_assert!(self.held <= self.capacity, "over capacity");
        if r.fast() {
            self.ssd_write_bytes += r.bytes;
            self.dirty[r.id] = true;
        } else {
            self.promoted_bytes += self.unit;
            self.ssd_write_bytes += self.unit;
            self.dirty[r.id] = false;
        }
    }

    /// Evict unit `id`.
    pub(crate) fn evict(&mut self, id: usize) {
        debug_assert!(self.resident[id], "evicting a unit not resident");
        self.resident[id] = false;
        self.held -= 1;
        if self.dirty[id] {
            self.demoted_bytes += self.unit;
            self.dirty[id] = false;
        }
    }

    /// Unit `id` is on the SSD.
    pub(crate) fn is_resident(&self, id: usize) -> bool {
        self.resident[id]
    }

    /// Unit `id` was written while resident and not copied back since.
    pub(crate) fn is_dirty(&self, id: usize) -> bool {
        self.dirty[id]
    }

    fn finish(self, policy: PolicyKind, capacity_units: u64) -> SimResult {
        SimResult {
            policy,
            capacity_units,
            read_bytes: self.read_bytes,
            read_hit_bytes: self.read_hit_bytes,
            write_bytes: self.write_bytes,
            write_hit_bytes: self.write_hit_bytes,
            promoted_bytes: self.promoted_bytes,
            demoted_bytes: self.demoted_bytes,
            ssd_write_bytes: self.ssd_write_bytes,
        }
    }
}
