//! `records`: what the cluster DNS knows, as the informers fill it: each Service (ClusterIPs,
//! type, ports) with the ready endpoints of its EndpointSlices, and the reverse index from an IP
//! to the names a PTR query answers with. Only this state; [`crate::lookup`] turns it into
//! answers.
//!
//! Services and slices are kept by key and each change re-derives the one Service it touches
//! (its endpoints and its reverse entries), so an update costs the size of that Service, not of
//! the cluster.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use skiff_runtime::informer::Change;

/// The label an EndpointSlice names its Service with (upstream's `discovery.LabelServiceName`).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// `(namespace, name)` of a Service or an EndpointSlice.
pub type Key = (String, String);

/// How a Service is reached by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceKind {
    /// A virtual IP per family (`spec.clusterIPs`): the name answers with them.
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the name answers with each ready endpoint's address.
    Headless,
    /// `type: ExternalName`: the name is a CNAME to `spec.externalName` (lowercase, no final dot).
    ExternalName(String),
}

/// A port of a Service or of an EndpointSlice, as SRV records name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// The port's name, lowercase (`""` for an unnamed port).
    pub name: String,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    pub port: u16,
}

/// One ready address of a Service's endpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: IpAddr,
    /// The DNS label naming it: the endpoint's `hostname`, else its address with dashes
    /// (`10-42-0-5`), as CoreDNS's `endpointHostname`.
    pub name: String,
    /// The ports of the slice it came from.
    pub ports: Vec<Port>,
}

/// A Service as DNS answers for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRecord {
    pub kind: ServiceKind,
    pub ports: Vec<Port>,
    /// The ready endpoints of all its slices, deduplicated by address.
    pub endpoints: Vec<Endpoint>,
}

/// What a reverse (PTR) query for one IP answers with.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReverseTarget {
    pub namespace: String,
    pub service: String,
    /// `Some(label)` for a headless Service's endpoint, `None` for a ClusterIP.
    pub endpoint: Option<String>,
}

/// One EndpointSlice reduced to what DNS needs.
#[derive(Clone, Debug, Default)]
struct Slice {
    service: String,
    endpoints: Vec<Endpoint>,
}

/// Everything the informers have told us. Not synchronised itself: the server keeps it behind
/// one `RwLock` (writers are the informers' handlers, readers the query handlers).
#[derive(Debug, Default)]
pub struct ClusterRecords {
    /// Each Service reduced to how it is reached and its ports.
    services: HashMap<Key, (ServiceKind, Vec<Port>)>,
    slices: HashMap<Key, Slice>,
    /// Derived: the names of each Service's slices, by the Service's key.
    slices_of: HashMap<Key, HashSet<String>>,
    /// Derived: namespace → name → record (only for Services that exist), nested so that a
    /// question looks up borrowed labels without building a key.
    records: HashMap<String, HashMap<String, ServiceRecord>>,
    /// Derived: how many Services each namespace has (a namespace "exists" for DNS while > 0).
    namespaces: HashMap<String, usize>,
    /// Derived: IP → the names a PTR query for it answers with.
    reverse: HashMap<IpAddr, Vec<ReverseTarget>>,
    /// Derived: which IPs each Service put into `reverse` (to take them out again).
    reverse_of: HashMap<Key, Vec<IpAddr>>,
    /// Bumped on every change: the SOA serial.
    generation: u32,
}

