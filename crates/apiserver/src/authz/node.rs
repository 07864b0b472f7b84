//! The Node authorizer: a kubelet (user `system:node:<name>` in group `system:nodes`) may read
//! only the pods bound to its node and the Secrets, ConfigMaps, PersistentVolumeClaims,
//! PersistentVolumes and service account tokens those pods use, and write only its own Lease
//! and CSINode; everything else a kubelet does is judged against upstream's `system:node` rules
//! (NodeRestriction admission then narrows node, pod and status writes to its own objects). The
//! relationships are read from the watch cache on each request, not from the store.
//!
//! Skiff adds one relationship of its own: a kubelet may list and watch the volumes Skiff's
//! local-path provisioner made on its node (only through the label selector naming its node),
//! and delete such a volume once it is `Released`: it removes their directories itself, where
//! k3s's provisioner runs a helper pod.

use std::sync::Arc;

use serde_json::Value;

use skiff_component_helpers::local_path::{LABEL_NODE, PROVISIONER};

use super::rbac::PolicyRule;
use super::{Authorizer, Decision};
use crate::authn::UserInfo;
use crate::request::RequestInfo;

/// Upstream's group of node identities.
pub const NODES_GROUP: &str = "system:nodes";
/// The user name prefix of node identities.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// Where node heartbeat Leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node a user is a kubelet of, if it is one (upstream's `nodeidentifier`).
pub fn node_of(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    (!name.is_empty() && user.groups.iter().any(|g| g == NODES_GROUP)).then_some(name)
}

/// What the authorizer knows of pods and claims: the watch cache in the server, maps in tests.
pub trait NodeGraph: Send + Sync {
    /// The pods bound to `node` in `namespace` (every namespace when empty): at least their
    /// `metadata.name`, `metadata.namespace` and `spec`.
    fn pods_on(&self, node: &str, namespace: &str) -> Vec<Value>;
    /// The service accounts the pods bound to `node` in `namespace` run as.
    fn service_accounts_on(&self, node: &str, namespace: &str) -> Vec<String>;
    /// The node a pod is bound to (`""` when unscheduled); `None` when there is no such pod.
    fn pod_node(&self, namespace: &str, name: &str) -> Option<String>;
    /// A PersistentVolumeClaim.
    fn claim(&self, namespace: &str, name: &str) -> Option<Value>;
    /// A PersistentVolume.
    fn volume(&self, name: &str) -> Option<Value>;
}

/// The watch cache as a [`NodeGraph`].
pub struct CachedGraph {
    pub cache: Arc<crate::cache::Cacher>,
}

fn core(resource: &str) -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::lookup("", "v1", resource).expect("core resources")
}

impl NodeGraph for CachedGraph {
    fn pods_on(&self, node: &str, namespace: &str) -> Vec<Value> {
        /// What the relationships are read from: the rest of a pod is skipped, not decoded.
        #[derive(serde::Deserialize)]
        struct Related {
            metadata: RelatedMeta,
            spec: Value,
        }
        #[derive(serde::Deserialize)]
        struct RelatedMeta {
            name: String,
            namespace: String,
        }
        // the cache's index by `spec.nodeName` (the pods' watch index) finds the node's pods
        self.cache
            .resource(core("pods"))
            .indexed(node, namespace)
            .iter()
            .filter_map(|c| c.decode::<Related>().ok())
            .map(|p| {
                // the name too: a generic ephemeral volume's claim is named after its pod
                let meta = p.metadata;
                serde_json::json!({"metadata": {"name": meta.name, "namespace": meta.namespace},
                                   "spec": p.spec})
            })
            .collect()
    }

    fn service_accounts_on(&self, node: &str, namespace: &str) -> Vec<String> {
        // a cached field-selector value: nothing to decode
        self.cache
            .resource(core("pods"))
            .indexed(node, namespace)
            .iter()
            .map(|c| account(c.field("spec.serviceAccountName")))
            .collect()
    }

