//! Finding a running daemon's control socket from any directory: each
//! daemon registers its socket in a well-known runtime directory, as a
//! symbolic link named after its process (`daemon-PID.sock`), and removes
//! it when it stops; `tierctl` looks there after the paths it is told
//! (`--control`, `$TIERD_CONTROL`) and the usual ones. The directory is
//! `$XDG_RUNTIME_DIR/tierd` when that is set (a login session's), else
//! `/run/user/UID/tierd` when that runtime directory exists, else, for
//! root, `/run/tierd` (the systemd unit's runtime directory).

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The systemd unit's control socket (`systemd/tierd.service`).
pub const SYSTEM_SOCKET: &str = "/run/tierd/control.sock";

/// Prefix of a registration's name (`daemon-1234.sock`).
const PREFIX: &str = "daemon-";
/// Suffix of a registration's name.
const SUFFIX: &str = ".sock";

/// The directory daemons register in, for this user and environment;
/// `None` when there is none (not root, no runtime directory).
pub fn registry_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("tierd"));
    }
    let uid = effective_uid();
    let user = PathBuf::from(format!("/run/user/{uid}"));
    if user.is_dir() {
        return Some(user.join("tierd"));
    }
    (uid == 0).then(|| PathBuf::from("/run/tierd"))
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) takes no arguments, touches no memory of ours and
    // cannot fail.
    unsafe { libc::geteuid() }
}

/// A daemon's registration, in [`registered`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    /// The registration (`/run/tierd/daemon-1234.sock`).
    pub entry: PathBuf,
    /// The daemon's process id.
    pub pid: u32,
    /// Its control socket, where the registration points.
    pub socket: PathBuf,
}

/// The daemons registered in `dir` whose process still runs, by pid.
pub fn registered(dir: &Path) -> Vec<Registered> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<Registered> = entries
        .filter_map(|e| {
            let entry = e.ok()?.path();
            let pid = pid_of(&entry)?;
            let socket = std::fs::read_link(&entry).ok()?;
            process_runs(pid).then_some(Registered { entry, pid, socket })
        })
        .collect();
    out.sort_by_key(|r| r.pid);
    out
}

/// The pid a registration's name carries.
fn pid_of(entry: &Path) -> Option<u32> {
    entry
        .file_name()?
        .to_str()?
        .strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

fn process_runs(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// This process's registration of its control socket; removed on drop
/// (if it still points at the socket).
#[derive(Debug)]
pub struct Registration {
    entry: PathBuf,
    socket: PathBuf,
}

impl Registration {
    /// Where the registration is.
    pub fn entry(&self) -> &Path {
        &self.entry
    }
}

/// Register `socket` (made absolute) in `dir` for this process, creating
/// the directory (mode 0700) if needed; registrations of processes that
/// no longer run are removed on the way.
pub fn register_in(dir: &Path, socket: &Path) -> io::Result<Registration> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if pid_of(&p).is_some_and(|pid| !process_runs(pid)) {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    let socket = std::path::absolute(socket)?;
    let entry = dir.join(format!("{PREFIX}{}{SUFFIX}", std::process::id()));
    match std::fs::remove_file(&entry) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::os::unix::fs::symlink(&socket, &entry)?;
    Ok(Registration { entry, socket })
}

/// [`register_in`] the [`registry_dir`]; `Ok(None)` when there is none.
pub fn register(socket: &Path) -> io::Result<Option<Registration>> {
    registry_dir()
        .map(|dir| register_in(&dir, socket))
        .transpose()
}

impl Drop for Registration {
    fn drop(&mut self) {
        if std::fs::read_link(&self.entry).is_ok_and(|t| t == self.socket) {
            let _ = std::fs::remove_file(&self.entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_points_at_the_socket_and_goes_away_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let reg_dir = dir.path().join("tierd");
        let sock = dir.path().join("control.sock");
        // A registration of a process that is gone is swept.
        std::fs::create_dir(&reg_dir).expect("mkdir");
        let stale = reg_dir.join(format!("{PREFIX}{}{SUFFIX}", u32::MAX - 1));
        std::os::unix::fs::symlink(&sock, &stale).expect("stale link");
        let reg = register_in(&reg_dir, &sock).expect("register");
        assert!(!stale.exists() && std::fs::symlink_metadata(&stale).is_err());
        let found = registered(&reg_dir);
        assert_eq!(
            found,
            [Registered {
                entry: reg.entry().to_path_buf(),
                pid: std::process::id(),
                socket: sock.clone(),
            }]
        );
        drop(reg);
        assert!(registered(&reg_dir).is_empty());
    }
}
