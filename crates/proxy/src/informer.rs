//! Informers on Services, EndpointSlices (discovery.k8s.io/v1) and this proxy's Node, feeding
//! the [`ChangeTracker`] and waking the sync loop. As upstream's informer factory, Services and
//! slices are watched without those labelled `service.kubernetes.io/service-proxy-name` (another
//! proxy's) or `service.kubernetes.io/headless`.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::tracker::ChangeTracker;

/// Upstream's label selector for the Services and slices kube-proxy serves.
const SELECTOR: &str = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

/// A watched object changed, or the first (or a new) full list arrived.
enum Update<K> {
    Applied(Arc<K>),
    Deleted(K),
    Listed(Vec<Arc<K>>),
}

/// Starts the three informers on tasks of the returned set, which stops them when dropped; the
/// returned receiver turns true once each has listed.
pub fn spawn(
    client: Client,
    node_name: &str,
    tracker: Arc<Mutex<ChangeTracker>>,
    notify: Arc<Notify>,
) -> (watch::Receiver<bool>, JoinSet<()>) {
    let (synced_tx, synced_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let listed = Arc::new(Mutex::new(BTreeSet::new()));
    let done = move |kind: &'static str| {
        let mut listed = listed.lock();
        listed.insert(kind);
        if listed.len() == 3 {
            let _ = synced_tx.send(true);
        }
    };
    let done = Arc::new(done);
    {
        let (tracker, notify, done) = (tracker.clone(), notify.clone(), done.clone());
        let config = watcher::Config::default().labels(SELECTOR);
        tasks.spawn(inform(
            Api::<Service>::all(client.clone()),
            config,
            move |u| {
                let mut t = tracker.lock();
                match u {
                    Update::Applied(s) => t.service_updated(s),
                    Update::Deleted(s) => t.service_deleted(&s),
                    Update::Listed(all) => {
                        t.services_listed(all);
                        done("services");
                    }
                }
                notify.notify_one();
            },
        ));
    }
    {
        let (tracker, notify, done) = (tracker.clone(), notify.clone(), done.clone());
        let config = watcher::Config::default().labels(SELECTOR);
        let api = Api::<EndpointSlice>::all(client.clone());
        tasks.spawn(inform(api, config, move |u| {
            let mut t = tracker.lock();
            match u {
                Update::Applied(s) => t.slice_updated(s),
                Update::Deleted(s) => t.slice_deleted(&s),
                Update::Listed(all) => {
                    t.slices_listed(all);
                    done("slices");
                }
            }
            notify.notify_one();
        }));
    }
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    tasks.spawn(inform(Api::<Node>::all(client), config, move |u| {
        let mut t = tracker.lock();
        match u {
            Update::Applied(n) => t.node_updated(&n),
            Update::Deleted(_) => {}
            Update::Listed(all) => {
                if let Some(n) = all.first() {
                    t.node_updated(n);
                }
                done("node");
            }
        }
        notify.notify_one();
    }));
    (synced_rx, tasks)
}

/// Watches `api` forever (with kube's default backoff), handing each change to `handle`; a
/// (re)list is handed over whole, so that objects deleted meanwhile disappear.
async fn inform<K>(api: Api<K>, config: watcher::Config, mut handle: impl FnMut(Update<K>))
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let stream = watcher::watcher(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut listing = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Apply(obj)) => handle(Update::Applied(Arc::new(obj))),
            Ok(Event::Delete(obj)) => handle(Update::Deleted(obj)),
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(obj)) => listing.push(Arc::new(obj)),
            Ok(Event::InitDone) => handle(Update::Listed(std::mem::take(&mut listing))),
            Err(error) => {
                tracing::warn!(kind = %K::kind(&()), %error, "proxy informer: watch failed; retrying");
            }
        }
    }
}
