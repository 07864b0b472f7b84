//! Feeds the scheduler from a shared [`Informers`] factory: all pods (no field selector; the
//! scheduler decides on its side which are its own, seed 000) and nodes, and
//! PodDisruptionBudgets (for preemption), PersistentVolumeClaims (for volume checks), namespaces
//! (for pod affinity's namespace selectors) and Services, ReplicaSets and StatefulSets (for
//! default spreading). Each informer's handler hands adds, updates and deletions (a deletion a
//! relist found included) to the scheduler's `on_*` methods. PersistentVolumes, StorageClasses
//! and CSINodes, which the volume plugins read from the informers' caches, only wake the pods
//! their additions and changes may help.

use std::future::Future;
use std::sync::{Arc, Weak};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Resource;
use tokio::sync::watch;

use skiff_apimachinery::labels::Selector;
use skiff_runtime::informer::{Change, Informers, Kind};

use crate::framework::ClusterEvent;
use crate::plugins::helper::label_selector;
use crate::scheduler::Scheduler;

/// Adds the scheduler's handlers to `informers` at once (a cache that already holds objects
/// replays them). The returned future turns `synced` true once the pods and nodes are listed
/// (the side tables follow when they come), then holds a clone of the factory until it is
/// dropped, so that a scheduler whose factory is its own stops watching with it. The handlers
/// hold the scheduler weakly: once it is dropped they do nothing.
pub fn run(
    informers: &Informers,
    scheduler: Arc<Scheduler>,
    synced: watch::Sender<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let pods = informers.get::<Pod>();
    follow(
        informers,
        &scheduler,
        |s, p: &Arc<Pod>| s.on_pod(p.clone()),
        |s, p| s.on_pod_deleted(p),
    );
    let nodes = informers.get::<Node>();
    follow(
        informers,
        &scheduler,
        |s, n: &Arc<Node>| s.on_node(n.clone()),
        |s, n| s.on_node_deleted(name_of(n.as_ref())),
    );
    follow(
        informers,
        &scheduler,
        |s, n: &Arc<Namespace>| {
            s.on_namespace(
                name_of(n.as_ref()),
                Some(n.metadata.labels.clone().unwrap_or_default()),
            )
        },
        |s, n| s.on_namespace(name_of(n.as_ref()), None),
    );
    follow(
        informers,
        &scheduler,
        |s, svc: &Arc<Service>| {
            let selector = svc.spec.as_ref().and_then(|spec| spec.selector.clone());
            s.on_service(namespace_of(svc.as_ref()), name_of(svc.as_ref()), selector)
        },
        |s, svc| s.on_service(namespace_of(svc.as_ref()), name_of(svc.as_ref()), None),
    );
    controllers::<ReplicaSet>(informers, &scheduler, "ReplicaSet", |rs| {
        rs.spec.as_ref().map(|spec| &spec.selector)
    });
    controllers::<StatefulSet>(informers, &scheduler, "StatefulSet", |ss| {
        ss.spec.as_ref().map(|spec| &spec.selector)
    });
    follow(
        informers,
        &scheduler,
        |s, p: &Arc<PodDisruptionBudget>| s.on_pdb(object_key(p.as_ref()), Some(p.clone())),
        |s, p| s.on_pdb(object_key(p.as_ref()), None),
    );
    follow(
        informers,
        &scheduler,
        |s, c: &Arc<PersistentVolumeClaim>| s.on_claim(object_key(c.as_ref()), Some(c.clone())),
        |s, c| s.on_claim(object_key(c.as_ref()), None),
    );
    wake::<PersistentVolume>(informers, &scheduler, ClusterEvent::PV_CHANGE);
    wake::<StorageClass>(informers, &scheduler, ClusterEvent::STORAGE_CLASS_CHANGE);
    wake::<CSINode>(informers, &scheduler, ClusterEvent::CSI_NODE_CHANGE);
    let claims = informers.get::<PersistentVolumeClaim>();
    let volumes = informers.get::<PersistentVolume>();
    let classes = informers.get::<StorageClass>();
    let factory = informers.clone();
    async move {
        let _factory = factory;
        pods.cache().wait_until_ready().await;
        nodes.cache().wait_until_ready().await;
        claims.cache().wait_until_ready().await;
        volumes.cache().wait_until_ready().await;
        classes.cache().wait_until_ready().await;
        let _ = synced.send(true);
        std::future::pending::<()>().await;
    }
}

