//! Ingresses and IngressClasses (`networking.k8s.io/v1`): upstream's `ValidateIngressSpec` (a
//! default backend or rules, each path absolute with a known `pathType`, each backend one
//! service with a port name or number, or one resource, a valid class name) and
//! `ValidateIngressClass` (a domain-prefixed controller, fixed once created; parameters with a
//! kind, a name and a scope, `Cluster` by default).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath, is_dns1123_subdomain};

use super::Strategy;
use super::common::{immutable, int, set_default, str_at};

#[derive(Debug)]
pub struct IngressStrategy;

/// Upstream's `supportedPathTypes`.
const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];

/// One backend: a service (named, with a port name or number) or a resource, not both.
fn validate_backend(backend: &Value, path: &FieldPath) -> Vec<FieldError> {
    let service = backend.get("service").filter(|s| !s.is_null());
    let resource = backend.get("resource").filter(|r| !r.is_null());
    let mut errs = Vec::new();
    match (service, resource) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            path,
            backend.clone(),
            "cannot set both resource and service backends",
        )),
        (None, None) => errs.push(FieldError::invalid(
            path,
            backend.clone(),
            "resource or service backend is required",
        )),
        (Some(service), None) => {
            let p = path.child("service");
            let name = str_at(service, "/name");
            if name.is_empty() {
                errs.push(FieldError::required(&p.child("name"), ""));
            }
            let port_name = str_at(service, "/port/name");
            let port_number = service.pointer("/port/number").and_then(int).unwrap_or(0);
            match (port_name.is_empty(), port_number == 0) {
                (true, true) => errs.push(FieldError::required(
                    &p.child("port"),
                    "port name or number is required",
                )),
                (false, false) => errs.push(FieldError::invalid(
                    &p.child("port"),
                    service.get("port").cloned().unwrap_or(Value::Null),
                    "cannot set both port name & port number",
                )),
                _ => {}
            }
            if !(0..=65535).contains(&port_number) {
                errs.push(FieldError::invalid(
                    &p.child("port").child("number"),
                    port_number,
                    "must be between 1 and 65535, inclusive",
                ));
            }
        }
        (None, Some(resource)) => {
            let p = path.child("resource");
            for field in ["kind", "name"] {
                if str_at(resource, &format!("/{field}")).is_empty() {
                    errs.push(FieldError::required(&p.child(field), ""));
                }
            }
        }
    }
    errs
}

fn validate_rule(rule: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let host = str_at(rule, "/host");
    if !host.is_empty() {
        let bare = host.strip_prefix("*.").unwrap_or(host);
        errs.extend(
            is_dns1123_subdomain(bare)
                .into_iter()
                .map(|msg| FieldError::invalid(&path.child("host"), host, msg)),
        );
    }
    let Some(http) = rule.get("http").filter(|h| !h.is_null()) else {
        return errs;
    };
    let paths_path = path.child("http").child("paths");
    let paths = http.get("paths").and_then(Value::as_array);
    if paths.is_none_or(Vec::is_empty) {
        errs.push(FieldError::required(&paths_path, ""));
    }
    for (i, p) in paths.into_iter().flatten().enumerate() {
        let here = paths_path.index(i);
        let kind = str_at(p, "/pathType");
        if kind.is_empty() {
            errs.push(FieldError::required(
                &here.child("pathType"),
                "pathType must be specified",
            ));
        } else if !PATH_TYPES.contains(&kind) {
            errs.push(FieldError::not_supported(
                &here.child("pathType"),
                kind,
                PATH_TYPES,
            ));
        }
        let route = str_at(p, "/path");
        if matches!(kind, "Exact" | "Prefix") && !route.starts_with('/') {
            errs.push(FieldError::invalid(
                &here.child("path"),
                route,
                "must be an absolute path",
            ));
        }
        errs.extend(validate_backend(
            p.get("backend").unwrap_or(&Value::Null),
            &here.child("backend"),
        ));
    }
    errs
}

impl Strategy for IngressStrategy {
    fn validate(&self, ingress: &Value) -> Vec<FieldError> {
        let null = Value::Null;
        let spec = ingress.get("spec").unwrap_or(&null);
        let path = FieldPath::new("spec");
        let mut errs = Vec::new();
        let rules = spec.get("rules").and_then(Value::as_array);
        let backend = spec.get("defaultBackend").filter(|b| !b.is_null());
        if rules.is_none_or(Vec::is_empty) && backend.is_none() {
            errs.push(FieldError::invalid(
                &path,
                spec.get("rules").cloned().unwrap_or(Value::Null),
                "either `defaultBackend` or `rules` must be specified",
            ));
        }
        if let Some(backend) = backend {
            errs.extend(validate_backend(backend, &path.child("defaultBackend")));
        }
        for (i, rule) in rules.into_iter().flatten().enumerate() {
            errs.extend(validate_rule(rule, &path.child("rules").index(i)));
        }
        if let Some(class) = spec.get("ingressClassName").and_then(Value::as_str) {
            errs.extend(
                is_dns1123_subdomain(class)
                    .into_iter()
                    .map(|msg| FieldError::invalid(&path.child("ingressClassName"), class, msg)),
            );
        }
        errs
    }
}

