//! LoadBalancer Services (issue 33, k3s's ServiceLB) end to end, once per proxy mode: a real
//! kubelet with its managed containerd and `skiff proxy` in a node namespace on a private lan
//! ([`support::netns`]), the controller manager's `servicelb` controller giving LoadBalancers
//! the node's address.
//!
//! A LoadBalancer Service without node ports (`allocateLoadBalancerNodePorts: false`) reports
//! the node's lan address in its status (a `kubectl wait --for=jsonpath` on the ingress, what
//! `helm install --wait` checks, finishes) and answers on that address from the lan host; a
//! second Service on the same port gets a `PortConflict` event and no address; with
//! `externalTrafficPolicy: Local` the health check port answers 200 with the local endpoint
//! count; `loadBalancerSourceRanges` lets a client in the range in and drops one outside it.
//! Needs root (containerd, CNI, network namespaces, iptables inside them); skips otherwise.

mod support;

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::json;
use support::cluster::NAME_SERVER;
use support::netns::{self, LanCluster};
use support::{KUBECTL_133, eventually};

const NODE: &str = "lb-a";
/// The LoadBalancer port, free on the node.
const PORT: u16 = 8000;

fn load_balancer(name: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut full = json!({"type": "LoadBalancer", "selector": {"app": "web"},
                          "allocateLoadBalancerNodePorts": false,
                          "ports": [{"name": "http", "port": PORT, "targetPort": 8080}]});
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": full})
}

/// How one proxy mode shows a Service's `loadBalancerSourceRanges`.
struct Mode {
    name: &'static str,
    /// The command that lists the mode's NAT rules in the node's namespace.
    rules: &'static [&'static str],
    /// Whether `rules` let `range` (`a.b.c.d/n`) through to the Service.
    allows: fn(rules: &str, range: &str) -> bool,
}

const IPTABLES: Mode = Mode {
    name: "iptables",
    rules: &["iptables-save", "-t", "nat"],
    allows: |rules, range| {
        rules.lines().any(|l| {
            l.starts_with("-A KUBE-FW-")
                && l.contains(&format!("-s {range} "))
                && l.contains("-j KUBE-EXT-")
        })
    },
};

const NFTABLES: Mode = Mode {
    name: "nftables",
    rules: &["nft", "list", "table", "ip", "skiff"],
    // nft prints a /32 as the bare address, and a set of one as that element
    allows: |rules, range| {
        let range = range.strip_suffix("/32").unwrap_or(range);
        rules.contains(&format!("ip saddr != {{ {range} }} drop"))
            || rules.contains(&format!("ip saddr != {range} drop"))
    },
};

#[test]
fn load_balancers_get_the_node_address_and_keep_to_their_source_ranges_in_iptables_mode() {
    load_balancers_get_the_node_address_answer_there_and_keep_to_their_source_ranges(IPTABLES);
}

#[test]
fn load_balancers_get_the_node_address_and_keep_to_their_source_ranges_in_nftables_mode() {
    load_balancers_get_the_node_address_answer_there_and_keep_to_their_source_ranges(NFTABLES);
}

