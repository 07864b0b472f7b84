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
        if wants_health_check(obj)
            && let Some(n) = obj
                .pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_u64)
                .filter(|n| *n != 0)
        {
            keys.push(format!("{NODE_PORTS}{n}"));
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
        let mut ports = NodePorts {
            store,
            ranges,
            held: &held,
            name: &name,
            used: None,
            chosen: HashSet::new(),
        };
        let fill = fills_node_ports(obj);
        let list = obj["spec"]["ports"]
            .as_array_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut out = Vec::with_capacity(list.len());
        for (i, mut p) in list.into_iter().enumerate() {
            let path = FieldPath::new("spec")
                .child("ports")
                .index(i)
                .child("nodePort");
            match p.get("nodePort").and_then(Value::as_u64) {
                Some(n) if n != 0 => ports.request(n, path).await?,
                _ if fill => p["nodePort"] = json!(ports.pick().await?),
                _ => {}
            }
            out.push(p);
        }
        obj["spec"]["ports"] = json!(out);
        if wants_health_check(obj) {
            let path = FieldPath::new("spec").child("healthCheckNodePort");
            match obj
                .pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_u64)
            {
                Some(n) if n != 0 => ports.request(n, path).await?,
                _ => obj["spec"]["healthCheckNodePort"] = json!(ports.pick().await?),
            }
        }
    } else if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(m) = p.as_object_mut() {
                m.remove("nodePort");
            }
        }
    }
    Ok(())
}

/// Upstream's `shouldAllocateNodePorts`: a NodePort Service's ports always get one, a
/// LoadBalancer's unless `allocateLoadBalancerNodePorts` is false (requested ones are still
/// checked and reserved).
fn fills_node_ports(obj: &Value) -> bool {
    obj.pointer("/spec/type").and_then(Value::as_str) != Some("LoadBalancer")
        || obj.pointer("/spec/allocateLoadBalancerNodePorts") != Some(&json!(false))
}

/// Upstream's `needsHealthCheck`: a LoadBalancer with `externalTrafficPolicy: Local` gets a
/// `healthCheckNodePort` from the NodePort range.
fn wants_health_check(obj: &Value) -> bool {
    obj.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer")
        && obj
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
}

/// The NodePorts one Service asks for or is given: checked against the range, the ports other
/// Services hold (read once, on first need) and those it already took.
struct NodePorts<'a> {
    store: &'a dyn Store,
    ranges: &'a Ranges,
    /// The reservations the stored Service already holds (on update).
    held: &'a HashSet<String>,
    name: &'a str,
    used: Option<HashSet<String>>,
    chosen: HashSet<String>,
}

impl NodePorts<'_> {
    async fn used(&mut self) -> Result<&HashSet<String>> {
        if self.used.is_none() {
            self.used = Some(taken(self.store, NODE_PORTS).await?);
        }
        Ok(self.used.as_ref().expect("just filled"))
    }

    /// A port the client asked for, at `path`.
    async fn request(&mut self, n: u64, path: FieldPath) -> Result<()> {
        let n16 = u16::try_from(n).unwrap_or(0);
        if !self.ranges.node_ports.contains(&n16) {
            return Err(invalid(
                path,
                json!(n),
                &format!(
                    "provided port is not in the valid range. The range of valid ports is {}-{}",
                    self.ranges.node_ports.start(),
                    self.ranges.node_ports.end()
                ),
                self.name,
            ));
        }
        let key = format!("{NODE_PORTS}{n}");
        let held = self.held.contains(&key);
        let in_use = self.used().await?.contains(&n.to_string());
        if (in_use && !held) || !self.chosen.insert(n.to_string()) {
            return Err(invalid(
                path,
                json!(n),
                "provided port is already allocated",
                self.name,
            ));
        }
        Ok(())
    }

    /// A free port, from a random offset so concurrent creates rarely collide.
    async fn pick(&mut self) -> Result<u16> {
        let (lo, hi) = (
            *self.ranges.node_ports.start() as u32,
            *self.ranges.node_ports.end() as u32,
        );
        let span = hi - lo + 1;
        let start = uuid::Uuid::new_v4().as_u128() as u32 % span;
        self.used().await?;
        let used = self.used.as_ref().expect("just filled");
        let port = (0..span)
            .map(|k| (lo + (start + k) % span).to_string())
            .find(|n| {
                let key = format!("{NODE_PORTS}{n}");
                (!used.contains(n) || self.held.contains(&key)) && !self.chosen.contains(n)
            })
            .ok_or_else(|| ApiError::internal("failed to allocate a nodePort: range is full"))?;
        self.chosen.insert(port.clone());
        Ok(port.parse().unwrap_or(0))
    }
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
    fn a_local_load_balancer_reserves_its_health_check_port() {
        let svc = json!({"kind": "Service", "spec": {"type": "LoadBalancer",
                         "externalTrafficPolicy": "Local", "healthCheckNodePort": 31000,
                         "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}});
        assert_eq!(reservations(&svc), vec![format!("{NODE_PORTS}31000")]);
    }

    #[test]
    fn load_balancers_may_opt_out_of_node_ports_and_local_ones_need_a_health_check() {
        let lb = json!({"spec": {"type": "LoadBalancer"}});
        assert!(fills_node_ports(&lb));
        assert!(!wants_health_check(&lb));
        let opted_out = json!({"spec": {"type": "LoadBalancer",
                               "allocateLoadBalancerNodePorts": false,
                               "externalTrafficPolicy": "Local"}});
        assert!(!fills_node_ports(&opted_out));
        assert!(wants_health_check(&opted_out));
        let node_port = json!({"spec": {"type": "NodePort", "externalTrafficPolicy": "Local",
                               "allocateLoadBalancerNodePorts": false}});
        assert!(fills_node_ports(&node_port));
        assert!(!wants_health_check(&node_port));
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
