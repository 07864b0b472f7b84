//! `skiff kubelet` against a real `skiff apiserver` and the real containerd it manages (seed
//! 001: the kubelet watches its own pods, runs a sandbox and containers through CRI and writes
//! status back): the Node registers Ready with its Lease; a busybox pod (the built-in image,
//! offline) runs its init container, then reaches Running with a pod IP from the CNI bridge and its container statuses; pods
//! that exit reach Succeeded or Failed under restartPolicy Never; a crashing pod is restarted
//! into CrashLoopBackOff; a postStart hook runs; one pod fetches over HTTP from another's pod IP; a readiness probe gates ready and a failing liveness probe restarts; env from a ConfigMap, and a missing one reported; a restarted kubelet adopts running containers; a deleted pod is stopped within its grace period and removed, its
//! containers gone from containerd. Needs root (containerd, CNI); skips otherwise.

mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::kubelet::{KubeletProcess, NODE, in_phase, unsupported};
use support::{ApiServer, Backend, eventually, kube_client, run};

async fn create_pod(pods: &Api<Pod>, name: &str, restart_policy: &str, script: &str) -> Pod {
    create_pod_with_init(pods, name, restart_policy, None, script).await
}

async fn create_pod_with_init(
    pods: &Api<Pod>,
    name: &str,
    restart_policy: &str,
    init: Option<&str>,
    script: &str,
) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "c", "image": "busybox",
                            "command": ["sh", "-c", script],
                            "env": [{"name": "GREETING", "valueFrom":
                                        {"configMapKeyRef": {"name": "words", "key": "greeting"}}},
                                    {"name": "POD_IP", "valueFrom":
                                        {"fieldRef": {"fieldPath": "status.podIP"}}}],
                            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                            "lifecycle": {"postStart": {"exec": {"command": ["touch", "/tmp/started"]}}},
                            "readinessProbe": {"exec": {"command": ["cat", "/tmp/started"]},
                                               "periodSeconds": 1}}],
        },
    });
    if let Some(init) = init {
        pod["spec"]["initContainers"] = json!([{"name": "setup", "image": "busybox",
                                               "command": ["sh", "-c", init]}]);
    }
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create pod")
}

