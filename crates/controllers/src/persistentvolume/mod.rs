//! `persistentvolume-binder`: binds PersistentVolumeClaims to PersistentVolumes and reclaims
//! volumes whose claims are gone (upstream's PersistentVolumeController, reporting events as
//! `persistentvolume-controller`). Claims and volumes are two keyed work queues; a volume's
//! change, a claim's deletion and the periodic resync (upstream's `--pvclaimbinder-sync-period`,
//! 15 s, through the informers' resync) queue them. Upstream drains each with one worker;
//! here [`WORKERS`] sync different keys at once, since a binding is three writes in a row and
//! one worker caps a burst of claims at what those round trips allow. Two claims racing for
//! the same volume cannot both win: every write carries the resourceVersion it read, and the
//! loser, refused with a conflict, is synced again after [`CONFLICT_RETRY`].
//!
//! Provisioning is left to provisioners outside this controller (it annotates a claim with the
//! provisioner its class names and says so in an event), and so is deleting a volume one of them
//! provisioned; Skiff has no in-tree volume plugin that deletes or recycles a volume.
//!
//! # Layout
//! - [`sync`]: `syncClaim` and `syncVolume` over a [`Cluster`], their errors and accessors;
//!   [`claim`] (binding and provisioning claims), [`volume`] (phases and reclaim of volumes),
//!   [`binding`] (the writes both make).
//! - this module: the [`Cluster`] the controller reads and writes through, and its wiring.

pub mod binding;
pub mod claim;
pub mod sync;
pub mod volume;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::Recorder;
use skiff_runtime::informer::{Change, Informer};
use skiff_runtime::workqueue::WorkQueue;

use crate::events::Note;
use crate::{Context, triggers};

/// Upstream's event source for this controller.
pub const COMPONENT: &str = "persistentvolume-controller";
/// Upstream's `--pvclaimbinder-sync-period` default: every claim and volume is synced again
/// this often.
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);
/// Workers per queue (client-go's usual `--concurrent-*-syncs`).
pub const WORKERS: usize = skiff_runtime::controller::DEFAULT_WORKERS;
/// When a sync refused with a conflict looks again (the object it read was stale, or another
/// worker bound the volume first).
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// What the controller reads (its informers' caches, and the API where upstream double-checks
/// a cache) and writes.
#[async_trait]
pub trait Cluster: Send + Sync {
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    fn volumes(&self) -> Vec<Arc<PersistentVolume>>;
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
    fn classes(&self) -> Vec<Arc<StorageClass>>;
    /// The pods whose volumes name the claim `namespace/name`.
    fn pods_using(&self, namespace: &str, claim: &str) -> Vec<Arc<Pod>>;
    /// The claim as the API has it now.
    async fn fetch_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> kube::Result<Option<PersistentVolumeClaim>>;
    /// The volume as the API has it now.
    async fn fetch_volume(&self, name: &str) -> kube::Result<Option<PersistentVolume>>;
    /// Updates the volume (its resourceVersion the precondition); returns what was stored.
    async fn update_volume(&self, volume: PersistentVolume) -> kube::Result<PersistentVolume>;
    async fn update_volume_status(
        &self,
        volume: PersistentVolume,
    ) -> kube::Result<PersistentVolume>;
    async fn update_claim(
        &self,
        claim: PersistentVolumeClaim,
    ) -> kube::Result<PersistentVolumeClaim>;
    async fn update_claim_status(
        &self,
        claim: PersistentVolumeClaim,
    ) -> kube::Result<PersistentVolumeClaim>;
    /// Records an event about `regarding`.
    fn event(&self, regarding: ObjectReference, note: Note);
    /// Queues the claim `namespace/name` for a sync soon.
    fn queue_claim(&self, namespace: &str, name: &str);
}

struct KubeCluster {
    volumes: Cache<PersistentVolume>,
    claims: Cache<PersistentVolumeClaim>,
    classes: Cache<StorageClass>,
    pods: Cache<Pod>,
    client: kube::Client,
    recorder: Recorder,
    claim_queue: WorkQueue<ObjectRef<PersistentVolumeClaim>>,
}

impl KubeCluster {
    fn claims_api(&self, namespace: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn volumes_api(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }
}

fn not_found_is_none<T>(result: kube::Result<T>) -> kube::Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e),
    }
}

fn for_update<K: Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

#[async_trait]
impl Cluster for KubeCluster {
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }

    fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes.state()
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }

    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }

    fn classes(&self) -> Vec<Arc<StorageClass>> {
        self.classes.state()
    }

    fn pods_using(&self, namespace: &str, claim: &str) -> Vec<Arc<Pod>> {
        triggers::pods_using_claim(&self.pods, namespace, claim)
    }

    async fn fetch_claim(
        &self,
        namespace: &str,
        name: &str,
    ) -> kube::Result<Option<PersistentVolumeClaim>> {
        not_found_is_none(self.claims_api(namespace).get(name).await)
    }

    async fn fetch_volume(&self, name: &str) -> kube::Result<Option<PersistentVolume>> {
        not_found_is_none(self.volumes_api().get(name).await)
    }

    async fn update_volume(&self, volume: PersistentVolume) -> kube::Result<PersistentVolume> {
        let name = volume.name_any();
        self.volumes_api()
            .replace(&name, &PostParams::default(), &for_update(volume))
            .await
    }

    async fn update_volume_status(
        &self,
        volume: PersistentVolume,
    ) -> kube::Result<PersistentVolume> {
        let name = volume.name_any();
        self.volumes_api()
            .replace_status(&name, &PostParams::default(), &for_update(volume))
            .await
    }

    async fn update_claim(
        &self,
        claim: PersistentVolumeClaim,
    ) -> kube::Result<PersistentVolumeClaim> {
        let (namespace, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
        self.claims_api(&namespace)
            .replace(&name, &PostParams::default(), &for_update(claim))
            .await
    }

    async fn update_claim_status(
        &self,
        claim: PersistentVolumeClaim,
    ) -> kube::Result<PersistentVolumeClaim> {
        let (namespace, name) = (claim.namespace().unwrap_or_default(), claim.name_any());
        self.claims_api(&namespace)
            .replace_status(&name, &PostParams::default(), &for_update(claim))
            .await
    }

    fn event(&self, regarding: ObjectReference, note: Note) {
        note.record(&self.recorder, regarding);
    }

    fn queue_claim(&self, namespace: &str, name: &str) {
        self.claim_queue.add(ObjectRef::new(name).within(namespace));
    }
}

