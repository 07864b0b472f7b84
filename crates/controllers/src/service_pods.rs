//! What the `endpoints` and `endpointslice` controllers share (upstream's
//! `pkg/controller/util/endpoint` and `endpointslice/util`): which pods a Service selects and
//! which of them belong in its endpoints, a pod's readiness and address, target port resolution
//! (named ports per pod), the hostname rule, the pod → Services index that turns pod changes into
//! Service keys ([`queue_services`] subscribes it to the shared informers), the last-change
//! trigger time tracker, and [`Writes`] (the create, replace and delete both make).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use parking_lot::Mutex;
use skiff_runtime::informer::{Change, Informer, Informers};
use skiff_runtime::workqueue::WorkQueue;

use crate::triggers;

/// The annotation with the time of the change that caused this endpoints update.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// The label a headless Service's endpoints carry.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

/// Creates, replaces and deletes namespaced objects of `K` through the API server: the writes
/// of the `endpoints` (Endpoints) and `endpointslice` (EndpointSlices) controllers.
pub struct Writes<K>(pub kube::Client, std::marker::PhantomData<K>);

impl<K> Writes<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    pub fn new(client: kube::Client) -> Writes<K> {
        Writes(client, std::marker::PhantomData)
    }

    pub fn api(&self, namespace: &str) -> Api<K> {
        Api::namespaced(self.0.clone(), namespace)
    }

    /// Creates the object; returns it as written.
    pub async fn create(&self, object: &K) -> kube::Result<K> {
        let ns = object.namespace().unwrap_or_default();
        self.api(&ns).create(&PostParams::default(), object).await
    }

    /// Replaces the object; returns it as written.
    pub async fn replace(&self, object: &K) -> kube::Result<K> {
        let ns = object.namespace().unwrap_or_default();
        self.api(&ns)
            .replace(&object.name_any(), &PostParams::default(), object)
            .await
    }

    /// Deletes the object; one already gone is not an error.
    pub async fn delete(&self, namespace: &str, name: &str) -> kube::Result<()> {
        match self
            .api(namespace)
            .delete(name, &DeleteParams::default())
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// The Service and Pod informers both controllers read, with handlers that queue into `queue`
/// a Service's key on every change of it, and on every pod change the Services that select the
/// pod now or did at its previous change ([`PodServices`]).
pub fn queue_services(
    informers: &Informers,
    queue: &WorkQueue<ObjectRef<Service>>,
) -> (Informer<Service>, Informer<Pod>) {
    let services = informers.get::<Service>();
    let pods = informers.get::<Pod>();
    // a deleted Service too: its endpoints go with it
    triggers::queue_mapped_keys(&services, queue, |s: &Service| Some(ObjectRef::from_obj(s)));
    pods.add_handler({
        let (queue, services) = (queue.clone(), services.cache().clone());
        let index = PodServices::default();
        move |change: &Change<Pod>| {
            let pod = change.object();
            let gone = matches!(change, Change::Deleted { .. });
            let candidates = services.namespaced(&pod.namespace().unwrap_or_default());
            for key in index.services_for(pod, gone, &candidates) {
                queue.add(key);
            }
        }
    });
    (services, pods)
}

/// Whether `service` selects `pod`: same namespace and a non-empty selector its labels match.
/// A Service without selector selects nothing (its endpoints are someone else's).
pub fn selects(service: &Service, pod: &Pod) -> bool {
    let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if selector.is_empty() || service.namespace() != pod.namespace() {
        return false;
    }
    let labels = pod.labels();
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Whether this controller manages `service`'s endpoints: it has a selector and is not
/// `ExternalName`.
pub fn managed(service: &Service) -> bool {
    let Some(spec) = service.spec.as_ref() else {
        return false;
    };
    spec.selector.is_some() && spec.type_.as_deref() != Some("ExternalName")
}

/// Whether the Service is headless (`clusterIP: None`).
pub fn headless(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// Whether the Service publishes pods that are not ready.
pub fn publish_not_ready(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// Upstream's `ShouldPodBeInEndpoints`: the pod has an IP, is not terminating (unless
/// `include_terminating`), and has not finished for good under its restart policy.
pub fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if pod_ip(pod).is_none() {
        return false;
    }
    if !include_terminating && pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => !matches!(phase, Some("Failed" | "Succeeded")),
        Some("OnFailure") => phase != Some("Succeeded"),
        _ => true,
    }
}

/// Whether the pod's `Ready` condition is `True`.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The pod's IPv4 address (`status.podIPs`, else `status.podIP`).
pub fn pod_ip(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let ips = status.pod_ips.iter().flatten().map(|ip| ip.ip.clone());
    let all: Vec<String> = status.pod_ip.iter().cloned().chain(ips).collect();
    all.iter()
        .find(|ip| ip.parse::<std::net::Ipv4Addr>().is_ok())
        .cloned()
}

/// Upstream's `FindPort`: the container port a Service port targets on this pod. A named
/// `targetPort` resolves to the container port of that name and protocol; a pod that has none
/// is left out for that port (`None`).
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(s)) => {
            if let Ok(n) = s.parse::<i32>() {
                return Some(n);
            }
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(s.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// Upstream's `ShouldSetHostname`: the pod's `hostname` is published when its `subdomain` is
/// this Service's name.
pub fn hostname(pod: &Pod, service: &Service) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let hostname = spec.hostname.as_ref().filter(|h| !h.is_empty())?;
    (spec.subdomain.as_deref() == Some(service.name_any().as_str())
        && pod.namespace() == service.namespace())
    .then(|| hostname.clone())
}

/// The labels a Service's endpoints carry: the Service's own, plus the headless label for a
/// headless Service.
pub fn endpoints_labels(service: &Service) -> BTreeMap<String, String> {
    let mut labels = service.labels().clone();
    labels.remove(HEADLESS_LABEL);
    if headless(service) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels
}

/// `(namespace, name)` of an object.
pub type NamespacedName = (String, String);

/// The Services (in `services`) a pod change concerns: those that select the pod now and those
/// that selected it at its previous change (so that a relabelled or deleted pod leaves them).
#[derive(Default)]
pub struct PodServices {
    /// Pod (namespace/name) → the Services that selected it last time. Guarded alone.
    last: Mutex<HashMap<NamespacedName, Vec<ObjectRef<Service>>>>,
}

impl PodServices {
    /// The Service keys to reconcile for this pod event; `gone` says the pod no longer exists.
    pub fn services_for(
        &self,
        pod: &Pod,
        gone: bool,
        services: &[Arc<Service>],
    ) -> Vec<ObjectRef<Service>> {
        let key = (pod.namespace().unwrap_or_default(), pod.name_any());
        let now: Vec<ObjectRef<Service>> = services
            .iter()
            .filter(|s| selects(s, pod))
            .map(|s| ObjectRef::from(s.as_ref()))
            .collect();
        let mut last = self.last.lock();
        let before = if gone {
            last.remove(&key)
        } else {
            last.insert(key, now.clone())
        };
        let mut all = now;
        for r in before.into_iter().flatten() {
            if !all.contains(&r) {
                all.push(r);
            }
        }
        all
    }
}

/// When a pod last changed in a way that matters to endpoints: its `Ready` condition's last
/// transition, else its creation.
fn pod_trigger_time(pod: &Pod) -> Option<jiff::Timestamp> {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    ready.or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// Upstream's `TriggerTimeTracker`: the earliest trigger time among the pods (or the Service)
/// that changed since the Service's last sync, for the `last-change-trigger-time` annotation.
#[derive(Default)]
pub struct TriggerTimes {
    /// Service (namespace/name) → its pods' trigger times at the last sync. Guarded alone.
    seen: Mutex<HashMap<NamespacedName, HashMap<String, jiff::Timestamp>>>,
}

impl TriggerTimes {
    /// The time to annotate the Service's endpoints with, and records `pods` (those that belong
    /// in its endpoints: a pod that gets its IP later counts as changed then) as seen.
    pub fn compute(&self, service: &Service, pods: &[&Pod]) -> Option<jiff::Timestamp> {
        let key = (service.namespace().unwrap_or_default(), service.name_any());
        let now: HashMap<String, jiff::Timestamp> = pods
            .iter()
            .filter_map(|p| Some((p.name_any(), pod_trigger_time(p)?)))
            .collect();
        let mut seen = self.seen.lock();
        let min = match seen.get(&key) {
            None => service.metadata.creation_timestamp.as_ref().map(|t| t.0),
            Some(before) => now
                .iter()
                .filter(|(name, t)| before.get(*name) != Some(t))
                .map(|(_, t)| *t)
                .min(),
        };
        seen.insert(key, now);
        min
    }

    /// Forgets a deleted Service.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.seen.lock().remove(&(namespace.into(), name.into()));
    }
}

/// An RFC 3339 time with nanoseconds, as upstream formats the trigger time.
pub fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.fZ").to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    pub fn service(value: serde_json::Value) -> Service {
        serde_json::from_value(value).unwrap()
    }

    fn web_pod() -> Pod {
        pod(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080},
                {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]},
            "status": {"podIP": "10.0.0.1", "phase": "Running"}
        }))
    }

    #[test]
    fn a_selector_matches_pods_in_the_same_namespace_only() {
        let svc = service(json!({"metadata": {"name": "s", "namespace": "ns"},
            "spec": {"selector": {"app": "web"}}}));
        assert!(selects(&svc, &web_pod()));
        let mut other = web_pod();
        other.metadata.namespace = Some("other".into());
        assert!(!selects(&svc, &other));
        let none = service(json!({"metadata": {"name": "s", "namespace": "ns"}, "spec": {}}));
        assert!(!selects(&none, &web_pod()));
        assert!(!managed(&none));
    }

    #[test]
    fn named_target_ports_resolve_per_pod_and_protocol() {
        let port = |target: serde_json::Value, protocol: &str| -> ServicePort {
            serde_json::from_value(json!({"port": 80, "targetPort": target, "protocol": protocol}))
                .unwrap()
        };
        assert_eq!(
            find_port(&web_pod(), &port(json!("http"), "TCP")),
            Some(8080)
        );
        assert_eq!(find_port(&web_pod(), &port(json!("http"), "UDP")), None);
        assert_eq!(find_port(&web_pod(), &port(json!("dns"), "UDP")), Some(53));
        assert_eq!(find_port(&web_pod(), &port(json!("nosuch"), "TCP")), None);
        assert_eq!(find_port(&web_pod(), &port(json!(9090), "TCP")), Some(9090));
    }

    #[test]
    fn pods_without_ip_terminating_or_finished_are_left_out() {
        assert!(should_be_in_endpoints(&web_pod(), false));
        let mut no_ip = web_pod();
        no_ip.status.as_mut().unwrap().pod_ip = None;
        assert!(!should_be_in_endpoints(&no_ip, true));
        let mut terminating = web_pod();
        terminating.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert!(!should_be_in_endpoints(&terminating, false));
        assert!(should_be_in_endpoints(&terminating, true));
        let mut done = web_pod();
        done.spec.as_mut().unwrap().restart_policy = Some("Never".into());
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(!should_be_in_endpoints(&done, false));
    }

    #[test]
    fn a_relabelled_or_deleted_pod_still_names_the_services_it_left() {
        let svc = Arc::new(service(
            json!({"metadata": {"name": "s", "namespace": "ns"},
            "spec": {"selector": {"app": "web"}}}),
        ));
        let index = PodServices::default();
        let services = [svc.clone()];
        assert_eq!(index.services_for(&web_pod(), false, &services).len(), 1);
        let mut relabelled = web_pod();
        relabelled.labels_mut().insert("app".into(), "db".into());
        assert_eq!(index.services_for(&relabelled, false, &services).len(), 1);
        assert!(index.services_for(&relabelled, false, &services).is_empty());
        index.services_for(&web_pod(), false, &services);
        assert_eq!(index.services_for(&web_pod(), true, &services).len(), 1);
    }

    #[test]
    fn the_trigger_time_is_the_earliest_change_since_the_last_sync() {
        let svc = service(json!({"metadata": {"name": "s", "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:00Z"}}));
        let mut a = web_pod();
        a.metadata.creation_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:01:00Z")).unwrap());
        let times = TriggerTimes::default();
        let first = times.compute(&svc, &[&a]).unwrap();
        assert_eq!(format_time(first), "2026-01-01T00:00:00Z");
        assert_eq!(times.compute(&svc, &[&a]), None);
        let mut b = web_pod();
        b.metadata.name = Some("b".into());
        b.metadata.creation_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:02:00Z")).unwrap());
        let t = times.compute(&svc, &[&a, &b]).unwrap();
        assert_eq!(format_time(t), "2026-01-01T00:02:00Z");
    }
}
