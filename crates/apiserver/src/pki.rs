//! The cluster's certificates, kept under the data dir: a CA generated on first start, the API
//! server's serving certificate (re-issued on every start for the current addresses), the
//! admin's client certificate (CN=admin, O=system:masters) with its kubeconfig, the API
//! server's client certificate for kubelets (`apiserver-kubelet-client`, made once), and, as
//! kubeadm makes them, a separate front-proxy CA with the `front-proxy-client` certificate the
//! aggregator presents to aggregated API servers ([`Pki::front_proxy`]).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading or writing {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("certificate {what}: {source}")]
    Rcgen {
        what: &'static str,
        source: rcgen::Error,
    },
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// PEM-encoded material the server needs at runtime.
#[derive(Clone)]
pub struct Pki {
    pub ca_cert_pem: String,
    ca_key_pem: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    pub dir: PathBuf,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The service IP of the `kubernetes` Service (first address of the default service CIDR), which
/// in-cluster clients dial.
pub const KUBERNETES_SERVICE_IP: &str = "10.43.0.1";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn rc(what: &'static str) -> impl FnOnce(rcgen::Error) -> Error {
    move |source| Error::Rcgen { what, source }
}

/// Writes `contents` to `path` readable by its owner only (0600), atomically (a synced temporary
/// file renamed over it), creating the parent directory if needed.
pub fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(contents.as_bytes()).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

fn read(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(path)(e)),
    }
}

fn dn(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(o) = organization {
        dn.push(DnType::OrganizationName, o);
    }
    dn.push(DnType::CommonName, common_name);
    dn
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name = dn(common_name, None);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = rcgen::date_time_ymd(2024, 1, 1);
    p.not_after = rcgen::date_time_ymd(2124, 1, 1);
    p
}

