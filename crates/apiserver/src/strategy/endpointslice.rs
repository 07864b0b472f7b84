//! EndpointSlices: port defaults (empty name, TCP), `metadata.generation` (1 on create, bumped
//! when anything but metadata or only labels change, as upstream's strategy does for this kind
//! without status), `deprecatedTopology` dropped when `v1` writes change endpoints, and
//! upstream's `ValidateEndpointSlice` (a supported, immutable `addressType`; addresses of that
//! type; node names, hostnames, port names and protocols).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath, is_dns1123_subdomain};

use super::Strategy;
use super::common::{dns1123_label, immutable, non_special_ip, semantic_eq, set_default, str_at};

const MAX_ENDPOINTS: usize = 1000;
const MAX_ADDRESSES: usize = 100;
const MAX_PORTS: usize = 20000;

#[derive(Debug)]
pub struct EndpointSliceStrategy;

fn default_ports(slice: &mut Value) {
    let ports = slice.get_mut("ports").and_then(Value::as_array_mut);
    for port in ports.into_iter().flatten() {
        set_default(port, "name", json!(""));
        set_default(port, "protocol", json!("TCP"));
    }
}

fn drop_topology(slice: &mut Value) {
    let endpoints = slice.get_mut("endpoints").and_then(Value::as_array_mut);
    for endpoint in endpoints.into_iter().flatten() {
        if let Some(m) = endpoint.as_object_mut() {
            m.remove("deprecatedTopology");
        }
    }
}

/// Upstream's `IsFullyQualifiedDomainName`.
fn fqdn(address: &str, path: &FieldPath) -> Vec<FieldError> {
    if address.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let name = address.strip_suffix('.').unwrap_or(address);
    let errs = is_dns1123_subdomain(name);
    if !errs.is_empty() {
        return vec![FieldError::invalid(path, name, errs.join(","))];
    }
    if !name.contains('.') {
        return vec![FieldError::invalid(
            path,
            name,
            "should be a domain with at least two segments separated by dots",
        )];
    }
    Vec::new()
}

fn validate_address(address: &str, kind: &str, path: &FieldPath) -> Vec<FieldError> {
    let family = validation::parse_ip_sloppy(address);
    let (ok, message) = match kind {
        "IPv4" => (
            matches!(family, Some(std::net::IpAddr::V4(_))),
            "must be a valid IPv4 address",
        ),
        "IPv6" => (
            matches!(family, Some(std::net::IpAddr::V6(_))),
            "must be a valid IPv6 address",
        ),
        "FQDN" => return fqdn(address, path),
        _ => return Vec::new(),
    };
    if ok {
        non_special_ip(address, path)
    } else {
        vec![FieldError::invalid(path, address, message)]
    }
}

impl Strategy for EndpointSliceStrategy {
    fn prepare_for_create(&self, slice: &mut Value) {
        default_ports(slice);
        drop_topology(slice);
        slice["metadata"]["generation"] = json!(1);
    }

    fn prepare_for_update(&self, slice: &mut Value, old: &Value) {
        default_ports(slice);
        if !semantic_eq(slice.get("endpoints"), old.get("endpoints")) {
            drop_topology(slice);
        }
        let strip = |v: &Value| {
            let mut m = v.as_object().cloned().unwrap_or_default();
            m.remove("metadata");
            Value::Object(m)
        };
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let changed = strip(slice) != strip(old)
            || !semantic_eq(
                slice.pointer("/metadata/labels"),
                old.pointer("/metadata/labels"),
            );
        slice["metadata"]["generation"] = json!(generation + i64::from(changed));
    }