    fn pod_node(&self, namespace: &str, name: &str) -> Option<String> {
        let pod = self
            .cache
            .resource(core("pods"))
            .get(&format!("{namespace}/{name}"))?;
        Some(pod.field("spec.nodeName").unwrap_or_default().to_string())
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<Value> {
        self.cache
            .resource(core("persistentvolumeclaims"))
            .get(&format!("{namespace}/{name}"))?
            .object()
            .ok()
    }

    fn volume(&self, name: &str) -> Option<Value> {
        self.cache
            .resource(core("persistentvolumes"))
            .get(name)?
            .object()
            .ok()
    }
}

/// The service account a pod with `spec.serviceAccountName` `name` runs as.
fn account(name: Option<&str>) -> String {
    name.filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// The Node authorizer.
pub struct NodeAuthorizer {
    graph: Box<dyn NodeGraph>,
    /// Upstream's `system:node` ClusterRole: what any kubelet may do beyond its relationships.
    node_rules: Vec<PolicyRule>,
}

impl std::fmt::Debug for NodeAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuthorizer").finish_non_exhaustive()
    }
}

/// The names of the objects of `kind` one pod refers to: volumes, env, envFrom, image pull
/// secrets, projected sources (`secret`, `configMap`, `persistentVolumeClaim`).
fn references(pod: &Value, kind: &str) -> Vec<String> {
    let mut out = Vec::new();
    let spec = &pod["spec"];
    let push = |out: &mut Vec<String>, v: &Value| {
        if let Some(n) = v.as_str() {
            out.push(n.to_string());
        }
    };
    for v in spec["volumes"].as_array().into_iter().flatten() {
        match kind {
            "secrets" => {
                push(&mut out, &v["secret"]["secretName"]);
                for k in [
                    "cephfs",
                    "cinder",
                    "flexVolume",
                    "iscsi",
                    "rbd",
                    "scaleIO",
                    "csi",
                ] {
                    push(&mut out, &v[k]["secretRef"]["name"]);
                    push(&mut out, &v[k]["nodePublishSecretRef"]["name"]);
                }
                push(&mut out, &v["azureFile"]["secretName"]);
            }
            "configmaps" => push(&mut out, &v["configMap"]["name"]),
            "persistentvolumeclaims" => {
                push(&mut out, &v["persistentVolumeClaim"]["claimName"]);
                if v.get("ephemeral").is_some() {
                    // upstream names the claim of a generic ephemeral volume `<pod>-<volume>`
                    if let (Some(p), Some(n)) =
                        (pod["metadata"]["name"].as_str(), v["name"].as_str())
                    {
                        out.push(format!("{p}-{n}"));
                    }
                }
            }
            _ => {}
        }
        for s in v["projected"]["sources"].as_array().into_iter().flatten() {
            match kind {
                "secrets" => push(&mut out, &s["secret"]["name"]),
                "configmaps" => push(&mut out, &s["configMap"]["name"]),
                _ => {}
            }
        }
    }
    if kind == "secrets" {
        for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
            push(&mut out, &s["name"]);
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            for e in c["envFrom"].as_array().into_iter().flatten() {
                match kind {
                    "secrets" => push(&mut out, &e["secretRef"]["name"]),
                    "configmaps" => push(&mut out, &e["configMapRef"]["name"]),
                    _ => {}
                }
            }
            for e in c["env"].as_array().into_iter().flatten() {
                match kind {
                    "secrets" => push(&mut out, &e["valueFrom"]["secretKeyRef"]["name"]),
                    "configmaps" => push(&mut out, &e["valueFrom"]["configMapKeyRef"]["name"]),
                    _ => {}
                }
            }
        }
    }
    out
}

/// The object a request names: its name, or for list and watch the `metadata.name` its field
/// selector pins.
fn requested_name(r: &RequestInfo) -> Option<String> {
    if !r.name.is_empty() {
        return Some(r.name.clone());
    }
    r.field_selector
        .split(',')
        .find_map(|term| {
            let (k, v) = term.split_once('=')?;
            (k.trim() == "metadata.name").then(|| v.trim_start_matches('=').trim().to_string())
        })
        .filter(|n| !n.is_empty())
}

fn no_relationship(node: &str) -> Decision {
    Decision::NoOpinion(format!(
        "no relationship found between node '{node}' and this object"
    ))
}

