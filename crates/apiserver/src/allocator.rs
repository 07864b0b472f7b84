//! Service ClusterIPs (from the service CIDR, default 10.43.0.0/16) and NodePorts (30000–32767),
//! never handed out twice and released on delete. Each allocation is a reservation key in the
//! store (`/registry/ranges/serviceips/{ip}`, `/registry/ranges/servicenodeports/{port}`),
//! created in the same transaction as the Service that holds it, guarded on its absence: two API
//! servers racing for one address cannot both win.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};
use skiff_store::{KeyRange, RangeRequest, Store};

use crate::error::{ApiError, Result};

pub const SERVICE_IPS: &str = "/registry/ranges/serviceips/";
pub const NODE_PORTS: &str = "/registry/ranges/servicenodeports/";

/// Where allocations come from.
#[derive(Debug, Clone)]
pub struct Ranges {
    /// The service CIDR's network address and prefix length (k3s' default 10.43.0.0/16).
    pub service_network: Ipv4Addr,
    pub service_prefix: u8,
    /// Upstream's default NodePort range.
    pub node_ports: std::ops::RangeInclusive<u16>,
}

impl Default for Ranges {
    fn default() -> Self {
        Self {
            service_network: Ipv4Addr::new(10, 43, 0, 0),
            service_prefix: 16,
            node_ports: 30000..=32767,
        }
    }
}

impl Ranges {
    fn ip_range(&self) -> (u32, u32) {
        let base = u32::from(self.service_network);
        let size = 1u32 << (32 - u32::from(self.service_prefix));
        // Neither the network nor the broadcast address.
        (base + 1, base + size - 2)
    }

    pub fn contains_ip(&self, ip: Ipv4Addr) -> bool {
        let (lo, hi) = self.ip_range();
        (lo..=hi).contains(&u32::from(ip))
    }
}

/// Whether `obj` is of a kind that holds allocations (Services).
pub fn allocates(obj: &Value) -> bool {
    is_service(obj)
}

fn is_service(obj: &Value) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Service")
}

fn wants_node_ports(obj: &Value) -> bool {
    matches!(
        obj.pointer("/spec/type").and_then(Value::as_str),
        Some("NodePort" | "LoadBalancer")
    )
}

fn wants_cluster_ip(obj: &Value) -> bool {
    obj.pointer("/spec/type").and_then(Value::as_str) != Some("ExternalName")
        && obj.pointer("/spec/clusterIP").and_then(Value::as_str) != Some("None")
}

/// The reservation keys an object holds (empty for anything but Services).
pub fn reservations(obj: &Value) -> Vec<String> {
    if !is_service(obj) {
        return Vec::new();
    }
    let mut keys = Vec::new();
    if let Some(ip) = obj.pointer("/spec/clusterIP").and_then(Value::as_str)
        && ip.parse::<Ipv4Addr>().is_ok()
    {
        keys.push(format!("{SERVICE_IPS}{ip}"));
    }
    if wants_node_ports(obj) {
        for p in obj
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(n) = p.get("nodePort").and_then(Value::as_u64) {
                keys.push(format!("{NODE_PORTS}{n}"));
            }
        }
    }
    keys
}

async fn taken(store: &dyn Store, prefix: &str) -> Result<HashSet<String>> {
    let resp = store
        .range(RangeRequest {
            range: KeyRange::prefix(prefix.as_bytes().to_vec()),
            keys_only: true,
            ..Default::default()
        })
        .await?;
    Ok(resp
        .kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned())
        .collect())
}

fn invalid(path: FieldPath, value: Value, detail: &str, name: &str) -> ApiError {
    ApiError::invalid(
        "Service",
        "",
        name,
        &[FieldError::invalid(&path, value, detail)],
    )
}

