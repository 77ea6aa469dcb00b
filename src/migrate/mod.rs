//! Background migration: admission at the miss ([`admit`]), the placement
//! [`policy`] over the [`candidates`] that can move (their busy [`zones`]
//! included), a [`bucket`] to pace background I/O, what of a batch the
//! HDD time budget pays for (`pay`), and the [`worker`] that
//! plans rounds and moves extents with the crash-safe copy protocol
//! ([`copy`]) over the volume's move steps, as its [`knobs`] say.

pub mod admit;
pub mod bucket;
pub mod candidates;
pub mod copy;
pub mod knobs;
mod pay;
pub mod policy;
pub mod worker;
pub mod zones;

pub use admit::{admit_pending, admit_pending_noting, Admitted};
pub use bucket::TokenBucket;
pub use candidates::{all_candidates, candidates};
#[cfg(feature = "failpoints")]
pub use copy::{arm_crash_after, run_after};
pub use copy::{clean_batch, migrate_batch, migrate_extent, preclean_batch, write_back_batch};
pub use knobs::{DurabilityConfig, MigrateConfig, MIN_SSD_EXPOSURE};
pub use policy::{plan, Candidate, Move, PlanInput, PolicyConfig};
pub use worker::{Migrator, ProgressSnapshot, RoundReport};
