//! `skiff kubelet` against a real `skiff apiserver` and the real containerd it manages (seed
//! 001: the kubelet watches its own pods, runs a sandbox and containers through CRI and writes
//! status back): the Node registers Ready with its Lease; a busybox pod (the built-in image,
//! offline) runs its init container, then reaches Running with a pod IP from the CNI bridge and its container statuses; pods
//! that exit reach Succeeded or Failed under restartPolicy Never; a crashing pod is restarted
//! into CrashLoopBackOff; a postStart hook runs; one pod fetches over HTTP from another's pod IP; a readiness probe gates ready and a failing liveness probe restarts; env from a ConfigMap, and a missing one reported; a restarted kubelet adopts running containers and a crashed containerd is restarted; a deleted pod is stopped within its grace period and removed, its
//! containers gone from containerd. A pod's image is pulled from Debian's `docker-registry` on
//! loopback with its imagePullSecrets, and refused without them. The kubelet's own server lets
//! in only the clients the API server authenticates and authorizes (certificates, service
//! account tokens; `nodes/metrics` granted by RBAC). Its Summary API reports a CPU-burning
//! pod at about a core, with its memory, network, emptyDir and logs, and `/metrics/resource`
//! and `/metrics/cadvisor` its CPU time. Needs root (containerd, CNI); skips otherwise.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::cluster::controller_manager;
use support::https::{self, Client};
use support::node::{KubeletProcess, in_phase, unsupported};
use support::{ApiServer, Backend, HANG_GUARD, KUBECTL_133, eventually, kube_client, run};

const NODE: &str = "kubelet-e2e";

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

