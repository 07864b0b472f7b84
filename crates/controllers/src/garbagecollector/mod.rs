//! `garbage-collector` (upstream's GarbageCollector): deletes objects whose owners are gone,
//! in the background, foreground and orphan modes that `propagationPolicy` asks for.
//!
//! Discovery (every 30 s) finds every resource that can be listed, watched and deleted; each
//! one's shared informer (its metadata informer unless the controllers read it typed) feeds the
//! ownership [`graph`], whose changes queue uids for the workers, which decide through the API
//! what to do with each ([`attempt`]). Upstream differences: events are ignored as upstream's
//! default `ignoredResources`; there is no absent-owner cache (each owner is read when a
//! dependent is looked at).
//!
//! # Layout
//! - [`graph`]: the objects by uid and each owner's dependents; watch events in, work out.
//! - [`attempt`]: one uid's handling: delete, strip references, release a finalizer.
//! - [`queue`]: the deduplicating work queue the workers share.

pub mod attempt;
pub mod graph;
pub mod queue;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use kube::{Api, Client};
use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};
use skiff_runtime::backoff::ItemBackoff;
use tokio::sync::mpsc;

use self::attempt::{Done, Error, Objects, Policy, Snapshot, Target};
use self::graph::{Graph, Identity, Node, Work};
use self::queue::Queue;
use crate::Context;
use crate::resources::{self, MetaEvent, Served};

/// How often discovery runs again to find new resources (upstream's 30 s resync).
const REDISCOVERY: Duration = Duration::from_secs(30);
/// The longest the workers wait for every resource's first list before starting anyway.
const SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// Workers (upstream's `--concurrent-gc-syncs` default).
const WORKERS: usize = 20;

/// Served kinds by (apiVersion, kind), every version.
type Kinds = Arc<RwLock<HashMap<(String, String), Served>>>;

struct KubeObjects {
    client: Client,
    kinds: Kinds,
}

impl KubeObjects {
    fn api(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>, Error> {
        let kinds = self.kinds.read();
        let served = kinds
            .get(&(api_version.to_string(), kind.to_string()))
            .ok_or_else(|| Error::Unresolvable {
                api_version: api_version.into(),
                kind: kind.into(),
            })?;
        Ok(match namespace {
            Some(ns) if served.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &served.resource)
            }
            _ => Api::all_with(self.client.clone(), &served.resource),
        })
    }

    fn api_of(&self, id: &Identity) -> Result<Api<DynamicObject>, Error> {
        self.api(&id.api_version, &id.kind, id.namespace.as_deref())
    }

    /// The object's current metadata if it is still the one with `id.uid`.
    async fn current(&self, id: &Identity) -> Result<Option<ObjectMeta>, Error> {
        let meta = self
            .get(&Target::from(id))
            .await?
            .filter(|m| m.uid.as_deref() == Some(id.uid.as_str()));
        Ok(meta)
    }

    /// A merge patch of `metadata` pinned to `rv` (a conflict is retried by the caller).
    async fn patch_metadata(
        &self,
        id: &Identity,
        rv: Option<String>,
        metadata: Value,
    ) -> Result<(), Error> {
        let mut metadata = metadata;
        metadata["resourceVersion"] = json!(rv);
        let patch = json!({"metadata": metadata});
        let r = self
            .api_of(id)?
            .patch(&id.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        api_result(r, "patch", id)
    }
}

fn api_result<T>(r: kube::Result<T>, verb: &'static str, id: &Identity) -> Result<(), Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Api {
            verb,
            kind: id.kind.clone(),
            name: id.name.clone(),
            source: Box::new(source),
        }),
    }
}

#[async_trait]
impl Objects for KubeObjects {
    fn namespaced(&self, api_version: &str, kind: &str) -> Option<bool> {
        self.kinds
            .read()
            .get(&(api_version.to_string(), kind.to_string()))
            .map(|s| s.namespaced)
    }

    async fn get(&self, t: &Target) -> Result<Option<ObjectMeta>, Error> {
        let api = self.api(&t.api_version, &t.kind, t.namespace.as_deref())?;
        match api.get_metadata_opt(&t.name).await {
            Ok(m) => Ok(m.map(|m: PartialObjectMeta<DynamicObject>| m.metadata)),
            Err(source) => Err(Error::Api {
                verb: "get",
                kind: t.kind.clone(),
                name: t.name.clone(),
                source: Box::new(source),
            }),
        }
    }

