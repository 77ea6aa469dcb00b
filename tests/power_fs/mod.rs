//! A FUSE filesystem in memory that can lose power: every file keeps its
//! contents as of its last `fsync`/`fdatasync` apart from the live ones,
//! and [`PowerFs::power_cut`] throws away, in every file at once, what was
//! written since (size changes included). A real `tierd serve` keeps its
//! image files and its metadata store (sled) on it; a test kills the
//! daemon with SIGKILL, cuts the power and starts it again, and the daemon
//! then finds exactly what it had made durable: its devices as of their
//! last sync and the store as of its last flush.
//!
//! The model is the harshest a power cut allows for file data: nothing
//! unsynced survives (a real disk may keep some of it, which the crash
//! loop's kills cover). Names are simpler: creating, renaming and removing
//! files and directories is durable at once (as a journalling filesystem
//! with ordered metadata mostly makes them), and `fsyncdir` has nothing to
//! do. Every file is opened with `FOPEN_DIRECT_IO`, so the kernel keeps no
//! cached copy of a file's pages that could outlive the cut.
//!
//! [`PowerFs::fail`] makes one file fail every request with EIO: a disk
//! that dies while the daemon runs.
//!
//! Needs root and `/dev/fuse` (the mount is a `mount(2)` of its own, no
//! `fusermount3`).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, FUSE_ROOT_ID,
};
use parking_lot::Mutex;

const PAGE: u64 = 4096;
/// No attribute or name caching in the kernel: sizes change at a cut.
const TTL: Duration = Duration::ZERO;

/// Pages of a file (absent: zeros) and its size.
#[derive(Clone, Default)]
struct Pages {
    size: u64,
    pages: HashMap<u64, Box<[u8]>>,
}

/// A file's live contents, its durable contents, and which pages differ.
#[derive(Default)]
struct FileData {
    live: Pages,
    durable: Pages,
    dirty: BTreeSet<u64>,
    size_dirty: bool,
}

impl FileData {
    fn write(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let at = off + done as u64;
            let (p, in_page) = (at / PAGE, (at % PAGE) as usize);
            let n = (PAGE as usize - in_page).min(data.len() - done);
            let page = self
                .live
                .pages
                .entry(p)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            page[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
            self.dirty.insert(p);
            done += n;
        }
        let end = off + data.len() as u64;
        if end > self.live.size {
            self.live.size = end;
            self.size_dirty = true;
        }
    }

    fn read(&self, off: u64, len: u64) -> Vec<u8> {
        let end = (off + len).min(self.live.size);
        if off >= end {
            return Vec::new();
        }
        let mut out = vec![0u8; (end - off) as usize];
        let mut at = off;
        while at < end {
            let (p, in_page) = (at / PAGE, (at % PAGE) as usize);
            let n = (PAGE - in_page as u64).min(end - at) as usize;
            if let Some(page) = self.live.pages.get(&p) {
                let o = (at - off) as usize;
                out[o..o + n].copy_from_slice(&page[in_page..in_page + n]);
            }
            at += n as u64;
        }
        out
    }

    fn truncate(&mut self, size: u64) {
        if size < self.live.size {
            let first_gone = size.div_ceil(PAGE);
            let gone: Vec<u64> = self
                .live
                .pages
                .keys()
                .copied()
                .filter(|&p| p >= first_gone)
                .collect();
            for p in gone {
                self.live.pages.remove(&p);
                self.dirty.insert(p);
            }
            if !size.is_multiple_of(PAGE) {
                let p = size / PAGE;
                if let Some(page) = self.live.pages.get_mut(&p) {
                    page[(size % PAGE) as usize..].fill(0);
                    self.dirty.insert(p);
                }
            }
        }
        self.live.size = size;
        self.size_dirty = true;
    }

    /// `fsync`: the live contents become durable.
    fn sync(&mut self) {
        for p in std::mem::take(&mut self.dirty) {
            match self.live.pages.get(&p) {
                Some(page) => self.durable.pages.insert(p, page.clone()),
                None => self.durable.pages.remove(&p),
            };
        }
        self.durable.size = self.live.size;
        self.size_dirty = false;
    }

    /// The power fails: the live contents go back to the durable ones.
    /// Returns the pages lost.
    fn cut(&mut self) -> u64 {
        let lost = self.dirty.len() as u64;
        for p in std::mem::take(&mut self.dirty) {
            match self.durable.pages.get(&p) {
                Some(page) => self.live.pages.insert(p, page.clone()),
                None => self.live.pages.remove(&p),
            };
        }
        self.live.size = self.durable.size;
        self.size_dirty = false;
        lost
    }
}

enum Kind {
    Dir(BTreeMap<OsString, u64>),
    File(FileData),
}

