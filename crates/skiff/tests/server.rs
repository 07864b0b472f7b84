//! `skiff server` end to end (issue 9; seed 001 §9's checklist): the real binary, started as a
//! user starts it, with a real containerd agent, in a network namespace of its own on a private
//! lan ([`support::netns`]) so that its proxy's iptables rules, its kubelet's routes and its
//! DNS on port 53 stay out of this host's. kubectl on the lan host applies a pod and walks the
//! seed's list: Running, `auth can-i`, `get --watch`, `-o wide`, jsonpath, `describe` events,
//! the Service's endpoints, the node's nat table, a pod reaching the Service by DNS name,
//! `kubectl top` (1.33 and 1.27) showing a CPU-burning pod at about a core through the metrics
//! server and the aggregator, and `skiff trace pod nginx` showing the chain from create to
//! Running. A second node joined with
//! `skiff agent` (in a namespace of its own) runs a pod scheduled to it, which reaches the
//! Service on the first node by name. Then SIGTERM stops the server with exit code 0 and a restart on the same data dir finds the same
//! pod still running in the same container. A second test runs two `skiff server
//! --disable-agent` on one etcd with one token: they share the CA, one of them leads the
//! scheduler and the controller manager, and when the leader is killed the other takes over.
//! Needs root (containerd, CNI, network namespaces); skips otherwise.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::mpsc;

use support::agent::Agent;
use support::netns::{self, Lan, NodeNet};
use support::{
    KUBECTL_127, KUBECTL_133, expect_line, line_reader, line_with, output_text, run_guarded,
};

/// A `skiff server` child, its stdout line by line; SIGTERM (and its pods' cleanup) on drop.
struct Server {
    child: Child,
    lines: mpsc::Receiver<String>,
    data_dir: PathBuf,
    /// The command it was started with, for restarts.
    argv: Vec<String>,
    log: PathBuf,
    /// The ready line.
    ready: String,
}

impl Server {
    /// `prefix… skiff server --data-dir D args…`, once it printed its `ready` line.
    fn start(prefix: &[String], data_dir: &Path, args: &[&str]) -> Server {
        let mut argv = prefix.to_vec();
        argv.push(env!("CARGO_BIN_EXE_skiff").into());
        argv.extend(["server".into(), "--data-dir".into()]);
        argv.push(data_dir.display().to_string());
        argv.extend(args.iter().map(|a| a.to_string()));
        // the test node's thresholds (see `support::node::EVICTION_HARD`)
        argv.extend(["--kubelet-arg".into(), support::node::eviction_hard_arg()]);
        let log = data_dir.with_extension("log");
        let (child, lines, ready) = spawn(&argv, &log);
        Server {
            child,
            lines,
            data_dir: data_dir.to_path_buf(),
            argv,
            log,
            ready,
        }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.data_dir.join("kubeconfig.yaml")
    }

    fn log(&self) -> String {
        support::read(&self.log)
    }

    /// SIGTERM, then its exit code.
    fn terminate(&mut self) -> Option<i32> {
        signal(&self.child, "-TERM");
        let status = self.child.wait().expect("wait for the server");
        status.code()
    }

    /// Starts it again on the same data dir and flags.
    fn restart(&mut self) {
        let (child, lines, ready) = spawn(&self.argv, &self.log);
        self.child = child;
        self.lines = lines;
        self.ready = ready;
    }

    /// The managed containerd's socket.
    fn containerd_socket(&self) -> PathBuf {
        self.data_dir.join("agent/containerd/containerd.sock")
    }
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status();
}

fn spawn(argv: &[String], log: &Path) -> (Child, mpsc::Receiver<String>, String) {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log_file)
        .env("RUST_LOG", "info")
        .spawn()
        .expect("start skiff server");
    let lines = line_reader(child.stdout.take().expect("stdout"));
    let ready = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        expect_line(&lines, |l| l.contains("ready"))
    })) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "skiff server printed no ready line; its log:\n{}",
                support::read(log)
            );
        }
    };
    (child, lines, ready)
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            if std::thread::panicking() {
                eprintln!("--- server log ---\n{}", self.log());
                if self.containerd_socket().exists() {
                    kubectl_output(
                        &self.kubeconfig(),
                        &[
                            "delete",
                            "pods",
                            "--all",
                            "--grace-period=1",
                            "--timeout=50s",
                        ],
                    );
                }
            }
            self.terminate();
        }
        // the pods outlive the server (stopped here or by the test)
        support::node::clean_up(&self.data_dir);
    }
}