/// The tests of this file share the host's `cni0` bridge: one at a time.
static ONE_NODE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn pods_run_on_the_real_containerd_report_their_status_and_are_stopped_on_deletion() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let _node = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let api = ApiServer::start(Backend::Embedded);
    let mut kubelet = KubeletProcess::start(&api, NODE);
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
        kubelet.restart();
        // and containerd crashing under it: the kubelet restarts it, reconnects and carries on
        // (the pods below run on the new one)
        let pid_file = kubelet.data().join("containerd/containerd.pid");
        let crashed = support::read(&pid_file).trim().to_string();
        assert!(!crashed.is_empty(), "no containerd pid file");
        let _ = Command::new("kill").args(["-KILL", &crashed]).status();
        eventually("containerd to be restarted", || async {
            let pid = support::read(&pid_file).trim().to_string();
            (!pid.is_empty() && pid != crashed).then_some(())
        })
        .await;

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

        // a sidecar (an init container that always restarts) runs beside the app and does not
        // keep a Never pod alive once the app is done
        let sidecar = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sidecar"},
            "spec": {"nodeName": NODE, "restartPolicy": "Never",
                     "initContainers": [{"name": "side", "image": "busybox",
                        "restartPolicy": "Always",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]}],
                     "containers": [{"name": "app", "image": "busybox",
                        "command": ["sh", "-c", "sleep 3"]}]}});
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(sidecar).unwrap(),
        )
        .await
        .expect("create pod");
        let beside = eventually("the app to run beside its sidecar", || async {
            let pod = in_phase(&pods, "sidecar", "Running").await?;
            let status = pod.status?;
            let side = status.init_container_statuses?.into_iter().next()?;
            let app = status.container_statuses?.into_iter().next()?;
            (app.state?.running.is_some()).then_some(side)
        })
        .await;
        assert_eq!(beside.started, Some(true));
        assert!(beside.state.unwrap().running.is_some());
        // a BestEffort pod: the OOM killer's first choice, as upstream sets it
        let side_id = beside.container_id.expect("the sidecar's id");
        let info = kubelet.ctr(&[
            "containers",
            "info",
            side_id.trim_start_matches("containerd://"),
        ]);
        assert!(info.contains("\"oomScoreAdj\": 1000"), "{info}");
        eventually("the sidecar pod to succeed", || {
            in_phase(&pods, "sidecar", "Succeeded")
        })
        .await;

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
        let unhealthy = api.event_message("sick", "Unhealthy");
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
        // its repeated events form one series each rather than new Events
        let started = eventually("the crashing pod's Started events to form a series", || {
            let out = api.kubectl(
                support::KUBECTL_133,
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=crash,reason=Started",
                    "-o",
                    "jsonpath={range .items[*]}{.series.count}{\"\\n\"}{end}",
                ],
            );
            async move { (out.trim().parse::<u32>().ok()? >= 2).then_some(out) }
        })
        .await;
        assert_eq!(started.lines().count(), 1, "one Started Event: {started}");
        let described = api.kubectl(support::KUBECTL_133, &["describe", "pod", "crash"]);
        let line = described
            .lines()
            .find(|l| l.contains("Started container c"))
            .unwrap_or_else(|| panic!("no Started event in\n{described}"));
        assert!(
            line.contains(" (x") && line.contains(" over ") && line.contains("kubelet"),
            "{line}"
        );

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
            "web", "once", "fails", "crash", "lost", "sick", "server", "client", "sidecar",
        ] {
            pods.delete(name, &DeleteParams::default())
                .await
                .expect("delete pod");
        }
        for name in [
            "web", "once", "fails", "crash", "lost", "sick", "server", "client", "sidecar",
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

/// Debian's `docker-registry` on a free loopback port, requiring a login (htpasswd).
struct Registry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Registry {
    const USER: &str = "alice";
    const PASSWORD: &str = "s3cret";

    fn start() -> Registry {
        let dir = tempfile::tempdir().expect("temp dir");
        let htpasswd = support::run_guarded(Command::new("htpasswd").args([
            "-Bbn",
            Self::USER,
            Self::PASSWORD,
        ]));
        assert!(htpasswd.status.success(), "htpasswd failed");
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).expect("write htpasswd");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {root}}}}}\n\
             http: {{addr: 127.0.0.1:{port}}}\nauth: {{htpasswd: {{realm: skiff, path: {htpasswd}}}}}\n",
            root = dir.path().join("data").display(),
            htpasswd = dir.path().join("htpasswd").display(),
        );
        std::fs::write(dir.path().join("config.yml"), config).expect("write config");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let registry = Registry {
            child,
            port,
            _dir: dir,
        };
        let addr = format!("127.0.0.1:{port}");
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                start.elapsed() < HANG_GUARD,
                "docker-registry did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        registry
    }

    /// Pushes an OCI archive's image (by its ref name) as `repo:tag`, logged in.
    fn push(&self, archive: &Path, ref_name: &str, repo_tag: &str) -> String {
        let target = format!("127.0.0.1:{}/{repo_tag}", self.port);
        let out = support::run_guarded(
            Command::new("skopeo")
                .args(["copy", "--quiet", "--dest-tls-verify=false", "--dest-creds"])
                .arg(format!("{}:{}", Self::USER, Self::PASSWORD))
                .arg(format!("oci-archive:{}:{ref_name}", archive.display()))
                .arg(format!("docker://{target}")),
        );
        assert!(
            out.status.success(),
            "skopeo copy: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        target
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn images_are_pulled_from_a_registry_with_the_pods_image_pull_secrets() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    for tool in ["docker-registry", "skopeo", "htpasswd"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            support::skip(&format!("{tool} is not installed (scripts/install-deps)"));
            return;
        }
    }
    let _node = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let api = ApiServer::start(Backend::Embedded);
    let kubelet = KubeletProcess::start(&api, NODE);
    let registry = Registry::start();
    // a static pod: a manifest in the kubelet's directory, run and mirrored as `NAME-NODE`
    let manifest = kubelet.manifests().join("static.yaml");
    std::fs::create_dir_all(manifest.parent().unwrap()).expect("manifest dir");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: static}\nspec:\n  containers:\n  \
         - {name: c, image: busybox, command: [sh, -c, 'trap \"exit 0\" TERM; sleep 3600 & wait']}\n",
    )
    .expect("write manifest");
    // the built-in busybox, as the kubelet built it, pushed under a private name
    let image = registry.push(
        &kubelet.data().join("images/builtin-images.tar"),
        "latest",
        "private/busybox:1",
    );
    let never_pulled = registry.push(
        &kubelet.data().join("images/builtin-images.tar"),
        "latest",
        "private/busybox:2",
    );
    api.kubectl(
        support::KUBECTL_133,
        &[
            "create",
            "secret",
            "docker-registry",
            "regcred",
            &format!("--docker-server=127.0.0.1:{}", registry.port),
            &format!("--docker-username={}", Registry::USER),
            &format!("--docker-password={}", Registry::PASSWORD),
        ],
    );
    run(async {
        let pods: Api<Pod> = Api::namespaced(kube_client(&api).await, "default");
        let pod = |name: &str, image: &str, secrets: serde_json::Value| {
            serde_json::from_value::<Pod>(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                         "imagePullSecrets": secrets,
                         "containers": [{"name": "c", "image": image,
                            "imagePullPolicy": "Always", "command": ["true"]}]}}))
            .unwrap()
        };
        // with the secret: pulled, run, done
        pods.create(
            &PostParams::default(),
            &pod("pulled", &image, json!([{"name": "regcred"}])),
        )
        .await
        .expect("create pod");
        let done = eventually("the pulled pod to succeed", || {
            in_phase(&pods, "pulled", "Succeeded")
        })
        .await;
        let cs = &done.status.unwrap().container_statuses.unwrap()[0];
        assert_eq!(cs.image, image);
        // a pulled image's id is its repo digest, as upstream shows it
        assert!(
            cs.image_id.starts_with(&format!(
                "127.0.0.1:{}/private/busybox@sha256:",
                registry.port
            )),
            "{}",
            cs.image_id
        );

        // without it the registry refuses, and the kubelet backs off saying so; the image
        // already pulled is not used either, as upstream with imagePullPolicy Always
        pods.create(
            &PostParams::default(),
            &pod("denied", &never_pulled, json!([])),
        )
        .await
        .expect("create pod");
        pods.create(&PostParams::default(), &pod("cached", &image, json!([])))
            .await
            .expect("create pod");
        for name in ["denied", "cached"] {
            let waiting = eventually(&format!("{name} to wait on its image"), || async {
                let cs = pods.get(name).await.ok()?.status?.container_statuses?;
                let waiting = cs.into_iter().next()?.state?.waiting?;
                matches!(
                    waiting.reason.as_deref(),
                    Some("ErrImagePull" | "ImagePullBackOff")
                )
                .then_some(waiting)
            })
            .await;
            let message = waiting.message.unwrap_or_default();
            assert!(message.contains("401 Unauthorized"), "{name}: {message}");
        }
        for name in ["pulled", "denied", "cached"] {
            pods.delete(name, &DeleteParams::default())
                .await
                .expect("delete pod");
        }
        // the static pod's mirror runs; without its manifest it goes
        let mirror_name = format!("static-{NODE}");
        let mirror = eventually("the static pod to run", || {
            in_phase(&pods, &mirror_name, "Running")
        })
        .await;
        let annotations = mirror.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get("kubernetes.io/config.source")
                .map(String::as_str),
            Some("file")
        );
        assert!(annotations.contains_key("kubernetes.io/config.mirror"));
        std::fs::remove_file(&manifest).expect("remove manifest");
        for name in ["pulled", "denied", "cached", mirror_name.as_str()] {
            eventually(&format!("{name} to be gone"), || async {
                pods.get_opt(name).await.ok()?.is_none().then_some(())
            })
            .await;
        }
    });
}

