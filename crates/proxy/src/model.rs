//! The pure model both dataplanes render: one [`PortEntry`] per Service port (upstream's
//! `ServicePortName` with its `ServicePort` info and endpoints), built from a Service and its
//! EndpointSlices, and upstream's `CategorizeEndpoints` (ready, serving-terminating fallback,
//! `internalTrafficPolicy`/`externalTrafficPolicy: Local`).

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Upstream's default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
pub const DEFAULT_AFFINITY_SECONDS: i32 = 10800;

/// A Service by namespace and name: the unit the change tracker marks dirty.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        ServiceKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

pub use skiff_component_helpers::ports::Protocol;

/// One port of one Service (upstream's `ServicePortName`); sorts by namespace, name, port name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    pub service: ServiceKey,
    /// The port's name (empty for a Service's only, unnamed, port).
    pub port: String,
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    /// `ns/name:port`, or `ns/name` for an unnamed port, as upstream's `String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.service.namespace, self.service.name)?;
        if !self.port.is_empty() {
            write!(f, ":{}", self.port)?;
        }
        Ok(())
    }
}

/// What the dataplane needs of a Service port (upstream's `ServicePort` interface).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    pub cluster_ip: Ipv4Addr,
    pub port: u16,
    pub protocol: Protocol,
    pub node_port: Option<u16>,
    pub external_ips: Vec<Ipv4Addr>,
    /// A LoadBalancer's `status.loadBalancer.ingress` IPs the proxy captures (upstream's
    /// `LoadBalancerVIPs`: not those with `ipMode: Proxy`, whose load balancer delivers to the
    /// node itself).
    pub load_balancer_ips: Vec<Ipv4Addr>,
    /// `loadBalancerSourceRanges` (valid CIDRs, whitespace trimmed as upstream does): only
    /// these clients reach the load-balancer IPs.
    pub source_ranges: Vec<String>,
    /// `healthCheckNodePort` of a LoadBalancer with `externalTrafficPolicy: Local`.
    pub health_check_node_port: Option<u16>,
    /// `sessionAffinity: ClientIP` with its timeout in seconds.
    pub affinity_seconds: Option<i32>,
    /// `internalTrafficPolicy: Local`.
    pub internal_local: bool,
    /// `externalTrafficPolicy: Local` on an externally accessible port.
    pub external_local: bool,
}

impl ServicePort {
    /// Reachable from outside through a NodePort, an external IP or a load-balancer IP.
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
    }

    /// Load-balancer IP traffic goes through a firewall chain (upstream's `usesFWChain`,
    /// short of the endpoints check).
    pub fn uses_firewall(&self) -> bool {
        !self.load_balancer_ips.is_empty() && !self.source_ranges.is_empty()
    }

    /// Some traffic goes to endpoints anywhere in the cluster.
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_local || (self.externally_accessible() && !self.external_local)
    }

    /// Some traffic goes only to endpoints on this node.
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_local || self.external_local
    }
}

/// One backend address of a Service port, from an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// On this proxy's node (`nodeName`).
    pub local: bool,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.port)
    }
}

/// A Service port with its endpoints, sorted by address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortEntry {
    pub name: ServicePortName,
    pub info: ServicePort,
    pub endpoints: Vec<Endpoint>,
}

/// Which endpoints each kind of traffic uses (upstream's `CategorizeEndpoints`).
#[derive(Debug, Default)]
pub struct Categorized<'a> {
    pub cluster: Vec<&'a Endpoint>,
    pub local: Vec<&'a Endpoint>,
    /// The union, each once: every endpoint that gets a chain.
    pub reachable: Vec<&'a Endpoint>,
    /// Some usable endpoint exists anywhere in the cluster.
    pub any: bool,
}