fn kubectl_output(kubeconfig: &Path, args: &[&str]) -> Output {
    let home = kubeconfig.with_file_name("kubectl-home");
    run_guarded(
        Command::new(KUBECTL_133)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("HOME", home),
    )
}

/// `kubectl args…`, asserted to succeed; its stdout.
fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl_output(kubeconfig, args);
    let (stdout, stderr) = output_text(&out);
    assert!(out.status.success(), "kubectl {args:?}: {stderr}{stdout}");
    stdout
}

/// `kubectl args…` until it succeeds with a stdout `done` accepts; that stdout.
fn kubectl_until(kubeconfig: &Path, args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    loop {
        let out = kubectl_output(kubeconfig, args);
        let (stdout, stderr) = output_text(&out);
        if out.status.success() && done(&stdout) {
            return stdout;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl {args:?} never gave the expected answer: {stdout}{stderr}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn apply(kubeconfig: &Path, manifest: &str) -> String {
    let file = kubeconfig.with_file_name(format!("manifest-{}.yaml", fastrand::u32(..)));
    std::fs::write(&file, manifest).expect("write the manifest");
    kubectl(
        kubeconfig,
        &["apply", "-f", file.to_str().expect("utf-8 path")],
    )
}

const NODE: &str = "skiff-e2e";
/// The node `skiff agent` joins.
const JOINED: &str = "skiff-e2e-joined";

/// seed 001's pod.yaml, with the busybox image the kubelet imports offline serving HTTP.
const POD_YAML: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: nginx
  labels:
    app: nginx
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: nginx
    image: busybox
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "mkdir -p /www && echo hello from nginx > /www/index.html && exec httpd -f -p 80 -h /www"]
    ports:
    - containerPort: 80
"#;

const SERVICE_YAML: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: nginx
spec:
  selector:
    app: nginx
  ports:
  - port: 80
"#;

/// A pod that burns a core.
const BURNER_YAML: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: burner
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: burn
    image: busybox
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "while :; do :; done"]
"#;

/// A Deployment of CPU burners (100m requested each) and an HPA keeping them at 50%.
const BURNERS_YAML: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: burners
spec:
  replicas: 1
  selector:
    matchLabels: {app: burners}
  template:
    metadata:
      labels: {app: burners}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: burn
        image: busybox
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "while :; do :; done"]
        resources:
          requests: {cpu: 100m}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: burners
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: burners}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 50}
"#;

const CLIENT_YAML: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: client
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: busybox
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
"#;

/// The nginx container's identity: its ID, restart count and start time.
fn container_identity(kubeconfig: &Path) -> String {
    kubectl(
        kubeconfig,
        &[
            "get",
            "pod",
            "nginx",
            "-o",
            "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt}",
        ],
    )
}

