//! The few librados calls the RADOS tier needs, bound at run time: the
//! library (`librados.so.2`, Debian's `librados2`) is opened when a RADOS
//! tier is configured, so tierd builds and runs without Ceph installed and
//! says clearly when a RADOS tier is asked for and the library is missing.
//!
//! Every `unsafe` block of the crate's RADOS support is here, each with the
//! reason it is sound. The signatures are those of `rados/librados.h`
//! (Ceph 16 "Pacific" and later; unchanged since the calls were added).

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;

use libloading::Library;

type RadosT = *mut c_void;
type IoctxT = *mut c_void;

type CreateFn = unsafe extern "C" fn(*mut RadosT, *const c_char) -> c_int;
type ConfReadFileFn = unsafe extern "C" fn(RadosT, *const c_char) -> c_int;
type ConfSetFn = unsafe extern "C" fn(RadosT, *const c_char, *const c_char) -> c_int;
type ConnectFn = unsafe extern "C" fn(RadosT) -> c_int;
type ShutdownFn = unsafe extern "C" fn(RadosT);
type IoctxCreateFn = unsafe extern "C" fn(RadosT, *const c_char, *mut IoctxT) -> c_int;
type IoctxDestroyFn = unsafe extern "C" fn(IoctxT);
type ReadFn = unsafe extern "C" fn(IoctxT, *const c_char, *mut c_char, usize, u64) -> c_int;
type WriteFn = unsafe extern "C" fn(IoctxT, *const c_char, *const c_char, usize, u64) -> c_int;

/// The library and the entry points we call.
struct Api {
    create: CreateFn,
    conf_read_file: ConfReadFileFn,
    conf_set: ConfSetFn,
    connect: ConnectFn,
    shutdown: ShutdownFn,
    ioctx_create: IoctxCreateFn,
    ioctx_destroy: IoctxDestroyFn,
    read: ReadFn,
    write: WriteFn,
    /// Kept open as long as the function pointers above are used.
    _lib: Library,
}

/// A librados error: the call and the (positive) errno it returned.
fn rados_err(call: &str, ret: c_int) -> io::Error {
    let e = io::Error::from_raw_os_error(-ret);
    io::Error::new(e.kind(), format!("{call}: {e}"))
}

fn cstr(s: &str, what: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {s:?} contains a NUL byte"),
        )
    })
}

impl Api {
    fn load() -> io::Result<Api> {
        // SAFETY: loading librados runs its ELF initialisers, which set up
        // static state only (no code of ours runs, nothing is unloaded
        // while in use: `_lib` lives as long as the `Api`, which the
        // `Cluster` owns for as long as any handle exists).
        let lib = unsafe { Library::new("librados.so.2") }.map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("cannot load librados (install Debian's librados2): {e}"),
            )
        })?;
        macro_rules! sym {
            ($name:literal, $t:ty) => {{
                // SAFETY: the symbol is looked up by its C name and given
                // the type librados.h declares for it; the pointer is
                // copied out and used only while `lib` is alive (see
                // `_lib`).
                let s = unsafe { lib.get::<$t>($name) }.map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("librados lacks a symbol: {e}"),
                    )
                })?;
                *s
            }};
        }
        Ok(Api {
            create: sym!(b"rados_create\0", CreateFn),
            conf_read_file: sym!(b"rados_conf_read_file\0", ConfReadFileFn),
            conf_set: sym!(b"rados_conf_set\0", ConfSetFn),
            connect: sym!(b"rados_connect\0", ConnectFn),
            shutdown: sym!(b"rados_shutdown\0", ShutdownFn),
            ioctx_create: sym!(b"rados_ioctx_create\0", IoctxCreateFn),
            ioctx_destroy: sym!(b"rados_ioctx_destroy\0", IoctxDestroyFn),
            read: sym!(b"rados_read\0", ReadFn),
            write: sym!(b"rados_write\0", WriteFn),
            _lib: lib,
        })
    }
}

/// A connection to a cluster and an I/O context on one pool.
pub struct Pool {
    api: Api,
    cluster: RadosT,
    ioctx: IoctxT,
}

// SAFETY: librados handles are plain pointers to objects librados itself
// synchronises: a cluster handle and an I/O context may be used from any
// thread, and I/O calls on one I/O context may run concurrently as long as
// its settings (snapshot, locator key, namespace) are not changed, which
// this type never does (librados.h, `rados_ioctx_t`). The handles are
// destroyed only in `Drop`, when no call can be running.
unsafe impl Send for Pool {}
// SAFETY: see `Send`: every method takes `&self` and only performs I/O
// calls, which librados allows concurrently on one I/O context.
unsafe impl Sync for Pool {}

