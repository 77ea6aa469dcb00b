//! Moving extents between tiers with a crash-safe copy protocol, pins, and
//! the explanation of where an extent sits and why.
//!
//! The copy protocol for one extent, from slot A to a new slot B:
//! 1. allocate B on the destination tier;
//! 2. copy the extent's written blocks A → B, paced, without holding the
//!    extent's lock (foreground I/O keeps going to A);
//! 3. make B durable (sync the destination device);
//! 4. under the extent's write lock, if no write, zero or trim touched the
//!    extent since step 2 began (its generation is unchanged), point the
//!    mapping at B and record it in the metadata store — otherwise give B
//!    back and start again (a bounded number of times);
//! 5. flush, which makes the new mapping durable;
//! 6. only then free A.
//!
//! A crash before step 5 completes leaves the durable mapping at A, which
//! still holds the latest acknowledged data; after it, at B, which does. B is
//! never referenced durably before it holds the data, and A is never reused
//! before nothing durable refers to it.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::extent::{Loc, Written};
use super::geometry::{Tier, BLOCK_SIZE};
use super::stats::Stats;
use super::{io_err, Volume, VolumeError, VolumeResult, PINS_KEY};
use crate::migrate::Reason;

/// Bytes copied per device I/O during a migration.
const COPY_CHUNK: u64 = 256 << 10;
/// Attempts before a migration racing foreground writes gives up.
const ATTEMPTS: usize = 3;

/// A pin: extents `start..end` kept on `tier` (`None`: explicitly unpinned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// First extent.
    pub start: u64,
    /// One past the last extent.
    pub end: u64,
    /// The tier, or `None` for an unpin overriding earlier pins.
    pub tier: Option<Tier>,
}

/// The last move of an extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    /// When (clock's Unix seconds).
    pub at: u64,
    /// From tier.
    pub from: Tier,
    /// To tier.
    pub to: Tier,
    /// Why.
    pub reason: Reason,
}

/// Steps of the copy protocol after which a test can simulate a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStep {
    /// Destination slot taken.
    Allocated,
    /// Data copied.
    Copied,
    /// Destination synced.
    Synced,
    /// Mapping switched and written to the store (not yet flushed).
    Committed,
    /// Mapping flushed (source not yet freed).
    Flushed,
}

/// What a migration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveOutcome {
    /// Moved; bytes copied.
    Moved(u64),
    /// Nothing to do: unmapped, or already on the destination tier.
    Skipped,
    /// No free slot on the destination tier.
    NoRoom,
    /// The extent kept changing during the copy; left where it is.
    Raced,
    /// Stopped after a step, as a test asked (a simulated crash).
    Stopped(MoveStep),
}

/// Where an extent sits and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Logical extent.
    pub extent: u64,
    /// Its first byte.
    pub offset: u64,
    /// Extent size.
    pub len: u64,
    /// Tier, if mapped.
    pub tier: Option<Tier>,
    /// Slot on that tier.
    pub slot: Option<u32>,
    /// Blocks holding written data.
    pub written_blocks: u32,
    /// Blocks per extent.
    pub blocks: u32,
    /// Decayed heat score.
    pub score: f32,
    /// Distinct blocks touched recently.
    pub coverage: u32,
    /// Pin in force.
    pub pin: Option<Tier>,
    /// The last move since start.
    pub last_move: Option<MoveRecord>,
}

/// Which tier a list of pins puts an extent on.
fn pin_in(pins: &[Pin], extent: u64) -> Option<Tier> {
    pins.iter()
        .rev()
        .find(|p| p.start <= extent && extent < p.end)
        .and_then(|p| p.tier)
}

