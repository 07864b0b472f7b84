//! Services, short of allocation (the allocator hands out ClusterIPs and NodePorts after this
//! runs): upstream's defaults (`SetDefaults_Service`), the single-stack IPv4 `ipFamilies` and
//! `ipFamilyPolicy` the REST layer fills, `clusterIP`/`clusterIPs` normalisation, keeping
//! allocated values an update omits and dropping those a type change no longer needs,
//! `ValidateService` and `ValidateServiceUpdate` (a primary ClusterIP never changes, except to or
//! from ExternalName), DNS-1035 names, and the `spec.clusterIP`/`spec.type` field set.

use serde_json::{Value, json};
use skiff_apimachinery::validation::FieldError;

use super::common::{object_at, set_default, str_at};
use super::generic::settle_generation;
use super::{Strategy, string_at};

#[path = "service_validation.rs"]
mod checks;
#[path = "service_ips.rs"]
mod ips;

#[derive(Debug)]
pub struct ServiceStrategy;

/// Upstream's `DefaultClientIPServiceAffinitySeconds` (three hours).
const DEFAULT_AFFINITY_SECONDS: i64 = 10800;

fn kind(svc: &Value) -> &str {
    str_at(svc, "/spec/type")
}

/// Types with a cluster IP (headless `None` counts), upstream's `needsClusterIP`.
fn needs_cluster_ip(svc: &Value) -> bool {
    kind(svc) != "ExternalName"
}

fn needs_node_port(svc: &Value) -> bool {
    matches!(kind(svc), "NodePort" | "LoadBalancer")
}

/// Upstream's `ExternallyAccessible`.
fn externally_accessible(svc: &Value) -> bool {
    needs_node_port(svc)
        || (kind(svc) == "ClusterIP"
            && svc
                .pointer("/spec/externalIPs")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty()))
}

/// Upstream's `isHeadlessService`: the only ClusterIP is `None`.
fn headless(svc: &Value) -> bool {
    svc.pointer("/spec/clusterIPs") == Some(&json!(["None"]))
}

fn has_selector(svc: &Value) -> bool {
    svc.pointer("/spec/selector")
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty())
}

fn empty_str(v: Option<&Value>) -> bool {
    v.is_none_or(|v| v.is_null() || v == "")
}

fn defaults(svc: &mut Value) {
    let spec = object_at(svc, "spec");
    if empty_str(spec.get("sessionAffinity")) {
        spec["sessionAffinity"] = json!("None");
    }
    match spec["sessionAffinity"].as_str() {
        Some("None") => drop(
            spec.as_object_mut()
                .map(|m| m.remove("sessionAffinityConfig")),
        ),
        Some("ClientIP")
            if spec
                .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                .is_none_or(Value::is_null) =>
        {
            spec["sessionAffinityConfig"] =
                json!({"clientIP": {"timeoutSeconds": DEFAULT_AFFINITY_SECONDS}});
        }
        _ => {}
    }
    if empty_str(spec.get("type")) {
        spec["type"] = json!("ClusterIP");
    }
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if empty_str(port.get("protocol")) {
            port["protocol"] = json!("TCP");
        }
        if matches!(port.get("targetPort"), None | Some(Value::Null))
            || port["targetPort"] == json!(0)
            || port["targetPort"] == json!("")
        {
            port["targetPort"] = port.get("port").cloned().unwrap_or(json!(0));
        }
    }
    if externally_accessible(svc) && empty_str(svc.pointer("/spec/externalTrafficPolicy")) {
        svc["spec"]["externalTrafficPolicy"] = json!("Cluster");
    }
    let spec = &mut svc["spec"];
    if matches!(
        spec["type"].as_str(),
        Some("ClusterIP" | "NodePort" | "LoadBalancer")
    ) {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if spec["type"] == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
        // upstream's LoadBalancerIPMode defaulting: an address without a mode is a VIP
        for ingress in svc
            .pointer_mut("/status/loadBalancer/ingress")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if !empty_str(ingress.get("ip")) && empty_str(ingress.get("ipMode")) {
                ingress["ipMode"] = json!("VIP");
            }
        }
    }
}

fn node_ports(svc: &Value) -> Vec<i64> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
        .filter(|n| *n != 0)
        .collect()
}