#[derive(Debug)]
pub struct IngressClassStrategy;

/// Upstream's `maxLenIngressClassController`.
const CONTROLLER_MAX: usize = 250;

fn class_defaults(class: &mut Value) {
    if let Some(parameters) = class
        .pointer_mut("/spec/parameters")
        .filter(|p| p.is_object())
    {
        set_default(parameters, "scope", json!("Cluster"));
    }
}

impl Strategy for IngressClassStrategy {
    fn prepare_for_create(&self, class: &mut Value) {
        class_defaults(class);
    }

    fn prepare_for_update(&self, class: &mut Value, _old: &Value) {
        class_defaults(class);
    }

    fn validate(&self, class: &Value) -> Vec<FieldError> {
        let path = FieldPath::new("spec");
        let mut errs = Vec::new();
        let controller = str_at(class, "/spec/controller");
        let cpath = path.child("controller");
        if controller.is_empty() {
            errs.push(FieldError::required(&cpath, ""));
        } else if controller.len() > CONTROLLER_MAX {
            errs.push(FieldError::too_long(&cpath, CONTROLLER_MAX));
        } else {
            let domain = controller.split('/').next().unwrap_or("");
            if !controller.contains('/') || !is_dns1123_subdomain(domain).is_empty() {
                errs.push(FieldError::invalid(
                    &cpath,
                    controller,
                    "must be a domain-prefixed path (such as \"acme.io/foo\")",
                ));
            }
        }
        if let Some(parameters) = class.pointer("/spec/parameters").filter(|p| !p.is_null()) {
            let p = path.child("parameters");
            for field in ["kind", "name"] {
                if str_at(parameters, &format!("/{field}")).is_empty() {
                    errs.push(FieldError::required(&p.child(field), ""));
                }
            }
            let namespace = str_at(parameters, "/namespace");
            match str_at(parameters, "/scope") {
                "Cluster" if !namespace.is_empty() => errs.push(FieldError::forbidden(
                    &p.child("namespace"),
                    "`parameters.scope` is set to 'Cluster'",
                )),
                "Namespace" if namespace.is_empty() => errs.push(FieldError::required(
                    &p.child("namespace"),
                    "`parameters.scope` is set to 'Namespace'",
                )),
                "Cluster" | "Namespace" => {}
                "" => errs.push(FieldError::required(&p.child("scope"), "")),
                other => errs.push(FieldError::not_supported(
                    &p.child("scope"),
                    other,
                    &["Cluster", "Namespace"],
                )),
            }
        }
        errs
    }

    fn validate_update(&self, class: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(class);
        errs.extend(immutable(
            class.pointer("/spec/controller"),
            old.pointer("/spec/controller"),
            &FieldPath::new("spec").child("controller"),
        ));
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn ingress() -> Value {
        json!({"metadata": {"name": "web"},
               "spec": {"ingressClassName": "nginx",
                        "rules": [{"host": "*.example.com", "http": {"paths": [
                            {"path": "/", "pathType": "Prefix",
                             "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
    }

    #[test]
    fn ingress_validation_cases_read_as_upstream_messages() {
        assert!(IngressStrategy.validate(&ingress()).is_empty());
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "nothing to route",
                Box::new(|o| o["spec"] = json!({})),
                vec![
                    "spec: Invalid value: null: either `defaultBackend` or `rules` must be specified",
                ],
            ),
            (
                "a relative prefix",
                Box::new(|o| o["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!("api")),
                vec![
                    "spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path",
                ],
            ),
            (
                "no path type",
                Box::new(|o| {
                    o["spec"]["rules"][0]["http"]["paths"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("pathType");
                }),
                vec![
                    "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified",
                ],
            ),
            (
                "a service without a port",
                Box::new(|o| {
                    o["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"] =
                        json!({"name": "web"})
                }),
                vec![
                    "spec.rules[0].http.paths[0].backend.service.port: Required value: port name or number is required",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut obj = ingress();
            change(&mut obj);
            assert_eq!(errors(IngressStrategy.validate(&obj)), want, "{name}");
        }
    }

    #[test]
    fn ingress_classes_name_a_domain_prefixed_controller_that_never_changes() {
        let mut class = json!({"metadata": {"name": "nginx"},
            "spec": {"controller": "k8s.io/ingress-nginx",
                     "parameters": {"apiGroup": "k8s.example.com", "kind": "Params", "name": "p"}}});
        IngressClassStrategy.prepare_for_create(&mut class);
        assert_eq!(class["spec"]["parameters"]["scope"], "Cluster");
        assert!(IngressClassStrategy.validate(&class).is_empty());
        let mut changed = class.clone();
        changed["spec"]["controller"] = json!("nginx");
        assert_eq!(
            errors(IngressClassStrategy.validate_update(&changed, &class)),
            [
                "spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")",
                "spec.controller: Invalid value: \"nginx\": field is immutable",
            ]
        );
    }
}
