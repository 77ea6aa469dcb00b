//! The NBD (Network Block Device) protocol: a pure codec for the handshake and
//! transmission phases, and the tokio server that serves one [`Export`].
//!
//! - [`export`]: the [`Export`] trait the server calls, and [`MemExport`].
//! - [`proto`]: wire constants, option/request parsing, reply encoding.
//! - [`server`]: the tokio [`Server`] (handshake, transmission, shutdown).
//! - [`tls`]: rustls configuration for `NBD_OPT_STARTTLS`.

pub mod export;
pub mod proto;
pub mod server;
pub mod tls;

pub use export::{Export, ExportError, MemExport, StatusRun};
pub use server::{ConnectionError, Server, ServerOptions};
pub use tls::{ServerTls, TlsError, TlsFiles};
