//! Unit tests of node health, conditions and taints with a fake clock and recording writes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use parking_lot::Mutex;

use super::*;

#[derive(Default)]
struct Recording {
    conditions: Mutex<Vec<Vec<NodeCondition>>>,
    taints: Mutex<Vec<Vec<Taint>>>,
    pods: Mutex<Vec<String>>,
}

#[async_trait]
impl NodeWrites for Recording {
    async fn set_node_conditions(&self, _: &Node, c: Vec<NodeCondition>) -> kube::Result<()> {
        self.conditions.lock().push(c);
        Ok(())
    }
    async fn set_taints(&self, _: &Node, t: Vec<Taint>) -> kube::Result<()> {
        self.taints.lock().push(t);
        Ok(())
    }
    async fn set_pod_conditions(&self, pod: &Pod, _: Vec<PodCondition>) -> kube::Result<()> {
        self.pods.lock().push(pod.name_any());
        Ok(())
    }
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn node(ready: &str, heartbeat: i64) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some("n1".into());
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

#[tokio::test]
async fn a_node_whose_lease_stops_is_unknown_after_the_grace_period_and_tainted_unreachable() {
    let api = Recording::default();
    let mut health = HashMap::new();
    let n = node("True", 0);
    let pods = vec![ready_pod("p")];
    // renewals keep it alive, whatever the heartbeat
    for t in [0, 30, 60] {
        monitor(
            &n,
            Some(&lease(t)),
            &pods,
            &mut health,
            &config(),
            at(t),
            &api,
        )
        .await
        .unwrap();
    }
    monitor(
        &n,
        Some(&lease(60)),
        &pods,
        &mut health,
        &config(),
        at(100),
        &api,
    )
    .await
    .unwrap();
    assert!(
        api.conditions.lock().is_empty(),
        "40 s is not more than the grace"
    );
    monitor(
        &n,
        Some(&lease(60)),
        &pods,
        &mut health,
        &config(),
        at(101),
        &api,
    )
    .await
    .unwrap();
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
    assert_eq!(
        keys(&api.taints.lock()[0]),
        vec![
            "node.kubernetes.io/unreachable:NoSchedule",
            "node.kubernetes.io/unreachable:NoExecute"
        ]
    );
    assert!(api.taints.lock()[0][1].time_added.is_some());
    assert_eq!(*api.pods.lock(), vec!["p"]);
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
            "node.kubernetes.io/unschedulable:NoSchedule",
            "node.kubernetes.io/not-ready:NoExecute"
        ]
    );
    n.spec.as_mut().unwrap().taints = Some(tainted);
    assert_eq!(desired_taints(&n, at(5)), None, "stable once applied");
    // recovered: only the user's taint and unschedulable remain
    n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
    assert_eq!(
        keys(&desired_taints(&n, at(9)).unwrap()),
        vec![
            "dedicated:NoSchedule",
            "node.kubernetes.io/unschedulable:NoSchedule"
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
