//! The serving layer: what turns the volume, its heat and its migrator into
//! a running daemon. It may use every layer below it; nothing below imports
//! it. Every listener, NBD's included, runs on the one accept loop of
//! [`crate::listen`].
//!
//! - [`service`]: serving the volume until shutdown, the other files
//!   around it; [`open`]: opening (and formatting) the devices, the store
//!   and the volume from the configuration, with the image files it may
//!   create ([`images`]); [`error`]: [`ServiceError`].
//! - [`endpoints`]: every listening socket, bound before anything is
//!   formatted (the control socket's too).
//! - [`adapter`]: the volume as an NBD export; [`recorder`]: the trace
//!   recorder it tells of every request; [`remote`]: the capacity tier on
//!   a remote NBD export.
//! - [`live`]: the live state the side channels read; [`settings`]: the
//!   configuration in force and what may change in it, applied to that
//!   state; [`evacuation`]: what draining a tier moves, the one count the
//!   plan, the progress and `status` share.
//! - [`control_server`]: answers the control requests (the messages are
//!   [`crate::control`], shared with `tierctl`); [`metrics`]: the
//!   Prometheus exporter; [`systemd`]: `sd_notify`, the watchdog, the
//!   reload as systemd sees it.
//! - [`allocator`]: the C allocator's tuning.

pub mod adapter;
pub mod allocator;
pub mod control_server;
pub mod endpoints;
pub mod error;
pub mod evacuation;
mod images;
pub mod live;
pub mod metrics;
pub mod open;
pub mod recorder;
pub mod remote;
pub mod service;
pub mod settings;
pub mod systemd;

pub use adapter::VolumeExport;
pub use endpoints::Endpoints;
pub use error::ServiceError;
pub use live::{ConnectionProbe, Live};
pub use recorder::{RecordError, Recorder, RecordingStatus};