impl Pool {
    /// Connect as `user` with the configuration file `conf` (and `options`
    /// set on top) and open `pool`.
    pub fn connect(
        conf: &str,
        user: &str,
        options: &[(&str, String)],
        pool: &str,
    ) -> io::Result<Pool> {
        let api = Api::load()?;
        let user_c = cstr(user, "user")?;
        let conf_c = cstr(conf, "configuration path")?;
        let pool_c = cstr(pool, "pool")?;
        let mut cluster: RadosT = std::ptr::null_mut();
        // SAFETY: `cluster` is a valid out-pointer; `user_c` is a
        // NUL-terminated string alive for the call.
        let r = unsafe { (api.create)(&mut cluster, user_c.as_ptr()) };
        if r < 0 {
            return Err(rados_err("rados_create", r));
        }
        // From here on the cluster handle is shut down on every error path.
        let fail = |api: &Api, cluster: RadosT, e: io::Error| {
            // SAFETY: `cluster` came from a successful rados_create and is
            // not used after this.
            unsafe { (api.shutdown)(cluster) };
            Err(e)
        };
        // SAFETY: `cluster` is a live handle not yet connected; `conf_c`
        // is NUL-terminated and alive for the call.
        let r = unsafe { (api.conf_read_file)(cluster, conf_c.as_ptr()) };
        if r < 0 {
            return fail(&api, cluster, rados_err(&format!("reading {conf}"), r));
        }
        for (k, v) in options {
            let (k_c, v_c) = (cstr(k, "option")?, cstr(v, "option value")?);
            // SAFETY: as above; both strings are NUL-terminated and alive.
            let r = unsafe { (api.conf_set)(cluster, k_c.as_ptr(), v_c.as_ptr()) };
            if r < 0 {
                return fail(&api, cluster, rados_err(&format!("setting {k}"), r));
            }
        }
        // SAFETY: `cluster` is configured and not yet connected.
        let r = unsafe { (api.connect)(cluster) };
        if r < 0 {
            return fail(&api, cluster, rados_err("connecting to the cluster", r));
        }
        let mut ioctx: IoctxT = std::ptr::null_mut();
        // SAFETY: `cluster` is connected; `pool_c` is NUL-terminated and
        // alive; `ioctx` is a valid out-pointer.
        let r = unsafe { (api.ioctx_create)(cluster, pool_c.as_ptr(), &mut ioctx) };
        if r < 0 {
            return fail(&api, cluster, rados_err(&format!("opening pool {pool}"), r));
        }
        Ok(Pool {
            api,
            cluster,
            ioctx,
        })
    }

    /// Read into `buf` from `oid` at `off`: the bytes read (fewer at the
    /// object's end), or `None` when the object does not exist.
    pub fn read(&self, oid: &str, buf: &mut [u8], off: u64) -> io::Result<Option<usize>> {
        let oid_c = cstr(oid, "object name")?;
        // SAFETY: `ioctx` is live (destroyed only in Drop); `buf` is valid
        // for writes of `buf.len()` bytes for the call's duration and
        // librados writes at most `len` bytes into it.
        let r = unsafe {
            (self.api.read)(
                self.ioctx,
                oid_c.as_ptr(),
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len(),
                off,
            )
        };
        match r {
            r if r >= 0 => Ok(Some(r as usize)),
            r if -r == libc::ENOENT => Ok(None),
            r => Err(rados_err(&format!("reading {oid}"), r)),
        }
    }

    /// Write `buf` into `oid` at `off` (the object is created if needed).
    /// Returns once the write is durable on the acting OSDs.
    pub fn write(&self, oid: &str, buf: &[u8], off: u64) -> io::Result<()> {
        let oid_c = cstr(oid, "object name")?;
        // SAFETY: `ioctx` is live; `buf` is valid for reads of
        // `buf.len()` bytes for the call's duration.
        let r = unsafe {
            (self.api.write)(
                self.ioctx,
                oid_c.as_ptr(),
                buf.as_ptr().cast::<c_char>(),
                buf.len(),
                off,
            )
        };
        if r < 0 {
            return Err(rados_err(&format!("writing {oid}"), r));
        }
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: both handles came from successful calls, are used by no
        // other call now (`&mut self`), and are not used after this.
        unsafe {
            (self.api.ioctx_destroy)(self.ioctx);
            (self.api.shutdown)(self.cluster);
        }
    }
}
