//! TLS for NBD (`NBD_OPT_STARTTLS`): building the rustls server
//! configuration from PEM files, and the client configuration the remote
//! capacity tier's client ([`super::client`]) uses.
//!
//! The server certificate chain and its private key are required; a CA file
//! is optional and, when given, every client must present a certificate
//! signed by one of its certificates. The `ring` crypto provider is used
//! explicitly (no process-wide default is installed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::{self, PemObject};
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

pub use tokio_rustls::TlsAcceptor;

/// Where TLS material comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Server certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Private key of the leaf certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; `None`
    /// accepts clients without certificates.
    pub ca: Option<PathBuf>,
}

/// Why TLS could not be set up. Every variant names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read or is not valid PEM.
    #[error("{}: cannot read PEM: {source}", path.display())]
    Pem {
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    /// The file holds no certificate.
    #[error("{}: no certificate found", path.display())]
    NoCertificate { path: PathBuf },
    /// The file holds no private key.
    #[error("{}: no private key found", path.display())]
    NoKey { path: PathBuf },
    /// A CA certificate was rejected as a trust anchor.
    #[error("{}: unusable CA certificate: {source}", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    /// The client verifier could not be built from the CA file.
    #[error("{}: cannot verify clients with these CAs: {source}", path.display())]
    Verifier {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    /// rustls refused the certificate chain or key (e.g. they do not match
    /// or the key type is unsupported).
    #[error("{} / {}: unusable certificate or key: {source}", cert.display(), key.display())]
    Config {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_err = |source| TlsError::Pem {
        path: path.to_owned(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem_err)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| match source {
        pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_owned(),
        },
        source => TlsError::Pem {
            path: path.to_owned(),
            source,
        },
    })
}

/// Build the rustls server configuration from `files`.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let config_err = |source| TlsError::Config {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(config_err)?;
    let builder = match &files.ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots.add(cert).map_err(|source| TlsError::BadCa {
                    path: ca.clone(),
                    source,
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|source| TlsError::Verifier {
                    path: ca.clone(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(certs, key).map_err(config_err)
}

/// The rustls client configuration: servers must present a certificate
/// that chains to a CA in `ca` (PEM); with `cert_key`, the client presents
/// that certificate chain and key.
pub fn client_config(
    ca: &Path,
    cert_key: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in read_certs(ca)? {
        roots.add(cert).map_err(|source| TlsError::BadCa {
            path: ca.to_owned(),
            source,
        })?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::BadCa {
            path: ca.to_owned(),
            source,
        })?
        .with_root_certificates(roots);
    match cert_key {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|source| TlsError::Config {
                cert: cert.to_owned(),
                key: key.to_owned(),
                source,
            }),
    }
}

/// A TLS acceptor for the NBD server from `files`.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    Ok(TlsAcceptor::from(Arc::new(server_config(files)?)))
}

/// TLS as the NBD server uses it ([`ServerOptions::tls`]): when set, every
/// client must upgrade with `NBD_OPT_STARTTLS` before anything else.
/// Cheap to clone.
///
/// [`ServerOptions::tls`]: super::ServerOptions::tls
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
}

impl ServerTls {
    /// Load certificate, key and optional client CA from `files`.
    pub fn from_files(files: &TlsFiles) -> Result<ServerTls, TlsError> {
        Ok(ServerTls {
            acceptor: acceptor(files)?,
        })
    }

    /// Use an already built rustls configuration.
    pub fn from_config(config: Arc<ServerConfig>) -> ServerTls {
        ServerTls {
            acceptor: TlsAcceptor::from(config),
        }
    }

    /// The acceptor that runs the TLS handshake.
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_name_the_file() {
        let dir = std::env::temp_dir().join(format!("tierd-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, b"").unwrap();
        let missing = dir.join("missing.pem");
        let files = TlsFiles {
            cert: missing.clone(),
            key: empty.clone(),
            ca: None,
        };
        let e = acceptor(&files).err().expect("missing cert refused");
        assert!(matches!(e, TlsError::Pem { .. }), "{e:?}");
        assert!(e.to_string().contains("missing.pem"), "{e}");
        let files = TlsFiles {
            cert: empty.clone(),
            key: empty.clone(),
            ca: None,
        };
        let e = acceptor(&files).err().expect("empty cert refused");
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
        assert!(e.to_string().contains("empty.pem"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
