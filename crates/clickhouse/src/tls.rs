//! TLS to ClickHouse (`--clickhouse https://...`): a rustls client with the `ring` provider
//! (no system libraries to build), as `dbtap replay --target-tls` does, verifying the server's
//! certificate against `--clickhouse-ca FILE` or the system's roots. One configuration per CA
//! file, built once and shared by every request.

use std::collections::HashMap;
use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

/// A TLS stream over TCP.
pub type TlsStream = rustls::StreamOwned<ClientConnection, TcpStream>;

type Cache = Mutex<HashMap<Option<PathBuf>, Arc<ClientConfig>>>;

/// The client configuration trusting `ca` (a PEM file) or the system's roots; a one-line error.
pub fn config(ca: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let key = ca.map(Path::to_path_buf);
    if let Some(c) = cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(Arc::clone(c));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let c = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots(ca)?)
        .with_no_client_auth();
    let c = Arc::new(c);
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, Arc::clone(&c));
    Ok(c)
}

fn roots(ca: Option<&Path>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(p) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(p)
                .map_err(|e| format!("--clickhouse-ca {}: {e}", p.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--clickhouse-ca {}: {e}", p.display()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "--clickhouse-ca {}: no certificate in it",
                    p.display()
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err("https: no system root certificates found; give \
                            --clickhouse-ca FILE"
                    .into());
            }
        }
    }
    Ok(store)
}

/// The handshake over `tcp`, verifying the certificate for `host`.
pub fn connect(cfg: Arc<ClientConfig>, host: &str, tcp: TcpStream) -> io::Result<TlsStream> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let conn = ClientConnection::new(cfg, name).map_err(io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error() {
        let e = config(Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(e.contains("--clickhouse-ca"), "{e}");
        let f = tempfile::NamedTempFile::new().expect("temp");
        let e = config(Some(f.path())).unwrap_err();
        assert!(e.contains("no certificate"), "{e}");
    }
}
