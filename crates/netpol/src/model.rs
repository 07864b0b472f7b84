//! NetworkPolicies, Pods and Namespaces as the enforcement needs them: [`Policy`] is a policy
//! with its selectors parsed, its `ipBlock`s turned into address ranges and its ports into
//! [`PortMatch`]es; [`PodInfo`] is what of a pod matters (IP, labels, namespace, whether it runs
//! on this node, its named container ports). Upstream's semantics live here: which pods a policy
//! selects (this node's pods in its namespace), which pods a peer matches (`podSelector`,
//! `namespaceSelector`, both in one peer), default policy types, named ports.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use skiff_apimachinery::labels::Selector;

/// `namespace/name` of a pod or policy.
pub type Key = String;

/// Labels of an object.
pub type Labels = BTreeMap<String, String>;

pub use skiff_component_helpers::ports::Protocol;

/// A named container port of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// What of a pod the enforcement uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    pub namespace: String,
    pub ip: Ipv4Addr,
    pub labels: Labels,
    /// The pod runs on this node: policies selecting it are enforced here.
    pub local: bool,
    pub ports: Vec<NamedPort>,
}

impl PodInfo {
    /// The pod as policies see it, or `None` when no policy applies to or matches it: no IPv4
    /// address yet, the host's network (upstream leaves those undefined; kube-router skips
    /// them too), or finished (`Succeeded`/`Failed`: its IP may already be another pod's).
    pub fn from_pod(pod: &Pod, node: &str) -> Option<PodInfo> {
        let spec = pod.spec.as_ref()?;
        let status = pod.status.as_ref()?;
        if spec.host_network == Some(true)
            || matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        {
            return None;
        }
        let ip: Ipv4Addr = status.pod_ip.as_deref()?.parse().ok()?;
        let ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone()?,
                    protocol: Protocol::parse(p.protocol.as_deref())?,
                    port: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        Some(PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            ip,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            local: spec.node_name.as_deref() == Some(node),
            ports,
        })
    }
}

/// Which namespaces a pod peer's pods may be in.
#[derive(Debug, Clone)]
pub enum Namespaces {
    /// The policy's own (a peer without `namespaceSelector`).
    Own(String),
    /// Those whose labels the `namespaceSelector` matches (`{}`: all).
    Matching(Selector),
}

/// A peer that matches pods: `podSelector`, `namespaceSelector`, or both (an absent
/// `podSelector` next to a `namespaceSelector` matches every pod there).
#[derive(Debug, Clone)]
pub struct PodPeer {
    pub namespaces: Namespaces,
    pub pods: Selector,
}

impl PodPeer {
    /// Whether the pod, in a namespace labelled `namespace_labels`, is this peer.
    pub fn matches(&self, pod: &PodInfo, namespace_labels: &Labels) -> bool {
        let namespace = match &self.namespaces {
            Namespaces::Own(ns) => *ns == pod.namespace,
            Namespaces::Matching(selector) => selector.matches(namespace_labels),
        };
        namespace && self.pods.matches(&pod.labels)
    }
}

/// One entry of a rule's `ports`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortMatch {
    /// Every port of the protocol (no `port`).
    Any(Protocol),
    /// `port`, or `port`..=`endPort`.
    Range(Protocol, u16, u16),
    /// A named port, resolved on the destination pod's container ports.
    Named(Protocol, String),
}

/// An inclusive range of IPv4 addresses, as `u32`s.
pub type Range = (u32, u32);

/// One ingress or egress rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// No `from`/`to` (or an empty one): every peer.
    pub any_peer: bool,
    pub pod_peers: Vec<PodPeer>,
    /// The `ipBlock` peers minus their `except`s, merged and sorted.
    pub blocks: Vec<Range>,
    /// Empty: every port.
    pub ports: Vec<PortMatch>,
}

impl Rule {
    /// Named ports the rule lets through.
    pub fn named_ports(&self) -> impl Iterator<Item = (Protocol, &str)> {
        self.ports.iter().filter_map(|p| match p {
            PortMatch::Named(protocol, name) => Some((*protocol, name.as_str())),
            _ => None,
        })
    }
}

