//! The NBD (Network Block Device) protocol: a pure codec for the handshake and
//! transmission phases, and the tokio server that serves one [`Export`].

pub mod export;

pub use export::{Export, ExportError, MemExport, StatusRun};
