//! Unit tests of the `servicelb` controller: node choice, port conflicts, traffic policy, and
//! the status writes and events against a recording fake.

use super::*;
use serde_json::{Value, json};

fn from<K: serde::de::DeserializeOwned>(v: Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn node(name: &str, ip: &str, extra: Value) -> Arc<Node> {
    let mut v = json!({
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": ip},
                          {"type": "Hostname", "address": name}]
        }
    });
    merge(&mut v, extra);
    from(v)
}

fn merge(into: &mut Value, extra: Value) {
    match (into, extra) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn lb(name: &str, created: &str, ports: Value, extra: Value) -> Arc<Service> {
    let mut v = json!({
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
        "spec": {"type": "LoadBalancer", "clusterIP": "10.43.0.9", "ports": ports,
                 "externalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"]},
        "status": {"loadBalancer": {}}
    });
    merge(&mut v, extra);
    from(v)
}

fn http() -> Value {
    json!([{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}])
}

fn ips(status: &LoadBalancerStatus) -> Vec<String> {
    status
        .ingress
        .iter()
        .flatten()
        .map(|i| i.ip.clone().unwrap())
        .collect()
}

#[test]
fn every_ready_schedulable_node_serves_a_load_balancer() {
    let nodes = vec![
        node("a", "192.168.1.2", json!({})),
        node("b", "192.168.1.10", json!({})),
        node(
            "cordoned",
            "192.168.1.3",
            json!({"spec": {"unschedulable": true}}),
        ),
        node(
            "down",
            "192.168.1.4",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        ),
        node(
            "tainted",
            "192.168.1.5",
            json!({"spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}}),
        ),
        node(
            "server",
            "192.168.1.6",
            json!({"spec": {"taints": [
                {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}),
        ),
    ];
    let svc = lb("web", "2026-01-01T00:00:00Z", http(), json!({}));
    let assigned = assign(std::slice::from_ref(&svc), &nodes, &[]);
    let a = &assigned["ns/web"];
    assert_eq!(
        a.nodes.iter().collect::<Vec<_>>(),
        vec!["a", "b", "server"],
        "not cordoned, not NotReady, not carrying a taint svclb pods lack"
    );
    let status = status(&svc, a, &nodes, &[]);
    // sorted as strings, as k3s sorts them
    assert_eq!(
        ips(&status),
        vec!["192.168.1.10", "192.168.1.2", "192.168.1.6"]
    );
    let entry = &status.ingress.as_ref().unwrap()[0];
    assert_eq!(entry.ip_mode.as_deref(), Some("VIP"));
}

#[test]
fn once_a_node_is_labelled_only_enabled_nodes_of_the_services_pool_serve() {
    let nodes = vec![
        node(
            "a",
            "10.0.0.1",
            json!({"metadata": {"labels": {ENABLE_LB_LABEL: "true"}}}),
        ),
        node(
            "b",
            "10.0.0.2",
            json!({"metadata": {"labels": {ENABLE_LB_LABEL: "true", LB_POOL_LABEL: "edge"}}}),
        ),
        node(
            "c",
            "10.0.0.3",
            json!({"metadata": {"labels": {ENABLE_LB_LABEL: "false"}}}),
        ),
        node("d", "10.0.0.4", json!({})),
    ];
    let web = lb("web", "2026-01-01T00:00:00Z", http(), json!({}));
    let edge = lb(
        "edge",
        "2026-01-01T00:00:00Z",
        json!([{"port": 8443, "protocol": "TCP"}]),
        json!({"metadata": {"labels": {LB_POOL_LABEL: "edge"}}}),
    );
    let assigned = assign(&[web, edge], &nodes, &[]);
    assert_eq!(
        assigned["ns/web"].nodes.iter().collect::<Vec<_>>(),
        vec!["a", "b"]
    );
    assert_eq!(
        assigned["ns/edge"].nodes.iter().collect::<Vec<_>>(),
        vec!["b"]
    );
}

#[test]
fn a_port_taken_by_an_older_service_or_a_host_port_leaves_the_node_out() {
    let nodes = vec![
        node("a", "10.0.0.1", json!({})),
        node("b", "10.0.0.2", json!({})),
    ];
    let older = lb("first", "2026-01-01T00:00:00Z", http(), json!({}));
    let newer = lb("second", "2026-01-02T00:00:00Z", http(), json!({}));
    let udp = lb(
        "dns",
        "2026-01-03T00:00:00Z",
        json!([{"port": 80, "protocol": "UDP"}]),
        json!({}),
    );
    let assigned = assign(&[newer.clone(), older, udp], &nodes, &[]);
    assert_eq!(assigned["ns/first"].nodes.len(), 2);
    assert!(assigned["ns/second"].nodes.is_empty());
    assert_eq!(
        assigned["ns/dns"].nodes.len(),
        2,
        "another protocol is free"
    );
    let conflict = &assigned["ns/second"].conflicts[0];
    assert_eq!(
        conflict.message(),
        "port 80/TCP is already used on node a by LoadBalancer Service ns/first; \
         node a does not serve this LoadBalancer"
    );
    assert_eq!(
        ips(&status(&newer, &assigned["ns/second"], &nodes, &[])),
        Vec::<String>::new()
    );

    let host_port: Arc<Pod> = from(json!({
        "metadata": {"name": "proxy", "namespace": "infra"},
        "spec": {"nodeName": "b", "containers": [{"name": "c", "image": "x",
            "ports": [{"containerPort": 8080, "hostPort": 80}]}]},
        "status": {"phase": "Running"}
    }));
    let done: Arc<Pod> = from(json!({
        "metadata": {"name": "old", "namespace": "infra"},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "x",
            "ports": [{"containerPort": 8080, "hostPort": 80}]}]},
        "status": {"phase": "Succeeded"}
    }));
    let assigned = assign(&[newer], &nodes, &[host_port, done]);
    let a = &assigned["ns/second"];
    assert_eq!(a.nodes.iter().collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(a.conflicts[0].holder, Holder::Pod("infra/proxy".into()));
}

#[test]
fn local_traffic_lists_nodes_with_ready_endpoints_and_external_ips_win() {
    let nodes = vec![
        node("a", "10.0.0.1", json!({})),
        node(
            "b",
            "10.0.0.2",
            json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.0.0.2"},
                {"type": "ExternalIP", "address": "203.0.113.2"}]}}),
        ),
    ];
    let svc = lb(
        "web",
        "2026-01-01T00:00:00Z",
        http(),
        json!({"spec": {"externalTrafficPolicy": "Local"}}),
    );
    let slice: Arc<EndpointSlice> = from(json!({
        "metadata": {"name": "web-x", "namespace": "ns",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.42.0.5"], "nodeName": "a", "conditions": {"ready": true},
             "targetRef": {"kind": "Pod", "name": "p1"}},
            {"addresses": ["10.42.1.5"], "nodeName": "b", "conditions": {"ready": false},
             "targetRef": {"kind": "Pod", "name": "p2"}}
        ]
    }));
    let assigned = assign(std::slice::from_ref(&svc), &nodes, &[]);
    let a = &assigned["ns/web"];
    assert_eq!(ips(&status(&svc, a, &nodes, &[slice])), vec!["10.0.0.1"]);
    // Cluster policy: both nodes, and b's ExternalIP replaces every InternalIP
    let cluster = lb("web", "2026-01-01T00:00:00Z", http(), json!({}));
    assert_eq!(ips(&status(&cluster, a, &nodes, &[])), vec!["203.0.113.2"]);
}

