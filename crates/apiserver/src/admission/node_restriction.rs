//! Upstream's `NodeRestriction` admission plugin: what the Node authorizer lets any kubelet do
//! to nodes and pods, narrowed to its own. A kubelet (`system:node:<name>`) may create, update
//! and delete only its own Node, may not set or change `node-restriction.kubernetes.io/`
//! labels (they are how admins steer workloads to nodes they trust) nor its taints once
//! registered, may create only mirror pods bound to itself, and may write the status of and
//! delete only pods bound to itself.

use async_trait::async_trait;
use serde_json::Value;

use super::{Attributes, Operation, Plugin};
use crate::authz::node::node_of;
use crate::error::{ApiError, Result};

/// The label prefix reserved for admins.
pub const RESTRICTED_PREFIX: &str = "node-restriction.kubernetes.io/";
/// The annotation that marks a mirror pod (a static pod's API object).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub struct NodeRestriction;

fn forbidden(attrs: &Attributes<'_>, why: &str) -> ApiError {
    ApiError::forbidden_target(
        crate::error::Target {
            group: &attrs.resource.group,
            resource: &attrs.resource.plural,
            name: attrs.name,
        },
        why,
    )
}

/// `Ok` if `allowed`, else 403 with the message `why` makes.
fn ensure(allowed: bool, attrs: &Attributes<'_>, why: impl FnOnce() -> String) -> Result<()> {
    if allowed {
        Ok(())
    } else {
        Err(forbidden(attrs, &why()))
    }
}

