//! Tests of the pod network's shared parts (masquerading, the route sync) through the host-gw
//! backend, and the Node builders the backends' tests share.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus};
use kube::api::ObjectMeta;

use super::*;
use crate::podnet_runner::RecordingRunner;

pub(crate) fn node(name: &str, cidr: Option<&str>, ip: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: cidr.map(Into::into),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress {
                type_: "InternalIP".into(),
                address: ip.into(),
            }]),
            ..Default::default()
        }),
    }
}

pub(crate) fn net(text: &str) -> Ipv4Net {
    Ipv4Net::parse(text).unwrap()
}

pub(crate) fn ip(text: &str) -> Ipv4Addr {
    text.parse().unwrap()
}

pub(crate) const ADDRS: &str = "ip -j -4 addr show";
pub(crate) const OURS: &str = "ip -j -4 route show table main proto 83";
pub(crate) const ALL: &str = "ip -j -4 route show table main";

/// A host with `lo` and `eth0` (10.250.0.2/24, MTU 1500).
pub(crate) fn runner() -> Arc<RecordingRunner> {
    let runner = Arc::new(RecordingRunner::default());
    runner.answer(
        ADDRS,
        r#"[{"ifname":"lo","mtu":65536,"addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
            {"ifname":"eth0","mtu":1500,"addr_info":[{"family":"inet","local":"10.250.0.2","prefixlen":24}]}]"#,
    );
    runner
}

fn host_gw_backend() -> Backend {
    Backend::HostGw {
        public_ip: "10.250.0.2".parse().unwrap(),
    }
}

fn host() -> (Arc<RecordingRunner>, PodNetwork) {
    let runner = runner();
    let network = PodNetwork::new(runner.clone(), "a", "10.42.0.0/16", host_gw_backend()).unwrap();
    (runner, network)
}

#[test]
fn other_nodes_on_a_directly_attached_network_get_a_route_to_their_pod_cidr() {
    let local = [net("127.0.0.1/8"), net("10.250.0.2/24")];
    let nodes = [
        node("a", Some("10.42.0.0/24"), "10.250.0.2"),
        node("b", Some("10.42.1.0/24"), "10.250.0.3"),
        node("far", Some("10.42.2.0/24"), "192.168.7.3"),
        node("no-cidr", None, "10.250.0.4"),
        node("loopback", Some("10.42.3.0/24"), "127.0.0.1"),
        node("same-host", Some("10.42.4.0/24"), "10.250.0.2"),
        node("v6", Some("fd00::/64"), "10.250.0.5"),
        node("host-bits", Some("10.42.5.7/24"), "10.250.0.6"),
    ];
    assert_eq!(
        host_gw::wanted_routes(&host_gw::peers(&nodes, "a"), &local),
        BTreeMap::from([
            (net("10.42.1.0/24"), Route::via(ip("10.250.0.3"))),
            (net("10.42.5.0/24"), Route::via(ip("10.250.0.6"))),
        ])
    );
}

#[tokio::test]
async fn a_sync_adds_a_marked_route_per_other_node() {
    let (runner, mut network) = host();
    let nodes = [
        node("a", Some("10.42.0.0/24"), "10.250.0.2"),
        node("b", Some("10.42.1.0/24"), "10.250.0.3"),
    ];
    let changes = network.sync(&nodes).await.unwrap();
    assert_eq!(
        changes.replaced,
        [(net("10.42.1.0/24"), Route::via(ip("10.250.0.3")))]
    );
    assert_eq!(
        runner.take_lines(),
        [
            ADDRS,
            OURS,
            ALL,
            "ip route replace 10.42.1.0/24 via 10.250.0.3 proto 83"
        ]
    );
}

#[tokio::test]
async fn stale_and_moved_routes_are_fixed_and_foreign_ones_never_touched() {
    let (runner, mut network) = host();
    runner.answer(
        OURS,
        r#"[{"dst":"10.42.1.0/24","gateway":"10.250.0.3","dev":"eth0"},
            {"dst":"10.42.2.0/24","gateway":"10.250.0.4","dev":"eth0"},
            {"dst":"10.42.9.0/24","gateway":"10.250.0.9","dev":"eth0"},
            {"dst":"10.42.8.0/24","gateway":"10.42.8.0","dev":"flannel.1","flags":["onlink"]}]"#,
    );
    runner.answer(
        ALL,
        r#"[{"dst":"default","gateway":"10.250.0.1"},
            {"dst":"10.250.0.0/24","dev":"eth0"},
            {"dst":"10.42.0.0/24","dev":"cni0"},
            {"dst":"10.42.1.0/24","gateway":"10.250.0.3"},
            {"dst":"10.42.2.0/24","gateway":"10.250.0.4"},
            {"dst":"10.42.3.0/24","gateway":"10.250.0.77"},
            {"dst":"10.42.9.0/24","gateway":"10.250.0.9"},
            {"dst":"10.42.8.0/24","gateway":"10.42.8.0","dev":"flannel.1","flags":["onlink"]}]"#,
    );
    let nodes = [
        node("a", Some("10.42.0.0/24"), "10.250.0.2"),
        // unchanged
        node("b", Some("10.42.1.0/24"), "10.250.0.3"),
        // its node has a new address
        node("c", Some("10.42.2.0/24"), "10.250.0.5"),
        // someone else's route already covers it
        node("d", Some("10.42.3.0/24"), "10.250.0.6"),
        // routed through the VXLAN device before a restart with host-gw
        node("e", Some("10.42.8.0/24"), "10.250.0.8"),
    ];
    let changes = network.sync(&nodes).await.unwrap();
    assert_eq!(
        changes,
        RouteChanges {
            replaced: vec![
                (net("10.42.2.0/24"), Route::via(ip("10.250.0.5"))),
                (net("10.42.8.0/24"), Route::via(ip("10.250.0.8"))),
            ],
            deleted: vec![net("10.42.9.0/24")],
            conflicting: vec![net("10.42.3.0/24")],
        }
    );
    assert_eq!(
        runner.take_lines()[3..],
        [
            "ip route del 10.42.9.0/24 proto 83",
            "ip route replace 10.42.2.0/24 via 10.250.0.5 proto 83",
            "ip route replace 10.42.8.0/24 via 10.250.0.8 proto 83",
        ]
    );
}

