//! APIService objects as the aggregator uses them, the priorities upstream gives the built-in
//! group versions (and CustomResourceDefinitions'), and the order discovery lists group
//! versions in: groups by their highest `groupPriorityMinimum` (then APIService name), versions
//! within a group by `versionPriority` (then upstream's kube-aware version order).

use base64::Engine;
use serde_json::Value;
use skiff_apimachinery::catalog::Catalog;

use super::State;
use crate::crd::controller::version_order;
use crate::strategy::apiservice::DEFAULT_SERVICE_PORT;
use crate::strategy::common::{int_at, str_at};

/// The Service an APIService's requests go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    pub namespace: String,
    pub name: String,
    pub port: u16,
}

/// One APIService, as read from its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiService {
    pub name: String,
    pub group: String,
    pub version: String,
    pub group_priority: i64,
    pub version_priority: i64,
    /// `None`: served by this API server (Local).
    pub service: Option<ServiceRef>,
    /// `spec.caBundle`, decoded (PEM).
    pub ca_bundle: Option<Vec<u8>>,
    pub insecure_skip_tls_verify: bool,
    /// Whether its `Available` condition is `True`.
    pub available: bool,
}

/// The APIService name of `group/version` (`v1beta1.metrics.k8s.io`, `v1.` for core).
pub fn name_of(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

impl ApiService {
    pub fn from_object(object: &Value) -> ApiService {
        let service = object
            .pointer("/spec/service")
            .filter(|s| s.is_object())
            .map(|s| ServiceRef {
                namespace: str_at(s, "/namespace").to_string(),
                name: str_at(s, "/name").to_string(),
                port: int_at(s, "/port")
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(DEFAULT_SERVICE_PORT),
            });
        let ca_bundle = Some(str_at(object, "/spec/caBundle"))
            .filter(|b| !b.is_empty())
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        let available = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        ApiService {
            name: str_at(object, "/metadata/name").to_string(),
            group: str_at(object, "/spec/group").to_string(),
            version: str_at(object, "/spec/version").to_string(),
            group_priority: int_at(object, "/spec/groupPriorityMinimum").unwrap_or(0),
            version_priority: int_at(object, "/spec/versionPriority").unwrap_or(0),
            service,
            ca_bundle,
            insecure_skip_tls_verify: object.pointer("/spec/insecureSkipTLSVerify")
                == Some(&Value::Bool(true)),
            available,
        }
    }
}

/// The priorities of CustomResourceDefinitions' group versions (upstream's crdregistration
/// controller: low, so that built-in groups come first).
pub const CRD_PRIORITY: (i64, i64) = (1000, 100);

/// `(groupPriorityMinimum, versionPriority)` upstream's kube-apiserver gives its own group
/// versions (`DefaultGenericAPIServicePriorities` and kube-apiserver's additions).
pub fn builtin_priority(group: &str, version: &str) -> Option<(i64, i64)> {
    Some(match (group, version) {
        ("", "v1") => (18000, 1),
        ("apiregistration.k8s.io", "v1") => (18000, 15),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("autoscaling", "v1") => (17500, 15),
        ("batch", "v1") => (17400, 15),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("policy", "v1") => (17100, 15),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("apiextensions.k8s.io", "v1") => (16700, 15),
        ("admissionregistration.k8s.io", "v1") => (16700, 15),
        ("scheduling.k8s.io", "v1") => (16600, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("node.k8s.io", "v1") => (16300, 15),
        ("discovery.k8s.io", "v1") => (16200, 15),
        ("flowcontrol.apiserver.k8s.io", "v1") => (16100, 21),
        _ => return None,
    })
}

/// Where a group version listed by discovery is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// By this server (the registry).
    Local,
    /// By an aggregated server.
    Remote,
}

/// One named group in discovery order, its versions preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryGroup {
    pub name: String,
    pub versions: Vec<(String, Served)>,
}

