//! The certificate controllers of kubelet TLS bootstrapping (upstream's
//! `pkg/controller/certificates`): what a CertificateSigningRequest asks for, read from its PEM
//! request and its spec, and the checks both controllers share.
//!
//! # Layout
//! - [`approver`] (`csrapproving`): approves node client certificates after a
//!   SubjectAccessReview, and Skiff's kube-proxy and network policy client certificates for
//!   joining nodes.
//! - [`signer`] (`csrsigning`): issues approved requests with the cluster CA.

pub mod approver;
pub mod signer;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

/// Node client certificates (`system:node:<name>` in `system:nodes`).
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Client certificates of any user.
pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
/// Kubelet serving certificates.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

pub const NODE_USER_PREFIX: &str = "system:node:";
pub const NODES_GROUP: &str = "system:nodes";

/// The subject and names of a PEM `CERTIFICATE REQUEST` whose signature checks out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: usize,
    pub emails: usize,
    pub uris: usize,
}

/// Parses and verifies `pem` (upstream's `ParseCSR`: one `CERTIFICATE REQUEST` block whose
/// signature is made by the key it carries).
pub fn parse(pem: &[u8]) -> Result<Request, String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST")?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| format!("parsing the certificate request: {e}"))?;
    csr.verify_signature()
        .map_err(|e| format!("the certificate request's signature: {e}"))?;
    let subject = &csr.certification_request_info.subject;
    let texts = |attrs: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        attrs
            .filter_map(|a| a.as_str().ok().map(String::from))
            .collect::<Vec<_>>()
    };
    let mut request = Request {
        common_name: texts(&mut subject.iter_common_name())
            .into_iter()
            .next()
            .unwrap_or_default(),
        organizations: texts(&mut subject.iter_organization()),
        ..Request::default()
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => request.dns_names.push(d.to_string()),
                    GeneralName::IPAddress(_) => request.ip_addresses += 1,
                    GeneralName::RFC822Name(_) => request.emails += 1,
                    GeneralName::URI(_) => request.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(request)
}

/// The request's usages, sorted and deduplicated.
pub fn usages(csr: &CertificateSigningRequest) -> Vec<String> {
    let mut usages = csr.spec.usages.clone().unwrap_or_default();
    usages.sort();
    usages.dedup();
    usages
}

/// Whether the usages are `required` plus at most `key encipherment` (upstream's check of
/// kubelet client and serving requests).
fn usages_are(usages: &[String], required: &[&str]) -> bool {
    let optional = "key encipherment";
    required.iter().all(|r| usages.iter().any(|u| u == r))
        && usages
            .iter()
            .all(|u| u == optional || required.contains(&u.as_str()))
}

/// Upstream's `ValidateKubeletClientCSR`: `system:node:<name>` in exactly `system:nodes`, no
/// subject alternative names, usages digital signature and client auth (key encipherment
/// allowed).
pub fn validate_kubelet_client(request: &Request, usages: &[String]) -> Result<(), String> {
    if request.organizations != [NODES_GROUP] {
        return Err("subject organization is not system:nodes".into());
    }
    if !request.common_name.starts_with(NODE_USER_PREFIX) {
        return Err("subject common name does not begin with system:node:".into());
    }
    no_alternative_names(request, true)?;
    if !usages_are(usages, &["client auth", "digital signature"]) {
        return Err(format!(
            "usages did not match [client auth digital signature key encipherment]: {usages:?}"
        ));
    }
    Ok(())
}

