//! Discovery of every resource the API server serves, shared by the controllers that act on
//! all of them (garbage-collector, namespace, resourcequota): each resource at its group's
//! preferred version, with its scope and verbs; and the metadata-only watch those that follow
//! every resource (custom resources included) keep on each of them.

use futures::StreamExt;
use kube::Api;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use kube::runtime::{WatchStreamExt, watcher};
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
pub async fn watch_metadata(
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
