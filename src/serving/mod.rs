//! The serving layer: what turns the volume, its heat and its migrator into
//! a running daemon. It owns the volume as an NBD export ([`adapter`]),
//! the listening endpoints, bound before anything is formatted
//! ([`endpoints`]), start-up and shutdown ([`service`]) with the image files it may create
//! ([`images`]), the live state the side channels
//! read ([`live`]), the control socket's server ([`control`]), the
//! Prometheus exporter ([`metrics`]) the trace recorder ([`recorder`]) and the capacity tier on a remote NBD
//! export ([`remote`]), and the C allocator's tuning ([`allocator`]). Every listener, NBD's included, runs
//! on the one accept loop of [`crate::listen`]. It may use every layer below
//! it; nothing below imports it.

pub mod adapter;
pub mod allocator;
pub mod control;
pub mod endpoints;
pub mod evacuation;
mod images;
pub mod live;
pub mod metrics;
pub mod recorder;
pub mod remote;
pub mod service;
pub mod settings;

pub use adapter::VolumeExport;
pub use endpoints::Endpoints;
pub use live::{ConnectionProbe, Live};
pub use recorder::{RecordError, Recorder, RecordingStatus};