impl Volume {
    /// Move one extent to tier `to` with the crash-safe copy protocol.
    /// `pace(bytes)` is called before each chunk is copied (it may sleep).
    /// `stop_after` simulates a crash after a step (tests only: the caller
    /// then drops the volume without flushing).
    pub fn migrate_extent(
        &self,
        extent: u64,
        to: Tier,
        reason: Reason,
        pace: &mut dyn FnMut(u64),
        stop_after: Option<MoveStep>,
    ) -> VolumeResult<MoveOutcome> {
        let (Some(lock), Some(gen)) = (
            self.map.get(extent as usize),
            self.gens.get(extent as usize),
        ) else {
            return Err(VolumeError::OutOfRange {
                offset: extent.saturating_mul(self.geo.extent_size),
                len: self.geo.extent_size,
                size: self.size(),
            });
        };
        let stop = |s: MoveStep| stop_after == Some(s);
        for _ in 0..ATTEMPTS {
            let (src, written, g0) = {
                let guard = lock.read();
                match guard.as_ref() {
                    None => return Ok(MoveOutcome::Skipped),
                    Some(m) if m.loc.tier == to => return Ok(MoveOutcome::Skipped),
                    Some(m) => (m.loc, m.written.clone(), gen.load(Ordering::Acquire)),
                }
            };
            let Some(dst) = self.alloc.alloc(&[to]) else {
                return Ok(MoveOutcome::NoRoom);
            };
            if stop(MoveStep::Allocated) {
                return Ok(MoveOutcome::Stopped(MoveStep::Allocated));
            }
            let copied = match self.copy_slot(src, dst, &written, pace) {
                Ok(n) => n,
                Err(e) => {
                    self.alloc.free_now(dst);
                    Stats::add(&self.stats.migration_errors, 1);
                    return Err(e);
                }
            };
            if stop(MoveStep::Copied) {
                return Ok(MoveOutcome::Stopped(MoveStep::Copied));
            }
            let dev = self.devices.get(to);
            if let Err(e) = dev.sync() {
                self.alloc.free_now(dst);
                Stats::add(&self.stats.migration_errors, 1);
                Stats::add(&self.stats.dev_errors[to.index()], 1);
                return Err(io_err(dev.as_ref())(e));
            }
            if stop(MoveStep::Synced) {
                return Ok(MoveOutcome::Stopped(MoveStep::Synced));
            }
            {
                let mut guard = lock.write();
                match guard.as_mut() {
                    Some(m) if m.loc == src && gen.load(Ordering::Acquire) == g0 => {
                        m.loc = dst;
                        if let Err(e) = self.store.put_extent(extent, &m.encode()) {
                            m.loc = src;
                            drop(guard);
                            self.alloc.free_now(dst);
                            Stats::add(&self.stats.migration_errors, 1);
                            return Err(e.into());
                        }
                        gen.fetch_add(1, Ordering::AcqRel);
                    }
                    _ => {
                        drop(guard);
                        self.alloc.free_now(dst);
                        Stats::add(&self.stats.migration_aborts, 1);
                        continue;
                    }
                }
            }
            self.meta_dirty.store(true, Ordering::Release);
            if stop(MoveStep::Committed) {
                return Ok(MoveOutcome::Stopped(MoveStep::Committed));
            }
            if let Err(e) = self.flush() {
                // The new mapping is live but not yet durable: the source
                // may be reused only after a later flush succeeds.
                self.alloc.free_deferred(src);
                Stats::add(&self.stats.migration_errors, 1);
                return Err(e);
            }
            if stop(MoveStep::Flushed) {
                return Ok(MoveOutcome::Stopped(MoveStep::Flushed));
            }
            self.alloc.free_now(src);
            self.stats.migrated(to, reason, copied);
            self.moves.lock().insert(
                extent,
                MoveRecord {
                    at: self.clock.unix_secs(),
                    from: src.tier,
                    to,
                    reason,
                },
            );
            return Ok(MoveOutcome::Moved(copied));
        }
        Ok(MoveOutcome::Raced)
    }