fn load_balancers_get_the_node_address_answer_there_and_keep_to_their_source_ranges(mode: Mode) {
    if let Some(why) = netns::unsupported() {
        support::skip(&why);
        return;
    }
    let cluster = LanCluster::start("endpointslice,servicelb", &[NODE]);
    let (api, net) = (&cluster.api, &cluster.nets[0]);
    let _proxy = net.start(
        api,
        ("system:kube-proxy", None),
        "proxy",
        &["proxy", "--node-name", NODE, "--mode", mode.name],
    );

    api.apply(json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "web", "labels": {"app": "web"}},
               "spec": {"terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "web", "image": "busybox",
                                        "imagePullPolicy": "IfNotPresent",
                                        "command": ["sh", "-c", NAME_SERVER]}]}}));
    api.apply(load_balancer("web", json!({})));
    // what `helm install --wait` waits for on a LoadBalancer
    api.kubectl(
        KUBECTL_133,
        &[
            "wait",
            "--for=jsonpath={.status.loadBalancer.ingress}",
            "service/web",
            "--timeout=120s",
        ],
    );
    let ingress = api.jsonpath(
        &["get", "svc", "web"],
        "{.status.loadBalancer.ingress[*].ip} {.status.loadBalancer.ingress[*].ipMode}",
    );
    assert_eq!(ingress, format!("{} VIP", net.ip));
    let node_ports = api.jsonpath(&["get", "svc", "web"], "{.spec.ports[*].nodePort}");
    assert_eq!(node_ports, "", "allocateLoadBalancerNodePorts: false");
    let mut updated = String::new();
    support::run(async {
        updated = api.first_event_message("web", "UpdatedLoadBalancer").await;
    });
    assert_eq!(
        updated,
        format!("Updated LoadBalancer with new IPs: [] -> [{}]", net.ip)
    );

    // the port answers on the node's lan address, from the lan host
    api.kubectl(
        KUBECTL_133,
        &["wait", "--for=condition=Ready", "pod/web", "--timeout=120s"],
    );
    let lb = format!("{}:{PORT}", net.ip);
    // refused until the proxy has the address and the endpoint
    support::run(async {
        eventually("the load-balancer address accepting", || async {
            TcpStream::connect(&lb).ok()
        })
        .await;
    });
    let answer = support::http_get(&lb, "/cgi-bin/name");
    assert!(
        answer.lines().next().is_some_and(|l| l.contains(" 200 ")) && answer.ends_with("web\n"),
        "{answer}"
    );

    // a second LoadBalancer on the same port: an event, and no address
    api.apply(load_balancer("second", json!({})));
    let mut conflict = String::new();
    support::run(async {
        conflict = api.first_event_message("second", "PortConflict").await;
    });
    assert_eq!(
        conflict,
        format!(
            "port {PORT}/TCP is already used on node {NODE} by LoadBalancer Service default/web; \
             node {NODE} does not serve this LoadBalancer"
        )
    );
    let second = api.jsonpath(&["get", "svc", "second"], "{.status.loadBalancer}");
    assert_eq!(second, "{}", "no address for the second Service");

    // externalTrafficPolicy Local: a health check port answering for this node's endpoint
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "svc",
            "web",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Local"}}"#,
        ],
    );
    let health = api.jsonpath(&["get", "svc", "web"], "{.spec.healthCheckNodePort}");
    assert!(!health.is_empty(), "a healthCheckNodePort");
    let health_addr = format!("{}:{health}", net.ip);
    support::run(async {
        eventually("the health check port listening", || async {
            TcpStream::connect(&health_addr).ok()
        })
        .await;
    });
    let answer = support::http_get(&health_addr, "/healthz");
    assert!(answer.starts_with("HTTP/1.0 200 OK"), "{answer}");
    assert!(answer.contains("\"localEndpoints\": 1"), "{answer}");
    assert!(answer.contains("\"namespace\": \"default\""), "{answer}");
    let answer = support::http_get(&lb, "/cgi-bin/name");
    assert!(
        answer.ends_with("web\n"),
        "Local policy, local pod: {answer}"
    );

    // loadBalancerSourceRanges: the lan host is let in, then (another range) dropped
    let host_range = format!("{}/32", net.gateway);
    let ranges = json!({"spec": {"loadBalancerSourceRanges": [host_range]}}).to_string();
    api.kubectl(KUBECTL_133, &["patch", "svc", "web", "-p", &ranges]);
    net.exec_until(mode.rules, "the firewall", |rules| {
        (mode.allows)(rules, &host_range)
    });
    let answer = support::http_get(&lb, "/cgi-bin/name");
    assert!(answer.ends_with("web\n"), "a client in the range: {answer}");
    let other = json!({"spec": {"loadBalancerSourceRanges": ["192.0.2.0/24"]}}).to_string();
    api.kubectl(KUBECTL_133, &["patch", "svc", "web", "-p", &other]);
    net.exec_until(mode.rules, "the new range", |rules| {
        (mode.allows)(rules, "192.0.2.0/24") && !(mode.allows)(rules, &host_range)
    });
    // the firewall drops the SYN: the connection cannot be made (the timeout only bounds the
    // wait; the rule above is in place)
    let addr: SocketAddr = lb.parse().unwrap();
    let refused = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
    assert!(refused.is_err(), "a client outside the range got in");

    // the pod's sandbox (and its CNI namespace) goes before the lan does
    api.kubectl(
        KUBECTL_133,
        &[
            "delete",
            "pods,services",
            "--all",
            "--grace-period=1",
            "--timeout=60s",
        ],
    );
}
