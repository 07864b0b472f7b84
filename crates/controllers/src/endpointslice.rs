//! `endpointslice`: the discovery.k8s.io/v1 EndpointSlices of every Service with a selector
//! (upstream's EndpointSliceController): IPv4 slices named `<service>-<random>`, labelled with
//! the Service name and this controller as manager and owned by the Service, one endpoint per
//! selected pod with an IP (ready/serving/terminating conditions, targetRef, nodeName, zone from
//! the node's `topology.kubernetes.io/zone`, hostname), slices grouped by the ports each pod
//! resolves, at most `--max-endpoints-per-slice` endpoints each; updates reuse the slices that
//! exist (changed slices first), and a Service without endpoints keeps one empty placeholder.
//! Slices of a deleted Service go with it through the garbage collector (their owner reference).
//! Slices are read from the shared cache, or from the API server while the cache has not shown
//! this controller's own last writes of a Service's slices ([`Unseen`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{ListParams, ObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use parking_lot::Mutex;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::informer::Change;

use crate::Context;
use crate::service_pods::{self as sp, LAST_CHANGE_TRIGGER_TIME, TriggerTimes};

/// The label naming a slice's Service.
pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
/// The label naming who manages a slice, and this controller's value.
pub const MANAGED_BY: (&str, &str) = (
    "endpointslice.kubernetes.io/managed-by",
    "endpointslice-controller.k8s.io",
);
/// The node label an endpoint's zone comes from.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The writes this controller makes.
#[async_trait]
pub trait SlicesApi: Send + Sync {
    /// This controller's slices labelled with the Service's name in its namespace.
    async fn list(&self, namespace: &str, service: &str) -> kube::Result<Vec<EndpointSlice>>;
    /// Creates a slice (named by `generateName`).
    async fn create(&self, slice: &EndpointSlice) -> kube::Result<()>;
    /// Replaces a slice (with the resourceVersion read).
    async fn replace(&self, slice: &EndpointSlice) -> kube::Result<()>;
    /// Deletes a slice; a missing one is not an error.
    async fn delete(&self, namespace: &str, name: &str) -> kube::Result<()>;
}

/// The writes that bring a Service's slices up to date.
#[derive(Debug, Default)]
pub struct Plan {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<String>,
}

/// An endpoint's identity within a Service: its pod, else its first address.
fn endpoint_key(e: &Endpoint) -> String {
    e.target_ref
        .as_ref()
        .and_then(|r| r.name.clone())
        .unwrap_or_else(|| e.addresses.first().cloned().unwrap_or_default())
}

/// A port list's identity (slices hold endpoints with identical ports).
fn ports_key(ports: &[EndpointPort]) -> String {
    serde_json::to_string(ports).unwrap_or_default()
}

/// The endpoint for a pod, as upstream's `podToEndpoint`.
fn endpoint(service: &Service, pod: &Pod, ip: String, zone: Option<String>) -> Endpoint {
    let publish = sp::publish_not_ready(service);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let serving = publish || sp::is_ready(pod);
    Endpoint {
        addresses: vec![ip],
        conditions: Some(EndpointConditions {
            ready: Some(serving && (publish || !terminating)),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: sp::hostname(pod, service),
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.namespace(),
            name: Some(pod.name_any()),
            uid: pod.uid(),
            ..Default::default()
        }),
        zone,
        ..Default::default()
    }
}

/// The ports a pod serves for the Service (those its target ports resolve to).
fn endpoint_ports(service: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = service.spec.as_ref().and_then(|s| s.ports.as_ref());
    ports
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(sp::find_port(pod, p)?),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect()
}

/// The endpoints the Service should have, by port list: key → (ports, endpoint key → endpoint).
type Desired = BTreeMap<String, (Vec<EndpointPort>, BTreeMap<String, Endpoint>)>;

fn desired(service: &Service, pods: &[&Pod], zone: &dyn Fn(&str) -> Option<String>) -> Desired {
    let mut out: Desired = BTreeMap::new();
    for pod in pods {
        if !sp::should_be_in_endpoints(pod, true) {
            continue;
        }
        let Some(ip) = sp::pod_ip(pod) else { continue };
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let e = endpoint(service, pod, ip, node.and_then(zone));
        let ports = endpoint_ports(service, pod);
        let entry = out
            .entry(ports_key(&ports))
            .or_insert_with(|| (ports, BTreeMap::new()));
        entry.1.insert(endpoint_key(&e), e);
    }
    out
}