/// The restricted labels that differ between `old` and `new` (set, changed or removed).
fn restricted_changes(old: Option<&Value>, new: &Value) -> Vec<String> {
    let labels = |o: Option<&Value>| {
        o.and_then(|o| o.pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let (before, after) = (labels(old), labels(Some(new)));
    let mut keys: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|k| k.starts_with(RESTRICTED_PREFIX))
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

fn node_name_of(pod: Option<&Value>) -> &str {
    pod.and_then(|p| p.pointer("/spec/nodeName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl NodeRestriction {
    fn nodes(&self, node: &str, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        ensure(attrs.name == node, attrs, || {
            format!(
                "node \"{node}\" is not allowed to modify node \"{}\"",
                attrs.name
            )
        })?;
        let Some(object) = object else { return Ok(()) };
        let changed = restricted_changes(attrs.old, object);
        if !changed.is_empty() {
            let verb = if attrs.operation == Operation::Create {
                "set the following labels"
            } else {
                "modify labels"
            };
            return Err(forbidden(
                attrs,
                &format!("is not allowed to {verb}: {}", changed.join(", ")),
            ));
        }
        if attrs.operation == Operation::Update
            && let Some(old) = attrs.old
            && old.pointer("/spec/taints") != object.pointer("/spec/taints")
        {
            return Err(forbidden(
                attrs,
                &format!("node \"{node}\" is not allowed to modify taints"),
            ));
        }
        Ok(())
    }

    fn pods(&self, node: &str, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        match (attrs.operation, attrs.subresource) {
            (Operation::Create, "") => {
                let pod = object.unwrap_or(&Value::Null);
                let mirror = pod
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(MIRROR_ANNOTATION))
                    .is_some();
                ensure(mirror, attrs, || {
                    format!(
                        "pod does not have \"{MIRROR_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
                    )
                })?;
                ensure(node_name_of(object) == node, attrs, || {
                    format!("node \"{node}\" can only create pods with spec.nodeName set to itself")
                })
            }
            (Operation::Update, "status") => ensure(node_name_of(attrs.old) == node, attrs, || {
                format!(
                    "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                )
            }),
            (Operation::Delete, _) => ensure(node_name_of(attrs.old) == node, attrs, || {
                format!("node \"{node}\" can only delete pods with spec.nodeName set to itself")
            }),
            (Operation::Create, "eviction") => Ok(()),
            (op, _) => Err(forbidden(
                attrs,
                &format!(
                    "unexpected operation {}, node \"{node}\" can only update pod status",
                    match op {
                        Operation::Create => "CREATE",
                        Operation::Update => "UPDATE",
                        Operation::Delete => "DELETE",
                    }
                ),
            )),
        }
    }
}

#[async_trait]
impl Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let Some(node) = node_of(attrs.user) else {
            return Ok(());
        };
        if !attrs.resource.group.is_empty() {
            return Ok(());
        }
        match attrs.resource.plural.as_str() {
            "nodes" => self.nodes(node, attrs, object),
            "pods" => self.pods(node, attrs, object),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use serde_json::json;

    fn kubelet(node: &str) -> UserInfo {
        UserInfo {
            name: format!("system:node:{node}"),
            uid: String::new(),
            groups: vec!["system:nodes".into()],
            extra: Default::default(),
        }
    }

    fn rt(plural: &str) -> &'static skiff_apimachinery::catalog::ResourceType {
        skiff_apimachinery::catalog::lookup("", "v1", plural).unwrap()
    }

    async fn check(
        user: &UserInfo,
        plural: &str,
        operation: Operation,
        subresource: &str,
        name: &str,
        old: Option<&Value>,
        new: Option<&Value>,
    ) -> Result<()> {
        let attrs = Attributes {
            operation,
            resource: rt(plural),
            subresource,
            namespace: if plural == "pods" { "default" } else { "" },
            name,
            user,
            old,
            dry_run: false,
            notes: Default::default(),
        };
        NodeRestriction.validate(&attrs, new).await
    }

    fn node(labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"taints": taints}})
    }

    #[tokio::test]
    async fn a_kubelet_writes_only_its_own_node_and_not_the_restricted_labels() {
        let n1 = kubelet("n1");
        let plain = node(json!({"kubernetes.io/hostname": "n1"}), json!([]));
        assert!(
            check(
                &n1,
                "nodes",
                Operation::Create,
                "",
                "n1",
                None,
                Some(&plain)
            )
            .await
            .is_ok()
        );
        let e = check(
            &n1,
            "nodes",
            Operation::Update,
            "",
            "n2",
            Some(&plain),
            Some(&plain),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.message,
            "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
        );
        let labelled = node(
            json!({"node-restriction.kubernetes.io/trusted": "yes"}),
            json!([]),
        );
        let e = check(
            &n1,
            "nodes",
            Operation::Create,
            "",
            "n1",
            None,
            Some(&labelled),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.message,
            "nodes \"n1\" is forbidden: is not allowed to set the following labels: node-restriction.kubernetes.io/trusted"
        );
        let e = check(
            &n1,
            "nodes",
            Operation::Update,
            "",
            "n1",
            Some(&plain),
            Some(&labelled),
        )
        .await
        .unwrap_err();
        assert!(
            e.message.ends_with(
                "is not allowed to modify labels: node-restriction.kubernetes.io/trusted"
            ),
            "{}",
            e.message
        );
        let tainted = node(
            json!({"kubernetes.io/hostname": "n1"}),
            json!([{"key": "k", "effect": "NoSchedule"}]),
        );
        assert!(
            check(
                &n1,
                "nodes",
                Operation::Update,
                "status",
                "n1",
                Some(&plain),
                Some(&tainted)
            )
            .await
            .is_err()
        );
        let admin = UserInfo {
            name: "admin".into(),
            uid: String::new(),
            groups: vec![],
            extra: Default::default(),
        };
        assert!(
            check(
                &admin,
                "nodes",
                Operation::Update,
                "",
                "n2",
                Some(&plain),
                Some(&labelled)
            )
            .await
            .is_ok()
        );
    }

    #[tokio::test]
    async fn a_kubelet_touches_only_pods_bound_to_it() {
        let n1 = kubelet("n1");
        let mine = json!({"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}});
        let theirs = json!({"metadata": {"name": "b"}, "spec": {"nodeName": "n2"}});
        assert!(
            check(
                &n1,
                "pods",
                Operation::Update,
                "status",
                "a",
                Some(&mine),
                Some(&mine)
            )
            .await
            .is_ok()
        );
        assert!(
            check(
                &n1,
                "pods",
                Operation::Update,
                "status",
                "b",
                Some(&theirs),
                Some(&theirs)
            )
            .await
            .is_err()
        );
        assert!(
            check(&n1, "pods", Operation::Delete, "", "a", Some(&mine), None)
                .await
                .is_ok()
        );
        assert!(
            check(&n1, "pods", Operation::Delete, "", "b", Some(&theirs), None)
                .await
                .is_err()
        );
        assert!(
            check(
                &n1,
                "pods",
                Operation::Update,
                "",
                "a",
                Some(&mine),
                Some(&mine)
            )
            .await
            .is_err()
        );
        let e = check(&n1, "pods", Operation::Create, "", "a", None, Some(&mine))
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "pods \"a\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
        );
        let mirror = json!({"metadata": {"name": "m", "annotations": {MIRROR_ANNOTATION: "x"}}, "spec": {"nodeName": "n1"}});
        assert!(
            check(&n1, "pods", Operation::Create, "", "m", None, Some(&mirror))
                .await
                .is_ok()
        );
    }
}
