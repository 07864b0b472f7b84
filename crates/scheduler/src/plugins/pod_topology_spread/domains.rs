//! PreFilter's matching pods per topology domain, kept from one cycle to the next. Upstream
//! recounts every node each cycle (in parallel); here a cycle recounts only the nodes whose
//! `NodeInfo` changed since the last cycle with the same constraints. Snapshots share the
//! `NodeInfo` of every node that did not change, so comparing pointers finds them, and a
//! cycle at 5,000 nodes recounts the one or two where the last pods went.
//!
//! It holds only for constraints that take every node with their keys into account: the pod
//! has no node selector or required node affinity (or the constraints ignore them), and the
//! constraints ignore taints. PreFilter walks the nodes itself otherwise.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use skiff_apimachinery::labels::Selector;

use super::{Constraint, count_matching};
use crate::framework::{ClassMemo, NodeInfo};
use crate::plugins::helper::node_labels;

/// How many sets of constraints are kept (the least recently used goes first).
const ENTRIES: usize = 4;

/// The counts for the few sets of constraints asked about lately.
#[derive(Default)]
pub(super) struct DomainCounts {
    entries: Mutex<Vec<Entry>>,
}

impl DomainCounts {
    /// Per constraint: topology value → pods in namespace `ns` its selector matches, over
    /// the nodes that have every constraint's topology key.
    pub(super) fn counts(
        &self,
        nodes: &[Arc<NodeInfo>],
        ns: &str,
        constraints: &[Constraint],
    ) -> Vec<HashMap<String, i64>> {
        let mut entries = self.entries.lock();
        let mut entry = match entries.iter().position(|e| e.is_for(ns, constraints)) {
            Some(i) => entries.remove(i),
            None => Entry::new(ns, constraints),
        };
        entry.refresh(nodes);
        let counts = entry
            .domains
            .iter()
            .map(|d| d.iter().map(|(v, (_, n))| (v.clone(), *n)).collect())
            .collect();
        if entries.len() == ENTRIES {
            entries.remove(0);
        }
        entries.push(entry);
        counts
    }
}

/// The counts for one namespace and set of (topology key, selector).
struct Entry {
    namespace: String,
    keys: Vec<(String, Selector)>,
    /// The nodes as last counted, in the snapshot's order.
    nodes: Vec<Arc<NodeInfo>>,
    /// What each of `nodes` adds per constraint (its domain and matching pods); `None` for a
    /// node without every key.
    added: Vec<Option<Vec<(String, i64)>>>,
    /// Per constraint: topology value → (nodes in the domain, matching pods).
    domains: Vec<HashMap<String, (usize, i64)>>,
}

impl Entry {
    fn new(ns: &str, constraints: &[Constraint]) -> Entry {
        Entry {
            namespace: ns.to_string(),
            keys: constraints
                .iter()
                .map(|c| (c.topology_key.clone(), c.selector.clone()))
                .collect(),
            nodes: Vec::new(),
            added: Vec::new(),
            domains: vec![HashMap::new(); constraints.len()],
        }
    }

    fn is_for(&self, ns: &str, constraints: &[Constraint]) -> bool {
        self.namespace == ns
            && self.keys.len() == constraints.len()
            && self
                .keys
                .iter()
                .zip(constraints)
                .all(|((key, selector), c)| *key == c.topology_key && *selector == c.selector)
    }

    /// Recounts the nodes that are not the ones last counted (all of them when nodes came or
    /// went).
    fn refresh(&mut self, nodes: &[Arc<NodeInfo>]) {
        if self.nodes.len() != nodes.len() {
            self.nodes.clear();
            self.added.clear();
            self.domains.iter_mut().for_each(HashMap::clear);
        }
        let mut memos: Vec<ClassMemo<bool>> =
            self.keys.iter().map(|_| ClassMemo::default()).collect();
        for (i, node) in nodes.iter().enumerate() {
            if i == self.nodes.len() {
                self.nodes.push(node.clone());
                self.added.push(None);
            } else if Arc::ptr_eq(&self.nodes[i], node) {
                continue;
            } else {
                self.apply(i, -1);
                self.nodes[i] = node.clone();
            }
            self.added[i] = self.count(node, &mut memos);
            self.apply(i, 1);
        }
    }

    /// What `node` adds per constraint, or `None` without every key.
    fn count(&self, node: &NodeInfo, memos: &mut [ClassMemo<bool>]) -> Option<Vec<(String, i64)>> {
        let labels = node_labels(&node.node);
        self.keys
            .iter()
            .zip(memos)
            .map(|((key, selector), memo)| {
                let value = labels.get(key)?;
                Some((
                    value.clone(),
                    count_matching(node, selector, &self.namespace, Some(memo)),
                ))
            })
            .collect()
    }

