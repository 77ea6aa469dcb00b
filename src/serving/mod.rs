//! The serving layer: what turns the volume, its heat and its migrator into
//! a running daemon. It owns the volume as an NBD export ([`adapter`]),
//! start-up and shutdown ([`service`]), the live
//! state the side channels read ([`live`]), the control socket's server
//! ([`control`]), the Prometheus exporter ([`metrics`]) and the one accept
//! loop they share. It may use every layer below it; nothing below imports
//! it.

mod accept;
pub mod adapter;
pub mod control;
pub mod live;
pub mod metrics;
pub mod service;

pub use adapter::VolumeExport;
pub use live::{ConnectionProbe, Live};
