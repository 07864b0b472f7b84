//! `csrsigning` (upstream's `signer.go`): issues approved requests of the signers it serves —
//! `kubernetes.io/kube-apiserver-client-kubelet`, `kubernetes.io/kube-apiserver-client` and
//! `kubernetes.io/kubelet-serving` — with the cluster CA of `--cluster-signing-cert-file` /
//! `--cluster-signing-key-file`, for `--cluster-signing-duration` or the request's
//! `expirationSeconds` if shorter, never past the CA's own expiry. The certificate goes into
//! `status.certificate` through `/status`; a request its signer's rules refuse gets a `Failed`
//! condition (reason `SignerValidationFailure`) instead. Without the flags it is off, as
//! upstream's.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use rcgen::{ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};
use skiff_runtime::controller::{Action, Controller};

use super::{CLIENT_SIGNER, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER};
use crate::{Context, triggers};

/// How far back a certificate's validity starts (upstream's 5-minute backdate for clock skew).
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// Issues certificates for verified requests.
pub trait Signer: Send + Sync {
    /// A PEM certificate for the PEM `request` with these usages, valid for `lifetime` from
    /// `now` (backdated, and capped at the signer's own expiry).
    fn sign(
        &self,
        request: &[u8],
        usages: &[String],
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<String, String>;
}

/// The cluster CA as a [`Signer`].
pub struct CaSigner {
    issuer: Issuer<'static, KeyPair>,
    /// When the CA itself expires (seconds since the epoch).
    ca_not_after: i64,
}

impl CaSigner {
    /// The CA of these PEM files.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<CaSigner, String> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))
        };
        CaSigner::new(&read(cert_file)?, &read(key_file)?)
    }

    pub fn new(cert_pem: &str, key_pem: &str) -> Result<CaSigner, String> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| format!("the CA key: {e}"))?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)
            .map_err(|e| format!("the CA certificate: {e}"))?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|e| format!("the CA certificate: {e}"))?;
        let cert = pem
            .parse_x509()
            .map_err(|e| format!("the CA certificate: {e}"))?;
        Ok(CaSigner {
            issuer,
            ca_not_after: cert.validity().not_after.timestamp(),
        })
    }
}

/// Sets the certificate's validity (rcgen takes the `time` crate's type, which Skiff does not
/// otherwise use: the times are offsets from the epoch).
fn set_validity(params: &mut rcgen::CertificateParams, from: SystemTime, to: SystemTime) {
    let since = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + since(from);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + since(to);
}

impl Signer for CaSigner {
    fn sign(
        &self,
        request: &[u8],
        usages: &[String],
        lifetime: Duration,
        now: SystemTime,
    ) -> Result<String, String> {
        let text = std::str::from_utf8(request).map_err(|_| "the request is not PEM")?;
        let mut csr = rcgen::CertificateSigningRequestParams::from_pem(text)
            .map_err(|e| format!("reading the certificate request: {e}"))?;
        let requested = std::mem::take(&mut csr.params);
        let params = &mut csr.params;
        params.distinguished_name = requested.distinguished_name;
        params.subject_alt_names = requested.subject_alt_names;
        for usage in usages {
            match usage.as_str() {
                "digital signature" => params.key_usages.push(KeyUsagePurpose::DigitalSignature),
                "key encipherment" => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                "client auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth),
                "server auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth),
                other => return Err(format!("unsupported key usage {other:?}")),
            }
        }
        let ca_end = SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(self.ca_not_after).unwrap_or(0));
        set_validity(params, now - BACKDATE, (now + lifetime).min(ca_end));
        let cert = csr
            .signed_by(&self.issuer)
            .map_err(|e| format!("signing: {e}"))?;
        Ok(cert.pem())
    }
}

/// What the signer does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not approved, failed, issued already, or another signer's.
    Ignore,
    /// Write this PEM certificate into `status.certificate`.
    Issue(String),
    /// Add a `Failed` condition with this reason and message.
    Fail(&'static str, String),
}

