//! [`FileDevice`]: an image file or a block device, with positioned I/O
//! (pread/pwrite), optional O_DIRECT and fdatasync for durability, and
//! zero-copy reads into a pipe (splice) for image files in the page cache.
//! Buffered, it starts the kernel's write-back of its dirty pages every
//! 64 MiB written ([`super::early`]), so a sync finds little left to do.
//!
//! Zero-copy and reuse: a spliced page stays shared with the file's page
//! cache until the pipe's reader (through a socket, the NBD client) has
//! copied it, which may be long after the read. Pages are only ever
//! rewritten in place with newer data of the same volume blocks (which a
//! read overlapping the write may see, as NBD allows), except when a slot
//! changes owner: then the volume calls [`BlockDevice::forget`] first,
//! which drops the range from the page cache (`FALLOC_FL_ZERO_RANGE`, or
//! `PUNCH_HOLE` where that is missing) so that pages in flight keep their
//! old contents and the new data goes to new pages. Only filesystems whose
//! fallocate is known to do that (ext4, XFS, btrfs, tmpfs) splice.
//!
//! Creating an image file ([`FileDevice::create_image`]) says why it could
//! not ([`ImageError`]); a size the filesystem does not allow for one file
//! (`EFBIG`, e.g. 16 TiB on ext4 with 4 KiB blocks) is told apart, with the
//! filesystem's limit where it is known ([`FsLimit`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::early::EarlyWriteback;
use super::{check_range, BlockDevice};
use crate::units::ByteSize;

/// Alignment used for O_DIRECT transfers (covers 512 B and 4 KiB sectors).
const DIRECT_ALIGN: usize = 4096;

/// Buffered writes reach the page cache in pieces of at most this many
/// bytes, aligned to it. The size of a write decides the size of the page
/// cache folios it creates, and on ext4 with large folios (Linux 6.x) a
/// 4 KiB write into a 1 MiB folio walks all 256 of its block buffers: five
/// times slower than into a 64 KiB one (docs/performance.md), while reads
/// lose under a sixth.
const WRITE_CHUNK: u64 = 64 * 1024;

/// `statfs` magic numbers of the filesystems whose `fallocate` drops a
/// range's cached pages (ext4, XFS, btrfs, tmpfs).
const SPLICE_FILESYSTEMS: [u64; 4] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994];

/// A device backed by a regular file or a block device node.
pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    direct: bool,
    /// Serialises read-modify-write cycles of unaligned O_DIRECT writes.
    rmw: Mutex<()>,
    /// The kernel refused RWF_NOWAIT writes once: do not try again.
    no_nowait_writes: AtomicBool,
    /// Reads may be spliced: a buffered image file on a filesystem that
    /// [`BlockDevice::forget`] works on.
    splice: bool,
    /// A read was spliced: from now on [`BlockDevice::forget`] must drop
    /// pages (before, nothing can share them).
    spliced: AtomicBool,
    /// Buffered: starts the kernel's write-back every so many bytes
    /// written, so that a sync finds little left to write.
    early: Option<EarlyWriteback>,
}

