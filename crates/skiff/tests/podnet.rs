//! The pod network across nodes (issues 8 and 33), end to end: two real kubelets with their
//! managed containerd, each in a network namespace of its own ([`support::netns`]); the
//! controller manager's nodeipam gives their Nodes pod CIDRs and the scheduler places the pods.
//!
//! On one lan, with host-gw, each kubelet's sync routes the other node's pod CIDR via its lan
//! address, so a pod on node A reaches a pod on node B by pod IP and B sees A's pod IP (no
//! masquerade between pods), while a pod reaching the lan host leaves masqueraded behind its
//! node's address; the API server reaches the kubelets at their lan addresses for logs and exec;
//! a deleted Node's route goes.
//!
//! On two lans joined by a router namespace (different subnets, no shared L2), with vxlan, each
//! node publishes its VTEP in flannel's Node annotations and routes the other's pod CIDR through
//! `flannel.1`, so pods reach each other unmasqueraded with the overlay's MTU, and a deleted
//! Node's route, neighbour and forwarding entries go; with host-gw the same nodes get no route
//! and pods cannot connect. Needs root (containerd, CNI, network namespaces); skips otherwise.

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::sync::mpsc;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::cluster::{Process, controller_manager, scheduler};
use support::netns::{self, Lan, NodeNet, Router};
use support::node::{KubeletProcess, in_phase};
use support::{ApiServer, Backend, KUBECTL_133, eventually, kube_client, run};

const NODE_A: &str = "podnet-a";
const NODE_B: &str = "podnet-b";

/// An HTTP server (busybox httpd) whose CGI answers with the client address it sees.
const WHO_AM_I: &str = r#"mkdir -p /www/cgi-bin && printf '#!/bin/sh\necho Content-Type: text/plain\necho\necho "$REMOTE_ADDR"\n' > /www/cgi-bin/ip && chmod +x /www/cgi-bin/ip && exec httpd -f -p 8080 -h /www"#;

async fn create_pod(pods: &Api<Pod>, name: &str, node: &str, script: &str) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox", "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", script]}],
        },
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create pod");
}

/// The pod's IP once it runs on `node`.
async fn running_on(pods: &Api<Pod>, name: &str, node: &str) -> String {
    let pod = eventually(&format!("{name} running"), || {
        in_phase(pods, name, "Running")
    })
    .await;
    assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some(node));
    pod.status.unwrap().pod_ip.expect("a pod IP")
}

/// The Node's pod CIDR once nodeipam has given it one.
fn pod_cidr(api: &ApiServer, node: &str) -> String {
    let out = api.kubectl_until(
        KUBECTL_133,
        &["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"],
        None,
        |out| out.status.success() && !out.stdout.is_empty(),
    );
    support::output_text(&out).0
}

/// Creates Nodes A and B before their kubelets, which use the ranges nodeipam gave them
/// (services.rs covers the other path: kubelets that register their Nodes and wait for the
/// ranges); their pod CIDRs.
fn create_nodes(api: &ApiServer) -> (String, String) {
    for node in [NODE_A, NODE_B] {
        let manifest = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"kubernetes.io/hostname": node}},
        });
        api.kubectl_stdin(
            KUBECTL_133,
            &["create", "-f", "-"],
            Some(&manifest.to_string()),
        );
    }
    let (cidr_a, cidr_b) = (pod_cidr(api, NODE_A), pod_cidr(api, NODE_B));
    assert_ne!(cidr_a, cidr_b);
    (cidr_a, cidr_b)
}

/// Skiff's routes (protocol 83) in a node's namespace, once `done` accepts them.
fn routes_until(net: &NodeNet, what: &str, done: impl Fn(&str) -> bool) -> String {
    net.exec_until(&["ip", "-4", "route", "show", "proto", "83"], what, done)
}

/// Whether `ip` is in the /24 `cidr`.
fn in_cidr(ip: &str, cidr: &str) -> bool {
    let prefix = cidr.trim_end_matches(".0/24");
    ip.starts_with(&format!("{prefix}."))
}

