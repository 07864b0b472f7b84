//! Joining a node end to end (issue 9): `skiff token create` against a real API server, then
//! `skiff agent` in a network namespace of its own on a private lan ([`support::netns`]) joins
//! with that token by TLS bootstrap — it checks the cluster CA against the token's hash, its
//! CertificateSigningRequests are approved and issued by the controller manager's
//! `csrapproving` and `csrsigning`, and it runs a real kubelet with its managed containerd, the
//! proxy and the network policy controller. Its Node goes Ready, a pod scheduled there runs and `kubectl exec` reaches it
//! through the API server; a restarted agent reuses its certificates (no new request) and does
//! not run the node controllers the server's published settings turn off; a token for another
//! CA is refused. Needs root (containerd, CNI, network namespaces); skips otherwise.

mod support;

use std::process::Command;

use serde_json::json;
use support::agent::Agent;
use support::cluster::{controller_manager, scheduler};
use support::netns::{self, Lan};
use support::{ApiServer, KUBECTL_133, output_text};

const NODE: &str = "joined-a";

/// `skiff token create --kubeconfig <admin> <args…>`'s output line.
fn token_create(api: &ApiServer, args: &[&str]) -> String {
    let out = support::run_guarded(
        Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["token", "create", "--kubeconfig"])
            .arg(api.kubeconfig())
            .args(args),
    );
    let (stdout, stderr) = output_text(&out);
    assert!(
        out.status.success(),
        "skiff token create {args:?}: {stderr}"
    );
    stdout.trim().to_string()
}

/// `kubectl get csr` rows (without the header).
fn csr_rows(api: &ApiServer) -> Vec<String> {
    api.kubectl(KUBECTL_133, &["get", "csr", "--no-headers"])
        .lines()
        .map(String::from)
        .collect()
}

/// `ss` listing the TCP listeners on port 80 (the ingress controller's), one line each.
const HTTP_LISTENERS: [&str; 3] = ["ss", "-Hltn", "sport = :80"];

/// What `skiff server --disable <disable>` publishes for its agents: the ConfigMap
/// `kube-system/skiff-node-config` and the Role and RoleBinding that let nodes read it.
fn publish_node_config(api: &ApiServer, disable: &str) {
    let name = "skiff-node-config";
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": name, "namespace": "kube-system"},
         "data": {"flannel-backend": "vxlan", "disable": disable}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": "kube-system"},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
                    "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": "kube-system"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                       "name": "system:nodes"}]},
    ]});
    api.kubectl_stdin(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(&objects.to_string()),
    );
}

