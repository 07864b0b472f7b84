//! Upstream's `DefaultTolerationSeconds` admission plugin: a pod (created or updated) that does
//! not tolerate the `node.kubernetes.io/not-ready` or `unreachable` NoExecute taints gets a
//! toleration of each for 300 s, so that taint eviction gives its node five minutes to come back.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;

/// Upstream's `--default-not-ready-toleration-seconds` and `--default-unreachable-…` default.
pub const DEFAULT_SECONDS: i64 = 300;
const KEYS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

pub struct DefaultTolerationSeconds;

/// Whether some toleration already covers `key`'s NoExecute taint (as upstream checks it: the
/// key or an empty key, and the effect NoExecute or empty).
fn covered(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = t["key"].as_str().unwrap_or("");
        let effect = t["effect"].as_str().unwrap_or("");
        (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

/// Adds the default tolerations `pod` lacks.
pub fn add_defaults(pod: &mut Value) {
    let existing = pod["spec"]["tolerations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut tolerations = existing.clone();
    for key in KEYS {
        if !covered(&existing, key) {
            tolerations.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": DEFAULT_SECONDS}),
            );
        }
    }
    if tolerations.len() != existing.len() && pod["spec"].is_object() {
        pod["spec"]["tolerations"] = json!(tolerations);
    }
}

#[async_trait]
impl Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        let is_pod = attrs.resource.group.is_empty() && attrs.resource.plural == "pods";
        // upstream's handler takes creates and updates, so that an update cannot drop them
        if matches!(attrs.operation, Operation::Create | Operation::Update)
            && is_pod
            && attrs.subresource.is_empty()
            && let Some(pod) = object
        {
            add_defaults(pod);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_without_tolerations_gets_both_for_300_seconds() {
        let mut pod = json!({"spec": {"containers": []}});
        add_defaults(&mut pod);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300}
            ])
        );
    }

    #[test]
    fn a_pod_tolerating_a_taint_itself_keeps_its_own() {
        let own = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 2});
        let mut pod = json!({"spec": {"tolerations": [own]}});
        add_defaults(&mut pod);
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0], own);
        assert_eq!(t[1]["key"], "node.kubernetes.io/not-ready");
        // an empty key with no effect tolerates everything
        let mut all = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
        add_defaults(&mut all);
        assert_eq!(all["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }
}