/// Traffic to (ingress) or from (egress) the selected pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    pub const BOTH: [Direction; 2] = [Direction::Ingress, Direction::Egress];

    /// The short name in set names (`in`, `out`).
    pub fn short(self) -> &'static str {
        match self {
            Direction::Ingress => "in",
            Direction::Egress => "out",
        }
    }
}

/// A NetworkPolicy ready to be matched.
#[derive(Debug, Clone)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub pod_selector: Selector,
    /// `Some` when the policy's types include Ingress: the selected pods are isolated for
    /// ingress and these rules allow (none: nothing is allowed).
    pub ingress: Option<Vec<Rule>>,
    /// As `ingress`, for Egress.
    pub egress: Option<Vec<Rule>>,
}

impl Policy {
    /// Compiles `policy`; `None` for one without a spec. Parts the API server's validation
    /// refuses (a malformed selector or CIDR, an unknown protocol) match nothing here.
    pub fn from_policy(policy: &NetworkPolicy) -> Option<Policy> {
        let spec = policy.spec.as_ref()?;
        let namespace = policy.metadata.namespace.clone().unwrap_or_default();
        let types: Vec<&str> = match &spec.policy_types {
            Some(types) if !types.is_empty() => types.iter().map(String::as_str).collect(),
            // upstream's defaulting, for policies stored before it ran
            _ => {
                let mut types = vec!["Ingress"];
                if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
                    types.push("Egress");
                }
                types
            }
        };
        let ingress = types.contains(&"Ingress").then(|| {
            spec.ingress
                .iter()
                .flatten()
                .map(|r| compile_rule(r.from.as_deref(), r.ports.as_deref(), &namespace))
                .collect()
        });
        let egress = types.contains(&"Egress").then(|| {
            spec.egress
                .iter()
                .flatten()
                .map(|r| compile_rule(r.to.as_deref(), r.ports.as_deref(), &namespace))
                .collect()
        });
        Some(Policy {
            pod_selector: selector(spec.pod_selector.as_ref()),
            namespace,
            name: policy.metadata.name.clone().unwrap_or_default(),
            ingress,
            egress,
        })
    }

    /// `namespace/name`.
    pub fn key(&self) -> Key {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The rules of one direction, `None` when the policy does not isolate for it.
    pub fn rules(&self, direction: Direction) -> Option<&[Rule]> {
        match direction {
            Direction::Ingress => self.ingress.as_deref(),
            Direction::Egress => self.egress.as_deref(),
        }
    }

    /// Whether the policy applies to the pod: a pod of this node in the policy's namespace
    /// that its `podSelector` matches.
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.local && pod.namespace == self.namespace && self.pod_selector.matches(&pod.labels)
    }
}

/// A label selector; `None` (absent) matches everything, as an absent `podSelector` in a peer
/// with a `namespaceSelector` does. A malformed one matches nothing.
fn selector(selector: Option<&LabelSelector>) -> Selector {
    let Some(selector) = selector else {
        return Selector::everything();
    };
    serde_json::to_value(selector)
        .ok()
        .and_then(|v| Selector::from_label_selector(&v).ok())
        .unwrap_or_else(Selector::nothing)
}

fn compile_rule(
    peers: Option<&[NetworkPolicyPeer]>,
    ports: Option<&[NetworkPolicyPort]>,
    namespace: &str,
) -> Rule {
    let peers = peers.unwrap_or_default();
    let mut pod_peers = Vec::new();
    let mut blocks = Vec::new();
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            blocks.extend(ip_block(
                &block.cidr,
                block.except.as_deref().unwrap_or_default(),
            ));
            continue;
        }
        let namespaces = match &peer.namespace_selector {
            Some(ns) => Namespaces::Matching(selector(Some(ns))),
            None if peer.pod_selector.is_some() => Namespaces::Own(namespace.to_string()),
            // a peer with none of its fields: refused by validation; matches nothing
            None => continue,
        };
        pod_peers.push(PodPeer {
            namespaces,
            pods: selector(peer.pod_selector.as_ref()),
        });
    }
    let ports = ports
        .unwrap_or_default()
        .iter()
        .filter_map(port_match)
        .collect();
    Rule {
        any_peer: peers.is_empty(),
        pod_peers,
        blocks: merge(blocks),
        ports,
    }
}

