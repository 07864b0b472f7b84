//! `skiff bench proxy`'s NetworkPolicy figures: in a private network namespace, feeds
//! `policies` NetworkPolicies over `pods` pods (spread over namespaces, half of them on this
//! node) into the network policy controller's ruleset (the path its informers drive), times the
//! whole table programmed with `nft`, then changes one pod's label `changes` times and times
//! each change from the ruleset update to the applied `nft` transaction.

use std::net::Ipv4Addr;
use std::time::Instant;

use anyhow::{Context as _, Result};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::json;
use skiff_netpol::controller::apply;
use skiff_netpol::model::{NamedPort, PodInfo, Policy, Protocol};
use skiff_netpol::ruleset::Ruleset;
use skiff_runtime::runner::OwnedNetns;

use super::api::{histogram, micros, ms, round3};

const NODE: &str = "bench-node";
/// Pods per namespace, and distinct `app` labels per namespace.
const PODS_PER_NAMESPACE: u32 = 100;
const APPS: u32 = 20;

fn pod(i: u32, app: u32) -> PodInfo {
    PodInfo {
        namespace: format!("ns-{}", i / PODS_PER_NAMESPACE),
        ip: Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 42, 0, 2)) + i),
        labels: [
            ("app".to_string(), format!("app-{app}")),
            (
                "role".to_string(),
                ["client", "server"][(i % 2) as usize].to_string(),
            ),
        ]
        .into(),
        local: i.is_multiple_of(2),
        ports: vec![NamedPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 8080,
        }],
    }
}

/// Policy `i`: in namespace `i / APPS`'s turn, selecting one app; ingress from clients of
/// namespaces labelled with its team on the named port and a range, and every fourth one also
/// isolates egress to its namespace and a CIDR.
fn policy(i: u32, namespaces: u32) -> Policy {
    let namespace = format!("ns-{}", (i / APPS) % namespaces);
    let mut spec = json!({
        "podSelector": {"matchLabels": {"app": format!("app-{}", i % APPS)}},
        "ingress": [{
            "from": [{"namespaceSelector": {"matchLabels": {"team": format!("t{}", i % 5)}},
                      "podSelector": {"matchLabels": {"role": "client"}}}],
            "ports": [{"port": "http"}, {"port": 9000, "endPort": 9100}],
        }],
    });
    if i.is_multiple_of(4) {
        spec["policyTypes"] = json!(["Ingress", "Egress"]);
        spec["egress"] = json!([{"to": [{"podSelector": {}},
                                         {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.42.0.0/16"]}}]}]);
    }
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": format!("policy-{i:04}"), "namespace": namespace},
        "spec": spec,
    }))
    .expect("a NetworkPolicy");
    Policy::from_policy(&policy).expect("a spec")
}

/// One JSON line: the table programmed, and one pod label change applied (p50, p99).
pub fn bench(policies: u32, pods: u32, changes: u32) -> Result<serde_json::Value> {
    let netns = OwnedNetns::create("skiff-benchnetpol")
        .context("creating a network namespace (the benchmark needs root and iproute2)")?;
    let runner = netns.runner();
    let namespaces = pods.div_ceil(PODS_PER_NAMESPACE).max(1);
    let mut ruleset = Ruleset::new(NODE);

    let start = Instant::now();
    for n in 0..namespaces {
        let labels = [("team".to_string(), format!("t{}", n % 5))].into();
        ruleset.namespace_changed(&format!("ns-{n}"), Some(labels));
    }
    for i in 0..pods {
        ruleset.pod_changed(&format!("pod-{i}"), Some(pod(i, i % APPS)));
    }
    for i in 0..policies {
        let policy = policy(i, namespaces);
        ruleset.policy_changed(&policy.key(), Some(policy));
    }
    let update = ruleset.take().context("a first update")?;
    apply(&runner, &update).context("programming the whole table")?;
    let programmed = start.elapsed();

    let mut latencies = histogram();
    for change in 0..changes {
        // a different local pod each time moves to another app: out of some policies, into others
        let i = ((change * 74 + 10) % pods) & !1;
        let start = Instant::now();
        ruleset.pod_changed(&format!("pod-{i}"), Some(pod(i, (i + change + 1) % APPS)));
        if let Some(update) = ruleset.take() {
            apply(&runner, &update).context("a pod label change")?;
        }
        latencies.record(micros(start.elapsed()))?;
    }
    Ok(json!({
        "bench": "proxy",
        "what": "network-policy",
        "policies": policies,
        "pods": pods,
        "programmed_ms": round3(programmed.as_secs_f64() * 1000.0),
        "pod_label_change_ms_p50": ms(&latencies, 0.5),
        "p99": ms(&latencies, 0.99),
        "changes": changes,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
    }))
}
