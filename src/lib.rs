//! tierd core library: one logical block volume over a fast SSD and a slow HDD.
//!
//! Module map:
//! - [`device`]: the block-device trait and its implementations (file, memory).
//! - [`store`]: the metadata store trait (sled and in-memory).
//! - [`volume`]: geometry, superblocks, extent map, allocator and the I/O paths.
//! - [`nbd`]: the NBD protocol codec and the tokio server.
//! - [`control`]: the control API (JSON lines over a Unix socket).
//! - [`metrics`]: Prometheus metrics and their HTTP endpoint.

mod accept;
pub mod clock;
pub mod config;
pub mod control;
pub mod device;
pub mod heat;
pub mod metrics;
pub mod migrate;
pub mod nbd;
pub mod service;
pub mod store;
pub mod units;
pub mod volume;