#[test]
fn pods_run_on_the_real_containerd_report_their_status_and_are_stopped_on_deletion() {
    if let Some(why) = unsupported() {
        eprintln!("skipping: {why}");
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let mut kubelet = KubeletProcess::start(&api);
    run(async {
        let c = kube_client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");

        // the Node and its Lease
        let node = nodes.get(NODE).await.expect("the node is registered");
        let status = node.status.clone().unwrap();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(ready.status, "True");
        let info = status.node_info.unwrap();
        assert!(
            info.container_runtime_version
                .starts_with("containerd://1."),
            "{}",
            info.container_runtime_version
        );
        assert!(status.capacity.unwrap().contains_key("cpu"));
        // the built-in images, as the scheduler's ImageLocality reads them
        let names: Vec<String> = status
            .images
            .iter()
            .flatten()
            .flat_map(|i| i.names.clone().unwrap_or_default())
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n == "docker.io/library/busybox:latest"),
            "{names:?}"
        );
        let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
        let lease = eventually("the node lease", || async {
            leases.get_opt(NODE).await.ok().flatten()
        })
        .await;
        assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some(NODE));

        // the ConfigMap every pod's env reads
        let words: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "words"}, "data": {"greeting": "hello"}}))
        .unwrap();
        Api::<ConfigMap>::namespaced(c.clone(), "default")
            .create(&PostParams::default(), &words)
            .await
            .expect("create the configmap");

        // a long-running pod: Running, with a pod IP from the bridge and container statuses
        let web = create_pod_with_init(
            &pods,
            "web",
            "Always",
            Some("echo init done"),
            "trap 'exit 0' TERM; echo $GREETING from $POD_IP; sleep 3600 & wait",
        )
        .await;
        // Running, then ready once its readiness probe (exec through CRI) finds what its
        // postStart hook wrote
        let running = eventually("web to be Running and ready", || async {
            let pod = in_phase(&pods, "web", "Running").await?;
            let cs = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
            cs.ready.then_some(pod)
        })
        .await;
        let status = running.status.unwrap();
        let pod_ip = status.pod_ip.clone().expect("a pod IP");
        assert!(pod_ip.starts_with("10.42.0."), "{pod_ip}");
        assert_eq!(status.pod_ips.unwrap()[0].ip, pod_ip);
        assert!(status.host_ip.is_some());
        assert!(status.start_time.is_some());
        let cs = &status.container_statuses.unwrap()[0];
        assert!(cs.ready);
        assert_eq!(cs.restart_count, 0);
        assert!(cs.state.as_ref().unwrap().running.is_some());
        let container_id = cs.container_id.clone().unwrap();
        assert!(container_id.starts_with("containerd://"), "{container_id}");
        assert_eq!(cs.image, "docker.io/library/busybox:latest");
        assert!(!cs.image_id.is_empty());
        let init = &status.init_container_statuses.clone().unwrap()[0];
        let done = init
            .state
            .clone()
            .unwrap()
            .terminated
            .expect("the init container ran");
        assert_eq!((done.exit_code, init.ready), (0, true));
        for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
            let cond = status.conditions.iter().flatten().find(|c| c.type_ == t);
            assert_eq!(cond.map(|c| c.status.as_str()), Some("True"), "{t}");
        }
        // its output in the CRI log file (env passed through)
        let uid = web.metadata.uid.clone().unwrap();
        let log_file = kubelet
            .data()
            .join(format!("logs/pods/default_web_{uid}/c/0.log"));
        let line = eventually("the container's log line", || async {
            let text = support::read(&log_file);
            text.lines()
                .find(|l| l.contains(" stdout F hello from "))
                .map(String::from)
        })
        .await;
        assert!(
            line.ends_with(&format!("stdout F hello from {pod_ip}")),
            "{line}"
        );
        // limits became cgroup settings through CRI
        let short_id = container_id.trim_start_matches("containerd://");
        let info = kubelet.ctr(&["containers", "info", short_id]);
        assert!(
            info.contains("\"limit\": 67108864"),
            "no memory limit in\n{info}"
        );
        assert!(info.contains("\"quota\": 50000"), "no CPU quota in\n{info}");

        // upstream's events, as kubectl shows them
        let events = api.kubectl(
            support::KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=web",
                "-o",
                "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
            ],
        );
        for expected in [
            "Pulled: ",
            "Created: Created container: c",
            "Started: Started container c",
        ] {
            assert!(
                events.contains(expected),
                "{expected} missing from\n{events}"
            );
        }

        // a restarted kubelet (and containerd) adopts the running container: checked below,
        // once the new kubelet has run the next pods (and so has synced this one)
        kubelet.restart(&api);

        // pod to pod over the bridge: one serves HTTP (busybox httpd), another fetches from
        // its pod IP and exits 0
        create_pod(
            &pods,
            "server",
            "Always",
            "mkdir -p /www && echo pong > /www/index.html && exec httpd -f -p 8080 -h /www",
        )
        .await;
        let server = eventually("server to run", || in_phase(&pods, "server", "Running")).await;
        let server_ip = server.status.unwrap().pod_ip.expect("the server's pod IP");
        create_pod(
            &pods,
            "client",
            "Never",
            &format!(
                "for i in 1 2 3 4 5; do wget -q -O - http://{server_ip}:8080/ && exit 0; sleep 1; done; exit 1"
            ),
        )
        .await;
        eventually("client to fetch from server", || {
            in_phase(&pods, "client", "Succeeded")
        })
        .await;
        let client = pods.get("client").await.unwrap();
        let client_log = kubelet.data().join(format!(
            "logs/pods/default_client_{}/c/0.log",
            client.metadata.uid.unwrap()
        ));
        assert!(support::read(&client_log).contains("stdout F pong"));

        // pods that exit under restartPolicy Never
        create_pod(&pods, "once", "Never", "exit 0").await;
        create_pod(&pods, "fails", "Never", "exit 3").await;
        let once = eventually("once to succeed", || in_phase(&pods, "once", "Succeeded")).await;
        let term = once.status.unwrap().container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .expect("a terminated state");
        assert_eq!(
            (term.exit_code, term.reason.as_deref()),
            (0, Some("Completed"))
        );
        let fails = eventually("fails to fail", || in_phase(&pods, "fails", "Failed")).await;
        let term = fails.status.unwrap().container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .expect("a terminated state");
        assert_eq!((term.exit_code, term.reason.as_deref()), (3, Some("Error")));

        // a pod whose env names a ConfigMap that does not exist waits, and says why
        let mut lost = json!({
            "metadata": {"name": "lost"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox",
                "env": [{"name": "X", "valueFrom":
                    {"configMapKeyRef": {"name": "absent", "key": "k"}}}]}]}});
        lost["apiVersion"] = json!("v1");
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(lost).unwrap(),
        )
        .await
        .expect("create pod");
        let waiting = eventually("lost to report its config error", || async {
            let pod = pods.get("lost").await.ok()?;
            let cs = pod.status?.container_statuses?.into_iter().next()?;
            cs.state?
                .waiting
                .filter(|w| w.reason.as_deref() == Some("CreateContainerConfigError"))
        })
        .await;
        assert_eq!(
            waiting.message.as_deref(),
            Some("configmap \"absent\" not found")
        );

        // a failing liveness probe restarts the container
        let sick = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sick"},
            "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "c", "image": "busybox",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
                        "livenessProbe": {"exec": {"command": ["false"]},
                                          "periodSeconds": 1, "failureThreshold": 1}}]}});
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(sick).unwrap(),
        )
        .await
        .expect("create pod");
        eventually("sick to be restarted", || async {
            let pod = pods.get("sick").await.ok()?;
            let cs = pod.status?.container_statuses?.into_iter().next()?;
            (cs.restart_count >= 1).then_some(())
        })
        .await;
        let unhealthy = api.kubectl(
            support::KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=sick,reason=Unhealthy",
                "-o",
                "jsonpath={.items[0].message}",
            ],
        );
        assert!(
            unhealthy.starts_with("Liveness probe failed"),
            "{unhealthy}"
        );

        // a crashing pod is restarted, then backs off
        create_pod(&pods, "crash", "Always", "exit 1").await;
        let backoff = eventually("crash to back off", || async {
            let pod = pods.get("crash").await.ok()?;
            let cs = pod.status?.container_statuses?.into_iter().next()?;
            let waiting = cs.state.clone()?.waiting?;
            (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then_some(cs)
        })
        .await;
        assert!(backoff.restart_count >= 1, "{backoff:?}");
        let last = backoff.last_state.unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, 1);

        let after = pods.get("web").await.unwrap().status.unwrap();
        assert_eq!(after.phase.as_deref(), Some("Running"));
        assert_eq!(after.pod_ip.as_deref(), Some(pod_ip.as_str()));
        let cs = &after.container_statuses.unwrap()[0];
        assert_eq!(cs.container_id.as_deref(), Some(container_id.as_str()));
        assert_eq!(cs.restart_count, 0);

        // deletion: stopped within the grace period, then the object is gone
        let short_id = container_id.trim_start_matches("containerd://").to_string();
        assert!(kubelet.ctr(&["tasks", "ls"]).contains(&short_id));
        for name in [
            "web", "once", "fails", "crash", "lost", "sick", "server", "client",
        ] {
            pods.delete(name, &DeleteParams::default())
                .await
                .expect("delete pod");
        }
        for name in [
            "web", "once", "fails", "crash", "lost", "sick", "server", "client",
        ] {
            eventually(&format!("{name} to be gone"), || async {
                pods.get_opt(name).await.ok()?.is_none().then_some(())
            })
            .await;
        }
        // web was stopped before its object went; finished pods go at once (nothing to stop)
        // and the kubelet removes their containers after the fact
        let tasks = kubelet.ctr(&["tasks", "ls", "-q"]);
        assert!(!tasks.contains(&short_id), "web's task remains: {tasks}");
        eventually("every container to be removed", || async {
            kubelet
                .ctr(&["containers", "ls", "-q"])
                .trim()
                .is_empty()
                .then_some(())
        })
        .await;
    });
}
