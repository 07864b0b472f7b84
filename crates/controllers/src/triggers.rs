//! `triggers`: what connects the shared informers to the controllers whose handlers only queue
//! keys (what kube-runtime's `Controller::new`, `owns` and `watches` did for them): an object's
//! own key, or the keys another object maps to; [`run_each`], the whole wiring of a controller
//! keyed by one resource's objects; the index of pods by node (upstream's
//! `PodNodeNameKeyIndex`), so that a node's change finds its pods without a scan; and the index
//! of pods by the claims they use (upstream's `PodPVCIndex`).

use std::fmt::Display;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::informer::{Change, Informer};
use skiff_runtime::workqueue::WorkQueue;

/// Queues the key of every object `informer` adds or updates. A deleted object is not queued:
/// its key would find nothing in the cache (kube-runtime's applier skipped such keys too).
pub fn queue_own_keys<K>(informer: &Informer<K>, queue: &WorkQueue<ObjectRef<K>>)
where
    K: Resource<DynamicType = ()> + 'static,
{
    let queue = queue.clone();
    informer.add_handler(move |change| match change {
        Change::Added(obj) | Change::Updated { new: obj, .. } => {
            queue.add(ObjectRef::from_obj(obj.as_ref()));
        }
        Change::Deleted { .. } => {}
    });
}

/// Queues the keys `keys` maps every changed object of `informer` to, deletions included (a
/// deleted ServiceAccount or ConfigMap is what its namespace's controller must put back).
pub fn queue_mapped_keys<K, O, I>(
    informer: &Informer<K>,
    queue: &WorkQueue<ObjectRef<O>>,
    keys: impl Fn(&K) -> I + Send + 'static,
) where
    K: Resource<DynamicType = ()> + 'static,
    O: Resource<DynamicType = ()> + 'static,
    I: IntoIterator<Item = ObjectRef<O>>,
{
    let queue = queue.clone();
    informer.add_handler(move |change| {
        for key in keys(change.object()) {
            queue.add(key);
        }
    });
}

/// Runs `controller` over the objects of `informer` once its cache is ready: each is reconciled
/// when added or updated (and as `reconcile`'s [`Action`] asks); a key whose object is gone by
/// then is skipped. Handlers for other informers that queue into `controller` come first.
pub async fn run_each<K, F, Fut, E>(
    controller: Controller<ObjectRef<K>>,
    informer: &Informer<K>,
    reconcile: F,
) where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
    F: Fn(Arc<K>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    queue_own_keys(informer, controller.queue());
    informer.cache().wait_until_ready().await;
    let cache = informer.cache().clone();
    controller
        .run(move |key| {
            let (obj, reconcile) = (cache.get(&key), reconcile.clone());
            async move {
                match obj {
                    Some(obj) => reconcile(obj).await,
                    None => Ok(Action::AwaitChange),
                }
            }
        })
        .await;
}

/// The key of the namespace an object is in (none for a cluster-scoped one).
pub fn namespace_key<K, N>(obj: &K) -> Option<ObjectRef<N>>
where
    K: Resource,
    N: Resource<DynamicType = ()>,
{
    obj.meta().namespace.as_deref().map(ObjectRef::new)
}

/// The name of the pods-by-node index (pods not bound to a node are not filed).
pub const POD_NODE_INDEX: &str = "spec.nodeName";

/// Adds [`POD_NODE_INDEX`] to a pod cache (again if it is there: the same index).
pub fn index_pods_by_node(pods: &Cache<Pod>) {
    pods.add_index(POD_NODE_INDEX, |pod: &Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .into_iter()
            .collect()
    });
}

/// The pods bound to `node`, from a cache [`index_pods_by_node`] indexed.
pub fn pods_on(pods: &Cache<Pod>, node: &str) -> Vec<Arc<Pod>> {
    pods.by_index(POD_NODE_INDEX, node)
}

/// The name of the pods-by-claim index: `namespace/claim` of every claim a pod's volumes use.
pub const POD_CLAIM_INDEX: &str = "pod-pvc-index";

/// The claims a pod's volumes name: a `persistentVolumeClaim`'s `claimName`, and a generic
/// ephemeral volume's claim `<pod>-<volume>` (upstream's `ephemeral.VolumeClaimName`).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    skiff_component_helpers::ephemeral::pod_claims(pod)
        .map(|(claim, _)| claim)
        .collect()
}

/// Adds [`POD_CLAIM_INDEX`] to a pod cache (again if it is there: the same index).
pub fn index_pods_by_claim(pods: &Cache<Pod>) {
    pods.add_index(POD_CLAIM_INDEX, |pod: &Pod| {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
        claim_names(pod)
            .into_iter()
            .map(|claim| format!("{namespace}/{claim}"))
            .collect()
    });
}

/// The pods whose volumes name the claim `namespace/claim`, from a cache
/// [`index_pods_by_claim`] indexed.
pub fn pods_using_claim(pods: &Cache<Pod>, namespace: &str, claim: &str) -> Vec<Arc<Pod>> {
    pods.by_index(POD_CLAIM_INDEX, &format!("{namespace}/{claim}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: node.map(str::to_string),
            ..Default::default()
        });
        p
    }

    #[test]
    fn pods_are_found_by_their_node_and_unbound_ones_by_none() {
        let cache = Cache::from_objects([
            pod("a", Some("n1")),
            pod("b", Some("n2")),
            pod("c", None),
            pod("d", Some("n1")),
        ]);
        index_pods_by_node(&cache);
        let mut on_n1: Vec<String> = pods_on(&cache, "n1")
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        on_n1.sort();
        assert_eq!(on_n1, ["a", "d"]);
        assert!(pods_on(&cache, "").is_empty());
        let key: Option<ObjectRef<k8s_openapi::api::core::v1::Namespace>> =
            namespace_key(&pod("a", None));
        assert_eq!(key, Some(ObjectRef::new("ns")));
    }
}
