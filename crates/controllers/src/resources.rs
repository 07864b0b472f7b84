//! Discovery of every resource the API server serves, shared by the controllers that act on
//! all of them (garbage-collector, namespace, resourcequota): each resource at its group's
//! preferred version, with its scope and verbs; and the metadata-only watches those that follow
//! every resource (custom resources included) keep on each of them ([`Monitors`]).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::{PartialObjectMeta, TypeMeta};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use skiff_runtime::informer::{Change, Informer, Informers};
use tokio::sync::mpsc;

/// One served resource (never a subresource).
#[derive(Debug, Clone)]
pub struct Served {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Served {
    pub fn new(resource: ApiResource, caps: &ApiCapabilities) -> Served {
        Served {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
            verbs: caps.operations.clone(),
        }
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `plural.group`, as upstream names a resource in messages (`pods.` for the core group).
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }

    /// Whether it is one of the two Event resources, which upstream's garbage collector and
    /// quota monitor leave alone (their default `ignoredResources`).
    pub fn is_event(&self) -> bool {
        self.resource.plural == "events"
            && (self.resource.group.is_empty() || self.resource.group == "events.k8s.io")
    }

    /// Whether it can be listed, watched and deleted (what the garbage collector needs).
    pub fn collectable(&self) -> bool {
        [verbs::LIST, verbs::WATCH, verbs::DELETE]
            .iter()
            .all(|v| self.supports(v))
    }
}

/// One metadata watch event of a discovered resource.
pub type MetaEvent = (
    ApiResource,
    watcher::Event<PartialObjectMeta<DynamicObject>>,
);

/// Watches one resource's metadata cluster-wide (relisting with backoff after errors, which
/// are logged as `who`'s) into `tx`, until its receiver is gone.
async fn watch_metadata(
    client: kube::Client,
    ar: ApiResource,
    tx: mpsc::UnboundedSender<MetaEvent>,
    who: &'static str,
) {
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client, &ar);
    let mut events = watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    while let Some(e) = events.next().await {
        match e {
            Ok(e) => {
                if tx.send((ar.clone(), e)).is_err() {
                    return;
                }
            }
            Err(error) => tracing::warn!(resource = %ar.plural, %error, "{who}: watch"),
        }
    }
}

/// The metadata watches a controller keeps on the resources discovery finds (upstream's
/// garbage collector and quota monitors): one per resource, started when discovery first finds
/// it, stopped when it no longer does (its CRD deleted); events go to one channel. As
/// upstream's `InformerFactory.ForResource`, a resource the process's controllers already
/// read typed (pods, replicasets, …: [`shared_kinds`]) is followed through that shared
/// informer instead of a watch of its own.
pub struct Monitors {
    informers: Informers,
    client: kube::Client,
    tx: mpsc::UnboundedSender<MetaEvent>,
    /// Whose watches (in their logs).
    who: &'static str,
    /// The followed resources by group and plural: the own watches' tasks, or `None` for a
    /// shared informer (followed for as long as the process runs).
    running: HashMap<(String, String), Option<tokio::task::AbortHandle>>,
}

impl Monitors {
    pub fn new(
        informers: Informers,
        client: kube::Client,
        tx: mpsc::UnboundedSender<MetaEvent>,
        who: &'static str,
    ) -> Monitors {
        Monitors {
            informers,
            client,
            tx,
            who,
            running: HashMap::new(),
        }
    }

    /// Follows each of `served` not followed yet and stops the own watches of the others.
    pub fn sync(&mut self, served: impl IntoIterator<Item = Served>) {
        let mut keep = HashMap::new();
        for s in served {
            let key = (s.resource.group.clone(), s.resource.plural.clone());
            let handle = match self.running.remove(&key) {
                Some(running) => running,
                None if shared_kinds(&self.informers, &s.resource, &self.tx) => None,
                None => Some(
                    tokio::spawn(watch_metadata(
                        self.client.clone(),
                        s.resource,
                        self.tx.clone(),
                        self.who,
                    ))
                    .abort_handle(),
                ),
            };
            keep.insert(key, handle);
        }
        for (_, gone) in std::mem::replace(&mut self.running, keep) {
            if let Some(task) = gone {
                task.abort();
            }
        }
    }

