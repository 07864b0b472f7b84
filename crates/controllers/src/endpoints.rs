//! `endpoints`: every Service with a selector has an Endpoints object of the same name listing
//! the pods it selects (upstream's EndpointsController): ready pods under `addresses`, the others
//! under `notReadyAddresses` (all under `addresses` with `publishNotReadyAddresses`), ports
//! resolved per pod from each `targetPort` (a named port a pod lacks leaves that pod out for that
//! port), subsets repacked by port set, at most 1000 addresses (the rest truncated and annotated),
//! and the Endpoints of a deleted Service deleted. Services without selector are left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};
use kube::api::ObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use skiff_runtime::controller::{Action, Controller};

use crate::service_pods::{self as sp, LAST_CHANGE_TRIGGER_TIME, TriggerTimes};
use crate::{Context, triggers};

/// The most addresses one Endpoints object holds (upstream's `maxCapacity`).
pub const MAX_CAPACITY: usize = 1000;
/// The annotation on an Endpoints object whose addresses were truncated.
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// The label marking Endpoints this controller manages, and its value.
pub const MANAGED_BY: (&str, &str) = ("endpoints.kubernetes.io/managed-by", "endpoint-controller");
/// The annotation of leader-election Endpoints, never deleted as leftovers.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

/// The writes this controller makes.
#[async_trait]
pub trait EndpointsApi: Send + Sync {
    /// The current `namespace/name` Endpoints, if any.
    async fn get(&self, namespace: &str, name: &str) -> kube::Result<Option<Endpoints>>;
    /// Creates it.
    async fn create(&self, endpoints: &Endpoints) -> kube::Result<()>;
    /// Replaces it (the object carries the resourceVersion read).
    async fn replace(&self, endpoints: &Endpoints) -> kube::Result<()>;
    /// Deletes `namespace/name`; a missing one is not an error.
    async fn delete(&self, namespace: &str, name: &str) -> kube::Result<()>;
}

/// One address for one port: the unit subsets are packed from.
struct Entry {
    address: EndpointAddress,
    ready: bool,
    port: Option<EndpointPort>,
}

type PortKey = (String, i32, String, String);
type AddressKey = (String, String, bool);

fn port_key(p: &Option<EndpointPort>) -> Option<PortKey> {
    p.as_ref().map(|p| {
        (
            p.name.clone().unwrap_or_default(),
            p.port,
            p.protocol.clone().unwrap_or_default(),
            p.app_protocol.clone().unwrap_or_default(),
        )
    })
}

fn address_key(a: &EndpointAddress, ready: bool) -> AddressKey {
    let uid = a
        .target_ref
        .as_ref()
        .and_then(|r| r.uid.clone())
        .unwrap_or_default();
    (a.ip.clone(), uid, ready)
}

/// The entries for the Service's pods: one per pod and port it resolves.
fn entries(service: &Service, pods: &[&Pod]) -> Vec<Entry> {
    let publish = sp::publish_not_ready(service);
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut out = Vec::new();
    for pod in pods {
        if !sp::should_be_in_endpoints(pod, publish) {
            continue;
        }
        let Some(ip) = sp::pod_ip(pod) else { continue };
        let address = EndpointAddress {
            ip,
            hostname: sp::hostname(pod, service),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(ObjectReference {
                kind: Some("Pod".into()),
                namespace: pod.namespace(),
                name: Some(pod.name_any()),
                uid: pod.uid(),
                ..Default::default()
            }),
        };
        let ready = publish || sp::is_ready(pod);
        if ports.is_empty() {
            if sp::headless(service) {
                out.push(Entry {
                    address,
                    ready,
                    port: None,
                });
            }
            continue;
        }
        for port in &ports {
            let Some(number) = sp::find_port(pod, port) else {
                continue;
            };
            out.push(Entry {
                address: address.clone(),
                ready,
                port: Some(EndpointPort {
                    name: port.name.clone(),
                    port: number,
                    protocol: Some(port.protocol.clone().unwrap_or_else(|| "TCP".into())),
                    app_protocol: port.app_protocol.clone(),
                }),
            });
        }
    }
    out
}

