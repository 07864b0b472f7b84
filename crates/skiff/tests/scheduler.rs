//! `skiff scheduler` as a separate process against a real `skiff apiserver` (seed 000: the
//! scheduler is only an API client): Node objects without kubelets, pods created through the
//! API, bindings, `Scheduled` and `FailedScheduling` events as kubectl shows them, the
//! `PodScheduled` condition, requeue when a node changes, pods for another scheduler left
//! alone, each default plugin's decisions and reasons, a second profile, a standby replica
//! taking over the lease from a dead leader, preemption of lower-priority pods by
//! PriorityClass, and a pod held back by scheduling gates until its last gate is removed.

mod support;

use std::process::{Child, Command, Stdio};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::{
    ApiServer, Backend, KUBECTL_127, KUBECTL_133, eventually, expect_line, kube_client as client,
    line_reader, run,
};

/// A `skiff scheduler` child, killed on drop.
struct SchedulerProcess {
    child: Child,
    /// Where it serves `/metrics`, from its ready line.
    metrics: String,
    _lines: std::sync::mpsc::Receiver<String>,
}

impl SchedulerProcess {
    /// A scheduler with upstream's identity and least-privilege role, `system:kube-scheduler`.
    fn start(api: &ApiServer, config: Option<&std::path::Path>) -> SchedulerProcess {
        let identity = support::cluster::identity(api, "system:kube-scheduler", None);
        Self::start_as(&identity, config)
    }

    /// A second scheduler leading a Lease of its own: `system:kube-scheduler` may only hold
    /// `kube-scheduler`, so (as upstream's guide for extra schedulers grants more) it runs as the
    /// admin.
    fn start_second(api: &ApiServer, config: &std::path::Path) -> SchedulerProcess {
        Self::start_as(&api.kubeconfig(), Some(config))
    }

    fn start_as(
        kubeconfig: &std::path::Path,
        config: Option<&std::path::Path>,
    ) -> SchedulerProcess {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_skiff"));
        cmd.arg("scheduler")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-bind-address", "127.0.0.1:0"]);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env("RUST_LOG", "info")
            .spawn()
            .expect("start skiff scheduler");
        let lines = line_reader(child.stdout.take().expect("stdout"));
        let ready = expect_line(&lines, |l| l.contains("ready"));
        let metrics = ready
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no metrics address in {ready:?}"))
            .to_string();
        SchedulerProcess {
            child,
            metrics,
            _lines: lines,
        }
    }

    /// `GET /metrics`, over a plain HTTP/1.0 request.
    fn metrics(&self) -> String {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(&self.metrics).expect("connect to /metrics");
        conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        conn.read_to_string(&mut body).unwrap();
        body
    }
}

impl Drop for SchedulerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn create_node(nodes: &Api<Node>, name: &str, cordoned: bool) {
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"unschedulable": cordoned},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create node");
}

async fn create_pod(pods: &Api<Pod>, name: &str, scheduler: Option<&str>) {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "resources": {"requests": {"cpu": "500m"}}}]},
    });
    if let Some(s) = scheduler {
        pod["spec"]["schedulerName"] = json!(s);
    }
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create pod");
}

async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok()?.spec?.node_name
}

