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
//! - [`proto`]: the wire format: its constants (the NBD errnos among them)
//!   apart from the codec (option/request parsing, message encoding).
//! - [`server`]: the [`Server`]: listeners, accept loop, connection lifetime,
//!   shutdown; `options`: what it and both phases share
//!   ([`ServerOptions`], [`RequestObserver`], [`ConnectionError`]).
//! - `handshake`: newstyle handshake, option haggling, STARTTLS, ending in
//!   the `session` (what was settled, and the export's capabilities).
//! - `transmission`: the one request loop of every connection, on a
//!   `wire`: a plain socket (`socket`, with zero-copy READs from `splice`)
//!   or any other stream, TLS or in-memory (`bridge`); its threads are the
//!   `pool`'s, its memory the `budget`'s.
//! - `request`: reading and validating request headers and payloads;
//!   `reply`: simple/structured replies and block-status descriptors.
//! - [`tls`]: rustls configuration for `NBD_OPT_STARTTLS`.
//!
//! From the socket to the export, a READ passes `server` (the accepted
//! connection), `handshake`, `transmission` (with `socket` and `request`
//! under it) and `reply`, then [`Export::read_or_wait`].

mod bridge;
mod budget;
pub mod client;
pub mod export;
mod handshake;
mod job;
mod lanes;
mod lock;
pub mod mem;
mod options;
mod pool;
pub mod proto;
mod reply;
mod request;
pub mod server;
mod session;
mod socket;
mod splice;
pub mod tls;
mod transmission;
mod wire;

pub use export::{
    Export, ExportConn, ExportError, IoCtx, NoHints, RequestInfo, RequestKind, StatusRun,
};
pub use mem::MemExport;
pub use options::{ConnectionError, NoObserver, RequestObserver, ServerOptions};
pub use server::Server;
pub use tls::{ServerTls, TlsError, TlsFiles};