#[derive(Default)]
struct Recording {
    writes: parking_lot::Mutex<Vec<Option<Vec<String>>>>,
    events: parking_lot::Mutex<Vec<Note>>,
}

#[async_trait]
impl Services for Recording {
    async fn set_status(&self, _: &Service, status: &LoadBalancerStatus) -> kube::Result<()> {
        self.writes
            .lock()
            .push(status.ingress.as_ref().map(|_| ips(status)));
        Ok(())
    }

    fn event(&self, _: &Service, note: Note) {
        self.events.lock().push(note);
    }
}

fn with_status(svc: &Service, ips: &[&str]) -> Service {
    let mut svc = svc.clone();
    svc.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(
                ips.iter()
                    .map(|ip| LoadBalancerIngress {
                        ip: Some(ip.to_string()),
                        ip_mode: Some("VIP".into()),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }),
        ..Default::default()
    });
    svc
}

#[tokio::test]
async fn a_changed_status_is_written_and_announced_as_k3s_does() {
    let nodes = vec![node("a", "10.0.0.1", json!({}))];
    let svc = lb("web", "2026-01-01T00:00:00Z", http(), json!({}));
    let assigned = assign(std::slice::from_ref(&svc), &nodes, &[]);
    let want = status(&svc, &assigned["ns/web"], &nodes, &[]);
    let api = Recording::default();
    sync_status(&svc, Some(want.clone()), &api).await.unwrap();
    assert_eq!(*api.writes.lock(), vec![Some(vec!["10.0.0.1".to_string()])]);
    assert_eq!(
        api.events.lock()[0],
        Note::normal(
            "UpdatedLoadBalancer",
            "Updated LoadBalancer with new IPs: [] -> [10.0.0.1]".into()
        )
    );
    // in sync: nothing written
    let synced = with_status(&svc, &["10.0.0.1"]);
    sync_status(&synced, Some(want), &api).await.unwrap();
    assert_eq!(api.writes.lock().len(), 1);
    // the last node gone
    sync_status(&synced, Some(LoadBalancerStatus::default()), &api)
        .await
        .unwrap();
    assert_eq!(api.writes.lock()[1], None);
    assert_eq!(
        api.events.lock()[1],
        Note::warning(
            "UnAvailableLoadBalancer",
            "There are no available nodes for LoadBalancer".into()
        )
    );
}

