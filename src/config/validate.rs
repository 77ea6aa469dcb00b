//! Checking values that parse but make no sense: the top-level keys here,
//! each table by its own `validate`; every refusal names its key.

use std::net::SocketAddr;

use super::{Config, DEFAULT_METRICS_LISTEN};
use crate::units::{ByteSize, InvalidKey};
use crate::volume::{MAX_EXTENT_SIZE, MIN_DEVICE_SIZE, MIN_EXTENT_SIZE};

/// Longest `nbd-poll`.
const MAX_NBD_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// Most threads one NBD connection may have (`nbd-threads`): as many as
/// requests it may have in flight.
const MAX_NBD_THREADS: usize = 64;
/// The smallest `meta-cache`.
const MIN_META_CACHE: u64 = 1 << 20;

impl Config {
    /// Check values that parse but make no sense: the top-level keys here,
    /// each table by its own `validate`.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        let es = self.extent_size.0;
        if !es.is_power_of_two() || !(MIN_EXTENT_SIZE..=MAX_EXTENT_SIZE).contains(&es) {
            return Err(InvalidKey::new(
                "extent-size",
                format!(
                    "{} must be a power of two from 64KiB to 64MiB",
                    self.extent_size
                ),
            ));
        }
        if self.meta_cache.0 < MIN_META_CACHE {
            return Err(InvalidKey::new(
                "meta-cache",
                format!(
                    "{} is too small: the metadata store's cache needs at least 1MiB",
                    self.meta_cache
                ),
            ));
        }
        if !self.listen.is_empty() && self.listen.parse::<SocketAddr>().is_err() {
            return Err(InvalidKey::new(
                "listen",
                format!(
                    "{:?} is not HOST:PORT (for example 127.0.0.1:10809)",
                    self.listen
                ),
            ));
        }
        if !self.metrics_listen.is_empty() && self.metrics_listen.parse::<SocketAddr>().is_err() {
            return Err(InvalidKey::new(
                "metrics-listen",
                format!(
                    "{:?} is not HOST:PORT (for example {DEFAULT_METRICS_LISTEN}); \"\" turns metrics off",
                    self.metrics_listen
                ),
            ));
        }
        if let Some(p) = self.control_path() {
            // sockaddr_un holds 108 bytes including the terminating NUL.
            if p.as_os_str().len() > 107 {
                return Err(InvalidKey::new(
                    "control",
                    format!(
                        "{} is longer than a Unix socket path may be (107 bytes); choose a shorter path",
                        p.display()
                    ),
                ));
            }
        }
        if self.listen.is_empty() && self.unix.is_none() {
            return Err(InvalidKey::new(
                "listen",
                "empty, and no unix socket is set: nothing to serve on",
            ));
        }
        for (key, v) in [("ssd-size", self.ssd_size), ("hdd-size", self.hdd_size)] {
            if v.0 < MIN_DEVICE_SIZE {
                return Err(InvalidKey::new(
                    key,
                    format!(
                        "{v} is too small (at least {}, the smallest device tierd formats)",
                        ByteSize(MIN_DEVICE_SIZE)
                    ),
                ));
            }
        }
        for (key, v, ssd) in [
            ("ssd-model", &self.ssd_model, true),
            ("hdd-model", &self.hdd_model, false),
        ] {
            if let Some(name) = v {
                let ok =
                    crate::device::model::ModelKind::parse(name).is_some_and(|m| m.is_ssd() == ssd);
                if !ok {
                    return Err(InvalidKey::new(
                        key,
                        format!(
                            "{name:?}: use {}",
                            crate::device::model::ModelKind::names(ssd)
                        ),
                    ));
                }
            }
        }
        self.heat.validate()?;
        self.migrate.validate()?;
        self.durability.validate()?;
        if self.max_connections == 0 {
            return Err(InvalidKey::new("max-connections", "must be at least 1"));
        }
        if self.nbd_threads > MAX_NBD_THREADS {
            return Err(InvalidKey::new(
                "nbd-threads",
                format!("{} is more than {MAX_NBD_THREADS} threads per connection (0 for none of its own)", self.nbd_threads),
            ));
        }
        if self.nbd_poll > MAX_NBD_POLL {
            return Err(InvalidKey::new(
                "nbd-poll",
                format!(
                    "{} us is more than 1ms: a longer poll only burns CPU (0s turns polling off)",
                    self.nbd_poll.as_micros()
                ),
            ));
        }
        if self.handshake_timeout.is_zero() {
            return Err(InvalidKey::new("handshake-timeout", "must be above zero"));
        }
        if self.remote_timeout.is_zero() {
            return Err(InvalidKey::new("remote-timeout", "must be above zero"));
        }
        if self.remote_tls_cert.is_some() != self.remote_tls_key.is_some() {
            return Err(InvalidKey::new(
                if self.remote_tls_cert.is_some() {
                    "remote-tls-key"
                } else {
                    "remote-tls-cert"
                },
                "remote-tls-cert and remote-tls-key must be set together",
            ));
        }
        if let Some(hdd) = self.hdd.as_ref().and_then(|p| p.to_str()) {
            if crate::device::rados::is_rados_uri(hdd) {
                crate::device::rados::RadosTarget::parse(hdd)
                    .map_err(|e| InvalidKey::new("hdd", e))?;
            }
        }
        if let Some(ssd) = self.ssd.as_ref().and_then(|p| p.to_str()) {
            if crate::nbd::client::is_uri(ssd) || crate::device::rados::is_rados_uri(ssd) {
                return Err(InvalidKey::new(
                    "ssd",
                    format!("{ssd} is remote storage: the SSD must be a local device (only the HDD tier may be remote)"),
                ));
            }
        }
        if let Some(hdd) = self.hdd.as_ref().and_then(|p| p.to_str()) {
            if crate::nbd::client::is_uri(hdd) {
                let t = crate::nbd::client::Target::parse(hdd)
                    .map_err(|e| InvalidKey::new("hdd", e.to_string()))?;
                if t.tls_name.is_some() && self.remote_tls_ca.is_none() {
                    return Err(InvalidKey::new(
                        "remote-tls-ca",
                        format!("{hdd} asks for TLS: set remote-tls-ca to the CA that signed the remote's certificate"),
                    ));
                }
            }
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(InvalidKey::new(
                    "tls-key",
                    "tls-cert is set but tls-key is not: TLS needs both",
                ))
            }
            (None, Some(_)) => {
                return Err(InvalidKey::new(
                    "tls-cert",
                    "tls-key is set but tls-cert is not: TLS needs both",
                ))
            }
            _ => {}
        }
        if self.tls_ca.is_some() && self.tls_cert.is_none() {
            return Err(InvalidKey::new(
                "tls-ca",
                "client certificates need TLS: set tls-cert and tls-key too",
            ));
        }
        if tracing_level_ok(&self.log_level).is_err() {
            return Err(InvalidKey::new(
                "log-level",
                format!(
                    "{:?}: use error, warn, info, debug or trace",
                    self.log_level
                ),
            ));
        }
        Ok(())
    }
}

fn tracing_level_ok(s: &str) -> Result<(), ()> {
    match s.to_ascii_lowercase().as_str() {
        "error" | "warn" | "info" | "debug" | "trace" | "off" => Ok(()),
        _ => Err(()),
    }
}
