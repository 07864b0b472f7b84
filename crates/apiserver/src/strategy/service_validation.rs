//! The checks of upstream's `ValidateService` (ports, type, session affinity, ClusterIPs and IP
//! families on a single-stack IPv4 cluster, external IPs, traffic policies, source ranges) and
//! of `ValidateServiceUpdate` (the primary ClusterIP and IP family never change, nor a
//! LoadBalancer's `loadBalancerClass`).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::{externally_accessible, headless, kind};
use crate::strategy::common::{dns1123_label, int, non_special_ip, str_at, strings, valid_cidr};

/// Upstream's `MaxClientIPServiceAffinitySeconds` (one day).
const MAX_AFFINITY_SECONDS: i64 = 86400;
/// The kubelet's port, which LoadBalancers may not expose.
const KUBELET_PORT: i64 = 10250;

/// Whether the Service needs a health check NodePort (LoadBalancer with Local traffic).
pub fn needs_health_check(svc: &Value) -> bool {
    kind(svc) == "LoadBalancer" && str_at(svc, "/spec/externalTrafficPolicy") == "Local"
}

fn validate_ports(svc: &Value, spec_path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ports_path = spec_path.child("ports");
    let mut names = Vec::new();
    let mut seen_ports = Vec::new();
    let mut seen_node_ports = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        let p = ports_path.index(i);
        let name = str_at(port, "/name");
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else if !name.is_empty() {
            errs.extend(dns1123_label(name, &p.child("name")));
            if names.contains(&name) {
                errs.push(FieldError::duplicate(&p.child("name"), name));
            } else {
                names.push(name);
            }
        }
        let number = port.get("port").and_then(int).unwrap_or(0);
        for msg in validation::is_valid_port_num(number) {
            errs.push(FieldError::invalid(&p.child("port"), number, msg));
        }
        let protocol = str_at(port, "/protocol");
        match protocol {
            "" => errs.push(FieldError::required(&p.child("protocol"), "")),
            "TCP" | "UDP" | "SCTP" => {}
            other => errs.push(FieldError::not_supported(
                &p.child("protocol"),
                other,
                &["SCTP", "TCP", "UDP"],
            )),
        }
        let target = p.child("targetPort");
        match port.get("targetPort") {
            Some(Value::String(s)) => {
                for msg in validation::is_valid_port_name(s) {
                    errs.push(FieldError::invalid(&target, s.as_str(), msg));
                }
            }
            Some(n) => {
                let n = int(n).unwrap_or(0);
                for msg in validation::is_valid_port_num(n) {
                    errs.push(FieldError::invalid(&target, n, msg));
                }
            }
            None => {}
        }
        if let Some(app) = port.get("appProtocol").and_then(Value::as_str) {
            for msg in validation::is_qualified_name(app) {
                errs.push(FieldError::invalid(&p.child("appProtocol"), app, msg));
            }
        }
        let node_port = port.get("nodePort").and_then(int).unwrap_or(0);
        if kind(svc) == "ClusterIP" && node_port != 0 {
            errs.push(FieldError::forbidden(
                &p.child("nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
        if node_port != 0 {
            if seen_node_ports.contains(&(protocol, node_port)) {
                errs.push(FieldError::duplicate(&p.child("nodePort"), node_port));
            }
            seen_node_ports.push((protocol, node_port));
        }
        if seen_ports.contains(&(protocol, number)) {
            errs.push(FieldError::duplicate(
                &p,
                json!({"port": number, "protocol": protocol}),
            ));
        }
        seen_ports.push((protocol, number));
        if kind(svc) == "LoadBalancer" && number == KUBELET_PORT {
            errs.push(FieldError::invalid(
                &p,
                number,
                format!(
                    "may not expose port {KUBELET_PORT} externally since it is used by kubelet"
                ),
            ));
        }
    }
    errs
}

fn validate_type_rules(svc: &Value, spec_path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = svc.get("spec").unwrap_or(&Value::Null);
    match kind(svc) {
        "LoadBalancer" if headless(svc) => errs.push(FieldError::invalid(
            &spec_path.child("clusterIPs").index(0),
            "None",
            "may not be set to 'None' for LoadBalancer services",
        )),
        "NodePort" if headless(svc) => errs.push(FieldError::invalid(
            &spec_path.child("clusterIPs").index(0),
            "None",
            "may not be set to 'None' for NodePort services",
        )),
        "ExternalName" => {
            for (field, set) in [
                ("clusterIPs", !strings(spec.get("clusterIPs")).is_empty()),
                ("ipFamilies", !strings(spec.get("ipFamilies")).is_empty()),
                (
                    "ipFamilyPolicy",
                    spec.get("ipFamilyPolicy").is_some_and(|p| !p.is_null()),
                ),
            ] {
                if set {
                    errs.push(FieldError::forbidden(
                        &spec_path.child(field),
                        "may not be set for ExternalName services",
                    ));
                }
            }
            let name = str_at(svc, "/spec/externalName");
            let cname = name.strip_suffix('.').unwrap_or(name);
            if cname.is_empty() {
                errs.push(FieldError::required(&spec_path.child("externalName"), ""));
            }
            for msg in validation::is_dns1123_subdomain(cname)
                .into_iter()
                .filter(|_| !cname.is_empty())
            {
                errs.push(FieldError::invalid(
                    &spec_path.child("externalName"),
                    cname,
                    msg,
                ));
            }
        }
        _ => {}
    }
    errs
}

/// Upstream's `validateLoadBalancerClassField` on update: a LoadBalancer staying one keeps its
/// class (none included), so the implementation that answers for it never changes under it.
pub fn validate_load_balancer_class_unchanged(svc: &Value, old: &Value) -> Vec<FieldError> {
    let class = |s: &Value| s.pointer("/spec/loadBalancerClass").cloned();
    if kind(svc) == "LoadBalancer" && kind(old) == "LoadBalancer" && class(svc) != class(old) {
        return vec![FieldError::invalid(
            &FieldPath::new("spec").child("loadBalancerClass"),
            class(svc).unwrap_or(Value::Null),
            "may not change once set",
        )];
    }
    Vec::new()
}

/// Upstream's `validateLoadBalancerClassField` on create and update: a LoadBalancer's class is a
/// qualified name; no other type may have one.
fn validate_load_balancer_class(svc: &Value, spec_path: &FieldPath) -> Vec<FieldError> {
    let Some(class) = svc
        .pointer("/spec/loadBalancerClass")
        .filter(|c| !c.is_null())
    else {
        return Vec::new();
    };
    let path = spec_path.child("loadBalancerClass");
    if kind(svc) != "LoadBalancer" {
        return vec![FieldError::forbidden(
            &path,
            "may only be used when `type` is 'LoadBalancer'",
        )];
    }
    let class = class.as_str().unwrap_or_default();
    validation::is_qualified_name(class)
        .into_iter()
        .map(|msg| FieldError::invalid(&path, class, msg))
        .collect()
}

/// Upstream's `ValidateService` (metadata aside, but the name must be a DNS-1035 label).
pub fn validate(svc: &Value) -> Vec<FieldError> {
    let spec_path = FieldPath::new("spec");
    let mut errs = Vec::new();
    let name = str_at(svc, "/metadata/name");
    if validation::is_dns1123_label(name).is_empty() {
        for msg in validation::is_dns1035_label(name) {
            errs.push(FieldError::invalid(
                &FieldPath::new("metadata").child("name"),
                name,
                msg,
            ));
        }
    }
    let has_ports = !svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if !has_ports && !headless(svc) && kind(svc) != "ExternalName" {
        errs.push(FieldError::required(&spec_path.child("ports"), ""));
    }
    errs.extend(validate_type_rules(svc, &spec_path));
    errs.extend(validate_ports(svc, &spec_path));
    errs.extend(validate_load_balancer_class(svc, &spec_path));
    if let Some(selector) = svc.pointer("/spec/selector").filter(|s| !s.is_null()) {
        errs.extend(validation::validate_labels(
            selector,
            &spec_path.child("selector"),
        ));
    }
    let affinity_path = spec_path.child("sessionAffinity");
    let config_path = spec_path.child("sessionAffinityConfig");
    match str_at(svc, "/spec/sessionAffinity") {
        "" => errs.push(FieldError::required(&affinity_path, "")),
        "None" => {
            if svc
                .pointer("/spec/sessionAffinityConfig")
                .is_some_and(|c| !c.is_null())
            {
                errs.push(FieldError::forbidden(
                    &config_path,
                    "must not be set when session affinity is None",
                ));
            }
        }
        "ClientIP" => {
            let timeout_path = config_path.child("clientIP").child("timeoutSeconds");
            match svc
                .pointer("/spec/sessionAffinityConfig/clientIP/timeoutSeconds")
                .and_then(int)
            {
                None => errs.push(FieldError::required(
                    &timeout_path,
                    "when session affinity type is ClientIP",
                )),
                Some(t) if t <= 0 || t > MAX_AFFINITY_SECONDS => errs.push(FieldError::invalid(
                    &timeout_path,
                    t,
                    format!("must be greater than 0 and less than {MAX_AFFINITY_SECONDS}"),
                )),
                Some(_) => {}
            }
        }
        other => errs.push(FieldError::not_supported(
            &affinity_path,
            other,
            &["ClientIP", "None"],
        )),
    }
    if kind(svc) != "ExternalName" {
        errs.extend(super::ips::validate_cluster_ips(svc, &spec_path));
    }
    for (i, ip) in strings(svc.pointer("/spec/externalIPs"))
        .into_iter()
        .enumerate()
    {
        let path = spec_path.child("externalIPs").index(i);
        match validation::is_valid_ip(ip).pop() {
            Some(msg) => errs.push(FieldError::invalid(&path, ip, msg)),
            None => errs.extend(non_special_ip(ip, &path)),
        }
    }
    match kind(svc) {
        "" => errs.push(FieldError::required(&spec_path.child("type"), "")),
        "ClusterIP" | "ExternalName" | "LoadBalancer" | "NodePort" => {}
        other => errs.push(FieldError::not_supported(
            &spec_path.child("type"),
            other,
            &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"],
        )),
    }
    let ranges = strings(svc.pointer("/spec/loadBalancerSourceRanges"));
    let ranges_path = spec_path.child("LoadBalancerSourceRanges");
    if !ranges.is_empty() && kind(svc) != "LoadBalancer" {
        errs.push(FieldError::forbidden(
            &ranges_path,
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    for (i, range) in ranges.iter().enumerate() {
        let range = range.trim();
        if !valid_cidr(range) {
            errs.push(FieldError::invalid(
                &ranges_path.index(i),
                range,
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
    }
    let external_path = spec_path.child("externalTrafficPolicy");
    let external = str_at(svc, "/spec/externalTrafficPolicy");
    if !externally_accessible(svc) {
        if !external.is_empty() {
            errs.push(FieldError::invalid(
                &external_path,
                external,
                "may only be set for externally-accessible services",
            ));
        }
    } else if external.is_empty() {
        errs.push(FieldError::required(&external_path, ""));
    } else if !matches!(external, "Cluster" | "Local") {
        errs.push(FieldError::not_supported(
            &external_path,
            external,
            &["Cluster", "Local"],
        ));
    }
    let health = svc
        .pointer("/spec/healthCheckNodePort")
        .and_then(int)
        .unwrap_or(0);
    if !needs_health_check(svc) && health != 0 {
        errs.push(FieldError::invalid(
            &spec_path.child("healthCheckNodePort"),
            health,
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    let internal_path = spec_path.child("internalTrafficPolicy");
    match svc
        .pointer("/spec/internalTrafficPolicy")
        .and_then(Value::as_str)
    {
        None if matches!(kind(svc), "ClusterIP" | "NodePort" | "LoadBalancer") => {
            errs.push(FieldError::required(&internal_path, ""));
        }
        None | Some("Cluster" | "Local") => {}
        Some(other) => errs.push(FieldError::not_supported(
            &internal_path,
            other,
            &["Cluster", "Local"],
        )),
    }
    errs
}