/// Upstream's `ValidateKubeletServingCSR`: `system:node:<name>` in exactly `system:nodes`, DNS
/// or IP names only (at least one), usages digital signature and server auth.
pub fn validate_kubelet_serving(request: &Request, usages: &[String]) -> Result<(), String> {
    if request.organizations != [NODES_GROUP] {
        return Err("subject organization is not system:nodes".into());
    }
    if !request.common_name.starts_with(NODE_USER_PREFIX) {
        return Err("subject common name does not begin with system:node:".into());
    }
    no_alternative_names(request, false)?;
    if request.dns_names.is_empty() && request.ip_addresses == 0 {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !usages_are(usages, &["digital signature", "server auth"]) {
        return Err(format!(
            "usages did not match [digital signature key encipherment server auth]: {usages:?}"
        ));
    }
    Ok(())
}

/// Upstream's check of `kube-apiserver-client` requests: client auth, with digital signature
/// and key encipherment allowed.
pub fn validate_client(usages: &[String]) -> Result<(), String> {
    if !usages_are(usages, &["client auth"])
        && !usages_are(usages, &["client auth", "digital signature"])
    {
        return Err(format!("invalid usage for client certificate: {usages:?}"));
    }
    Ok(())
}

fn no_alternative_names(request: &Request, dns_and_ip_too: bool) -> Result<(), String> {
    if dns_and_ip_too && !request.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if request.emails > 0 {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if dns_and_ip_too && request.ip_addresses > 0 {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if request.uris > 0 {
        return Err("URI subjectAltNames are not allowed".into());
    }
    Ok(())
}

/// Whether the request has a condition of `kind` whose status is not False (upstream counts a
/// condition without status as True).
pub fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status != "False"))
}

/// Whether a certificate was issued.
pub fn issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

#[cfg(test)]
pub(crate) mod testing {
    //! Requests made with real keys, for the controllers' tests.

    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestSpec,
    };
    use kube::api::ObjectMeta;

    /// A PEM request for `cn` in `orgs`, with these DNS names.
    pub fn request_pem(cn: &str, orgs: &[&str], dns: &[&str]) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>())
                .unwrap();
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    /// A request object for `signer` with `usages`, made by `user` in `groups`.
    pub fn csr(
        name: &str,
        pem: &str,
        signer: &str,
        usages: &[&str],
        (user, groups): (&str, &[&str]),
    ) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.as_bytes().to_vec()),
                signer_name: signer.into(),
                usages: Some(usages.iter().map(|u| u.to_string()).collect()),
                username: Some(user.into()),
                groups: Some(groups.iter().map(|g| g.to_string()).collect()),
                ..Default::default()
            },
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::request_pem;
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_request_is_read_for_its_subject_and_names() {
        let pem = request_pem("system:node:n1", &["system:nodes"], &["n1.example"]);
        let request = parse(pem.as_bytes()).unwrap();
        assert_eq!(request.common_name, "system:node:n1");
        assert_eq!(request.organizations, ["system:nodes"]);
        assert_eq!(request.dns_names, ["n1.example"]);
        assert!(parse(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").is_err());
    }

    #[test]
    fn a_node_client_request_is_a_node_in_system_nodes_without_names_for_client_auth() {
        let usages = strings(&["client auth", "digital signature", "key encipherment"]);
        let node = parse(request_pem("system:node:n1", &["system:nodes"], &[]).as_bytes()).unwrap();
        assert_eq!(validate_kubelet_client(&node, &usages), Ok(()));
        assert_eq!(
            validate_kubelet_client(&node, &strings(&["client auth", "server auth"])),
            Err("usages did not match [client auth digital signature key encipherment]: [\"client auth\", \"server auth\"]".into())
        );
        let admin =
            parse(request_pem("system:node:n1", &["system:masters"], &[]).as_bytes()).unwrap();
        assert_eq!(
            validate_kubelet_client(&admin, &usages),
            Err("subject organization is not system:nodes".into())
        );
        let named =
            parse(request_pem("system:node:n1", &["system:nodes"], &["x"]).as_bytes()).unwrap();
        assert_eq!(
            validate_kubelet_client(&named, &usages),
            Err("DNS subjectAltNames are not allowed".into())
        );
        assert!(
            validate_kubelet_serving(&named, &strings(&["digital signature", "server auth"]))
                .is_ok()
        );
    }
}