/// Fills in the ClusterIP and NodePorts a Service lacks, keeping what `old` (the stored Service
/// on update) already holds, and checks requested ones against the ranges. The reservation keys
/// are then created by the caller's transaction, which fails if another writer took them
/// meanwhile.
pub async fn allocate(
    store: &dyn Store,
    ranges: &Ranges,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<()> {
    if !is_service(obj) {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let held: HashSet<String> = old
        .map(reservations)
        .unwrap_or_default()
        .into_iter()
        .collect();
    if wants_cluster_ip(obj) {
        let requested = obj
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let ip = match requested {
            Some(ip) => {
                let parsed: Ipv4Addr = ip.parse().map_err(|_| {
                    invalid(
                        FieldPath::new("spec").child("clusterIPs").index(0),
                        json!(ip),
                        "must be a valid IP address",
                        &name,
                    )
                })?;
                if !ranges.contains_ip(parsed) {
                    return Err(invalid(
                        FieldPath::new("spec").child("clusterIPs").index(0),
                        json!(ip),
                        &format!(
                            "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}/{}",
                            ranges.service_network, ranges.service_prefix
                        ),
                        &name,
                    ));
                }
                let key = format!("{SERVICE_IPS}{ip}");
                if !held.contains(&key) && taken(store, SERVICE_IPS).await?.contains(&ip) {
                    return Err(invalid(
                        FieldPath::new("spec").child("clusterIPs"),
                        json!([ip]),
                        &format!("failed to allocate IP {ip}: provided IP is already allocated"),
                        &name,
                    ));
                }
                ip
            }
            None => {
                let used = taken(store, SERVICE_IPS).await?;
                let (lo, hi) = ranges.ip_range();
                let span = hi - lo + 1;
                // Start at a random offset so concurrent creates rarely pick the same address.
                let start = uuid::Uuid::new_v4().as_u128() as u32 % span;
                (0..span)
                    .map(|i| Ipv4Addr::from(lo + (start + i) % span).to_string())
                    .find(|ip| !used.contains(ip))
                    .ok_or_else(|| {
                        ApiError::internal("failed to allocate a serviceIP: range is full")
                    })?
            }
        };
        obj["spec"]["clusterIP"] = json!(ip);
        obj["spec"]["clusterIPs"] = json!([ip]);
    } else if obj.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
        obj["spec"]["clusterIPs"] = json!(["None"]);
    }
    if wants_node_ports(obj) {
        let mut used: Option<HashSet<String>> = None;
        let ports = obj["spec"]["ports"]
            .as_array_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut out = Vec::with_capacity(ports.len());
        let mut chosen = HashSet::new();
        for (i, mut p) in ports.into_iter().enumerate() {
            match p.get("nodePort").and_then(Value::as_u64) {
                Some(n) if n != 0 => {
                    let n16 = u16::try_from(n).unwrap_or(0);
                    if !ranges.node_ports.contains(&n16) {
                        return Err(invalid(
                            FieldPath::new("spec")
                                .child("ports")
                                .index(i)
                                .child("nodePort"),
                            json!(n),
                            &format!(
                                "provided port is not in the valid range. The range of valid ports is {}-{}",
                                ranges.node_ports.start(),
                                ranges.node_ports.end()
                            ),
                            &name,
                        ));
                    }
                    if used.is_none() {
                        used = Some(taken(store, NODE_PORTS).await?);
                    }
                    let key = format!("{NODE_PORTS}{n}");
                    let in_use = used.as_ref().is_some_and(|u| u.contains(&n.to_string()));
                    if (in_use && !held.contains(&key)) || !chosen.insert(n.to_string()) {
                        return Err(invalid(
                            FieldPath::new("spec")
                                .child("ports")
                                .index(i)
                                .child("nodePort"),
                            json!(n),
                            "provided port is already allocated",
                            &name,
                        ));
                    }
                }
                _ => {
                    if used.is_none() {
                        used = Some(taken(store, NODE_PORTS).await?);
                    }
                    let used = used.as_ref().expect("just filled");
                    let (lo, hi) = (
                        *ranges.node_ports.start() as u32,
                        *ranges.node_ports.end() as u32,
                    );
                    let span = hi - lo + 1;
                    let start = uuid::Uuid::new_v4().as_u128() as u32 % span;
                    let port = (0..span)
                        .map(|k| (lo + (start + k) % span).to_string())
                        .find(|n| {
                            let key = format!("{NODE_PORTS}{n}");
                            (!used.contains(n) || held.contains(&key)) && !chosen.contains(n)
                        })
                        .ok_or_else(|| {
                            ApiError::internal("failed to allocate a nodePort: range is full")
                        })?;
                    chosen.insert(port.clone());
                    p["nodePort"] = json!(port.parse::<u16>().unwrap_or(0));
                }
            }
            out.push(p);
        }
        obj["spec"]["ports"] = json!(out);
    } else if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(m) = p.as_object_mut() {
                m.remove("nodePort");
            }
        }
    }
    Ok(())
}

/// Explains a lost reservation race or a requested address in use as upstream words it.
pub fn already_allocated(obj: &Value) -> ApiError {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    ApiError::invalid(
        "Service",
        "",
        name,
        &[FieldError::invalid(
            &FieldPath::new("spec").child("clusterIPs"),
            obj.pointer("/spec/clusterIPs")
                .cloned()
                .unwrap_or(Value::Null),
            "provided IP or port is already allocated",
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodeport_service_reserves_its_ip_and_ports() {
        let svc = json!({"kind": "Service", "spec": {"type": "NodePort", "clusterIP": "10.43.0.7",
                         "ports": [{"port": 80, "nodePort": 30080}]}});
        assert_eq!(
            reservations(&svc),
            vec![
                format!("{SERVICE_IPS}10.43.0.7"),
                format!("{NODE_PORTS}30080")
            ]
        );
        let headless = json!({"kind": "Service", "spec": {"clusterIP": "None"}});
        assert!(reservations(&headless).is_empty());
    }

    #[test]
    fn the_range_excludes_network_and_broadcast() {
        let r = Ranges::default();
        assert!(!r.contains_ip(Ipv4Addr::new(10, 43, 0, 0)));
        assert!(r.contains_ip(Ipv4Addr::new(10, 43, 0, 1)));
        assert!(!r.contains_ip(Ipv4Addr::new(10, 43, 255, 255)));
        assert!(!r.contains_ip(Ipv4Addr::new(10, 44, 0, 1)));
    }
}