#[test]
fn pods_are_bound_to_fitting_nodes_and_unschedulable_ones_are_explained_then_retried() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        create_node(&nodes, "open", false).await;
        create_node(&nodes, "cordoned", true).await;
        let scheduler = SchedulerProcess::start(&api, None);

        create_pod(&pods, "web", None).await;
        create_pod(&pods, "theirs", Some("another-scheduler")).await;
        let node = eventually("web to be bound", || node_of(&pods, "web")).await;
        assert_eq!(node, "open");

        // kubectl shows the event upstream's scheduler records
        let events = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=Scheduled",
                "-o",
                "jsonpath={.items[*].message}",
            ],
        );
        assert!(
            events.contains("Successfully assigned default/web to open"),
            "{events}"
        );

        // every node cordoned: the pod waits, and says why
        nodes
            .patch(
                "open",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
        create_pod(&pods, "waiting", None).await;
        let cond = eventually("the PodScheduled=False condition", || {
            not_scheduled(&pods, "waiting")
        })
        .await;
        assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
        let message = cond.message.unwrap_or_default();
        assert_eq!(
            message,
            "0/2 nodes are available: 2 node(s) were unschedulable. preemption: 0/2 nodes are \
             available: 2 Preemption is not helpful for scheduling.."
        );
        let described = api.kubectl(KUBECTL_133, &["describe", "pod", "waiting"]);
        assert!(described.contains("FailedScheduling"), "{described}");
        assert!(
            described.contains("2 node(s) were unschedulable"),
            "{described}"
        );

        // a node update requeues it
        nodes
            .patch(
                "cordoned",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": false}})),
            )
            .await
            .unwrap();
        let node = eventually("waiting to be bound", || node_of(&pods, "waiting")).await;
        assert_eq!(node, "cordoned");

        // the pod for another scheduler was never touched
        assert_eq!(node_of(&pods, "theirs").await, None);

        // /metrics counts the attempts under upstream's names (the second once its binding
        // has returned to the scheduler, which may be a moment after the pod shows it)
        let scheduled = r#"scheduler_schedule_attempts_total{result="scheduled",profile="default-scheduler"} 2"#;
        let metrics = eventually("the second scheduled attempt counted", || async {
            let metrics = scheduler.metrics();
            metrics.contains(scheduled).then_some(metrics)
        })
        .await;
        assert!(
            metrics.contains("scheduler_pending_pods{queue=\"active\"} 0"),
            "{metrics}"
        );
    });
}

#[test]
fn a_second_profile_schedules_the_pods_that_name_it() {
    let api = ApiServer::start(Backend::Embedded);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("scheduler.yaml");
    std::fs::write(
        &config,
        r"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: ignores-cordons
  plugins:
    multiPoint:
      disabled:
      - name: NodeUnschedulable
",
    )
    .unwrap();
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        create_node(&nodes, "cordoned", true).await;
        let _scheduler = SchedulerProcess::start(&api, Some(&config));
        create_pod(&pods, "bold", Some("ignores-cordons")).await;
        create_pod(&pods, "careful", None).await;
        let node = eventually("bold to be bound", || node_of(&pods, "bold")).await;
        assert_eq!(node, "cordoned");
        eventually("careful to be marked unschedulable", || {
            not_scheduled(&pods, "careful")
        })
        .await;
        assert_eq!(node_of(&pods, "careful").await, None);
    });
}

/// The pod's `PodScheduled=False` condition, once the scheduler has set it.
async fn not_scheduled(pods: &Api<Pod>, name: &str) -> Option<PodCondition> {
    let pod = pods.get(name).await.ok()?;
    pod.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases.get_opt(name).await.ok()??.spec?.holder_identity
}

#[test]
fn a_standby_replica_takes_over_when_the_leader_dies() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
        create_node(&nodes, "n1", false).await;
        let mut first = SchedulerProcess::start(&api, None);
        let holder = eventually("the first replica to lead", || {
            lease_holder(&leases, "kube-scheduler")
        })
        .await;
        assert!(
            holder.ends_with(&format!("_{}", first.child.id())),
            "{holder}"
        );
        let standby = SchedulerProcess::start(&api, None);
        create_pod(&pods, "before", None).await;
        eventually("before to be bound", || node_of(&pods, "before")).await;

        // the leader dies without giving the lease up; the standby waits out the lease
        let _ = first.child.kill();
        let _ = first.child.wait();
        create_pod(&pods, "after", None).await;
        let node = eventually("the standby to bind after", || node_of(&pods, "after")).await;
        assert_eq!(node, "n1");
        let holder = lease_holder(&leases, "kube-scheduler").await.unwrap();
        assert!(
            holder.ends_with(&format!("_{}", standby.child.id())),
            "{holder}"
        );
    });
}