/// Upstream's `patchAllocatedValues`: what an update omits but the stored Service was given
/// (cluster IPs, node ports matched by port name, the health check port) is kept.
fn keep_allocated(svc: &mut Value, old: &Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(svc) {
        if str_at(svc, "/spec/clusterIP").is_empty() {
            svc["spec"]["clusterIP"] = old.pointer("/spec/clusterIP").cloned().unwrap_or(json!(""));
        }
        let old_ips = old
            .pointer("/spec/clusterIPs")
            .cloned()
            .unwrap_or(Value::Null);
        if svc
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
            && old_ips.as_array().is_some_and(|a| !a.is_empty())
        {
            svc["spec"]["clusterIPs"] = old_ips;
        }
    }
    if needs_node_port(old) && needs_node_port(svc) {
        let new_ports = node_ports(svc);
        let used: Vec<i64> = node_ports(old)
            .into_iter()
            .filter(|n| new_ports.contains(n))
            .collect();
        let by_name: Vec<(String, i64)> = old
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    string_at(p, "name"),
                    p.get("nodePort").and_then(Value::as_i64).unwrap_or(0),
                )
            })
            .collect();
        let ports = svc["spec"].get_mut("ports").and_then(Value::as_array_mut);
        for port in ports.into_iter().flatten() {
            if port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                continue;
            }
            let name = string_at(port, "name");
            if let Some((_, n)) = by_name.iter().find(|(m, _)| *m == name)
                && *n != 0
                && !used.contains(n)
            {
                port["nodePort"] = json!(n);
            }
        }
    }
    let hc = |s: &Value| {
        s.pointer("/spec/healthCheckNodePort")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    if checks::needs_health_check(old)
        && checks::needs_health_check(svc)
        && hc(svc) == 0
        && hc(old) != 0
    {
        svc["spec"]["healthCheckNodePort"] = json!(hc(old));
    }
}

/// Upstream's `dropTypeDependentFields`: a type change clears what the new type does not use,
/// if the client left it as it was.
fn drop_type_dependent(svc: &mut Value, old: &Value) {
    let same = |svc: &Value, f: &str| super::common::semantic_eq(svc.pointer(f), old.pointer(f));
    let mut remove = Vec::new();
    if needs_cluster_ip(old) && !needs_cluster_ip(svc) {
        if same(svc, "/spec/clusterIP") && same(svc, "/spec/clusterIPs") {
            remove.extend(["clusterIP", "clusterIPs"]);
        }
        for f in ["ipFamilies", "ipFamilyPolicy"] {
            if same(svc, &format!("/spec/{f}")) {
                remove.push(f);
            }
        }
    }
    let old_ports = node_ports(old);
    if needs_node_port(old)
        && !needs_node_port(svc)
        && node_ports(svc).iter().all(|n| old_ports.contains(n))
    {
        let ports = svc["spec"].get_mut("ports").and_then(Value::as_array_mut);
        for port in ports.into_iter().flatten() {
            drop(port.as_object_mut().map(|m| m.remove("nodePort")));
        }
    }
    if checks::needs_health_check(old)
        && !checks::needs_health_check(svc)
        && same(svc, "/spec/healthCheckNodePort")
    {
        remove.push("healthCheckNodePort");
    }
    if kind(old) == "LoadBalancer" && kind(svc) != "LoadBalancer" {
        for f in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(svc, &format!("/spec/{f}")) {
                remove.push(f);
            }
        }
    }
    if externally_accessible(old)
        && !externally_accessible(svc)
        && same(svc, "/spec/externalTrafficPolicy")
    {
        remove.push("externalTrafficPolicy");
    }
    if let Some(spec) = svc.get_mut("spec").and_then(Value::as_object_mut) {
        remove.into_iter().for_each(|f| drop(spec.remove(f)));
    }
    if kind(svc) != "LoadBalancer"
        && let Some(lb) = svc.pointer_mut("/status/loadBalancer")
    {
        *lb = json!({});
    }
}

impl Strategy for ServiceStrategy {
    fn name_validation(&self) -> fn(&str) -> Vec<String> {
        skiff_apimachinery::validation::is_dns1123_label
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, svc: &mut Value) {
        defaults(svc);
        // Upstream's status is a struct, so a new Service shows `loadBalancer: {}`.
        svc["status"] = json!({"loadBalancer": {}});
        ips::normalize_cluster_ips(svc, None);
        ips::init_ip_families(svc, None);
    }

    fn prepare_for_update(&self, svc: &mut Value, old: &Value) {
        defaults(svc);
        ips::normalize_cluster_ips(svc, Some(old));
        keep_allocated(svc, old);
        drop_type_dependent(svc, old);
        ips::init_ip_families(svc, Some(old));
        settle_generation(svc, old);
    }

    fn validate(&self, svc: &Value) -> Vec<FieldError> {
        checks::validate(svc)
    }

    fn validate_update(&self, svc: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = ips::validate_primary_unchanged(svc, old);
        errs.extend(checks::validate(svc));
        errs.extend(checks::validate_load_balancer_class_unchanged(svc, old));
        errs
    }

    fn fields(&self, svc: &Value) -> Vec<(&'static str, String)> {
        vec![
            ("spec.clusterIP", string_at(svc, "spec.clusterIP")),
            ("spec.type", string_at(svc, "spec.type")),
        ]
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
