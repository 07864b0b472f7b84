//! `skiff kubelet --hollow --count 3` against a real `skiff apiserver`: three Nodes register
//! Ready with their Leases, each with its own pod CIDR (or the one its Node already had);
//! pods bound to them run with IPs from their node's range; a deleted pod goes away. No
//! containerd: hollow nodes run pods in memory.

mod support;

use std::process::{Child, Command, Stdio};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::{ApiServer, Backend, HANG_GUARD, eventually, kube_client, line_reader, run};

/// The hollow kubelet child; killed when dropped.
struct Hollow(Child);

impl Drop for Hollow {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_hollow(api: &ApiServer, dir: &std::path::Path) -> Hollow {
    let mut child = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .arg("kubelet")
        .arg("--kubeconfig")
        .arg(api.kubeconfig())
        .arg("--data-dir")
        .arg(dir)
        .args(["--hollow", "--count", "3", "--node-name-prefix", "e2e"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("start skiff kubelet --hollow");
    let lines = line_reader(child.stdout.take().expect("stdout"));
    let hollow = Hollow(child);
    let ready = lines
        .recv_timeout(HANG_GUARD)
        .expect("the hollow kubelet printed a line");
    assert!(
        ready.contains("ready") && ready.contains("3 hollow nodes"),
        "{ready}"
    );
    // the kubelet re-executed itself (same pid) with jemalloc's small-heap configuration
    let environ = std::fs::read(format!("/proc/{}/environ", hollow.0.id())).unwrap();
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|kv| kv.starts_with(b"_RJEM_MALLOC_CONF=narenas:1,")),
        "{}",
        String::from_utf8_lossy(&environ)
    );
    hollow
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }))
    .expect("a pod")
}

#[test]
fn hollow_nodes_register_with_leases_and_run_their_pods_with_ips_from_their_ranges() {
    let api = ApiServer::start(Backend::Embedded);
    let dir = tempfile::tempdir().expect("temp dir");
    run(async {
        let client = kube_client(&api).await;
        let nodes: Api<Node> = Api::all(client.clone());
        // a Node that already has a pod CIDR keeps it
        let preset: Node = serde_json::from_value(json!({
            "metadata": {"name": "e2e-2"}, "spec": {"podCIDR": "10.99.7.0/24"},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &preset).await.unwrap();
        let _hollow = start_hollow(&api, dir.path());

        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let expected = [
            ("e2e-0", "10.64.0."),
            ("e2e-1", "10.64.1."),
            ("e2e-2", "10.99.7."),
        ];
        for (name, range) in expected {
            let node = nodes.get(name).await.unwrap();
            let spec = node.spec.unwrap();
            assert_eq!(
                spec.pod_cidr.as_deref(),
                Some(format!("{range}0/24").as_str())
            );
            let status = node.status.unwrap();
            let ready = status
                .conditions
                .unwrap()
                .into_iter()
                .find(|c| c.type_ == "Ready");
            assert_eq!(ready.map(|c| c.status).as_deref(), Some("True"), "{name}");
            assert_eq!(status.capacity.unwrap()["pods"].0, "110");
            let lease = eventually(&format!("the lease of {name}"), || {
                let leases = leases.clone();
                async move { leases.get_opt(name).await.ok().flatten() }
            })
            .await;
            assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some(name));
        }

        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        for (i, (node, _)) in expected.iter().enumerate() {
            pods.create(&PostParams::default(), &pod(&format!("p{i}"), node))
                .await
                .unwrap();
        }
        for (i, (node, range)) in expected.iter().enumerate() {
            let name = format!("p{i}");
            let status = eventually(&format!("{name} Running"), || {
                let (pods, name) = (pods.clone(), name.clone());
                async move {
                    let status = pods.get(&name).await.ok()?.status?;
                    (status.phase.as_deref() == Some("Running")).then_some(status)
                }
            })
            .await;
            let ip = status.pod_ip.unwrap();
            assert!(
                ip.starts_with(range) && ip != format!("{range}1"),
                "{node}: {ip}"
            );
            assert_eq!(status.host_ip.unwrap(), format!("{range}1"));
            let c = &status.container_statuses.unwrap()[0];
            assert!(c.ready, "{name}: {c:?}");
        }

        pods.delete("p1", &DeleteParams::default()).await.unwrap();
        eventually("p1 gone", || {
            let pods = pods.clone();
            async move { pods.get_opt("p1").await.ok()?.is_none().then_some(()) }
        })
        .await;
        assert!(pods.get_opt("p0").await.unwrap().is_some());
    });
}

/// A pod bound past the scheduler that the node cannot run is rejected at admission as
/// upstream's kubelet does: phase Failed, the failure's reason, "Pod was rejected: …", and a
/// Warning event; the pods admitted before it keep running.
#[test]
fn pods_the_node_cannot_run_are_rejected_at_admission() {
    let api = ApiServer::start(Backend::Embedded);
    let dir = tempfile::tempdir().expect("temp dir");
    run(async {
        let client = kube_client(&api).await;
        let _hollow = start_hollow(&api, dir.path());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let with = |name: &str, container: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"nodeName": "e2e-0", "containers": [container]},
            }))
            .unwrap()
        };
        let port = json!({"name": "app", "image": "registry.k8s.io/pause:3.10",
                          "ports": [{"containerPort": 80, "hostPort": 8080}]});
        let big = json!({"name": "app", "image": "registry.k8s.io/pause:3.10",
                         "resources": {"requests": {"cpu": "64"}}});
        let create = |pod: Pod| {
            let pods = pods.clone();
            async move { pods.create(&PostParams::default(), &pod).await.unwrap() }
        };
        create(with("first", port.clone())).await;
        let running = |name: &'static str| {
            let pods = pods.clone();
            async move {
                let status = pods.get(name).await.ok()?.status?;
                (status.phase.as_deref() == Some("Running")).then_some(())
            }
        };
        eventually("first Running", || running("first")).await;

        create(with("second", port)).await;
        create(with("huge", big)).await;
        for (name, reason, message) in [
            (
                "second",
                "NodePorts",
                "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports \
                 for the requested pod ports",
            ),
            (
                "huge",
                "OutOfcpu",
                "Pod was rejected: Node didn't have enough resource: cpu, requested: 64000, \
                 used: 0, capacity: 4000",
            ),
        ] {
            let status = eventually(&format!("{name} rejected"), || {
                let pods = pods.clone();
                async move {
                    let status = pods.get(name).await.ok()?.status?;
                    (status.phase.as_deref() == Some("Failed")).then_some(status)
                }
            })
            .await;
            assert_eq!(status.reason.as_deref(), Some(reason), "{name}");
            assert_eq!(status.message.as_deref(), Some(message), "{name}");
            // the event is written beside the status, not before it
            let selector = format!("involvedObject.name={name}");
            eventually(&format!("the {reason} event"), || async {
                let events = api.kubectl(
                    support::KUBECTL_133,
                    &["get", "events", "--field-selector", &selector],
                );
                (events.contains("Warning") && events.contains(reason)).then_some(())
            })
            .await;
        }
        eventually("first still Running", || running("first")).await;
    });
}
