//! Unit tests of node health, conditions and taints with a fake clock and recording writes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use parking_lot::Mutex;
use serde_json::Value;

use super::*;

#[derive(Default)]
struct Recording {
    conditions: Mutex<Vec<Vec<NodeCondition>>>,
    taints: Mutex<Vec<Vec<Taint>>>,
    pods: Mutex<Vec<String>>,
    not_ready: Mutex<Vec<String>>,
    /// The resourceVersion each node write was conditional on; the n-th leaves `v{n}`.
    preconditions: Mutex<Vec<Option<String>>>,
}

impl Recording {
    fn node_written(&self, node: &Node) -> Option<String> {
        let mut seen = self.preconditions.lock();
        seen.push(node.metadata.resource_version.clone());
        Some(format!("v{}", seen.len()))
    }
}

#[async_trait]
impl NodeWrites for Recording {
    async fn set_node_conditions(
        &self,
        node: &Node,
        c: Vec<NodeCondition>,
    ) -> kube::Result<Option<String>> {
        self.conditions.lock().push(c);
        Ok(self.node_written(node))
    }
    async fn update_taints(
        &self,
        node: &Node,
        change: TaintChange<'_>,
    ) -> kube::Result<Option<Node>> {
        let Some(taints) = change(node) else {
            return Ok(None);
        };
        self.taints.lock().push(taints.clone());
        let mut written = node.clone();
        written.spec.get_or_insert_with(Default::default).taints = Some(taints);
        written.metadata.resource_version = self.node_written(node);
        Ok(Some(written))
    }
    async fn set_pod_conditions(&self, pod: &Pod, _: Vec<PodCondition>) -> kube::Result<()> {
        self.pods.lock().push(pod.name_any());
        Ok(())
    }
    fn not_ready(&self, node: &Node) {
        self.not_ready.lock().push(node.name_any());
    }
}

/// Monitors `node` once at `t`, its lease renewed at `renewed`.
async fn look(
    node: &Node,
    renewed: i64,
    pods: &[Arc<Pod>],
    state: &mut State,
    t: i64,
    api: &Recording,
) -> Option<String> {
    let lease = lease(renewed);
    let seen = Observed {
        node,
        lease: Some(&lease),
        pods,
    };
    let after = monitor(seen, state, &config(), at(t), api).await.unwrap();
    ready_of(&after).map(|c| c.status.clone())
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn node(ready: &str, heartbeat: i64) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
    n.metadata.resource_version = Some("v0".into());
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: ready.into(),
            last_heartbeat_time: Some(Time(at(heartbeat))),
            ..Default::default()
        }]),
        ..Default::default()
    });
    n
}

