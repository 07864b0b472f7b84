//! Unit tests of the `endpointslice` controller against a recording fake of its writes.

use super::*;
use crate::service_pods::tests::{pod, service};
use parking_lot::Mutex;
use serde_json::json;

/// Slices in memory: creates get names `<generateName><n>`.
#[derive(Default)]
struct Recording {
    slices: Mutex<Vec<EndpointSlice>>,
    writes: Mutex<Vec<String>>,
}

#[async_trait]
impl SlicesApi for Recording {
    async fn list(&self, _: &str, service: &str) -> kube::Result<Vec<EndpointSlice>> {
        let all = self.slices.lock().clone();
        Ok(all
            .into_iter()
            .filter(|s| s.labels().get(SERVICE_NAME).map(String::as_str) == Some(service))
            .collect())
    }
    async fn create(&self, s: &EndpointSlice) -> kube::Result<()> {
        let mut s = s.clone();
        let n = self.writes.lock().len();
        s.metadata.name = Some(format!("{}{n}", s.metadata.generate_name.clone().unwrap()));
        self.writes.lock().push(format!("create {}", s.name_any()));
        self.slices.lock().push(s);
        Ok(())
    }
    async fn replace(&self, s: &EndpointSlice) -> kube::Result<()> {
        self.writes.lock().push(format!("update {}", s.name_any()));
        let mut all = self.slices.lock();
        let i = all
            .iter()
            .position(|x| x.name_any() == s.name_any())
            .unwrap();
        all[i] = s.clone();
        Ok(())
    }
    async fn delete(&self, _: &str, name: &str) -> kube::Result<()> {
        self.writes.lock().push(format!("delete {name}"));
        self.slices.lock().retain(|s| s.name_any() != name);
        Ok(())
    }
}

fn web(name: &str, ready: bool, port_name: &str) -> Arc<Pod> {
    let n: u32 = name
        .trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0);
    Arc::new(pod(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "labels": {"app": "web"}},
        "spec": {"nodeName": "node-a", "containers": [{"name": "c", "ports": [
            {"name": port_name, "containerPort": 8080}]}]},
        "status": {"podIP": format!("10.0.{}.{}", n / 200, n % 200 + 1), "phase": "Running",
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    })))
}

fn svc() -> Service {
    service(
        json!({"metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid",
            "labels": {"tier": "front"}},
        "spec": {"selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}}),
    )
}

fn zone(node: &str) -> Option<String> {
    (node == "node-a").then(|| "zone-1".to_string())
}

async fn sync(api: &Recording, pods: &[Arc<Pod>], max: usize) {
    reconcile(&svc(), pods, &zone, max, &TriggerTimes::default(), api)
        .await
        .unwrap();
}

fn endpoint_names(api: &Recording) -> Vec<String> {
    let mut names: Vec<String> = api
        .slices
        .lock()
        .iter()
        .flat_map(|s| s.endpoints.iter().map(endpoint_key))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_slice_lists_each_pod_with_conditions_zone_and_resolved_ports() {
    let api = Recording::default();
    sync(
        &api,
        &[web("p1", true, "http"), web("p2", false, "http")],
        100,
    )
    .await;
    let slices = api.slices.lock().clone();
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.metadata.generate_name.as_deref(), Some("web-"));
    assert_eq!(s.address_type, "IPv4");
    assert_eq!(s.labels()[SERVICE_NAME], "web");
    assert_eq!(s.labels()[MANAGED_BY.0], MANAGED_BY.1);
    assert_eq!(s.labels()["tier"], "front");
    let owner = &s.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Service", "svc-uid", Some(true))
    );
    let port = &s.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port),
        (Some("http"), Some(8080))
    );
    let p1 = s
        .endpoints
        .iter()
        .find(|e| endpoint_key(e) == "p1")
        .unwrap();
    let c = p1.conditions.as_ref().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(true), Some(true), Some(false))
    );
    assert_eq!(p1.zone.as_deref(), Some("zone-1"));
    assert_eq!(p1.node_name.as_deref(), Some("node-a"));
    let p2 = s
        .endpoints
        .iter()
        .find(|e| endpoint_key(e) == "p2")
        .unwrap();
    assert_eq!(p2.conditions.as_ref().unwrap().ready, Some(false));
}

#[tokio::test]
async fn a_terminating_pod_is_listed_not_ready_but_serving() {
    let mut p = (*web("p1", true, "http")).clone();
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let api = Recording::default();
    sync(&api, &[Arc::new(p)], 100).await;
    let s = api.slices.lock()[0].clone();
    let c = s.endpoints[0].conditions.clone().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(true), Some(true))
    );
}

