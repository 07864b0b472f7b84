//! The lifecycle trace end to end (seed 000's picture): a real API server, scheduler, endpoint
//! controllers and a hollow kubelet acting as its node (`system:node:trace-0`); a pod is created
//! with kubectl and `skiff trace pod` shows its chain — the create, the scheduler's unfiltered
//! inbox getting it (ADDED), a `status.phase=Running` watch filtering it out (the kubelet's
//! `spec.nodeName` watch is never offered it: the watch cache indexes it by node), the Binding by
//! `system:kube-scheduler`, the kubelet's inbox getting it once bound, the node's status writes
//! and the endpoint controllers — with the queue wait the scheduler measured among the startup
//! stages; `/metrics` has the startup stage histograms, and the web page,
//! opened through a real `kubectl proxy` in headless Chromium, draws the lanes and steps. A
//! second test runs the pod on a real kubelet with containerd: the trace then has the image and
//! container events, and the sandbox, image, container start and readiness stages measured. A
//! third traces other kinds: a Deployment with its ReplicaSet and pods as descendants (live in
//! the stream and drawn on the page), and an HPA with its controller's scale and metric requests.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use futures::AsyncBufReadExt as _;

use support::cluster::{Process, controller_manager, identity, scheduler};
use support::node::{KubeletProcess, unsupported};
use support::{ApiServer, Backend, KUBECTL_133, line_reader, line_with, output_text, run_guarded};

const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
  "spec": {"terminationGracePeriodSeconds": 0,
           "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}"#;

const SERVICE: &str = r#"{"apiVersion": "v1", "kind": "Service",
  "metadata": {"name": "web", "namespace": "default"},
  "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}"#;

/// One hollow node, `trace-0`, with the node's own identity (its writes and watch are the
/// kubelet's, as on a real node).
fn hollow_node(api: &ApiServer) -> Process {
    let kubeconfig = identity(api, "system:node:trace-0", Some("system:nodes"));
    let dir = api.data_dir.join("hollow-trace");
    Process::start_as(
        api,
        &kubeconfig,
        "hollow-trace",
        &[
            "kubelet",
            "--data-dir",
            dir.to_str().expect("utf-8 path"),
            "--hollow",
            "--count",
            "1",
            "--node-name-prefix",
            "trace",
        ],
    )
}

/// `skiff trace KIND NAME` in `default`: its output.
fn skiff_trace_of(api: &ApiServer, kind: &str, name: &str) -> String {
    let out = run_guarded(
        Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["trace", kind, name, "-n", "default", "--kubeconfig"])
            .arg(api.kubeconfig()),
    );
    let (stdout, stderr) = output_text(&out);
    assert!(
        out.status.success(),
        "skiff trace {kind} {name} failed: {stderr}"
    );
    stdout
}

fn skiff_trace(api: &ApiServer) -> String {
    skiff_trace_of(api, "pod", "web")
}

/// `skiff trace KIND NAME` until its output has a line with all of each of `wanted`'s parts.
fn skiff_trace_until(api: &ApiServer, kind: &str, name: &str, wanted: &[&[&str]]) -> String {
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    loop {
        let text = skiff_trace_of(api, kind, name);
        let has = |parts: &[&str]| text.lines().any(|l| parts.iter().all(|p| l.contains(p)));
        if wanted.iter().all(|parts| has(parts)) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {wanted:?} in the trace of {kind} {name}:\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// `kubectl proxy` on a free port: the child and its base URL.
fn kubectl_proxy(api: &ApiServer) -> (Child, String) {
    let mut child = Command::new(KUBECTL_133)
        .args(["proxy", "--port=0", "--kubeconfig"])
        .arg(api.kubeconfig())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl proxy");
    let lines = line_reader(child.stdout.take().expect("stdout"));
    let line = lines
        .recv_timeout(support::HANG_GUARD)
        .expect("kubectl proxy says where it serves");
    let addr = line
        .rsplit(' ')
        .next()
        .filter(|a| a.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("unexpected kubectl proxy line {line:?}"))
        .to_string();
    (child, format!("http://{addr}"))
}

/// Headless Chromium on `url` with `mode` (`--dump-dom` or `--screenshot=<png>`); its stdout.
fn chromium(url: &str, mode: &str, profile: &Path) -> String {
    let out = run_guarded(Command::new("chromium").args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        &format!("--user-data-dir={}", profile.display()),
        "--window-size=1200,800",
        "--virtual-time-budget=5000",
        mode,
        url,
    ]));
    let (stdout, stderr) = output_text(&out);
    assert!(out.status.success(), "chromium {mode} {url}: {stderr}");
    stdout
}

