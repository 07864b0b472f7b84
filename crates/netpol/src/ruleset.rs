//! The desired `inet skiff-netpol` table, kept up to date change by change: the pods,
//! namespaces and policies seen so far, each policy's [`Fragment`], and every set's elements
//! with how many (policy, pod) pairs put each one there. A pod change re-evaluates that pod
//! against every policy, a namespace label change the pods of that namespace, a policy change
//! that policy against every pod; what moves in or out of a set is recorded as a pending element
//! change, so that [`Ruleset::take`] yields either those element changes or, after a policy
//! changed, the whole table.
//!
//! Invariant: `elements` is the sum of `contributions`; an element is in the pending changes
//! only while its count crossed zero since the last take.

use std::collections::{BTreeMap, HashMap};

use crate::model::{Direction, Key, Labels, PodInfo, Policy};
use crate::nftables::{self, Fragment};

/// A policy with its id and rendered fragment.
#[derive(Debug)]
struct Entry {
    policy: Policy,
    id: String,
    fragment: Fragment,
}

/// What [`Ruleset::take`] asks the dataplane to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// The whole table, replacing the old one (at start, after a policy changed or a failure).
    Full(String),
    /// Element changes only.
    Elements(String),
}

impl Update {
    /// The `nft -f` script.
    pub fn script(&self) -> &str {
        match self {
            Update::Full(s) | Update::Elements(s) => s,
        }
    }
}

#[derive(Debug)]
pub struct Ruleset {
    node: String,
    pods: HashMap<Key, PodInfo>,
    namespaces: HashMap<String, Labels>,
    policies: BTreeMap<Key, Entry>,
    /// set → element → (policy, pod) pairs that put it there.
    elements: BTreeMap<String, BTreeMap<String, u32>>,
    /// policy → pod → the (set, element)s the pair put in.
    contributions: HashMap<Key, HashMap<Key, Vec<(String, String)>>>,
    /// set → element → added (`true`) or deleted since the last take.
    pending: BTreeMap<String, BTreeMap<String, bool>>,
    /// The next take renders the whole table.
    needs_full: bool,
}

impl Ruleset {
    /// An empty ruleset for the node `node` (whose pods it enforces).
    pub fn new(node: &str) -> Ruleset {
        Ruleset {
            node: node.to_string(),
            pods: HashMap::new(),
            namespaces: HashMap::new(),
            policies: BTreeMap::new(),
            elements: BTreeMap::new(),
            contributions: HashMap::new(),
            pending: BTreeMap::new(),
            needs_full: true,
        }
    }

    /// The node whose pods are enforced.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// A pod appeared, changed (`Some`) or went (`None`, or a pod no policy can see).
    pub fn pod_changed(&mut self, key: &str, pod: Option<PodInfo>) {
        if !store(&mut self.pods, key, pod) {
            return;
        }
        let policies: Vec<Key> = self.policies.keys().cloned().collect();
        for policy in &policies {
            self.evaluate(policy, key);
        }
    }

    /// A namespace's labels (`None`: the namespace is gone).
    pub fn namespace_changed(&mut self, name: &str, labels: Option<Labels>) {
        if !store(&mut self.namespaces, name, labels) {
            return;
        }
        let pods: Vec<Key> = self
            .pods
            .iter()
            .filter(|(_, p)| p.namespace == name)
            .map(|(k, _)| k.clone())
            .collect();
        let policies: Vec<Key> = self.policies.keys().cloned().collect();
        for policy in &policies {
            for pod in &pods {
                self.evaluate(policy, pod);
            }
        }
    }

    /// A policy appeared, changed (`Some`) or went (`None`): the next take is a full one.
    pub fn policy_changed(&mut self, key: &str, policy: Option<Policy>) {
        for (_, pairs) in self.contributions.remove(key).unwrap_or_default() {
            for (set, element) in pairs {
                self.remove(&set, &element);
            }
        }
        self.policies.remove(key);
        self.needs_full = true;
        let Some(policy) = policy else {
            return;
        };
        let id = nftables::policy_id(key);
        let fragment = Fragment::of(&policy, &id);
        self.policies.insert(
            key.to_string(),
            Entry {
                policy,
                id,
                fragment,
            },
        );
        let pods: Vec<Key> = self.pods.keys().cloned().collect();
        for pod in &pods {
            self.evaluate(key, pod);
        }
    }