fn port_match(port: &NetworkPolicyPort) -> Option<PortMatch> {
    let protocol = Protocol::parse(port.protocol.as_deref())?;
    Some(match &port.port {
        None => PortMatch::Any(protocol),
        Some(IntOrString::String(name)) => PortMatch::Named(protocol, name.clone()),
        Some(IntOrString::Int(start)) => {
            let start = u16::try_from(*start).ok()?;
            let end = port
                .end_port
                .and_then(|e| u16::try_from(e).ok())
                .unwrap_or(start)
                .max(start);
            PortMatch::Range(protocol, start, end)
        }
    })
}

/// `a.b.c.d/n` as a range; `None` for anything else (IPv6 blocks among them: Skiff's pod
/// network is IPv4 only).
pub fn cidr_range(cidr: &str) -> Option<Range> {
    let (ip, bits) = cidr.split_once('/')?;
    let ip: Ipv4Addr = ip.parse().ok()?;
    let bits: u32 = bits.parse().ok().filter(|b| *b <= 32)?;
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    let start = u32::from(ip) & mask;
    Some((start, start | !mask))
}

/// An `ipBlock`: its CIDR minus its `except`s, as ranges.
fn ip_block(cidr: &str, except: &[String]) -> Vec<Range> {
    let Some(block) = cidr_range(cidr) else {
        return Vec::new();
    };
    let mut ranges = vec![block];
    for hole in except.iter().filter_map(|e| cidr_range(e)) {
        ranges = ranges
            .into_iter()
            .flat_map(|(start, end)| {
                let mut left = Vec::new();
                if hole.1 < start || hole.0 > end {
                    left.push((start, end));
                } else {
                    if hole.0 > start {
                        left.push((start, hole.0 - 1));
                    }
                    if hole.1 < end {
                        left.push((hole.1 + 1, end));
                    }
                }
                left
            })
            .collect();
    }
    ranges
}

