//! Discovery of every resource the API server serves, shared by the controllers that act on
//! all of them (garbage-collector, namespace, resourcequota): each resource at its group's
//! preferred version, with its scope and verbs; and the metadata-only watches those that follow
//! every resource (custom resources included) keep on each of them ([`Monitors`]).

use std::collections::HashMap;

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
/// it, stopped when it no longer does (its CRD deleted); events go to one channel.
pub struct Monitors {
    client: kube::Client,
    tx: mpsc::UnboundedSender<MetaEvent>,
    /// Whose watches (in their logs).
    who: &'static str,
    /// The running watches by group and plural.
    running: HashMap<(String, String), tokio::task::AbortHandle>,
}

impl Monitors {
    pub fn new(
        client: kube::Client,
        tx: mpsc::UnboundedSender<MetaEvent>,
        who: &'static str,
    ) -> Monitors {
        Monitors {
            client,
            tx,
            who,
            running: HashMap::new(),
        }
    }

    /// Watches each of `served` not watched yet and stops the watches of the others.
    pub fn sync(&mut self, served: impl IntoIterator<Item = Served>) {
        let mut keep = HashMap::new();
        for s in served {
            let key = (s.resource.group.clone(), s.resource.plural.clone());
            let handle = match self.running.remove(&key) {
                Some(running) => running,
                None => tokio::spawn(watch_metadata(
                    self.client.clone(),
                    s.resource,
                    self.tx.clone(),
                    self.who,
                ))
                .abort_handle(),
            };
            keep.insert(key, handle);
        }
        for (_, gone) in std::mem::replace(&mut self.running, keep) {
            gone.abort();
        }
    }

    /// How many resources are watched.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
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
        let mut monitors = Monitors::new(client, tx, "test");
        monitors.sync([
            served("example.com", "widgets"),
            served("apps", "deployments"),
        ]);
        assert_eq!(monitors.len(), 2);
        let widgets = monitors.running[&("example.com".into(), "widgets".into())].clone();
        // the CRD of widgets is gone: its watch stops, the other one is kept
        monitors.sync([served("apps", "deployments")]);
        assert_eq!(monitors.len(), 1);
        tokio::task::yield_now().await;
        assert!(widgets.is_finished());
        monitors.sync([]);
        assert!(monitors.is_empty());
    }
}
