//! The kubelet server's TLS: a self-signed serving certificate kept in `<data-dir>/pki`
//! (`kubelet.crt`, `kubelet.key`, as upstream's kubelet writes when given none) and made once,
//! and client certificates verified against the cluster CA. A client without a certificate
//! completes the handshake (and may authenticate with a bearer token); one whose certificate
//! the CA did not sign fails the handshake, as with upstream's `VerifyClientCertIfGiven`.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, SanType};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("making the serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("reading {path}: {why}")]
    Pem { path: PathBuf, why: String },
    #[error("the client CA: {0}")]
    ClientCa(String),
    #[error("tls configuration: {0}")]
    Config(#[from] rustls::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The serving certificate and key under `dir` (PEM), made self-signed for `hostname` and
/// `ips` when they do not exist yet.
pub fn ensure_serving_certificate(
    dir: &Path,
    hostname: &str,
    ips: &[IpAddr],
) -> Result<(String, String)> {
    let (crt, key) = (dir.join("kubelet.crt"), dir.join("kubelet.key"));
    if let (Ok(c), Ok(k)) = (std::fs::read_to_string(&crt), std::fs::read_to_string(&key)) {
        return Ok((c, k));
    }
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{hostname}@skiff"));
    params.distinguished_name = dn;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2124, 1, 1);
    if let Ok(name) = hostname.to_string().try_into() {
        params.subject_alt_names.push(SanType::DnsName(name));
    }
    for ip in ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let key_pair = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key_pair)?;
    let write = |path: &Path, contents: &str| -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: dir.into(),
            source,
        })?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| Error::Write {
                path: path.into(),
                source,
            })?;
        std::io::Write::write_all(&mut f, contents.as_bytes()).map_err(|source| Error::Write {
            path: path.into(),
            source,
        })
    };
    write(&key, &key_pair.serialize_pem())?;
    write(&crt, &cert.pem())?;
    Ok((cert.pem(), key_pair.serialize_pem()))
}

/// The server's TLS configuration: HTTP/1.1 (streaming upgrades need it) and HTTP/2, client
/// certificates checked against `client_ca` (DER certificates).
pub fn server_config(
    cert_pem: &str,
    key_pem: &str,
    client_ca: &[Vec<u8>],
) -> Result<rustls::ServerConfig> {
    let pem = |why: String| Error::Pem {
        path: "kubelet.crt".into(),
        why,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for der in client_ca {
        roots
            .add(CertificateDer::from(der.clone()))
            .map_err(|e| Error::ClientCa(e.to_string()))?;
    }
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = if roots.is_empty() {
        // no CA: no client certificates, only bearer tokens
        builder.with_no_client_auth()
    } else {
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .allow_unauthenticated()
            .build()
            .map_err(|e| Error::ClientCa(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| pem(e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| pem(e.to_string()))?;
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_serving_certificate_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ips = [IpAddr::from([127, 0, 0, 1])];
        let first = ensure_serving_certificate(dir.path(), "node-1", &ips).unwrap();
        let again = ensure_serving_certificate(dir.path(), "node-1", &ips).unwrap();
        assert_eq!(first, again);
        assert!(dir.path().join("kubelet.key").is_file());
        server_config(&first.0, &first.1, &[]).unwrap();
    }
}
