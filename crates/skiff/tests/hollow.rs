//! `skiff kubelet --hollow --count 3` against a real `skiff apiserver`: three Nodes register
//! Ready with their Leases, each with its own pod CIDR (or the one its Node already had);
//! pods bound to them run with IPs from their node's range; a deleted pod goes away. No
//! containerd: hollow nodes run pods in memory. HPAs scale Deployments of hollow pods on
//! resource metrics (metrics-server scraping the hollow nodes) and on custom and external
//! metrics (a fake adapter the test serves).

mod support;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use support::cluster::{Process, controller_manager, hollow_nodes, hollow_nodes_with, scheduler};
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

/// With `--hollow-impersonate-nodes` each hollow node acts as itself, `system:node:<name>` in
/// `system:nodes`, over the shared connections: the Node authorizer lets it list and watch the
/// ConfigMap its pod mounts (which it reads from that watch, never by a GET), and API Priority and
/// Fairness classifies its requests by upstream's `system-nodes` FlowSchema into the `system`
/// level, where the shared admin identity's would be exempt.
#[test]
fn impersonating_hollow_nodes_act_as_themselves() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let client = kube_client(&api).await;
        let _hollow = hollow_nodes_with(&api, "imp", 2, &["--hollow-impersonate-nodes"]);
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}}))
                .unwrap();
        config_maps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "mounts"},
            "spec": {"nodeName": "imp-1",
                     "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
                     "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                     "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]}]},
        }))
        .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        pods.create(&PostParams::default(), &pod).await.unwrap();
        eventually("the pod mounting the ConfigMap Running", || {
            let pods = pods.clone();
            async move {
                let status = pods.get("mounts").await.ok()?.status?;
                (status.phase.as_deref() == Some("Running")).then_some(())
            }
        })
        .await;

        let metrics = client
            .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
            .await
            .unwrap();
        let sum = |metric: &str, labels: &[&str]| -> f64 {
            metrics
                .lines()
                .filter(|l| {
                    l.strip_prefix(metric).is_some_and(|l| l.starts_with('{'))
                        && labels.iter().all(|label| l.contains(label))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let configmaps = r#"resource="configmaps""#;
        let requests = "apiserver_request_total";
        // a watch is counted when it ends; its list when answered
        assert!(sum(requests, &[configmaps, r#"verb="LIST""#]) >= 1.0);
        assert_eq!(sum(requests, &[configmaps, r#"verb="GET""#]), 0.0);
        let dispatched = sum(
            "apiserver_flowcontrol_dispatched_requests_total",
            &[
                r#"flow_schema="system-nodes""#,
                r#"priority_level="system""#,
            ],
        );
        assert!(
            dispatched > 0.0,
            "no request classified as system-nodes:\n{}",
            metrics
                .lines()
                .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total"))
                .collect::<Vec<_>>()
                .join("\n")
        );
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
  minReplicas: 2
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
        // the event is recorded after the scale is written
        eventually("a SuccessfulRescale event to 6 for cpu", || async {
            let rescaled = api.event_messages("busy", "SuccessfulRescale");
            rescaled
                .iter()
                .any(|m| m.starts_with("New size: 6; reason: cpu resource utilization"))
                .then_some(())
        })
        .await;
        // the pods use less now: 6 x 10 % against 50 % is 2 (after the 2 s stabilization). A new
        // pod whose only sample began before it was Ready counts as unready (upstream's CPU
        // initialization rule) and the ratio is then taken over the others, which can propose 1:
        // minReplicas 2 keeps the end state the same whichever look the HPA takes.
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

/// What the fake metrics adapter serves; the test changes it while the HPAs run. A load is
/// spread evenly over the pods serving it, as real traffic would be, so that the replicas
/// upstream's formula gives are the ones the load settles at.
#[derive(Default)]
struct AdapterMetrics {
    /// A pods metric's total over the pods a query selects, in milli-units, by metric name.
    pods: BTreeMap<String, i64>,
    /// An object's metric, by `{qualified resource}/{name}/{metric}`: its total in milli-units
    /// and the selector of the pods it is spread over.
    objects: BTreeMap<String, (i64, String)>,
    /// An external metric's values in milli-units, by `{metric}?{metric selector}`.
    external: BTreeMap<String, Vec<i64>>,
}

/// `milli` milli-units as a quantity.
fn quantity(milli: i64) -> String {
    format!("{milli}m")
}

/// A `custom.metrics.k8s.io/v1beta2` `MetricValue`.
fn metric_value(kind: &str, name: &str, metric: &str, milli: i64) -> serde_json::Value {
    json!({"describedObject": {"kind": kind, "namespace": "default", "name": name},
           "metric": {"name": metric}, "timestamp": jiff::Timestamp::now().to_string(),
           "windowSeconds": 1, "value": quantity(milli)})
}

/// The adapter's answer to `path` (with its query): discovery for both groups, the metrics it
/// has, and upstream's not-found `Status` for the rest. Pods are listed through the API server
/// as an adapter's own informers would.
async fn adapter_answer(
    metrics: &Mutex<AdapterMetrics>,
    pods: &Api<Pod>,
    path: &str,
    query: &str,
) -> (u16, serde_json::Value) {
    let param = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let count = |selector: String| async move {
        let listed = pods
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .expect("the pods");
        listed.items
    };
    let custom = "/apis/custom.metrics.k8s.io/v1beta2";
    let external = "/apis/external.metrics.k8s.io/v1beta1";
    let not_found = |what: String| {
        (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                   "reason": "NotFound", "message": format!("the server could not find the metric {what}")}),
        )
    };
    if path == custom || path == external {
        let group_version = path.trim_start_matches("/apis/");
        return (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                   "resources": []}),
        );
    }
    if let Some(rest) = path.strip_prefix(&format!("{custom}/namespaces/default/")) {
        if let Some(metric) = rest.strip_prefix("pods/*/") {
            let total = metrics.lock().pods.get(metric).copied();
            let Some(total) = total else {
                return not_found(format!("{metric} for pods"));
            };
            let selected = count(param("labelSelector")).await;
            let each = total / selected.len().max(1) as i64;
            let items: Vec<_> = selected
                .iter()
                .map(|p| metric_value("Pod", &p.name_any(), metric, each))
                .collect();
            return (200, json!({"kind": "MetricValueList", "items": items}));
        }
        let found = metrics.lock().objects.get(rest).cloned();
        let Some((total, selector)) = found else {
            return not_found(rest.to_string());
        };
        let spread = count(selector).await.len().max(1) as i64;
        let parts: Vec<&str> = rest.split('/').collect();
        let item = metric_value("Deployment", parts[1], parts[2], total / spread);
        return (200, json!({"kind": "MetricValueList", "items": [item]}));
    }
    if let Some(metric) = path.strip_prefix(&format!("{external}/namespaces/default/")) {
        let key = format!("{metric}?{}", param("labelSelector"));
        let Some(values) = metrics.lock().external.get(&key).cloned() else {
            return not_found(key);
        };
        let items: Vec<_> = values
            .iter()
            .map(|v| {
                json!({"metricName": metric, "metricLabels": {"queue": "worker"},
                            "timestamp": jiff::Timestamp::now().to_string(),
                            "value": quantity(*v)})
            })
            .collect();
        return (
            200,
            json!({"kind": "ExternalMetricValueList", "items": items}),
        );
    }
    not_found(path.to_string())
}

/// Starts the fake custom and external metrics adapter on a loopback port; it stops with the
/// returned runtime.
fn metrics_adapter(
    api: &ApiServer,
    metrics: Arc<Mutex<AdapterMetrics>>,
) -> (tokio::runtime::Runtime, u16) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pods: Api<Pod> = Api::namespaced(runtime.block_on(kube_client(api)), "default");
    let port = support::https::json_server(&runtime, move |head: http::request::Parts| {
        let (metrics, pods) = (metrics.clone(), pods.clone());
        async move {
            let (path, query) = (head.uri.path(), head.uri.query().unwrap_or(""));
            adapter_answer(&metrics, &pods, path, query).await
        }
    });
    (runtime, port)
}

/// The adapter's registration: an `ExternalName` Service for `localhost` and one APIService per
/// group.
fn adapter_registration(port: u16) -> String {
    let service = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: metrics-adapter, namespace: kube-system}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: https, port: {port}}}]
"#
    );
    let api_service = |version: &str, group: &str| {
        format!(
            r#"---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: {version}.{group}}}
spec:
  group: {group}
  version: {version}
  service: {{namespace: kube-system, name: metrics-adapter, port: {port}}}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
"#
        )
    };
    service
        + &api_service("v1beta2", "custom.metrics.k8s.io")
        + &api_service("v1beta1", "external.metrics.k8s.io")
}