#[test]
fn a_second_scheduler_process_with_its_own_name_and_lease_coexists() {
    let api = ApiServer::start(Backend::Embedded);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("second.yaml");
    std::fs::write(
        &config,
        r"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceName: second-scheduler
profiles:
- schedulerName: second-scheduler
",
    )
    .unwrap();
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-system");
        create_node(&nodes, "n1", false).await;
        let default = SchedulerProcess::start(&api, None);
        let second = SchedulerProcess::start_second(&api, &config);
        create_pod(&pods, "mine", None).await;
        create_pod(&pods, "yours", Some("second-scheduler")).await;
        eventually("mine to be bound", || node_of(&pods, "mine")).await;
        eventually("yours to be bound", || node_of(&pods, "yours")).await;
        // each process leads its own lease
        let first = lease_holder(&leases, "kube-scheduler").await.unwrap();
        let other = lease_holder(&leases, "second-scheduler").await.unwrap();
        assert!(
            first.ends_with(&format!("_{}", default.child.id())),
            "{first}"
        );
        assert!(
            other.ends_with(&format!("_{}", second.child.id())),
            "{other}"
        );
        // and each recorded its own Scheduled event
        let events = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=Scheduled",
                "-o",
                "jsonpath={range .items[*]}{.reportingInstance}{\"\\n\"}{end}",
            ],
        );
        assert!(
            events.contains(&first) && events.contains(&other),
            "{events}"
        );
    });
}

/// A pod labelled `app: {name}` asking for 2 cpus with a PriorityClass; no grace period, so
/// that deleting it (there is no kubelet here) removes it at once.
fn two_cpu_pod(name: &str, class: &str) -> String {
    format!(
        r"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: {name}}}
spec:
  priorityClassName: {class}
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: busybox
    resources:
      requests:
        cpu: '2'
"
    )
}

#[test]
fn a_higher_priority_pod_preempts_a_lower_priority_one_and_takes_its_room() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        create_node(&nodes, "n1", false).await;
        let _scheduler = SchedulerProcess::start(&api, None);
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(
                r"apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: polite}
value: 5000
preemptionPolicy: Never
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: keep-low-a}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: low-a}}
",
            ),
        );
        // the Priority admission plugin refuses a class that does not exist
        let refused = api.kubectl_fails(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&two_cpu_pod("lost", "gold")),
        );
        assert!(
            refused.contains("no PriorityClass with name gold was found"),
            "{refused}"
        );

        for name in ["low-a", "low-b"] {
            api.kubectl_stdin(
                KUBECTL_133,
                &["apply", "-f", "-"],
                Some(&two_cpu_pod(name, "low")),
            );
        }
        for name in ["low-a", "low-b"] {
            eventually("the low pods to be bound", || node_of(&pods, name)).await;
        }
        let low_uids: Vec<(String, String)> = {
            let mut v = Vec::new();
            for name in ["low-a", "low-b"] {
                let p = pods.get(name).await.unwrap();
                assert_eq!(
                    p.spec.as_ref().unwrap().priority,
                    Some(10),
                    "admission set it"
                );
                v.push((name.to_string(), p.metadata.uid.unwrap()));
            }
            v
        };

        // the node is full: the important pod evicts the low pod no budget protects, and is
        // bound in its place
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&two_cpu_pod("vip", "high")),
        );
        let node = eventually("vip to be bound", || node_of(&pods, "vip")).await;
        assert_eq!(node, "n1");
        let vip = pods.get("vip").await.unwrap();
        let mut survivors = Vec::new();
        for (name, uid) in &low_uids {
            if let Some(p) = pods.get_opt(name).await.unwrap() {
                // a pod re-created under the same name would have another uid
                assert_eq!(p.metadata.uid.as_ref(), Some(uid));
                survivors.push(name.clone());
            }
        }
        // the budget protects low-a (no disruption controller runs: none is allowed)
        assert_eq!(survivors, vec!["low-a".to_string()]);
        let preempted = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=Preempted",
                "-o",
                "jsonpath={.items[*].message}",
            ],
        );
        let want = format!(
            "Preempted by pod {} on node n1",
            vip.metadata.uid.as_deref().unwrap()
        );
        assert!(preempted.contains(&want), "{preempted}");

        // a pod whose class never preempts waits, and says so
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&two_cpu_pod("meek", "polite")),
        );
        let cond = eventually("meek to be marked unschedulable", || {
            not_scheduled(&pods, "meek")
        })
        .await;
        assert_eq!(
            cond.message.as_deref(),
            Some(
                "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to \
                 preemptionPolicy=Never.."
            )
        );
        assert!(pods.get_opt(&survivors[0]).await.unwrap().is_some());
    });
}