    async fn delete(&self, id: &Identity, policy: Policy) -> Result<(), Error> {
        let dp = DeleteParams {
            propagation_policy: Some(match policy {
                Policy::Background => PropagationPolicy::Background,
                Policy::Foreground => PropagationPolicy::Foreground,
                Policy::Orphan => PropagationPolicy::Orphan,
            }),
            preconditions: Some(Preconditions {
                uid: Some(id.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self.api_of(id)?.delete(&id.name, &dp).await {
            // The uid precondition failed: that object is gone already.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            r => api_result(r, "delete", id),
        }
    }

    async fn remove_owner_references(&self, id: &Identity, owners: &[String]) -> Result<(), Error> {
        let Some(meta) = self.current(id).await? else {
            return Ok(());
        };
        let refs = meta.owner_references.unwrap_or_default();
        let kept: Vec<_> = refs
            .iter()
            .filter(|r| !owners.contains(&r.uid))
            .cloned()
            .collect();
        if kept.len() == refs.len() {
            return Ok(());
        }
        let value = if kept.is_empty() {
            Value::Null
        } else {
            json!(kept)
        };
        self.patch_metadata(id, meta.resource_version, json!({"ownerReferences": value}))
            .await
    }

    async fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> Result<(), Error> {
        let Some(meta) = self.current(id).await? else {
            return Ok(());
        };
        let all = meta.finalizers.unwrap_or_default();
        let kept: Vec<&String> = all.iter().filter(|f| *f != finalizer).collect();
        if kept.len() == all.len() {
            return Ok(());
        }
        let value = if kept.is_empty() {
            Value::Null
        } else {
            json!(kept)
        };
        self.patch_metadata(id, meta.resource_version, json!({"finalizers": value}))
            .await
    }
}

/// Applies watch events to the graph and queues the work they cause; reports each resource's
/// first complete list on `synced`.
async fn build_graph(
    graph: Arc<Mutex<Graph>>,
    queue: Arc<Queue<Work>>,
    mut rx: mpsc::UnboundedReceiver<MetaEvent>,
    synced: Arc<Mutex<HashSet<(String, String)>>>,
) {
    let mut listing: HashMap<(String, String), HashSet<String>> = HashMap::new();
    while let Some((ar, event)) = rx.recv().await {
        let key = (ar.api_version.clone(), ar.kind.clone());
        let node = |m: &PartialObjectMeta<DynamicObject>| {
            Node::from_meta(&ar.api_version, &ar.kind, &m.metadata)
        };
        let work = {
            let mut g = graph.lock();
            match event {
                watcher::Event::Init => {
                    listing.insert(key, HashSet::new());
                    Vec::new()
                }
                watcher::Event::InitApply(m) => {
                    let Some(n) = node(&m) else { continue };
                    listing.entry(key).or_default().insert(n.id.uid.clone());
                    g.upsert(n)
                }
                watcher::Event::InitDone => {
                    let seen = listing.remove(&key).unwrap_or_default();
                    let mut work = Vec::new();
                    for uid in g.uids_of(&ar.api_version, &ar.kind) {
                        if !seen.contains(&uid) {
                            work.extend(g.remove(&uid));
                        }
                    }
                    synced.lock().insert(key);
                    work
                }
                watcher::Event::Apply(m) => match node(&m) {
                    Some(n) => g.upsert(n),
                    None => continue,
                },
                watcher::Event::Delete(m) => match m.metadata.uid.as_deref() {
                    Some(uid) => g.remove(uid),
                    None => continue,
                },
            }
        };
        for w in work {
            queue.add(w);
        }
    }
}

async fn work(
    graph: Arc<Mutex<Graph>>,
    queue: Arc<Queue<Work>>,
    api: Arc<KubeObjects>,
    backoff: Arc<ItemBackoff<Work>>,
) {
    loop {
        let item = queue.next().await;
        let uid = match &item {
            Work::Delete(uid) | Work::Orphan(uid) => uid.clone(),
        };
        let snapshot = Snapshot::of(&graph.lock(), &uid);
        if let Some(snapshot) = snapshot {
            match attempt::attempt(api.as_ref(), &snapshot, &item).await {
                Ok(done) => {
                    backoff.forget(&item);
                    if done != Done::Nothing {
                        tracing::debug!(object = ?snapshot.id, ?done, "garbage-collector");
                    }
                    if let Done::Waiting(more) = done {
                        for w in more {
                            queue.add(w);
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(object = ?snapshot.id, %error, "garbage-collector: will retry");
                    queue.add_after(item.clone(), backoff.failed(item.clone()));
                }
            }
        }
        queue.done(&item);
    }
}

/// Runs the collector until the process stops.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let client = ctx.client.clone();
    let graph = Arc::new(Mutex::new(Graph::default()));
    let queue = Queue::new();
    let kinds: Kinds = Arc::default();
    let synced: Arc<Mutex<HashSet<(String, String)>>> = Arc::default();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(build_graph(
        graph.clone(),
        queue.clone(),
        rx,
        synced.clone(),
    ));

    let mut watched = resources::Monitors::new(ctx.informers.clone(), tx);
    let mut failures = 0u32;
    let mut workers_started = false;
    let started = tokio::time::Instant::now();
    loop {
        match resources::discover(&client, true).await {
            Ok(all) => {
                failures = 0;
                let mut next = HashMap::new();
                for s in &all {
                    next.insert(
                        (s.resource.api_version.clone(), s.resource.kind.clone()),
                        s.clone(),
                    );
                }
                *kinds.write() = next;
                // Watch each resource once, at its group's preferred version (and stop
                // watching those no longer served).
                if let Ok(preferred) = resources::discover(&client, false).await {
                    watched.sync(
                        preferred
                            .into_iter()
                            .filter(|s| s.collectable() && !s.is_event()),
                    );
                }
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, "garbage-collector: discovery failed");
            }
        }
        if !workers_started {
            // Wait for every watched resource's first list (the graph must know all dependents
            // before a foreground owner is released), bounded like upstream's sync timeout.
            loop {
                let done = synced.lock().len() >= watched.len() && !watched.is_empty();
                if done || started.elapsed() > SYNC_TIMEOUT {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if !watched.is_empty() {
                let api = Arc::new(KubeObjects {
                    client: client.clone(),
                    kinds: kinds.clone(),
                });
                let backoff = Arc::new(ItemBackoff::default());
                for _ in 0..WORKERS {
                    tokio::spawn(work(
                        graph.clone(),
                        queue.clone(),
                        api.clone(),
                        backoff.clone(),
                    ));
                }
                workers_started = true;
                tracing::info!(resources = watched.len(), "garbage-collector: graph synced");
            }
        }
        let wait = if failures > 0 {
            Duration::from_secs(1 << failures.min(5))
        } else {
            REDISCOVERY
        };
        tokio::time::sleep(wait).await;
    }
}