/// What a failed sync means for the runner: a conflict (a stale cache, or a volume another
/// worker bound first) is looked at again after [`CONFLICT_RETRY`]; anything else is retried
/// with backoff.
fn outcome(key: &str, result: sync::Result<()>) -> Result<Action, sync::Error> {
    match result {
        Err(sync::Error::Api(kube::Error::Api(s))) if s.code == 409 => {
            tracing::debug!(controller = COMPONENT, key, "conflict; syncing again");
            Ok(Action::RequeueAfter(CONFLICT_RETRY))
        }
        Err(e) => Err(e),
        Ok(()) => Ok(Action::AwaitChange),
    }
}

/// Queues the key of every added or updated object, and again every [`SYNC_PERIOD`]; a deleted
/// object queues what `on_delete` maps it to.
fn queue_with_resync<K, O>(
    informer: &Informer<K>,
    queue: &WorkQueue<ObjectRef<K>>,
    on_delete: impl Fn(&K) -> Option<ObjectRef<O>> + Send + 'static,
    other: WorkQueue<ObjectRef<O>>,
) where
    K: Resource<DynamicType = ()> + 'static,
    O: Resource<DynamicType = ()> + 'static,
{
    let queue = queue.clone();
    informer.add_handler_with_resync(SYNC_PERIOD, move |change| match change {
        Change::Added(obj) | Change::Updated { new: obj, .. } => {
            queue.add(ObjectRef::from_obj(obj.as_ref()));
        }
        Change::Deleted { last, .. } => {
            if let Some(key) = on_delete(last) {
                other.add(key);
            }
        }
    });
}

/// Runs the controller until the process stops.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let volumes = ctx.informers.get::<PersistentVolume>();
    let claims = ctx.informers.get::<PersistentVolumeClaim>();
    let classes = ctx.informers.get::<StorageClass>();
    let pods = ctx.informers.get::<Pod>();
    triggers::index_pods_by_claim(pods.cache());
    let volume_controller =
        Controller::<ObjectRef<PersistentVolume>>::new("volumes").workers(WORKERS);
    let claim_controller =
        Controller::<ObjectRef<PersistentVolumeClaim>>::new("claims").workers(WORKERS);
    // a deleted claim's volume is synced (to be released), a deleted volume's claim (to be lost)
    queue_with_resync(
        &claims,
        claim_controller.queue(),
        |claim: &PersistentVolumeClaim| {
            let name = claim.spec.as_ref()?.volume_name.as_deref()?;
            (!name.is_empty()).then(|| ObjectRef::new(name))
        },
        volume_controller.queue().clone(),
    );
    queue_with_resync(
        &volumes,
        volume_controller.queue(),
        |volume: &PersistentVolume| {
            let r = volume.spec.as_ref()?.claim_ref.as_ref()?;
            let ns = r.namespace.as_deref().unwrap_or("");
            Some(ObjectRef::new(r.name.as_deref()?).within(ns))
        },
        claim_controller.queue().clone(),
    );
    volumes.cache().wait_until_ready().await;
    claims.cache().wait_until_ready().await;
    classes.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    let cluster = Arc::new(KubeCluster {
        volumes: volumes.cache().clone(),
        claims: claims.cache().clone(),
        classes: classes.cache().clone(),
        pods: pods.cache().clone(),
        client: ctx.client.clone(),
        recorder: ctx.recorder(COMPONENT),
        claim_queue: claim_controller.queue().clone(),
    });
    let by_volume = cluster.clone();
    let volume_cache = volumes.cache().clone();
    let volume_run = volume_controller.run(move |key: ObjectRef<PersistentVolume>| {
        let (cluster, volume) = (by_volume.clone(), volume_cache.get(&key));
        async move {
            let Some(volume) = volume else {
                return Ok(Action::AwaitChange);
            };
            let result = sync::sync_volume(cluster.as_ref(), &volume).await;
            outcome(&key.to_string(), result)
        }
    });
    let claim_cache = claims.cache().clone();
    let claim_run = claim_controller.run(move |key: ObjectRef<PersistentVolumeClaim>| {
        let (cluster, claim) = (cluster.clone(), claim_cache.get(&key));
        async move {
            let Some(claim) = claim else {
                return Ok(Action::AwaitChange);
            };
            let result = sync::sync_claim(cluster.as_ref(), &claim).await;
            outcome(&key.to_string(), result)
        }
    });
    tokio::join!(volume_run, claim_run);
    Ok(())
}