#[tokio::test]
async fn a_service_no_longer_a_load_balancer_loses_its_status_and_a_classed_one_is_left_alone() {
    let svc = lb("web", "2026-01-01T00:00:00Z", http(), json!({}));
    let mut cluster_ip = with_status(&svc, &["10.0.0.1"]);
    cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    assert!(!serves(&cluster_ip));
    let api = Recording::default();
    sync_status(&cluster_ip, None, &api).await.unwrap();
    assert_eq!(*api.writes.lock(), vec![None]);
    assert!(api.events.lock().is_empty());

    let mut classed = with_status(&svc, &["198.51.100.7"]);
    classed.spec.as_mut().unwrap().load_balancer_class = Some("example.com/lb".into());
    assert!(!serves(&classed));
    sync_status(&classed, None, &api).await.unwrap();
    assert_eq!(
        api.writes.lock().len(),
        1,
        "another implementation's status"
    );
}

#[test]
fn a_conflict_is_reported_once_until_it_changes() {
    let svc = lb("second", "2026-01-02T00:00:00Z", http(), json!({}));
    let conflict = Conflict {
        node: "a".into(),
        protocol: "TCP".into(),
        port: 80,
        holder: Holder::Service("ns/first".into()),
    };
    let api = Recording::default();
    let reported = Reported::default();
    reported.report(&svc, std::slice::from_ref(&conflict), &api);
    reported.report(&svc, std::slice::from_ref(&conflict), &api);
    assert_eq!(api.events.lock().len(), 1);
    assert!(api.events.lock()[0].warning);
    assert_eq!(api.events.lock()[0].reason, PORT_CONFLICT);
    reported.report(&svc, &[], &api);
    reported.report(&svc, &[conflict], &api);
    assert_eq!(
        api.events.lock().len(),
        2,
        "reported again after it cleared"
    );
}

#[test]
fn of_two_services_created_in_one_second_the_one_already_serving_keeps_the_port() {
    let nodes = vec![node("a", "10.0.0.1", json!({}))];
    let second = "2026-01-01T00:00:00Z";
    let serving = lb(
        "web",
        second,
        http(),
        json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}}}),
    );
    let newcomer = lb("second", second, http(), json!({}));
    let assigned = assign(&[newcomer, serving], &nodes, &[]);
    assert_eq!(assigned["ns/web"].nodes.len(), 1);
    assert!(assigned["ns/second"].nodes.is_empty());
    assert_eq!(assigned["ns/second"].conflicts.len(), 1);
}