#[test]
fn an_agent_joins_with_a_token_runs_pods_and_keeps_its_certificates_across_a_restart() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    // declared first, dropped last: after the agent running inside it
    let mut lan = Lan::create();
    let api = netns::api_server(&lan);
    let net = lan.add_node();
    let tls = api.data_dir.join("tls");
    let (ca_crt, ca_key) = (tls.join("ca.crt"), tls.join("ca.key"));
    let _cm = controller_manager(
        &api,
        &[
            "--controllers",
            "csrapproving,csrsigning,nodeipam",
            "--allocate-node-cidrs=true",
            "--cluster-signing-cert-file",
            ca_crt.to_str().unwrap(),
            "--cluster-signing-key-file",
            ca_key.to_str().unwrap(),
        ],
    );
    let _scheduler = scheduler(&api);

    // the server's join token, as `skiff server` keeps it: made once, then read back
    let token = token_create(&api, &["--data-dir", api.data_dir.to_str().unwrap()]);
    assert!(token.starts_with("K10") && token.contains("::"), "{token}");
    assert_eq!(
        token_create(&api, &["--data-dir", api.data_dir.to_str().unwrap()]),
        token
    );
    assert_eq!(support::read(&api.data_dir.join("token")).trim(), token);
    let server = format!("https://{}:{}", net.gateway, api.port);
    let join = token_create(&api, &["--ttl", "1h", "--print-join-command"]);
    assert!(
        join.starts_with("skiff agent --server https://127.0.0.1:")
            && join.contains(" --token K10"),
        "{join}"
    );

    // a token for another CA: refused before anything is sent with it
    let (_, bootstrap) = token.split_once("::").unwrap();
    let wrong = format!("K10{}::{bootstrap}", "0".repeat(64));
    let refused_dir = tempfile::tempdir().unwrap();
    let out = support::run_guarded(&mut Agent::command(
        &net,
        &server,
        &wrong,
        NODE,
        refused_dir.path(),
    ));
    let (_, stderr) = output_text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refusing to join") && stderr.contains(&"0".repeat(64)),
        "{stderr}"
    );
    assert!(csr_rows(&api).is_empty());

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("agent");
    let (mut agent, lines) = Agent::start(&net, &server, &token, NODE, &data);
    assert!(
        lines.iter().any(|l| l.contains("matches the token")),
        "{lines:?}"
    );
    // every request approved and issued: the node's, the proxy's and the node controllers'
    let rows = csr_rows(&api);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|r| r.contains("Approved,Issued")),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.contains("kubernetes.io/kube-apiserver-client-kubelet")),
        "{rows:?}"
    );
    let reason = api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "csr",
            "-o",
            "jsonpath={.items[*].status.conditions[0].reason}",
        ],
    );
    assert_eq!(reason, "AutoApproved AutoApproved AutoApproved");
    let ready = api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "node",
            NODE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    );
    assert_eq!(ready, "True");

    // a pod scheduled there runs, and exec reaches it through the API server
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "on-joined"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", "exec sleep 3600"]}],
        },
    });
    api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(&pod.to_string()));
    api.kubectl(
        KUBECTL_133,
        &[
            "wait",
            "pod/on-joined",
            "--for=jsonpath={.status.phase}=Running",
            "--timeout=55s",
        ],
    );
    let node = api.kubectl(
        KUBECTL_133,
        &["get", "pod", "on-joined", "-o", "jsonpath={.spec.nodeName}"],
    );
    assert_eq!(node, NODE);
    let out = api.kubectl_until(
        KUBECTL_133,
        &[
            "exec",
            "on-joined",
            "--",
            "echo",
            "hello from the joined node",
        ],
        None,
        |out| out.status.success(),
    );
    assert_eq!(output_text(&out).0, "hello from the joined node\n");

    // with no published settings it runs every node controller: the ingress holds port 80
    net.exec_until(&HTTP_LISTENERS, "the ingress controller listening", |out| {
        !out.trim().is_empty()
    });

    // a restart reuses all three certificates: no new request; the node controllers the
    // server turned off (as `skiff server --disable ingress,network-policy` publishes it)
    // are not run
    publish_node_config(&api, "ingress,network-policy");
    let lines = agent.restart();
    assert_eq!(
        lines.iter().filter(|l| l.contains("reusing")).count(),
        3,
        "{lines:?}"
    );
    assert_eq!(csr_rows(&api).len(), 3);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("the server disabled network-policy, ingress: not running them")),
        "{lines:?}"
    );
    let ingress = net.exec_ok(&HTTP_LISTENERS);
    assert!(
        ingress.trim().is_empty(),
        "the ingress still runs: {ingress}"
    );

    // requests no controller decides wait for a person: kubectl certificate approve and deny
    // write the `/approval` subresource
    for name in ["by-hand-1", "by-hand-2"] {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "someone");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        use base64::Engine as _;
        let csr = json!({
            "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                     "signerName": "example.com/by-hand", "usages": ["client auth"],
                     "username": "forged"},
        });
        api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(&csr.to_string()));
    }
    api.kubectl(KUBECTL_133, &["certificate", "approve", "by-hand-1"]);
    api.kubectl(KUBECTL_133, &["certificate", "deny", "by-hand-2"]);
    let rows = csr_rows(&api);
    let row = |name: &str| rows.iter().find(|r| r.starts_with(name)).cloned().unwrap();
    // the requester is who created it, whatever the spec claimed
    assert!(row("by-hand-1").contains(" admin "), "{rows:?}");
    assert!(row("by-hand-1").ends_with(" Approved"), "{rows:?}");
    assert!(row("by-hand-2").ends_with(" Denied"), "{rows:?}");

    // the pod's sandbox (and its CNI namespace) goes before the agent and the lan do
    api.kubectl(
        KUBECTL_133,
        &[
            "delete",
            "pods",
            "--all",
            "--grace-period=1",
            "--timeout=50s",
        ],
    );
}
