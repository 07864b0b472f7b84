//! Unit tests of the `endpoints` controller against a recording fake of its writes.

use super::*;
use crate::service_pods::tests::{pod, service};
use parking_lot::Mutex;
use serde_json::json;

#[derive(Default)]
struct Recording {
    current: Mutex<Option<Endpoints>>,
    writes: Mutex<Vec<String>>,
}

#[async_trait]
impl EndpointsApi for Recording {
    async fn get(&self, _: &str, _: &str) -> kube::Result<Option<Endpoints>> {
        Ok(self.current.lock().clone())
    }
    async fn create(&self, e: &Endpoints) -> kube::Result<()> {
        self.writes.lock().push(format!("create {}", e.name_any()));
        *self.current.lock() = Some(e.clone());
        Ok(())
    }
    async fn replace(&self, e: &Endpoints) -> kube::Result<()> {
        self.writes.lock().push(format!("replace {}", e.name_any()));
        *self.current.lock() = Some(e.clone());
        Ok(())
    }
    async fn delete(&self, ns: &str, name: &str) -> kube::Result<()> {
        self.writes.lock().push(format!("delete {ns}/{name}"));
        *self.current.lock() = None;
        Ok(())
    }
}

fn web(name: &str, ip: &str, ready: bool, ports: serde_json::Value) -> Arc<Pod> {
    Arc::new(pod(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
            "labels": {"app": "web"}},
        "spec": {"nodeName": "node-0", "containers": [{"name": "c", "ports": ports}]},
        "status": {"podIP": ip, "phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
    })))
}

fn svc(extra: serde_json::Value) -> Service {
    let mut spec = json!({"selector": {"app": "web"}, "clusterIP": "10.96.0.10",
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]});
    spec.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    service(
        json!({"metadata": {"name": "web", "namespace": "ns", "labels": {"tier": "front"},
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec}),
    )
}

fn ips(addresses: &Option<Vec<EndpointAddress>>) -> Vec<String> {
    addresses.iter().flatten().map(|a| a.ip.clone()).collect()
}

#[tokio::test]
async fn ready_and_not_ready_pods_are_split_and_named_ports_resolve_per_pod() {
    let http = json!([{"name": "http", "containerPort": 8080}]);
    let pods = vec![
        web("a", "10.0.0.2", true, http.clone()),
        web("b", "10.0.0.1", false, http.clone()),
        web(
            "c",
            "10.0.0.3",
            true,
            json!([{"name": "other", "containerPort": 9}]),
        ),
    ];
    let api = Recording::default();
    reconcile(&svc(json!({})), &pods, &TriggerTimes::default(), &api)
        .await
        .unwrap();
    assert_eq!(*api.writes.lock(), vec!["create web"]);
    let e = api.current.lock().clone().unwrap();
    let subsets = e.subsets.unwrap();
    assert_eq!(subsets.len(), 1, "{subsets:?}");
    assert_eq!(ips(&subsets[0].addresses), vec!["10.0.0.2"]);
    assert_eq!(ips(&subsets[0].not_ready_addresses), vec!["10.0.0.1"]);
    let ports = subsets[0].ports.clone().unwrap();
    assert_eq!(ports[0].port, 8080);
    assert_eq!(ports[0].name.as_deref(), Some("http"));
    let a = &subsets[0].addresses.as_ref().unwrap()[0];
    assert_eq!(a.node_name.as_deref(), Some("node-0"));
    let target = a.target_ref.as_ref().unwrap();
    assert_eq!(
        (target.kind.as_deref(), target.name.as_deref()),
        (Some("Pod"), Some("a"))
    );
    assert_eq!(e.metadata.labels.unwrap()["tier"], "front");
    assert!(
        e.metadata
            .annotations
            .unwrap()
            .contains_key(LAST_CHANGE_TRIGGER_TIME)
    );
}

#[tokio::test]
async fn an_unchanged_service_is_not_rewritten_and_a_change_replaces() {
    let http = json!([{"name": "http", "containerPort": 8080}]);
    let api = Recording::default();
    let triggers = TriggerTimes::default();
    let mut pods = vec![web("a", "10.0.0.1", true, http.clone())];
    reconcile(&svc(json!({})), &pods, &triggers, &api)
        .await
        .unwrap();
    reconcile(&svc(json!({})), &pods, &triggers, &api)
        .await
        .unwrap();
    pods.push(web("b", "10.0.0.2", true, http));
    reconcile(&svc(json!({})), &pods, &triggers, &api)
        .await
        .unwrap();
    assert_eq!(*api.writes.lock(), vec!["create web", "replace web"]);
    let subsets = api.current.lock().clone().unwrap().subsets.unwrap();
    assert_eq!(ips(&subsets[0].addresses), vec!["10.0.0.1", "10.0.0.2"]);
}

#[tokio::test]
async fn publish_not_ready_addresses_puts_every_pod_in_addresses() {
    let http = json!([{"name": "http", "containerPort": 8080}]);
    let pods = vec![web("a", "10.0.0.1", false, http)];
    let api = Recording::default();
    let service = svc(json!({"publishNotReadyAddresses": true}));
    reconcile(&service, &pods, &TriggerTimes::default(), &api)
        .await
        .unwrap();
    let subsets = api.current.lock().clone().unwrap().subsets.unwrap();
    assert_eq!(ips(&subsets[0].addresses), vec!["10.0.0.1"]);
    assert!(subsets[0].not_ready_addresses.is_none());
}