#[test]
fn pods_on_two_nodes_reach_each_other_unmasqueraded_and_leave_the_cluster_masqueraded() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    // declared first, dropped last: after the kubelets running inside it
    let mut lan = Lan::create();
    let api = netns::api_server(&lan);
    let (net_a, net_b) = (lan.add_node(), lan.add_node());
    let _cm = controller_manager(
        &api,
        &["--controllers", "nodeipam", "--allocate-node-cidrs=true"],
    );
    let _scheduler = scheduler(&api);

    let (cidr_a, cidr_b) = create_nodes(&api);

    let _kubelet_a = KubeletProcess::start_placed(&api, NODE_A, net_a.placement(&api, NODE_A), &[]);
    let _kubelet_b = KubeletProcess::start_placed(&api, NODE_B, net_b.placement(&api, NODE_B), &[]);

    // each node routes the other's pod CIDR via the other's lan address, marked as Skiff's
    let to_b = format!("{cidr_b} via {}", net_b.ip);
    let to_a = format!("{cidr_a} via {}", net_a.ip);
    let routes_a = routes_until(&net_a, "the route to B's pods", |r| r.contains(&to_b));
    let routes_b = routes_until(&net_b, "the route to A's pods", |r| r.contains(&to_a));
    assert!(!routes_a.contains(&cidr_a), "{routes_a}");
    assert!(!routes_b.contains(&cidr_b), "{routes_b}");
    // and masquerades only what leaves the cluster CIDR
    let nat = net_a.exec_ok(&["iptables", "-t", "nat", "-S", "SKIFF-POSTROUTING"]);
    assert!(
        nat.contains("-s 10.42.0.0/16 -d 10.42.0.0/16") && nat.contains("-j MASQUERADE"),
        "{nat}"
    );

    let (mut ip_a, mut ip_b) = (String::new(), String::new());
    run(async {
        let pods: Api<Pod> = Api::default_namespaced(kube_client(&api).await);
        create_pod(&pods, "server", NODE_B, WHO_AM_I).await;
        create_pod(&pods, "client", NODE_A, "echo client up && exec sleep 3600").await;
        ip_a = running_on(&pods, "client", NODE_A).await;
        ip_b = running_on(&pods, "server", NODE_B).await;
    });
    assert!(in_cidr(&ip_a, &cidr_a), "{ip_a} not in {cidr_a}");
    assert!(in_cidr(&ip_b, &cidr_b), "{ip_b} not in {cidr_b}");

    // the API server reaches the kubelet in node A's namespace at its lan address
    let logs = api.kubectl(KUBECTL_133, &["logs", "client"]);
    assert_eq!(logs, "client up\n");

    // pod A → pod B by pod IP; B sees A's pod IP
    let url = format!("http://{ip_b}:8080/cgi-bin/ip");
    let seen = api.kubectl_until(
        KUBECTL_133,
        &["exec", "client", "--", "wget", "-q", "-O", "-", &url],
        None,
        |out| out.status.success(),
    );
    let seen = support::output_text(&seen).0;
    // httpd listens on IPv6 and shows IPv4 clients as `[::ffff:a.b.c.d]`
    let seen = seen.trim().trim_matches(['[', ']']);
    assert_eq!(seen.trim_start_matches("::ffff:"), ip_a);

    // pod A → the lan host: masqueraded behind node A's address
    let listener = TcpListener::bind((lan.host_ip(), 0)).expect("listen on the lan host");
    let port = listener.local_addr().unwrap().port();
    let (peers, peer) = mpsc::channel::<IpAddr>();
    std::thread::spawn(move || {
        while let Ok((mut conn, from)) = listener.accept() {
            let mut request = [0u8; 1024];
            let _ = conn.read(&mut request);
            let _ = conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nhello\n");
            if peers.send(from.ip()).is_err() {
                break;
            }
        }
    });
    let url = format!("http://{}:{port}/", lan.host_ip());
    let out = api.kubectl(
        KUBECTL_133,
        &["exec", "client", "--", "wget", "-q", "-O", "-", &url],
    );
    assert_eq!(out, "hello\n");
    let from = peer
        .recv_timeout(support::HANG_GUARD)
        .expect("the lan host saw the pod's request");
    assert_eq!(from, IpAddr::V4(net_a.ip));

    // the pods' sandboxes (and their CNI namespaces) go before the lan does
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

    // a Node that is gone takes its route with it
    api.kubectl(KUBECTL_133, &["delete", "node", NODE_B]);
    routes_until(&net_a, "removing the route to B's pods", |r| {
        !r.contains(&cidr_b)
    });
}