impl ClusterRecords {
    /// The record of Service `name` in `namespace`, if it exists.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceRecord> {
        self.records.get(namespace)?.get(name)
    }

    /// Whether any Service lives in `namespace` (the informers watch no Namespaces).
    pub fn namespace_exists(&self, namespace: &str) -> bool {
        self.namespaces.contains_key(namespace)
    }

    /// The names a PTR query for `ip` answers with (sorted).
    pub fn reverse(&self, ip: IpAddr) -> &[ReverseTarget] {
        self.reverse.get(&ip).map_or(&[], Vec::as_slice)
    }

    /// Changes so far (the SOA serial).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Number of Services known.
    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    /// A Service was added or changed.
    pub fn apply_service(&mut self, service: &Service) {
        let Some(key) = key_of(&service.metadata) else {
            return;
        };
        let reduced = (kind_of(service), service_ports(service));
        if self.services.insert(key.clone(), reduced).is_none() {
            *self.namespaces.entry(key.0.clone()).or_default() += 1;
        }
        self.rederive(&key);
    }

    /// A Service was deleted.
    pub fn delete_service(&mut self, service: &Service) {
        if let Some(key) = key_of(&service.metadata) {
            self.remove_service(&key);
        }
    }

    fn remove_service(&mut self, key: &Key) {
        if self.services.remove(key).is_some()
            && let Some(count) = self.namespaces.get_mut(&key.0)
        {
            *count -= 1;
            if *count == 0 {
                self.namespaces.remove(&key.0);
            }
        }
        self.rederive(key);
    }

    /// Applies one change of the Service informer.
    pub fn service_changed(&mut self, change: &Change<Service>) {
        match change {
            Change::Added(service) | Change::Updated { new: service, .. } => {
                self.apply_service(service);
            }
            Change::Deleted { last, .. } => self.delete_service(last),
        }
    }

    /// An EndpointSlice was added or changed.
    pub fn apply_slice(&mut self, slice: &EndpointSlice) {
        let Some(key) = key_of(&slice.metadata) else {
            return;
        };
        let reduced = reduce_slice(slice);
        let before = self.insert_slice(&key, reduced.clone());
        if let Some(before) = before
            && before.service != reduced.service
        {
            self.rederive(&(key.0.clone(), before.service));
        }
        self.rederive(&(key.0, reduced.service));
    }

    /// An EndpointSlice was deleted.
    pub fn delete_slice(&mut self, slice: &EndpointSlice) {
        let Some(key) = key_of(&slice.metadata) else {
            return;
        };
        if let Some(before) = self.remove_slice(&key) {
            self.rederive(&(key.0, before.service));
        }
    }

    /// Applies one change of the EndpointSlice informer.
    pub fn slice_changed(&mut self, change: &Change<EndpointSlice>) {
        match change {
            Change::Added(slice) | Change::Updated { new: slice, .. } => self.apply_slice(slice),
            Change::Deleted { last, .. } => self.delete_slice(last),
        }
    }

    fn insert_slice(&mut self, key: &Key, slice: Slice) -> Option<Slice> {
        let service_key = (key.0.clone(), slice.service.clone());
        let before = self.slices.insert(key.clone(), slice);
        if let Some(before) = &before {
            self.unlink_slice(&key.0, &before.service, &key.1);
        }
        self.slices_of
            .entry(service_key)
            .or_default()
            .insert(key.1.clone());
        before
    }

    fn remove_slice(&mut self, key: &Key) -> Option<Slice> {
        let before = self.slices.remove(key)?;
        self.unlink_slice(&key.0, &before.service, &key.1);
        Some(before)
    }

    fn unlink_slice(&mut self, namespace: &str, service: &str, slice: &str) {
        let service_key = (namespace.to_string(), service.to_string());
        if let Some(names) = self.slices_of.get_mut(&service_key) {
            names.remove(slice);
            if names.is_empty() {
                self.slices_of.remove(&service_key);
            }
        }
    }

    /// Recomputes the record and the reverse entries of one Service from its object and slices.
    fn rederive(&mut self, key: &Key) {
        self.generation = self.generation.wrapping_add(1);
        for ip in self.reverse_of.remove(key).unwrap_or_default() {
            if let Some(targets) = self.reverse.get_mut(&ip) {
                targets.retain(|t| (&t.namespace, &t.service) != (&key.0, &key.1));
                if targets.is_empty() {
                    self.reverse.remove(&ip);
                }
            }
        }
        let Some((kind, ports)) = self.services.get(key) else {
            if let Some(names) = self.records.get_mut(&key.0) {
                names.remove(&key.1);
                if names.is_empty() {
                    self.records.remove(&key.0);
                }
            }
            return;
        };
        let mut endpoints: Vec<Endpoint> = self
            .slices_of
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|name| self.slices.get(&(key.0.clone(), name.clone())))
            .flat_map(|s| s.endpoints.iter().cloned())
            .collect();
        endpoints.sort_by(|a, b| a.ip.cmp(&b.ip).then_with(|| a.name.cmp(&b.name)));
        endpoints.dedup_by(|a, b| a.ip == b.ip);
        let record = ServiceRecord {
            kind: kind.clone(),
            ports: ports.clone(),
            endpoints,
        };
        let mut ips = Vec::new();
        match &record.kind {
            ServiceKind::ClusterIp(cluster_ips) => {
                for ip in cluster_ips {
                    ips.push((*ip, None));
                }
            }
            ServiceKind::Headless => {
                for endpoint in &record.endpoints {
                    ips.push((endpoint.ip, Some(endpoint.name.clone())));
                }
            }
            ServiceKind::ExternalName(_) => {}
        }
        let mut contributed = Vec::new();
        for (ip, endpoint) in ips {
            let targets = self.reverse.entry(ip).or_default();
            targets.push(ReverseTarget {
                namespace: key.0.clone(),
                service: key.1.clone(),
                endpoint,
            });
            targets.sort();
            contributed.push(ip);
        }
        self.reverse_of.insert(key.clone(), contributed);
        self.records
            .entry(key.0.clone())
            .or_default()
            .insert(key.1.clone(), record);
    }
}

