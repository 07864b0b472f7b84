//! CertificateSigningRequests (`certificates.k8s.io/v1`), after upstream's
//! `pkg/registry/certificates/certificates/strategy.go` and `ValidateCertificateSigningRequest*`:
//! a create records who asked (`spec.username`, `uid`, `groups`, `extra`, whatever the client
//! sent); the spec never changes afterwards; `/approval` writes only `status.conditions`;
//! `/status` writes the rest of the status but keeps the Approved and Denied conditions; a
//! request is a PEM `CERTIFICATE REQUEST`, names a signer and its usages, Approved and Denied
//! exclude each other and neither goes once set, and an issued certificate stays as issued.

use base64::Engine;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{int_at, str_at};
use crate::authn::UserInfo;

#[derive(Debug)]
pub struct CertificateSigningRequestStrategy;

pub const GROUP: &str = "certificates.k8s.io";
pub const PLURAL: &str = "certificatesigningrequests";
/// The conditions only `/approval` may set, and never remove.
const DECISIONS: [&str; 2] = ["Approved", "Denied"];

/// Records the requesting user in the spec of a new request (upstream's `PrepareForCreate`:
/// clients cannot claim to be someone else).
fn set_requester(csr: &mut Value, user: &UserInfo) {
    if !csr.get("spec").is_some_and(Value::is_object) {
        csr["spec"] = json!({});
    }
    let spec = &mut csr["spec"];
    spec["username"] = json!(user.name);
    for (key, value) in [
        ("uid", (!user.uid.is_empty()).then(|| json!(user.uid))),
        (
            "groups",
            (!user.groups.is_empty()).then(|| json!(user.groups)),
        ),
        ("extra", (!user.extra.is_empty()).then(|| json!(user.extra))),
    ] {
        match value {
            Some(v) => spec[key] = v,
            None => {
                if let Some(m) = spec.as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
}

/// What a write to the `approval` or `status` subresource keeps of `current` (applied after
/// the generic rules): `/approval` changes only `status.conditions`; `/status` cannot touch the
/// Approved and Denied conditions.
fn prepare_subresource_update(subresource: &str, csr: &mut Value, current: &Value) {
    let conditions = |v: &Value| {
        v.pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let is_decision = |c: &Value| DECISIONS.contains(&c["type"].as_str().unwrap_or(""));
    let merged: Vec<Value> = match subresource {
        "approval" => conditions(csr),
        "status" => {
            let mut kept: Vec<Value> = conditions(current)
                .into_iter()
                .filter(|c| is_decision(c))
                .collect();
            kept.extend(conditions(csr).into_iter().filter(|c| !is_decision(c)));
            kept
        }
        _ => return,
    };
    let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
    if subresource == "status" {
        status = csr.get("status").cloned().unwrap_or_else(|| json!({}));
    }
    if merged.is_empty() {
        if let Some(m) = status.as_object_mut() {
            m.remove("conditions");
        }
    } else {
        status["conditions"] = Value::Array(merged);
    }
    csr["status"] = status;
}

/// The decoded bytes of a `[]byte` field (base64 in JSON).
fn bytes_at(csr: &Value, pointer: &str) -> Option<Vec<u8>> {
    let text = csr.pointer(pointer)?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn validate_request(csr: &Value, spec: &FieldPath) -> Vec<FieldError> {
    let path = spec.child("request");
    let Some(pem) = bytes_at(csr, "/spec/request") else {
        return vec![FieldError::required(&path, "")];
    };
    let parsed = x509_parser::pem::parse_x509_pem(&pem)
        .ok()
        .filter(|(_, block)| block.label == "CERTIFICATE REQUEST");
    let Some((_, block)) = parsed else {
        return vec![FieldError::invalid(
            &path,
            "<request>",
            "PEM block type must be CERTIFICATE REQUEST",
        )];
    };
    use x509_parser::prelude::FromDer;
    match x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents) {
        Ok((_, request)) if request.verify_signature().is_ok() => Vec::new(),
        _ => vec![FieldError::invalid(
            &path,
            "<request>",
            "x509: invalid certificate request",
        )],
    }
}

fn validate_conditions(csr: &Value) -> Vec<FieldError> {
    let path = FieldPath::new("status").child("conditions");
    let mut errs = Vec::new();
    let conditions = csr
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut seen: Vec<&str> = Vec::new();
    for (i, c) in conditions.iter().enumerate() {
        let kind = c["type"].as_str().unwrap_or("");
        if kind.is_empty() {
            errs.push(FieldError::required(&path.index(i).child("type"), ""));
        } else if seen.contains(&kind) {
            errs.push(FieldError::duplicate(&path.index(i).child("type"), kind));
        }
        seen.push(kind);
    }
    if seen.contains(&"Approved") && seen.contains(&"Denied") {
        errs.push(FieldError::invalid(
            &path,
            Value::Array(conditions.clone()),
            "Approved and Denied conditions are mutually exclusive",
        ));
    }
    errs
}

impl Strategy for CertificateSigningRequestStrategy {
    fn prepare_for_create_by(&self, csr: &mut Value, user: &UserInfo) {
        set_requester(csr, user);
    }

    fn prepare_for_subresource_update(&self, sub: &str, csr: &mut Value, old: &Value) -> bool {
        prepare_subresource_update(sub, csr, old);
        false
    }

    fn prepare_for_update(&self, csr: &mut Value, old: &Value) {
        // the spec is the request: fixed once made (upstream's PrepareForUpdate of every path)
        match old.get("spec") {
            Some(spec) => csr["spec"] = spec.clone(),
            None => {
                if let Some(m) = csr.as_object_mut() {
                    m.remove("spec");
                }
            }
        }
    }

    fn validate(&self, csr: &Value) -> Vec<FieldError> {
        let spec = FieldPath::new("spec");
        let mut errs = validate_request(csr, &spec);
        if str_at(csr, "/spec/signerName").is_empty() {
            errs.push(FieldError::required(&spec.child("signerName"), ""));
        }
        let usages = csr.pointer("/spec/usages").and_then(Value::as_array);
        if usages.is_none_or(Vec::is_empty) {
            errs.push(FieldError::required(
                &spec.child("usages"),
                "usages must be provided",
            ));
        }
        if let Some(seconds) = int_at(csr, "/spec/expirationSeconds")
            && seconds < 600
        {
            errs.push(FieldError::invalid(
                &spec.child("expirationSeconds"),
                seconds,
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
        errs.extend(validate_conditions(csr));
        errs
    }

    fn validate_update(&self, csr: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_conditions(csr);
        let kinds = |v: &Value| -> Vec<String> {
            v.pointer("/status/conditions")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c["type"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let (now, before) = (kinds(csr), kinds(old));
        for decision in DECISIONS {
            if before.iter().any(|k| k == decision) && !now.iter().any(|k| k == decision) {
                errs.push(FieldError::forbidden(
                    &FieldPath::new("status").child("conditions"),
                    format!("updates may not remove a condition of type {decision:?}"),
                ));
            }
        }
        let issued = str_at(old, "/status/certificate");
        if !issued.is_empty() && str_at(csr, "/status/certificate") != issued {
            errs.push(FieldError::invalid(
                &FieldPath::new("status").child("certificate"),
                "<certificate data>",
                "updates may not modify existing certificate content",
            ));
        }
        errs
    }

    fn fields(&self, csr: &Value) -> Vec<(&'static str, String)> {
        vec![(
            "spec.signerName",
            str_at(csr, "/spec/signerName").to_string(),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn request_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:n1");
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr() -> Value {
        json!({"metadata": {"name": "node-csr-1"},
               "spec": {"request": b64(&request_pem()),
                        "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                        "usages": ["digital signature", "client auth"]}})
    }

    fn messages(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_request_names_a_pem_request_a_signer_and_usages() {
        assert!(
            CertificateSigningRequestStrategy
                .validate(&csr())
                .is_empty()
        );
        let bad = json!({"spec": {"request": b64("not pem"), "expirationSeconds": 60}});
        assert_eq!(
            messages(CertificateSigningRequestStrategy.validate(&bad)),
            [
                "spec.request: Invalid value: \"<request>\": PEM block type must be CERTIFICATE REQUEST",
                "spec.signerName: Required value",
                "spec.usages: Required value: usages must be provided",
                "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)",
            ]
        );
    }

    #[test]
    fn the_requester_is_recorded_whatever_the_client_claimed() {
        let mut obj = csr();
        obj["spec"]["username"] = json!("system:admin");
        obj["spec"]["uid"] = json!("forged");
        let user = UserInfo {
            name: "system:bootstrap:abcdef".into(),
            groups: vec!["system:bootstrappers".into()],
            ..UserInfo::default()
        };
        set_requester(&mut obj, &user);
        assert_eq!(obj["spec"]["username"], "system:bootstrap:abcdef");
        assert_eq!(obj["spec"]["groups"], json!(["system:bootstrappers"]));
        assert!(obj["spec"].get("uid").is_none());
    }

    #[test]
    fn approval_writes_only_conditions_and_status_keeps_the_decision() {
        let mut current = csr();
        current["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
        let mut approval = current.clone();
        approval["status"] = json!({"certificate": "Zm9yZ2Vk",
            "conditions": [{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}]});
        prepare_subresource_update("approval", &mut approval, &current);
        assert!(approval["status"].get("certificate").is_none());
        assert_eq!(approval["status"]["conditions"][1]["type"], "Failed");

        let mut status = current.clone();
        status["status"] = json!({"certificate": "Y2VydA=="});
        prepare_subresource_update("status", &mut status, &current);
        assert_eq!(status["status"]["certificate"], "Y2VydA==");
        assert_eq!(status["status"]["conditions"][0]["type"], "Approved");
    }

    #[test]
    fn decisions_exclude_each_other_stay_once_made_and_a_certificate_stays_as_issued() {
        let mut old = csr();
        old["status"] = json!({"certificate": "Y2VydA==",
                               "conditions": [{"type": "Approved", "status": "True"}]});
        let mut both = old.clone();
        both["status"]["conditions"] = json!([{"type": "Approved"}, {"type": "Denied"}]);
        let errs = messages(CertificateSigningRequestStrategy.validate_update(&both, &old));
        assert!(
            errs[0].ends_with("Approved and Denied conditions are mutually exclusive"),
            "{errs:?}"
        );
        let mut undone = old.clone();
        undone["status"] = json!({"certificate": "b3RoZXI="});
        assert_eq!(
            messages(CertificateSigningRequestStrategy.validate_update(&undone, &old)),
            [
                "status.conditions: Forbidden: updates may not remove a condition of type \"Approved\"",
                "status.certificate: Invalid value: \"<certificate data>\": updates may not modify existing certificate content",
            ]
        );
    }
}
