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
use support::cluster::{Process, controller_manager, hollow_nodes_with, scheduler};
use support::{
    ApiServer, Backend, HANG_GUARD, KUBECTL_133, eventually, kube_client, line_reader, run,
};

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

/// The metrics server's registration: an `ExternalName` Service for `localhost` at its port
/// (an endpoint may not be on loopback) and the APIService.
fn metrics_registration(port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: metrics-server, namespace: kube-system}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: https, port: {port}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1beta1.metrics.k8s.io}}
spec:
  group: metrics.k8s.io
  version: v1beta1
  service: {{namespace: kube-system, name: metrics-server, port: {port}}}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"#
    )
}

const BUSY_DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: busy}
spec:
  replicas: 2
  selector: {matchLabels: {app: busy}}
  template:
    metadata:
      labels: {app: busy}
      annotations: {hollow.skiff.io/cpu-usage: 150m}
    spec:
      containers:
      - {name: app, image: busybox, resources: {requests: {cpu: 100m}}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: busy}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: busy}
  minReplicas: 1
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
"#;

/// Hollow nodes serving the kubelet API report their pods' synthetic usage (the pods'
/// annotations) through the Summary API and resource metrics; metrics-server scrapes them, and
/// an HPA scales a Deployment of hollow pods up when they use more and down when they use less.
#[test]
fn serving_hollow_nodes_report_synthetic_usage_that_drives_metrics_and_an_hpa() {
    let api = ApiServer::start(Backend::Embedded);
    let _hollow = hollow_nodes_with(&api, "stats", 3, &["--hollow-serve-address", "127.0.0.1"]);
    let _scheduler = scheduler(&api);
    let _cm = controller_manager(
        &api,
        &[
            "--controllers",
            "horizontalpodautoscaling,deployment,replicaset",
            "--horizontal-pod-autoscaler-sync-period=1s",
            "--horizontal-pod-autoscaler-downscale-stabilization=2s",
        ],
    );
    let metrics = Process::start(
        &api,
        "metrics-server",
        &[
            "metrics-server",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "--metric-resolution",
            "1s",
        ],
    );
    let port: u16 = metrics
        .ready
        .split("https 127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("a port in {:?}", metrics.ready));
    api.kubectl_stdin(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(&metrics_registration(port)),
    );
    let k = KUBECTL_133;
    run(async {
        // a node serves its Summary API through the API server's node proxy
        let node_ip = api.jsonpath(
            &["get", "node", "stats-0"],
            "{.status.addresses[0].address}",
        );
        assert_eq!(node_ip, "127.0.0.1");
        api.kubectl_stdin(
            k,
            &["apply", "-f", "-"],
            Some(
                r#"apiVersion: v1
kind: Pod
metadata: {name: one, annotations: {hollow.skiff.io/cpu-usage: 300m}}
spec:
  nodeName: stats-0
  containers: [{name: app, image: busybox}]
"#,
            ),
        );
        let summary: serde_json::Value = eventually("the pod in stats-0's summary", || async {
            let raw = api.kubectl(
                k,
                &["get", "--raw", "/api/v1/nodes/stats-0/proxy/stats/summary"],
            );
            let summary: serde_json::Value = serde_json::from_str(&raw).ok()?;
            let pods = summary["pods"].as_array()?;
            pods.iter()
                .any(|p| p["podRef"]["name"] == "one")
                .then_some(summary)
        })
        .await;
        let one = summary["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["podRef"]["name"] == "one")
            .unwrap();
        assert_eq!(one["cpu"]["usageNanoCores"], 300_000_000, "{one}");
        assert_eq!(one["containers"][0]["name"], "app");
        assert!(summary["node"]["cpu"]["usageNanoCores"].as_u64().unwrap() > 300_000_000);
        let resource = api.kubectl(
            k,
            &[
                "get",
                "--raw",
                "/api/v1/nodes/stats-0/proxy/metrics/resource",
            ],
        );
        assert!(
            resource.contains(r#"pod_cpu_usage_seconds_total{namespace="default",pod="one"}"#),
            "{resource}"
        );

        // kubectl top reads metrics-server's scrape of the hollow nodes
        let top = eventually("kubectl top pod one", || async {
            let out = api.kubectl_output(k, &["top", "pod", "one", "--no-headers"], None);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.contains("300m").then_some(text)
        })
        .await;
        assert!(top.starts_with("one"), "{top}");
        let nodes = api.kubectl(k, &["top", "node", "--no-headers"]);
        assert_eq!(nodes.lines().count(), 3, "{nodes}");

        // 150 % of the request against a 50 % target: 2 replicas become 6
        api.kubectl_stdin(k, &["apply", "-f", "-"], Some(BUSY_DEPLOYMENT));
        eventually("the HPA to scale busy to 6", || async {
            (api.jsonpath(&["get", "deployment", "busy"], "{.spec.replicas}") == "6").then_some(())
        })
        .await;
        let rescaled = api.event_messages("busy", "SuccessfulRescale");
        assert!(
            rescaled
                .iter()
                .any(|m| m.starts_with("New size: 6; reason: cpu resource utilization")),
            "{rescaled:?}"
        );
        // the pods use less now: 6 x 10 % against 50 % is 2 (after the 2 s stabilization)
        eventually("6 busy pods running", || async {
            let out = api.kubectl(k, &["get", "pods", "-l", "app=busy", "--no-headers"]);
            (out.lines().filter(|l| l.contains("Running")).count() == 6).then_some(())
        })
        .await;
        api.kubectl(
            k,
            &[
                "annotate",
                "pods",
                "-l",
                "app=busy",
                "--overwrite",
                "hollow.skiff.io/cpu-usage=10m",
            ],
        );
        eventually("the HPA to scale busy down to 2", || async {
            (api.jsonpath(&["get", "deployment", "busy"], "{.spec.replicas}") == "2").then_some(())
        })
        .await;
    });
}
