//! The controller's feeds and its rebuild loop: shared informers on Ingresses, IngressClasses,
//! Services, EndpointSlices and `kubernetes.io/tls` Secrets wake the loop on every change; the
//! loop rebuilds the whole [`Config`] from the caches and publishes it on a `watch` channel,
//! from which every request and TLS handshake reads the newest one (an atomic swap of an
//! `Arc`: requests in flight keep the one they started with). Changes that arrive during a
//! build are folded into the next one.

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::runtime::watcher;
use skiff_runtime::informer::{Cache, Change, Informers, Kind};
use tokio::sync::{Notify, watch};

use crate::config::{Config, Snapshot};

/// Only TLS Secrets are read (the API server's `type` field selector).
const TLS_SECRETS: &str = "type=kubernetes.io/tls";

/// The caches the configuration is built from.
#[derive(Clone)]
pub struct Caches {
    pub ingresses: Cache<Ingress>,
    classes: Cache<IngressClass>,
    services: Cache<Service>,
    slices: Cache<EndpointSlice>,
    secrets: Cache<Secret>,
}

impl Caches {
    /// What the caches hold now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            ingresses: self.ingresses.state(),
            classes: self.classes.state(),
            services: self.services.state(),
            slices: self.slices.state(),
            secrets: self.secrets.state(),
        }
    }
}

/// Subscribes to the informers of `informers` (which must outlive the controller: dropping
/// its last clone ends the watches), waking `changed` on every change. The future ends once
/// every cache has its first list.
pub fn subscribe(
    informers: &Informers,
    changed: Arc<Notify>,
) -> (Caches, impl Future<Output = ()> + Send + 'static) {
    fn feed<K: Kind>(
        informers: &Informers,
        config: watcher::Config,
        changed: &Arc<Notify>,
    ) -> Cache<K> {
        let informer = informers.filtered::<K>(config);
        let changed = changed.clone();
        informer.add_handler(move |_: &Change<K>| changed.notify_one());
        informer.cache().clone()
    }
    let all = watcher::Config::default;
    let caches = Caches {
        ingresses: feed(informers, all(), &changed),
        classes: feed(informers, all(), &changed),
        services: feed(informers, all(), &changed),
        slices: feed(informers, all(), &changed),
        secrets: feed(informers, all().fields(TLS_SECRETS), &changed),
    };
    let ready = caches.clone();
    let synced = async move {
        ready.ingresses.wait_until_ready().await;
        ready.classes.wait_until_ready().await;
        ready.services.wait_until_ready().await;
        ready.slices.wait_until_ready().await;
        ready.secrets.wait_until_ready().await;
    };
    (caches, synced)
}

/// Rebuilds the configuration after every change, for ever.
pub async fn run(caches: Caches, changed: Arc<Notify>, publish: watch::Sender<Arc<Config>>) {
    loop {
        changed.notified().await;
        let config = Config::build(&caches.snapshot());
        tracing::debug!(
            ingresses = config.served.len(),
            tls_hosts = config.certs.hosts().len(),
            "configuration rebuilt"
        );
        publish.send_replace(Arc::new(config));
    }
}