#[test]
fn a_server_runs_seed_001s_checklist_and_a_restart_keeps_its_pods_running() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    // declared first, dropped last: after the server running inside it
    let mut lan = Lan::create();
    let net: NodeNet = lan.add_node();
    let dir = tempfile::tempdir().expect("temp dir");
    let ip = net.ip.to_string();
    let prefix = vec![
        "nsenter".to_string(),
        format!("--net=/var/run/netns/{}", net.namespace),
    ];
    let mut server = Server::start(
        &prefix,
        &dir.path().join("data"),
        &[
            "--bind-address",
            &ip,
            "--node-ip",
            &ip,
            "--node-name",
            NODE,
            // the pod network this test was written for (podnet.rs covers vxlan)
            "--flannel-backend",
            "host-gw",
            // kubectl top within seconds, and an autoscaler that reacts in seconds
            "--metrics-server-arg",
            "metric-resolution=2s",
            "--kube-controller-manager-arg",
            "horizontal-pod-autoscaler-sync-period=2s",
            "--kube-controller-manager-arg",
            "horizontal-pod-autoscaler-downscale-stabilization=6s",
        ],
    );
    assert!(server.ready.contains(NODE), "{}", server.ready);
    // the join token `skiff agent --token` takes, kept in the data dir
    let token = support::read(&server.data_dir.join("token"));
    assert!(token.starts_with("K10"), "{token}");
    let kc = server.kubeconfig();

    // kubectl get nodes shows the node Ready once the server said so
    let nodes = kubectl(&kc, &["get", "nodes"]);
    assert!(
        nodes
            .lines()
            .any(|l| l.starts_with(NODE) && l.contains(" Ready ")),
        "{nodes}"
    );

    // kubectl apply -f pod.yaml, and kubectl get pod nginx --watch streams its changes
    apply(&kc, POD_YAML);
    let mut watch = Command::new(KUBECTL_133)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "pod", "nginx", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get --watch");
    let watched = line_reader(watch.stdout.take().expect("stdout"));
    let header = expect_line(&watched, |l| l.starts_with("NAME"));
    assert!(header.contains("STATUS"), "{header}");
    expect_line(&watched, |l| {
        l.starts_with("nginx") && l.contains("Running")
    });
    kubectl(&kc, &["label", "pod", "nginx", "watched=yes"]);
    expect_line(&watched, |l| l.starts_with("nginx"));
    let _ = watch.kill();
    let _ = watch.wait();
    kubectl(
        &kc,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/nginx",
            "--timeout=60s",
        ],
    );

    assert_eq!(
        kubectl(&kc, &["auth", "can-i", "create", "pods"]).trim(),
        "yes"
    );
    let jsonpath = |path: &str| {
        kubectl(
            &kc,
            &["get", "pod", "nginx", "-o", &format!("jsonpath={path}")],
        )
    };
    assert_eq!(jsonpath("{.spec.nodeName}"), NODE);
    assert_eq!(jsonpath("{.status.phase}"), "Running");
    assert_eq!(jsonpath("{.spec.schedulerName}"), "default-scheduler");
    let pod_ip = jsonpath("{.status.podIP}");
    assert!(pod_ip.starts_with("10.42."), "{pod_ip}");
    let wide = kubectl(&kc, &["get", "pod", "nginx", "-o", "wide"]);
    assert!(wide.contains(&pod_ip) && wide.contains(NODE), "{wide}");
    let described = kubectl_until(&kc, &["describe", "pod", "nginx"], |d| {
        d.contains("Started")
    });
    for reason in ["Scheduled", "Pulled", "Created", "Started"] {
        assert!(described.contains(reason), "{reason}: {described}");
    }

    // a Service: its endpoints list the pod, the node's nat table has its rules
    apply(&kc, SERVICE_YAML);
    kubectl_until(&kc, &["get", "endpoints", "nginx"], |out| {
        out.contains(&pod_ip)
    });
    let nat = net.exec_until(
        &["iptables", "-t", "nat", "-L", "-n"],
        "the Service's rules",
        |nat| nat.contains("default/nginx cluster IP"),
    );
    assert!(nat.contains("Chain KUBE-SERVICES"), "{nat}");

    // a pod reaches it by DNS name, through the server's cluster DNS
    apply(&kc, CLIENT_YAML);
    kubectl(
        &kc,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/client",
            "--timeout=60s",
        ],
    );
    for name in ["nginx", "nginx.default.svc.cluster.local"] {
        let url = format!("http://{name}/");
        let page = kubectl_until(
            &kc,
            &["exec", "client", "--", "wget", "-q", "-O", "-", &url],
            |page| page.contains("hello from nginx"),
        );
        assert_eq!(page.trim(), "hello from nginx");
    }

    // kubectl top, through the aggregator and the server's metrics server: a busy pod at
    // about a core (this machine has two), and the node
    apply(&kc, BURNER_YAML);
    let millicores = |line: &str| -> Option<u32> {
        line.split_whitespace()
            .nth(1)?
            .strip_suffix('m')?
            .parse()
            .ok()
    };
    let top = kubectl_until(&kc, &["top", "pod", "burner", "--no-headers"], |out| {
        millicores(out).is_some_and(|m| m >= 500)
    });
    assert!(millicores(&top).is_some_and(|m| m <= 2100), "{top}");
    let containers = kubectl(
        &kc,
        &["top", "pod", "burner", "--containers", "--no-headers"],
    );
    assert!(
        containers.starts_with("burner") && containers.contains(" burn "),
        "{containers}"
    );
    let nodes = kubectl_until(&kc, &["top", "node", "--no-headers"], |out| {
        out.starts_with(NODE)
    });
    assert!(nodes.contains('%'), "{nodes}");
    let sorted = kubectl(&kc, &["top", "pod", "--sort-by=cpu", "--no-headers"]);
    assert!(sorted.starts_with("burner"), "{sorted}");
    // and the oldest kubectl
    let out = run_guarded(
        Command::new(KUBECTL_127)
            .arg("--kubeconfig")
            .arg(&kc)
            .args([
                "top",
                "pod",
                "--containers",
                "--sort-by=memory",
                "--no-headers",
            ])
            .env("HOME", kc.with_file_name("kubectl-home")),
    );
    let (old, stderr) = output_text(&out);
    assert!(
        out.status.success() && old.contains("burner "),
        "{stderr}{old}"
    );
    kubectl(&kc, &["delete", "pod", "burner", "--wait=false"]);

    // an HPA on a Deployment of burners: to its maximum while they burn, back to its minimum
    // once they idle, after the (shortened) scale-down window
    apply(&kc, BURNERS_YAML);
    let scaled_to = |n: &str| {
        let replicas = [
            "get",
            "deployment",
            "burners",
            "-o",
            "jsonpath={.spec.replicas}",
        ];
        kubectl_until(&kc, &replicas, |r| r == n);
    };
    scaled_to("3");
    let events = kubectl(
        &kc,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=burners",
        ],
    );
    assert!(
        events.contains("SuccessfulRescale")
            && events.contains(
                "New size: 3; reason: cpu resource utilization (percentage of request) above target"
            ),
        "{events}"
    );
    let listed = kubectl(&kc, &["get", "hpa", "burners"]);
    assert!(
        listed.contains("Deployment/burners") && listed.contains("/50%"),
        "{listed}"
    );
    let idle = r#"[{"op": "replace", "path": "/spec/template/spec/containers/0/command",
                    "value": ["sleep", "3600"]}]"#;
    kubectl(
        &kc,
        &["patch", "deployment", "burners", "--type=json", "-p", idle],
    );
    scaled_to("1");
    let active = kubectl(
        &kc,
        &[
            "get",
            "hpa",
            "burners",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="ScalingActive")].reason}"#,
        ],
    );
    assert_eq!(active, "ValidMetricFound");
    kubectl(
        &kc,
        &["delete", "hpa,deployment", "burners", "--wait=false"],
    );

    // skiff trace pod nginx: the seed's chain, as the API server saw it
    let out = run_guarded(
        Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["trace", "pod", "nginx", "--kubeconfig"])
            .arg(&kc),
    );
    let (trace, stderr) = output_text(&out);
    assert!(out.status.success(), "skiff trace pod: {stderr}");
    let inbox = format!("kubelet {NODE} inbox");
    let node_user = format!("by system:node:{NODE}");
    let steps = [
        line_with(&trace, &["create pods", "by admin"]),
        line_with(&trace, &["scheduler inbox", "ADDED", "[all pods]"]),
        line_with(&trace, &["create pods/binding", "by system:kube-scheduler"]),
        line_with(&trace, &[&inbox, "ADDED", "spec.nodeName="]),
        line_with(&trace, &["pods/status", &node_user, "Running"]),
    ];
    assert!(steps.is_sorted(), "{trace}");
    // events are written in the background: the Started event may be recorded after the status
    let started = line_with(&trace, &[&node_user, "Event Normal Started"]);
    assert!(started > steps[3], "{trace}");
    assert!(
        !trace
            .lines()
            .any(|l| l.contains(&inbox) && l.contains("filtered out")),
        "the kubelet's watch is offered only its node's pods: {trace}"
    );
    line_with(&trace, &["Endpoints nginx:", "lists the pod"]);
    line_with(&trace, &["Startup (as the API server saw it):"]);

    // a second machine joins with `skiff agent --token`, from a namespace of its own on the
    // lan, and runs a pod scheduled to it that reaches the nginx Service on the first node
    let joined_net = lan.add_node();
    let server_url = format!("https://{ip}:6443");
    let (joined, _) = Agent::start(
        &joined_net,
        &server_url,
        token.trim(),
        JOINED,
        &dir.path().join("joined"),
    );
    kubectl_until(&kc, &["get", "node", JOINED], |out| out.contains(" Ready "));
    // the agent took the server's pod network backend (kube-system/skiff-node-config)
    let backend = kubectl(
        &kc,
        &[
            "get",
            "node",
            JOINED,
            "-o",
            r"jsonpath={.metadata.annotations.flannel\.alpha\.coreos\.com/backend-type}",
        ],
    );
    assert_eq!(backend, "host-gw");
    apply(
        &kc,
        &CLIENT_YAML.replace("name: client", "name: remote").replace(
            "  containers:",
            &format!("  nodeSelector:\n    kubernetes.io/hostname: {JOINED}\n  containers:"),
        ),
    );
    kubectl(
        &kc,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/remote",
            "--timeout=60s",
        ],
    );
    let remote = kubectl(
        &kc,
        &["get", "pod", "remote", "-o", "jsonpath={.spec.nodeName}"],
    );
    assert_eq!(remote, JOINED);
    let page = kubectl_until(
        &kc,
        &[
            "exec",
            "remote",
            "--",
            "wget",
            "-q",
            "-O",
            "-",
            "http://nginx/",
        ],
        |page| page.contains("hello from nginx"),
    );
    assert_eq!(page.trim(), "hello from nginx");
    kubectl(
        &kc,
        &[
            "delete",
            "pod",
            "remote",
            "--grace-period=1",
            "--timeout=60s",
        ],
    );
    drop(joined);

    // SIGTERM stops it cleanly; a restart resumes the cluster, the container still running
    let before = container_identity(&kc);
    assert_eq!(server.terminate(), Some(0), "{}", server.log());
    server.restart();
    assert!(server.ready.contains("ready"), "{}", server.ready);
    kubectl(
        &kc,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/nginx",
            "--timeout=60s",
        ],
    );
    assert_eq!(container_identity(&kc), before);
    assert!(before.split(' ').nth(1) == Some("0"), "{before}");

    // the pods' sandboxes (and their CNI namespaces) go before the lan does
    kubectl(
        &kc,
        &[
            "delete",
            "pods",
            "--all",
            "--grace-period=1",
            "--timeout=60s",
        ],
    );
    assert_eq!(server.terminate(), Some(0), "{}", server.log());
}