    /// The next thing to apply, if anything changed; the following take renders the whole table
    /// again if this one failed to apply ([`Ruleset::resync`]).
    pub fn take(&mut self) -> Option<Update> {
        if self.needs_full {
            self.needs_full = false;
            self.pending.clear();
            let fragments = self.policies.values().map(|e| &e.fragment);
            return Some(Update::Full(nftables::full(fragments, &self.elements)));
        }
        if self.pending.is_empty() {
            return None;
        }
        let changes = std::mem::take(&mut self.pending);
        Some(Update::Elements(nftables::elements(&changes)))
    }

    /// The next take renders the whole table: the last update did not apply, or the table is
    /// due for its periodic rewrite.
    pub fn resync(&mut self) {
        self.needs_full = true;
    }

    /// How many policies and pods the ruleset holds.
    pub fn counts(&self) -> (usize, usize) {
        (self.policies.len(), self.pods.len())
    }

    /// Re-evaluates the (policy, pod) pair and records what moved in or out of the sets.
    fn evaluate(&mut self, policy_key: &str, pod_key: &str) {
        let now = match (self.policies.get(policy_key), self.pods.get(pod_key)) {
            (Some(entry), Some(pod)) => {
                let empty = Labels::new();
                let labels = self.namespaces.get(&pod.namespace).unwrap_or(&empty);
                contributions(entry, pod, labels)
            }
            _ => Vec::new(),
        };
        let by_pod = self
            .contributions
            .entry(policy_key.to_string())
            .or_default();
        let before = if now.is_empty() {
            by_pod.remove(pod_key).unwrap_or_default()
        } else {
            by_pod
                .insert(pod_key.to_string(), now.clone())
                .unwrap_or_default()
        };
        if before == now {
            return;
        }
        for (set, element) in &before {
            self.remove(set, element);
        }
        for (set, element) in now {
            self.add(set, element);
        }
    }

    fn add(&mut self, set: String, element: String) {
        let count = self
            .elements
            .entry(set.clone())
            .or_default()
            .entry(element.clone())
            .or_default();
        *count += 1;
        if *count == 1 {
            self.note(set, element, true);
        }
    }

    fn remove(&mut self, set: &str, element: &str) {
        let Some(members) = self.elements.get_mut(set) else {
            return;
        };
        let Some(count) = members.get_mut(element) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            members.remove(element);
            if members.is_empty() {
                self.elements.remove(set);
            }
            self.note(set.to_string(), element.to_string(), false);
        }
    }

    /// Records an element crossing zero; one that crosses back cancels out.
    fn note(&mut self, set: String, element: String, added: bool) {
        let changes = self.pending.entry(set.clone()).or_default();
        match changes.get(&element) {
            Some(was) if *was != added => {
                changes.remove(&element);
                if changes.is_empty() {
                    self.pending.remove(&set);
                }
            }
            _ => {
                changes.insert(element, added);
            }
        }
    }
}

/// The (set, element)s a policy and a pod put in the table: the pod as one the policy selects
/// (and so isolated), as a peer of its rules, and its named ports where it is a rule's
/// destination (a selected pod for ingress, a peer pod for egress).
fn contributions(entry: &Entry, pod: &PodInfo, namespace_labels: &Labels) -> Vec<(String, String)> {
    let policy = &entry.policy;
    let ip = pod.ip.to_string();
    let mut out = Vec::new();
    let selected = policy.selects(pod);
    if selected {
        out.push((nftables::targets_set(&entry.id), ip.clone()));
    }
    for direction in Direction::BOTH {
        let Some(rules) = policy.rules(direction) else {
            continue;
        };
        if selected {
            out.push((nftables::isolated_set(direction).to_string(), ip.clone()));
        }
        for (index, rule) in rules.iter().enumerate() {
            let peer = rule
                .pod_peers
                .iter()
                .any(|p| p.matches(pod, namespace_labels));
            if peer {
                out.push((nftables::peers_set(&entry.id, direction, index), ip.clone()));
            }
            let destination = match direction {
                Direction::Ingress => selected,
                Direction::Egress => rule.any_peer || peer,
            };
            if !destination {
                continue;
            }
            for (protocol, name) in rule.named_ports() {
                for port in pod
                    .ports
                    .iter()
                    .filter(|p| p.name == name && p.protocol == protocol)
                {
                    out.push((
                        nftables::named_set(&entry.id, direction, index),
                        format!("{ip} . {} . {}", protocol.as_str(), port.port),
                    ));
                }
            }
        }
    }
    out
}