struct Node {
    parent: u64,
    perm: u16,
    mtime: SystemTime,
    kind: Kind,
}

/// The filesystem's state, shared by the FUSE session and the test.
struct State {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// fsyncs so far, and pages lost at cuts so far.
    syncs: u64,
    pages_lost: u64,
    /// Files that fail every read, write and sync with EIO (a dead disk).
    failed: BTreeSet<u64>,
}

impl State {
    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let n = self.nodes.get(&ino)?;
        let (kind, size, nlink) = match &n.kind {
            Kind::Dir(_) => (FileType::Directory, 0, 2),
            Kind::File(f) => (FileType::RegularFile, f.live.size, 1),
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: n.mtime,
            kind,
            perm: n.perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    fn dir(&mut self, ino: u64) -> Result<&mut BTreeMap<OsString, u64>, i32> {
        match self.nodes.get_mut(&ino).map(|n| &mut n.kind) {
            Some(Kind::Dir(d)) => Ok(d),
            Some(Kind::File(_)) => Err(libc::ENOTDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn file(&mut self, ino: u64) -> Result<&mut FileData, i32> {
        if self.failed.contains(&ino) {
            return Err(libc::EIO);
        }
        match self.nodes.get_mut(&ino).map(|n| &mut n.kind) {
            Some(Kind::File(f)) => Ok(f),
            Some(Kind::Dir(_)) => Err(libc::EISDIR),
            None => Err(libc::ENOENT),
        }
    }

    fn lookup(&mut self, parent: u64, name: &OsStr) -> Result<u64, i32> {
        self.dir(parent)?.get(name).copied().ok_or(libc::ENOENT)
    }

    fn make(&mut self, parent: u64, name: &OsStr, mode: u32, kind: Kind) -> Result<u64, i32> {
        if self.dir(parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                perm: (mode & 0o7777) as u16,
                mtime: SystemTime::now(),
                kind,
            },
        );
        self.dir(parent)?.insert(name.to_os_string(), ino);
        Ok(ino)
    }

    /// Remove `name` from `parent` (a directory only when `dir`, and then
    /// only an empty one).
    fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> Result<(), i32> {
        let ino = self.lookup(parent, name)?;
        match (&self.nodes[&ino].kind, dir) {
            (Kind::Dir(d), true) if !d.is_empty() => return Err(libc::ENOTEMPTY),
            (Kind::Dir(_), false) => return Err(libc::EISDIR),
            (Kind::File(_), true) => return Err(libc::ENOTDIR),
            _ => {}
        }
        self.dir(parent)?.remove(name);
        self.nodes.remove(&ino);
        Ok(())
    }

    fn rename(&mut self, from: u64, name: &OsStr, to: u64, new: &OsStr) -> Result<(), i32> {
        let ino = self.lookup(from, name)?;
        if let Ok(old) = self.lookup(to, new) {
            if old == ino {
                return Ok(());
            }
            let is_dir = matches!(self.nodes[&old].kind, Kind::Dir(_));
            self.remove(to, new, is_dir)?;
        }
        self.dir(from)?.remove(name);
        self.dir(to)?.insert(new.to_os_string(), ino);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = to;
        }
        Ok(())
    }
}

/// The FUSE side: answers the kernel from the shared [`State`].
struct Fs(Arc<Mutex<State>>);

fn answer_entry(st: &State, r: Result<u64, i32>, reply: ReplyEntry) {
    match r.and_then(|ino| st.attr(ino).ok_or(libc::ENOENT)) {
        Ok(a) => reply.entry(&TTL, &a, 0),
        Err(e) => reply.error(e),
    }
}

fn answer_empty(r: Result<(), i32>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Fs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.0.lock();
        let r = st.lookup(parent, name);
        answer_entry(&st, r, reply);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match self.0.lock().attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut st = self.0.lock();
        if let Some(size) = size {
            match st.file(ino) {
                Ok(f) => f.truncate(size),
                Err(e) => return reply.error(e),
            }
        }
        if let (Some(mode), Some(n)) = (mode, st.nodes.get_mut(&ino)) {
            n.perm = (mode & 0o7777) as u16;
        }
        match st.attr(ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(libc::ENOENT),
        }
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = self.0.lock();
        let r = st.make(parent, name, mode, Kind::Dir(BTreeMap::new()));
        answer_entry(&st, r, reply);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        answer_empty(self.0.lock().remove(parent, name, false), reply);
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        answer_empty(self.0.lock().remove(parent, name, true), reply);
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        _flags: u32,
        reply: ReplyEmpty,
    ) {
        answer_empty(
            self.0.lock().rename(parent, name, newparent, newname),
            reply,
        );
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.0.lock().nodes.get(&ino) {
            Some(_) => reply.opened(0, fuser::consts::FOPEN_DIRECT_IO),
            None => reply.error(libc::ENOENT),
        }
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.0.lock();
        let r = st.make(parent, name, mode, Kind::File(FileData::default()));
        match r.and_then(|ino| st.attr(ino).ok_or(libc::ENOENT)) {
            Ok(a) => reply.created(&TTL, &a, 0, 0, fuser::consts::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let mut st = self.0.lock();
        match st.file(ino) {
            Ok(f) => reply.data(&f.read(offset.max(0) as u64, u64::from(size))),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut st = self.0.lock();
        match st.file(ino) {
            Ok(f) => {
                f.write(offset.max(0) as u64, data);
                reply.written(data.len() as u32);
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.0.lock();
        st.syncs += 1;
        answer_empty(st.file(ino).map(FileData::sync), reply);
    }

    fn fsyncdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock: u64, reply: ReplyEmpty) {
        reply.ok();
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.0.lock();
        let parent = st.nodes.get(&ino).map_or(FUSE_ROOT_ID, |n| n.parent);
        let entries: Vec<(u64, FileType, OsString)> = match st.dir(ino) {
            Ok(d) => d
                .iter()
                .map(|(name, &child)| (child, FileType::RegularFile, name.clone()))
                .collect(),
            Err(e) => return reply.error(e),
        };
        let mut all = vec![
            (ino, FileType::Directory, OsString::from(".")),
            (parent, FileType::Directory, OsString::from("..")),
        ];
        for (child, _, name) in entries {
            let kind = match st.nodes.get(&child).map(|n| &n.kind) {
                Some(Kind::Dir(_)) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            all.push((child, kind, name));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(child, (i + 1) as i64, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        // Room enough for any test's images: 1 TiB in 4 KiB blocks.
        let blocks = (1u64 << 40) / PAGE;
        reply.statfs(
            blocks,
            blocks,
            blocks,
            1 << 20,
            1 << 20,
            PAGE as u32,
            255,
            PAGE as u32,
        );
    }
}

/// A mounted [`PowerFs`]; unmounted when dropped.
pub struct PowerFs {
    state: Arc<Mutex<State>>,
    mount: PathBuf,
    session: Option<fuser::BackgroundSession>,
}

/// Counts of a [`PowerFs`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PowerFsFigures {
    /// `fsync`/`fdatasync` calls served.
    pub syncs: u64,
    /// 4 KiB pages whose unsynced contents were thrown away by cuts.
    pub pages_lost: u64,
}

impl PowerFs {
    /// Mount an empty filesystem at `mount` (an existing empty directory).
    pub fn mount(mount: &Path) -> PowerFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            FUSE_ROOT_ID,
            Node {
                parent: FUSE_ROOT_ID,
                perm: 0o755,
                mtime: SystemTime::now(),
                kind: Kind::Dir(BTreeMap::new()),
            },
        );
        let state = Arc::new(Mutex::new(State {
            nodes,
            next_ino: FUSE_ROOT_ID + 1,
            syncs: 0,
            pages_lost: 0,
            failed: BTreeSet::new(),
        }));
        let opts = [
            MountOption::FSName("tierd-powerfs".into()),
            MountOption::RW,
            MountOption::Exec,
        ];
        let session = fuser::spawn_mount2(Fs(state.clone()), mount, &opts).unwrap_or_else(|e| {
            panic!(
                "mounting the power-cut filesystem at {}: {e} (needs root and /dev/fuse)",
                mount.display()
            )
        });
        PowerFs {
            state,
            mount: mount.to_path_buf(),
            session: Some(session),
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Cut the power: every file loses what was written since its last
    /// sync. Whoever wrote must be dead by now (kill and reap it first).
    /// Returns the pages lost by this cut.
    pub fn power_cut(&self) -> u64 {
        let mut st = self.state.lock();
        let mut lost = 0;
        for n in st.nodes.values_mut() {
            if let Kind::File(f) = &mut n.kind {
                lost += f.cut();
            }
        }
        st.pages_lost += lost;
        lost
    }

    /// Make the file `name` (in the filesystem's root) fail every read,
    /// write and sync with EIO from now on, as a dead disk does.
    pub fn fail(&self, name: &str) {
        let mut st = self.state.lock();
        let ino = st
            .lookup(FUSE_ROOT_ID, OsStr::new(name))
            .unwrap_or_else(|e| panic!("no file {name} to fail: errno {e}"));
        st.failed.insert(ino);
    }

    pub fn figures(&self) -> PowerFsFigures {
        let st = self.state.lock();
        PowerFsFigures {
            syncs: st.syncs,
            pages_lost: st.pages_lost,
        }
    }
}

impl Drop for PowerFs {
    fn drop(&mut self) {
        // Dropping the session unmounts and joins its thread.
        drop(self.session.take());
    }
}
