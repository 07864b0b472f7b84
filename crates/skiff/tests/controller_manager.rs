//! `skiff controller-manager` as a separate process against a real `skiff apiserver` (seeds
//! 001–003: controllers are only API clients): the process, its `--controllers` selection and
//! leader Lease, and each controller's effect seen through the API.

mod support;

use std::process::Command;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::cluster::controller_manager;
use support::{ApiServer, Backend, eventually, kube_client as client, run};

#[test]
fn an_unknown_controller_is_a_usage_error() {
    let out = support::run_guarded(Command::new(env!("CARGO_BIN_EXE_skiff")).args([
        "controller-manager",
        "--kubeconfig",
        "/nonexistent",
        "--controllers",
        "*,nosuch",
    ]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"nosuch\""), "{stderr}");
}

#[test]
fn the_leader_holds_its_lease_and_every_namespace_gets_a_default_service_account() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let cm = controller_manager(&api, &[]);
        assert!(cm.ready.contains("serviceaccount"), "{}", cm.ready);
        let client = client(&api).await;

        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let holder = eventually("the controller manager's lease", || async {
            let lease = leases.get_opt("kube-controller-manager").await.ok()??;
            lease.spec?.holder_identity
        })
        .await;
        assert!(holder.contains('_'), "host_pid identity: {holder}");

        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team-a");
        eventually("team-a/default", || async {
            accounts.get_opt("default").await.ok()?
        })
        .await;
        // the bootstrap namespaces get theirs too
        let system: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
        eventually("kube-system/default", || async {
            system.get_opt("default").await.ok()?
        })
        .await;

        // deleted, it comes back (a new object)
        let uid = accounts.get("default").await.unwrap().metadata.uid;
        accounts
            .delete("default", &DeleteParams::default())
            .await
            .unwrap();
        eventually("team-a/default recreated", || async {
            let sa = accounts.get_opt("default").await.ok()??;
            (sa.metadata.uid != uid).then_some(())
        })
        .await;
    });
}

/// The audit log's complete lines.
fn audit_events(log: &std::path::Path) -> Vec<serde_json::Value> {
    let text = support::read(log);
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn with_service_account_credentials_each_controller_writes_as_its_own_account() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n  verbs: [create, update]\n",
        )
        .unwrap();
        let log = dir.path().join("audit.log");
        let api = ApiServer::start_with(
            Backend::Embedded,
            &[
                "--audit-policy-file",
                policy.to_str().unwrap(),
                "--audit-log-path",
                log.to_str().unwrap(),
            ],
        );
        // the harness runs it as system:kube-controller-manager with the flag on
        let _cm = controller_manager(&api, &["--controllers", "serviceaccount"]);
        let client = client(&api).await;

        // its account exists, made by the controller manager
        let system: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
        eventually("kube-system/service-account-controller", || async {
            system.get_opt("service-account-controller").await.ok()?
        })
        .await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let user_of = |verb: &str, resource: &str, namespace: &str, sub: Option<&str>| {
            let (verb, resource, namespace) = (
                verb.to_string(),
                resource.to_string(),
                namespace.to_string(),
            );
            let sub = sub.map(str::to_string);
            let log = log.clone();
            async move {
                audit_events(&log).into_iter().find_map(|e| {
                    let r = &e["objectRef"];
                    (e["stage"] == "ResponseComplete"
                        && e["verb"] == verb.as_str()
                        && r["resource"] == resource.as_str()
                        && r["namespace"] == namespace.as_str()
                        && r["subresource"].as_str() == sub.as_deref()
                        && e["responseStatus"]["code"]
                            .as_i64()
                            .is_some_and(|c| c < 300))
                    .then(|| e["user"]["username"].as_str().unwrap_or("").to_string())
                })
            }
        };
        let writer = eventually("team-b/default created", || {
            user_of("create", "serviceaccounts", "team-b", None)
        })
        .await;
        assert_eq!(
            writer,
            "system:serviceaccount:kube-system:service-account-controller"
        );
        let issuer = eventually("a token for the controller", || {
            user_of("create", "serviceaccounts", "kube-system", Some("token"))
        })
        .await;
        assert_eq!(issuer, "system:kube-controller-manager");
        let leader = eventually("the lease taken", || {
            user_of("create", "leases", "kube-system", None)
        })
        .await;
        assert_eq!(leader, "system:kube-controller-manager");
    });
}

/// `apiserver_longrunning_requests` (open watches) per resource, from the API server's metrics.
async fn open_watches(client: &kube::Client) -> std::collections::BTreeMap<String, u64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("apiserver_longrunning_requests{resource=\""))
        .filter_map(|l| {
            let (resource, count) = l.split_once("\"} ")?;
            Some((resource.to_string(), count.trim().parse().ok()?))
        })
        .collect()
}