/// A PNG's width and height (from its IHDR chunk), after checking its signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 24, "not a PNG: {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn skiff_trace_pod_shows_the_chain_from_create_to_ready_and_the_page_draws_it() {
    support::run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _node = hollow_node(&api);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, &["--controllers", "endpoints,endpointslice"]);
        api.kubectl_until(KUBECTL_133, &["get", "node", "trace-0"], None, |o| {
            o.status.success()
        });
        api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(SERVICE));
        // a watch that selects by phase, not by node, is offered the new pod and leaves it out
        let client = support::kube_client(&api).await;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::default_namespaced(client.clone());
        let _running = pods
            .watch(
                &kube::api::WatchParams::default().fields("status.phase=Running"),
                "0",
            )
            .await
            .expect("a watch of running pods");
        api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(POD));
        api.kubectl_until(
            KUBECTL_133,
            &[
                "get",
                "pod",
                "web",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
            |o| o.stdout == b"True",
        );
        // the endpoint controllers have listed the ready pod
        let mut text = String::new();
        let deadline = std::time::Instant::now() + support::HANG_GUARD;
        while !text.contains("EndpointSlice") || !text.contains("Endpoints web") {
            assert!(
                std::time::Instant::now() < deadline,
                "no endpoints in:\n{text}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
            text = skiff_trace(&api);
        }

        eprintln!("{text}");
        let create = line_with(
            &text,
            &["kubectl", "create pods rv=", "by admin", "created"],
        );
        let scheduler_inbox = line_with(
            &text,
            &[
                "scheduler inbox",
                "ADDED",
                "system:kube-scheduler",
                "[all pods]",
            ],
        );
        let filtered = line_with(&text, &["filtered out", "[fields: status.phase=Running]"]);
        assert!(
            !text
                .lines()
                .any(|l| l.contains("kubelet trace-0 inbox") && l.contains("filtered out")),
            "the kubelet's watch is offered only its node's pods:\n{text}"
        );
        let binding = line_with(
            &text,
            &[
                "create pods/binding",
                "by system:kube-scheduler",
                "spec.nodeName=trace-0",
            ],
        );
        let kubelet_inbox = line_with(
            &text,
            &[
                "kubelet trace-0 inbox",
                "ADDED",
                "system:node:trace-0",
                "[fields: spec.nodeName=trace-0]",
            ],
        );
        let status = line_with(&text, &["pods/status", "by system:node:trace-0"]);
        let ready = text
            .lines()
            .position(|l| {
                l.contains("by system:node:trace-0")
                    && (l.contains("Ready False→True") || l.contains("Ready=True"))
            })
            .unwrap_or_else(|| panic!("no write making the pod Ready in:\n{text}"));
        let endpoints = line_with(&text, &["Endpoints web:", "lists the pod"]);
        line_with(&text, &["EndpointSlice web-", "lists the pod"]);
        assert!(create < scheduler_inbox && create < filtered, "{text}");
        assert!(filtered < binding && binding < kubelet_inbox, "{text}");
        assert!(kubelet_inbox < status && status <= ready, "{text}");
        assert!(kubelet_inbox < endpoints, "{text}");
        line_with(&text, &["Startup (as the API server saw it):"]);
        // Skiff's scheduler reports the queue wait on its Binding; scheduling is the rest
        line_with(
            &text,
            &["queue_wait", " ms  ", "as the scheduler measured it"],
        );
        line_with(&text, &["scheduling", " ms  until ", "less queue_wait"]);
        for stage in ["scheduling", "binding", "kubelet_pickup", "readiness"] {
            line_with(&text, &[stage, " ms  until "]);
        }

        // the streaming variant: the document, then each new entry as it is recorded
        let request = http::Request::get("/debug/trace/pods/default/web?watch=1")
            .body(Vec::new())
            .unwrap();
        let mut stream = Box::pin(client.request_stream(request).await.expect("trace stream"));
        let mut line = String::new();
        stream.read_line(&mut line).await.expect("the document");
        let doc: serde_json::Value = serde_json::from_str(&line).expect("a JSON document");
        assert_eq!(doc["kind"], "Trace");
        assert!(
            doc["entries"].as_array().is_some_and(|e| e.len() > 10),
            "{doc}"
        );
        api.kubectl(KUBECTL_133, &["label", "pod", "web", "traced=yes"]);
        let patched = loop {
            line.clear();
            stream.read_line(&mut line).await.expect("an entry");
            let entry: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
            if entry["entry"]["kind"] == "write" {
                break entry;
            }
        };
        assert_eq!(patched["entry"]["verb"], "patch", "{patched}");
        assert_eq!(patched["entry"]["client"]["user"], "admin", "{patched}");
        drop(stream);

        let metrics = api.kubectl(KUBECTL_133, &["get", "--raw", "/metrics"]);
        for stage in [
            "queue_wait",
            "scheduling",
            "binding",
            "kubelet_pickup",
            "readiness",
        ] {
            let count = format!("skiff_pod_startup_stage_seconds_count{{stage=\"{stage}\"}} 1");
            assert!(metrics.contains(&count), "no {count} in /metrics");
        }

        // the web page, through kubectl proxy, in headless Chromium
        let (mut proxy, base) = kubectl_proxy(&api);
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("{base}/ui/trace/pods/default/web");
        let dom = chromium(&url, "--dump-dom", &dir.path().join("profile-dom"));
        for lane in [
            "apiserver",
            "scheduler inbox",
            "kubelet trace-0 inbox",
            "kubelet trace-0",
        ] {
            assert!(
                dom.contains(&format!(">{lane}</text>")),
                "no lane {lane} in the page:\n{dom}"
            );
        }
        assert!(
            dom.contains("create pods/binding"),
            "no binding step in the page:\n{dom}"
        );
        assert!(
            dom.contains("filtered out"),
            "no filtered step in the page:\n{dom}"
        );
        assert!(
            dom.contains("updating live"),
            "the page did not render:\n{dom}"
        );

        let shot = dir.path().join("trace.png");
        chromium(
            &url,
            &format!("--screenshot={}", shot.display()),
            &dir.path().join("profile-1"),
        );
        let blank = dir.path().join("blank.png");
        chromium(
            "about:blank",
            &format!("--screenshot={}", blank.display()),
            &dir.path().join("profile-2"),
        );
        let (page, empty) = (
            std::fs::read(&shot).unwrap(),
            std::fs::read(&blank).unwrap(),
        );
        assert_eq!(png_size(&page), (1200, 800));
        assert!(
            page.len() > 10 * empty.len() && page.len() > 20_000,
            "the page's screenshot ({} bytes) is no richer than a blank page's ({} bytes)",
            page.len(),
            empty.len()
        );
        if let Ok(keep) = std::env::var("SKIFF_TRACE_SCREENSHOT") {
            std::fs::copy(&shot, keep).expect("keeping the screenshot");
        }
        let _ = proxy.kill();
        let _ = proxy.wait();
    });
}

