//! NetworkPolicy enforcement end to end (issue 33): a real kubelet with its managed containerd
//! and `skiff network-policy` (as `system:skiff-controller`) in a node namespace on a
//! private lan ([`support::netns`]), pods on the node's CNI bridge. A default-deny policy
//! blocks a client; an allow rule by namespace label (on a named port) lets one namespace's
//! client in while another's stays refused; the node itself still reaches its pods (kubelet
//! probes); a namespace without policies keeps working; a pod label change lets in a client
//! whose connection attempts started before it; an egress `ipBlock` rule lets a pod reach the
//! lan host while another destination is refused; an invalid policy is refused with 422 at
//! admission. Needs root (containerd, CNI, network namespaces) and nft; skips otherwise.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::json;
use support::netns::{self, LanCluster, NodeNet};
use support::{ApiServer, KUBECTL_133, expect_line};

const NODE: &str = "netpol-node";
/// The namespace whose pods the policies protect.
const SERVER_NS: &str = "np-server";
/// Labelled `team=allowed`: the allow rule lets its pods in.
const ALLOWED_NS: &str = "np-allowed";
/// Unlabelled: its pods stay refused until a pod label says otherwise.
const OTHER_NS: &str = "np-other";
/// No policies at all.
const OPEN_NS: &str = "np-open";

/// busybox httpd answering `hello` on 8080.
const WEB: &str = "mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www";

/// A pod on the node: `web` serves on the named port `http` (8080), anything else sleeps.
fn pod(namespace: &str, name: &str, web: bool) -> String {
    let script = if web { WEB } else { "exec sleep 3600" };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", script],
                            "ports": [{"name": "http", "containerPort": 8080}]}],
        },
    })
    .to_string()
}

fn policy(namespace: &str, name: &str, spec: serde_json::Value) -> String {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    })
    .to_string()
}

/// `wget` from a pod, failing within 3 s when nothing answers.
fn fetch<'a>(namespace: &'a str, pod: &'a str, url: &'a str) -> [&'a str; 12] {
    [
        "exec", "-n", namespace, pod, "--", "timeout", "3", "wget", "-q", "-O", "-", url,
    ]
}

/// Waits until a fetch from the pod gets `hello` (`reached`) or fails (`!reached`).
fn until_fetch(api: &ApiServer, namespace: &str, pod: &str, url: &str, reached: bool) {
    api.kubectl_until(KUBECTL_133, &fetch(namespace, pod, url), None, |out| {
        out.status.success() == reached
            && (!reached || String::from_utf8_lossy(&out.stdout) == "hello\n")
    });
}

/// Whether a fetch from the pod gets `hello` now.
fn fetches(api: &ApiServer, namespace: &str, pod: &str, url: &str) -> bool {
    let out = api.kubectl_output(KUBECTL_133, &fetch(namespace, pod, url), None);
    out.status.success() && String::from_utf8_lossy(&out.stdout) == "hello\n"
}

/// The pod's IP once it runs.
fn running_ip(api: &ApiServer, namespace: &str, name: &str) -> String {
    api.kubectl(
        KUBECTL_133,
        &[
            "wait",
            "-n",
            namespace,
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=60s",
        ],
    );
    api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "pod",
            "-n",
            namespace,
            name,
            "-o",
            "jsonpath={.status.podIP}",
        ],
    )
}

/// Whether the node itself (as its kubelet's probes do) opens a TCP connection to `ip:port`.
fn node_connects(net: &NodeNet, ip: &str, port: u16) -> bool {
    let script = format!("exec 3<>/dev/tcp/{ip}/{port}");
    net.exec(&["timeout", "3", "bash", "-c", &script])
        .status
        .success()
}

fn unsupported() -> Option<String> {
    if let Some(why) = netns::unsupported() {
        return Some(why);
    }
    let nft = std::process::Command::new("sh")
        .args(["-c", "command -v nft"])
        .output()
        .is_ok_and(|o| o.status.success());
    (!nft).then(|| "nft is not installed (scripts/install-deps)".to_string())
}