#[tokio::test]
async fn a_deleted_node_loses_its_route_and_unchanged_nodes_cost_nothing() {
    let (runner, mut network) = host();
    let b = node("b", Some("10.42.1.0/24"), "10.250.0.3");
    network.sync([&b]).await.unwrap();
    runner.take_lines();

    network.sync([&b]).await.unwrap();
    assert!(runner.take_lines().is_empty());

    runner.answer(OURS, r#"[{"dst":"10.42.1.0/24","gateway":"10.250.0.3"}]"#);
    runner.answer(ALL, r#"[{"dst":"10.42.1.0/24","gateway":"10.250.0.3"}]"#);
    let changes = network.sync([]).await.unwrap();
    assert_eq!(changes.deleted, [net("10.42.1.0/24")]);
    assert_eq!(
        runner.take_lines()[3..],
        ["ip route del 10.42.1.0/24 proto 83"]
    );
}

#[tokio::test]
async fn a_failed_route_change_is_retried_on_the_next_sync() {
    let (runner, mut network) = host();
    let add = "ip route replace 10.42.1.0/24 via 10.250.0.3 proto 83";
    runner.failing.lock().insert(add.into());
    let b = node("b", Some("10.42.1.0/24"), "10.250.0.3");
    assert!(network.sync([&b]).await.is_err());
    runner.failing.lock().clear();
    runner.take_lines();
    network.sync([&b]).await.unwrap();
    assert_eq!(runner.take_lines().last().map(String::as_str), Some(add));
}

#[tokio::test]
async fn masquerading_rewrites_its_own_chain_and_adds_the_jump_once() {
    let (runner, network) = host();
    let check = "iptables -w -t nat -C POSTROUTING -m comment --comment skiff: pod network masquerade -j SKIFF-POSTROUTING";
    runner.failing.lock().insert(check.into());
    network.ensure_masquerade().await.unwrap();
    let commands = runner.commands.lock().clone();
    assert_eq!(commands[0].line(), "iptables-restore -w --noflush");
    let rules = commands[0].stdin.clone().unwrap();
    assert!(
        rules.starts_with("*nat\n:SKIFF-POSTROUTING - [0:0]\n"),
        "{rules}"
    );
    assert!(rules.contains(
        "-A SKIFF-POSTROUTING -s 10.42.0.0/16 -d 10.42.0.0/16 -m comment --comment \"skiff: pod to pod, kept\" -j RETURN\n"
    ));
    assert!(rules.contains(
        "-A SKIFF-POSTROUTING -s 10.42.0.0/16 ! -d 224.0.0.0/4 -m comment --comment \"skiff: pods leaving the cluster CIDR\" -j MASQUERADE --random-fully\n"
    ));
    assert!(rules.ends_with("COMMIT\n"));
    assert_eq!(
        runner.take_lines()[1..],
        [check.to_string(), check.replace(" -C ", " -A ")]
    );

    // the jump is there now: only the chain is rewritten
    runner.failing.lock().clear();
    network.ensure_masquerade().await.unwrap();
    assert_eq!(
        runner.take_lines(),
        ["iptables-restore -w --noflush", check]
    );
}

#[test]
fn a_malformed_cluster_cidr_is_refused() {
    let runner = Arc::new(RecordingRunner::default());
    assert!(matches!(
        PodNetwork::new(runner, "a", "10.42.0.0", host_gw_backend()),
        Err(Error::ClusterCidr(_))
    ));
}

#[test]
fn host_gw_publishes_its_type_without_backend_data_and_keeps_the_default_mtu() {
    let (_, network) = host();
    assert_eq!(
        network.node_annotations(),
        BTreeMap::from([
            (ANN_BACKEND_DATA.to_string(), "null".to_string()),
            (ANN_BACKEND_TYPE.into(), "host-gw".into()),
            (ANN_KUBE_SUBNET_MANAGER.into(), "true".into()),
            (ANN_PUBLIC_IP.into(), "10.250.0.2".into()),
        ])
    );
    assert_eq!(network.pod_mtu(), None);
}
