//! The boundary between the NBD server and whatever it serves.
//!
//! [`Export`] is the small object-safe trait the server calls. Data moves
//! through one [`Export::read`] and one [`Export::write`], each taking an
//! [`IoCtx`]: the connection's stream hint, whether the call may wait for a
//! device (without waiting, an export answers [`ExportError::WouldBlock`])
//! and FUA; a short READ goes through [`Export::read_or_wait`], which
//! tells the server just before it would wait. The capability
//! methods say what the export supports; the server derives the
//! transmission flags it advertises from them, and refuses commands the
//! export cannot serve. [`Export::connect`] gives each client connection its
//! own [`ExportConn`], which sees the connection's READs and WRITEs in
//! request order and picks their hint.
//!
//! [`ExportError`] is the one place where failures become NBD errnos (the
//! values are the `E*` constants of [`proto`](super::proto)).

use std::io;
use std::os::fd::BorrowedFd;

use super::proto;
use crate::units::IoHint;

/// Why an export operation failed; each maps to one NBD errno.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The range lies (partly) outside the export.
    #[error("range {offset}+{len} is outside the export")]
    OutOfRange { offset: u64, len: u64 },
    /// No room to store the data.
    #[error("no space left: {0}")]
    NoSpace(String),
    /// The request is not valid for this export.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The operation is not supported (for example a zero that would not be fast).
    #[error("not supported: {0}")]
    NotSupported(String),
    /// The export is read-only.
    #[error("export is read-only")]
    ReadOnly,
    /// A call with [`IoCtx::may_block`] unset would have had to wait;
    /// nothing was done.
    #[error("the operation would block")]
    WouldBlock,
    /// A device failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl ExportError {
    /// The NBD error number sent to the client.
    pub fn errno(&self) -> u32 {
        match self {
            ExportError::OutOfRange { .. } | ExportError::Invalid(_) => proto::EINVAL,
            ExportError::NoSpace(_) => proto::ENOSPC,
            ExportError::NotSupported(_) => proto::ENOTSUP,
            ExportError::ReadOnly => proto::EPERM,
            // Never sent for a call that was allowed to wait, unless the
            // export is broken: then it is an I/O error.
            ExportError::WouldBlock | ExportError::Io(_) => proto::EIO,
        }
    }
}

/// How one READ or WRITE is to be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoCtx {
    /// The connection's stream hint (from [`ExportConn::hint`]).
    pub hint: IoHint,
    /// The call may wait for a device. When unset the export either
    /// completes at once or answers [`ExportError::WouldBlock`] having done
    /// nothing (and recorded nothing).
    pub may_block: bool,
    /// A write is durable before the call returns (`NBD_CMD_FLAG_FUA`).
    pub fua: bool,
}

impl Default for IoCtx {
    /// A plain call that may block: no hint, no FUA.
    fn default() -> Self {
        IoCtx::blocking()
    }
}

impl IoCtx {
    /// May block, no hint, no FUA.
    pub fn blocking() -> Self {
        IoCtx {
            hint: IoHint::default(),
            may_block: true,
            fua: false,
        }
    }

    /// Must not block, no FUA.
    pub fn nowait(hint: IoHint) -> Self {
        IoCtx {
            hint,
            may_block: false,
            fua: false,
        }
    }

    /// This context with `hint`.
    pub fn with_hint(self, hint: IoHint) -> Self {
        IoCtx { hint, ..self }
    }

    /// This context with FUA set or not.
    pub fn with_fua(self, fua: bool) -> Self {
        IoCtx { fua, ..self }
    }
}

/// One run of a block-status answer for `base:allocation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRun {
    /// Length of the run in bytes (never 0).
    pub len: u64,
    /// The run is not allocated (NBD_STATE_HOLE).
    pub hole: bool,
    /// The run reads as zeros (NBD_STATE_ZERO).
    pub zero: bool,
}

/// The per-connection side of an export, made by [`Export::connect`] once a
/// client reaches the transmission phase and dropped when it leaves. The
/// server calls it on the connection's reader, in request order.
pub trait ExportConn: Send {
    /// The hint for a READ or WRITE of `len` bytes at `offset` (called for
    /// every READ and WRITE that will run, in the order the client sent
    /// them).
    fn hint(&mut self, offset: u64, len: u64) -> IoHint;

    /// Told of every request that will run (it passed validation and the
    /// server has room for it), in the order the client sent them, before
    /// it runs. Default: nothing (a recorder of traces listens here).
    fn request(&mut self, _req: &RequestInfo) {}
}

/// What kind of request [`ExportConn::request`] is told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `NBD_CMD_READ`.
    Read,
    /// `NBD_CMD_WRITE`.
    Write,
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// `NBD_CMD_TRIM`.
    Trim,
    /// `NBD_CMD_CACHE`.
    Cache,
    /// `NBD_CMD_WRITE_ZEROES`.
    WriteZeroes,
    /// `NBD_CMD_BLOCK_STATUS`.
    BlockStatus,
}

/// A request as [`ExportConn::request`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestInfo {
    /// Its kind.
    pub kind: RequestKind,
    /// First byte (0 for a flush).
    pub offset: u64,
    /// Bytes it covers (0 for a flush).
    pub len: u64,
    /// `NBD_CMD_FLAG_FUA`.
    pub fua: bool,
}

/// An [`ExportConn`] with no per-connection state: every hint is the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHints;

impl ExportConn for NoHints {
    fn hint(&mut self, _offset: u64, _len: u64) -> IoHint {
        IoHint::default()
    }
}

