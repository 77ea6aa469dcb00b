//! Background migration: admission at the miss ([`admit`]), the placement [`policy`], a [`bucket`] to pace
//! background I/O, and the [`worker`] that plans rounds and moves extents
//! with the crash-safe copy protocol ([`copy`]) over the volume's move steps,
//! as its [`knobs`] say.

pub mod admit;
pub mod bucket;
pub mod copy;
pub mod knobs;
pub mod policy;
pub mod worker;

pub use admit::{admit_pending, Admitted};
pub use bucket::TokenBucket;
#[cfg(feature = "failpoints")]
pub use copy::arm_crash_after;
pub use copy::{migrate_batch, migrate_extent, preclean_batch, write_back_batch};
pub use knobs::MigrateConfig;
pub use policy::{candidates, plan, Candidate, Move, PlanInput, PolicyConfig};
pub use worker::{Migrator, ProgressSnapshot, RoundReport};