/// A Ready node with 4 cpus in `zone`, optionally tainted `dedicated=gpu:NoSchedule`.
async fn zoned_node(nodes: &Api<Node>, name: &str, zone: &str, gpu: bool) {
    let mut node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": zone,
        }},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    });
    if gpu {
        node["metadata"]["labels"]["gpu"] = json!("true");
        node["spec"] =
            json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]});
    }
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node).unwrap(),
        )
        .await
        .expect("create node");
}

/// Creates a pod with `spec` (a container added if it has none) and returns where it is bound, or the
/// `PodScheduled=False` message.
async fn decide(
    pods: &Api<Pod>,
    name: &str,
    labels: serde_json::Value,
    mut spec: serde_json::Value,
) -> Result<String, String> {
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "busybox"}]);
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create pod");
    eventually("a decision", || async {
        if let Some(node) = node_of(pods, name).await {
            return Some(Ok(node));
        }
        let cond = not_scheduled(pods, name).await?;
        Some(Err(cond.message.unwrap_or_default()))
    })
    .await
}

#[test]
fn each_default_plugin_decides_and_explains_as_upstream() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        zoned_node(&nodes, "a1", "a", false).await;
        zoned_node(&nodes, "b1", "b", false).await;
        zoned_node(&nodes, "gpu1", "b", true).await;
        let _scheduler = SchedulerProcess::start(&api, None);
        let not_preemptible = "preemption: 0/3 nodes are available: 3 Preemption is not helpful \
                               for scheduling..";

        // NodeAffinity (nodeSelector), TaintToleration
        let to_b = json!({"nodeSelector": {"topology.kubernetes.io/zone": "b"}});
        let on_b = decide(&pods, "zone-b", json!({}), to_b).await;
        assert_eq!(
            on_b,
            Ok("b1".to_string()),
            "the tainted node is not tolerated"
        );
        let gpu = json!({"nodeSelector": {"gpu": "true"}});
        assert_eq!(
            decide(&pods, "gpu-untolerated", json!({}), gpu.clone()).await,
            Err(format!(
                "0/3 nodes are available: 1 node(s) had untolerated taint {{dedicated: gpu}}, 2 \
                 node(s) didn't match Pod's node affinity/selector. {not_preemptible}"
            ))
        );
        let mut tolerated = gpu;
        tolerated["tolerations"] = json!([{"key": "dedicated", "operator": "Equal",
                                           "value": "gpu", "effect": "NoSchedule"}]);
        assert_eq!(
            decide(&pods, "gpu-tolerated", json!({}), tolerated).await,
            Ok("gpu1".to_string())
        );

        // NodePorts: the second pod asking for host port 8080 on a1 does not fit there
        let port = json!({"nodeSelector": {"kubernetes.io/hostname": "a1"},
                          "containers": [{"name": "c", "image": "busybox",
                                          "ports": [{"containerPort": 80, "hostPort": 8080}]}]});
        assert_eq!(
            decide(&pods, "port-0", json!({}), port.clone()).await,
            Ok("a1".to_string())
        );
        assert_eq!(
            decide(&pods, "port-1", json!({}), port).await,
            Err(
                "0/3 nodes are available: 1 node(s) didn't have free ports for the requested pod \
                 ports, 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had \
                 untolerated taint {dedicated: gpu}. preemption: 0/3 nodes are available: 1 No \
                 preemption victims found for incoming pod, 2 Preemption is not helpful for \
                 scheduling.."
                    .to_string()
            )
        );

        // InterPodAffinity: one web pod per host among the untainted nodes
        let anti = json!({"affinity": {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "web"}},
                "topologyKey": "kubernetes.io/hostname"}]}}});
        let web = json!({"app": "web"});
        let first = decide(&pods, "web-0", web.clone(), anti.clone())
            .await
            .unwrap();
        let second = decide(&pods, "web-1", web.clone(), anti.clone())
            .await
            .unwrap();
        assert_ne!(first, second);
        assert_eq!(
            decide(&pods, "web-2", web, anti).await,
            Err(format!(
                "0/3 nodes are available: 1 node(s) had untolerated taint {{dedicated: gpu}}, 2 \
                 node(s) didn't match pod anti-affinity rules. {}",
                "preemption: 0/3 nodes are available: 1 Preemption is not helpful for \
                 scheduling, 2 No preemption victims found for incoming pod.."
            ))
        );

        // InterPodAffinity across namespaces, chosen by the namespaces' labels
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
        let shop = json!({"metadata": {"name": "shop", "labels": {"env": "prod"}}});
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(shop).unwrap(),
            )
            .await
            .unwrap();
        let shop_pods: Api<Pod> = Api::namespaced(c.clone(), "shop");
        let on_b1 = json!({"nodeSelector": {"kubernetes.io/hostname": "b1"}});
        assert_eq!(
            decide(&shop_pods, "db", json!({"app": "db"}), on_b1).await,
            Ok("b1".to_string())
        );
        let near_db = json!({"affinity": {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "db"}},
                "namespaceSelector": {"matchLabels": {"env": "prod"}},
                "topologyKey": "kubernetes.io/hostname"}]}}});
        assert_eq!(
            decide(&pods, "near-db", json!({}), near_db).await,
            Ok("b1".to_string())
        );

        // PodTopologySpread: zones a and b take turns for maxSkew 1
        let spread = json!({"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}}}]});
        let mut zones = Vec::new();
        for i in 0..4 {
            let node = decide(
                &pods,
                &format!("spread-{i}"),
                json!({"app": "spread"}),
                spread.clone(),
            )
            .await
            .unwrap();
            zones.push(if node == "a1" { "a" } else { "b" });
        }
        zones.sort();
        assert_eq!(zones, vec!["a", "a", "b", "b"]);
    });
}