impl Categorized<'_> {
    /// The chain that internal (ClusterIP) or external (NodePort, external IP) traffic of a
    /// port goes to under its traffic policy, and whether that chain has endpoints: the Local
    /// chain and the local endpoints when the policy is `Local`, else the cluster chain and any
    /// endpoint (upstream's `internalPolicyChain`/`externalPolicyChain` and
    /// `hasInternalEndpoints`/`hasExternalEndpoints`).
    pub fn policy_chain<'c>(
        &self,
        local_policy: bool,
        cluster_chain: &'c String,
        local_chain: &'c String,
    ) -> (&'c String, bool) {
        if local_policy {
            (local_chain, !self.local.is_empty())
        } else {
            (cluster_chain, self.any)
        }
    }
}

impl PortEntry {
    pub fn categorize(&self) -> Categorized<'_> {
        let mut out = Categorized::default();
        let eps = &self.endpoints;
        if self.info.uses_cluster_endpoints() {
            out.cluster = eps.iter().filter(|e| e.ready).collect();
            if out.cluster.is_empty() {
                out.cluster = eps.iter().filter(|e| e.serving && e.terminating).collect();
            }
            out.any = !out.cluster.is_empty();
        }
        if !self.info.uses_local_endpoints() {
            out.reachable = out.cluster.clone();
            return out;
        }
        let usable = |e: &&Endpoint| e.ready || (e.serving && e.terminating);
        out.any |= eps.iter().any(|e| usable(&e));
        out.local = if eps.iter().any(|e| e.local && e.ready) {
            eps.iter().filter(|e| e.local && e.ready).collect()
        } else {
            eps.iter()
                .filter(|e| e.local && e.serving && e.terminating)
                .collect()
        };
        let mut reachable: Vec<&Endpoint> = out.cluster.iter().chain(&out.local).copied().collect();
        reachable.sort();
        reachable.dedup();
        out.reachable = reachable;
        out
    }
}

/// The ports of `service` that get rules, each with its endpoints from `slices` (the Service's
/// EndpointSlices, by label `kubernetes.io/service-name`). ExternalName and headless Services,
/// and IPv6 or malformed cluster IPs, get none; malformed ports and addresses are skipped.
pub fn service_ports<'a>(
    service: &Service,
    slices: impl IntoIterator<Item = &'a EndpointSlice> + Clone,
    node_name: &str,
) -> Vec<PortEntry> {
    let namespace = service.metadata.namespace.as_deref().unwrap_or("default");
    let Some(name) = service.metadata.name.as_deref() else {
        return Vec::new();
    };
    let Some(spec) = &service.spec else {
        return Vec::new();
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let Some(cluster_ip) = spec
        .cluster_ip
        .as_deref()
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
    else {
        return Vec::new();
    };
    let external_ips: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let affinity_seconds = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .unwrap_or(DEFAULT_AFFINITY_SECONDS)
    });
    let node_ports_allowed = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let load_balancer = spec.type_.as_deref() == Some("LoadBalancer");
    let load_balancer_ips: Vec<Ipv4Addr> = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter(|_| load_balancer)
        .filter(|i| i.ip_mode.as_deref() != Some("Proxy"))
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect();
    let source_ranges: Vec<String> = spec
        .load_balancer_source_ranges
        .iter()
        .flatten()
        .filter(|_| load_balancer)
        .map(|r| r.trim())
        .filter(|r| valid_cidr(r))
        .map(str::to_string)
        .collect();
    let health_check_node_port = spec
        .health_check_node_port
        .filter(|_| load_balancer && spec.external_traffic_policy.as_deref() == Some("Local"))
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0);
    let mut entries = Vec::new();
    for port in spec.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
            continue;
        };
        let Ok(number) = u16::try_from(port.port) else {
            continue;
        };
        let port_name = port.name.clone().unwrap_or_default();
        let node_port = port
            .node_port
            .filter(|_| node_ports_allowed)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let mut info = ServicePort {
            cluster_ip,
            port: number,
            protocol,
            node_port,
            external_ips: external_ips.clone(),
            load_balancer_ips: load_balancer_ips.clone(),
            source_ranges: source_ranges.clone(),
            health_check_node_port,
            affinity_seconds,
            internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
            external_local: false,
        };
        info.external_local = info.externally_accessible()
            && spec.external_traffic_policy.as_deref() == Some("Local");
        let endpoints = slice_endpoints(slices.clone(), &port_name, protocol, node_name);
        entries.push(PortEntry {
            name: ServicePortName {
                service: ServiceKey::new(namespace, name),
                port: port_name,
                protocol,
            },
            info,
            endpoints,
        });
    }
    entries
}

