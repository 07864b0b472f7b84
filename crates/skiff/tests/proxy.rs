//! `skiff proxy` as a separate process against a real `skiff apiserver`, as upstream's
//! `system:kube-proxy`: Services and EndpointSlices created through the API show up as rules
//! (read back with `iptables -S` and `nft list table`) in a network namespace the test creates
//! (`--netns`: the process stays on the host's network, so it reaches the loopback API server),
//! follow endpoint changes (churn included), ignore what has no rules (a port no slice names),
//! and go with the Service. Needs root, `ip`, iptables and nft; skips with a message otherwise.

mod support;

use skiff_proxy::runner::{OwnedNetns, Runner};
use std::io::{Read, Write};
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{Process, identity};
use support::{ApiServer, Backend, eventually, kube_client, run};

/// A command's output inside the namespace (empty when it fails).
fn output(netns: &OwnedNetns, args: &[&str]) -> String {
    netns
        .runner()
        .run(args[0], &args[1..], None)
        .unwrap_or_default()
}

fn unsupported() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    ["ip", "iptables-restore", "nft"]
        .into_iter()
        .find_map(|tool| {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            (!found).then(|| format!("{tool} is not installed"))
        })
}

fn slice(ips: &[&str]) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "web-a", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": ips.iter().map(|ip| json!({
            "addresses": [ip],
            "conditions": {"ready": true},
            "nodeName": "proxy-node",
        })).collect::<Vec<_>>(),
    }))
    .expect("a slice")
}

/// `GET http://ADDR/PATH` on the proxy's plain-HTTP metrics port.
fn http_get(addr: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics port");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

/// Drives one mode: `list` prints the rules in the namespace, `rejects` finds the rule that
/// rejects traffic to a ClusterIP in them.
fn services_become_rules(
    mode: &str,
    list: fn(&OwnedNetns) -> String,
    rejects: fn(&str, &str) -> bool,
) {
    if let Some(why) = unsupported() {
        support::skip(&format!(
            "the proxy e2e test needs root, ip, iptables and nft ({why})"
        ));
        return;
    }
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let netns = OwnedNetns::create("skiff-proxye2e").expect("ip netns add");
        let kubeconfig = identity(&api, "system:kube-proxy", None);
        let proxy = Process::start_as(
            &api,
            &kubeconfig,
            "proxy",
            &[
                "proxy",
                "--node-name",
                "proxy-node",
                "--mode",
                mode,
                "--netns",
                netns.name(),
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--healthz-bind-address",
                "127.0.0.1:0",
                "--min-sync-period",
                "100ms",
            ],
        );
        let metrics_addr = proxy.address_after("metrics http://");
        let healthz_addr = proxy.address_after("healthz http://");

        let client = kube_client(&api).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
        let web: Service = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        }))
        .unwrap();
        let web = services.create(&PostParams::default(), &web).await.unwrap();
        let cluster_ip = web.spec.unwrap().cluster_ip.unwrap();
        // no endpoints yet: rejected
        eventually("the reject rule", || async {
            let rules = list(&netns);
            rejects(&rules, &cluster_ip).then_some(())
        })
        .await;

        slices
            .create(&PostParams::default(), &slice(&["10.42.0.2", "10.42.0.3"]))
            .await
            .unwrap();
        eventually("both endpoints", || async {
            let rules = list(&netns);
            (rules.contains("10.42.0.2:8080") && rules.contains("10.42.0.3:8080")).then_some(())
        })
        .await;

        let one = serde_json::to_value(slice(&["10.42.0.3"])).unwrap();
        slices
            .patch("web-a", &PatchParams::default(), &Patch::Merge(one))
            .await
            .unwrap();
        eventually("the removed endpoint gone", || async {
            let rules = list(&netns);
            (!rules.contains("10.42.0.2:8080") && rules.contains("10.42.0.3:8080")).then_some(())
        })
        .await;

        // bad input: a Service with an empty selector and a port no slice names, and its slice
        // for a port name it does not have; then web's slice churns
        let odd: Service = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "odd"},
            "spec": {"selector": {}, "ports": [{"name": "nope", "port": 81, "protocol": "UDP"}]},
        }))
        .unwrap();
        let odd = services.create(&PostParams::default(), &odd).await.unwrap();
        let odd_ip = odd.spec.unwrap().cluster_ip.unwrap();
        let mut stray = slice(&["10.42.0.9"]);
        stray.metadata.name = Some("odd-a".into());
        stray.metadata.labels = Some([("kubernetes.io/service-name".into(), "odd".into())].into());
        slices.create(&PostParams::default(), &stray).await.unwrap();
        for i in 0..10 {
            let churned = serde_json::to_value(slice(&[&format!("10.42.1.{i}")])).unwrap();
            slices
                .patch("web-a", &PatchParams::default(), &Patch::Merge(churned))
                .await
                .unwrap();
        }
        eventually(
            "the last churned endpoint only, and odd rejected",
            || async {
                let rules = list(&netns);
                let web = rules.contains("10.42.1.9:8080") && !rules.contains("10.42.1.8:8080");
                (web && rules.contains(&odd_ip) && !rules.contains("10.42.0.9")).then_some(())
            },
        )
        .await;

        services
            .delete("web", &DeleteParams::default())
            .await
            .unwrap();
        eventually("the Service's rules gone", || async {
            let rules = list(&netns);
            (!rules.contains(&cluster_ip) && !rules.contains("10.42.1.9")).then_some(())
        })
        .await;

        let metrics = http_get(&metrics_addr, "/metrics");
        assert!(
            metrics.contains("kubeproxy_sync_proxy_rules_duration_seconds_count"),
            "{metrics}"
        );
        assert!(metrics.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds"));
        assert!(http_get(&metrics_addr, "/healthz").ends_with("ok"));

        // the proxy's own health: synced and its node eligible, until the autoscaler taints it
        let healthz = http_get(&healthz_addr, "/healthz");
        assert!(healthz.starts_with("HTTP/1.1 200 OK\r\n"), "{healthz}");
        assert!(healthz.ends_with(", \"nodeEligible\": true}"), "{healthz}");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "proxy-node"},
            "spec": {"taints": [{"key": "ToBeDeletedByClusterAutoscaler",
                                 "value": "1700000000", "effect": "NoSchedule"}]},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        eventually("healthz failing for a node about to go", || async {
            let healthz = http_get(&healthz_addr, "/healthz");
            (healthz.starts_with("HTTP/1.1 503 ") && healthz.ends_with("\"nodeEligible\": false}"))
                .then_some(())
        })
        .await;
        let livez = http_get(&healthz_addr, "/livez");
        assert!(livez.starts_with("HTTP/1.1 200 OK\r\n"), "{livez}");
        drop(proxy);
    });
}

#[test]
fn iptables_mode_follows_services_and_endpoint_slices() {
    services_become_rules(
        "iptables",
        |netns| {
            let nat = output(netns, &["iptables", "-w", "-t", "nat", "-S"]);
            let filter = output(netns, &["iptables", "-w", "-t", "filter", "-S"]);
            format!("{nat}{filter}")
        },
        |rules, ip| {
            rules
                .lines()
                .any(|l| l.contains(&format!("-d {ip}/32")) && l.contains("-j REJECT"))
        },
    );
}

#[test]
fn nftables_mode_follows_services_and_endpoint_slices() {
    services_become_rules(
        "nftables",
        |netns| output(netns, &["nft", "list", "table", "ip", "skiff"]),
        |rules, ip| rules.contains(&format!("{ip} . tcp . 80 : goto reject-chain")),
    );
}
