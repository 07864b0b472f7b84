//! Feeds the scheduler from the API server: one watch of all pods (no field selector; the
//! scheduler decides on its side which are its own, seed 000), one of nodes, and of
//! PodDisruptionBudgets (for preemption), namespaces (for pod affinity's namespace selectors)
//! and Services, ReplicaSets and StatefulSets (for default spreading), through
//! kube-rs's `watcher`, which lists, watches from the list's resourceVersion and relists
//! after a 410. Objects missing from a relist are treated as deleted.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::plugins::helper::label_selector;
use crate::scheduler::Scheduler;

/// Runs the watches until the process ends; `synced` turns true once the pods and nodes are
/// listed (budgets and namespaces follow when they come).
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
    let namespaces = {
        let (s, gone) = (scheduler.clone(), scheduler.clone());
        let (namespaces_synced, _) = watch::channel(false);
        follow(
            Api::<Namespace>::all(client.clone()),
            namespaces_synced,
            move |n: Arc<Namespace>| {
                let labels = n.metadata.labels.clone().unwrap_or_default();
                s.on_namespace(n.metadata.name.as_deref().unwrap_or(""), Some(labels))
            },
            move |n: Arc<Namespace>| {
                gone.on_namespace(n.metadata.name.as_deref().unwrap_or(""), None)
            },
        )
    };
    let services = {
        let (s, gone) = (scheduler.clone(), scheduler.clone());
        follow(
            Api::<Service>::all(client.clone()),
            watch::channel(false).0,
            move |svc: Arc<Service>| {
                let selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
                let (ns, name) = namespace_and_name(svc.as_ref());
                s.on_service(ns, name, selector)
            },
            move |svc: Arc<Service>| {
                let (ns, name) = namespace_and_name(svc.as_ref());
                gone.on_service(ns, name, None)
            },
        )
    };
    let replicasets =
        controllers::<ReplicaSet>(client.clone(), scheduler.clone(), "ReplicaSet", |rs| {
            rs.spec.as_ref().map(|s| s.selector.clone())
        });
    let statefulsets =
        controllers::<StatefulSet>(client.clone(), scheduler.clone(), "StatefulSet", |ss| {
            ss.spec.as_ref().map(|s| s.selector.clone())
        });
    let pdbs = {
        let (s, gone) = (scheduler.clone(), scheduler.clone());
        let (pdbs_synced, _) = watch::channel(false);
        follow(
            Api::<PodDisruptionBudget>::all(client.clone()),
            pdbs_synced,
            move |p: Arc<PodDisruptionBudget>| s.on_pdb(object_key(p.as_ref()), Some(p)),
            move |p: Arc<PodDisruptionBudget>| gone.on_pdb(object_key(p.as_ref()), None),
        )
    };
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
        namespaces,
        services,
        replicasets,
        statefulsets,
        ready
    );
}

/// Follows one kind of controller's selectors into the scheduler's workloads.
async fn controllers<K>(
    client: kube::Client,
    scheduler: Arc<Scheduler>,
    kind: &'static str,
    selector_of: fn(&K) -> Option<LabelSelector>,
) where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (s, gone) = (scheduler.clone(), scheduler);
    follow(
        Api::<K>::all(client),
        watch::channel(false).0,
        move |o: Arc<K>| {
            let (ns, name) = namespace_and_name(o.as_ref());
            let selector = selector_of(&o).and_then(|sel| label_selector(Some(&sel)).ok());
            s.on_controller(kind, ns, name, selector)
        },
        move |o: Arc<K>| {
            let (ns, name) = namespace_and_name(o.as_ref());
            gone.on_controller(kind, ns, name, None)
        },
    )
    .await
}

fn namespace_and_name<K: kube::Resource>(o: &K) -> (&str, &str) {
    (
        o.meta().namespace.as_deref().unwrap_or(""),
        o.meta().name.as_deref().unwrap_or(""),
    )
}

/// `namespace/name`.
fn object_key<K: kube::Resource>(o: &K) -> String {
    format!(
        "{}/{}",
        o.meta().namespace.as_deref().unwrap_or(""),
        o.meta().name.as_deref().unwrap_or("")
    )
}

/// One watch: applies and deletes go to the handlers; a relist's missing objects are deleted.
async fn follow<K>(
    api: Api<K>,
    synced: watch::Sender<bool>,
    on_apply: impl Fn(Arc<K>),
    on_delete: impl Fn(Arc<K>),
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let key = object_key::<K>;
    let mut known: HashMap<String, Arc<K>> = HashMap::new();
    let mut relisted: HashMap<String, Arc<K>> = HashMap::new();
    let stream = watcher::watcher(api, watcher::Config::default());
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