impl FileDevice {
    /// Open `path` read-write. `direct` bypasses the page cache (O_DIRECT);
    /// unaligned transfers then go through an aligned bounce buffer.
    pub fn open(path: &Path, direct: bool) -> io::Result<Self> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let mut file = opts.open(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display()))
        })?;
        let meta = file.metadata()?;
        let size = if meta.file_type().is_block_device() {
            // Seeking to the end of a block device yields its size in bytes.
            file.seek(SeekFrom::End(0))?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is neither a regular file nor a block device",
                    path.display()
                ),
            ));
        };
        let splice = !direct && meta.is_file() && Self::forgets_pages(&file);
        let early = if direct {
            None
        } else {
            EarlyWriteback::start(&file, &path.display().to_string())
        };
        Ok(FileDevice {
            file,
            path: path.to_path_buf(),
            size,
            direct,
            rmw: Mutex::new(()),
            no_nowait_writes: AtomicBool::new(false),
            splice,
            spliced: AtomicBool::new(false),
            early,
        })
    }

    /// Whether `file` lives on a filesystem whose fallocate detaches cached
    /// pages (see the module documentation).
    fn forgets_pages(file: &File) -> bool {
        rustix::fs::fstatfs(file)
            .map(|st| SPLICE_FILESYSTEMS.contains(&(st.f_type as u64)))
            .unwrap_or(false)
    }

    /// Whether reads of this device can be spliced
    /// ([`BlockDevice::read_to_pipe`] answers).
    pub fn splices(&self) -> bool {
        self.splice
    }

    /// Create a sparse image file of `size` bytes (fails if it exists). A
    /// file it created but could not size or sync is removed again, so
    /// that trying again (with another size) finds nothing in the way.
    pub fn create_image(path: &Path, size: u64) -> Result<(), ImageError> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|source| ImageError::Create {
                path: path.to_path_buf(),
                source,
            })?;
        let sized = match file.set_len(size) {
            Ok(()) => file.sync_all().map_err(|source| ImageError::Sync {
                path: path.to_path_buf(),
                source,
            }),
            Err(source) => Err(ImageError::sizing(path, size, source, fs_limit_of(&file))),
        };
        if sized.is_err() {
            drop(file);
            // Best effort: the error that matters is the one returned.
            let _ = std::fs::remove_file(path);
        }
        sized
    }

    /// Whether the device is a block device node (not an image file).
    pub fn is_block_device(path: &Path) -> bool {
        std::fs::metadata(path)
            .map(|m| m.file_type().is_block_device())
            .unwrap_or(false)
    }

    fn aligned(offset: u64, len: usize, ptr: *const u8) -> bool {
        offset.is_multiple_of(DIRECT_ALIGN as u64)
            && len.is_multiple_of(DIRECT_ALIGN)
            && (ptr as usize).is_multiple_of(DIRECT_ALIGN)
    }

    /// Aligned window `[start, start+len)` covering `[offset, offset+len)`.
    fn window(offset: u64, len: usize) -> (u64, usize) {
        let a = DIRECT_ALIGN as u64;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        (start, (end - start) as usize)
    }
}

/// `statfs` magic number of ext2, ext3 and ext4.
const EXT_MAGIC: u64 = 0xEF53;

/// Why [`FileDevice::create_image`] could not make an image file.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The file could not be created (it exists, its directory is
    /// missing or read-only, …).
    #[error("cannot create {}: {source}", .path.display())]
    Create {
        /// The image file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The filesystem does not allow one file that large (`EFBIG`).
    #[error(
        "cannot make {} {}: {source}: {}",
        .path.display(),
        ByteSize(*.size),
        FsLimitText(*.limit)
    )]
    TooLarge {
        /// The image file.
        path: PathBuf,
        /// The size asked for, in bytes.
        size: u64,
        /// What is known of the filesystem's limit.
        limit: FsLimit,
        /// The error of growing the file.
        #[source]
        source: io::Error,
    },
    /// Growing the file to its size failed otherwise.
    #[error("cannot make {} {}: {source}", .path.display(), ByteSize(*.size))]
    Size {
        /// The image file.
        path: PathBuf,
        /// The size asked for, in bytes.
        size: u64,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The new file could not be synced.
    #[error("cannot sync {}: {source}", .path.display())]
    Sync {
        /// The image file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl ImageError {
    /// The error of growing `path` to `size`: [`ImageError::TooLarge`]
    /// when the filesystem said `EFBIG`.
    fn sizing(path: &Path, size: u64, source: io::Error, limit: FsLimit) -> Self {
        let path = path.to_path_buf();
        if source.raw_os_error() == Some(libc::EFBIG) {
            ImageError::TooLarge {
                path,
                size,
                limit,
                source,
            }
        } else {
            ImageError::Size { path, size, source }
        }
    }

    /// Whether the filesystem refused a file this large.
    pub fn is_too_large(&self) -> bool {
        matches!(self, ImageError::TooLarge { .. })
    }
}

/// What is known of the largest file a filesystem allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsLimit {
    /// ext2/3/4 with blocks of this many bytes: ext4 maps at most 2^32 − 1
    /// blocks per file (16 TiB − 4 KiB with 4 KiB blocks).
    Ext {
        /// The block size.
        block: u64,
    },
    /// Another or unknown filesystem.
    Unknown,
}

