//! NBD URIs: where a remote export is ([`Target`], [`Endpoint`]), parsed
//! from the common subset of the NBD URI standard.

use std::path::PathBuf;

use super::{ClientError, DEFAULT_PORT};

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port` over TCP.
    Tcp(String),
    /// A Unix socket.
    Unix(PathBuf),
}

/// A server and the export on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Where it listens.
    pub endpoint: Endpoint,
    /// The export's name ("" for the default export).
    pub export: String,
    /// The name the server's certificate must carry when `Some`: TLS is
    /// required (`nbds://`).
    pub tls_name: Option<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.tls_name.is_some() { "s" } else { "" };
        match &self.endpoint {
            Endpoint::Tcp(a) => write!(f, "nbd{s}://{a}/{}", self.export),
            Endpoint::Unix(p) => write!(f, "nbd{s}+unix:///{}?socket={}", self.export, p.display()),
        }
    }
}

/// Whether `s` looks like an NBD URI rather than a path.
pub fn is_uri(s: &str) -> bool {
    ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://"]
        .iter()
        .any(|p| s.starts_with(p))
}

impl Target {
    /// Parse an NBD URI (the common subset of the NBD URI standard):
    /// `nbd://host[:port][/export]`, `nbd+unix:///[export]?socket=PATH`,
    /// and `nbds://…`, `nbds+unix://…` for TLS (the Unix form takes the
    /// certificate's name from `tls-hostname=`, default `localhost`).
    pub fn parse(uri: &str) -> Result<Target, ClientError> {
        let bad = |why: &str| ClientError::BadUri {
            uri: uri.to_string(),
            why: why.to_string(),
        };
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
            bad("it must start with nbd://, nbds://, nbd+unix:// or nbds+unix://")
        })?;
        let (tls, unix) = match scheme {
            "nbd" => (false, false),
            "nbds" => (true, false),
            "nbd+unix" => (false, true),
            "nbds+unix" => (true, true),
            _ => {
                return Err(bad(
                    "it must start with nbd://, nbds://, nbd+unix:// or nbds+unix://",
                ))
            }
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let param = |key: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .filter(|v| !v.is_empty())
        };
        if unix {
            let export = rest.strip_prefix('/').unwrap_or(rest).to_string();
            let socket =
                param("socket").ok_or_else(|| bad("a Unix socket URI needs ?socket=PATH"))?;
            return Ok(Target {
                endpoint: Endpoint::Unix(PathBuf::from(socket)),
                export,
                tls_name: tls.then(|| param("tls-hostname").unwrap_or("localhost").to_string()),
            });
        }
        let (authority, export) = match rest.split_once('/') {
            Some((a, e)) => (a, e.to_string()),
            None => (rest, String::new()),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        // A port is the part after the last ':' outside an IPv6 literal.
        let (host, port) = match authority.rfind(':') {
            Some(i) if !authority[i..].contains(']') => {
                (&authority[..i], Some(&authority[i + 1..]))
            }
            _ => (authority, None),
        };
        if let Some(p) = port {
            p.parse::<u16>()
                .map_err(|_| bad("the port is not a number from 0 to 65535"))?;
        }
        let addr = match port {
            Some(_) => authority.to_string(),
            None => format!("{authority}:{DEFAULT_PORT}"),
        };
        let name = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Target {
            endpoint: Endpoint::Tcp(addr),
            export,
            tls_name: tls.then(|| name.to_string()),
        })
    }
}
