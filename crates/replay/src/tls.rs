//! TLS to the target (`--target-tls`): a rustls client (the `ring` provider: no system
//! libraries to build) verifying the target's certificate against `--target-ca` or the system's
//! roots, or not at all under `--target-insecure` (the handshake's signatures are still checked);
//! with `--target-cert`/`--target-key`, dbtap shows its own client certificate.
//! Redis speaks TLS from the first byte; MySQL and PostgreSQL upgrade after their SSLRequest.

use std::io;
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// What the user asked for.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// PEM file of the certificate authorities to trust (else the system's).
    pub ca: Option<PathBuf>,
    /// Do not verify the target's certificate.
    pub insecure: bool,
    /// The name the certificate must hold (else the target's host).
    pub server_name: Option<String>,
    /// PEM files of dbtap's own certificate chain and its private key (`--target-cert`,
    /// `--target-key`), for targets that require client certificates.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// A ready client configuration and the name to verify.
#[derive(Clone, Debug)]
pub struct Tls {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

/// A TLS stream over TCP.
pub type TlsStream = rustls::StreamOwned<ClientConnection, TcpStream>;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// Builds the client for a target `host` (HOST of HOST:PORT); a one-line error.
    pub fn new(o: &TlsOptions, host: &str) -> Result<Tls, String> {
        let name = o.server_name.as_deref().unwrap_or(host);
        let name = ServerName::try_from(name.trim_start_matches('[').trim_end_matches(']'))
            .map_err(|e| format!("--target-tls: {name:?} is not a server name: {e}"))?
            .to_owned();
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("--target-tls: {e}"))?;
        let builder = if o.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
        } else {
            builder.with_root_certificates(roots(o.ca.as_ref())?)
        };
        let config = match &o.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let (chain, key) = client_identity(cert, key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("--target-cert/--target-key: {e}"))?
            }
        };
        Ok(Tls {
            config: Arc::new(config),
            name,
        })
    }

    /// Runs the handshake over `tcp`.
    pub fn connect(&self, tcp: TcpStream) -> io::Result<TlsStream> {
        let conn = ClientConnection::new(self.config.clone(), self.name.clone())
            .map_err(io::Error::other)?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(s)
    }
}

/// The client certificate chain and private key (PEM: PKCS#8, PKCS#1 or SEC1 key).
fn client_identity(
    cert: &PathBuf,
    key: &PathBuf,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| format!("--target-cert {}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("--target-cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "--target-cert {}: no certificate in it",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--target-key {}: {e}", key.display()))?;
    Ok((chain, key))
}

fn roots(ca: Option<&PathBuf>) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(p) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(p)
                .map_err(|e| format!("--target-ca {}: {e}", p.display()))?
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--target-ca {}: {e}", p.display()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("--target-ca {}: no certificate in it", p.display()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
            if store.is_empty() {
                return Err("--target-tls: no system root certificates found; give \
                            --target-ca FILE or --target-insecure"
                    .into());
            }
        }
    }
    Ok(store)
}

/// `--target-insecure`: any certificate, but the handshake signatures are verified.
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let insecure = TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        };
        assert!(Tls::new(&insecure, "127.0.0.1").is_ok());
        assert!(Tls::new(&insecure, "db.example.com").is_ok());
        assert!(Tls::new(&insecure, "not a name!").is_err());
        let missing = TlsOptions {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        assert!(
            Tls::new(&missing, "127.0.0.1")
                .unwrap_err()
                .contains("--target-ca")
        );
        let no_cert = TlsOptions {
            insecure: true,
            client_cert: Some(("/nonexistent/c.pem".into(), "/nonexistent/k.pem".into())),
            ..TlsOptions::default()
        };
        assert!(
            Tls::new(&no_cert, "127.0.0.1")
                .unwrap_err()
                .contains("--target-cert")
        );
    }
}