    /// Copy the written blocks of slot `src` to slot `dst`.
    fn copy_slot(
        &self,
        src: Loc,
        dst: Loc,
        written: &Written,
        pace: &mut dyn FnMut(u64),
    ) -> VolumeResult<u64> {
        let (sdev, ddev) = (self.devices.get(src.tier), self.devices.get(dst.tier));
        let (sbase, dbase) = (
            self.geo.slot_offset(src.slot),
            self.geo.slot_offset(dst.slot),
        );
        let mut buf = vec![0u8; COPY_CHUNK as usize];
        let mut copied = 0;
        let blocks = self.geo.blocks_per_extent();
        for (b, n, is_written) in written.runs(0, blocks - 1) {
            if !is_written {
                continue;
            }
            let (mut pos, end) = (u64::from(b) * BLOCK_SIZE, u64::from(b + n) * BLOCK_SIZE);
            while pos < end {
                let len = (end - pos).min(COPY_CHUNK);
                pace(len);
                let chunk = &mut buf[..len as usize];
                sdev.read_at(chunk, sbase + pos).map_err(|e| {
                    Stats::add(&self.stats.dev_errors[src.tier.index()], 1);
                    io_err(sdev.as_ref())(e)
                })?;
                ddev.write_at(chunk, dbase + pos).map_err(|e| {
                    Stats::add(&self.stats.dev_errors[dst.tier.index()], 1);
                    io_err(ddev.as_ref())(e)
                })?;
                Stats::add(&self.stats.dev_reads[src.tier.index()], 1);
                Stats::add(&self.stats.dev_read_bytes[src.tier.index()], len);
                Stats::add(&self.stats.dev_writes[dst.tier.index()], 1);
                Stats::add(&self.stats.dev_write_bytes[dst.tier.index()], len);
                pos += len;
                copied += len;
            }
        }
        self.dirty[dst.tier.index()].store(true, Ordering::Release);
        Ok(copied)
    }

    /// Pin the extents overlapping `[offset, offset+len)` to `tier`
    /// (`None`: unpin them). Pins persist in the metadata store; the
    /// migrator honours them on its next round.
    pub fn pin(&self, offset: u64, len: u64, tier: Option<Tier>) -> VolumeResult<()> {
        self.check(offset, len.max(1))?;
        let es = self.geo.extent_size;
        let (start, end) = (offset / es, (offset + len.max(1)).div_ceil(es));
        let mut pins = self.pins.write();
        let mut new: Vec<Pin> = pins
            .iter()
            .copied()
            .filter(|p| !(start <= p.start && p.end <= end))
            .collect();
        new.push(Pin { start, end, tier });
        let room = u64::from(self.geo.ssd_slots - self.geo.reserve_extents);
        let pinned = (0..self.geo.logical_extents())
            .filter(|e| pin_in(&new, *e) == Some(Tier::Ssd))
            .count() as u64;
        if pinned > room {
            return Err(VolumeError::Pin(format!(
                "{pinned} extents would be pinned to the SSD, which has room for {room} outside the reserve"
            )));
        }
        let json = serde_json::to_vec(&new).map_err(|e| VolumeError::Corrupt(e.to_string()))?;
        self.store.put(PINS_KEY, &json)?;
        self.meta_dirty.store(true, Ordering::Release);
        *pins = new;
        Ok(())
    }

    /// The pin in force for an extent.
    pub fn pin_of(&self, extent: u64) -> Option<Tier> {
        pin_in(&self.pins.read(), extent)
    }

    /// All pin entries, later overriding earlier.
    pub fn pins(&self) -> Vec<Pin> {
        self.pins.read().clone()
    }

    /// The last move of an extent since start.
    pub fn last_move(&self, extent: u64) -> Option<MoveRecord> {
        self.moves.lock().get(&extent).copied()
    }

    /// Where an extent sits and why.
    pub fn explain(&self, extent: u64) -> Option<Placement> {
        let guard = self.map.get(extent as usize)?.read();
        let blocks = self.geo.blocks_per_extent();
        let m = guard.as_ref();
        Some(Placement {
            extent,
            offset: extent * self.geo.extent_size,
            len: self.geo.extent_size,
            tier: m.map(|m| m.loc.tier),
            slot: m.map(|m| m.loc.slot),
            written_blocks: m
                .map(|m| (0..blocks).filter(|b| m.written.get(*b)).count() as u32)
                .unwrap_or(0),
            blocks,
            score: self.heat.score(extent),
            coverage: self.heat.coverage(extent),
            pin: self.pin_of(extent),
            last_move: self.last_move(extent),
        })
    }

    /// The policy's view of every mapped extent.
    pub fn candidates(&self) -> Vec<crate::migrate::Candidate> {
        let pins = self.pins.read().clone();
        self.map
            .iter()
            .enumerate()
            .filter_map(|(i, lock)| {
                let tier = lock.read().as_ref().map(|m| m.loc.tier)?;
                let e = i as u64;
                Some(crate::migrate::Candidate {
                    extent: e,
                    tier,
                    score: self.heat.score(e),
                    coverage: self.heat.coverage(e),
                    pin: pin_in(&pins, e),
                })
            })
            .collect()
    }
}