/// Stores `value` under `key` (removes the key for `None`); false when that changes nothing.
fn store<V: PartialEq>(map: &mut HashMap<String, V>, key: &str, value: Option<V>) -> bool {
    if map.get(key) == value.as_ref() {
        return false;
    }
    match value {
        Some(value) => map.insert(key.to_string(), value),
        None => map.remove(key),
    };
    true
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use serde_json::json;

    use super::*;
    use crate::model::{NamedPort, Protocol};
    use crate::nftables::{named_set, peers_set, policy_id, targets_set};

    fn policy(namespace: &str, name: &str, spec: serde_json::Value) -> Policy {
        let policy = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }))
        .unwrap();
        Policy::from_policy(&policy).unwrap()
    }

    fn pod(namespace: &str, ip: [u8; 4], labels: &[(&str, &str)], local: bool) -> PodInfo {
        PodInfo {
            namespace: namespace.into(),
            ip: Ipv4Addr::from(ip),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            local,
            ports: vec![NamedPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            }],
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Option<Labels> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// A ruleset with `app/web` (local, 10.42.0.2) allowing ingress on the named port `http`
    /// from namespaces labelled `team=a`, after its first full take.
    fn web_allowing_team_a() -> Ruleset {
        let mut ruleset = Ruleset::new("n1");
        ruleset.namespace_changed("app", labels(&[]));
        ruleset.namespace_changed("a", labels(&[("team", "a")]));
        ruleset.namespace_changed("b", labels(&[("team", "b")]));
        ruleset.pod_changed(
            "app/web",
            Some(pod("app", [10, 42, 0, 2], &[("app", "web")], true)),
        );
        ruleset.pod_changed("a/client", Some(pod("a", [10, 42, 1, 3], &[], false)));
        ruleset.pod_changed("b/client", Some(pod("b", [10, 42, 1, 4], &[], false)));
        ruleset.policy_changed(
            "app/allow-a",
            Some(policy(
                "app",
                "allow-a",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}],
                                    "ports": [{"port": "http"}]}]}),
            )),
        );
        assert!(matches!(ruleset.take(), Some(Update::Full(_))));
        ruleset
    }

    #[test]
    fn the_first_take_is_the_whole_table_with_its_elements() {
        let mut ruleset = Ruleset::new("n1");
        ruleset.namespace_changed("a", labels(&[("team", "a")]));
        ruleset.pod_changed(
            "app/web",
            Some(pod("app", [10, 42, 0, 2], &[("app", "web")], true)),
        );
        ruleset.pod_changed("a/client", Some(pod("a", [10, 42, 1, 3], &[], false)));
        ruleset.policy_changed(
            "app/allow-a",
            Some(policy(
                "app",
                "allow-a",
                json!({"podSelector": {"matchLabels": {"app": "web"}},
                       "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}],
                                    "ports": [{"port": "http"}, {"port": 9000, "endPort": 9010, "protocol": "UDP"}]}]}),
            )),
        );
        let Some(Update::Full(script)) = ruleset.take() else {
            panic!("a full update first");
        };
        let id = policy_id("app/allow-a");
        let (pods, peers, named) = (
            targets_set(&id),
            peers_set(&id, Direction::Ingress, 0),
            named_set(&id, Direction::Ingress, 0),
        );
        assert!(
            script.starts_with("add table inet skiff-netpol\ndelete table inet skiff-netpol\n")
        );
        assert!(script.contains(&format!("ip daddr @{pods} ip saddr @{peers} ip daddr . meta l4proto . th dport @{named} return")), "{script}");
        assert!(
            script.contains(&format!(
                "ip daddr @{pods} ip saddr @{peers} meta l4proto udp th dport 9000-9010 return"
            )),
            "{script}"
        );
        assert!(script.contains("ip daddr @ingress-isolated jump ingress"));
        assert!(script.contains("ct state established,related accept"));
        assert!(script.contains(&format!(
            "add element inet skiff-netpol {pods} {{ 10.42.0.2 }}"
        )));
        assert!(script.contains(&format!(
            "add element inet skiff-netpol {peers} {{ 10.42.1.3 }}"
        )));
        assert!(script.contains(&format!(
            "add element inet skiff-netpol {named} {{ 10.42.0.2 . tcp . 8080 }}"
        )));
        assert!(script.contains("add element inet skiff-netpol ingress-isolated { 10.42.0.2 }"));
        // no egress policy: nobody is isolated for egress
        assert!(!script.contains("add element inet skiff-netpol egress-isolated"));
        assert_eq!(ruleset.take(), None);
    }

    #[test]
    fn a_namespace_label_change_is_an_element_update() {
        let mut ruleset = web_allowing_team_a();
        let peers = peers_set(&policy_id("app/allow-a"), Direction::Ingress, 0);
        ruleset.namespace_changed("b", labels(&[("team", "a")]));
        ruleset.namespace_changed("a", labels(&[("team", "c")]));
        assert_eq!(
            ruleset.take(),
            Some(Update::Elements(format!(
                "delete element inet skiff-netpol {peers} {{ 10.42.1.3 }}\nadd element inet skiff-netpol {peers} {{ 10.42.1.4 }}\n"
            )))
        );
    }

    #[test]
    fn a_pod_label_change_moves_the_pod_out_of_the_policy_and_a_flip_back_cancels() {
        let mut ruleset = web_allowing_team_a();
        let id = policy_id("app/allow-a");
        let unlabelled = pod("app", [10, 42, 0, 2], &[], true);
        ruleset.pod_changed("app/web", Some(unlabelled.clone()));
        let Some(Update::Elements(script)) = ruleset.take() else {
            panic!("an element update");
        };
        assert!(script.contains(&format!(
            "delete element inet skiff-netpol {} {{ 10.42.0.2 }}",
            targets_set(&id)
        )));
        assert!(script.contains("delete element inet skiff-netpol ingress-isolated { 10.42.0.2 }"));
        assert!(script.contains(&format!(
            "delete element inet skiff-netpol {} {{ 10.42.0.2 . tcp . 8080 }}",
            named_set(&id, Direction::Ingress, 0)
        )));
        // off and on again before a take: nothing to do
        ruleset.pod_changed(
            "app/web",
            Some(pod("app", [10, 42, 0, 2], &[("app", "web")], true)),
        );
        ruleset.pod_changed("app/web", Some(unlabelled));
        assert_eq!(ruleset.take(), None);
    }

    #[test]
    fn an_element_two_policies_share_stays_until_both_let_go() {
        let mut ruleset = web_allowing_team_a();
        ruleset.policy_changed(
            "app/deny-all",
            Some(policy("app", "deny-all", json!({"podSelector": {}}))),
        );
        assert!(matches!(ruleset.take(), Some(Update::Full(_))));
        ruleset.policy_changed("app/allow-a", None);
        let Some(Update::Full(script)) = ruleset.take() else {
            panic!("a policy change rewrites the table");
        };
        assert!(script.contains("add element inet skiff-netpol ingress-isolated { 10.42.0.2 }"));
        assert!(!script.contains(&policy_id("app/allow-a")));
        ruleset.policy_changed("app/deny-all", None);
        let Some(Update::Full(script)) = ruleset.take() else {
            panic!("a policy change rewrites the table");
        };
        assert!(!script.contains("add element"), "{script}");
    }

    #[test]
    fn a_failed_apply_is_retried_as_the_whole_table() {
        let mut ruleset = web_allowing_team_a();
        ruleset.pod_changed("a/client", None);
        ruleset.namespace_changed("b", labels(&[("team", "a")]));
        assert!(matches!(ruleset.take(), Some(Update::Elements(_))));
        ruleset.resync();
        let Some(Update::Full(script)) = ruleset.take() else {
            panic!("a full update after a failure");
        };
        assert!(!script.contains("10.42.1.3"));
        assert!(script.contains("10.42.1.4"));
    }

    #[test]
    fn egress_named_ports_resolve_on_the_destination_pods() {
        let mut ruleset = web_allowing_team_a();
        ruleset.policy_changed(
            "a/to-web",
            Some(policy(
                "a",
                "to-web",
                json!({"podSelector": {}, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}],
                                   "ports": [{"port": "http"}]}]}),
            )),
        );
        let Some(Update::Full(script)) = ruleset.take() else {
            panic!("a full update");
        };
        let id = policy_id("a/to-web");
        // a/client is not on this node: nothing of it is isolated here
        assert!(!script.contains(&format!("{} {{ 10.42.1.3 }}", targets_set(&id))));
        assert!(script.contains(&format!(
            "add element inet skiff-netpol {} {{ 10.42.0.2 . tcp . 8080 }}",
            named_set(&id, Direction::Egress, 0)
        )));
        assert!(script.contains(&format!(
            "ip saddr @{} ip daddr @{} ip daddr . meta l4proto . th dport @{} return",
            targets_set(&id),
            peers_set(&id, Direction::Egress, 0),
            named_set(&id, Direction::Egress, 0)
        )));
    }
}