/// Upstream's `RepackSubsets`: addresses that share the same set of ports form one subset;
/// addresses, ports and subsets sorted so that equal inputs give equal objects.
fn repack(entries: Vec<Entry>) -> Vec<EndpointSubset> {
    let mut addresses: BTreeMap<AddressKey, EndpointAddress> = BTreeMap::new();
    let mut ports: BTreeMap<Option<PortKey>, Option<EndpointPort>> = BTreeMap::new();
    let mut by_port: BTreeMap<Option<PortKey>, BTreeSet<AddressKey>> = BTreeMap::new();
    for e in entries {
        let a = address_key(&e.address, e.ready);
        let p = port_key(&e.port);
        addresses.entry(a.clone()).or_insert(e.address);
        ports.entry(p.clone()).or_insert(e.port);
        by_port.entry(p).or_default().insert(a);
    }
    let mut by_addresses: BTreeMap<Vec<AddressKey>, Vec<Option<PortKey>>> = BTreeMap::new();
    for (p, addrs) in by_port {
        by_addresses
            .entry(addrs.into_iter().collect())
            .or_default()
            .push(p);
    }
    by_addresses
        .into_iter()
        .map(|(addrs, port_keys)| {
            let pick = |ready: bool| -> Option<Vec<EndpointAddress>> {
                let v: Vec<EndpointAddress> = addrs
                    .iter()
                    .filter(|k| k.2 == ready)
                    .map(|k| addresses[k].clone())
                    .collect();
                (!v.is_empty()).then_some(v)
            };
            let ports: Vec<EndpointPort> =
                port_keys.iter().filter_map(|k| ports[k].clone()).collect();
            EndpointSubset {
                addresses: pick(true),
                not_ready_addresses: pick(false),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect()
}

/// Keeps at most [`MAX_CAPACITY`] addresses, ready ones first; returns whether any were cut.
fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let count = |s: &EndpointSubset| {
        s.addresses.as_ref().map_or(0, Vec::len)
            + s.not_ready_addresses.as_ref().map_or(0, Vec::len)
    };
    if subsets.iter().map(count).sum::<usize>() <= MAX_CAPACITY {
        return false;
    }
    let mut room = MAX_CAPACITY;
    for s in subsets.iter_mut() {
        if let Some(a) = s.addresses.as_mut() {
            a.truncate(room);
            room -= a.len();
        }
    }
    for s in subsets.iter_mut() {
        if let Some(a) = s.not_ready_addresses.as_mut() {
            a.truncate(room);
            room -= a.len();
        }
    }
    for s in subsets.iter_mut() {
        s.addresses = s.addresses.take().filter(|a| !a.is_empty());
        s.not_ready_addresses = s.not_ready_addresses.take().filter(|a| !a.is_empty());
    }
    true
}

/// The subsets the Service's Endpoints should have, and whether they were truncated.
pub fn desired_subsets(service: &Service, pods: &[&Pod]) -> (Vec<EndpointSubset>, bool) {
    let mut subsets = repack(entries(service, pods));
    let truncated = truncate(&mut subsets);
    subsets.retain(|s| s.addresses.is_some() || s.not_ready_addresses.is_some());
    (subsets, truncated)
}

/// The Endpoints to write for the Service, or `None` when `current` is already right.
pub fn desired(
    service: &Service,
    current: Option<&Endpoints>,
    pods: &[&Pod],
    trigger: Option<jiff::Timestamp>,
) -> Option<Endpoints> {
    let (subsets, truncated) = desired_subsets(service, pods);
    let mut labels = sp::endpoints_labels(service);
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    if let Some(current) = current {
        let same_subsets = current.subsets.clone().unwrap_or_default() == subsets;
        let same_labels = *current.labels() == labels;
        let same_capacity = current.annotations().get(OVER_CAPACITY).map(String::as_str)
            == truncated.then_some("truncated");
        if same_subsets && same_labels && same_capacity {
            return None;
        }
    }
    let mut endpoints = current.cloned().unwrap_or_else(|| Endpoints {
        metadata: ObjectMeta {
            name: Some(service.name_any()),
            namespace: service.namespace(),
            ..Default::default()
        },
        ..Default::default()
    });
    endpoints.metadata.labels = Some(labels);
    let annotations = endpoints.annotations_mut();
    match trigger {
        Some(t) => annotations.insert(LAST_CHANGE_TRIGGER_TIME.into(), sp::format_time(t)),
        None => annotations.remove(LAST_CHANGE_TRIGGER_TIME),
    };
    if truncated {
        annotations.insert(OVER_CAPACITY.into(), "truncated".into());
    } else {
        annotations.remove(OVER_CAPACITY);
    }
    endpoints.subsets = (!subsets.is_empty()).then_some(subsets);
    Some(endpoints)
}

/// Brings the Service's Endpoints up to date with `pods` (all pods of its namespace or more).
pub async fn reconcile(
    service: &Service,
    pods: &[Arc<Pod>],
    triggers: &TriggerTimes,
    api: &dyn EndpointsApi,
) -> kube::Result<()> {
    if !sp::managed(service) {
        return Ok(());
    }
    let selected: Vec<&Pod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| sp::selects(service, p))
        .collect();
    let ns = service.namespace().unwrap_or_default();
    let current = api.get(&ns, &service.name_any()).await?;
    let publish = sp::publish_not_ready(service);
    let listed: Vec<&Pod> = selected
        .iter()
        .copied()
        .filter(|p| sp::should_be_in_endpoints(p, publish))
        .collect();
    let trigger = triggers.compute(service, &listed);
    match desired(service, current.as_ref(), &selected, trigger) {
        None => Ok(()),
        Some(e) if current.is_none() => api.create(&e).await,
        Some(e) => api.replace(&e).await,
    }
}

/// Cleans up after a Service that is gone: its Endpoints are deleted unless they belong to
/// leader election. `service_exists` is asked first, as the informer may lag.
pub async fn service_gone(
    namespace: &str,
    name: &str,
    service_exists: bool,
    api: &dyn EndpointsApi,
) -> kube::Result<()> {
    if service_exists {
        return Ok(());
    }
    match api.get(namespace, name).await? {
        Some(e) if !e.annotations().contains_key(LEADER_ANNOTATION) => {
            api.delete(namespace, name).await
        }
        _ => Ok(()),
    }
}

type KubeEndpoints = sp::Writes<Endpoints>;

#[async_trait]
impl EndpointsApi for KubeEndpoints {
    async fn get(&self, namespace: &str, name: &str) -> kube::Result<Option<Endpoints>> {
        self.api(namespace).get_opt(name).await
    }

    async fn create(&self, object: &Endpoints) -> kube::Result<()> {
        sp::Writes::create(self, object).await.map(drop)
    }

    async fn replace(&self, object: &Endpoints) -> kube::Result<()> {
        sp::Writes::replace(self, object).await.map(drop)
    }

    async fn delete(&self, namespace: &str, name: &str) -> kube::Result<()> {
        sp::Writes::delete(self, namespace, name).await
    }
}

/// Runs the controller: Services are the keys; a pod change queues the Services that select it
/// (now or before), an Endpoints change its Service, and a Service that is gone has its
/// Endpoints deleted.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("endpoint");
    let (services, pods) = sp::queue_services(&ctx.informers, controller.queue());
    let endpoints = ctx.informers.get::<Endpoints>();
    triggers::queue_mapped_keys(&endpoints, controller.queue(), |e: &Endpoints| {
        let ns = e.namespace().unwrap_or_default();
        Some(ObjectRef::new(&e.name_any()).within(&ns))
    });
    services.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    endpoints.cache().wait_until_ready().await;
    tracing::info!("endpoint: caches synced");
    let api = Arc::new(KubeEndpoints::new(ctx.client.clone()));
    let times = Arc::new(TriggerTimes::default());
    let (services, pods) = (services.cache().clone(), pods.cache().clone());
    controller
        .run(move |key: ObjectRef<Service>| {
            let (api, times) = (api.clone(), times.clone());
            let (svc, pods) = (services.get(&key), pods.clone());
            async move {
                let ns = key.namespace.clone().unwrap_or_default();
                let Some(svc) = svc else {
                    times.forget(&ns, &key.name);
                    // the cache may lag behind a Service just created: ask the API server
                    let services: Api<Service> = Api::namespaced(api.0.clone(), &ns);
                    let exists = services.get_opt(&key.name).await?.is_some();
                    service_gone(&ns, &key.name, exists, api.as_ref()).await?;
                    return Ok(Action::AwaitChange);
                };
                reconcile(&svc, &pods.namespaced(&ns), &times, api.as_ref()).await?;
                Ok::<_, kube::Error>(Action::AwaitChange)
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
#[path = "endpoints_tests.rs"]
mod tests;
