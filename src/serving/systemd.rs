//! Talking to systemd: `sd_notify` datagrams (ready, reloading, stopping,
//! the status line), the watchdog's interval, and the reload that SIGHUP and
//! `tierctl reload` start, told to systemd as it runs.

use tracing::warn;

use super::live::Live;
use super::settings::Settings;

/// A reload (SIGHUP, `tierctl reload`): tell systemd it runs
/// (`RELOADING=1` with the monotonic time `Type=notify-reload` wants), load
/// the configuration again, apply what can change live, and say how it
/// went in the status line (`READY=1`). `Err`: the old configuration stays.
pub fn reload(live: &Live, settings: &Settings) -> std::result::Result<String, String> {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
    sd_notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
    let r = settings.reload(live);
    match &r {
        Ok(_) => sd_notify(&format!("READY=1\nSTATUS={}", status_line(&live.health()))),
        Err(e) => {
            warn!("reload failed: {e}");
            sd_notify(&format!(
                "READY=1\nSTATUS=serving; the last reload FAILED: {e}"
            ));
        }
    }
    r
}

/// The systemd status line: serving, and the health.
pub fn status_line(h: &crate::control::HealthStatus) -> String {
    if h.problems.is_empty() {
        "serving; health ok".into()
    } else {
        format!("serving; DEGRADED: {}", h.problems.join("; "))
    }
}

/// Half the watchdog timeout systemd set for us (`WATCHDOG_USEC`, for this
/// process when `WATCHDOG_PID` is set), or `None` without a watchdog.
pub(super) fn watchdog_interval() -> Option<std::time::Duration> {
    if let Some(pid) = std::env::var_os("WATCHDOG_PID") {
        if pid.to_str().and_then(|p| p.parse::<u32>().ok()) != Some(std::process::id()) {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| std::time::Duration::from_micros(usec / 2))
}

/// Tell systemd about our state (`sd_notify(3)` datagram protocol); a
/// no-op without `NOTIFY_SOCKET`.
pub fn sd_notify(state: &str) {
    use std::os::unix::net::UnixDatagram;
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|sock| {
        let bytes = path.as_encoded_bytes();
        if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(state.as_bytes(), &addr)
        } else {
            sock.send_to(state.as_bytes(), &path)
        }
    });
    if let Err(e) = sent {
        warn!("notifying systemd ({state:?}): {e}");
    }
}