/// Sorted ranges with overlapping and adjacent ones joined (nftables refuses overlapping
/// interval elements).
fn merge(mut ranges: Vec<Range>) -> Vec<Range> {
    ranges.sort_unstable();
    let mut merged: Vec<Range> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if u64::from(start) <= u64::from(last.1) + 1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(spec: serde_json::Value) -> Policy {
        let policy: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "app"},
            "spec": spec,
        }))
        .unwrap();
        Policy::from_policy(&policy).unwrap()
    }

    fn pod(namespace: &str, labels: &[(&str, &str)], local: bool) -> PodInfo {
        PodInfo {
            namespace: namespace.into(),
            ip: Ipv4Addr::new(10, 42, 0, 2),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            local,
            ports: Vec::new(),
        }
    }

    fn range(a: &str, b: &str) -> Range {
        (
            u32::from(a.parse::<Ipv4Addr>().unwrap()),
            u32::from(b.parse::<Ipv4Addr>().unwrap()),
        )
    }

    #[test]
    fn policy_types_default_to_ingress_plus_egress_when_egress_rules_exist() {
        let ingress_only = policy(json!({"podSelector": {}}));
        assert!(ingress_only.ingress.as_ref().unwrap().is_empty());
        assert!(ingress_only.egress.is_none());
        let both = policy(json!({"podSelector": {}, "egress": [{}]}));
        assert!(both.ingress.is_some() && both.egress.is_some());
        let egress_only = policy(json!({"podSelector": {}, "policyTypes": ["Egress"]}));
        assert!(egress_only.ingress.is_none() && egress_only.egress.unwrap().is_empty());
    }

    #[test]
    fn a_policy_selects_only_this_nodes_pods_in_its_namespace() {
        let p = policy(json!({"podSelector": {"matchLabels": {"app": "web"}}}));
        assert!(p.selects(&pod("app", &[("app", "web")], true)));
        assert!(!p.selects(&pod("app", &[("app", "web")], false)));
        assert!(!p.selects(&pod("other", &[("app", "web")], true)));
        assert!(!p.selects(&pod("app", &[("app", "db")], true)));
    }

    #[test]
    fn peers_match_by_pod_selector_namespace_selector_or_both() {
        let p = policy(json!({"podSelector": {}, "ingress": [{"from": [
            {"podSelector": {"matchLabels": {"role": "client"}}},
            {"namespaceSelector": {"matchLabels": {"team": "a"}}},
            {"namespaceSelector": {"matchLabels": {"team": "b"}},
             "podSelector": {"matchLabels": {"role": "client"}}},
        ]}]}));
        let peers = &p.ingress.as_ref().unwrap()[0].pod_peers;
        let team = |t: &str| Labels::from([("team".to_string(), t.to_string())]);
        let client = pod("app", &[("role", "client")], false);
        let other_client = pod("other", &[("role", "client")], false);
        let stranger = pod("other", &[("role", "x")], false);
        // podSelector alone: the policy's namespace only
        assert!(peers[0].matches(&client, &Labels::new()));
        assert!(!peers[0].matches(&other_client, &Labels::new()));
        // namespaceSelector alone: every pod there
        assert!(peers[1].matches(&stranger, &team("a")));
        assert!(!peers[1].matches(&stranger, &team("b")));
        // both in one peer: both must match
        assert!(peers[2].matches(&other_client, &team("b")));
        assert!(!peers[2].matches(&stranger, &team("b")));
        assert!(!peers[2].matches(&other_client, &team("a")));
    }

    #[test]
    fn an_empty_from_allows_every_peer_and_ip_blocks_lose_their_excepts() {
        let p = policy(json!({"podSelector": {}, "ingress": [
            {},
            {"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "10.255.255.0/24"]}},
                      {"ipBlock": {"cidr": "192.168.1.7/32"}}]},
        ]}));
        let rules = p.ingress.unwrap();
        assert!(rules[0].any_peer);
        assert!(!rules[1].any_peer);
        assert_eq!(
            rules[1].blocks,
            vec![
                range("10.0.0.0", "10.0.255.255"),
                range("10.2.0.0", "10.255.254.255"),
                range("192.168.1.7", "192.168.1.7"),
            ]
        );
    }

    #[test]
    fn overlapping_and_adjacent_blocks_are_merged() {
        assert_eq!(
            merge(vec![
                range("10.0.1.0", "10.0.1.255"),
                range("10.0.0.0", "10.0.0.255"),
                range("10.0.0.128", "10.0.0.200"),
                range("10.0.3.0", "10.0.3.0"),
            ]),
            vec![
                range("10.0.0.0", "10.0.1.255"),
                range("10.0.3.0", "10.0.3.0")
            ]
        );
        assert_eq!(cidr_range("0.0.0.0/0"), Some((0, u32::MAX)));
        assert_eq!(cidr_range("fd00::/8"), None);
    }

    #[test]
    fn ports_take_protocols_ranges_and_names() {
        let p = policy(json!({"podSelector": {}, "ingress": [{"ports": [
            {"port": 80},
            {"protocol": "UDP", "port": 5000, "endPort": 5010},
            {"port": "http"},
            {"protocol": "SCTP"},
        ]}]}));
        assert_eq!(
            p.ingress.unwrap()[0].ports,
            vec![
                PortMatch::Range(Protocol::Tcp, 80, 80),
                PortMatch::Range(Protocol::Udp, 5000, 5010),
                PortMatch::Named(Protocol::Tcp, "http".into()),
                PortMatch::Any(Protocol::Sctp),
            ]
        );
    }

    #[test]
    fn host_network_finished_and_address_less_pods_are_left_out() {
        let base = json!({
            "metadata": {"name": "a", "namespace": "app", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [
                {"name": "http", "containerPort": 8080},
                {"containerPort": 9090},
            ]}]},
            "status": {"phase": "Running", "podIP": "10.42.0.9"},
        });
        let parse = |v: &serde_json::Value| {
            PodInfo::from_pod(&serde_json::from_value(v.clone()).unwrap(), "n1")
        };
        let info = parse(&base).unwrap();
        assert!(info.local);
        assert_eq!(
            info.ports,
            vec![NamedPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080
            }]
        );
        let mut host = base.clone();
        host["spec"]["hostNetwork"] = json!(true);
        assert!(parse(&host).is_none());
        let mut done = base.clone();
        done["status"]["phase"] = json!("Succeeded");
        assert!(parse(&done).is_none());
        let mut pending = base.clone();
        pending["status"] = json!({"phase": "Pending"});
        assert!(parse(&pending).is_none());
    }
}