/// The CA `<stem>.crt`/`<stem>.key` in `dir`, made (self-signed, CN `common_name`) when
/// missing. Returns (cert PEM, key PEM).
fn ensure_ca(dir: &Path, stem: &str, common_name: &str) -> Result<(String, String)> {
    let (crt, key_path) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    if let (Some(c), Some(k)) = (read(&crt)?, read(&key_path)?) {
        return Ok((c, k));
    }
    let key = KeyPair::generate().map_err(rc("generating a CA key"))?;
    let cert = ca_params(common_name)
        .self_signed(&key)
        .map_err(rc("self-signing a CA"))?;
    write_private(&key_path, &key.serialize_pem())?;
    write_private(&crt, &cert.pem())?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A certificate signed by the CA `ca_cert_pem`/`ca_key_pem`: a client certificate (CN = user,
/// O = group) or, with `server`, a serving certificate for `names`. Returns (cert PEM, key PEM).
fn sign(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    common_name: &str,
    organization: Option<&str>,
    names: &[String],
    server: bool,
) -> Result<(String, String)> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(rc("reading the CA key"))?;
    let issuer =
        Issuer::from_ca_cert_pem(ca_cert_pem, ca_key).map_err(rc("reading the CA certificate"))?;
    let mut p = CertificateParams::default();
    p.distinguished_name = dn(common_name, organization);
    p.not_before = rcgen::date_time_ymd(2024, 1, 1);
    p.not_after = rcgen::date_time_ymd(2124, 1, 1);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![if server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    for n in names {
        p.subject_alt_names.push(match n.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(n.clone().try_into().map_err(rc("a DNS name"))?),
        });
    }
    let key = KeyPair::generate().map_err(rc("generating a key"))?;
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(rc("signing a certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The front proxy's credentials (upstream's `--requestheader-client-ca-file`,
/// `--proxy-client-cert-file` and `--proxy-client-key-file`).
#[derive(Clone)]
pub struct FrontProxy {
    /// The front-proxy CA, which signs only proxy client certificates.
    pub ca_cert_pem: String,
    /// `front-proxy-client`, signed by that CA.
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

impl std::fmt::Debug for FrontProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontProxy").finish_non_exhaustive()
    }
}

/// The common name of the proxy client certificate (kubeadm's), which aggregated servers are
/// told to accept (`requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

impl Pki {
    /// Loads the CA from `dir` or creates it, then issues a serving certificate for `hosts`
    /// (DNS names or IPs) plus the names in-cluster clients use.
    pub fn ensure(dir: &Path, hosts: &[String]) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let (ca_cert_pem, ca_key_pem) = ensure_ca(dir, "ca", "skiff-ca")?;
        let mut pki = Self {
            ca_cert_pem,
            ca_key_pem,
            serving_cert_pem: String::new(),
            serving_key_pem: String::new(),
            dir: dir.to_path_buf(),
        };
        let mut names: Vec<String> = [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "127.0.0.1",
            KUBERNETES_SERVICE_IP,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for h in hosts {
            if !names.contains(h) {
                names.push(h.clone());
            }
        }
        let (cert, key) = pki.issue("kube-apiserver", None, &names, true)?;
        write_private(&dir.join("server.crt"), &cert)?;
        write_private(&dir.join("server.key"), &key)?;
        pki.serving_cert_pem = cert;
        pki.serving_key_pem = key;
        Ok(pki)
    }

    /// Loads the CA an earlier [`Pki::ensure`] made in `dir`, without issuing anything (for
    /// tools and tests that make client certificates of a running cluster).
    pub fn load(dir: &Path) -> Result<Self> {
        let (ca_crt, ca_key) = (dir.join("ca.crt"), dir.join("ca.key"));
        let (Some(ca_cert_pem), Some(ca_key_pem)) = (read(&ca_crt)?, read(&ca_key)?) else {
            return Err(Error::Io {
                path: ca_crt,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        };
        Ok(Self {
            ca_cert_pem,
            ca_key_pem,
            serving_cert_pem: String::new(),
            serving_key_pem: String::new(),
            dir: dir.to_path_buf(),
        })
    }

    /// Issues a certificate signed by the cluster CA: a client certificate (CN = user, O = group)
    /// or, with `server`, a serving certificate for `names`. Returns (cert PEM, key PEM).
    pub fn issue(
        &self,
        common_name: &str,
        organization: Option<&str>,
        names: &[String],
        server: bool,
    ) -> Result<(String, String)> {
        sign(
            &self.ca_cert_pem,
            &self.ca_key_pem,
            common_name,
            organization,
            names,
            server,
        )
    }

    /// The certificate and key the API server presents to kubelets (kubeadm's
    /// `apiserver-kubelet-client`: CN=kube-apiserver-kubelet-client, O=system:masters), made on
    /// first start and kept in the PKI dir. Returns (cert PEM, key PEM).
    pub fn kubelet_client(&self) -> Result<(String, String)> {
        let crt = self.dir.join("apiserver-kubelet-client.crt");
        let key = self.dir.join("apiserver-kubelet-client.key");
        if let (Some(c), Some(k)) = (read(&crt)?, read(&key)?) {
            return Ok((c, k));
        }
        let (c, k) = self.issue(
            "kube-apiserver-kubelet-client",
            Some("system:masters"),
            &[],
            false,
        )?;
        write_private(&key, &k)?;
        write_private(&crt, &c)?;
        Ok((c, k))
    }

    /// The front-proxy CA (`front-proxy-ca`, separate from the cluster CA so that its
    /// certificates can assert any user through headers and nothing else) and its
    /// `front-proxy-client` certificate, both made on first use and kept in the PKI dir.
    pub fn front_proxy(&self) -> Result<FrontProxy> {
        let (ca_cert_pem, ca_key_pem) =
            ensure_ca(&self.dir, "front-proxy-ca", "skiff-front-proxy-ca")?;
        let crt = self.dir.join("front-proxy-client.crt");
        let key = self.dir.join("front-proxy-client.key");
        let (client_cert_pem, client_key_pem) = match (read(&crt)?, read(&key)?) {
            (Some(c), Some(k)) => (c, k),
            _ => {
                let (c, k) = sign(
                    &ca_cert_pem,
                    &ca_key_pem,
                    FRONT_PROXY_CLIENT,
                    None,
                    &[],
                    false,
                )?;
                write_private(&key, &k)?;
                write_private(&crt, &c)?;
                (c, k)
            }
        };
        Ok(FrontProxy {
            ca_cert_pem,
            client_cert_pem,
            client_key_pem,
        })
    }

    /// Writes a kubeconfig for `user` (a client certificate for CN=user, O=group) that reaches the
    /// API server at `server_url`, unless a valid one is already there.
    pub fn write_kubeconfig(
        &self,
        path: &Path,
        server_url: &str,
        user: &str,
        group: Option<&str>,
    ) -> Result<()> {
        if let Some(existing) = read(path)? {
            let same_ca = existing.contains(&b64(&self.ca_cert_pem));
            let same_server = existing.contains(&format!("server: {server_url}\n"));
            if same_ca && same_server {
                return Ok(());
            }
        }
        let (cert, key) = self.issue(user, group, &[], false)?;
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: skiff\n  cluster:\n    server: {server_url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: skiff\n  context:\n    cluster: skiff\n    user: {user}\ncurrent-context: skiff\npreferences: {{}}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
            ca = b64(&self.ca_cert_pem),
            cert = b64(&cert),
            key = b64(&key),
        );
        write_private(path, &yaml)
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;

    #[test]
    fn the_ca_survives_a_restart_and_the_kubeconfig_names_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let first = Pki::ensure(dir.path(), &["10.0.0.5".into()]).unwrap();
        let second = Pki::ensure(dir.path(), &[]).unwrap();
        assert_eq!(first.ca_cert_pem, second.ca_cert_pem);
        assert_ne!(first.serving_cert_pem, second.serving_cert_pem);
        let kc = dir.path().join("kubeconfig.yaml");
        second
            .write_kubeconfig(
                &kc,
                "https://127.0.0.1:6443",
                "admin",
                Some("system:masters"),
            )
            .unwrap();
        let text = std::fs::read_to_string(&kc).unwrap();
        assert!(text.contains("server: https://127.0.0.1:6443\n"));
        assert!(text.contains(&b64(&first.ca_cert_pem)));
    }

    #[test]
    fn the_kubelet_client_certificate_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path(), &[]).unwrap();
        let first = pki.kubelet_client().unwrap();
        assert_eq!(
            Pki::ensure(dir.path(), &[])
                .unwrap()
                .kubelet_client()
                .unwrap(),
            first
        );
        assert!(dir.path().join("apiserver-kubelet-client.key").is_file());
    }

    #[test]
    fn the_front_proxy_has_its_own_ca_and_a_kept_client_certificate() {
        use x509_parser::prelude::{FromDer, X509Certificate};
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::ensure(dir.path(), &[]).unwrap();
        let proxy = pki.front_proxy().unwrap();
        assert_ne!(proxy.ca_cert_pem, pki.ca_cert_pem);
        let again = Pki::load(dir.path()).unwrap().front_proxy().unwrap();
        assert_eq!(again.client_cert_pem, proxy.client_cert_pem);
        let der =
            rustls_pki_types::CertificateDer::from_pem_slice(proxy.client_cert_pem.as_bytes())
                .unwrap();
        let (_, cert) = X509Certificate::from_der(&der).unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), FRONT_PROXY_CLIENT);
        let issuer = cert.issuer().iter_common_name().next().unwrap();
        assert_eq!(issuer.as_str().unwrap(), "skiff-front-proxy-ca");
    }
}