/// What the NBD server serves. All offsets and lengths are in bytes and are
/// checked against [`Export::size`] by the server before the call; an export
/// still checks them itself and answers [`ExportError::OutOfRange`].
///
/// Methods are synchronous; with [`IoCtx::may_block`] (and for every method
/// without an [`IoCtx`]) they may block on device I/O, and the server then
/// calls them from blocking threads.
///
/// Capabilities: a capability that is only the presence of a required
/// method (flush, FUA, trim, zero, cache, block status) defaults to `true`;
/// one that is a promise about behaviour (fast zero, multi-conn consistency,
/// read-only) defaults to `false`.
pub trait Export: Send + Sync + 'static {
    /// Size of the export in bytes.
    fn size(&self) -> u64;
    /// Fill `buf` with the bytes at `offset`.
    fn read(&self, offset: u64, buf: &mut [u8], ctx: IoCtx) -> Result<(), ExportError>;
    /// A READ that goes down once: served at once when nothing has to
    /// wait (data in the page cache); else `before_wait` is called, once,
    /// just before the first wait (the server hands its socket to another
    /// thread there), and the read goes on waiting from where it was,
    /// recording nothing twice. `ctx.may_block` is not looked at. Default:
    /// [`Export::read`] without waiting, and where it would block,
    /// `before_wait` and [`Export::read`] again, waiting.
    fn read_or_wait(
        &self,
        offset: u64,
        buf: &mut [u8],
        ctx: IoCtx,
        before_wait: &mut dyn FnMut(),
    ) -> Result<(), ExportError> {
        let nowait = IoCtx {
            may_block: false,
            ..ctx
        };
        match self.read(offset, buf, nowait) {
            Err(ExportError::WouldBlock) => {
                before_wait();
                let wait = IoCtx {
                    may_block: true,
                    ..ctx
                };
                self.read(offset, buf, wait)
            }
            other => other,
        }
    }
    /// Zero-copy READ (a capability): move the `len` bytes at `offset`
    /// into the pipe `pipe`, for the server to splice to the socket, and
    /// keep them the data of that range while they are in flight. `None`
    /// when the export cannot for this range: nothing was done and the
    /// server calls [`Export::read`]. On `Some(Err)` part of the data may be
    /// in the pipe. The pipe has room for `len` bytes; `ctx` may block.
    fn read_to_pipe(
        &self,
        _offset: u64,
        _len: u64,
        _pipe: BorrowedFd<'_>,
        _ctx: IoCtx,
    ) -> Option<Result<(), ExportError>> {
        None
    }
    /// A READ of this range waits for a slow device (a capability; default
    /// `false`). The server lets such reads take at most three quarters of
    /// a connection's threads and queues the rest in order, so that the
    /// requests a fast device serves are not held up behind them; asked
    /// once per READ, before it is served, so it must not block.
    fn read_is_slow(&self, _offset: u64, _len: u64) -> bool {
        false
    }
    /// Store `data` at `offset`; with [`IoCtx::fua`] it is durable before
    /// returning.
    fn write(&self, offset: u64, data: &[u8], ctx: IoCtx) -> Result<(), ExportError>;
    /// Make every write acknowledged so far durable.
    fn flush(&self) -> Result<(), ExportError>;
    /// Discard a range (its contents become unspecified; tierd makes them zero).
    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError>;
    /// Make a range read as zeros. `no_hole`: keep it allocated.
    /// `fast`: fail with [`ExportError::NotSupported`] rather than be slow.
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        no_hole: bool,
        fast: bool,
        fua: bool,
    ) -> Result<(), ExportError>;
    /// Hint that a range will be read soon.
    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError>;
    /// Allocation status from `offset`, covering at most `len` bytes, in at
    /// most `max_runs` runs (at least one run, the first starting at `offset`).
    fn block_status(
        &self,
        offset: u64,
        len: u64,
        max_runs: usize,
    ) -> Result<Vec<StatusRun>, ExportError>;

    /// State for one client connection. Default: [`NoHints`].
    fn connect(&self) -> Box<dyn ExportConn> {
        Box::new(NoHints)
    }

    /// The export refuses every change (advertised as `NBD_FLAG_READ_ONLY`).
    fn is_read_only(&self) -> bool {
        false
    }
    /// [`Export::flush`] works (`NBD_FLAG_SEND_FLUSH`).
    fn can_flush(&self) -> bool {
        true
    }
    /// [`IoCtx::fua`] and the `fua` arguments are honoured (`NBD_FLAG_SEND_FUA`).
    fn can_fua(&self) -> bool {
        true
    }
    /// [`Export::trim`] works (`NBD_FLAG_SEND_TRIM`).
    fn can_trim(&self) -> bool {
        true
    }
    /// [`Export::write_zeroes`] works (`NBD_FLAG_SEND_WRITE_ZEROES`).
    fn can_zero(&self) -> bool {
        true
    }
    /// [`Export::write_zeroes`] honours `fast`: it fails with
    /// [`ExportError::NotSupported`] rather than be slow
    /// (`NBD_FLAG_SEND_FAST_ZERO`).
    fn can_fast_zero(&self) -> bool {
        false
    }
    /// [`Export::cache`] works (`NBD_FLAG_SEND_CACHE`).
    fn can_cache(&self) -> bool {
        true
    }
    /// Every connection sees every other's completed writes, and a flush on
    /// one covers writes of all (`NBD_FLAG_CAN_MULTI_CONN`).
    fn can_multi_conn(&self) -> bool {
        false
    }
    /// [`Export::block_status`] works (the `base:allocation` context is
    /// offered).
    fn can_block_status(&self) -> bool {
        true
    }
}
