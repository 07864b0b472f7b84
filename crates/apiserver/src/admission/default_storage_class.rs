//! Upstream's `DefaultStorageClass` admission plugin: a new PersistentVolumeClaim that names no
//! class (no `spec.storageClassName`, not even `""`, and no beta class annotation) gets the
//! default StorageClass, the one annotated `storageclass.kubernetes.io/is-default-class:
//! "true"` (or the beta annotation); of several, the newest, then the first by name.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;

const DEFAULT_ANNOTATIONS: &[&str] = &[
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// Where StorageClasses are read from.
#[async_trait]
pub trait StorageClassLookup: Send + Sync {
    /// Every StorageClass.
    async fn all(&self) -> Result<Vec<Value>>;
}

pub struct DefaultStorageClass<L> {
    pub lookup: L,
}

fn is_default(class: &Value) -> bool {
    DEFAULT_ANNOTATIONS.iter().any(|a| {
        class
            .pointer("/metadata/annotations")
            .and_then(|m| m.get(*a))
            .and_then(Value::as_str)
            == Some("true")
    })
}

/// Upstream's `GetDefaultClass`: the newest default class, ties broken by name.
pub fn default_class(classes: &[Value]) -> Option<&str> {
    let created = |c: &Value| -> Option<jiff::Timestamp> {
        c.pointer("/metadata/creationTimestamp")?
            .as_str()?
            .parse()
            .ok()
    };
    fn name(c: &Value) -> &str {
        c.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    classes
        .iter()
        .filter(|c| is_default(c))
        .min_by(|a, b| created(b).cmp(&created(a)).then(name(a).cmp(name(b))))
        .map(name)
}

/// Whether the claim names a class: the field set (even to `""`) or the beta annotation.
fn has_class(pvc: &Value) -> bool {
    pvc.pointer("/spec/storageClassName")
        .is_some_and(|c| !c.is_null())
        || pvc
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
            .is_some()
}

#[async_trait]
impl<L: StorageClassLookup> Plugin for DefaultStorageClass<L> {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        let claims =
            attrs.resource.group.is_empty() && attrs.resource.plural == "persistentvolumeclaims";
        if attrs.operation != Operation::Create || !claims || !attrs.subresource.is_empty() {
            return Ok(());
        }
        let Some(pvc) = object.filter(|o| !has_class(o)) else {
            return Ok(());
        };
        let classes = self.lookup.all().await?;
        if let Some(name) = default_class(&classes) {
            if !pvc.get("spec").is_some_and(Value::is_object) {
                pvc["spec"] = json!({});
            }
            pvc["spec"]["storageClassName"] = json!(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use skiff_apimachinery::catalog::lookup;

    struct Fixed(Vec<Value>);

    #[async_trait]
    impl StorageClassLookup for Fixed {
        async fn all(&self) -> Result<Vec<Value>> {
            Ok(self.0.clone())
        }
    }

    fn class(name: &str, created: &str, default: bool) -> Value {
        let annotations = if default {
            json!({"storageclass.kubernetes.io/is-default-class": "true"})
        } else {
            json!({})
        };
        json!({"metadata": {"name": name, "creationTimestamp": created,
                            "annotations": annotations}})
    }

    #[test]
    fn the_newest_default_class_wins_then_the_first_by_name() {
        let classes = [
            class("old", "2026-01-01T00:00:00Z", true),
            class("plain", "2026-06-01T00:00:00Z", false),
            class("new-b", "2026-03-01T00:00:00Z", true),
            class("new-a", "2026-03-01T00:00:00Z", true),
        ];
        assert_eq!(default_class(&classes), Some("new-a"));
        assert_eq!(default_class(&classes[1..2]), None);
    }

    #[tokio::test]
    async fn claims_without_a_class_get_the_default_one() {
        let user = UserInfo::anonymous();
        let attrs = Attributes {
            operation: Operation::Create,
            resource: lookup("", "v1", "persistentvolumeclaims").unwrap(),
            subresource: "",
            namespace: "default",
            name: "data",
            user: &user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        };
        let plugin = DefaultStorageClass {
            lookup: Fixed(vec![class("standard", "2026-01-01T00:00:00Z", true)]),
        };
        let mut bare = json!({"metadata": {"name": "data"}, "spec": {}});
        plugin.mutate(&attrs, Some(&mut bare)).await.unwrap();
        assert_eq!(bare["spec"]["storageClassName"], "standard");
        let mut unclassed = json!({"metadata": {"name": "data"}, "spec": {"storageClassName": ""}});
        plugin.mutate(&attrs, Some(&mut unclassed)).await.unwrap();
        assert_eq!(unclassed["spec"]["storageClassName"], "");
        let mut named = json!({"metadata": {"name": "data"}, "spec": {"storageClassName": "fast"}});
        plugin.mutate(&attrs, Some(&mut named)).await.unwrap();
        assert_eq!(named["spec"]["storageClassName"], "fast");
    }
}