const DEPLOYMENT: &str = r#"{"apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": "web", "namespace": "default"},
  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
           "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"terminationGracePeriodSeconds": 0,
                                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                 "resources": {"requests": {"cpu": "100m"}}}]}}}}"#;

/// At least three replicas: from two, the HPA scales the Deployment up without a metric, and
/// then reads the metrics (which no API serves here).
const HPA: &str = r#"{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
  "metadata": {"name": "web", "namespace": "default"},
  "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
           "minReplicas": 3, "maxReplicas": 4,
           "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50}}}]}}"#;

#[test]
fn a_deployments_trace_has_its_descendants_live_and_an_hpas_has_its_reads_and_scale_writes() {
    support::run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _node = hollow_node(&api);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(
            &api,
            &[
                "--controllers",
                "deployment,replicaset,horizontalpodautoscaling",
                "--horizontal-pod-autoscaler-sync-period=1s",
            ],
        );
        api.kubectl_until(KUBECTL_133, &["get", "node", "trace-0"], None, |o| {
            o.status.success()
        });
        api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(DEPLOYMENT));
        api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(HPA));
        api.kubectl_until(
            KUBECTL_133,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ],
            None,
            |o| o.stdout == b"3",
        );

        // the HPA's timeline: its own writes, the Event about it, and the requests its
        // controller made on its behalf: the scale read and write, then the metric read
        let text = skiff_trace_until(
            &api,
            "hpa",
            "web",
            &[
                &["get /apis/apps/v1/namespaces/default/deployments/web/scale → 200"],
                &["update /apis/apps/v1/namespaces/default/deployments/web/scale → 200"],
                &[
                    "list /apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb → 404",
                ],
                &[
                    "Event Normal SuccessfulRescale: New size: 3; reason: Current number of replicas below Spec.MinReplicas",
                ],
            ],
        );
        eprintln!("{text}");
        line_with(&text, &["HorizontalPodAutoscaler default/web: "]);
        line_with(
            &text,
            &[
                "create horizontalpodautoscalers.autoscaling rv=",
                "by admin",
                "created",
            ],
        );
        line_with(
            &text,
            &[
                "horizontal-pod-autoscaler",
                "update horizontalpodautoscalers.autoscaling/status",
            ],
        );
        assert!(!text.contains("Startup"), "only pods have stages:\n{text}");

        // the Deployment's: its writes, the scale write, its ReplicaSet and the pods
        let text = skiff_trace_until(
            &api,
            "deploy",
            "web",
            &[
                &["    pods default/web-"],
                &["update deployments.apps/scale"],
            ],
        );
        eprintln!("{text}");
        line_with(&text, &["Deployment default/web: "]);
        line_with(
            &text,
            &[
                "kubectl",
                "create deployments.apps rv=",
                "by admin",
                "created",
            ],
        );
        let created = line_with(
            &text,
            &[
                "deployment-controller",
                "create replicasets.apps web-",
                "ReplicaSet web-",
                "created",
            ],
        );
        let scaled = line_with(
            &text,
            &[
                "horizontal-pod-autoscaler",
                "update deployments.apps/scale",
                "spec.replicas 2→3",
            ],
        );
        assert!(created < scaled, "{text}");
        let tree = &text[text.find("Descendants").expect("descendants in the trace")..];
        let rows: Vec<&str> = tree.lines().skip(1).collect();
        assert_eq!(rows.len(), 4, "one ReplicaSet and its three pods:\n{text}");
        assert!(
            rows[0].starts_with("  replicasets.apps default/web-"),
            "{text}"
        );
        assert!(
            rows[1..]
                .iter()
                .all(|r| r.starts_with("    pods default/web-")),
            "{text}"
        );

        // live: the document, then the scale-up's writes of the Deployment and of its
        // descendants as they happen
        let client = support::kube_client(&api).await;
        let request = http::Request::get("/debug/trace/deployments.apps/default/web?watch=1")
            .body(Vec::new())
            .unwrap();
        let mut stream = Box::pin(client.request_stream(request).await.expect("trace stream"));
        let mut line = String::new();
        stream.read_line(&mut line).await.expect("the document");
        let doc: serde_json::Value = serde_json::from_str(&line).expect("a JSON document");
        assert_eq!(doc["kind"], "Trace");
        assert_eq!(doc["children"].as_array().map(Vec::len), Some(1), "{doc}");
        api.kubectl(KUBECTL_133, &["scale", "deployment", "web", "--replicas=4"]);
        let (mut own, mut new_pod) = (false, false);
        while !(own && new_pod) {
            line.clear();
            stream.read_line(&mut line).await.expect("a line");
            let item: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
            own |= item["entry"]["kind"] == "write" && item["entry"]["subresource"] == "scale";
            new_pod |= item["descendant"]["resource"] == "pods"
                && item["descendant"]["state"]
                    .as_str()
                    .is_some_and(|s| s.contains("created"));
        }
        drop(stream);

        // the web page draws the descendants, each linking to its own trace
        let (mut proxy, base) = kubectl_proxy(&api);
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("{base}/ui/trace/deployments.apps/default/web");
        let dom = chromium(&url, "--dump-dom", &dir.path().join("profile"));
        assert!(
            dom.contains(">Descendants</h2>"),
            "no descendants in the page:\n{dom}"
        );
        assert!(
            dom.contains("/ui/trace/replicasets.apps/default/web-")
                && dom.contains("/ui/trace/pods/default/web-"),
            "no links to the descendants' traces in the page:\n{dom}"
        );
        assert!(
            dom.contains("updating live"),
            "the page did not render:\n{dom}"
        );
        let _ = proxy.kill();
        let _ = proxy.wait();

        // bad input: a kind the server does not have, an object never written
        let out = run_guarded(
            Command::new(env!("CARGO_BIN_EXE_skiff"))
                .args(["trace", "gadgets", "x", "--kubeconfig"])
                .arg(api.kubeconfig()),
        );
        let (_, stderr) = output_text(&out);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("doesn't have a resource type \"gadgets\""),
            "{stderr}"
        );
        let missing = api.kubectl_fails(
            KUBECTL_133,
            &[
                "get",
                "--raw",
                "/debug/trace/deployments.apps/default/nothing",
            ],
            None,
        );
        assert!(
            missing.contains("no trace of deployments.apps default/nothing"),
            "{missing}"
        );
    });
}