impl NodeAuthorizer {
    pub fn new(graph: Box<dyn NodeGraph>) -> Self {
        let node_rules = crate::bootstrap::rbac::policy()
            .cluster_roles
            .iter()
            .find(|r| r["metadata"]["name"] == "system:node")
            .and_then(|r| serde_json::from_value(r["rules"].clone()).ok())
            .unwrap_or_default();
        Self { graph, node_rules }
    }

    fn static_rules(&self, r: &RequestInfo) -> Decision {
        if self.node_rules.iter().any(|rule| rule.allows(r)) {
            Decision::Allow
        } else {
            Decision::pass()
        }
    }

    /// Secrets, ConfigMaps and claims: readable one at a time when a pod of the node uses them.
    fn read_referenced(&self, node: &str, r: &RequestInfo) -> Decision {
        if !matches!(r.verb.as_str(), "get" | "list" | "watch") {
            return Decision::NoOpinion("can only read resources of this type".into());
        }
        if r.namespace.is_empty() {
            return Decision::NoOpinion("can only read namespaced object of this type".into());
        }
        let Some(name) = requested_name(r) else {
            return Decision::NoOpinion("No Object name found".into());
        };
        let related = self
            .graph
            .pods_on(node, &r.namespace)
            .iter()
            .any(|p| references(p, &r.resource).contains(&name));
        if related {
            Decision::Allow
        } else {
            no_relationship(node)
        }
    }

    /// PersistentVolumes: readable when bound to a claim a pod of the node uses.
    fn read_volume(&self, node: &str, r: &RequestInfo) -> Decision {
        if r.verb != "get" {
            return Decision::NoOpinion("can only get individual resources of this type".into());
        }
        let related = self.graph.pods_on(node, "").iter().any(|p| {
            let ns = p["metadata"]["namespace"].as_str().unwrap_or_default();
            references(p, "persistentvolumeclaims").iter().any(|c| {
                self.graph
                    .claim(ns, c)
                    .is_some_and(|claim| claim["spec"]["volumeName"].as_str() == Some(&r.name))
            })
        });
        if related {
            Decision::Allow
        } else {
            no_relationship(node)
        }
    }

    /// Whether `volume` is a local-path volume of `node` (Skiff's provisioner made it there).
    fn is_local_path_volume_of(volume: &Value, node: &str) -> bool {
        volume["metadata"]["labels"][LABEL_NODE].as_str() == Some(node)
            && volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"].as_str()
                == Some(PROVISIONER)
    }

    /// PersistentVolumes themselves: upstream's reads of the volumes its pods use, and Skiff's
    /// local-path volumes of the node: listed and watched through the label selector
    /// `skiff.dev/local-path-node=<node>`, read by name, deleted once `Released`.
    fn volumes(&self, node: &str, r: &RequestInfo) -> Decision {
        match r.verb.as_str() {
            "list" | "watch" => {
                let pinned = r.label_selector.split(',').any(|t| {
                    t.split_once('=').is_some_and(|(k, v)| {
                        k.trim() == LABEL_NODE && v.trim_start_matches('=').trim() == node
                    })
                });
                if pinned {
                    Decision::Allow
                } else {
                    Decision::NoOpinion(format!(
                        "can only list/watch persistentvolumes with the {LABEL_NODE}=<node> label selector"
                    ))
                }
            }
            "get" => match self.graph.volume(&r.name) {
                Some(v) if Self::is_local_path_volume_of(&v, node) => Decision::Allow,
                _ => self.read_volume(node, r),
            },
            "delete" => match self.graph.volume(&r.name) {
                Some(v)
                    if Self::is_local_path_volume_of(&v, node)
                        && v["status"]["phase"] == "Released" =>
                {
                    Decision::Allow
                }
                _ => no_relationship(node),
            },
            _ => self.read_volume(node, r),
        }
    }

