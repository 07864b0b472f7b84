//! `informer`: the two watches (Services, EndpointSlices, all namespaces) that fill the
//! [`ClusterRecords`]: List then Watch through kube-runtime's watcher, each initial list (and
//! re-list after a lost watch) replacing what the records held, each event applied as it
//! arrives. No polling: an answer changes as soon as the event is applied.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Resource};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::records::ClusterRecords;

/// A kind the records are fed with.
trait Feed:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    fn apply(records: &mut ClusterRecords, obj: &Self);
    fn delete(records: &mut ClusterRecords, obj: &Self);
    fn replace(records: &mut ClusterRecords, all: &[Self]);
}

impl Feed for Service {
    fn apply(records: &mut ClusterRecords, obj: &Self) {
        records.apply_service(obj);
    }
    fn delete(records: &mut ClusterRecords, obj: &Self) {
        records.delete_service(obj);
    }
    fn replace(records: &mut ClusterRecords, all: &[Self]) {
        records.replace_services(all);
    }
}

impl Feed for EndpointSlice {
    fn apply(records: &mut ClusterRecords, obj: &Self) {
        records.apply_slice(obj);
    }
    fn delete(records: &mut ClusterRecords, obj: &Self) {
        records.delete_slice(obj);
    }
    fn replace(records: &mut ClusterRecords, all: &[Self]) {
        records.replace_slices(all);
    }
}

/// Starts both watches on tasks of the returned set, which stops them when dropped; `synced`
/// turns true once both have applied their first full list.
pub fn spawn(
    client: kube::Client,
    records: Arc<RwLock<ClusterRecords>>,
    synced: watch::Sender<bool>,
) -> JoinSet<()> {
    let (services_tx, mut services_rx) = watch::channel(false);
    let (slices_tx, mut slices_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tasks.spawn(run::<Service>(
        Api::all(client.clone()),
        records.clone(),
        services_tx,
    ));
    tasks.spawn(run::<EndpointSlice>(Api::all(client), records, slices_tx));
    tasks.spawn(async move {
        if services_rx.wait_for(|s| *s).await.is_ok() && slices_rx.wait_for(|s| *s).await.is_ok() {
            let _ = synced.send(true);
        }
    });
    tasks
}

async fn run<K: Feed>(
    api: Api<K>,
    records: Arc<RwLock<ClusterRecords>>,
    synced: watch::Sender<bool>,
) {
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut listed: Vec<K> = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(obj)) => listed.push(obj),
            Ok(Event::InitDone) => {
                K::replace(&mut records.write(), &listed);
                listed.clear();
                let _ = synced.send(true);
            }
            Ok(Event::Apply(obj)) => K::apply(&mut records.write(), &obj),
            Ok(Event::Delete(obj)) => K::delete(&mut records.write(), &obj),
            Err(error) => {
                tracing::warn!(kind = %K::kind(&()), %error, "dns informer: watch failed; retrying");
            }
        }
    }
}
