//! The `inet skiff-netpol` table as text for `nft -f`: names of the sets, each policy's
//! [`Fragment`] (its set declarations and its rules in the `ingress` and `egress` chains), the
//! whole table (one transaction that replaces it), and element updates.
//!
//! Layout. The base chains hook `forward` (pod to pod, bridged pods included: br_netfilter
//! passes bridged IPv4 through it) and `input` (pod to this node). Replies to allowed
//! connections pass (`ct state established,related`); packets to a pod in `ingress-isolated`
//! (this node's pods some policy selects for Ingress) go through `ingress`, packets from a pod
//! in `egress-isolated` through `egress`. Each of those holds, per policy rule, lines that
//! `return` (allowed: on to the other direction's check) when the pod is in the policy's
//! `p-<id>-pods` set, the peer in the rule's `-peers` set (pods) or `-cidrs` set (ipBlocks),
//! and the port matches (numbers and ranges in the rule, named ports through the rule's
//! `-named` set of `pod IP . protocol . port`); what no line allows is rejected, as
//! kube-router rejects it. Traffic from the node itself to its pods (kubelet probes) never
//! passes `forward`, so it is always allowed. Which pods are in which set changes with pod and
//! namespace labels; the rules change only with policies, so a label change is an element
//! update.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use data_encoding::BASE32_NOPAD;
use ring::digest::{SHA256, digest};

use crate::model::{Direction, Policy, PortMatch, Range};

/// The table, of the `inet` family so one table sees everything the hooks see.
pub const TABLE: &str = "inet skiff-netpol";

/// This node's pods isolated for a direction.
pub fn isolated_set(direction: Direction) -> &'static str {
    match direction {
        Direction::Ingress => "ingress-isolated",
        Direction::Egress => "egress-isolated",
    }
}

/// A policy's short, stable id in set names: 12 characters of the base32 of the SHA-256 of
/// `namespace/name` (as upstream's proxier names chains after a hash).
pub fn policy_id(key: &str) -> String {
    BASE32_NOPAD.encode(digest(&SHA256, key.as_bytes()).as_ref())[..12].to_ascii_lowercase()
}

/// The pods a policy selects.
pub fn targets_set(id: &str) -> String {
    format!("p-{id}-pods")
}

/// The pods the pod peers of rule `index` match.
pub fn peers_set(id: &str, direction: Direction, index: usize) -> String {
    format!("p-{id}-{}{index}-peers", direction.short())
}

/// The address ranges of rule `index`'s ipBlocks.
pub fn cidrs_set(id: &str, direction: Direction, index: usize) -> String {
    format!("p-{id}-{}{index}-cidrs", direction.short())
}

/// `pod IP . protocol . port` of rule `index`'s named ports on the destination pods.
pub fn named_set(id: &str, direction: Direction, index: usize) -> String {
    format!("p-{id}-{}{index}-named", direction.short())
}

/// A policy's part of the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fragment {
    /// Set declarations (`set NAME { … }` lines).
    pub sets: Vec<String>,
    /// Lines of the `ingress` chain.
    pub ingress: Vec<String>,
    /// Lines of the `egress` chain.
    pub egress: Vec<String>,
}

impl Fragment {
    /// The fragment of `policy`, whose id is `id`.
    pub fn of(policy: &Policy, id: &str) -> Fragment {
        let mut fragment = Fragment::default();
        let targets = targets_set(id);
        fragment
            .sets
            .push(format!("set {targets} {{ type ipv4_addr; }}"));
        for direction in Direction::BOTH {
            let Some(rules) = policy.rules(direction) else {
                continue;
            };
            // the selected pod is the destination of ingress, the source of egress
            let (own, peer) = match direction {
                Direction::Ingress => ("daddr", "saddr"),
                Direction::Egress => ("saddr", "daddr"),
            };
            let mut lines = Vec::new();
            for (index, rule) in rules.iter().enumerate() {
                let mut sources = Vec::new();
                if rule.any_peer {
                    sources.push(String::new());
                }
                if !rule.pod_peers.is_empty() {
                    let set = peers_set(id, direction, index);
                    fragment
                        .sets
                        .push(format!("set {set} {{ type ipv4_addr; }}"));
                    sources.push(format!(" ip {peer} @{set}"));
                }
                if !rule.blocks.is_empty() {
                    let set = cidrs_set(id, direction, index);
                    fragment.sets.push(format!(
                        "set {set} {{ type ipv4_addr; flags interval; elements = {{ {} }}; }}",
                        ranges(&rule.blocks)
                    ));
                    sources.push(format!(" ip {peer} @{set}"));
                }
                let mut ports = BTreeSet::new();
                for port in &rule.ports {
                    ports.insert(match port {
                        PortMatch::Any(protocol) => format!(" meta l4proto {}", protocol.as_str()),
                        PortMatch::Range(protocol, start, end) if start == end => {
                            format!(" meta l4proto {} th dport {start}", protocol.as_str())
                        }
                        PortMatch::Range(protocol, start, end) => {
                            format!(" meta l4proto {} th dport {start}-{end}", protocol.as_str())
                        }
                        PortMatch::Named(..) => {
                            let set = named_set(id, direction, index);
                            format!(" ip daddr . meta l4proto . th dport @{set}")
                        }
                    });
                }
                if rule.named_ports().next().is_some() {
                    fragment.sets.push(format!(
                        "set {} {{ type ipv4_addr . inet_proto . inet_service; }}",
                        named_set(id, direction, index)
                    ));
                }
                if ports.is_empty() {
                    ports.insert(String::new());
                }
                for source in &sources {
                    for port in &ports {
                        lines.push(format!("ip {own} @{targets}{source}{port} return"));
                    }
                }
            }
            match direction {
                Direction::Ingress => fragment.ingress = lines,
                Direction::Egress => fragment.egress = lines,
            }
        }
        fragment
    }
}