/// Nodes A and B on two lans of their own joined by a router, their kubelets running the pod
/// network `backend`, a server pod ([`WHO_AM_I`]) on B and a client pod on A. Fields drop in
/// order: the kubelets before the API server, the lans last.
struct Routed {
    _kubelets: [KubeletProcess; 2],
    _scheduler: Process,
    _controller_manager: Process,
    api: ApiServer,
    nets: [NodeNet; 2],
    _router: Router,
    _lans: [Lan; 2],
    cidrs: [String; 2],
    /// The client's and the server's pod IPs.
    pod_ips: [String; 2],
}

impl Routed {
    fn start(backend: &str) -> Routed {
        let (mut lan_a, mut lan_b) = (Lan::create(), Lan::create());
        let router = Router::join(&[&lan_a, &lan_b]);
        let (net_a, net_b) = (lan_a.add_node(), lan_b.add_node());
        router.serve(&net_a);
        router.serve(&net_b);
        // the nodes reach the API server on their own lan's host address
        let mut flags = netns::api_server_flags(&lan_a);
        flags.extend(["--tls-san".into(), lan_b.host_ip().to_string()]);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let api = ApiServer::start_with(Backend::Embedded, &flags);
        let controller_manager = controller_manager(
            &api,
            &["--controllers", "nodeipam", "--allocate-node-cidrs=true"],
        );
        let scheduler = scheduler(&api);
        let (cidr_a, cidr_b) = create_nodes(&api);
        let start = |net: &NodeNet, node: &str| {
            KubeletProcess::start_placed(&api, node, net.placement_with(&api, node, backend), &[])
        };
        let kubelets = [start(&net_a, NODE_A), start(&net_b, NODE_B)];
        let mut pod_ips = [String::new(), String::new()];
        run(async {
            let pods: Api<Pod> = Api::default_namespaced(kube_client(&api).await);
            create_pod(&pods, "server", NODE_B, WHO_AM_I).await;
            create_pod(&pods, "client", NODE_A, "exec sleep 3600").await;
            pod_ips = [
                running_on(&pods, "client", NODE_A).await,
                running_on(&pods, "server", NODE_B).await,
            ];
        });
        // the server answers on its own node
        api.kubectl_until(
            KUBECTL_133,
            &[
                "exec",
                "server",
                "--",
                "wget",
                "-q",
                "-O",
                "-",
                "http://127.0.0.1:8080/cgi-bin/ip",
            ],
            None,
            |out| out.status.success(),
        );
        Routed {
            _kubelets: kubelets,
            _scheduler: scheduler,
            _controller_manager: controller_manager,
            api,
            nets: [net_a, net_b],
            _router: router,
            _lans: [lan_a, lan_b],
            cidrs: [cidr_a, cidr_b],
            pod_ips,
        }
    }

    /// The kubectl arguments of a request from the client pod to the server pod's
    /// `/cgi-bin/ip` by pod IP, given 10 s (busybox's own `wget -T` crashes).
    fn client_to_server(&self) -> Vec<String> {
        let url = format!("http://{}:8080/cgi-bin/ip", self.pod_ips[1]);
        [
            "exec", "client", "--", "timeout", "10", "wget", "-q", "-O", "-", &url,
        ]
        .map(String::from)
        .to_vec()
    }

