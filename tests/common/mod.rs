//! Shared helpers of the real-client integration tests: a [`Daemon`] that
//! runs the real `tierd serve` binary on a private port and data directory,
//! helpers that run external commands with a timeout and fail loudly, and
//! [`require`], which panics when a client tool is missing (no silent skips).
//!
//! Each integration test file compiles this module on its own and uses only
//! part of it, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a daemon may take to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a daemon may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default timeout of an external client command.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(120);

pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * 1024;

/// Which package provides a client tool (for the missing-tool message).
fn package_of(tool: &str) -> &'static str {
    match tool {
        "nbdinfo" | "nbdcopy" | "nbdfuse" | "nbdsh" => "libnbd-bin",
        "nbdkit" => "nbdkit",
        "qemu-img" | "qemu-io" | "qemu-nbd" => "qemu-utils",
        "fio" => "fio",
        "fusermount3" => "fuse3",
        "mkfs.ext4" | "e2fsck" => "e2fsprogs",
        "losetup" | "mount" | "umount" | "findmnt" => "util-linux (and mount)",
        "sha256sum" => "coreutils",
        "openssl" => "openssl",
        _ => "the package that provides it",
    }
}

/// Find `tool` on PATH (or in the sbin directories, which a non-login PATH
/// may lack).
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(extra)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Panic loudly unless `tool` is installed; returns its path.
pub fn require(tool: &str) -> PathBuf {
    which(tool).unwrap_or_else(|| {
        panic!(
            "{tool} not found: install {} (scripts/test.sh does this)",
            package_of(tool)
        )
    })
}

/// Panic loudly unless we are root (loop devices, mounts).
pub fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{what} needs root (loop devices and mounts); run the suite as root as CI does"
    );
}

/// Path of a binary of this workspace (`tierd`, `tierctl`): from the env
/// override (`TIERD_BIN` / `TIERCTL_BIN`), else next to the test executable's
/// `deps` directory.
pub fn bin(name: &str) -> PathBuf {
    let var = format!("{}_BIN", name.to_uppercase());
    if let Some(p) = std::env::var_os(&var) {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "{var}={} does not exist", p.display());
        return p;
    }
    let exe = std::env::current_exe().expect("locating the test executable");
    // target/debug/deps/<test> -> target/debug/<name>
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable is in target/<profile>/deps");
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} not found: build it first: cargo build --workspace (or set {var})",
        p.display()
    );
    p
}

pub fn tierd_bin() -> PathBuf {
    bin("tierd")
}

pub fn tierctl_bin() -> PathBuf {
    bin("tierctl")
}

/// A temporary directory on the target disk (not /tmp, which may be small).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("creating a temp dir in the target dir")
}