#[test]
fn policies_deny_allow_by_namespace_and_pod_labels_and_egress_ip_blocks() {
    if let Some(why) = unsupported() {
        support::skip(&format!("the network policy e2e test needs {why}"));
        return;
    }
    let cluster = LanCluster::start("", &[NODE]);
    let (api, net) = (&cluster.api, &cluster.nets[0]);
    let controller = net.start(
        api,
        ("system:skiff-controller", None),
        "network-policy",
        &["network-policy", "--node-name", NODE],
    );
    assert!(
        controller.ready.contains("skiff network-policy ready"),
        "{}",
        controller.ready
    );

    for ns in [SERVER_NS, ALLOWED_NS, OTHER_NS, OPEN_NS] {
        api.kubectl(KUBECTL_133, &["create", "namespace", ns]);
    }
    api.kubectl(
        KUBECTL_133,
        &["label", "namespace", ALLOWED_NS, "team=allowed"],
    );
    for (ns, name, web) in [
        (SERVER_NS, "web", true),
        (OPEN_NS, "web", true),
        (ALLOWED_NS, "client", false),
        (OTHER_NS, "client", false),
    ] {
        api.kubectl_stdin(
            KUBECTL_133,
            &["create", "-f", "-"],
            Some(&pod(ns, name, web)),
        );
    }
    let web_ip = running_ip(api, SERVER_NS, "web");
    let open_ip = running_ip(api, OPEN_NS, "web");
    running_ip(api, ALLOWED_NS, "client");
    running_ip(api, OTHER_NS, "client");
    let web = format!("http://{web_ip}:8080/");
    let open = format!("http://{open_ip}:8080/");
    // pods on one bridge: before any policy, everyone reaches everyone
    until_fetch(api, OTHER_NS, "client", &web, true);

    // default deny for the server namespace's ingress
    let deny = policy(
        SERVER_NS,
        "default-deny",
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
    );
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(&deny));
    until_fetch(api, ALLOWED_NS, "client", &web, false);
    assert!(!fetches(api, OTHER_NS, "client", &web));
    // the node itself still reaches its pods (kubelet probes)
    assert!(node_connects(net, &web_ip, 8080));

    // an allow rule by namespace label, or for pods labelled access=granted anywhere, on the
    // named port
    let allow = policy(
        SERVER_NS,
        "allow-web",
        json!({
            "podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{
                "from": [
                    {"namespaceSelector": {"matchLabels": {"team": "allowed"}}},
                    {"namespaceSelector": {}, "podSelector": {"matchLabels": {"access": "granted"}}},
                ],
                "ports": [{"port": "http"}],
            }],
        }),
    );
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(&allow));
    until_fetch(api, ALLOWED_NS, "client", &web, true);
    assert!(!fetches(api, OTHER_NS, "client", &web));
    // a namespace without policies keeps working, from and to everyone
    assert!(fetches(api, OTHER_NS, "client", &open));
    assert!(fetches(api, ALLOWED_NS, "client", &open));

    // the other client keeps trying; labelling it lets the attempts through
    let retry = format!(
        "until timeout 2 wget -q -O - {web}; do echo refused; sleep 0.3; done; echo reached"
    );
    let (mut attempts, lines) = api.kubectl_stream(
        KUBECTL_133,
        &["exec", "-n", OTHER_NS, "client", "--", "sh", "-c", &retry],
    );
    expect_line(&lines, |l| l == "refused");
    api.kubectl(
        KUBECTL_133,
        &["label", "pod", "-n", OTHER_NS, "client", "access=granted"],
    );
    expect_line(&lines, |l| l == "reached");
    let _ = attempts.wait();

    // egress: the allowed namespace's pods may reach the lan host only
    let listener = TcpListener::bind((net.gateway, 0)).expect("listen on the lan host");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        while let Ok((mut conn, _)) = listener.accept() {
            let mut request = [0u8; 1024];
            let _ = conn.read(&mut request);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhello\n");
        }
    });
    let outside = format!("http://{}:{port}/", net.gateway);
    until_fetch(api, ALLOWED_NS, "client", &outside, true);
    let egress = policy(
        ALLOWED_NS,
        "only-lan-host",
        json!({
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": format!("{}/24", net.gateway),
                                            "except": [format!("{}/32", net.ip)]}}]}],
        }),
    );
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(&egress));
    until_fetch(api, ALLOWED_NS, "client", &open, false);
    assert!(fetches(api, ALLOWED_NS, "client", &outside));
    // pods without the policy are not affected
    assert!(fetches(api, OTHER_NS, "client", &open));

    // bad input: refused at admission with 422 (kubectl's "is invalid")
    let bad = policy(
        SERVER_NS,
        "bad",
        json!({"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}],
                                               "from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}),
    );
    let stderr = api.kubectl_fails(KUBECTL_133, &["apply", "-f", "-"], Some(&bad));
    assert!(
        stderr.contains(r#"The NetworkPolicy "bad" is invalid"#),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.ingress[0].ports[0].endPort"),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.ingress[0].from[0].ipBlock.cidr"),
        "{stderr}"
    );

    // the pods' sandboxes (and their CNI namespaces) go before the lan does
    api.kubectl(
        KUBECTL_133,
        &[
            "delete",
            "pods",
            "--all",
            "--all-namespaces",
            "--grace-period=1",
            "--timeout=50s",
        ],
    );
    drop(controller);
}