/// The named groups discovery lists, in upstream's order: the local group versions of
/// `catalog` (with their APIService's priorities, else upstream's for built-in ones, else
/// CustomResourceDefinitions') and every remote APIService's, a remote one taking the place of a
/// local one of the same group version.
pub fn discovery_order(catalog: &Catalog, state: &State) -> Vec<DiscoveryGroup> {
    struct Entry {
        name: String,
        group: String,
        version: String,
        priority: (i64, i64),
        served: Served,
    }
    let mut entries: Vec<Entry> = Vec::new();
    for group in catalog.groups() {
        for version in &group.versions {
            if state.remote(&group.name, version).is_some() {
                continue;
            }
            let name = name_of(&group.name, version);
            let priority = state
                .services
                .get(&name)
                .map(|s| (s.group_priority, s.version_priority))
                .or_else(|| builtin_priority(&group.name, version))
                .unwrap_or(CRD_PRIORITY);
            entries.push(Entry {
                name,
                group: group.name.clone(),
                version: version.clone(),
                priority,
                served: Served::Local,
            });
        }
    }
    for s in state.services.values() {
        if s.service.is_some() && !s.group.is_empty() {
            entries.push(Entry {
                name: s.name.clone(),
                group: s.group.clone(),
                version: s.version.clone(),
                priority: (s.group_priority, s.version_priority),
                served: Served::Remote,
            });
        }
    }
    // upstream's ByGroupPriorityMinimum: a group sits where its first APIService does
    entries.sort_by(|a, b| b.priority.0.cmp(&a.priority.0).then(a.name.cmp(&b.name)));
    let mut groups: Vec<(DiscoveryGroup, Vec<(i64, String)>)> = Vec::new();
    for e in entries {
        let at = match groups.iter().position(|(g, _)| g.name == e.group) {
            Some(at) => at,
            None => {
                groups.push((
                    DiscoveryGroup {
                        name: e.group.clone(),
                        versions: Vec::new(),
                    },
                    Vec::new(),
                ));
                groups.len() - 1
            }
        };
        let (group, keys) = &mut groups[at];
        group.versions.push((e.version.clone(), e.served));
        keys.push((e.priority.1, e.version));
    }
    groups
        .into_iter()
        .map(|(mut group, keys)| {
            // upstream's ByVersionPriority
            let mut order: Vec<usize> = (0..keys.len()).collect();
            order.sort_by(|&a, &b| {
                keys[b]
                    .0
                    .cmp(&keys[a].0)
                    .then_with(|| version_order(&keys[a].1, &keys[b].1))
            });
            group.versions = order
                .into_iter()
                .map(|i| group.versions[i].clone())
                .collect();
            group
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use skiff_apimachinery::catalog::Registry;

    fn remote(group: &str, version: &str, priority: (i64, i64)) -> ApiService {
        ApiService::from_object(&json!({
            "metadata": {"name": name_of(group, version)},
            "spec": {"group": group, "version": version,
                     "groupPriorityMinimum": priority.0, "versionPriority": priority.1,
                     "service": {"namespace": "ns", "name": "svc"}}}))
    }

    #[test]
    fn an_api_service_reads_its_service_with_port_443_and_its_availability() {
        let s = ApiService::from_object(&json!({
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "caBundle": "cGVt", "service": {"namespace": "kube-system",
                                                     "name": "metrics-server"}},
            "status": {"conditions": [{"type": "Available", "status": "True"}]}}));
        assert_eq!(
            s.service,
            Some(ServiceRef {
                namespace: "kube-system".into(),
                name: "metrics-server".into(),
                port: 443
            })
        );
        assert_eq!(s.ca_bundle.as_deref(), Some(&b"pem"[..]));
        assert!(s.available);
    }

    #[test]
    fn groups_follow_upstreams_priorities_with_remote_ones_placed_by_theirs() {
        let catalog = Registry::new().snapshot();
        let mut state = State::default();
        for s in [
            remote("metrics.k8s.io", "v1beta1", (100, 100)),
            remote("wardle.example.com", "v1alpha1", (17900, 10)),
            remote("wardle.example.com", "v1", (1000, 20)),
        ] {
            state.services.insert(s.name.clone(), s);
        }
        let order = discovery_order(&catalog, &state);
        let names: Vec<&str> = order.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names[..4],
            [
                "apiregistration.k8s.io",
                "wardle.example.com",
                "apps",
                "events.k8s.io"
            ]
        );
        // admissionregistration and apiextensions share 16700 and sort by name
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        assert!(at("storage.k8s.io") < at("admissionregistration.k8s.io"));
        assert!(at("admissionregistration.k8s.io") < at("apiextensions.k8s.io"));
        assert!(at("apiextensions.k8s.io") < at("scheduling.k8s.io"));
        assert_eq!(names.last(), Some(&"metrics.k8s.io"));
        let wardle = &order[1];
        assert_eq!(
            wardle.versions,
            [
                ("v1".to_string(), Served::Remote),
                ("v1alpha1".to_string(), Served::Remote)
            ]
        );
        assert_eq!(order[2].versions, [("v1".to_string(), Served::Local)]);
    }
}