    fn validate(&self, slice: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let kind = str_at(slice, "/addressType");
        let endpoints_path = FieldPath::new("endpoints");
        let endpoints = slice
            .get("endpoints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if endpoints.len() > MAX_ENDPOINTS {
            errs.push(FieldError::too_many(
                &endpoints_path,
                Some(endpoints.len()),
                MAX_ENDPOINTS,
            ));
        } else {
            for (i, endpoint) in endpoints.iter().enumerate() {
                let p = endpoints_path.index(i);
                let addresses_path = p.child("addresses");
                let addresses = endpoint
                    .get("addresses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if addresses.is_empty() {
                    errs.push(FieldError::required(
                        &addresses_path,
                        "must contain at least 1 address",
                    ));
                } else if addresses.len() > MAX_ADDRESSES {
                    errs.push(FieldError::too_many(
                        &addresses_path,
                        Some(addresses.len()),
                        MAX_ADDRESSES,
                    ));
                }
                for (j, address) in addresses.iter().enumerate() {
                    let address = address.as_str().unwrap_or("");
                    errs.extend(validate_address(address, kind, &addresses_path.index(j)));
                }
                if let Some(node) = endpoint.get("nodeName").and_then(Value::as_str) {
                    for msg in is_dns1123_subdomain(node) {
                        errs.push(FieldError::invalid(&p.child("nodeName"), node, msg));
                    }
                }
                if let Some(host) = endpoint.get("hostname").and_then(Value::as_str) {
                    errs.extend(dns1123_label(host, &p.child("hostname")));
                }
            }
        }
        let kind_path = FieldPath::new("addressType");
        match kind {
            "" => errs.push(FieldError::required(&kind_path, "")),
            "IPv4" | "IPv6" | "FQDN" => {}
            other => errs.push(FieldError::not_supported(
                &kind_path,
                other,
                &["FQDN", "IPv4", "IPv6"],
            )),
        }
        let ports_path = FieldPath::new("ports");
        let ports = slice
            .get("ports")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if ports.len() > MAX_PORTS {
            errs.push(FieldError::too_many(
                &ports_path,
                Some(ports.len()),
                MAX_PORTS,
            ));
            return errs;
        }
        let mut names = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let p = ports_path.index(i);
            let name = str_at(port, "/name");
            if !name.is_empty() {
                errs.extend(dns1123_label(name, &p.child("name")));
            }
            if names.contains(&name) {
                errs.push(FieldError::duplicate(&p.child("name"), name));
            } else {
                names.push(name);
            }
            match port.get("protocol").and_then(Value::as_str) {
                None => errs.push(FieldError::required(&p.child("protocol"), "")),
                Some("TCP" | "UDP" | "SCTP") => {}
                Some(other) => errs.push(FieldError::not_supported(
                    &p.child("protocol"),
                    other,
                    &["SCTP", "TCP", "UDP"],
                )),
            }
            if let Some(app) = port.get("appProtocol").and_then(Value::as_str) {
                for msg in validation::is_qualified_name(app) {
                    errs.push(FieldError::invalid(&p.child("appProtocol"), app, msg));
                }
            }
        }
        errs
    }

    fn validate_update(&self, slice: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(slice);
        errs.extend(immutable(
            slice.get("addressType"),
            old.get("addressType"),
            &FieldPath::new("addressType"),
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

    fn created() -> Value {
        let mut s = json!({"metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
                           "addressType": "IPv4",
                           "endpoints": [{"addresses": ["10.42.0.5"], "nodeName": "n1"}],
                           "ports": [{"port": 80}]});
        EndpointSliceStrategy.prepare_for_create(&mut s);
        s
    }

    #[test]
    fn a_new_slice_gets_port_defaults_and_generation_one() {
        let s = created();
        assert_eq!(
            s["ports"][0],
            json!({"name": "", "port": 80, "protocol": "TCP"})
        );
        assert_eq!(s["metadata"]["generation"], 1);
        assert!(EndpointSliceStrategy.validate(&s).is_empty());
    }

    #[test]
    fn slices_are_validated_as_upstream() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no address type",
                Box::new(|s| drop(s.as_object_mut().unwrap().remove("addressType"))),
                vec!["addressType: Required value"],
            ),
            (
                "an unknown address type",
                Box::new(|s| s["addressType"] = json!("IPX")),
                vec![
                    "addressType: Unsupported value: \"IPX\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
                ],
            ),
            (
                "an IPv6 address in an IPv4 slice",
                Box::new(|s| s["endpoints"][0]["addresses"] = json!(["fd00::1"])),
                vec![
                    "endpoints[0].addresses[0]: Invalid value: \"fd00::1\": must be a valid IPv4 address",
                ],
            ),
            (
                "an endpoint without addresses",
                Box::new(|s| s["endpoints"][0]["addresses"] = json!([])),
                vec!["endpoints[0].addresses: Required value: must contain at least 1 address"],
            ),
            (
                "a loopback address",
                Box::new(|s| s["endpoints"][0]["addresses"] = json!(["127.0.0.1"])),
                vec![
                    "endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut s = created();
            change(&mut s);
            assert_eq!(errors(EndpointSliceStrategy.validate(&s)), want, "{name}");
        }
    }

    #[test]
    fn the_address_type_is_immutable_and_changes_bump_the_generation() {
        let old = created();
        let mut relabeled = old.clone();
        relabeled["metadata"]["labels"]["x"] = json!("y");
        EndpointSliceStrategy.prepare_for_update(&mut relabeled, &old);
        assert_eq!(relabeled["metadata"]["generation"], 2);
        let mut annotated = old.clone();
        annotated["metadata"]["annotations"] = json!({"x": "y"});
        EndpointSliceStrategy.prepare_for_update(&mut annotated, &old);
        assert_eq!(annotated["metadata"]["generation"], 1);
        let mut v6 = old.clone();
        v6["addressType"] = json!("IPv6");
        v6["endpoints"][0]["addresses"] = json!(["fd00::1"]);
        assert_eq!(
            errors(EndpointSliceStrategy.validate_update(&v6, &old)),
            vec!["addressType: Invalid value: \"IPv6\": field is immutable"]
        );
    }
}
