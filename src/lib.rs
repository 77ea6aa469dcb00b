//! tierd core library: one logical block volume over a fast SSD and a slow
//! HDD, served over NBD.
//!
//! Modules in layers, each using only those below it (docs/design.md draws
//! them; tests/layering.rs holds the code to it):
//! - [`units`]: the shared vocabulary (sizes, durations, I/O hints, move
//!   reasons).
//! - [`clock`], [`listen`], [`device`], [`store`], [`heat`], [`trace`]:
//!   time, the one accept loop, block devices, the metadata store, heat
//!   tracking, block I/O traces (format, importers, exporter).
//! - [`volume`]: geometry, superblocks, the extent map, the allocator, the
//!   I/O paths and the move steps.
//! - [`migrate`]: the placement policy, the crash-safe copy protocol, pacing
//!   and the background worker.
//! - [`nbd`]: the NBD protocol (pure: it knows nothing of volumes);
//!   [`control`]: the control protocol's messages.
//! - [`config`] and [`serving`]: the daemon's configuration, and what runs
//!   it (the volume as an NBD export, start-up and shutdown, control server,
//!   metrics).

pub mod clock;
pub mod config;
pub mod control;
pub mod device;
pub mod heat;
pub mod listen;
pub mod migrate;
pub mod nbd;
pub mod serving;
pub mod store;
pub mod trace;
pub mod units;
pub mod volume;