/// The outcome for `csr` with `signer`, certificates lasting at most `max_lifetime`.
pub fn plan(
    csr: &CertificateSigningRequest,
    signer: &dyn Signer,
    max_lifetime: Duration,
    now: SystemTime,
) -> Outcome {
    let approved = super::has_condition(csr, "Approved") && !super::has_condition(csr, "Denied");
    if !approved || super::has_condition(csr, "Failed") || super::issued(csr) {
        return Outcome::Ignore;
    }
    let signer_name = csr.spec.signer_name.as_str();
    if ![KUBELET_CLIENT_SIGNER, CLIENT_SIGNER, KUBELET_SERVING_SIGNER].contains(&signer_name) {
        return Outcome::Ignore;
    }
    let request = match super::parse(&csr.spec.request.0) {
        Ok(request) => request,
        Err(e) => return Outcome::Fail("SignerValidationFailure", e),
    };
    let usages = super::usages(csr);
    let valid = match signer_name {
        KUBELET_CLIENT_SIGNER => super::validate_kubelet_client(&request, &usages),
        KUBELET_SERVING_SIGNER => super::validate_kubelet_serving(&request, &usages),
        _ => super::validate_client(&usages),
    };
    if let Err(e) = valid {
        return Outcome::Fail("SignerValidationFailure", e);
    }
    let requested = csr
        .spec
        .expiration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs);
    let lifetime = requested.map_or(max_lifetime, |r| r.min(max_lifetime));
    match signer.sign(&csr.spec.request.0, &usages, lifetime, now) {
        Ok(pem) => Outcome::Issue(pem),
        Err(e) => Outcome::Fail("SigningError", e),
    }
}

/// The request with the outcome written into its status.
pub fn with_outcome(
    csr: &CertificateSigningRequest,
    outcome: Outcome,
    now: Time,
) -> Option<CertificateSigningRequest> {
    let mut csr = csr.clone();
    let status = csr.status.get_or_insert_default();
    match outcome {
        Outcome::Ignore => return None,
        Outcome::Issue(pem) => status.certificate = Some(ByteString(pem.into_bytes())),
        Outcome::Fail(reason, message) => {
            status
                .conditions
                .get_or_insert_default()
                .push(CertificateSigningRequestCondition {
                    type_: "Failed".into(),
                    status: "True".into(),
                    reason: Some(reason.into()),
                    message: Some(message),
                    last_update_time: Some(now.clone()),
                    last_transition_time: Some(now),
                });
        }
    }
    Some(csr)
}

/// Writes a request's status.
#[async_trait]
pub trait SignerApi: Send + Sync {
    async fn update_status(&self, csr: &CertificateSigningRequest) -> kube::Result<()>;
}

/// Signs `csr` if it is ours and writes the outcome.
pub async fn reconcile(
    csr: &CertificateSigningRequest,
    signer: &dyn Signer,
    max_lifetime: Duration,
    api: &dyn SignerApi,
) -> kube::Result<()> {
    let outcome = plan(csr, signer, max_lifetime, SystemTime::now());
    if let Outcome::Fail(reason, message) = &outcome {
        tracing::warn!(csr = %csr.name_any(), reason, message, "csrsigning: not signing");
    }
    match with_outcome(csr, outcome, Time(jiff::Timestamp::now())) {
        Some(updated) => api.update_status(&updated).await,
        None => Ok(()),
    }
}

struct KubeStatus {
    client: kube::Client,
}