const BUSYBOX_POD: &str = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "sleeper", "namespace": "default"},
  "spec": {"terminationGracePeriodSeconds": 0,
           "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}}"#;

#[test]
fn on_a_real_kubelet_the_trace_has_the_container_events_and_every_node_stage() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    support::run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _kubelet = KubeletProcess::start(&api, "trace-node");
        let _scheduler = scheduler(&api);
        api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(BUSYBOX_POD));
        api.kubectl_until(
            KUBECTL_133,
            &[
                "get",
                "pod",
                "sleeper",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
            |o| o.stdout == b"True",
        );
        let text = skiff_trace_of(&api, "pod", "sleeper");
        eprintln!("{text}");
        let binding = line_with(&text, &["create pods/binding", "by system:kube-scheduler"]);
        let inbox = line_with(
            &text,
            &[
                "kubelet trace-node inbox",
                "ADDED",
                "[fields: spec.nodeName=trace-node]",
            ],
        );
        let pulled = line_with(&text, &["by system:node:trace-node", "Event Normal Pulled"]);
        let started = line_with(
            &text,
            &["by system:node:trace-node", "Event Normal Started"],
        );
        line_with(
            &text,
            &["pods/status", "by system:node:trace-node", "container c:"],
        );
        assert!(
            binding < inbox && inbox < pulled && pulled < started,
            "{text}"
        );
        for stage in [
            "kubelet_pickup",
            "sandbox",
            "image",
            "container_start",
            "readiness",
        ] {
            line_with(&text, &[stage, " ms  until "]);
        }
        api.kubectl(KUBECTL_133, &["delete", "pod", "sleeper", "--wait=false"]);
    });
}
