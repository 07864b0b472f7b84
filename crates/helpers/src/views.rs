//! Borrowed views of API objects that stand in for absent fields without cloning: a node's
//! labels, a pod's labels, a pod's spec.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};

static EMPTY_LABELS: LazyLock<BTreeMap<String, String>> = LazyLock::new(BTreeMap::new);
static EMPTY_SPEC: LazyLock<PodSpec> = LazyLock::new(PodSpec::default);

/// A node's labels, borrowed (empty when it has none).
pub fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
}

/// A pod's labels, borrowed (empty when it has none).
pub fn pod_labels(pod: &Pod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
}

/// A pod's spec, or an empty one.
pub fn pod_spec(pod: &Pod) -> &PodSpec {
    pod.spec.as_ref().unwrap_or(&EMPTY_SPEC)
}
