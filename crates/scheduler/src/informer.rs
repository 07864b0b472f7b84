//! Feeds the scheduler from the API server: one watch of all pods (no field selector; the
//! scheduler decides on its side which are its own, seed 000), one of nodes, and of
//! PodDisruptionBudgets (for preemption), PersistentVolumeClaims (for volume checks), namespaces (for pod affinity's namespace selectors)
//! and Services, ReplicaSets and StatefulSets (for default spreading), through
//! kube-rs's `watcher`, which lists, watches from the list's resourceVersion and relists
//! after a 410. Objects missing from a relist are treated as deleted.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use skiff_apimachinery::labels::Selector;

use crate::plugins::helper::label_selector;
use crate::scheduler::Scheduler;

/// Runs the watches until the process ends; `synced` turns true once the pods and nodes are
/// listed (the side tables follow when they come).
pub async fn run(client: kube::Client, scheduler: Arc<Scheduler>, synced: watch::Sender<bool>) {
    let (pods_synced, mut pods_rx) = watch::channel(false);
    let (nodes_synced, mut nodes_rx) = watch::channel(false);
    let pods = {
        let s = scheduler.clone();
        follow(
            Api::<Pod>::all(client.clone()),
            pods_synced,
            move |p| s.on_pod(p),
            {
                let s = scheduler.clone();
                move |p: Arc<Pod>| s.on_pod_deleted(&p)
            },
        )
    };
    let namespaces = side::<Namespace>(
        client.clone(),
        scheduler.clone(),
        |s, n| {
            s.on_namespace(
                name_of(n),
                Some(n.metadata.labels.clone().unwrap_or_default()),
            )
        },
        |s, n| s.on_namespace(name_of(n), None),
    );
    let services = side::<Service>(
        client.clone(),
        scheduler.clone(),
        |s, svc| {
            let selector = svc.spec.as_ref().and_then(|spec| spec.selector.clone());
            s.on_service(namespace_of(svc), name_of(svc), selector)
        },
        |s, svc| s.on_service(namespace_of(svc), name_of(svc), None),
    );
    let replicasets = controllers::<ReplicaSet>(&client, &scheduler, "ReplicaSet", |rs| {
        rs.spec.as_ref().map(|spec| &spec.selector)
    });
    let statefulsets = controllers::<StatefulSet>(&client, &scheduler, "StatefulSet", |ss| {
        ss.spec.as_ref().map(|spec| &spec.selector)
    });
    let pdbs = side::<PodDisruptionBudget>(
        client.clone(),
        scheduler.clone(),
        |s, p| s.on_pdb(object_key(p), Some(Arc::new(p.clone()))),
        |s, p| s.on_pdb(object_key(p), None),
    );
    let claims = side::<PersistentVolumeClaim>(
        client.clone(),
        scheduler.clone(),
        |s, c| s.on_claim(object_key(c), Some(Arc::new(c.clone()))),
        |s, c| s.on_claim(object_key(c), None),
    );
    let nodes = {
        let s = scheduler.clone();
        follow(
            Api::<Node>::all(client),
            nodes_synced,
            move |n| s.on_node(n),
            {
                let s = scheduler.clone();
                move |n: Arc<Node>| s.on_node_deleted(n.metadata.name.as_deref().unwrap_or(""))
            },
        )
    };
    let ready = async move {
        let _ = pods_rx.wait_for(|v| *v).await;
        let _ = nodes_rx.wait_for(|v| *v).await;
        let _ = synced.send(true);
        std::future::pending::<()>().await;
    };
    tokio::join!(
        pods,
        nodes,
        pdbs,
        claims,
        namespaces,
        services,
        replicasets,
        statefulsets,
        ready
    );
}

/// What a watch here can follow: any namespaced or cluster-scoped built-in kind.
trait Watched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Watched for K where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A watch that only keeps one of the scheduler's side tables (budgets, namespaces,
/// selectors) up to date; nothing waits for its first list.
async fn side<K>(
    client: kube::Client,
    scheduler: Arc<Scheduler>,
    apply: impl Fn(&Scheduler, &K),
    delete: impl Fn(&Scheduler, &K),
) where
    K: Watched,
{
    let gone = scheduler.clone();
    follow(
        Api::<K>::all(client),
        watch::channel(false).0,
        move |o: Arc<K>| apply(&scheduler, &o),
        move |o: Arc<K>| delete(&gone, &o),
    )
    .await
}

/// The selectors of one kind of controller, for default spreading.
fn controllers<K>(
    client: &kube::Client,
    scheduler: &Arc<Scheduler>,
    kind: &'static str,
    selector: fn(&K) -> Option<&LabelSelector>,
) -> impl Future<Output = ()> + use<K>
where
    K: Watched,
{
    side::<K>(
        client.clone(),
        scheduler.clone(),
        move |s, o| s.on_controller(kind, namespace_of(o), name_of(o), selector_of(selector(o))),
        move |s, o| s.on_controller(kind, namespace_of(o), name_of(o), None),
    )
}

fn namespace_of<K: kube::Resource>(o: &K) -> &str {
    o.meta().namespace.as_deref().unwrap_or("")
}

fn name_of<K: kube::Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or("")
}

/// A controller's label selector as the scheduler matches it (one that does not parse selects
/// nothing here, as upstream skips it).
fn selector_of(selector: Option<&LabelSelector>) -> Option<Selector> {
    label_selector(Some(selector?)).ok()
}

/// `namespace/name`.
fn object_key<K: kube::Resource>(o: &K) -> String {
    format!("{}/{}", namespace_of(o), name_of(o))
}

/// One watch: applies and deletes go to the handlers; a relist's missing objects are deleted.
async fn follow<K>(
    api: Api<K>,
    synced: watch::Sender<bool>,
    on_apply: impl Fn(Arc<K>),
    on_delete: impl Fn(Arc<K>),
) where
    K: Watched,
{
    let key = object_key::<K>;
    let mut known: HashMap<String, Arc<K>> = HashMap::new();
    let mut relisted: HashMap<String, Arc<K>> = HashMap::new();
    // backoff between retries also yields: a watch failing at once (the API server stopped)
    // must not spin its thread
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(o)) => {
                let o = Arc::new(o);
                known.insert(key(&o), o.clone());
                on_apply(o);
            }
            Ok(Event::Delete(o)) => {
                known.remove(&key(&o));
                on_delete(Arc::new(o));
            }
            Ok(Event::Init) => relisted.clear(),
            Ok(Event::InitApply(o)) => {
                let o = Arc::new(o);
                relisted.insert(key(&o), o.clone());
                on_apply(o);
            }
            Ok(Event::InitDone) => {
                for (k, o) in known.drain() {
                    if !relisted.contains_key(&k) {
                        on_delete(o);
                    }
                }
                known = std::mem::take(&mut relisted);
                let _ = synced.send(true);
            }
            Err(e) => tracing::warn!(error = %e, "watch failed; retrying"),
        }
    }
}