/// The labels the Service's slices carry (upstream's `setEndpointSliceLabels`).
fn slice_labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = sp::endpoints_labels(service);
    labels.insert(SERVICE_NAME.into(), service.name_any());
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    labels
}

fn new_slice(
    service: &Service,
    ports: Vec<EndpointPort>,
    endpoints: Vec<Endpoint>,
) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", service.name_any())),
            namespace: service.namespace(),
            labels: Some(slice_labels(service)),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: service.name_any(),
                uid: service.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(ports),
    }
}

fn annotate(slice: &mut EndpointSlice, trigger: Option<jiff::Timestamp>) {
    match trigger {
        Some(t) => {
            slice
                .annotations_mut()
                .insert(LAST_CHANGE_TRIGGER_TIME.into(), sp::format_time(t));
        }
        None => {
            slice.annotations_mut().remove(LAST_CHANGE_TRIGGER_TIME);
        }
    }
}

/// Whether a slice is this controller's, for this Service.
fn ours(service: &Service, slice: &EndpointSlice) -> bool {
    let labels = slice.labels();
    labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
        && labels.get(SERVICE_NAME) == Some(&service.name_any())
        && slice.address_type == "IPv4"
}

/// Upstream's reconciler in short: existing slices keep the endpoints still wanted (updated in
/// place), lose the others, and take new endpoints while they have room, the slices already
/// changing first; what is left goes into one unchanged slice that can hold it all, else into
/// new slices; emptied slices are deleted, except that a Service without endpoints keeps one
/// empty placeholder.
pub fn plan(
    service: &Service,
    existing: &[EndpointSlice],
    pods: &[&Pod],
    zone: &(dyn Fn(&str) -> Option<String> + Sync),
    max: usize,
    trigger: Option<jiff::Timestamp>,
) -> Plan {
    let mut want = desired(service, pods, zone);
    let labels = slice_labels(service);
    let mut plan = Plan::default();
    let existing: Vec<&EndpointSlice> = existing.iter().filter(|s| ours(service, s)).collect();

    if want.is_empty() {
        let placeholder = existing
            .iter()
            .find(|s| s.endpoints.is_empty() && s.ports.as_deref().unwrap_or(&[]).is_empty());
        for s in &existing {
            if Some(s) != placeholder {
                plan.delete.push(s.name_any());
            }
        }
        match placeholder {
            Some(p) if *p.labels() == labels => {}
            Some(p) => {
                let mut p = (*p).clone();
                p.metadata.labels = Some(labels);
                plan.update.push(p);
            }
            None => plan.create.push(new_slice(service, vec![], vec![])),
        }
        return plan;
    }

    // (slice, changed) per port list
    let mut kept: BTreeMap<String, Vec<(EndpointSlice, bool)>> = BTreeMap::new();
    for s in existing {
        let key = ports_key(s.ports.as_deref().unwrap_or(&[]));
        let Some((_, wanted)) = want.get_mut(&key) else {
            plan.delete.push(s.name_any());
            continue;
        };
        let mut slice = s.clone();
        slice.endpoints = s
            .endpoints
            .iter()
            .filter_map(|e| wanted.remove(&endpoint_key(e)))
            .collect();
        let changed = slice.endpoints != s.endpoints || *s.labels() != labels;
        slice.metadata.labels = Some(labels.clone());
        kept.entry(key).or_default().push((slice, changed));
    }

    for (key, (ports, wanted)) in want {
        let mut rest: Vec<Endpoint> = wanted.into_values().collect();
        let slices = kept.entry(key).or_default();
        // 1. slices that change anyway take what they have room for
        for (slice, changed) in slices.iter_mut().filter(|(_, c)| *c) {
            let room = max.saturating_sub(slice.endpoints.len());
            let take = room.min(rest.len());
            slice.endpoints.extend(rest.drain(..take));
            *changed = true;
        }
        // 2. one unchanged slice that can hold all the rest, the fullest first
        if !rest.is_empty() {
            let fits = slices
                .iter_mut()
                .filter(|(s, c)| !*c && max.saturating_sub(s.endpoints.len()) >= rest.len())
                .max_by_key(|(s, _)| s.endpoints.len());
            if let Some((slice, changed)) = fits {
                slice.endpoints.append(&mut rest);
                *changed = true;
            }
        }
        // 3. new slices for what is left
        while !rest.is_empty() {
            let take = max.min(rest.len());
            let mut s = new_slice(service, ports.clone(), rest.drain(..take).collect());
            annotate(&mut s, trigger);
            plan.create.push(s);
        }
    }
    for (mut slice, changed) in kept.into_values().flatten() {
        if slice.endpoints.is_empty() {
            plan.delete.push(slice.name_any());
        } else if changed {
            annotate(&mut slice, trigger);
            plan.update.push(slice);
        }
    }
    plan
}

