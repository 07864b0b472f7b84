//! APIServices (`apiregistration.k8s.io/v1`): `spec.service.port` defaults to 443 and upstream's
//! `ValidateAPIService` applies: the name is `<version>.<group>`, only `v1` may have the empty
//! group, priorities are in range, and a Local APIService (no `spec.service`) has neither a
//! `caBundle` nor `insecureSkipTLSVerify`, which a remote one may not have both of.

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::Strategy;
use super::common::{int_at, set_default, str_at};

/// Upstream's default `spec.service.port`.
pub const DEFAULT_SERVICE_PORT: u16 = 443;

#[derive(Debug)]
pub struct ApiServiceStrategy;

fn default_port(api_service: &mut Value) {
    if let Some(service) = api_service.pointer_mut("/spec/service")
        && service.is_object()
    {
        set_default(service, "port", json!(DEFAULT_SERVICE_PORT));
    }
}

impl Strategy for ApiServiceStrategy {
    /// `<version>.<group>` (`v1.` for core): path segments, as upstream.
    fn name_validation(&self) -> fn(&str) -> Vec<String> {
        skiff_apimachinery::validation::is_path_segment_name
    }

    fn prepare_for_create(&self, api_service: &mut Value) {
        default_port(api_service);
    }

    fn prepare_for_update(&self, api_service: &mut Value, _old: &Value) {
        default_port(api_service);
    }

    fn validate(&self, api_service: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = FieldPath::new("spec");
        let group = str_at(api_service, "/spec/group");
        let version = str_at(api_service, "/spec/version");
        let name = str_at(api_service, "/metadata/name");
        let required = format!("{version}.{group}");
        // the path segment rule is the generic metadata check; the rest is the name's own
        if validation::is_path_segment_name(name).is_empty() && name != required {
            errs.push(FieldError::invalid(
                &FieldPath::new("metadata").child("name"),
                name,
                format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
            ));
        }
        if group.is_empty() && version != "v1" {
            errs.push(FieldError::required(
                &spec.child("group"),
                "only v1 may have an empty group and it better be legacy kube",
            ));
        }
        if !group.is_empty() {
            for msg in validation::is_dns1123_subdomain(group) {
                errs.push(FieldError::invalid(&spec.child("group"), group, msg));
            }
        }
        for msg in validation::is_dns1035_label(version) {
            errs.push(FieldError::invalid(&spec.child("version"), version, msg));
        }
        let group_priority = int_at(api_service, "/spec/groupPriorityMinimum").unwrap_or(0);
        if !(1..=20000).contains(&group_priority) {
            errs.push(FieldError::invalid(
                &spec.child("groupPriorityMinimum"),
                group_priority,
                "must be positive and less than 20000",
            ));
        }
        let version_priority = int_at(api_service, "/spec/versionPriority").unwrap_or(0);
        if !(1..=1000).contains(&version_priority) {
            errs.push(FieldError::invalid(
                &spec.child("versionPriority"),
                version_priority,
                "must be positive and less than 1000",
            ));
        }
        let ca_bundle = str_at(api_service, "/spec/caBundle");
        let insecure = api_service.pointer("/spec/insecureSkipTLSVerify") == Some(&json!(true));
        let Some(service) = api_service
            .pointer("/spec/service")
            .filter(|s| !s.is_null())
        else {
            if !ca_bundle.is_empty() {
                // the bundle is base64 in JSON; upstream counts its decoded bytes
                let bytes = ca_bundle.len() / 4 * 3;
                errs.push(FieldError::invalid(
                    &spec.child("caBundle"),
                    format!("{bytes} bytes"),
                    "local APIServices may not have a caBundle",
                ));
            }
            if insecure {
                errs.push(FieldError::invalid(
                    &spec.child("insecureSkipTLSVerify"),
                    true,
                    "local APIServices may not have insecureSkipTLSVerify",
                ));
            }
            return errs;
        };
        let path = spec.child("service");
        if str_at(service, "/namespace").is_empty() {
            errs.push(FieldError::required(&path.child("namespace"), ""));
        }
        if str_at(service, "/name").is_empty() {
            errs.push(FieldError::required(&path.child("name"), ""));
        }
        let port = int_at(service, "/port").unwrap_or(i64::from(DEFAULT_SERVICE_PORT));
        let port_errs = validation::is_valid_port_num(port);
        if !port_errs.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("port"),
                port,
                format!("port is not valid: {}", port_errs.join(", ")),
            ));
        }
        if insecure && !ca_bundle.is_empty() {
            errs.push(FieldError::invalid(
                &spec.child("insecureSkipTLSVerify"),
                true,
                "may not be true if caBundle is present",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(api_service: &Value) -> Vec<String> {
        ApiServiceStrategy
            .validate(api_service)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_remote_api_service_gets_port_443_and_passes() {
        let mut remote = json!({"metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "insecureSkipTLSVerify": true,
                     "service": {"namespace": "kube-system", "name": "metrics-server"}}});
        ApiServiceStrategy.prepare_for_create(&mut remote);
        assert_eq!(remote["spec"]["service"]["port"], 443);
        assert!(messages(&remote).is_empty(), "{:?}", messages(&remote));
        let local = json!({"metadata": {"name": "v1."},
            "spec": {"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}});
        assert!(messages(&local).is_empty(), "{:?}", messages(&local));
    }

    #[test]
    fn the_name_priorities_and_tls_settings_are_checked_as_upstream() {
        let bad = json!({"metadata": {"name": "metrics"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                     "groupPriorityMinimum": 0, "versionPriority": 1001,
                     "caBundle": "AAAA", "insecureSkipTLSVerify": true,
                     "service": {"namespace": "", "name": "m", "port": 70000}}});
        assert_eq!(
            messages(&bad),
            [
                "metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\"",
                "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 1001: must be positive and less than 1000",
                "spec.service.namespace: Required value",
                "spec.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive",
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present",
            ]
        );
        let local = json!({"metadata": {"name": "v2."},
            "spec": {"version": "v2", "groupPriorityMinimum": 1, "versionPriority": 1,
                     "caBundle": "AAAA", "insecureSkipTLSVerify": true}});
        assert_eq!(
            messages(&local),
            [
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                "spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ]
        );
    }
}
