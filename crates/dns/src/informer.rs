//! `informer`: handlers on the shared informers of Services and EndpointSlices (all namespaces)
//! that apply each change to the [`ClusterRecords`] as it arrives. No polling: an answer changes
//! as soon as the change is applied.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use parking_lot::RwLock;
use skiff_runtime::informer::{Change, Informers};

use crate::records::ClusterRecords;

/// Feeds `records` from `informers` (which must outlive the server: dropping its last clone ends
/// the watches). The returned future ends once both informers have their first list.
pub fn subscribe(
    informers: &Informers,
    records: Arc<RwLock<ClusterRecords>>,
) -> impl Future<Output = ()> + Send + 'static {
    let services = informers.get::<Service>();
    let slices = informers.get::<EndpointSlice>();
    {
        let records = records.clone();
        services.add_handler(move |change: &Change<Service>| {
            records.write().service_changed(change);
        });
    }
    slices.add_handler(move |change: &Change<EndpointSlice>| {
        records.write().slice_changed(change);
    });
    let caches = (services.cache().clone(), slices.cache().clone());
    async move {
        caches.0.wait_until_ready().await;
        caches.1.wait_until_ready().await;
    }
}