#[tokio::test]
async fn subsets_are_repacked_by_the_ports_each_pod_resolves() {
    let both = json!([{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}]);
    let http_only = json!([{"name": "http", "containerPort": 8080}]);
    let pods = [
        web("a", "10.0.0.1", true, both),
        web("b", "10.0.0.2", true, http_only),
    ];
    let service = svc(json!({"ports": [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
        {"name": "metrics", "port": 90, "targetPort": "metrics", "protocol": "TCP"}]}));
    let (subsets, truncated) = desired_subsets(
        &service,
        &pods.iter().map(|p| p.as_ref()).collect::<Vec<_>>(),
    );
    assert!(!truncated);
    assert_eq!(subsets.len(), 2, "{subsets:?}");
    let by_port = |name: &str| -> Vec<String> {
        let s = subsets
            .iter()
            .find(|s| s.ports.as_ref().unwrap()[0].name.as_deref() == Some(name))
            .unwrap();
        assert_eq!(s.ports.as_ref().unwrap().len(), 1);
        ips(&s.addresses)
    };
    assert_eq!(by_port("http"), vec!["10.0.0.1", "10.0.0.2"]);
    assert_eq!(by_port("metrics"), vec!["10.0.0.1"]);
}

#[tokio::test]
async fn services_without_selector_and_unselected_pods_are_left_alone() {
    let api = Recording::default();
    let mut none = svc(json!({}));
    none.spec.as_mut().unwrap().selector = None;
    reconcile(&none, &[], &TriggerTimes::default(), &api)
        .await
        .unwrap();
    assert!(api.writes.lock().is_empty());
}

#[tokio::test]
async fn terminating_pods_and_pods_without_ip_are_skipped_and_hostnames_follow_the_subdomain() {
    let http = json!([{"name": "http", "containerPort": 8080}]);
    let mut gone = (*web("a", "10.0.0.1", true, http.clone())).clone();
    gone.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let mut no_ip = (*web("b", "10.0.0.2", true, http.clone())).clone();
    no_ip.status.as_mut().unwrap().pod_ip = None;
    let mut named = (*web("c", "10.0.0.3", true, http)).clone();
    named.spec.as_mut().unwrap().hostname = Some("c-host".into());
    named.spec.as_mut().unwrap().subdomain = Some("web".into());
    let (subsets, _) = desired_subsets(&svc(json!({})), &[&gone, &no_ip, &named]);
    assert_eq!(ips(&subsets[0].addresses), vec!["10.0.0.3"]);
    assert_eq!(
        subsets[0].addresses.as_ref().unwrap()[0]
            .hostname
            .as_deref(),
        Some("c-host")
    );
}

#[tokio::test]
async fn more_than_a_thousand_addresses_are_truncated_and_annotated() {
    let http = json!([{"name": "http", "containerPort": 8080}]);
    let pods: Vec<Arc<Pod>> = (0..1005)
        .map(|i| {
            web(
                &format!("p{i}"),
                &format!("10.1.{}.{}", i / 250, i % 250),
                i % 2 == 0,
                http.clone(),
            )
        })
        .collect();
    let api = Recording::default();
    reconcile(&svc(json!({})), &pods, &TriggerTimes::default(), &api)
        .await
        .unwrap();
    let e = api.current.lock().clone().unwrap();
    assert_eq!(e.annotations()[OVER_CAPACITY], "truncated");
    let s = &e.subsets.unwrap()[0];
    let ready = s.addresses.as_ref().unwrap().len();
    let not_ready = s.not_ready_addresses.as_ref().unwrap().len();
    assert_eq!((ready, ready + not_ready), (503, MAX_CAPACITY));
}

#[tokio::test]
async fn a_headless_service_without_ports_lists_addresses_and_is_labelled_headless() {
    let pods = vec![web("a", "10.0.0.1", true, json!([]))];
    let service = svc(json!({"clusterIP": "None", "ports": null}));
    let api = Recording::default();
    reconcile(&service, &pods, &TriggerTimes::default(), &api)
        .await
        .unwrap();
    let e = api.current.lock().clone().unwrap();
    assert_eq!(e.labels()[sp::HEADLESS_LABEL], "");
    let s = &e.subsets.unwrap()[0];
    assert_eq!(ips(&s.addresses), vec!["10.0.0.1"]);
    assert!(s.ports.is_none());
}

#[tokio::test]
async fn the_endpoints_of_a_gone_service_are_deleted_unless_it_exists_or_leads() {
    let api = Recording::default();
    *api.current.lock() = Some(Endpoints::default());
    service_gone("ns", "web", true, &api).await.unwrap();
    assert!(api.writes.lock().is_empty());
    service_gone("ns", "web", false, &api).await.unwrap();
    assert_eq!(*api.writes.lock(), vec!["delete ns/web"]);
    let mut leader = Endpoints::default();
    leader
        .annotations_mut()
        .insert(LEADER_ANNOTATION.into(), "{}".into());
    *api.current.lock() = Some(leader);
    service_gone("ns", "web", false, &api).await.unwrap();
    assert_eq!(api.writes.lock().len(), 1);
}