/// `(namespace, name)`, lowercase; `None` for an object without them.
fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Key> {
    let namespace = meta.namespace.as_deref()?.to_ascii_lowercase();
    let name = meta.name.as_deref()?.to_ascii_lowercase();
    Some((namespace, name))
}

fn kind_of(service: &Service) -> ServiceKind {
    let Some(spec) = &service.spec else {
        return ServiceKind::ClusterIp(Vec::new());
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        let target = spec.external_name.as_deref().unwrap_or_default();
        return ServiceKind::ExternalName(target.trim_end_matches('.').to_ascii_lowercase());
    }
    if spec.cluster_ip.as_deref() == Some("None") {
        return ServiceKind::Headless;
    }
    let mut ips: Vec<IpAddr> = Vec::new();
    let listed = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter());
    for ip in listed.filter_map(|ip| ip.parse().ok()) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ServiceKind::ClusterIp(ips)
}

fn service_ports(service: &Service) -> Vec<Port> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(Port {
                name: p.name.as_deref().unwrap_or_default().to_ascii_lowercase(),
                protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                port: u16::try_from(p.port).ok()?,
            })
        })
        .collect()
}

fn reduce_slice(slice: &EndpointSlice) -> Slice {
    let service = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let ports: Vec<Port> = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(Port {
                name: p.name.as_deref().unwrap_or_default().to_ascii_lowercase(),
                protocol: p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase(),
                port: u16::try_from(p.port?).ok()?,
            })
        })
        .collect();
    let mut endpoints = Vec::new();
    if slice.address_type == "FQDN" {
        return Slice { service, endpoints };
    }
    for endpoint in &slice.endpoints {
        // a nil condition means unknown, which consumers treat as ready (upstream's API doc)
        let ready = endpoint.conditions.as_ref().and_then(|c| c.ready);
        if ready == Some(false) {
            continue;
        }
        let hostname = endpoint
            .hostname
            .as_deref()
            .filter(|h| is_label(h))
            .map(str::to_ascii_lowercase);
        for address in &endpoint.addresses {
            let Ok(ip) = address.parse::<IpAddr>() else {
                continue;
            };
            let name = hostname.clone().unwrap_or_else(|| dashed(ip));
            endpoints.push(Endpoint {
                ip,
                name,
                ports: ports.clone(),
            });
        }
    }
    Slice { service, endpoints }
}

/// An IP as one DNS label: `10.42.0.5` → `10-42-0-5`, `fd00::1` → `fd00--1`.
pub fn dashed(ip: IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

/// Whether `s` can be one DNS label (RFC 1123: letters, digits, dashes, at most 63).
fn is_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}
