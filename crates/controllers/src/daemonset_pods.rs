//! Where a DaemonSet's pods belong and what they look like (upstream's
//! `NodeShouldRunDaemonPod`, `AddOrUpdateDaemonPodTolerations`,
//! `ReplaceDaemonSetPodNodeNameNodeAffinity`, `GetTargetNodeName`): a node runs the pod when its
//! labels match the template's nodeSelector and required node affinity and its taints are
//! tolerated (with the tolerations every daemon pod gets); an untolerated NoExecute taint evicts
//! a running one. Pods are pinned to their node by node affinity on `metadata.name` and placed
//! by the default scheduler.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PodSpec, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use skiff_component_helpers::node_affinity::RequiredNodeAffinity;
use skiff_component_helpers::tolerations::tolerated_by_any;

use crate::revision::HASH_LABEL;

/// The deprecated label with the DaemonSet generation a pod was made from.
pub const TEMPLATE_GENERATION: &str = "pod-template-generation";

/// The tolerations upstream adds to every daemon pod (`network-unavailable` only with host
/// networking).
pub fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    let mut out = vec![
        t("node.kubernetes.io/not-ready", "NoExecute"),
        t("node.kubernetes.io/unreachable", "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        out.push(t("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    out
}

/// The template's spec with the daemon tolerations added (those it lacks by key and effect).
fn spec_with_tolerations(ds: &DaemonSet) -> PodSpec {
    let mut spec = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let mut tolerations = spec.tolerations.take().unwrap_or_default();
    for t in daemon_tolerations(host_network) {
        if !tolerations
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            tolerations.push(t);
        }
    }
    spec.tolerations = Some(tolerations);
    spec
}

/// Whether a node should run the daemon pod, and whether a pod already there may stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    pub should_run: bool,
    pub should_continue_running: bool,
}

/// Upstream's `NodeShouldRunDaemonPod`.
pub fn node_fit(ds: &DaemonSet, node: &Node) -> Fit {
    let spec = spec_with_tolerations(ds);
    let node_name = node.name_any();
    if spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n != node_name)
    {
        return Fit {
            should_run: false,
            should_continue_running: false,
        };
    }
    let pod = Pod {
        spec: Some(spec.clone()),
        ..Default::default()
    };
    if !RequiredNodeAffinity::of(&pod).matches(node) {
        return Fit {
            should_run: false,
            should_continue_running: false,
        };
    }
    let tolerations = spec.tolerations.unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let untolerated = |effect: &str| {
        taints
            .iter()
            .any(|t| t.effect == effect && !tolerated_by_any(&tolerations, t))
    };
    let evicted = untolerated("NoExecute");
    Fit {
        should_run: !evicted && !untolerated("NoSchedule"),
        should_continue_running: !evicted,
    }
}

/// The node a daemon pod is for: its `nodeName`, else the node its affinity pins it to.
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_ref().filter(|n| !n.is_empty()) {
        return Some(n.clone());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == "metadata.name" && r.operator == "In")
        .and_then(|r| r.values.as_ref()?.first().cloned())
}

/// The template's required node affinity with every term pinned to `node` by `matchFields`.
fn pinned_affinity(affinity: Option<Affinity>, node: &str) -> Affinity {
    let pin = NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![node.into()]),
    };
    let mut affinity = affinity.unwrap_or_default();
    let mut na = affinity.node_affinity.take().unwrap_or_default();
    let mut terms = na
        .required_during_scheduling_ignored_during_execution
        .take()
        .map(|s| s.node_selector_terms)
        .unwrap_or_default();
    if terms.is_empty() {
        terms.push(NodeSelectorTerm::default());
    }
    for t in &mut terms {
        t.match_fields = Some(vec![pin.clone()]);
    }
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: terms,
    });
    affinity.node_affinity = Some(NodeAffinity { ..na });
    affinity
}

/// The daemon pod for `node` at the revision `hash`.
pub fn new_pod(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let template = ds
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = meta.labels.unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.into());
    labels.insert(
        TEMPLATE_GENERATION.into(),
        ds.metadata.generation.unwrap_or(0).to_string(),
    );
    let mut spec = spec_with_tolerations(ds);
    spec.affinity = Some(pinned_affinity(spec.affinity.take(), node));
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", ds.name_any())),
            namespace: ds.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![owner(ds)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The controller owner reference to a DaemonSet.
pub fn owner(ds: &DaemonSet) -> OwnerReference {
    OwnerReference {
        api_version: DaemonSet::api_version(&()).into(),
        kind: DaemonSet::kind(&()).into(),
        name: ds.name_any(),
        uid: ds.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(json!({"metadata": {"name": "agent", "namespace": "ns",
            "uid": "ds-uid", "generation": 3},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": spec}}}))
        .unwrap()
    }

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels},
            "spec": {"taints": taints}}))
        .unwrap()
    }

    fn plain() -> DaemonSet {
        ds(json!({"containers": [{"name": "c", "image": "i"}]}))
    }

    #[test]
    fn node_selectors_and_affinity_choose_nodes() {
        let picky = ds(json!({"nodeSelector": {"disk": "ssd"},
            "containers": [{"name": "c", "image": "i"}]}));
        assert!(!node_fit(&picky, &node(json!({}), json!([]))).should_run);
        assert!(node_fit(&picky, &node(json!({"disk": "ssd"}), json!([]))).should_run);
        let affine = ds(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "containers": [{"name": "c", "image": "i"}]}));
        assert!(node_fit(&affine, &node(json!({"zone": "a"}), json!([]))).should_run);
        assert!(!node_fit(&affine, &node(json!({"zone": "b"}), json!([]))).should_run);
    }

    #[test]
    fn taints_need_tolerations_except_those_every_daemon_pod_has() {
        let no_schedule = json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]);
        let fit = node_fit(&plain(), &node(json!({}), no_schedule));
        assert_eq!((fit.should_run, fit.should_continue_running), (false, true));
        let no_execute = json!([{"key": "dedicated", "value": "x", "effect": "NoExecute"}]);
        let fit = node_fit(&plain(), &node(json!({}), no_execute));
        assert_eq!(
            (fit.should_run, fit.should_continue_running),
            (false, false)
        );
        for key in [
            "node.kubernetes.io/unschedulable",
            "node.kubernetes.io/disk-pressure",
        ] {
            let t = json!([{"key": key, "effect": "NoSchedule"}]);
            assert!(node_fit(&plain(), &node(json!({}), t)).should_run, "{key}");
        }
        let not_ready = json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]);
        assert!(node_fit(&plain(), &node(json!({}), not_ready)).should_run);
        let tolerant = ds(
            json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "containers": [{"name": "c", "image": "i"}]}),
        );
        let t = json!([{"key": "dedicated", "value": "x", "effect": "NoExecute"}]);
        assert!(node_fit(&tolerant, &node(json!({}), t)).should_run);
    }

    #[test]
    fn a_new_pod_is_pinned_to_its_node_owned_labelled_and_tolerant() {
        let pod = new_pod(&plain(), "n1", "abc");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("agent-"));
        let labels = pod.labels();
        assert_eq!(labels[HASH_LABEL], "abc");
        assert_eq!(labels[TEMPLATE_GENERATION], "3");
        assert_eq!(labels["app"], "agent");
        assert_eq!(pod.owner_references()[0].kind, "DaemonSet");
        assert_eq!(target_node(&pod).as_deref(), Some("n1"));
        let tolerations = pod.spec.as_ref().unwrap().tolerations.clone().unwrap();
        assert_eq!(tolerations.len(), 6);
        assert!(pod.spec.as_ref().unwrap().node_name.is_none());
    }
}
