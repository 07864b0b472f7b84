//! The proxy's feeds: handlers on the shared informers of Services, EndpointSlices
//! (discovery.k8s.io/v1) and this proxy's Node that apply each change to the [`ChangeTracker`]
//! and wake the sync loop. As upstream's informer factory, Services and slices are watched
//! without those labelled `service.kubernetes.io/service-proxy-name` (another proxy's) or
//! `service.kubernetes.io/headless`.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use parking_lot::Mutex;
use skiff_runtime::informer::{Change, Informers};
use tokio::sync::Notify;

use crate::tracker::ChangeTracker;

/// Upstream's label selector for the Services and slices kube-proxy serves.
const SELECTOR: &str = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";

/// Feeds `tracker` from `informers` (which must outlive the proxy: dropping its last clone ends
/// the watches), waking `notify` after every change. The returned future ends once all three
/// informers have their first list.
pub fn subscribe(
    informers: &Informers,
    node_name: &str,
    tracker: Arc<Mutex<ChangeTracker>>,
    notify: Arc<Notify>,
) -> impl Future<Output = ()> + Send + 'static {
    let services = informers.filtered::<Service>(watcher::Config::default().labels(SELECTOR));
    let slices = informers.filtered::<EndpointSlice>(watcher::Config::default().labels(SELECTOR));
    let node_config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let node = informers.filtered::<Node>(node_config);
    {
        let (tracker, notify) = (tracker.clone(), notify.clone());
        services.add_handler(move |change: &Change<Service>| {
            tracker.lock().service_changed(change);
            notify.notify_one();
        });
    }
    {
        let (tracker, notify) = (tracker.clone(), notify.clone());
        slices.add_handler(move |change: &Change<EndpointSlice>| {
            tracker.lock().slice_changed(change);
            notify.notify_one();
        });
    }
    node.add_handler(move |change: &Change<Node>| {
        tracker.lock().node_changed(change);
        notify.notify_one();
    });
    let caches = (
        services.cache().clone(),
        slices.cache().clone(),
        node.cache().clone(),
    );
    async move {
        caches.0.wait_until_ready().await;
        caches.1.wait_until_ready().await;
        caches.2.wait_until_ready().await;
    }
}
