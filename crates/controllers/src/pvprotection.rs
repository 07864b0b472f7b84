//! `pv-protection`: a PersistentVolume being deleted keeps its `kubernetes.io/pv-protection`
//! finalizer (added on create by the `StorageObjectInUseProtection` admission plugin) while it
//! is `Bound`; then the finalizer is removed and the volume goes (upstream's
//! PVProtectionController). A volume without the finalizer that is not being deleted gets it.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::informer::Change;

use crate::Context;
use crate::pvcprotection::{is_deletion_candidate, need_to_add_finalizer, with_finalizer};

/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes.io/pv-protection";

/// The writes this controller makes.
#[async_trait]
pub trait Volumes: Send + Sync {
    /// Updates the volume (its resourceVersion the precondition).
    async fn update(&self, volume: &PersistentVolume) -> kube::Result<()>;
}

/// Whether the volume is in use: the binder has it `Bound` to a claim.
pub fn is_being_used(volume: &PersistentVolume) -> bool {
    volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

/// Removes the finalizer of a deleted volume that is not bound; adds it to one that lacks it.
pub async fn reconcile(volume: &PersistentVolume, api: &dyn Volumes) -> kube::Result<()> {
    if is_deletion_candidate(&volume.metadata, FINALIZER) && !is_being_used(volume) {
        return api.update(&with_finalizer(volume, FINALIZER, false)).await;
    }
    if need_to_add_finalizer(&volume.metadata, FINALIZER) {
        return api.update(&with_finalizer(volume, FINALIZER, true)).await;
    }
    Ok(())
}

struct KubeVolumes(kube::Client);

#[async_trait]
impl Volumes for KubeVolumes {
    async fn update(&self, volume: &PersistentVolume) -> kube::Result<()> {
        let api: Api<PersistentVolume> = Api::all(self.0.clone());
        match api
            .replace(&volume.name_any(), &PostParams::default(), volume)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Runs the controller (upstream's one worker).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let volumes = ctx.informers.get::<PersistentVolume>();
    let controller = Controller::<ObjectRef<PersistentVolume>>::new("pvprotection").workers(1);
    let queue = controller.queue().clone();
    volumes.add_handler(move |change| {
        if let Change::Added(pv) | Change::Updated { new: pv, .. } = change {
            let meta = &pv.metadata;
            if need_to_add_finalizer(meta, FINALIZER) || is_deletion_candidate(meta, FINALIZER) {
                queue.add(ObjectRef::from_obj(pv.as_ref()));
            }
        }
    });
    volumes.cache().wait_until_ready().await;
    let api = Arc::new(KubeVolumes(ctx.client.clone()));
    let cache = volumes.cache().clone();
    controller
        .run(move |key| {
            let (api, volume) = (api.clone(), cache.get(&key));
            async move {
                if let Some(volume) = volume {
                    reconcile(&volume, api.as_ref()).await?;
                }
                Ok::<_, kube::Error>(Action::AwaitChange)
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use serde_json::json;

    #[derive(Default)]
    struct Recording(Mutex<Vec<Option<Vec<String>>>>);

    #[async_trait]
    impl Volumes for Recording {
        async fn update(&self, volume: &PersistentVolume) -> kube::Result<()> {
            self.0.lock().push(volume.metadata.finalizers.clone());
            Ok(())
        }
    }

    fn volume(deleting: bool, finalizers: serde_json::Value, phase: &str) -> PersistentVolume {
        let mut v = json!({"metadata": {"name": "v", "finalizers": finalizers},
            "status": {"phase": phase}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(v).unwrap()
    }

    #[tokio::test]
    async fn a_deleted_volume_goes_once_it_is_no_longer_bound() {
        let api = Recording::default();
        reconcile(&volume(true, json!([FINALIZER]), "Bound"), &api)
            .await
            .unwrap();
        assert!(
            api.0.lock().is_empty(),
            "a bound volume keeps its finalizer"
        );
        for phase in ["Released", "Available", "Failed"] {
            let api = Recording::default();
            reconcile(&volume(true, json!([FINALIZER]), phase), &api)
                .await
                .unwrap();
            assert_eq!(*api.0.lock(), [None], "{phase}");
        }
    }

    #[tokio::test]
    async fn a_volume_without_the_finalizer_gets_it() {
        let api = Recording::default();
        reconcile(&volume(false, json!(["example.com/x"]), "Available"), &api)
            .await
            .unwrap();
        assert_eq!(
            *api.0.lock(),
            [Some(vec![
                "example.com/x".to_string(),
                FINALIZER.to_string()
            ])]
        );
        let api = Recording::default();
        reconcile(&volume(false, json!([FINALIZER]), "Bound"), &api)
            .await
            .unwrap();
        assert!(api.0.lock().is_empty());
    }
}
