//! Services end to end (issue 8; seed 001's path from a Service to its pods): two real nodes,
//! each a kubelet with its managed containerd in a network namespace of its own on a private
//! lan ([`support::netns`]), `skiff proxy` on each (node A in iptables mode, node B in nftables
//! mode) as `system:kube-proxy`, and `skiff dns` on node A as `kube-system/kube-dns` behind the
//! `kube-dns` Service's fixed ClusterIP, which the kubelets write into pods' resolv.conf.
//!
//! A Deployment's pods behind a NodePort Service are reached from pods on both nodes by
//! ClusterIP and by DNS name, the requests spread over the backends, the NodePort answers from
//! the lan host on both nodes' addresses, `kubectl get endpoints` and the node's
//! `iptables -t nat -L` show the Service, DNS answers A, SRV, headless and PTR questions,
//! sessionAffinity pins a client to one backend, scaling down leaves one endpoint rule, and
//! deleting the Service removes its chains. Needs root (containerd, CNI, network namespaces,
//! iptables and nft inside them); skips otherwise.

mod support;

use std::collections::BTreeSet;

use serde_json::json;
use support::cluster::{NAME_SERVER, grant_coredns_role};
use support::netns::{self, LanCluster, NodeNet};
use support::{ApiServer, KUBECTL_133, output_text};

const NODE_A: &str = "svc-a";
const NODE_B: &str = "svc-b";
/// The `kube-dns` Service's ClusterIP, as `skiff server` will make it.
const DNS_IP: &str = "10.43.0.10";

/// The pod names that `count` requests from pod `client` to `url` were answered by, once a
/// round of them all succeeds.
fn answered_by(api: &ApiServer, client: &str, url: &str, count: usize) -> BTreeSet<String> {
    let script = format!("for i in $(seq {count}); do wget -q -O - {url} || exit 1; done");
    let out = api.kubectl_until(
        KUBECTL_133,
        &["exec", client, "--", "sh", "-c", &script],
        None,
        |out| out.status.success(),
    );
    let names = output_text(&out).0;
    assert_eq!(names.lines().count(), count, "{names}");
    names.lines().map(str::to_string).collect()
}