/// Issue 30's shared informers: a controller manager running every controller holds one watch
/// per resource (one Pod watch for all of them), as the API server's metrics and `skiff trace`
/// show, and its requests say which program they come from.
#[test]
fn every_controller_shares_one_watch_per_resource() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        let cm = controller_manager(&api, &[]);
        // the garbage collector's graph is synced once everything it follows is listed: every
        // controller has opened its informers by then
        let log = api.data_dir.join("controller-manager.log");
        eventually("the garbage collector's graph", || async {
            let text = std::fs::read_to_string(&log).ok()?;
            text.contains("graph synced").then_some(())
        })
        .await;
        let watches = open_watches(&client).await;
        assert_eq!(watches.get("pods"), Some(&1), "{watches:?}");
        let typed = [
            "replicasets",
            "deployments",
            "nodes",
            "namespaces",
            "jobs",
            "services",
        ];
        for resource in typed {
            assert_eq!(watches.get(resource), Some(&1), "{resource}: {watches:?}");
        }

        // a pod's creation reaches the controller manager through that one watch, and the API
        // server counts what it sent in upstream's watch event metrics
        let pod_events = || async {
            let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
            let text = client.request_text(request).await.unwrap();
            let labels = r#"{group="",version="v1",kind="Pod"}"#;
            let events = sample(&text, &format!("apiserver_watch_events_total{labels}"));
            let bytes = sample(&text, &format!("apiserver_watch_events_sizes_sum{labels}"));
            (events.unwrap_or(0.0), bytes.unwrap_or(0.0))
        };
        let (events_before, bytes_before) = pod_events().await;
        let pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }))
        .unwrap();
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        let trace = eventually("the controller manager in the pod's trace", || async {
            let out = support::run_guarded(
                Command::new(env!("CARGO_BIN_EXE_skiff"))
                    .args(["trace", "pod", "web", "-n", "default", "--kubeconfig"])
                    .arg(api.kubeconfig()),
            );
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.contains("controller-manager inbox").then_some(text)
        })
        .await;
        let deliveries: Vec<&str> = trace
            .lines()
            .filter(|l| l.contains("controller-manager inbox") && l.contains("ADDED"))
            .collect();
        assert_eq!(deliveries.len(), 1, "{trace}");
        assert!(
            deliveries[0].contains("(skiff-controller-manager/v1.33.0-skiff (linux/"),
            "the user agent names the program: {trace}"
        );
        let (events, bytes) = pod_events().await;
        assert!(
            events > events_before,
            "pod watch events sent: {events_before} then {events}"
        );
        // the event line carries the whole pod: more than its name and kind
        assert!(
            bytes - bytes_before > 200.0,
            "pod watch event bytes: {bytes_before} then {bytes}"
        );
        drop(cm);
    });
}

/// `GET <path>` from `addr` over a plain HTTP/1.0 request: the status line and the body.
async fn http_get(addr: &str, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the metrics address");
    conn.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    (status, body.to_string())
}

/// The value of the sample `series` (name and labels, as exposed) in a scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// As kube-controller-manager's secure port: `/healthz` answers `ok` and `/metrics` carries the
/// work queues' series by queue name, which grow as the controllers reconcile.
#[test]
fn the_work_queues_series_are_served_on_metrics_and_healthz_is_ok() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let cm = controller_manager(&api, &["--controllers", "replicaset,deployment"]);
        let addr = cm.address_after("metrics http://");

        let (status, body) = http_get(&addr, "/healthz").await;
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(body, "ok");

        let client = client(&api).await;
        let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        }))
        .unwrap();
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &deployment)
            .await
            .unwrap();

        // the Deployment went through the deployment queue, its ReplicaSet through replicaset's,
        // and both were reconciled (a reconcile is timed once it returns)
        let text = eventually("both queues' adds and reconciles on /metrics", || async {
            let (status, text) = http_get(&addr, "/metrics").await;
            assert!(status.contains(" 200 "), "{status}");
            let positive = |series: &str, queue: &str| {
                sample(&text, &format!("{series}{{name=\"{queue}\"}}")).is_some_and(|n| n > 0.0)
            };
            let done = ["deployment", "replicaset"].iter().all(|queue| {
                positive("workqueue_adds_total", queue)
                    && positive("workqueue_work_duration_seconds_count", queue)
            });
            done.then_some(text)
        })
        .await;
        for series in [
            "# TYPE workqueue_depth gauge",
            "workqueue_depth{name=\"deployment\"}",
            "# TYPE workqueue_retries counter",
            "workqueue_queue_duration_seconds_count{name=\"deployment\"}",
            "# TYPE workqueue_work_duration_seconds histogram",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
    });
}
