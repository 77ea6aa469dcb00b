//! What the handshake settles for the transmission phase: the
//! [`Session`] (structured replies, the `base:allocation` context, the
//! export's size) and the export's capabilities ([`Caps`]), from which the
//! transmission flags are derived, never fixed.

use super::export::Export;
use super::proto;

/// Context id of `base:allocation` after `NBD_OPT_SET_META_CONTEXT`.
pub(super) const BASE_ALLOCATION_ID: u32 = 1;
/// What the export can do, read once per connection from its capability
/// methods (plus the server's own read-only option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Caps {
    pub(super) read_only: bool,
    pub(super) flush: bool,
    pub(super) fua: bool,
    pub(super) trim: bool,
    pub(super) zero: bool,
    pub(super) fast_zero: bool,
    pub(super) cache: bool,
    pub(super) multi_conn: bool,
    pub(super) block_status: bool,
}

impl Caps {
    /// The capabilities of `export`; `read_only` forces a read-only export.
    pub(super) fn of(export: &dyn Export, read_only: bool) -> Caps {
        let zero = export.can_zero();
        Caps {
            read_only: read_only || export.is_read_only(),
            flush: export.can_flush(),
            fua: export.can_fua(),
            trim: export.can_trim(),
            zero,
            fast_zero: zero && export.can_fast_zero(),
            cache: export.can_cache(),
            multi_conn: export.can_multi_conn(),
            block_status: export.can_block_status(),
        }
    }

    /// The transmission flags to advertise. `NBD_FLAG_SEND_DF` comes with
    /// structured replies (every read is answered in one chunk).
    pub(super) fn flags(&self, structured: bool) -> u16 {
        let mut flags = proto::FLAG_HAS_FLAGS;
        for (on, flag) in [
            (self.read_only, proto::FLAG_READ_ONLY),
            (self.flush, proto::FLAG_SEND_FLUSH),
            (self.fua, proto::FLAG_SEND_FUA),
            (self.trim, proto::FLAG_SEND_TRIM),
            (self.zero, proto::FLAG_SEND_WRITE_ZEROES),
            (self.fast_zero, proto::FLAG_SEND_FAST_ZERO),
            (self.cache, proto::FLAG_SEND_CACHE),
            (self.multi_conn, proto::FLAG_CAN_MULTI_CONN),
            (structured, proto::FLAG_SEND_DF),
        ] {
            if on {
                flags |= flag;
            }
        }
        flags
    }
}

/// What the handshake settled for the transmission phase.
#[derive(Debug, Clone, Copy)]
pub(super) struct Session {
    pub(super) structured: bool,
    pub(super) base_allocation: bool,
    pub(super) size: u64,
    pub(super) caps: Caps,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nbd::MemExport;

    /// The flags every release before capability-derived flags sent.
    const FIXED: u16 = proto::FLAG_HAS_FLAGS
        | proto::FLAG_SEND_FLUSH
        | proto::FLAG_SEND_FUA
        | proto::FLAG_SEND_TRIM
        | proto::FLAG_SEND_WRITE_ZEROES
        | proto::FLAG_SEND_FAST_ZERO
        | proto::FLAG_SEND_CACHE
        | proto::FLAG_CAN_MULTI_CONN;

    #[test]
    fn mem_export_flags_are_the_full_set() {
        let caps = Caps::of(&MemExport::new(4096), false);
        assert_eq!(caps.flags(false), FIXED);
        assert_eq!(caps.flags(true), FIXED | proto::FLAG_SEND_DF);
        let ro = Caps::of(&MemExport::new(4096), true);
        assert_eq!(ro.flags(false), FIXED | proto::FLAG_READ_ONLY);
    }

    /// An export that keeps every default capability.
    struct Plain;

    impl Export for Plain {
        fn size(&self) -> u64 {
            0
        }
        fn read(
            &self,
            _: u64,
            _: &mut [u8],
            _: crate::nbd::IoCtx,
        ) -> Result<(), crate::nbd::ExportError> {
            Ok(())
        }
        fn write(
            &self,
            _: u64,
            _: &[u8],
            _: crate::nbd::IoCtx,
        ) -> Result<(), crate::nbd::ExportError> {
            Ok(())
        }
        fn flush(&self) -> Result<(), crate::nbd::ExportError> {
            Ok(())
        }
        fn trim(&self, _: u64, _: u64, _: bool) -> Result<(), crate::nbd::ExportError> {
            Ok(())
        }
        fn write_zeroes(
            &self,
            _: u64,
            _: u64,
            _: bool,
            _: bool,
            _: bool,
        ) -> Result<(), crate::nbd::ExportError> {
            Ok(())
        }
        fn cache(&self, _: u64, _: u64) -> Result<(), crate::nbd::ExportError> {
            Ok(())
        }
        fn block_status(
            &self,
            _: u64,
            _: u64,
            _: usize,
        ) -> Result<Vec<crate::nbd::StatusRun>, crate::nbd::ExportError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn default_capabilities_promise_nothing_about_behaviour() {
        let caps = Caps::of(&Plain, false);
        let flags = caps.flags(false);
        assert_eq!(
            flags & (proto::FLAG_SEND_FAST_ZERO | proto::FLAG_CAN_MULTI_CONN),
            0
        );
        assert_eq!(
            flags,
            FIXED & !(proto::FLAG_SEND_FAST_ZERO | proto::FLAG_CAN_MULTI_CONN)
        );
    }
}