/// A Deployment of `replicas` hollow pods labelled `app: {name}`, and its HPA (1 to 10
/// replicas) on `metric`.
fn autoscaled(name: &str, replicas: i32, metric: serde_json::Value) -> (String, String) {
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "app", "image": "busybox"}]}}}});
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                 "minReplicas": 1, "maxReplicas": 10, "metrics": [metric]}});
    (deployment.to_string(), hpa.to_string())
}

/// A metrics adapter registers `custom.metrics.k8s.io` and `external.metrics.k8s.io` through
/// APIServices; HPAs on a Pods, an Object and an External metric scale their Deployments of
/// hollow pods to what upstream's formulas give, follow a changed value, and an HPA on metrics
/// no API serves, then the adapter lacks, reports them in upstream's words
/// (`ScalingActive=False`, `FailedGetPodsMetric`, `FailedGetExternalMetric`) and stays put.
#[test]
fn hpas_scale_on_pods_object_and_external_metrics_from_a_registered_adapter() {
    let api = ApiServer::start(Backend::Embedded);
    let _hollow = hollow_nodes(&api, "custom", 3);
    let _scheduler = scheduler(&api);
    let _cm = controller_manager(
        &api,
        &[
            "--controllers",
            "horizontalpodautoscaling,deployment,replicaset",
            "--horizontal-pod-autoscaler-sync-period=1s",
        ],
    );
    let metrics = Arc::new(Mutex::new(AdapterMetrics::default()));
    {
        let mut m = metrics.lock();
        // 6 in all against 1 per pod: 6 pods
        m.pods.insert("qps".into(), 6000);
        // 3 in all, spread over the api pods, against a value of 1: 3 pods
        m.objects.insert(
            "deployments.apps/api/requests".into(),
            (3000, "app=api".into()),
        );
        // 2 + 3 waiting against 1 per pod: 5 pods
        m.external
            .insert("queue_depth?queue=worker".into(), vec![2000, 3000]);
    }
    let (_adapter, port) = metrics_adapter(&api, metrics.clone());
    let k = KUBECTL_133;
    let per_pod = |target: &str| json!({"type": "AverageValue", "averageValue": target});
    let manifests = [
        autoscaled(
            "web",
            2,
            json!({"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": per_pod("1")}}),
        ),
        autoscaled(
            "api",
            1,
            json!({"type": "Object", "object": {"metric": {"name": "requests"},
                "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "api"},
                "target": {"type": "Value", "value": "1"}}}),
        ),
        autoscaled(
            "worker",
            1,
            json!({"type": "External", "external": {
                "metric": {"name": "queue_depth", "selector": {"matchLabels": {"queue": "worker"}}},
                "target": per_pod("1")}}),
        ),
    ];
    // a Pods and an External metric that no API serves yet, and then the adapter lacks
    let (idle, idle_hpa) = autoscaled(
        "idle",
        2,
        json!({"type": "Pods", "pods": {"metric": {"name": "absent"}, "target": per_pod("1")}}),
    );
    let mut idle_hpa: serde_json::Value = serde_json::from_str(&idle_hpa).unwrap();
    idle_hpa["spec"]["metrics"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "External",
        "external": {"metric": {"name": "absent"}, "target": per_pod("1")}}));
    let (deployments, hpas): (Vec<String>, Vec<String>) = manifests.into_iter().unzip();
    let deployments = deployments.join("\n---\n") + "\n---\n" + &idle;
    api.kubectl_stdin(k, &["apply", "-f", "-"], Some(&deployments));
    run(async {
        // no adapter registered: upstream's errors for an API that is not there (its custom
        // metrics client finds no version by discovery; its external one is told not found)
        api.apply(idle_hpa);
        let events = |reason: &'static str, want: String| {
            let api = &api;
            async move {
                eventually(&format!("idle's {reason} event {want:?}"), || async {
                    let found = api.event_messages("idle", reason);
                    found.contains(&want).then_some(())
                })
                .await
            }
        };
        let custom = "unable to get metric absent: unable to fetch metrics from custom metrics API";
        let external = "unable to get external metric default/absent/nil: unable to fetch metrics from external metrics API";
        let unregistered = format!("{custom}: no known available metric versions found");
        events("FailedGetPodsMetric", unregistered.clone()).await;
        events(
            "FailedGetExternalMetric",
            format!("{external}: the server could not find the requested resource"),
        )
        .await;
        events(
            "FailedComputeMetricsReplicas",
            format!("invalid metrics (2 invalid out of 2), first error is: failed to get pods metric value: {unregistered}"),
        )
        .await;
        api.kubectl_stdin(k, &["apply", "-f", "-"], Some(&adapter_registration(port)));
        let replicas = |name: &str| api.jsonpath(&["get", "deployment", name], "{.spec.replicas}");
        // every pod ready first, so that each HPA's first proposal is the whole formula's
        for name in ["web", "api", "worker", "idle"] {
            eventually(&format!("{name}'s pods ready"), || async {
                let ready = api.jsonpath(&["get", "deployment", name], "{.status.readyReplicas}");
                (ready == replicas(name)).then_some(())
            })
            .await;
        }
        api.kubectl_stdin(k, &["apply", "-f", "-"], Some(&hpas.join("\n---\n")));
        let settle = |name: &'static str, want: &'static str| {
            let replicas = &replicas;
            async move {
                eventually(&format!("{name} to be scaled to {want}"), || async {
                    (replicas(name) == want).then_some(())
                })
                .await
            }
        };
        settle("web", "6").await;
        settle("api", "3").await;
        settle("worker", "5").await;
        // (the event follows the scale write)
        let rescaled = |name: &'static str| {
            let api = &api;
            async move {
                eventually(&format!("{name}'s SuccessfulRescale events"), || async {
                    let found = api.event_messages(name, "SuccessfulRescale");
                    (!found.is_empty()).then_some(found)
                })
                .await
            }
        };
        assert_eq!(
            rescaled("web").await,
            ["New size: 6; reason: pods metric qps above target"]
        );
        assert_eq!(
            rescaled("api").await,
            ["New size: 3; reason: Deployment metric requests above target"]
        );
        let queue = "external metric queue_depth(&LabelSelector{MatchLabels:map[string]string{queue: worker,},MatchExpressions:[]LabelSelectorRequirement{},})";
        assert_eq!(
            rescaled("worker").await,
            [format!("New size: 5; reason: {queue} above target")]
        );
        let current = |name: &str, path: &str| {
            api.jsonpath(
                &["get", "hpa", name],
                &format!("{{.status.currentMetrics[0].{path}}}"),
            )
        };
        // the 5 replicas now carry 1 each
        eventually("worker's status to show 1 per replica", || async {
            (current("worker", "external.current.averageValue") == "1").then_some(())
        })
        .await;
        assert_eq!(current("api", "object.describedObject.name"), "api");

        // the queue grows: 8 waiting against 1 per pod
        metrics
            .lock()
            .external
            .insert("queue_depth?queue=worker".into(), vec![5000, 3000]);
        settle("worker", "8").await;

        // the metric the adapter lacks: upstream's reason and event, and no scale
        let active = eventually("idle's ScalingActive condition", || async {
            let reason = api.jsonpath(
                &["get", "hpa", "idle"],
                r#"{.status.conditions[?(@.type=="ScalingActive")].reason}"#,
            );
            (!reason.is_empty()).then_some(reason)
        })
        .await;
        assert_eq!(active, "FailedGetPodsMetric");
        let status = api.jsonpath(
            &["get", "hpa", "idle"],
            r#"{.status.conditions[?(@.type=="ScalingActive")].status}"#,
        );
        assert_eq!(status, "False");
        events(
            "FailedGetPodsMetric",
            format!("{custom}: the server could not find the metric absent for pods"),
        )
        .await;
        events(
            "FailedGetExternalMetric",
            format!("{external}: the server could not find the metric absent?"),
        )
        .await;
        assert_eq!(replicas("idle"), "2");
        assert!(api.event_messages("idle", "SuccessfulRescale").is_empty());
        // and the others did not move
        assert_eq!((replicas("web"), replicas("api")), ("6".into(), "3".into()));
    });
}