    /// Adds (`sign` 1) or takes away (-1) what node `i` adds.
    fn apply(&mut self, i: usize, sign: i64) {
        let Some(added) = &self.added[i] else {
            return;
        };
        for ((value, n), domains) in added.iter().zip(&mut self.domains) {
            let domain = match domains.get_mut(value) {
                Some(d) => d,
                None => domains.entry(value.clone()).or_default(),
            };
            domain.0 = domain.0.wrapping_add_signed(sign as isize);
            domain.1 += sign * n;
            if domain.0 == 0 {
                domains.remove(value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::PodTopologySpread;
    use super::super::filtering::count_domains;
    use super::super::test_support::spread;
    use super::*;
    use crate::framework::testing::{PodBuilder, node};
    use crate::framework::{PodInfo, Snapshot, Workloads};
    use skiff_component_helpers::node_affinity::RequiredNodeAffinity;

    fn app(name: &str, app: &str) -> Arc<PodInfo> {
        PodBuilder::new(name).label("app", app).info()
    }

    fn in_zone(name: &str, zone: &str, pods: &[Arc<PodInfo>]) -> Arc<NodeInfo> {
        Arc::new(node(name).label("zone", zone).info(pods))
    }

    /// The kept counts and a fresh walk over the same nodes, for a pod spreading `app=web` by
    /// zone.
    fn both(kept: &DomainCounts, nodes: &[Arc<NodeInfo>]) -> [Vec<HashMap<String, i64>>; 2] {
        let pod = PodBuilder::new("new")
            .label("app", "web")
            .with_spec(|s| {
                s.topology_spread_constraints =
                    Some(vec![spread("zone", 1, "DoNotSchedule", "web")])
            })
            .info();
        let constraints = PodTopologySpread::default()
            .constraints(&pod.pod, "DoNotSchedule", &Workloads::default())
            .unwrap();
        let required = RequiredNodeAffinity::of(&pod.pod);
        let snapshot = Snapshot::new(nodes.to_vec());
        [
            kept.counts(nodes, pod.namespace(), &constraints),
            count_domains(&pod, &required, &constraints, &snapshot),
        ]
    }

    #[test]
    fn kept_counts_follow_changed_nodes_as_a_fresh_count_does() {
        let kept = DomainCounts::default();
        let mut nodes = vec![
            in_zone("n1", "a", &[app("w1", "web"), app("w2", "web")]),
            in_zone("n2", "a", &[]),
            in_zone("n3", "b", &[app("w3", "web"), app("d1", "db")]),
            Arc::new(node("n4").info(&[app("w4", "web")])),
        ];
        let [counts, fresh] = both(&kept, &nodes);
        assert_eq!(counts, fresh);
        assert_eq!(counts[0], [("a".into(), 2), ("b".into(), 1)].into());

        // a pod lands on n2; n3 moves to a zone of its own, so zone b is gone
        nodes[1] = in_zone("n2", "a", &[app("w5", "web")]);
        nodes[2] = in_zone("n3", "c", &[app("w3", "web")]);
        let [counts, fresh] = both(&kept, &nodes);
        assert_eq!(counts, fresh);
        assert_eq!(counts[0], [("a".into(), 3), ("c".into(), 1)].into());

        // a node comes (everything is recounted) and n4 gains the key
        nodes.push(in_zone("n5", "d", &[]));
        nodes[3] = in_zone("n4", "a", &[app("w4", "web")]);
        let [counts, fresh] = both(&kept, &nodes);
        assert_eq!(counts, fresh);
        assert_eq!(
            counts[0],
            [("a".into(), 4), ("c".into(), 1), ("d".into(), 0)].into()
        );

        // the last pod leaves zone a's n1 and a node goes
        nodes[0] = in_zone("n1", "a", &[app("w2", "web")]);
        nodes.pop();
        let [counts, fresh] = both(&kept, &nodes);
        assert_eq!(counts, fresh);
        assert_eq!(counts[0], [("a".into(), 3), ("c".into(), 1)].into());
    }

    #[test]
    fn each_set_of_constraints_keeps_its_own_counts_and_the_oldest_goes() {
        let kept = DomainCounts::default();
        let nodes = vec![in_zone("n1", "a", &[app("w1", "web"), app("d1", "db")])];
        let constraints = |app: &str| {
            let pod = PodBuilder::new("new")
                .with_spec(|s| {
                    s.topology_spread_constraints =
                        Some(vec![spread("zone", 1, "DoNotSchedule", app)])
                })
                .info();
            PodTopologySpread::default()
                .constraints(&pod.pod, "DoNotSchedule", &Workloads::default())
                .unwrap()
        };
        for (i, name) in ["web", "db", "a", "b", "c"].iter().enumerate() {
            let want = i64::from(i < 2);
            let counts = kept.counts(&nodes, "default", &constraints(name));
            assert_eq!(counts[0], [("a".into(), want)].into(), "{name}");
        }
        assert_eq!(kept.entries.lock().len(), ENTRIES);
        assert_eq!(kept.counts(&nodes, "other", &constraints("web"))[0]["a"], 0);
    }
}