    /// Deletes the pods (their sandboxes and CNI namespaces go before the lans do).
    fn delete_pods(&self) {
        self.api.kubectl(
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
}

/// A Node annotation, as kubectl 1.33's jsonpath reads it.
fn annotation(api: &ApiServer, node: &str, key: &str) -> String {
    let path = format!(
        "jsonpath={{.metadata.annotations.{}}}",
        key.replace('.', "\\.")
    );
    api.kubectl(KUBECTL_133, &["get", "node", node, "-o", &path])
}

#[test]
fn pods_on_nodes_of_different_subnets_reach_each_other_over_vxlan_unmasqueraded() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    let routed = Routed::start("vxlan");
    let [net_a, net_b] = &routed.nets;
    let [cidr_a, cidr_b] = &routed.cidrs;
    let api = &routed.api;

    // each node publishes its VTEP as flannel does
    assert_eq!(
        annotation(api, NODE_B, "flannel.alpha.coreos.com/backend-type"),
        "vxlan"
    );
    assert_eq!(
        annotation(api, NODE_B, "flannel.alpha.coreos.com/public-ip"),
        net_b.ip.to_string()
    );
    assert_eq!(
        annotation(api, NODE_B, "flannel.alpha.coreos.com/kube-subnet-manager"),
        "true"
    );
    let data: serde_json::Value = serde_json::from_str(&annotation(
        api,
        NODE_B,
        "flannel.alpha.coreos.com/backend-data",
    ))
    .expect("backend-data is JSON");
    assert_eq!(data["VNI"], 1);
    let mac_b = data["VtepMAC"].as_str().expect("a VtepMAC").to_string();
    let device_b = net_b.exec_ok(&["ip", "-o", "link", "show", "dev", "flannel.1"]);
    assert!(device_b.contains(&mac_b), "{device_b}");

    // each routes the other's pod CIDR through its VXLAN device, to the other's VTEP address
    let vtep = |cidr: &str| cidr.trim_end_matches("/24").to_string();
    let (vtep_a, vtep_b) = (vtep(cidr_a), vtep(cidr_b));
    let to_b = format!("{cidr_b} via {vtep_b} dev flannel.1 onlink");
    let to_a = format!("{cidr_a} via {vtep_a} dev flannel.1 onlink");
    routes_until(net_a, "the route to B's pods", |r| r.contains(&to_b));
    routes_until(net_b, "the route to A's pods", |r| r.contains(&to_a));
    let neighbours = net_a.exec_ok(&["ip", "neigh", "show", "dev", "flannel.1"]);
    assert!(
        neighbours.contains(&format!("{vtep_b} lladdr {mac_b} PERMANENT")),
        "{neighbours}"
    );
    let fdb = net_a.exec_ok(&["bridge", "fdb", "show", "dev", "flannel.1"]);
    assert!(fdb.contains(&format!("{mac_b} dst {}", net_b.ip)), "{fdb}");

    // the overlay's MTU: the lan's 1500 less 50 for the encapsulation, on the device and pods
    let device_a = net_a.exec_ok(&["ip", "-o", "link", "show", "dev", "flannel.1"]);
    assert!(device_a.contains(" mtu 1450 "), "{device_a}");
    let pod_mtu = api.kubectl(
        KUBECTL_133,
        &["exec", "client", "--", "cat", "/sys/class/net/eth0/mtu"],
    );
    assert_eq!(pod_mtu.trim(), "1450");

    // pod A → pod B across the router, by pod IP; B sees A's pod IP
    let request = routed.client_to_server();
    let request: Vec<&str> = request.iter().map(String::as_str).collect();
    let seen = api.kubectl_until(KUBECTL_133, &request, None, |out| out.status.success());
    let seen = support::output_text(&seen).0;
    let seen = seen.trim().trim_matches(['[', ']']);
    assert_eq!(seen.trim_start_matches("::ffff:"), routed.pod_ips[0]);

    // a Node that is gone takes its route, neighbour and forwarding entries with it
    routed.delete_pods();
    api.kubectl(KUBECTL_133, &["delete", "node", NODE_B]);
    routes_until(net_a, "removing the route to B's pods", |r| {
        !r.contains(cidr_b.as_str())
    });
    net_a.exec_until(
        &["ip", "neigh", "show", "dev", "flannel.1"],
        "removing B's neighbour entry",
        |n| !n.contains(&vtep_b),
    );
    net_a.exec_until(
        &["bridge", "fdb", "show", "dev", "flannel.1"],
        "removing B's forwarding entry",
        |f| !f.contains(&mac_b),
    );
}

#[test]
fn with_host_gw_nodes_of_different_subnets_get_no_route_and_their_pods_cannot_connect() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    let routed = Routed::start("host-gw");
    let [net_a, _] = &routed.nets;

    // the router knows no pod CIDR: the request goes nowhere
    let request = routed.client_to_server();
    let request: Vec<&str> = request.iter().map(String::as_str).collect();
    let out = routed.api.kubectl_output(KUBECTL_133, &request, None);
    assert!(
        !out.status.success(),
        "pod A reached pod B without a route: {:?}",
        support::output_text(&out)
    );
    // B is not on a network A is attached to: no route, and no VXLAN device either
    let routes = net_a.exec_ok(&["ip", "-4", "route", "show", "proto", "83"]);
    assert_eq!(routes, "", "host-gw routed a node it cannot reach directly");
    let device = net_a.exec(&["ip", "link", "show", "dev", "flannel.1"]);
    assert!(!device.status.success(), "host-gw made a VXLAN device");
    assert_eq!(
        annotation(&routed.api, NODE_A, "flannel.alpha.coreos.com/backend-type"),
        "host-gw"
    );
    routed.delete_pods();
}