/// A free loopback port (bound, read, released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `hostname_pid`: the identity a server's components hold leases with.
fn instance(server: &Server) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    format!("{}_{}", host.trim(), server.child.id())
}

fn lease_holder(kubeconfig: &Path, lease: &str) -> String {
    let out = kubectl_output(
        kubeconfig,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            lease,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    output_text(&out).0
}

#[test]
fn servers_on_one_etcd_share_the_ca_and_one_takes_over_when_the_leader_dies() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let etcd = match rt.block_on(skiff_store::etcd_process::EtcdProcess::start()) {
        Ok(etcd) => etcd,
        Err(e) => {
            support::skip(&format!("no etcd ({e})"));
            return;
        }
    };
    let datastore = format!("etcd://{}", etcd.endpoint());
    let dir = tempfile::tempdir().expect("temp dir");
    let start = |name: &str| {
        let port = free_port().to_string();
        Server::start(
            &[],
            &dir.path().join(name),
            &[
                "--disable-agent",
                "--datastore-endpoint",
                &datastore,
                "--token",
                "one-token-for-both",
                "--https-port",
                &port,
                "--kube-scheduler-arg",
                "metrics-bind-address=127.0.0.1:0",
                "--kube-controller-manager-arg",
                "metrics-bind-address=127.0.0.1:0",
            ],
        )
    };
    let mut servers = [start("one"), start("two")];
    let url = |server: &Server| {
        let text = support::read(&server.kubeconfig());
        let line = text
            .lines()
            .find(|l| l.contains("server: "))
            .expect("a server line");
        line.split("server: ").nth(1).expect("url").to_string()
    };

    // one CA: each server's admin kubeconfig works against the other
    for (from, to) in [(0, 1), (1, 0)] {
        let out = kubectl_output(
            &servers[from].kubeconfig(),
            &[
                "--server",
                &url(&servers[to]),
                "get",
                "namespace",
                "kube-system",
            ],
        );
        assert!(out.status.success(), "{:?}", output_text(&out));
    }
    assert_eq!(
        support::read(&servers[0].data_dir.join("tls/ca.crt")),
        support::read(&servers[1].data_dir.join("tls/ca.crt"))
    );
    // one signing key: a token the first issues passes the second's TokenReview
    let token = kubectl(&servers[0].kubeconfig(), &["create", "token", "default"]);
    let review = dir.path().join("review.json");
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                  "spec": {"token": token.trim()}});
    std::fs::write(&review, body.to_string()).expect("write the review");
    let authenticated = kubectl(
        &servers[1].kubeconfig(),
        &[
            "create",
            "-f",
            review.to_str().expect("utf-8 path"),
            "-o",
            "jsonpath={.status.authenticated}",
        ],
    );
    assert_eq!(authenticated, "true");

    // one holder for each lease, one of the two servers
    let identities = [instance(&servers[0]), instance(&servers[1])];
    let kc = servers[0].kubeconfig();
    let mut holders = Vec::new();
    for lease in ["kube-scheduler", "kube-controller-manager"] {
        let holder = kubectl_until(
            &kc,
            &[
                "get",
                "lease",
                "-n",
                "kube-system",
                lease,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            |h| identities.iter().any(|i| i == h),
        );
        holders.push(holder);
    }

    // hollow nodes on the survivor; the scheduler's leader dies
    let leader = identities
        .iter()
        .position(|i| *i == holders[0])
        .expect("a leader");
    let survivor = 1 - leader;
    let survivor_kc = servers[survivor].kubeconfig();
    let hollow_dir = dir.path().join("hollow");
    let mut hollow = Command::new(env!("CARGO_BIN_EXE_skiff"));
    hollow
        .args([
            "kubelet",
            "--hollow",
            "--count",
            "2",
            "--node-name-prefix",
            "ha",
            "--data-dir",
        ])
        .arg(&hollow_dir)
        .arg("--kubeconfig")
        .arg(&survivor_kc);
    let _hollow = support::cluster::Process::spawn(&mut hollow, &dir.path().join("hollow.log"));
    let _ = servers[leader].child.kill();
    let _ = servers[leader].child.wait();

    // the survivor takes both leases over, and a new Deployment's pods run on the hollow nodes
    for lease in ["kube-scheduler", "kube-controller-manager"] {
        let deadline = std::time::Instant::now() + support::HANG_GUARD;
        while lease_holder(&survivor_kc, lease) != identities[survivor] {
            assert!(std::time::Instant::now() < deadline, "{lease} never moved");
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }
    kubectl(
        &survivor_kc,
        &[
            "create",
            "deployment",
            "after",
            "--image=busybox",
            "--replicas=3",
        ],
    );
    let nodes = kubectl_until(
        &survivor_kc,
        &[
            "get",
            "pods",
            "-l",
            "app=after",
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName} {.status.phase}{\"\\n\"}{end}",
        ],
        |out| out.lines().count() == 3 && out.lines().all(|l| l.ends_with(" Running")),
    );
    assert!(nodes.lines().all(|l| l.starts_with("ha-")), "{nodes}");
    assert_eq!(
        servers[survivor].terminate(),
        Some(0),
        "{}",
        servers[survivor].log()
    );
    drop(etcd);
}