#[tokio::test]
async fn slices_hold_at_most_max_endpoints_and_updates_reuse_them() {
    let api = Recording::default();
    let pods: Vec<Arc<Pod>> = (0..5)
        .map(|i| web(&format!("p{i}"), true, "http"))
        .collect();
    sync(&api, &pods, 2).await;
    assert_eq!(api.slices.lock().len(), 3);
    assert!(api.slices.lock().iter().all(|s| s.endpoints.len() <= 2));
    // unchanged: no writes
    let before = api.writes.lock().len();
    sync(&api, &pods, 2).await;
    assert_eq!(api.writes.lock().len(), before);
    // one pod leaves, another arrives: the changed slice takes the newcomer
    let mut next: Vec<Arc<Pod>> = pods[1..].to_vec();
    next.push(web("p9", true, "http"));
    sync(&api, &next, 2).await;
    let writes = api.writes.lock()[before..].to_vec();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].starts_with("update "), "{writes:?}");
    assert_eq!(endpoint_names(&api), vec!["p1", "p2", "p3", "p4", "p9"]);
}

#[tokio::test]
async fn pods_resolving_different_ports_get_different_slices_and_unresolved_ones_none() {
    let api = Recording::default();
    sync(
        &api,
        &[web("p1", true, "http"), web("p2", true, "other")],
        100,
    )
    .await;
    let slices = api.slices.lock().clone();
    assert_eq!(slices.len(), 2);
    let with_port = slices
        .iter()
        .find(|s| !s.ports.as_ref().unwrap().is_empty())
        .unwrap();
    assert_eq!(with_port.endpoints.len(), 1);
    assert_eq!(endpoint_key(&with_port.endpoints[0]), "p1");
}

#[tokio::test]
async fn a_service_without_endpoints_keeps_one_placeholder() {
    let api = Recording::default();
    sync(&api, &[web("p1", true, "http")], 100).await;
    sync(&api, &[], 100).await;
    let slices = api.slices.lock().clone();
    assert_eq!(slices.len(), 1, "{slices:?}");
    assert!(slices[0].endpoints.is_empty());
    assert_eq!(slices[0].ports.as_deref(), Some(&[][..]));
    let before = api.writes.lock().len();
    sync(&api, &[], 100).await;
    assert_eq!(api.writes.lock().len(), before);
    // an endpoint arrives: a real slice, the placeholder goes
    sync(&api, &[web("p1", true, "http")], 100).await;
    assert_eq!(endpoint_names(&api), vec!["p1"]);
    assert_eq!(api.slices.lock().len(), 1);
}

#[tokio::test]
async fn slices_of_other_managers_are_left_alone() {
    let api = Recording::default();
    let mut foreign = new_slice(&svc(), vec![], vec![]);
    foreign.metadata.name = Some("mine".into());
    foreign
        .labels_mut()
        .insert(MANAGED_BY.0.into(), "someone-else".into());
    api.slices.lock().push(foreign);
    sync(&api, &[web("p1", true, "http")], 100).await;
    assert!(api.writes.lock().iter().all(|w| !w.contains("mine")));
    assert_eq!(api.slices.lock().len(), 2);
}

#[test]
fn cached_slices_are_stale_until_they_show_every_write_of_this_controller() {
    let slice = |name: &str, generation: i64| -> EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "generation": generation,
                "labels": {SERVICE_NAME: "web"}},
            "addressType": "IPv4", "endpoints": [],
        }))
        .unwrap()
    };
    let web = ("ns".to_string(), "web".to_string());
    let unseen = Unseen::default();
    assert!(
        unseen.caught_up(&web, &[]),
        "nothing written, nothing awaited"
    );
    unseen.wrote(&slice("a", 1), false);
    assert!(
        !unseen.caught_up(&web, &[]),
        "a created slice not cached yet"
    );
    unseen.wrote(&slice("a", 2), false);
    assert!(
        !unseen.caught_up(&web, &[slice("a", 1)]),
        "an older generation"
    );
    assert!(unseen.caught_up(&web, &[slice("a", 2)]));
    assert!(unseen.caught_up(&web, &[]), "what was seen is forgotten");

    unseen.wrote(&slice("a", 2), true);
    assert!(
        !unseen.caught_up(&web, &[slice("a", 2)]),
        "a deleted slice still cached"
    );
    assert!(unseen.caught_up(&web, &[]));
    // a slice someone else deleted before the cache showed this controller's write
    unseen.wrote(&slice("b", 1), false);
    unseen.deleted(&slice("b", 1));
    assert!(unseen.caught_up(&web, &[]));
}