/// Ranges as interval elements (`a.b.c.d`, `a.b.c.d-e.f.g.h`).
fn ranges(ranges: &[Range]) -> String {
    ranges
        .iter()
        .map(|&(start, end)| {
            let (start, end) = (Ipv4Addr::from(start), Ipv4Addr::from(end));
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The whole table, replacing what there is in one transaction: the fragments' sets and rules,
/// then every set's elements.
pub fn full<'a>(
    fragments: impl Iterator<Item = &'a Fragment> + Clone,
    elements: &BTreeMap<String, BTreeMap<String, u32>>,
) -> String {
    let mut out = String::new();
    // `add table` makes sure the delete has something to delete
    let _ = writeln!(
        out,
        "add table {TABLE}\ndelete table {TABLE}\ntable {TABLE} {{"
    );
    for direction in Direction::BOTH {
        let _ = writeln!(
            out,
            "\tset {} {{ type ipv4_addr; }}",
            isolated_set(direction)
        );
    }
    for fragment in fragments.clone() {
        for set in &fragment.sets {
            let _ = writeln!(out, "\t{set}");
        }
    }
    let _ = writeln!(
        out,
        "\tchain forward {{\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tct state established,related accept\n\t\tip daddr @{} jump ingress\n\t\tip saddr @{} jump egress\n\t}}",
        isolated_set(Direction::Ingress),
        isolated_set(Direction::Egress)
    );
    let _ = writeln!(
        out,
        "\tchain input {{\n\t\ttype filter hook input priority filter; policy accept;\n\t\tct state established,related accept\n\t\tip saddr @{} jump egress\n\t}}",
        isolated_set(Direction::Egress)
    );
    for direction in Direction::BOTH {
        let name = match direction {
            Direction::Ingress => "ingress",
            Direction::Egress => "egress",
        };
        let _ = writeln!(out, "\tchain {name} {{");
        for fragment in fragments.clone() {
            let lines = match direction {
                Direction::Ingress => &fragment.ingress,
                Direction::Egress => &fragment.egress,
            };
            for line in lines {
                let _ = writeln!(out, "\t\t{line}");
            }
        }
        let _ = writeln!(out, "\t\treject\n\t}}");
    }
    out.push_str("}\n");
    for (set, members) in elements {
        if !members.is_empty() {
            element_line(&mut out, "add", set, members.keys());
        }
    }
    out
}

/// Element changes: `add element`/`delete element` lines, one per set and verb.
pub fn elements(changes: &BTreeMap<String, BTreeMap<String, bool>>) -> String {
    let mut out = String::new();
    for (set, change) in changes {
        let deleted = change.iter().filter(|(_, add)| !**add).map(|(e, _)| e);
        if deleted.clone().next().is_some() {
            element_line(&mut out, "delete", set, deleted);
        }
        let added = change.iter().filter(|(_, add)| **add).map(|(e, _)| e);
        if added.clone().next().is_some() {
            element_line(&mut out, "add", set, added);
        }
    }
    out
}

fn element_line<'a>(
    out: &mut String,
    verb: &str,
    set: &str,
    members: impl Iterator<Item = &'a String>,
) {
    let members: Vec<&str> = members.map(String::as_str).collect();
    let _ = writeln!(
        out,
        "{verb} element {TABLE} {set} {{ {} }}",
        members.join(", ")
    );
}