#[test]
fn a_read_write_once_pod_claim_admits_one_pod_and_a_missing_claim_keeps_its_pod_waiting() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        zoned_node(&nodes, "a1", "a", false).await;
        zoned_node(&nodes, "b1", "b", false).await;
        let _scheduler = SchedulerProcess::start(&api, None);
        let with_claim = json!({"volumes": [{"name": "data",
                                             "persistentVolumeClaim": {"claimName": "data"}}]});

        let waiting = decide(&pods, "first", json!({}), with_claim.clone()).await;
        let message = waiting.expect_err("no claim yet");
        assert!(
            message
                .starts_with("0/2 nodes are available: persistentvolumeclaim \"data\" not found"),
            "{message}"
        );

        // the claim's creation wakes the pod (a claim bound already: no binder runs here)
        let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(c.clone());
        let volume = json!({"metadata": {"name": "data-pv"},
                            "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": "",
                                     "capacity": {"storage": "1Gi"},
                                     "hostPath": {"path": "/var/lib/skiff-test/data"}}});
        volumes
            .create(
                &PostParams::default(),
                &serde_json::from_value(volume).unwrap(),
            )
            .await
            .unwrap();
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(c.clone(), "default");
        let claim = json!({"metadata": {"name": "data",
                                        "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                           "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": "",
                                    "volumeName": "data-pv",
                                    "resources": {"requests": {"storage": "1Gi"}}}});
        claims
            .create(
                &PostParams::default(),
                &serde_json::from_value(claim).unwrap(),
            )
            .await
            .unwrap();
        eventually("the first pod bound", || node_of(&pods, "first")).await;

        let second = decide(&pods, "second", json!({}), with_claim).await;
        let message = second.expect_err("the claim is taken");
        assert!(
            message.starts_with(
                "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the \
                 same name and ReadWriteOncePod access mode."
            ),
            "{message}"
        );
    });
}

const GATED_POD: &str = r"apiVersion: v1
kind: Pod
metadata:
  name: held
spec:
  schedulingGates:
  - name: example.com/quota
  - name: example.com/arch
  containers:
  - name: c
    image: busybox
";

