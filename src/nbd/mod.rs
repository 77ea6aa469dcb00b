//! The NBD (Network Block Device) protocol layer: the wire codec, the
//! handshake and transmission phases, and the tokio server that serves one
//! [`Export`]. It knows nothing of volumes, heat or metrics: whatever it
//! serves comes in through [`Export`] (and [`ExportConn`] per connection),
//! and what it served goes out through [`RequestObserver`]. It imports only
//! `crate::units` and the shared accept loop, `crate::listen`.
//!
//! - [`client`]: a pipelined, reconnecting NBD client of one export (the
//!   remote capacity tier).
//! - [`export`]: the [`Export`] trait, [`IoCtx`], [`ExportError`] (the one
//!   errno mapping).
//! - [`mem`]: [`MemExport`], a sparse in-memory export.
//! - [`proto`]: wire constants (the NBD errnos among them), option/request
//!   parsing, message encoding.
//! - `handshake`: newstyle handshake, option haggling, STARTTLS, the
//!   transmission flags derived from the export's capabilities.
//! - `request`: reading and validating request headers and payloads.
//! - `reply`: simple/structured replies and block-status descriptors.
//! - `transmission`: the async per-connection request loop, permits, the
//!   writer (TLS and in-memory streams, or every stream with `threads = 0`).
//! - `threaded`: the transmission phase of plain TCP and Unix sockets on a
//!   few blocking threads per connection, each serving whole requests.
//! - [`server`]: the [`Server`]: listeners, accept loop, connection lifetime,
//!   shutdown.
//! - [`tls`]: rustls configuration for `NBD_OPT_STARTTLS`.

pub mod client;
pub mod export;
mod handshake;
pub mod mem;
pub mod proto;
mod reply;
mod request;
pub mod server;
mod socket;
mod splice;
mod threaded;
pub mod tls;
mod transmission;

pub use export::{
    Export, ExportConn, ExportError, IoCtx, NoHints, RequestInfo, RequestKind, StatusRun,
};
pub use mem::MemExport;
pub use server::{ConnectionError, NoObserver, RequestObserver, Server, ServerOptions};
pub use tls::{ServerTls, TlsError, TlsFiles};