    /// How many resources are followed.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

/// Follows `ar` through the shared typed informer if it is one of the kinds the controllers
/// read typed; says whether it did.
fn shared_kinds(
    informers: &Informers,
    ar: &ApiResource,
    tx: &mpsc::UnboundedSender<MetaEvent>,
) -> bool {
    macro_rules! follow_one_of {
        ($($kind:ty),* $(,)?) => {
            $(
                if is::<$kind>(ar) {
                    follow::<$kind>(informers.get::<$kind>(), ar.clone(), tx.clone());
                    return true;
                }
            )*
        };
    }
    use k8s_openapi::api::apps::v1::{
        ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
    };
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::{
        Endpoints, Namespace, Node, Pod, ResourceQuota, Service, ServiceAccount,
    };
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    follow_one_of!(
        Pod,
        ReplicaSet,
        Deployment,
        StatefulSet,
        DaemonSet,
        ControllerRevision,
        Job,
        CronJob,
        Service,
        Endpoints,
        EndpointSlice,
        Namespace,
        Node,
        ServiceAccount,
        ResourceQuota,
        PodDisruptionBudget,
    );
    false
}

fn is<K: Resource<DynamicType = ()>>(ar: &ApiResource) -> bool {
    ar.group == K::group(&()) && ar.version == K::version(&()) && ar.plural == K::plural(&())
}

/// Forwards `informer`'s changes as metadata watch events of `ar`: once its cache is ready, a
/// list (`Init`, the cached objects, `InitDone`), then each change.
fn follow<K>(informer: Informer<K>, ar: ApiResource, tx: mpsc::UnboundedSender<MetaEvent>)
where
    K: Resource<DynamicType = ()> + Send + Sync + 'static,
{
    tokio::spawn(async move {
        informer.cache().wait_until_ready().await;
        let _ = tx.send((ar.clone(), watcher::Event::Init));
        let listing = Arc::new(AtomicBool::new(true));
        let (done_ar, done_tx, done) = (ar.clone(), tx.clone(), listing.clone());
        let types = TypeMeta {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        };
        let meta = move |obj: &K| PartialObjectMeta::<DynamicObject> {
            types: Some(types.clone()),
            metadata: obj.meta().clone(),
            _phantom: PhantomData,
        };
        informer.add_handler_then(
            move |change| {
                let event = match change {
                    Change::Added(_) if listing.load(Ordering::Relaxed) => {
                        watcher::Event::InitApply(meta(change.object()))
                    }
                    Change::Added(obj) | Change::Updated { new: obj, .. } => {
                        watcher::Event::Apply(meta(obj))
                    }
                    Change::Deleted { last, .. } => watcher::Event::Delete(meta(last)),
                };
                let _ = tx.send((ar.clone(), event));
            },
            move || {
                done.store(false, Ordering::Relaxed);
                let _ = done_tx.send((done_ar, watcher::Event::InitDone));
            },
        );
    });
}

/// Every resource the server serves, at each group's preferred version; `all_versions` adds the
/// other versions too (for resolving the `apiVersion` of an ownerReference).
pub async fn discover(client: &kube::Client, all_versions: bool) -> kube::Result<Vec<Served>> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        if all_versions {
            for version in group.versions() {
                for (ar, caps) in group.versioned_resources(version) {
                    out.push(Served::new(ar, &caps));
                }
            }
        } else {
            for (ar, caps) in group.recommended_resources() {
                out.push(Served::new(ar, &caps));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(group: &str, plural: &str) -> Served {
        Served {
            resource: ApiResource {
                group: group.into(),
                version: "v1".into(),
                api_version: format!("{group}/v1"),
                kind: "Kind".into(),
                plural: plural.into(),
            },
            namespaced: true,
            verbs: vec!["list".into(), "watch".into(), "delete".into()],
        }
    }

    #[tokio::test]
    async fn monitors_follow_what_discovery_finds_and_drop_what_it_no_longer_finds() {
        // nothing answers there: the watches keep retrying, which is all this test needs
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let (tx, _rx) = mpsc::unbounded_channel();
        let informers = Informers::new(client.clone());
        let mut monitors = Monitors::new(informers, client, tx, "test");
        monitors.sync([
            served("example.com", "widgets"),
            served("example.com", "gadgets"),
            served("apps", "deployments"),
        ]);
        assert_eq!(monitors.len(), 3);
        let running = |m: &Monitors, group: &str, plural: &str| {
            m.running[&(group.into(), plural.into())].clone()
        };
        let widgets = running(&monitors, "example.com", "widgets").expect("an own watch");
        assert!(
            running(&monitors, "apps", "deployments").is_none(),
            "deployments are followed through the shared informer"
        );
        // the CRD of widgets is gone: its watch stops, the others are kept
        monitors.sync([
            served("example.com", "gadgets"),
            served("apps", "deployments"),
        ]);
        assert_eq!(monitors.len(), 2);
        tokio::task::yield_now().await;
        assert!(widgets.is_finished());
        monitors.sync([]);
        assert!(monitors.is_empty());
    }
}