/// `kubectl get pod NAME`'s STATUS column.
fn status_column(api: &ApiServer, kubectl: &str, name: &str) -> String {
    let out = api.kubectl(kubectl, &["get", "pod", name, "--no-headers"]);
    out.split_whitespace()
        .nth(2)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_gated_pod_stays_scheduling_gated_until_its_last_gate_is_removed() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let c = client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        create_node(&nodes, "open", false).await;
        let scheduler = SchedulerProcess::start(&api, None);
        api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(GATED_POD));
        // a pod queued after the gated one is scheduled: the scheduler has seen the gated pod
        // by then, and left it alone
        create_pod(&pods, "after", None).await;
        eventually("after to be bound", || node_of(&pods, "after")).await;
        assert_eq!(node_of(&pods, "held").await, None);
        for kubectl in [KUBECTL_133, KUBECTL_127] {
            assert_eq!(status_column(&api, kubectl, "held"), "SchedulingGated");
        }
        let cond = not_scheduled(&pods, "held")
            .await
            .expect("PodScheduled=False");
        assert_eq!(cond.reason.as_deref(), Some("SchedulingGated"));
        assert_eq!(
            cond.message.as_deref(),
            Some("Scheduling is blocked due to non-empty scheduling gates")
        );
        let metrics = scheduler.metrics();
        assert!(
            metrics.contains("scheduler_pending_pods{queue=\"gated\"} 1"),
            "{metrics}"
        );
        let failed = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=FailedScheduling",
                "-o",
                "name",
            ],
        );
        assert!(failed.trim().is_empty(), "no FailedScheduling: {failed}");

        // nobody binds it, adds a gate to it, or creates one with a node
        let binding = r#"{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "held"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": "open"}}"#;
        let refused = api.kubectl_fails(
            KUBECTL_133,
            &[
                "create",
                "--raw",
                "/api/v1/namespaces/default/pods/held/binding",
                "-f",
                "-",
            ],
            Some(binding),
        );
        assert!(
            refused.contains(
                "Operation cannot be fulfilled on pods/binding \"held\": pod held has non-empty \
                 .spec.schedulingGates"
            ),
            "{refused}"
        );
        let add = r#"[{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": "x"}}]"#;
        let refused = api.kubectl_fails(
            KUBECTL_133,
            &["patch", "pod", "held", "--type=json", "-p", add],
            None,
        );
        assert!(
            refused.contains(
                "spec.schedulingGates[2].name: Forbidden: only deletion is allowed, but found \
                 new scheduling gate 'x'"
            ),
            "{refused}"
        );
        let placed = GATED_POD
            .replace("name: held", "name: placed")
            .replace("spec:\n", "spec:\n  nodeName: open\n");
        let refused = api.kubectl_fails(KUBECTL_133, &["create", "-f", "-"], Some(&placed));
        assert!(
            refused.contains(
                "spec.nodeName: Forbidden: cannot be set until all schedulingGates have been \
                 cleared"
            ),
            "{refused}"
        );

        // one gate removed, one left: still held (a pod created after that update is
        // scheduled, this one is not)
        let remove_first = r#"[{"op": "remove", "path": "/spec/schedulingGates/0"}]"#;
        api.kubectl(
            KUBECTL_133,
            &["patch", "pod", "held", "--type=json", "-p", remove_first],
        );
        create_pod(&pods, "after-2", None).await;
        eventually("after-2 to be bound", || node_of(&pods, "after-2")).await;
        assert_eq!(node_of(&pods, "held").await, None);
        assert_eq!(status_column(&api, KUBECTL_133, "held"), "SchedulingGated");

        // the last gate removed: scheduled
        let remove_all = r#"[{"op": "remove", "path": "/spec/schedulingGates"}]"#;
        api.kubectl(
            KUBECTL_133,
            &["patch", "pod", "held", "--type=json", "-p", remove_all],
        );
        let node = eventually("held to be bound", || node_of(&pods, "held")).await;
        assert_eq!(node, "open");
        let scheduled = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "pod",
                "held",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].status}",
            ],
        );
        assert_eq!(scheduled, "True");
        assert_eq!(status_column(&api, KUBECTL_133, "held"), "Pending");
    });
}
