//! Upstream's `StorageObjectInUseProtection` admission plugin: every new PersistentVolumeClaim
//! gets the `kubernetes.io/pvc-protection` finalizer and every new PersistentVolume the
//! `kubernetes.io/pv-protection` one, so neither disappears while a pod (or a claim) still uses
//! it; the protection controllers remove them.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::Result;

pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

#[derive(Debug)]
pub struct StorageObjectInUseProtection;

#[async_trait]
impl Plugin for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        if attrs.operation != Operation::Create
            || !attrs.subresource.is_empty()
            || !attrs.resource.group.is_empty()
        {
            return Ok(());
        }
        let finalizer = match attrs.resource.plural.as_str() {
            "persistentvolumeclaims" => PVC_PROTECTION,
            "persistentvolumes" => PV_PROTECTION,
            _ => return Ok(()),
        };
        let Some(meta) = object
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut)
        else {
            return Ok(());
        };
        let list = meta.entry("finalizers").or_insert_with(|| json!([]));
        if !list.is_array() {
            *list = json!([]);
        }
        let items = list.as_array_mut().expect("checked to be a list");
        if !items.iter().any(|f| f == finalizer) {
            items.push(json!(finalizer));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use skiff_apimachinery::catalog::lookup;

    fn attrs<'a>(user: &'a UserInfo, plural: &str, op: Operation) -> Attributes<'a> {
        Attributes {
            operation: op,
            resource: lookup("", "v1", plural).unwrap(),
            subresource: "",
            namespace: "default",
            name: "x",
            user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        }
    }

    #[tokio::test]
    async fn new_claims_and_volumes_get_their_protection_finalizer_once() {
        let user = UserInfo::anonymous();
        let plugin = StorageObjectInUseProtection;
        let mut pvc = json!({"metadata": {"name": "x", "finalizers": ["example.com/keep"]}});
        plugin
            .mutate(
                &attrs(&user, "persistentvolumeclaims", Operation::Create),
                Some(&mut pvc),
            )
            .await
            .unwrap();
        plugin
            .mutate(
                &attrs(&user, "persistentvolumeclaims", Operation::Create),
                Some(&mut pvc),
            )
            .await
            .unwrap();
        assert_eq!(
            pvc["metadata"]["finalizers"],
            json!(["example.com/keep", "kubernetes.io/pvc-protection"])
        );
        let mut pv = json!({"metadata": {"name": "x"}});
        plugin
            .mutate(
                &attrs(&user, "persistentvolumes", Operation::Create),
                Some(&mut pv),
            )
            .await
            .unwrap();
        assert_eq!(
            pv["metadata"]["finalizers"],
            json!(["kubernetes.io/pv-protection"])
        );
        let mut updated = json!({"metadata": {"name": "x"}});
        plugin
            .mutate(
                &attrs(&user, "persistentvolumes", Operation::Update),
                Some(&mut updated),
            )
            .await
            .unwrap();
        assert!(updated["metadata"].get("finalizers").is_none());
        let mut pod = json!({"metadata": {"name": "x"}});
        plugin
            .mutate(&attrs(&user, "pods", Operation::Create), Some(&mut pod))
            .await
            .unwrap();
        assert!(pod["metadata"].get("finalizers").is_none());
    }
}