/// Render a command for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn drain<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// Run `cmd` to completion with captured output, killing it after `timeout`
/// (which is a failure).
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let what = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning `{what}`: {e}"));
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait().expect("waiting for a child") {
            Some(st) => break st,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                let stdout = out.join().unwrap_or_default();
                let stderr = err.join().unwrap_or_default();
                panic!(
                    "`{what}` timed out after {timeout:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    Output {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// Run `cmd` and return its output, whatever its status.
pub fn run(cmd: &mut Command) -> Output {
    run_timeout(cmd, CMD_TIMEOUT)
}

/// Format an output for failure messages.
pub fn show(what: &str, out: &Output) -> String {
    format!(
        "`{what}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `cmd`, assert it succeeds, and return its stdout as text.
pub fn run_ok(cmd: &mut Command) -> String {
    run_ok_timeout(cmd, CMD_TIMEOUT)
}

/// [`run_ok`] with an explicit timeout.
pub fn run_ok_timeout(cmd: &mut Command, timeout: Duration) -> String {
    let what = describe(cmd);
    let out = run_timeout(cmd, timeout);
    assert!(out.status.success(), "{}", show(&what, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Build a command for a required tool.
pub fn tool(name: &str) -> Command {
    Command::new(require(name))
}

/// `tierctl --control SOCK ARGS` (no colour); it must succeed. Returns
/// stdout.
pub fn tierctl_ok(sock: &Path, args: &[&str]) -> String {
    let out = run(Command::new(tierctl_bin())
        .arg("--control")
        .arg(sock)
        .args(args)
        .env("NO_COLOR", "1"));
    assert!(
        out.status.success(),
        "{}",
        show(&format!("tierctl {args:?}"), &out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `qemu-io -f raw -c CMD ... URI`; it must succeed.
pub fn qemu_io_all(uri: &str, cmds: &[&str]) {
    let mut c = tool("qemu-io");
    c.args(["-f", "raw"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    run_ok(c.arg(uri));
}

/// Deterministic pseudo-random bytes (xorshift64*: cheap even in debug
/// builds, which matters for tens of MiB).
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Poll `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A number from the environment, decimal or `0x` hex (the crash tests
/// print their seeds in hex).
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse(),
        }
        .unwrap_or_else(|e| panic!("{name}={v:?} is not a number: {e}"))
    })
}

/// A free TCP port on loopback (bound, read and released).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding an ephemeral port");
    l.local_addr().expect("reading the ephemeral port").port()
}

/// Sizes of the images a [`Daemon`] creates on first start.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub ssd_size: String,
    pub hdd_size: String,
    pub extent_size: String,
    /// `--log-level` (default `info`).
    pub log_level: String,
    /// Further `tierd serve` arguments.
    pub extra_args: Vec<String>,
    /// Extra environment variables of the daemon (e.g. `TIERD_*`).
    pub env: Vec<(String, String)>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            ssd_size: "256MiB".into(),
            hdd_size: "1GiB".into(),
            extent_size: "1MiB".into(),
            log_level: "info".into(),
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

impl DaemonOptions {
    /// A small volume (64 MiB SSD + 256 MiB HDD): cheap to read back whole.
    pub fn small() -> Self {
        DaemonOptions {
            ssd_size: "64MiB".into(),
            hdd_size: "256MiB".into(),
            ..DaemonOptions::default()
        }
    }
}

/// A running `tierd serve` on its own temp data directory and port.
pub struct Daemon {
    dir: tempfile::TempDir,
    data_dir: PathBuf,
    log: PathBuf,
    port: u16,
    opts: DaemonOptions,
    child: Option<Child>,
    /// The HDD tier's server with `TIERD_TEST_REMOTE_HDD=1`.
    remote: Option<Nbdkit>,
}

/// Whether [`Daemon`]s put their HDD tier on nbdkit (`TIERD_TEST_REMOTE_HDD=1`:
/// scripts/test.sh runs the interop tests a second time so).
pub fn remote_hdd() -> bool {
    std::env::var("TIERD_TEST_REMOTE_HDD").is_ok_and(|v| v == "1")
}

/// `"256MiB"` or `"1GiB"` in bytes.
fn mib_or_gib(s: &str) -> u64 {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().unwrap_or_else(|_| panic!("size {s:?}"));
    match unit {
        "MiB" => n * MIB,
        "GiB" => n * 1024 * MIB,
        _ => panic!("size {s:?}: MiB or GiB"),
    }
}

impl Daemon {
    /// Start a daemon with the default (256 MiB + 1 GiB) images.
    pub fn start() -> Daemon {
        Daemon::start_with(DaemonOptions::default())
    }

    /// Start a daemon with `opts`.
    pub fn start_with(opts: DaemonOptions) -> Daemon {
        let dir = tempdir();
        let data_dir = dir.path().join("data");
        let log = dir.path().join("tierd.log");
        let mut opts = opts;
        let mut remote = None;
        if remote_hdd() && !opts.extra_args.iter().any(|a| a == "--hdd") {
            // The same volume, its HDD tier on nbdkit over NBD.
            std::fs::create_dir_all(&data_dir).expect("creating the data dir");
            let image = dir.path().join("remote-hdd.img");
            sparse_file(&image, mib_or_gib(&opts.hdd_size));
            let n = Nbdkit::start(&image, &[]);
            let ssd = mib_or_gib(&opts.ssd_size) / MIB;
            let reserve = format!("{}MiB", (ssd / 4).min(4096));
            let args = format_on_remote(
                &data_dir,
                &n.uri(),
                &format!("{ssd}MiB"),
                &reserve,
                &opts.extent_size,
            );
            opts.extra_args.extend(args);
            remote = Some(n);
        }
        let mut d = Daemon {
            dir,
            data_dir,
            log,
            port: 0,
            opts,
            child: None,
            remote,
        };
        // Another test may grab the port between our probe and tierd's bind:
        // retry with a fresh port in that (rare) case.
        for attempt in 0..5 {
            d.port = free_port();
            match d.spawn_and_wait() {
                Ok(()) => return d,
                Err(msg) if msg.contains("in use") && attempt < 4 => continue,

                Err(msg) => panic!("{msg}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// The temp directory holding the data dir and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `nbd://127.0.0.1:PORT`
    pub fn uri(&self) -> String {
        format!("nbd://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon is running").id()
    }

    fn spawn_and_wait(&mut self) -> Result<(), String> {
        let logf = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("opening the daemon log");
        let start_len = logf.metadata().map(|m| m.len()).unwrap_or(0);
        let mut cmd = Command::new(tierd_bin());
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(self.addr())
            .args(["--ssd-size", &self.opts.ssd_size])
            .args(["--hdd-size", &self.opts.hdd_size])
            .args(["--extent-size", &self.opts.extent_size])
            .args(["--log-level", &self.opts.log_level])
            .args(&self.opts.extra_args)
            // Its control socket registered in its own directory, not in
            // the machine's runtime directory where tests run in parallel.
            .env("XDG_RUNTIME_DIR", self.dir.path())
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("cloning the log handle"))
            .stderr(logf);
        let what = describe(&cmd);
        let child = cmd.spawn().map_err(|e| format!("spawning `{what}`: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("just spawned");
            if let Some(st) = child.try_wait().expect("polling the daemon") {
                self.child = None;
                let log = self.log();
                let new = log.get(start_len as usize..).unwrap_or(&log);
                return Err(format!(
                    "tierd exited during startup with {st}: `{what}`\n--- log ---\n{new}"
                ));
            }
            if self.log_since(start_len).contains("serving NBD over TCP")
                && TcpStream::connect(self.addr()).is_ok()
            {
                if self.remote.is_some()
                    && !self
                        .log_since(start_len)
                        .contains("connected to the remote capacity tier")
                {
                    return Err(format!(
                        "TIERD_TEST_REMOTE_HDD=1 but tierd did not connect to a remote HDD tier: `{what}`"
                    ));
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                self.kill9();
                return Err(format!(
                    "tierd did not listen on {} within {START_TIMEOUT:?}: `{what}`\n--- log ---\n{}",
                    self.addr(),
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn log_since(&self, offset: u64) -> String {
        let log = self.log();
        log.get(offset as usize..).unwrap_or("").to_string()
    }

    /// Whether the daemon process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().expect("polling the daemon").is_none(),
            None => false,
        }
    }

    /// SIGKILL the daemon and reap it (no flush, no clean shutdown).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            c.wait().expect("reaping the killed daemon");
        }
    }

    /// Send `sig` to the daemon and wait for it to exit; returns the status.
    pub fn signal_and_wait(&mut self, sig: libc::c_int) -> ExitStatus {
        let mut c = self.child.take().expect("the daemon is running");
        let pid = libc::pid_t::try_from(c.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) on our own child's pid; it has not been reaped yet.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(st) = c.try_wait().expect("waiting for the daemon") {
                return st;
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!(
                    "tierd did not exit within {STOP_TIMEOUT:?} of signal {sig}\n--- log ---\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM the daemon, wait, and assert it exited 0.
    pub fn terminate(&mut self) {
        let st = self.signal_and_wait(libc::SIGTERM);
        assert!(
            st.success(),
            "tierd exited with {st} after SIGTERM (expected 0)\n--- log ---\n{}",
            self.log()
        );
    }

    /// The control socket, as the daemon logged it (`control socket ready
    /// path=...`): `<data-dir>/control.sock`, or beside an explicit
    /// `--meta-dir`.
    pub fn control_socket(&self) -> PathBuf {
        const READY: &str = "control socket ready path=";
        // The daemon says where its control socket is just after it starts
        // serving NBD, which is what the start waits for: give the line a
        // moment to come (a daemon with `--meta-dir` has it there, not in
        // the data directory).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let log = self.log();
            let logged = log
                .rsplit_once(READY)
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .map(PathBuf::from);
            if let Some(path) = logged {
                return path;
            }
            if Instant::now() >= deadline {
                return self.data_dir.join("control.sock");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The options the next [`Daemon::restart`] starts with.
    pub fn options_mut(&mut self) -> &mut DaemonOptions {
        &mut self.opts
    }

    /// Start the daemon again on the same data directory and port (it must
    /// be stopped).
    pub fn restart(&mut self) {
        assert!(
            self.child.is_none(),
            "restart() needs the daemon stopped first"
        );
        if let Err(msg) = self.spawn_and_wait() {
            panic!("restarting tierd: {msg}");
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- tierd log ({}) ---\n{}", self.log.display(), self.log());
        }
    }
}

/// Create a sparse file of `len` bytes.
pub fn sparse_file(path: &Path, len: u64) {
    let f = File::create(path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    f.set_len(len)
        .unwrap_or_else(|e| panic!("sizing {}: {e}", path.display()));
}

/// Read a whole file with context.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Write a whole file with context.
pub fn write(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()))
}

/// Assert two byte buffers are equal, reporting the first difference
/// instead of dumping megabytes.
pub fn assert_same_bytes(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    if got != want {
        let i = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .expect("buffers differ somewhere");
        let n = got[i..]
            .iter()
            .zip(&want[i..])
            .filter(|(a, b)| a != b)
            .count();
        panic!(
            "{what}: first difference at byte {i} (got {:#04x}, want {:#04x}); {n} differing bytes from there",
            got[i], want[i]
        );
    }
}

/// Assert `bytes` are all zero, reporting the first non-zero one.
pub fn assert_zero(what: &str, bytes: &[u8]) {
    // Chunked slice comparison (memcmp) rather than a byte loop: fast in
    // debug builds too.
    let zero = vec![0u8; MIB as usize];
    for (n, chunk) in bytes.chunks(zero.len()).enumerate() {
        if chunk != &zero[..chunk.len()] {
            let i = chunk.iter().position(|&b| b != 0).expect("non-zero byte");
            panic!(
                "{what}: non-zero byte {:#04x} at +{}",
                chunk[i],
                n * zero.len() + i
            );
        }
    }
}

/// Best-effort run for cleanup paths (Drop): never panics; kills the
/// command after `timeout`; returns whether it exited 0.
pub fn run_quiet(cmd: &mut Command, timeout: Duration) -> bool {
    let Ok(mut child) = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        return false;
    };
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return st.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// nbdkit serving a file on 127.0.0.1 with some filters.
pub struct Nbdkit {
    pub port: u16,
    file: PathBuf,
    filters: Vec<String>,
    child: Option<Child>,
}

impl Nbdkit {
    pub fn start(file: &Path, filters: &[String]) -> Nbdkit {
        let mut n = Nbdkit {
            port: free_port(),
            file: file.to_path_buf(),
            filters: filters.to_vec(),
            child: None,
        };
        n.spawn();
        n
    }

    /// Start it (again) on the same port.
    pub fn spawn(&mut self) {
        let mut cmd = Command::new(require("nbdkit"));
        cmd.args(["--foreground", "--exit-with-parent", "-i", "127.0.0.1"])
            .arg("-p")
            .arg(self.port.to_string());
        let (filters, params): (Vec<_>, Vec<_>) = self
            .filters
            .iter()
            .partition(|f| f.starts_with("--filter="));
        cmd.args(filters)
            .arg("file")
            .arg(&self.file)
            .args(params)
            .stdin(Stdio::null());
        let what = describe(&cmd);
        self.child = Some(cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}")));
        assert!(
            wait_until(Duration::from_secs(10), || {
                std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            }),
            "{what} did not listen"
        );
    }

    pub fn uri(&self) -> String {
        format!("nbd://127.0.0.1:{}", self.port)
    }

    /// SIGKILL it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Format a volume whose HDD tier is the NBD export `remote`, with a
/// local SSD image of `ssd_size` and the metadata store in `dir`; the
/// `tierd serve` arguments that open it. Sizes in MiB.
pub fn format_on_remote(
    dir: &Path,
    remote: &str,
    ssd_size: &str,
    reserve: &str,
    extent_size: &str,
) -> Vec<String> {
    let ssd = dir.join("ssd.img");
    let size = ssd_size
        .strip_suffix("MiB")
        .and_then(|n| n.parse::<u64>().ok())
        .expect("ssd_size in MiB");
    sparse_file(&ssd, size * MIB);
    let args = vec![
        "--ssd".to_string(),
        ssd.display().to_string(),
        "--hdd".into(),
        remote.to_string(),
        "--meta-dir".into(),
        dir.join("meta").display().to_string(),
    ];
    run_ok(
        Command::new(tierd_bin())
            .args(["format", "--extent-size", extent_size, "--reserve", reserve])
            .args(&args)
            .env_remove("RUST_LOG"),
    );
    args
}
