//! Strategic-merge-patch metadata: which list fields merge by key, written as upstream's
//! `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` extensions.
//!
//! k8s-openapi's schemas leave these out, yet kubectl reads them from the OpenAPI documents to
//! compute client-side `apply` patches: without them it would replace whole lists (a Pod's
//! `containers`) instead of merging items by name. The table mirrors the `patchStrategy` and
//! `patchMergeKey` struct tags of the upstream API types Skiff serves.

use serde_json::{Map, Value};

/// One patched field: (definition, property, strategy, merge key).
type Entry = (String, &'static str, &'static str, Option<&'static str>);

const MERGE: &str = "merge";
const MERGE_RETAIN: &str = "merge,retainKeys";
const RETAIN: &str = "retainKeys";

const CORE: &str = "io.k8s.api.core.v1.";
const APPS: &str = "io.k8s.api.apps.v1.";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// Upstream's patch strategies, by definition (the prefix constant plus the type name).
const TABLE: &[(&str, &str, &str, &str, Option<&str>)] = &[
    (META, "ObjectMeta", "finalizers", MERGE, None),
    (META, "ObjectMeta", "ownerReferences", MERGE, Some("uid")),
    (CORE, "PodSpec", "containers", MERGE, Some("name")),
    (CORE, "PodSpec", "initContainers", MERGE, Some("name")),
    (CORE, "PodSpec", "ephemeralContainers", MERGE, Some("name")),
    (CORE, "PodSpec", "volumes", MERGE_RETAIN, Some("name")),
    (CORE, "PodSpec", "imagePullSecrets", MERGE, Some("name")),
    (CORE, "PodSpec", "hostAliases", MERGE, Some("ip")),
    (
        CORE,
        "PodSpec",
        "topologySpreadConstraints",
        MERGE,
        Some("topologyKey"),
    ),
    (
        CORE,
        "PodSpec",
        "resourceClaims",
        MERGE_RETAIN,
        Some("name"),
    ),
    (CORE, "PodSpec", "schedulingGates", MERGE, Some("name")),
    (CORE, "Container", "ports", MERGE, Some("containerPort")),
    (CORE, "Container", "env", MERGE, Some("name")),
    (CORE, "Container", "volumeMounts", MERGE, Some("mountPath")),
    (
        CORE,
        "Container",
        "volumeDevices",
        MERGE,
        Some("devicePath"),
    ),
    (CORE, "EphemeralContainer", "env", MERGE, Some("name")),
    (
        CORE,
        "EphemeralContainer",
        "volumeMounts",
        MERGE,
        Some("mountPath"),
    ),
    (
        CORE,
        "EphemeralContainer",
        "volumeDevices",
        MERGE,
        Some("devicePath"),
    ),
    (CORE, "PodStatus", "conditions", MERGE, Some("type")),
    (CORE, "PodStatus", "podIPs", MERGE, Some("ip")),
    (CORE, "PodStatus", "hostIPs", MERGE, Some("ip")),
    (
        CORE,
        "PodStatus",
        "resourceClaimStatuses",
        MERGE_RETAIN,
        Some("name"),
    ),
    (CORE, "ServiceSpec", "ports", MERGE, Some("port")),
    (CORE, "ServiceStatus", "conditions", MERGE, Some("type")),
    (CORE, "ServiceAccount", "secrets", MERGE, Some("name")),
    (CORE, "NodeSpec", "podCIDRs", MERGE, None),
    (CORE, "NodeStatus", "conditions", MERGE, Some("type")),
    (CORE, "NodeStatus", "addresses", MERGE, Some("type")),
    (CORE, "NamespaceStatus", "conditions", MERGE, Some("type")),
    (
        CORE,
        "PersistentVolumeClaimStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    (
        CORE,
        "ReplicationControllerStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    (APPS, "DeploymentSpec", "strategy", RETAIN, None),
    (APPS, "DeploymentStatus", "conditions", MERGE, Some("type")),
    (APPS, "ReplicaSetStatus", "conditions", MERGE, Some("type")),
    (APPS, "DaemonSetStatus", "conditions", MERGE, Some("type")),
    (APPS, "StatefulSetStatus", "conditions", MERGE, Some("type")),
    (
        "io.k8s.api.batch.v1.",
        "JobStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    (
        "io.k8s.api.policy.v1.",
        "PodDisruptionBudgetStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    (
        "io.k8s.api.autoscaling.v2.",
        "HorizontalPodAutoscalerStatus",
        "conditions",
        MERGE,
        Some("type"),
    ),
    (
        "io.k8s.api.storage.v1.",
        "CSINodeSpec",
        "drivers",
        MERGE,
        Some("name"),
    ),
];

/// The table with full definition names.
fn entries() -> impl Iterator<Item = Entry> {
    TABLE.iter().map(|(prefix, ty, field, strategy, key)| {
        (format!("{prefix}{ty}"), *field, *strategy, *key)
    })
}

/// Writes the patch extensions into `definitions`; entries whose definition or field is
/// missing are skipped (the test below keeps the table honest).
pub(crate) fn apply(definitions: &mut Map<String, Value>) {
    for (name, field, strategy, key) in entries() {
        let Some(Value::Object(property)) = definitions
            .get_mut(&name)
            .and_then(|d| d.get_mut("properties"))
            .and_then(|p| p.get_mut(field))
        else {
            continue;
        };
        property.insert(
            "x-kubernetes-patch-strategy".into(),
            Value::String(strategy.into()),
        );
        if let Some(key) = key {
            property.insert(
                "x-kubernetes-patch-merge-key".into(),
                Value::String(key.into()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schemas::registry;

    #[test]
    fn every_table_entry_names_an_existing_field() {
        let registry = registry();
        for (name, field, _, _) in entries() {
            let property = registry
                .get(&name)
                .and_then(|d| d.pointer(&format!("/properties/{field}")));
            assert!(property.is_some(), "{name} has no field {field}");
        }
    }

    #[test]
    fn containers_merge_by_name() {
        let spec = registry().get("io.k8s.api.core.v1.PodSpec").unwrap();
        let containers = &spec["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    }
}