/// An IPv4 CIDR (`a.b.c.d/n`).
fn valid_cidr(text: &str) -> bool {
    text.split_once('/').is_some_and(|(ip, bits)| {
        ip.parse::<Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 32)
    })
}

/// The IPv4 endpoints of the named port across `slices`, each address once (the first slice by
/// name wins), sorted by address.
fn slice_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    port_name: &str,
    protocol: Protocol,
    node_name: &str,
) -> Vec<Endpoint> {
    let mut found: BTreeMap<(Ipv4Addr, u16), Endpoint> = BTreeMap::new();
    for slice in slices {
        if slice.address_type != "IPv4" {
            continue;
        }
        let port = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or("") == port_name
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        });
        let Some(number) = port
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            // as upstream, only the first address of an endpoint is used
            let Some(ip) = endpoint
                .addresses
                .first()
                .and_then(|a| a.parse::<Ipv4Addr>().ok())
            else {
                continue;
            };
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            found.entry((ip, number)).or_insert(Endpoint {
                ip,
                port: number,
                ready,
                serving: conditions.and_then(|c| c.serving).unwrap_or(ready),
                terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
                local: endpoint.node_name.as_deref() == Some(node_name),
            });
        }
    }
    found.into_values().collect()
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Services and EndpointSlices for the renderers' tests.
    use k8s_openapi::api::core::v1::{Service, ServicePort as ApiPort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{
        Endpoint as ApiEndpoint, EndpointConditions, EndpointPort, EndpointSlice,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// The table a proxier on `node` builds from these objects.
    pub fn table(
        node: &str,
        services: &[Service],
        slices: &[EndpointSlice],
    ) -> crate::dataplane::ServiceTable {
        let mut tracker = crate::tracker::ChangeTracker::new(node);
        for s in services {
            tracker.service_updated(std::sync::Arc::new(s.clone()));
        }
        for s in slices {
            tracker.slice_updated(std::sync::Arc::new(s.clone()));
        }
        tracker
            .take()
            .services
            .into_iter()
            .filter(|(_, ports)| !ports.is_empty())
            .collect()
    }

    pub fn service(ns: &str, name: &str, ip: &str, ports: &[(&str, &str, i32)]) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                type_: Some("ClusterIP".into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, proto, port)| ApiPort {
                            name: (!n.is_empty()).then(|| n.to_string()),
                            protocol: Some(proto.to_string()),
                            port: *port,
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// `svc` as a LoadBalancer with these `status.loadBalancer.ingress` IPs (`ip` or
    /// `ip/ipMode`).
    pub fn load_balancer(mut svc: Service, ingress: &[&str]) -> Service {
        use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
        svc.spec.as_mut().unwrap().type_ = Some("LoadBalancer".into());
        let ingress = ingress
            .iter()
            .map(|entry| {
                let (ip, mode) = entry.split_once('/').unwrap_or((entry, "VIP"));
                LoadBalancerIngress {
                    ip: Some(ip.into()),
                    ip_mode: Some(mode.into()),
                    ..Default::default()
                }
            })
            .collect();
        svc.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(ingress),
            }),
            ..Default::default()
        });
        svc
    }

    /// A slice of `service` with one port; endpoints are (ip, node, ready).
    pub fn slice(
        ns: &str,
        service: &str,
        name: &str,
        port: (&str, &str, i32),
        endpoints: &[(&str, &str, bool)],
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some(
                    [(
                        "kubernetes.io/service-name".to_string(),
                        service.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: (!port.0.is_empty()).then(|| port.0.to_string()),
                protocol: Some(port.1.into()),
                port: Some(port.2),
                ..Default::default()
            }]),
            endpoints: endpoints
                .iter()
                .map(|(ip, node, ready)| ApiEndpoint {
                    addresses: vec![ip.to_string()],
                    node_name: Some(node.to_string()),
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        serving: Some(*ready),
                        terminating: Some(false),
                    }),
                    ..Default::default()
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{service, slice};
    use super::*;

    #[test]
    fn endpoints_come_from_the_slice_port_with_the_same_name_and_protocol() {
        let svc = service(
            "ns",
            "web",
            "10.43.0.5",
            &[("http", "TCP", 80), ("dns", "UDP", 53)],
        );
        let a = slice(
            "ns",
            "web",
            "web-a",
            ("http", "TCP", 8080),
            &[("10.42.0.2", "n1", true)],
        );
        let b = slice(
            "ns",
            "web",
            "web-b",
            ("dns", "TCP", 53),
            &[("10.42.0.3", "n1", true)],
        );
        let entries = service_ports(&svc, [&a, &b], "n1");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].name.to_string(), "ns/web:http");
        assert_eq!(entries[0].endpoints.len(), 1);
        assert_eq!(entries[0].endpoints[0].to_string(), "10.42.0.2:8080");
        assert!(entries[0].endpoints[0].local);
        assert!(
            entries[1].endpoints.is_empty(),
            "UDP dns has no TCP backends"
        );
    }

    #[test]
    fn headless_external_name_and_malformed_services_get_no_ports() {
        let mut headless = service("ns", "h", "None", &[("", "TCP", 80)]);
        assert!(service_ports(&headless, [], "n1").is_empty());
        headless.spec.as_mut().unwrap().cluster_ip = Some("300.1.1.1".into());
        assert!(service_ports(&headless, [], "n1").is_empty());
        let mut external = service("ns", "e", "10.43.0.9", &[("", "TCP", 80)]);
        external.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(service_ports(&external, [], "n1").is_empty());
        let mut no_spec = service("ns", "x", "10.43.0.9", &[]);
        no_spec.spec = None;
        assert!(service_ports(&no_spec, [], "n1").is_empty());
    }

    #[test]
    fn node_ports_count_only_on_node_port_services_and_affinity_keeps_its_timeout() {
        let mut svc = service("ns", "web", "10.43.0.5", &[("", "TCP", 80)]);
        let spec = svc.spec.as_mut().unwrap();
        spec.ports.as_mut().unwrap()[0].node_port = Some(30080);
        spec.session_affinity = Some("ClientIP".into());
        spec.session_affinity_config = Some(k8s_openapi::api::core::v1::SessionAffinityConfig {
            client_ip: Some(k8s_openapi::api::core::v1::ClientIPConfig {
                timeout_seconds: Some(60),
            }),
        });
        spec.external_traffic_policy = Some("Local".into());
        let cluster_ip = &service_ports(&svc, [], "n1")[0].info;
        assert_eq!(
            cluster_ip.node_port, None,
            "a ClusterIP Service's stale nodePort"
        );
        assert!(!cluster_ip.external_local, "not externally accessible");
        assert_eq!(cluster_ip.affinity_seconds, Some(60));
        svc.spec.as_mut().unwrap().type_ = Some("NodePort".into());
        let node_port = &service_ports(&svc, [], "n1")[0].info;
        assert_eq!(node_port.node_port, Some(30080));
        assert!(node_port.external_local);
    }

    #[test]
    fn load_balancer_ips_and_source_ranges_count_only_on_load_balancers() {
        let mut svc = service("ns", "web", "10.43.0.5", &[("", "TCP", 80)]);
        let spec = svc.spec.as_mut().unwrap();
        spec.type_ = Some("LoadBalancer".into());
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(31000);
        spec.load_balancer_source_ranges =
            Some(vec![" 192.168.0.0/24".into(), "not-a-cidr".into()]);
        let ingress = |ip: Option<&str>, mode: Option<&str>, hostname: Option<&str>| {
            k8s_openapi::api::core::v1::LoadBalancerIngress {
                ip: ip.map(Into::into),
                ip_mode: mode.map(Into::into),
                hostname: hostname.map(Into::into),
                ..Default::default()
            }
        };
        svc.status = Some(k8s_openapi::api::core::v1::ServiceStatus {
            load_balancer: Some(k8s_openapi::api::core::v1::LoadBalancerStatus {
                ingress: Some(vec![
                    ingress(Some("192.168.0.10"), Some("VIP"), None),
                    ingress(Some("192.168.0.11"), Some("Proxy"), None),
                    ingress(None, None, Some("lb.example.com")),
                ]),
            }),
            ..Default::default()
        });
        let info = &service_ports(&svc, [], "n1")[0].info;
        assert_eq!(info.load_balancer_ips, vec![Ipv4Addr::new(192, 168, 0, 10)]);
        assert_eq!(info.source_ranges, vec!["192.168.0.0/24".to_string()]);
        assert_eq!(info.health_check_node_port, Some(31000));
        assert!(info.externally_accessible(), "without a node port too");
        assert!(info.external_local && info.uses_firewall());
        svc.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        let info = &service_ports(&svc, [], "n1")[0].info;
        assert!(info.load_balancer_ips.is_empty() && info.source_ranges.is_empty());
        assert_eq!(info.health_check_node_port, None);
    }

    #[test]
    fn invalid_addresses_in_slices_are_skipped() {
        let svc = service("ns", "web", "10.43.0.5", &[("", "TCP", 80)]);
        let s = slice(
            "ns",
            "web",
            "web-a",
            ("", "TCP", 80),
            &[("not-an-ip", "n1", true), ("10.42.0.7", "n2", true)],
        );
        let entries = service_ports(&svc, [&s], "n1");
        assert_eq!(entries[0].endpoints.len(), 1);
        assert!(!entries[0].endpoints[0].local);
    }

    #[test]
    fn ready_endpoints_win_over_serving_terminating_ones() {
        let svc = service("ns", "web", "10.43.0.5", &[("", "TCP", 80)]);
        let mut s = slice(
            "ns",
            "web",
            "web-a",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true), ("10.42.0.3", "n1", false)],
        );
        let entries = service_ports(&svc, [&s], "n1");
        let c = entries[0].categorize();
        assert_eq!(c.cluster.len(), 1);
        assert!(c.any);
        // nothing ready: the serving, terminating endpoint takes the traffic
        s.endpoints[0].conditions = Some(k8s_openapi::api::discovery::v1::EndpointConditions {
            ready: Some(false),
            serving: Some(true),
            terminating: Some(true),
        });
        let entries = service_ports(&svc, [&s], "n1");
        let c = entries[0].categorize();
        assert_eq!(c.cluster.len(), 1);
        assert_eq!(c.cluster[0].ip.to_string(), "10.42.0.2");
    }

    #[test]
    fn internal_local_policy_uses_only_this_nodes_endpoints() {
        let mut svc = service("ns", "web", "10.43.0.5", &[("", "TCP", 80)]);
        svc.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
        let s = slice(
            "ns",
            "web",
            "web-a",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true), ("10.42.1.2", "n2", true)],
        );
        let entries = service_ports(&svc, [&s], "n2");
        let c = entries[0].categorize();
        assert!(c.cluster.is_empty());
        assert_eq!(c.local.len(), 1);
        assert_eq!(c.reachable.len(), 1);
        assert!(c.any);
    }
}
