//! Background migration: the placement [`policy`], a [`bucket`] to pace
//! background I/O, and the [`worker`] that plans rounds and moves extents
//! with the volume's crash-safe copy protocol.

pub mod bucket;
pub mod policy;
pub mod worker;

pub use bucket::TokenBucket;
pub use policy::{candidates, plan, Candidate, Move, PlanInput, PolicyConfig};
pub use worker::{MigrateConfig, Migrator, RoundReport};