/// The limit of the filesystem holding `file`.
fn fs_limit_of(file: &File) -> FsLimit {
    match rustix::fs::fstatfs(file) {
        Ok(st) if st.f_type as u64 == EXT_MAGIC && st.f_bsize > 0 => FsLimit::Ext {
            block: st.f_bsize as u64,
        },
        _ => FsLimit::Unknown,
    }
}

/// [`FsLimit`] as the end of [`ImageError::TooLarge`]'s message.
struct FsLimitText(FsLimit);

impl std::fmt::Display for FsLimitText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            FsLimit::Ext { block } => write!(
                f,
                "the filesystem holding it (ext2/3/4, {} blocks) caps one file at {} − {} \
                 (ext4; less on ext2/3)",
                ByteSize(block),
                ByteSize(block.saturating_mul(1 << 32)),
                ByteSize(block),
            ),
            FsLimit::Unknown => write!(
                f,
                "the filesystem holding it does not allow a file that large"
            ),
        }
    }
}

/// A zeroed buffer whose usable part starts at a `DIRECT_ALIGN` boundary.
struct Bounce {
    raw: Vec<u8>,
    at: usize,
    len: usize,
}

impl Bounce {
    fn new(len: usize) -> Self {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let at = raw.as_ptr().align_offset(DIRECT_ALIGN);
        Bounce { raw, at, len }
    }
    fn buf(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + self.len]
    }
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        if !self.direct || Self::aligned(offset, buf.len(), buf.as_ptr()) {
            return self.file.read_exact_at(buf, offset);
        }
        let (start, len) = Self::window(offset, buf.len());
        let mut bounce = Bounce::new(len);
        self.file.read_exact_at(bounce.buf(), start)?;
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce.buf()[skip..skip + buf.len()]);
        Ok(())
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Option<io::Result<()>> {
        if self.direct {
            return None;
        }
        if let Err(e) = check_range(self.size, offset, buf.len()) {
            return Some(Err(e));
        }
        let want = buf.len();
        let mut iov = [io::IoSliceMut::new(buf)];
        match rustix::io::preadv2(
            &self.file,
            &mut iov,
            offset,
            rustix::io::ReadWriteFlags::NOWAIT,
        ) {
            Ok(n) if n == want => Some(Ok(())),
            // Partly cached, not cached (EAGAIN), or no RWF_NOWAIT support:
            // take the blocking path.
            Ok(_) => None,
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::OPNOTSUPP => None,
            Err(e) => Some(Err(e.into())),
        }
    }

    fn write_at_nowait(&self, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
        if self.direct {
            return None;
        }
        if let Err(e) = check_range(self.size, offset, buf.len()) {
            return Some(Err(e));
        }
        if self.no_nowait_writes.load(Ordering::Relaxed)
            || offset % WRITE_CHUNK + buf.len() as u64 > WRITE_CHUNK
        {
            // Longer than one piece: `write_at` cuts it up.
            return None;
        }
        let iov = [io::IoSlice::new(buf)];
        let r = rustix::io::pwritev2(&self.file, &iov, offset, rustix::io::ReadWriteFlags::NOWAIT);
        if let (Ok(n), Some(early)) = (&r, &self.early) {
            early.wrote(*n as u64);
        }
        match r {
            Ok(n) if n == buf.len() => Some(Ok(())),
            // A short write: finish the rest the blocking way.
            Ok(n) => Some(self.file.write_all_at(&buf[n..], offset + n as u64)),
            Err(e) if e == rustix::io::Errno::AGAIN => None,
            Err(e) if e == rustix::io::Errno::OPNOTSUPP => {
                // Buffered no-wait writes need kernel and filesystem
                // support (ext4 on 6.x kernels lacks it): stop asking.
                self.no_nowait_writes.store(true, Ordering::Relaxed);
                None
            }
            Err(e) => Some(Err(e.into())),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.size, offset, buf.len())?;
        if !self.direct {
            let (mut at, mut rest) = (offset, buf);
            while !rest.is_empty() {
                let n = ((WRITE_CHUNK - at % WRITE_CHUNK) as usize).min(rest.len());
                self.file.write_all_at(&rest[..n], at)?;
                (at, rest) = (at + n as u64, &rest[n..]);
            }
            if let Some(early) = &self.early {
                early.wrote(buf.len() as u64);
            }
            return Ok(());
        }
        if Self::aligned(offset, buf.len(), buf.as_ptr()) {
            return self.file.write_all_at(buf, offset);
        }
        let (start, len) = Self::window(offset, buf.len());
        let skip = (offset - start) as usize;
        let mut bounce = Bounce::new(len);
        if skip == 0 && len == buf.len() {
            // Aligned range, unaligned memory: a plain copy suffices.
            bounce.buf().copy_from_slice(buf);
            return self.file.write_all_at(bounce.buf(), start);
        }
        let _guard = self.rmw.lock();
        self.file.read_exact_at(bounce.buf(), start)?;
        bounce.buf()[skip..skip + buf.len()].copy_from_slice(buf);
        self.file.write_all_at(bounce.buf(), start)
    }

    fn read_to_pipe(
        &self,
        pipe: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Option<io::Result<()>> {
        use rustix::io::Errno;
        use rustix::pipe::{splice, SpliceFlags};
        if !self.splice {
            return None;
        }
        if let Err(e) = check_range(self.size, offset, len) {
            return Some(Err(e));
        }
        // Before the first page is shared (see `forget`).
        self.spliced.store(true, Ordering::SeqCst);
        let (mut at, mut left) = (offset, len);
        while left > 0 {
            // Non-blocking on the pipe: the caller made room for all of
            // it, so a full pipe is an error, never a wait on ourselves.
            match splice(
                &self.file,
                Some(&mut at),
                pipe,
                None,
                left,
                SpliceFlags::NONBLOCK,
            ) {
                Ok(0) => {
                    return Some(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{}: end of file at {at}", self.path.display()),
                    )))
                }
                Ok(n) => left -= n,
                Err(Errno::INTR) => {}
                Err(e) => return Some(Err(e.into())),
            }
        }
        Some(Ok(()))
    }

    fn forget(&self, offset: u64, len: u64) -> io::Result<()> {
        use rustix::fs::{fallocate, FallocateFlags};
        if !self.spliced.load(Ordering::SeqCst) {
            return Ok(());
        }
        let page = DIRECT_ALIGN as u64;
        if !offset.is_multiple_of(page) || !len.is_multiple_of(page) {
            // A partial page would be zeroed in place, under a reader.
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("forget {offset}+{len}: not whole pages"),
            ));
        }
        check_range(self.size, offset, len as usize)?;
        let keep = FallocateFlags::KEEP_SIZE;
        match fallocate(&self.file, FallocateFlags::ZERO_RANGE | keep, offset, len) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP) => {
                fallocate(&self.file, FallocateFlags::PUNCH_HOLE | keep, offset, len)
                    .map_err(io::Error::from)
            }
            Err(e) => Err(e.into()),
        }
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: cannot drop the cached pages of {offset}+{len} before reuse: {e}",
                    self.path.display()
                ),
            )
        })
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(direct: bool) {
        // The repository's filesystem, not /tmp: tmpfs refuses O_DIRECT.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("dev.img");
        FileDevice::create_image(&path, 1 << 20).unwrap();
        let dev = FileDevice::open(&path, direct).unwrap();
        assert_eq!(dev.size(), 1 << 20);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        dev.write_at(&data, 1234).unwrap();
        dev.write_at(&data[..4096], 16384).unwrap();
        let mut back = vec![0u8; data.len()];
        dev.read_at(&mut back, 1234).unwrap();
        assert_eq!(back, data);
        // Just written: in the page cache, so a no-wait read succeeds.
        if !direct {
            let mut again = vec![0u8; 4096];
            match dev.read_at_nowait(&mut again, 16384) {
                Some(r) => r.unwrap(),
                None => panic!("a cached read would block"),
            }
            assert_eq!(again, data[..4096]);
        }
        let mut edge = vec![0u8; 3];
        dev.read_at(&mut edge, 1231).unwrap();
        assert_eq!(edge, [0, 0, 0]);
        assert!(dev.read_at(&mut back, (1 << 20) - 10).is_err());
        dev.sync().unwrap();
    }

    #[test]
    fn buffered_roundtrip() {
        roundtrip(false);
    }

    #[test]
    fn direct_roundtrip() {
        roundtrip(true);
    }

    /// Drain `len` bytes from the read end of a pipe.
    fn drain(r: &std::os::fd::OwnedFd, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = rustix::io::read(r, &mut out[got..]).unwrap();
            assert!(n > 0, "pipe ended early");
            got += n;
        }
        out
    }

    /// What zero-copy reads rely on: a page in a pipe shares the page
    /// cache, so rewriting the range in place changes what the reader gets,
    /// unless the range was forgotten first.
    #[test]
    fn spliced_pages_keep_their_data_once_the_range_is_forgotten() {
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let path = dir.path().join("dev.img");
        FileDevice::create_image(&path, 1 << 20).unwrap();
        let dev = FileDevice::open(&path, false).unwrap();
        assert!(dev.splices(), "ext4 or tmpfs under the repository splices");
        let len = 64 * 1024;
        for forget in [false, true] {
            dev.write_at(&vec![b'A'; len], 8192).unwrap();
            let (r, w) = rustix::pipe::pipe().unwrap();
            dev.read_to_pipe(w.as_fd(), 8192, len)
                .expect("splices")
                .unwrap();
            if forget {
                dev.forget(8192, len as u64).unwrap();
            }
            dev.write_at(&vec![b'B'; len], 8192).unwrap();
            let got = drain(&r, len);
            let want = if forget { b'A' } else { b'B' };
            assert!(
                got.iter().all(|&b| b == want),
                "forget={forget}: the reader saw {:?}",
                got.iter()
                    .copied()
                    .collect::<std::collections::BTreeSet<u8>>()
            );
        }
        assert!(dev.forget(100, 4096).is_err(), "partial pages are refused");
        // O_DIRECT devices do not splice.
        let direct = FileDevice::open(&path, true).unwrap();
        let (_r, w) = rustix::pipe::pipe().unwrap();
        assert!(direct.read_to_pipe(w.as_fd(), 0, 4096).is_none());
    }

    #[test]
    fn efbig_is_told_apart_with_ext4s_limit() {
        let efbig = || io::Error::from_raw_os_error(libc::EFBIG);
        let path = Path::new("/srv/hdd.img");
        let e = ImageError::sizing(path, 16 << 40, efbig(), FsLimit::Ext { block: 4096 });
        assert!(e.is_too_large());
        let text = e.to_string();
        assert!(
            text.starts_with("cannot make /srv/hdd.img 16TiB: "),
            "{text}"
        );
        assert!(text.contains("caps one file at 16TiB − 4KiB"), "{text}");
        assert!(
            std::error::Error::source(&e).is_some(),
            "the OS error is kept"
        );
        let e = ImageError::sizing(path, 16 << 40, efbig(), FsLimit::Unknown);
        assert!(e.to_string().ends_with("does not allow a file that large"));
        let e = ImageError::sizing(
            path,
            1 << 30,
            io::Error::from_raw_os_error(libc::EIO),
            FsLimit::Unknown,
        );
        assert!(!e.is_too_large());
    }

    #[test]
    fn an_image_that_cannot_be_sized_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev.img");
        // Past i64::MAX: refused before any filesystem sees it.
        let e = FileDevice::create_image(&path, u64::MAX).expect_err("too large for off_t");
        assert!(matches!(e, ImageError::Size { .. }), "{e}");
        assert!(!path.exists(), "the empty file is left behind");
        FileDevice::create_image(&path, 4096).expect("a retry finds nothing in the way");
    }

    #[test]
    fn create_refuses_existing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dev.img");
        FileDevice::create_image(&path, 4096).unwrap();
        assert!(FileDevice::create_image(&path, 4096).is_err());
    }
}