    /// Pods: one by name when bound to the node; lists and watches only through the
    /// `spec.nodeName=<node>` field selector; the rest per the static rules.
    fn pods(&self, node: &str, r: &RequestInfo) -> Decision {
        if !r.subresource.is_empty() {
            return self.static_rules(r);
        }
        match r.verb.as_str() {
            "get" => match self.graph.pod_node(&r.namespace, &r.name) {
                Some(n) if n == node => Decision::Allow,
                // a pod the cache has not seen yet: as upstream, the graph cannot vouch for it
                _ => no_relationship(node),
            },
            "list" | "watch" => {
                let pinned = r.field_selector.split(',').any(|t| {
                    t.split_once('=').is_some_and(|(k, v)| {
                        k.trim() == "spec.nodeName" && v.trim_start_matches('=').trim() == node
                    })
                });
                if pinned {
                    Decision::Allow
                } else {
                    Decision::NoOpinion(
                        "can only list/watch pods with spec.nodeName field selector".into(),
                    )
                }
            }
            _ => self.static_rules(r),
        }
    }

    /// Leases: only `kube-node-lease/<node>`.
    fn lease(&self, node: &str, r: &RequestInfo) -> Decision {
        if !matches!(
            r.verb.as_str(),
            "get" | "create" | "update" | "patch" | "delete"
        ) {
            return Decision::NoOpinion(
                "can only get, create, update, patch, or delete a node lease".into(),
            );
        }
        if r.namespace != NODE_LEASE_NAMESPACE {
            return Decision::NoOpinion(format!(
                "can only access leases in the {NODE_LEASE_NAMESPACE} system namespace"
            ));
        }
        if r.verb != "create" && r.name != node {
            return Decision::NoOpinion(
                "can only access node lease with the same name as the requesting node".into(),
            );
        }
        Decision::Allow
    }

    /// `serviceaccounts/<name>/token`: only for an account a pod of the node runs as.
    fn token(&self, node: &str, r: &RequestInfo) -> Decision {
        if r.verb != "create" {
            return Decision::NoOpinion(
                "can only create tokens for individual service accounts".into(),
            );
        }
        let related = self
            .graph
            .service_accounts_on(node, &r.namespace)
            .contains(&r.name);
        if related {
            Decision::Allow
        } else {
            no_relationship(node)
        }
    }
}

impl Authorizer for NodeAuthorizer {
    fn authorize(&self, user: &UserInfo, r: &RequestInfo) -> Decision {
        let Some(node) = node_of(user) else {
            return Decision::pass();
        };
        if !r.is_resource_request {
            return Decision::pass();
        }
        match (
            r.group.as_str(),
            r.resource.as_str(),
            r.subresource.as_str(),
        ) {
            ("", "secrets" | "configmaps" | "persistentvolumeclaims", "") => {
                self.read_referenced(node, r)
            }
            ("", "persistentvolumeclaims", "status") => {
                if !matches!(r.verb.as_str(), "get" | "update" | "patch") {
                    return Decision::NoOpinion(
                        "can only get, update or patch claim status".into(),
                    );
                }
                let related = self
                    .graph
                    .pods_on(node, &r.namespace)
                    .iter()
                    .any(|p| references(p, "persistentvolumeclaims").contains(&r.name));
                if related {
                    Decision::Allow
                } else {
                    no_relationship(node)
                }
            }
            ("", "persistentvolumes", "") => self.volumes(node, r),
            ("", "persistentvolumes", _) => self.read_volume(node, r),
            ("", "pods", _) => self.pods(node, r),
            // Skiff's kubelet records events.k8s.io/v1 Events where upstream's records core
            // ones; the same verbs as `system:node` grants on core events
            ("events.k8s.io", "events", "") => {
                if matches!(r.verb.as_str(), "create" | "update" | "patch") {
                    Decision::Allow
                } else {
                    Decision::pass()
                }
            }
            ("", "serviceaccounts", "token") => self.token(node, r),
            ("coordination.k8s.io", "leases", _) => self.lease(node, r),
            ("storage.k8s.io", "csinodes", _) => {
                if r.verb != "create" && r.name != node {
                    return Decision::NoOpinion(
                        "can only access CSINode with the same name as the requesting node".into(),
                    );
                }
                self.static_rules(r)
            }
            _ => self.static_rules(r),
        }
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