/// Brings the Service's slices up to date with `pods` (all pods of its namespace or more).
pub async fn reconcile(
    service: &Service,
    pods: &[Arc<Pod>],
    zone: &(dyn Fn(&str) -> Option<String> + Sync),
    max: usize,
    triggers: &TriggerTimes,
    api: &dyn SlicesApi,
) -> kube::Result<()> {
    if !sp::managed(service) || service.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let selected: Vec<&Pod> = pods
        .iter()
        .map(Arc::as_ref)
        .filter(|p| sp::selects(service, p) && sp::should_be_in_endpoints(p, true))
        .collect();
    let ns = service.namespace().unwrap_or_default();
    let existing = api.list(&ns, &service.name_any()).await?;
    let trigger = triggers.compute(service, &selected);
    let plan = plan(service, &existing, &selected, zone, max, trigger);
    // creates and updates before deletes, so that the Service never has no slices in between
    for s in &plan.create {
        api.create(s).await?;
    }
    for s in &plan.update {
        api.replace(s).await?;
    }
    for name in &plan.delete {
        api.delete(&ns, name).await?;
    }
    Ok(())
}

/// This controller's writes of slices that the cache has not shown yet, per Service (upstream's
/// `EndpointSliceTracker`): while a Service has some, its cached slices are stale.
#[derive(Default)]
pub struct Unseen {
    /// Service → slice name → the generation its last write returned (`None`: a delete).
    /// Guarded alone, never across an await.
    writes: Mutex<HashMap<sp::NamespacedName, HashMap<String, Option<i64>>>>,
}

/// The Service (namespace, name) a slice is labelled with.
fn service_of(slice: &EndpointSlice) -> sp::NamespacedName {
    let service = slice.labels().get(SERVICE_NAME).cloned();
    (
        slice.namespace().unwrap_or_default(),
        service.unwrap_or_default(),
    )
}

impl Unseen {
    /// Records a write of `slice` (as the API server returned it; `deleted` for a delete).
    pub fn wrote(&self, slice: &EndpointSlice, deleted: bool) {
        let generation = (!deleted).then(|| slice.metadata.generation.unwrap_or(0));
        let mut writes = self.writes.lock();
        let service = writes.entry(service_of(slice)).or_default();
        service.insert(slice.name_any(), generation);
    }

    /// The informer saw `slice` deleted: no write of it is awaited any more.
    pub fn deleted(&self, slice: &EndpointSlice) {
        let mut writes = self.writes.lock();
        let service = service_of(slice);
        if let Some(unseen) = writes.get_mut(&service) {
            unseen.remove(&slice.name_any());
            if unseen.is_empty() {
                writes.remove(&service);
            }
        }
    }

    /// Whether `cached` (the Service's slices in the cache) shows every write awaited; forgets
    /// those it shows.
    pub fn caught_up(&self, service: &sp::NamespacedName, cached: &[EndpointSlice]) -> bool {
        let mut writes = self.writes.lock();
        let Some(unseen) = writes.get_mut(service) else {
            return true;
        };
        unseen.retain(|name, generation| {
            let now = cached.iter().find(|s| s.name_any() == *name);
            match (*generation, now) {
                (Some(g), Some(s)) => s.metadata.generation.unwrap_or(0) < g,
                (None, None) => false,
                _ => true,
            }
        });
        let caught_up = unseen.is_empty();
        if caught_up {
            writes.remove(service);
        }
        caught_up
    }
}