#[async_trait]
impl SignerApi for KubeStatus {
    async fn update_status(&self, csr: &CertificateSigningRequest) -> kube::Result<()> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        match api
            .replace_status(&csr.name_any(), &PostParams::default(), csr)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Runs the signer (idle without `--cluster-signing-cert-file` and `--cluster-signing-key-file`;
/// upstream's 5 workers).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let config = &ctx.config;
    let (Some(cert), Some(key)) = (
        &config.cluster_signing_cert_file,
        &config.cluster_signing_key_file,
    ) else {
        tracing::info!(
            "csrsigning: no --cluster-signing-cert-file/--cluster-signing-key-file; idle"
        );
        std::future::pending::<()>().await;
        return Ok(());
    };
    let signer = Arc::new(CaSigner::load(cert, key).map_err(crate::Error::Signer)?);
    let api = Arc::new(KubeStatus {
        client: ctx.client.clone(),
    });
    let max_lifetime = config.cluster_signing_duration;
    let requests = ctx.informers.get::<CertificateSigningRequest>();
    let controller = Controller::new("csrsigning");
    triggers::run_each(controller, &requests, move |csr| {
        let (signer, api) = (signer.clone(), api.clone());
        async move {
            reconcile(&csr, signer.as_ref(), max_lifetime, api.as_ref()).await?;
            Ok::<_, kube::Error>(Action::AwaitChange)
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::approver::approved;
    use super::super::testing::{csr, request_pem};
    use super::*;
    use x509_parser::prelude::FromDer;

    const CLIENT_USAGES: &[&str] = &["digital signature", "key encipherment", "client auth"];
    const BOOTSTRAP: (&str, &[&str]) = ("system:bootstrap:abcdef", &["system:bootstrappers"]);
    const YEAR: Duration = Duration::from_secs(8760 * 3600);

    fn ca() -> (CaSigner, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        (
            CaSigner::new(&cert.pem(), &key.serialize_pem()).unwrap(),
            cert.pem(),
        )
    }

    fn approved_node_request(expiration: Option<i32>) -> CertificateSigningRequest {
        let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
        let mut request = csr(
            "node-csr-1",
            &pem,
            KUBELET_CLIENT_SIGNER,
            CLIENT_USAGES,
            BOOTSTRAP,
        );
        request.spec.expiration_seconds = expiration;
        approved(&request, "ok", Time(jiff::Timestamp::now()))
    }

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn issued(outcome: Outcome) -> Vec<u8> {
        let Outcome::Issue(pem) = outcome else {
            panic!("not issued: {outcome:?}")
        };
        x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .unwrap()
            .1
            .contents
    }

    #[test]
    fn an_approved_node_request_is_issued_by_the_ca_for_the_node_for_a_year() {
        let (signer, ca_pem) = ca();
        let der = issued(plan(&approved_node_request(None), &signer, YEAR, now()));
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
        let cn: Vec<_> = cert
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        let orgs: Vec<_> = cert
            .subject()
            .iter_organization()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["system:node:n1"]);
        assert_eq!(orgs, ["system:nodes"]);
        assert!(cert.issuer().to_string().contains("test-ca"), "{ca_pem}");
        assert_eq!(cert.validity().not_before.timestamp(), 1_800_000_000 - 300);
        assert_eq!(
            cert.validity().not_after.timestamp(),
            1_800_000_000 + 8760 * 3600
        );
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
    }

    #[test]
    fn a_shorter_requested_expiration_wins() {
        let (signer, _) = ca();
        let der = issued(plan(
            &approved_node_request(Some(3600)),
            &signer,
            YEAR,
            now(),
        ));
        let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&der).unwrap();
        assert_eq!(cert.validity().not_after.timestamp(), 1_800_000_000 + 3600);
    }

    #[test]
    fn pending_or_foreign_requests_are_not_signed() {
        let (signer, _) = ca();
        let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
        let pending = csr("p", &pem, KUBELET_CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP);
        assert_eq!(plan(&pending, &signer, YEAR, now()), Outcome::Ignore);
        let mut foreign = approved_node_request(None);
        foreign.spec.signer_name = "example.com/signer".into();
        assert_eq!(plan(&foreign, &signer, YEAR, now()), Outcome::Ignore);
    }

    #[test]
    fn a_request_its_signer_refuses_fails_with_the_reason() {
        let (signer, _) = ca();
        let pem = request_pem("system:node:n1", &["system:masters"], &[]);
        let request = approved(
            &csr("m", &pem, KUBELET_CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP),
            "ok",
            Time(jiff::Timestamp::now()),
        );
        let outcome = plan(&request, &signer, YEAR, now());
        assert_eq!(
            outcome,
            Outcome::Fail(
                "SignerValidationFailure",
                "subject organization is not system:nodes".into()
            )
        );
        let failed = with_outcome(&request, outcome, Time(jiff::Timestamp::now())).unwrap();
        assert_eq!(plan(&failed, &signer, YEAR, now()), Outcome::Ignore);
    }
}