/// RBAC granting `get nodes/metrics` to the service account `default/scraper`.
const METRICS_READER: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: scraper, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-metrics-reader}
rules:
- {apiGroups: [""], resources: [nodes/metrics], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: scraper-node-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-metrics-reader}
subjects:
- {kind: ServiceAccount, name: scraper, namespace: default}
"#;

#[test]
fn the_kubelet_server_lets_in_only_whom_the_api_server_authenticates_and_authorizes() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let _node = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let api = ApiServer::start(Backend::Embedded);
    let kubelet = KubeletProcess::start(&api, NODE);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(METRICS_READER));
    let token = api.kubectl(KUBECTL_133, &["create", "token", "scraper"]);
    let token = token.trim();
    let client = |user| Client::to(&api, &kubelet.serving_certificate(), kubelet.port(), user);
    let (nobody, alice, admin) = (
        client(None),
        client(Some(("alice", Some("dev")))),
        client(Some(("admin", Some("system:masters")))),
    );
    run(async {
        let get = |client: &Client, path: &str, token: Option<&str>| {
            let mut req = http::Request::get(path).header("host", "127.0.0.1");
            if let Some(t) = token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            let req = req.body(https::body("")).unwrap();
            let client = client.clone();
            async move { https::text(client.send(req).await).await }
        };
        let unauthorized = (401, "Unauthorized\n".to_string());
        assert_eq!(get(&nobody, "/healthz", None).await, unauthorized);
        assert_eq!(
            get(&nobody, "/healthz", Some("not-a-token")).await,
            unauthorized
        );
        // a certificate from the cluster CA without RBAC: 403 naming what was asked
        assert_eq!(
            get(&alice, "/healthz", None).await,
            (
                403,
                "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[healthz proxy])\n"
                    .into()
            )
        );
        // the service account's token, reviewed by the API server: nodes/metrics only
        let (code, metrics) = get(&nobody, "/metrics", Some(token)).await;
        assert_eq!(code, 200, "{metrics}");
        assert!(metrics.contains("kubelet_running_pods"), "{metrics}");
        assert_eq!(
            get(&nobody, "/pods", Some(token)).await,
            (
                403,
                "Forbidden (user=system:serviceaccount:default:scraper, verb=get, resource=nodes, subresource(s)=[pods proxy])\n"
                    .into()
            )
        );
        // system:masters (as the API server's own kubelet client certificate) may do anything
        let (code, pods) = get(&admin, "/pods", None).await;
        assert_eq!((code, pods.contains("PodList")), (200, true), "{pods}");
    });
}