fn lease(renewed: i64) -> Lease {
    Lease {
        spec: Some(LeaseSpec {
            renew_time: Some(MicroTime(at(renewed))),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ready_pod(name: &str) -> Arc<Pod> {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.status = Some(PodStatus {
        conditions: Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        ..Default::default()
    });
    Arc::new(p)
}

fn config() -> Config {
    Config {
        node_monitor_grace_period: Duration::from_secs(40),
        ..Config::default()
    }
}

fn keys(taints: &[Taint]) -> Vec<String> {
    taints
        .iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_lease_stops_is_unknown_after_the_grace_period_and_tainted_unreachable() {
    let api = Recording::default();
    let mut state = State::default();
    let mut n = node("True", 0);
    let pods = vec![ready_pod("p")];
    // renewals keep it alive, whatever the heartbeat
    for t in [0, 30, 60] {
        look(&n, t, &pods, &mut state, t, &api).await;
    }
    look(&n, 60, &pods, &mut state, 100, &api).await;
    assert!(
        api.conditions.lock().is_empty(),
        "40 s is not more than the grace"
    );
    let status = look(&n, 60, &pods, &mut state, 101, &api).await;
    assert_eq!(status.as_deref(), Some("Unknown"));
    let written = api.conditions.lock()[0].clone();
    let ready = written.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "Unknown");
    assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(
        ready.message.as_deref(),
        Some("Kubelet stopped posting node status.")
    );
    assert_eq!(
        ready.last_heartbeat_time,
        Some(Time(at(0))),
        "heartbeat kept"
    );
    let never = written
        .iter()
        .find(|c| c.type_ == "MemoryPressure")
        .unwrap();
    assert_eq!(never.reason.as_deref(), Some("NodeStatusNeverUpdated"));
    // the NoSchedule taint at once; the NoExecute one waits for the pass that sees Unknown
    assert_eq!(
        keys(&api.taints.lock()[0]),
        vec!["node.kubernetes.io/unreachable:NoSchedule"]
    );
    assert_eq!(api.taints.lock().len(), 1);
    assert_eq!(
        *api.preconditions.lock(),
        vec![Some("v0".to_string()), Some("v1".to_string())],
        "each write is conditional on the version the one before it left"
    );
    assert_eq!(*api.not_ready.lock(), vec!["n1"]);
    assert_eq!(*api.pods.lock(), vec!["p"]);

    n.status.as_mut().unwrap().conditions = Some(written);
    n.spec.get_or_insert_with(Default::default).taints = Some(api.taints.lock()[0].clone());
    look(&n, 60, &pods, &mut state, 106, &api).await;
    assert_eq!(api.taints.lock().len(), 1, "queued, not written");
    assert_eq!(*api.not_ready.lock(), vec!["n1"], "one event per change");
    let node_of = |_: &str| Some(Arc::new(n.clone()));
    taint_pass(&mut state, &node_of, at(106), &api).await;
    let tainted = api.taints.lock()[1].clone();
    assert_eq!(
        keys(&tainted),
        vec![
            "node.kubernetes.io/unreachable:NoSchedule",
            "node.kubernetes.io/unreachable:NoExecute"
        ]
    );
    assert_eq!(tainted[1].time_added, Some(Time(at(106))));

    // back: the NoExecute taint is lifted at once, the NoSchedule one follows the condition
    n.spec.as_mut().unwrap().taints = Some(tainted);
    n.status.as_mut().unwrap().conditions = Some(vec![NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        last_heartbeat_time: Some(Time(at(110))),
        ..Default::default()
    }]);
    look(&n, 110, &pods, &mut state, 111, &api).await;
    assert_eq!(api.taints.lock().len(), 4);
    assert!(api.taints.lock()[3].is_empty(), "both taints gone");
    assert!(!state.zones.waiting());
}

#[tokio::test(start_paused = true)]
async fn a_not_ready_node_with_the_unreachable_taint_swaps_it_at_once() {
    let api = Recording::default();
    let mut state = State::default();
    let mut n = node("False", 0);
    n.spec = Some(NodeSpec {
        taints: Some(vec![
            taint(UNREACHABLE, "NoSchedule", at(0)),
            taint(UNREACHABLE, "NoExecute", at(0)),
        ]),
        ..Default::default()
    });
    look(&n, 0, &[], &mut state, 1, &api).await;
    let written = api.taints.lock().clone();
    assert_eq!(written.len(), 2, "NoSchedule swapped, then NoExecute");
    assert_eq!(
        keys(&written[1]),
        vec![
            "node.kubernetes.io/not-ready:NoSchedule",
            "node.kubernetes.io/not-ready:NoExecute"
        ]
    );
    assert!(!state.zones.waiting(), "no queue for a swap");
    assert!(
        api.not_ready.lock().is_empty(),
        "the kubelet said so itself"
    );
}

#[test]
fn taints_follow_the_conditions_and_leave_others_alone() {
    let mut n = node("False", 0);
    n.spec = Some(NodeSpec {
        taints: Some(vec![Taint {
            key: "dedicated".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]),
        unschedulable: Some(true),
        ..Default::default()
    });
    let tainted = desired_taints(&n, at(0)).unwrap();
    assert_eq!(
        keys(&tainted),
        vec![
            "dedicated:NoSchedule",
            "node.kubernetes.io/not-ready:NoSchedule",
            "node.kubernetes.io/unschedulable:NoSchedule"
        ]
    );
    let mut with_no_execute = tainted;
    with_no_execute.push(taint(NOT_READY, "NoExecute", at(1)));
    n.spec.as_mut().unwrap().taints = Some(with_no_execute);
    assert_eq!(
        desired_taints(&n, at(5)),
        None,
        "stable once applied; the NoExecute taint is not its to manage"
    );
    assert_eq!(no_execute_taints(&n, Some(NOT_READY), at(5)), None);
    // recovered: only the user's taint, unschedulable and the NoExecute taint (lifted by the
    // monitor) remain
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
    assert_eq!(
        keys(&desired_taints(&n, at(9)).unwrap()),
        vec![
            "dedicated:NoSchedule",
            "node.kubernetes.io/unschedulable:NoSchedule",
            "node.kubernetes.io/not-ready:NoExecute"
        ]
    );
}

#[test]
fn a_new_heartbeat_is_a_probe_and_a_node_never_heard_from_gets_the_startup_grace() {
    let n = node("True", 0);
    let h = observe(None, &n, None, at(0));
    assert_eq!(observe(Some(&h), &n, None, at(10)).probed, at(0));
    let later = node("True", 10);
    assert_eq!(observe(Some(&h), &later, None, at(12)).probed, at(12));
    let mut fresh = Node::default();
    fresh.metadata.name = Some("new".into());
    let h = observe(None, &fresh, None, at(0));
    assert!(
        !silent(&h, &fresh, &config(), at(50)),
        "startup grace is 60 s"
    );
    assert!(silent(&h, &fresh, &config(), at(61)));
}

struct Nothing;

impl Lookup for Nothing {
    fn lease(&self, _: &str) -> Option<Arc<Lease>> {
        None
    }
    fn pods_on(&self, _: &str) -> Vec<Arc<Pod>> {
        Vec::new()
    }
}

fn named(name: &str, ready: &str, taints: &[&str]) -> Arc<Node> {
    let mut n = node(ready, 0);
    n.metadata.name = Some(name.into());
    n.spec = Some(NodeSpec {
        taints: Some(
            taints
                .iter()
                .flat_map(|k| [taint(k, "NoSchedule", at(0)), taint(k, "NoExecute", at(0))])
                .collect(),
        ),
        ..Default::default()
    });
    Arc::new(n)
}

#[tokio::test(start_paused = true)]
async fn when_no_node_is_ready_the_no_execute_taints_are_lifted_and_none_added() {
    let api = Recording::default();
    let mut state = State::default();
    let nodes = vec![
        named("a", "Unknown", &[UNREACHABLE]),
        named("b", "False", &[NOT_READY]),
    ];
    pass(&nodes, &Nothing, &mut state, &config(), at(1), &api).await;
    let written: Vec<Vec<String>> = api.taints.lock().iter().map(|t| keys(t)).collect();
    assert_eq!(
        written,
        vec![
            vec!["node.kubernetes.io/unreachable:NoSchedule"],
            vec!["node.kubernetes.io/not-ready:NoSchedule"]
        ]
    );
    // as written: queued again, but nothing is let through
    let lifted = vec![named("a", "Unknown", &[]), named("b", "False", &[])];
    pass(&lifted, &Nothing, &mut state, &config(), at(2), &api).await;
    assert!(state.zones.waiting());
    tokio::time::advance(std::time::Duration::from_secs(600)).await;
    let node_of = |name: &str| lifted.iter().find(|n| n.name_any() == name).cloned();
    taint_pass(&mut state, &node_of, at(600), &api).await;
    let kinds: Vec<String> = api.taints.lock().iter().flat_map(|t| keys(t)).collect();
    assert!(
        !kinds.iter().any(|k| k.ends_with(":NoExecute")),
        "no NoExecute taint written: {kinds:?}"
    );
    // one node back: evictions resume, and every node's grace starts over
    let mut b = node("True", 700);
    b.metadata.name = Some("b".into());
    let back = vec![named("a", "Unknown", &[]), Arc::new(b)];
    pass(&back, &Nothing, &mut state, &config(), at(700), &api).await;
    assert_eq!(state.health["a"].probed, at(700));
    assert_eq!(state.zones.state(""), zones::ZoneState::Normal);
}

/// The requests a fake API server got: method, path, body.
type Requests = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A fake API server for one node: the first taint PATCH finds the node changed (409, someone
/// added the taint `other`, resourceVersion 7), a GET reads it again, the next PATCH applies.
fn changing_node() -> (KubeWrites, Requests) {
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};

    let seen = Requests::default();
    let log = seen.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let log = log.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let patches = log.lock().iter().filter(|r| r.0 == "PATCH").count();
            log.lock().push((method.clone(), path, body.clone()));
            let changed = json!({"metadata": {"name": "n1", "resourceVersion": "7"},
                "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}});
            let (code, answer) = match (method.as_str(), patches) {
                ("PATCH", 0) => (
                    409,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "Conflict", "code": 409, "message": "the object has been modified"}),
                ),
                ("PATCH", _) => {
                    let mut n = changed;
                    n["spec"]["taints"] = body["spec"]["taints"].clone();
                    n["metadata"]["resourceVersion"] = json!("8");
                    (200, n)
                }
                _ => (200, changed),
            };
            let response = http::Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    let client = kube::Client::new(service, "default");
    let recorder = Recorder::new(
        client.clone(),
        skiff_runtime::events::Reporter {
            controller: "test".into(),
            instance: "test".into(),
        },
    );
    (KubeWrites { client, recorder }, seen)
}

#[tokio::test]
async fn a_taint_written_over_someone_elses_change_reads_the_node_again_and_keeps_theirs() {
    let (api, seen) = changing_node();
    let n = node("Unknown", 0);
    let add = |n: &Node| no_execute_taints(n, Some(UNREACHABLE), at(10));
    let written = api.update_taints(&n, &add).await.unwrap().unwrap();
    assert_eq!(written.metadata.resource_version.as_deref(), Some("8"));
    let seen = seen.lock().clone();
    let requests: Vec<(&str, &str)> = seen.iter().map(|r| (&*r.0, &*r.1)).collect();
    assert_eq!(
        requests,
        [
            ("PATCH", "/api/v1/nodes/n1"),
            ("GET", "/api/v1/nodes/n1"),
            ("PATCH", "/api/v1/nodes/n1"),
        ]
    );
    assert_eq!(
        seen[0].2["metadata"]["resourceVersion"], "v0",
        "conditional on the version it read"
    );
    assert_eq!(seen[2].2["metadata"]["resourceVersion"], "7");
    let taints: Vec<Taint> = serde_json::from_value(seen[2].2["spec"]["taints"].clone()).unwrap();
    assert_eq!(
        keys(&taints),
        [
            "other:NoSchedule",
            "node.kubernetes.io/unreachable:NoExecute"
        ],
        "the other writer's taint kept"
    );
}
