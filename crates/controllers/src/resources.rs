//! Discovery of every resource the API server serves, shared by the controllers that act on
//! all of them (garbage-collector, namespace, resourcequota): each resource at its group's
//! preferred version, with its scope and verbs; and how those that follow every resource
//! (custom resources included) follow each of them through the shared informers ([`Monitors`]).

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::{PartialObjectMeta, TypeMeta};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use kube::runtime::watcher;
use parking_lot::Mutex;
use skiff_runtime::informer::{Change, HandlerId, Informer, Informers};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

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

/// What a controller follows of the resources discovery finds (upstream's garbage collector and
/// quota monitors): each resource's changes, as metadata watch events into one channel, from
/// when discovery first finds it until it no longer does (its CRD deleted). Every resource is
/// followed through the process's shared informers, as upstream's `InformerFactory.ForResource`:
/// the typed one of a kind the controllers read typed (pods, replicasets, …: [`shared_kinds`]),
/// else the resource's metadata informer, one watch for every controller that follows it (and
/// stopped once none does).
pub struct Monitors {
    informers: Informers,
    tx: mpsc::UnboundedSender<MetaEvent>,
    /// The followed resources by group and plural.
    running: HashMap<(String, String), Follow>,
}

impl Monitors {
    pub fn new(informers: Informers, tx: mpsc::UnboundedSender<MetaEvent>) -> Monitors {
        Monitors {
            informers,
            tx,
            running: HashMap::new(),
        }
    }

    /// Follows each of `served` not followed yet and stops following the others.
    pub fn sync(&mut self, served: impl IntoIterator<Item = Served>) {
        let mut keep = HashMap::new();
        for s in served {
            let key = (s.resource.group.clone(), s.resource.plural.clone());
            let follow = match self.running.remove(&key) {
                Some(running) => running,
                None => match shared_kinds(&self.informers, &s.resource, &self.tx) {
                    Some(typed) => typed,
                    None => {
                        let informer = self.informers.metadata(&s.resource);
                        follow(informer, s.resource, self.tx.clone())
                    }
                },
            };
            keep.insert(key, follow);
        }
        // dropping a follow stops it
        self.running = keep;
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
/// read typed.
fn shared_kinds(
    informers: &Informers,
    ar: &ApiResource,
    tx: &mpsc::UnboundedSender<MetaEvent>,
) -> Option<Follow> {
    macro_rules! follow_one_of {
        ($($kind:ty),* $(,)?) => {
            $(
                if is::<$kind>(ar) {
                    return Some(follow::<$kind>(informers.get::<$kind>(), ar.clone(), tx.clone()));
                }
            )*
        };
    }
    use k8s_openapi::api::apps::v1::{
        ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
    };
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
    use k8s_openapi::api::core::v1::{
        ConfigMap, Endpoints, Namespace, Node, PersistentVolumeClaim, Pod, ReplicationController,
        ResourceQuota, Secret, Service, ServiceAccount,
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
        // the quota controller's
        ConfigMap,
        Secret,
        PersistentVolumeClaim,
        ReplicationController,
        // the CSR approver's and signer's
        CertificateSigningRequest,
    );
    None
}

fn is<K: Resource<DynamicType = ()>>(ar: &ApiResource) -> bool {
    ar.group == K::group(&()) && ar.version == K::version(&()) && ar.plural == K::plural(&())
}

/// Where a follow is.
enum Following {
    /// Waiting for the informer's first list.
    Waiting,
    Handler(HandlerId),
    Stopped,
}

/// One followed resource; dropping it stops the forwarding (and lets go of the informer, whose
/// watch stops if it is a metadata informer nothing else holds).
struct Follow {
    state: Arc<Mutex<Following>>,
    task: AbortHandle,
    /// Removes a handler from the informer (and holds the informer's handle).
    remove: Box<dyn Fn(HandlerId) + Send + Sync>,
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.task.abort();
        let mut state = self.state.lock();
        if let Following::Handler(id) = std::mem::replace(&mut *state, Following::Stopped) {
            (self.remove)(id);
        }
    }
}

/// Forwards `informer`'s changes as metadata watch events of `ar`: once its cache is ready, a
/// list (`Init`, the cached objects, `InitDone`), then each change.
fn follow<K>(informer: Informer<K>, ar: ApiResource, tx: mpsc::UnboundedSender<MetaEvent>) -> Follow
where
    K: Resource + Send + Sync + 'static,
{
    let state = Arc::new(Mutex::new(Following::Waiting));
    let task = tokio::spawn({
        let (informer, state) = (informer.clone(), state.clone());
        async move {
            informer.cache().wait_until_ready().await;
            // held until the handler is added, so that a drop of the follow meanwhile waits
            // and then removes it
            let mut state = state.lock();
            if !matches!(*state, Following::Waiting) {
                return;
            }
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
            let id = informer.add_handler_then(
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
            *state = Following::Handler(id);
        }
    });
    Follow {
        state,
        task: task.abort_handle(),
        remove: Box::new(move |id| informer.remove_handler(id)),
    }
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
        let informers = Informers::new(client);
        let mut monitors = Monitors::new(informers.clone(), tx.clone());
        // another controller's (the garbage collector's and the quota monitor's)
        let mut others = Monitors::new(informers.clone(), tx);
        let (widgets, gadgets) = (
            served("example.com", "widgets"),
            served("example.com", "gadgets"),
        );
        let deployments = served("apps", "deployments");
        monitors.sync([widgets.clone(), gadgets.clone(), deployments.clone()]);
        others.sync([widgets.clone()]);
        assert_eq!(monitors.len(), 3);
        let watched = |s: &Served| informers.watches_metadata(&s.resource);
        assert!(watched(&widgets) && watched(&gadgets));
        assert!(
            !watched(&deployments),
            "deployments are followed through the shared typed informer"
        );
        // the CRD of widgets is gone: its monitor stops; the watch stays while another needs it
        monitors.sync([gadgets.clone(), deployments.clone()]);
        assert_eq!(monitors.len(), 2);
        settle().await;
        assert!(watched(&widgets), "still followed by the others");
        others.sync([]);
        settle().await;
        assert!(!watched(&widgets), "followed by none");
        assert!(watched(&gadgets));
        monitors.sync([]);
        assert!(monitors.is_empty());
        settle().await;
        assert!(!watched(&gadgets));
    }

    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }
}