/// Hands every change of the `K`s to the scheduler: an add or update to `apply`, a deletion
/// (one the watch missed included) to `delete`. Both run on the informer's task and must be
/// quick.
fn follow<K>(
    informers: &Informers,
    scheduler: &Arc<Scheduler>,
    apply: impl Fn(&Scheduler, &Arc<K>) + Send + 'static,
    delete: impl Fn(&Scheduler, &Arc<K>) + Send + 'static,
) where
    K: Kind,
{
    let scheduler: Weak<Scheduler> = Arc::downgrade(scheduler);
    informers.get::<K>().add_handler(move |change: &Change<K>| {
        let Some(s) = scheduler.upgrade() else {
            return;
        };
        match change {
            Change::Added(o) | Change::Updated { new: o, .. } => apply(&s, o),
            Change::Deleted { last, .. } => delete(&s, last),
        }
    });
}

/// Hands `event` to the scheduler for every `K` added or changed.
fn wake<K: Kind>(informers: &Informers, scheduler: &Arc<Scheduler>, event: ClusterEvent) {
    follow::<K>(
        informers,
        scheduler,
        move |s, _| s.on_storage_event(event),
        |_, _| {},
    );
}

/// The selectors of one kind of controller, for default spreading.
fn controllers<K>(
    informers: &Informers,
    scheduler: &Arc<Scheduler>,
    kind: &'static str,
    selector: fn(&K) -> Option<&LabelSelector>,
) where
    K: Kind,
{
    follow::<K>(
        informers,
        scheduler,
        move |s, o| {
            let o = o.as_ref();
            s.on_controller(kind, namespace_of(o), name_of(o), selector_of(selector(o)))
        },
        move |s, o| s.on_controller(kind, namespace_of(o.as_ref()), name_of(o.as_ref()), None),
    )
}

fn namespace_of<K: Resource>(o: &K) -> &str {
    o.meta().namespace.as_deref().unwrap_or("")
}

fn name_of<K: Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or("")
}

/// A controller's label selector as the scheduler matches it (one that does not parse selects
/// nothing here, as upstream skips it).
fn selector_of(selector: Option<&LabelSelector>) -> Option<Selector> {
    label_selector(Some(selector?)).ok()
}

/// `namespace/name`.
fn object_key<K: Resource>(o: &K) -> String {
    format!("{}/{}", namespace_of(o), name_of(o))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use serde_json::{Value, json};

    use super::*;
    use crate::api::RecordingApi;
    use crate::config::Configuration;

    /// A client whose lists answer `lists` by path (an empty list for any other) and whose
    /// watches never answer.
    fn client(lists: Vec<(&'static str, Vec<Value>)>) -> kube::Client {
        let lists = Arc::new(lists);
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let lists = lists.clone();
            async move {
                let uri = req.uri().to_string();
                if uri.contains("watch=true") {
                    std::future::pending::<()>().await;
                }
                let items = lists
                    .iter()
                    .find(|(path, _)| uri.starts_with(&format!("{path}?")))
                    .map(|(_, items)| items.clone())
                    .unwrap_or_default();
                let list = json!({"apiVersion": "v1", "kind": "List",
                                  "metadata": {"resourceVersion": "1"}, "items": items});
                let body = kube::client::Body::from(list.to_string().into_bytes());
                Ok::<_, Infallible>(http::Response::new(body))
            }
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn the_listed_pods_and_nodes_reach_the_scheduler_before_it_reports_synced() {
        let pod = |name: &str, node: Option<&str>| {
            json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": "1"},
                   "spec": {"containers": [{"name": "c"}], "nodeName": node}})
        };
        let node = json!({"metadata": {"name": "n1", "resourceVersion": "1"}});
        let informers = Informers::new(client(vec![
            (
                "/api/v1/pods",
                vec![pod("bound", Some("n1")), pod("pending", None)],
            ),
            ("/api/v1/nodes", vec![node]),
        ]));
        let api = RecordingApi::new();
        let scheduler = Scheduler::new(
            Configuration::default().frameworks(api.clone()).unwrap(),
            api,
        );
        let (synced_tx, mut synced) = watch::channel(false);
        let feed = tokio::spawn(run(&informers, scheduler.clone(), synced_tx));
        drop(informers);
        // the feed holds the factory: dropping the caller's clone does not stop the watches
        let ready = synced.wait_for(|s| *s);
        tokio::time::timeout(std::time::Duration::from_secs(10), ready)
            .await
            .expect("synced")
            .unwrap();
        scheduler.with_cache(|c| {
            assert_eq!(c.node_count(), 1);
            assert!(c.has_pod("ns/bound"));
            assert!(!c.has_pod("ns/pending"));
        });
        assert_eq!(scheduler.queue().sizes().active, 1);
        feed.abort();
    }
}