/// A pod burning one core, with an emptyDir holding a 512 KiB file and a line of log.
const BURNER: &str = r#"{"apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "burner"},
  "spec": {"nodeName": "kubelet-e2e", "terminationGracePeriodSeconds": 1,
           "volumes": [{"name": "scratch", "emptyDir": {}}],
           "containers": [{"name": "burn", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                           "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                           "command": ["sh", "-c",
                                       "dd if=/dev/zero of=/scratch/file bs=1k count=512 && echo burning && while :; do :; done"]}]}}"#;

#[test]
fn the_summary_api_reports_a_busy_pods_cpu_memory_network_volumes_and_logs() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let _node = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let api = ApiServer::start(Backend::Embedded);
    let kubelet = KubeletProcess::start(&api, NODE);
    let admin = Client::to(
        &api,
        &kubelet.serving_certificate(),
        kubelet.port(),
        Some(("admin", Some("system:masters"))),
    );
    api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(BURNER));
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c, "default");
        eventually("burner to run", || in_phase(&pods, "burner", "Running")).await;
        let get = |path: &'static str| {
            let admin = admin.clone();
            async move {
                let req = http::Request::get(path)
                    .header("host", "127.0.0.1")
                    .body(https::body(""))
                    .unwrap();
                let (code, text) = https::text(admin.send(req).await).await;
                assert_eq!(code, 200, "{path}: {text}");
                text
            }
        };
        // a rate needs two looks at least a second apart
        let (summary, pod) = eventually("the burner's CPU rate", || async {
            let summary: serde_json::Value =
                serde_json::from_str(&get("/stats/summary").await).unwrap();
            let pod = summary["pods"]
                .as_array()?
                .iter()
                .find(|p| p["podRef"]["name"] == "burner")?
                .clone();
            pod["containers"][0]["cpu"]["usageNanoCores"].as_u64()?;
            Some((summary, pod))
        })
        .await;
        let burn = &pod["containers"][0];
        assert_eq!(burn["name"], "burn");
        // about one core (this machine has two, shared with the test)
        let cores = burn["cpu"]["usageNanoCores"].as_u64().unwrap() as f64 / 1e9;
        assert!((0.3..=2.0).contains(&cores), "{burn}");
        assert!(burn["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
        assert!(
            burn["memory"]["workingSetBytes"].as_u64().unwrap() > 0,
            "{burn}"
        );
        assert!(burn["rootfs"]["usedBytes"].as_u64().is_some(), "{burn}");
        assert!(burn["logs"]["usedBytes"].as_u64().unwrap() > 0, "{burn}");
        // the pod's own cgroup holds the container and the pause process
        let pod_cores = pod["cpu"]["usageNanoCores"].as_u64().unwrap() as f64 / 1e9;
        assert!(pod_cores >= 0.3, "{pod}");
        assert!(
            pod["memory"]["workingSetBytes"].as_u64().unwrap() > 0,
            "{pod}"
        );
        assert!(
            pod["process_stats"]["process_count"].as_u64().unwrap() >= 2,
            "{pod}"
        );
        assert_eq!(pod["network"]["name"], "eth0", "{pod}");
        assert!(pod["network"]["rxBytes"].as_u64().is_some(), "{pod}");
        let scratch = &pod["volume"][0];
        assert_eq!(scratch["name"], "scratch", "{pod}");
        assert!(
            scratch["usedBytes"].as_u64().unwrap() >= 512 * 1024,
            "{pod}"
        );
        assert!(pod["ephemeral-storage"]["usedBytes"].as_u64().unwrap() >= 512 * 1024);
        // the node: all of it, and at least the burner's core
        let node = &summary["node"];
        assert_eq!(node["nodeName"], NODE);
        assert!(
            node["cpu"]["usageNanoCores"].as_u64().unwrap() as f64 / 1e9 >= 0.3,
            "{node}"
        );
        assert!(
            node["memory"]["workingSetBytes"].as_u64().unwrap() > 0,
            "{node}"
        );
        assert!(node["fs"]["capacityBytes"].as_u64().unwrap() > 0, "{node}");
        // containerd counts the images' bytes on its own schedule: there, maybe 0 yet
        assert!(node["runtime"]["imageFs"]["usedBytes"].as_u64().is_some());
        assert!(
            node["runtime"]["imageFs"]["capacityBytes"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert!(node["rlimit"]["maxpid"].as_u64().unwrap() > 0, "{node}");

        // the resource metrics metrics-server scrapes
        let metrics = get("/metrics/resource").await;
        let sample = metrics
            .lines()
            .find(|l| {
                l.starts_with(
                    r#"container_cpu_usage_seconds_total{container="burn",namespace="default",pod="burner"} "#,
                )
            })
            .unwrap_or_else(|| panic!("{metrics}"));
        let seconds: f64 = sample.split(' ').nth(1).unwrap().parse().unwrap();
        assert!(seconds > 0.0, "{sample}");
        assert!(metrics.contains("\nresource_scrape_error 0\n"), "{metrics}");

        // cAdvisor's series, as Prometheus scrapes them: the container and its pod's eth0
        let cadvisor = get("/metrics/cadvisor").await;
        for prefix in [
            r#"container_cpu_usage_seconds_total{container="burn",namespace="default",pod="burner"} "#,
            r#"container_memory_working_set_bytes{container="",namespace="default",pod="burner"} "#,
            r#"container_network_receive_bytes_total{container="",interface="eth0",namespace="default",pod="burner"} "#,
        ] {
            assert!(
                cadvisor.lines().any(|l| l.starts_with(prefix)),
                "{prefix} in\n{cadvisor}"
            );
        }
    });
}

/// A pod serving `hello` on its declared port `http` (8080), and its Service (port 80).
const HELLO: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Pod",
   "metadata": {"name": "hello", "labels": {"app": "hello"}},
   "spec": {"nodeName": "kubelet-e2e", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "httpd", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                            "command": ["sh", "-c",
                                        "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www"]}]}},
  {"apiVersion": "v1", "kind": "Service",
   "metadata": {"name": "hello"},
   "spec": {"selector": {"app": "hello"},
            "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}}]}"#;

#[test]
fn the_proxy_subresources_reach_the_kubelet_a_pod_and_a_service_also_through_kubectl_proxy() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let _node = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let api = ApiServer::start(Backend::Embedded);
    let _kubelet = KubeletProcess::start(&api, NODE);
    let _cm = controller_manager(&api, &["--controllers", "endpointslice"]);
    api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(HELLO));
    api.kubectl(
        KUBECTL_133,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/hello",
            "--timeout=60s",
        ],
    );
    let raw = |path: &str| api.kubectl(KUBECTL_133, &["get", "--raw", path]);

    // nodes/proxy: the kubelet's own endpoints, with the API server's client certificate
    let summary: serde_json::Value =
        serde_json::from_str(&raw(&format!("/api/v1/nodes/{NODE}/proxy/stats/summary"))).unwrap();
    assert_eq!(summary["node"]["nodeName"], NODE);
    assert!(raw(&format!("/api/v1/nodes/{NODE}/proxy/healthz")).starts_with("ok"));

    // pods/proxy: its declared port, or the one named
    let pods = "/api/v1/namespaces/default/pods";
    assert_eq!(raw(&format!("{pods}/hello/proxy/")), "hello\n");
    assert_eq!(
        raw(&format!("{pods}/hello:8080/proxy/index.html")),
        "hello\n"
    );
    // a port nothing listens on: 503 naming the dial error
    let refused = api.kubectl_fails(
        KUBECTL_133,
        &["get", "--raw", &format!("{pods}/hello:8081/proxy/")],
        None,
    );
    assert!(
        refused.contains("error trying to reach service") && refused.contains("refused"),
        "{refused}"
    );

    // services/proxy: a ready endpoint of the port, by name or number, once the slice has it
    let services = "/api/v1/namespaces/default/services";
    let by_name = api.kubectl_until(
        KUBECTL_133,
        &["get", "--raw", &format!("{services}/hello:web/proxy/")],
        None,
        |out| out.status.success(),
    );
    assert_eq!(support::output_text(&by_name).0, "hello\n");
    assert_eq!(raw(&format!("{services}/hello:80/proxy/")), "hello\n");
    let missing = api.kubectl_fails(
        KUBECTL_133,
        &["get", "--raw", &format!("{services}/hello:9999/proxy/")],
        None,
    );
    assert!(
        missing.contains(
            r#"Error from server (ServiceUnavailable): no service port 9999 found for service "hello""#
        ),
        "{missing}"
    );

    // kubectl proxy serves them all on localhost
    let (mut proxy, lines) = api.kubectl_stream(KUBECTL_133, &["proxy", "--port=0"]);
    let started = lines
        .recv_timeout(HANG_GUARD)
        .expect("kubectl proxy's first line");
    let addr = started
        .rsplit_once(' ')
        .map(|(_, a)| a.trim().to_string())
        .expect("Starting to serve on ADDR");
    let answer = support::http_get(&addr, &format!("{services}/hello:web/proxy/"));
    let _ = proxy.kill();
    let _ = proxy.wait();
    assert!(
        answer.starts_with("HTTP/1.0 200") && answer.ends_with("\r\n\r\nhello\n"),
        "{started}: {answer}"
    );
}