/// `dig +short` in node A's namespace, asking the cluster DNS at its ClusterIP.
fn dig(net: &NodeNet, args: &[&str]) -> Vec<String> {
    let server = format!("@{DNS_IP}");
    let mut all = vec!["dig", "+short", "+time=2", "+tries=3", &server];
    all.extend_from_slice(args);
    let mut lines: Vec<String> = net.exec_ok(&all).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// One HTTP GET from the lan host; the last line of the answer.
fn http_get(host: &str, port: &str, path: &str) -> String {
    let response = support::http_get(&format!("{host}:{port}"), path);
    assert!(
        response.lines().next().is_some_and(|l| l.contains(" 200 ")),
        "{response}"
    );
    // the CGI's own header lines end in a bare \n: its one-line body is the last line
    response.lines().last().unwrap_or("").to_string()
}

#[test]
fn services_reach_their_pods_by_cluster_ip_dns_name_and_node_port_in_both_proxy_modes() {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    // the kubelets register their Nodes and wait for nodeipam's pod ranges
    let cluster = LanCluster::start_with(
        "deployment,replicaset,endpoints,endpointslice",
        &[NODE_A, NODE_B],
        &["--cluster-dns", DNS_IP],
    );
    let (api, net_a, net_b) = (&cluster.api, &cluster.nets[0], &cluster.nets[1]);
    let proxier = ("system:kube-proxy", None);
    let _proxy_a = net_a.start(
        api,
        proxier,
        "proxy-a",
        &["proxy", "--node-name", NODE_A, "--mode", "iptables"],
    );
    let _proxy_b = net_b.start(
        api,
        proxier,
        "proxy-b",
        &["proxy", "--node-name", NODE_B, "--mode", "nftables"],
    );

    // cluster DNS on node A, behind the kube-dns Service (no selector: its slice names node A)
    grant_coredns_role(api);
    let dns_listen = format!("{}:53", net_a.ip);
    let _dns = net_a.start(
        api,
        (
            "system:serviceaccount:kube-system:kube-dns",
            Some("system:serviceaccounts"),
        ),
        "dns",
        &["dns", "--listen", &dns_listen],
    );
    api.apply(json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "kube-dns", "namespace": "kube-system"},
               "spec": {"clusterIP": DNS_IP, "ports": [
                   {"name": "dns", "port": 53, "protocol": "UDP"},
                   {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}}));
    api.apply(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": "kube-dns-lan", "namespace": "kube-system",
                            "labels": {"kubernetes.io/service-name": "kube-dns"}},
               "addressType": "IPv4",
               "endpoints": [{"addresses": [net_a.ip.to_string()],
                              "conditions": {"ready": true}}],
               "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                         {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
    );

    // three backends behind a NodePort Service, a headless twin, a client on each node
    let template = json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "web", "image": "busybox",
                                 "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", NAME_SERVER],
                                 "ports": [{"name": "http", "containerPort": 8080}]}]},
    });
    api.apply(
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                        "template": template}}),
    );
    api.apply(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"type": "NodePort", "selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}),
    );
    api.apply(
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-headless"},
               "spec": {"clusterIP": "None", "selector": {"app": "web"},
                        "ports": [{"name": "http", "port": 8080}]}}),
    );
    for (name, node) in [("client-a", NODE_A), ("client-b", NODE_B)] {
        api.apply(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                   "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                            "terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "c", "image": "busybox",
                                            "imagePullPolicy": "IfNotPresent",
                                            "command": ["sleep", "3600"]}]}}),
        );
    }
    api.kubectl(
        KUBECTL_133,
        &[
            "wait",
            "--for=condition=Ready",
            "pod",
            "--all",
            "--timeout=120s",
        ],
    );
    let cluster_ip = api.jsonpath(&["get", "svc", "web"], "{.spec.clusterIP}");
    let node_port = api.jsonpath(&["get", "svc", "web"], "{.spec.ports[0].nodePort}");
    let pod_ips: BTreeSet<String> = api
        .jsonpath(
            &["get", "pods", "-l", "app=web"],
            "{.items[*].status.podIP}",
        )
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(pod_ips.len(), 3, "{pod_ips:?}");

    // kubectl get endpoints lists the three pods (seed 001 ⑥)
    let endpoints = api.kubectl_until(
        KUBECTL_133,
        &[
            "get",
            "endpoints",
            "web",
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip}",
        ],
        None,
        |out| output_text(out).0.split_whitespace().count() == 3,
    );
    let listed: BTreeSet<String> = output_text(&endpoints)
        .0
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(listed, pod_ips);
    // and kubectl get endpointslices, the proxy's source, the same three behind port 8080
    let slices = api.kubectl_until(
        KUBECTL_133,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ],
        None,
        |out| {
            pod_ips
                .iter()
                .all(|ip| output_text(out).0.contains(ip.as_str()))
        },
    );
    let slices = output_text(&slices).0;
    let row: Vec<&str> = slices
        .lines()
        .nth(1)
        .expect("a slice row")
        .split_whitespace()
        .collect();
    assert!(row[0].starts_with("web-"), "{slices}");
    assert_eq!(row[1..3], ["IPv4", "8080"], "{slices}");
    let shown: BTreeSet<String> = row[3].split(',').map(str::to_string).collect();
    assert_eq!(shown, pod_ips, "{slices}");

    // by ClusterIP from both nodes (iptables and nftables), spread over the backends
    let by_ip = format!("http://{cluster_ip}/cgi-bin/name");
    for client in ["client-a", "client-b"] {
        let names = answered_by(api, client, &by_ip, 30);
        assert!(names.len() > 1, "{client}: all answered by {names:?}");
        assert!(names.iter().all(|n| n.starts_with("web-")), "{names:?}");
    }
    // by DNS name, through the search path the kubelet wrote into resolv.conf
    for url in [
        "http://web/cgi-bin/name",
        "http://web.default.svc.cluster.local/cgi-bin/name",
    ] {
        let names = answered_by(api, "client-b", url, 6);
        assert!(names.iter().all(|n| n.starts_with("web-")), "{names:?}");
    }
    let resolv = api.kubectl(
        KUBECTL_133,
        &["exec", "client-a", "--", "cat", "/etc/resolv.conf"],
    );
    assert!(resolv.contains(&format!("nameserver {DNS_IP}")), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );

    // the NodePort answers from the lan host on both nodes' addresses
    for net in [net_a, net_b] {
        let name = http_get(&net.ip.to_string(), &node_port, "/cgi-bin/name");
        assert!(name.starts_with("web-"), "{name}");
    }

    // the node's nat table shows the Service (seed 001 ⑦); node B's nft table has its address
    let nat = net_a.exec_ok(&["iptables", "-t", "nat", "-L", "-n"]);
    assert!(nat.contains("Chain KUBE-SERVICES"), "{nat}");
    assert!(nat.contains("default/web:http cluster IP"), "{nat}");
    let nft = net_b.exec_ok(&["nft", "list", "table", "ip", "skiff"]);
    assert!(nft.contains(&cluster_ip), "{nft}");

    // DNS: A, SRV for the named port, headless (one A per ready pod), PTR of the ClusterIP
    assert_eq!(
        dig(net_a, &["web.default.svc.cluster.local"]),
        std::slice::from_ref(&cluster_ip)
    );
    assert_eq!(
        dig(net_a, &["SRV", "_http._tcp.web.default.svc.cluster.local"]),
        ["0 100 80 web.default.svc.cluster.local."]
    );
    assert_eq!(
        dig(net_a, &["web-headless.default.svc.cluster.local"]),
        pod_ips.iter().cloned().collect::<Vec<_>>()
    );
    assert_eq!(
        dig(net_a, &["-x", &cluster_ip]),
        ["web.default.svc.cluster.local."]
    );

    // sessionAffinity ClientIP: once both proxies have it, a client sticks to one backend
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "svc",
            "web",
            "-p",
            r#"{"spec":{"sessionAffinity":"ClientIP"}}"#,
        ],
    );
    net_a.exec_until(
        &["iptables-save", "-t", "nat"],
        "the affinity rule",
        |rules| rules.contains("--name KUBE-SEP-") && rules.contains("--rcheck"),
    );
    net_b.exec_until(
        &["nft", "list", "table", "ip", "skiff"],
        "the affinity set",
        |table| table.contains("affinity"),
    );
    for client in ["client-a", "client-b"] {
        let names = answered_by(api, client, &by_ip, 20);
        assert_eq!(names.len(), 1, "{client}: answered by {names:?}");
    }

    // scaling down to one pod leaves one endpoint chain for the Service
    api.kubectl(KUBECTL_133, &["scale", "deployment", "web", "--replicas=1"]);
    net_a.exec_until(
        &["iptables-save", "-t", "nat"],
        "one endpoint left",
        |rules| {
            rules
                .lines()
                .filter(|l| l.starts_with("-A KUBE-SEP-") && l.contains("default/web:http"))
                .filter(|l| l.contains("DNAT"))
                .count()
                == 1
        },
    );

    // deleting the Service removes its chains and map elements
    api.kubectl(KUBECTL_133, &["delete", "svc", "web"]);
    net_a.exec_until(
        &["iptables-save", "-t", "nat"],
        "removing the Service's chains",
        |rules| !rules.contains("default/web:http"),
    );
    net_b.exec_until(
        &["nft", "list", "table", "ip", "skiff"],
        "removing the Service's elements",
        |table| !table.contains(&cluster_ip),
    );

    // the pods' sandboxes (and their CNI namespaces) go before the lan does
    api.kubectl(
        KUBECTL_133,
        &[
            "delete",
            "deployment,replicasets,pods",
            "--all",
            "--grace-period=1",
            "--timeout=60s",
        ],
    );
}
