//! `tierd` runs for the tests of starting and formatting as a new user
//! types them: a command with a clean environment (no `TIERD_*`, no
//! `RUST_LOG`), a `tierd serve` awaited until it serves and then stopped
//! with SIGTERM, and a run that must fail, with its stderr.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{run_timeout, show, tierd_bin};

/// How long a refusal or a format may take.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// `tierd ARGS` in `cwd`, its environment without any `TIERD_*` variable
/// and without `RUST_LOG`, no colour.
pub fn tierd_in(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(tierd_bin());
    c.current_dir(cwd).args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TIERD_") {
            c.env_remove(&k);
        }
    }
    c.env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .env("NO_COLOR", "1");
    c
}

/// Run `cmd`; it must fail. Returns its stderr.
pub fn fails(cmd: &mut Command) -> String {
    let what = crate::common::describe(cmd);
    let out: Output = run_timeout(cmd, TIMEOUT);
    assert!(
        !out.status.success(),
        "`{what}` should fail: {}",
        show(&what, &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Run `cmd`; it must succeed. Returns stdout and stderr.
pub fn succeeds(cmd: &mut Command) -> (String, String) {
    let what = crate::common::describe(cmd);
    let out: Output = run_timeout(cmd, TIMEOUT);
    assert!(out.status.success(), "{}", show(&what, &out));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A `tierd serve` that got as far as serving NBD, stopped on drop.
pub struct Serving {
    child: Child,
    log: std::path::PathBuf,
}

impl Serving {
    /// Spawn `cmd` (a `tierd serve ... --listen 127.0.0.1:0`), its output
    /// into `log`, and wait until it serves NBD; panics with the log if it
    /// exits or takes longer than [`TIMEOUT`].
    pub fn start(cmd: &mut Command, log: &Path) -> Serving {
        let what = crate::common::describe(cmd);
        let f = std::fs::File::create(log).expect("creating the log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("cloning the log handle"))
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning `{what}`: {e}"));
        let mut s = Serving {
            child,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if s.log().contains("serving NBD over TCP") {
                return s;
            }
            if let Some(st) = s.child.try_wait().expect("polling tierd") {
                panic!("`{what}` exited with {st}:\n{}", s.log());
            }
            assert!(
                Instant::now() < deadline,
                "`{what}` did not serve within {TIMEOUT:?}:\n{}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