/// The API server's slices, read from the shared cache; a Service whose cached slices lag
/// behind this controller's own writes ([`Unseen`]) is listed from the API server instead, so
/// that a sync never creates a slice again because the cache does not show it yet.
struct KubeSlices {
    writes: sp::Writes<EndpointSlice>,
    cache: Cache<EndpointSlice>,
    unseen: Unseen,
}

#[async_trait]
impl SlicesApi for KubeSlices {
    async fn list(&self, namespace: &str, service: &str) -> kube::Result<Vec<EndpointSlice>> {
        let cached: Vec<EndpointSlice> = self
            .cache
            .namespaced(namespace)
            .iter()
            .filter(|s| s.labels().get(SERVICE_NAME).map(String::as_str) == Some(service))
            .map(|s| s.as_ref().clone())
            .collect();
        if self
            .unseen
            .caught_up(&(namespace.into(), service.into()), &cached)
        {
            return Ok(cached);
        }
        let lp = ListParams::default().labels(&format!("{SERVICE_NAME}={service}"));
        Ok(self.writes.api(namespace).list(&lp).await?.items)
    }

    async fn create(&self, object: &EndpointSlice) -> kube::Result<()> {
        let created = self.writes.create(object).await?;
        self.unseen.wrote(&created, false);
        Ok(())
    }

    async fn replace(&self, object: &EndpointSlice) -> kube::Result<()> {
        let replaced = self.writes.replace(object).await?;
        self.unseen.wrote(&replaced, false);
        Ok(())
    }

    async fn delete(&self, namespace: &str, name: &str) -> kube::Result<()> {
        self.writes.delete(namespace, name).await?;
        if let Some(slice) = self.cache.get(&ObjectRef::new(name).within(namespace)) {
            self.unseen.wrote(&slice, true);
        }
        Ok(())
    }
}

/// Runs the controller: Services are the keys; a pod change queues the Services that select it
/// (now or before), a change of one of this controller's slices the Service it is labelled with.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("endpoint_slice");
    let (services, pods) = sp::queue_services(&ctx.informers, controller.queue());
    // nodes only give zones; they queue nothing
    let nodes = ctx.informers.get::<Node>();
    let managed = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
    let slices = ctx
        .informers
        .filtered::<EndpointSlice>(watcher::Config::default().labels(&managed));
    let api = Arc::new(KubeSlices {
        writes: sp::Writes::new(ctx.client.clone()),
        cache: slices.cache().clone(),
        unseen: Unseen::default(),
    });
    slices.add_handler({
        let (queue, api) = (controller.queue().clone(), api.clone());
        move |change| {
            let s = change.object();
            if let Change::Deleted { last, .. } = change {
                api.unseen.deleted(last);
            }
            if let Some(name) = s.labels().get(SERVICE_NAME) {
                let ns = s.namespace().unwrap_or_default();
                queue.add(ObjectRef::new(name).within(&ns));
            }
        }
    });
    services.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    nodes.cache().wait_until_ready().await;
    slices.cache().wait_until_ready().await;
    tracing::info!("endpoint_slice: caches synced");
    let times = Arc::new(TriggerTimes::default());
    let max = ctx.config.max_endpoints_per_slice;
    let (services, pods, nodes) = (
        services.cache().clone(),
        pods.cache().clone(),
        nodes.cache().clone(),
    );
    controller
        .run(move |key: ObjectRef<Service>| {
            let (api, times) = (api.clone(), times.clone());
            let (svc, pods, nodes) = (services.get(&key), pods.clone(), nodes.clone());
            async move {
                let ns = key.namespace.clone().unwrap_or_default();
                let Some(svc) = svc else {
                    // its slices go with it through the garbage collector
                    times.forget(&ns, &key.name);
                    return Ok(Action::AwaitChange);
                };
                let zone = |node: &str| {
                    let node = nodes.get(&ObjectRef::new(node))?;
                    node.labels().get(ZONE_LABEL).cloned()
                };
                let pods = pods.namespaced(&ns);
                reconcile(&svc, &pods, &zone, max, &times, api.as_ref()).await?;
                Ok::<_, kube::Error>(Action::AwaitChange)
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
#[path = "endpointslice_tests.rs"]
mod tests;
