//! The ownership graph (upstream's GraphBuilder `uidToNode`): every object the collector
//! watches, by uid, with an index from each owner uid to its dependents. Applying a watch event
//! returns the work it causes; the graph itself never calls the API.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The finalizer of an owner deleted with `propagationPolicy=Foreground`.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer of an owner deleted with `propagationPolicy=Orphan`.
pub const ORPHAN: &str = "orphan";

/// Which object a node is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub api_version: String,
    pub kind: String,
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

/// One watched object.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: Identity,
    pub owners: Vec<OwnerReference>,
    /// `metadata.deletionTimestamp` is set.
    pub being_deleted: bool,
    pub finalizers: Vec<String>,
}

impl Node {
    pub fn from_meta(api_version: &str, kind: &str, meta: &ObjectMeta) -> Option<Node> {
        Some(Node {
            id: Identity {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: meta.namespace.clone(),
                name: meta.name.clone()?,
                uid: meta.uid.clone()?,
            },
            owners: meta.owner_references.clone().unwrap_or_default(),
            being_deleted: meta.deletion_timestamp.is_some(),
            finalizers: meta.finalizers.clone().unwrap_or_default(),
        })
    }

    fn has(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Being deleted in the foreground: waiting for its blocking dependents.
    pub fn deleting_dependents(&self) -> bool {
        self.being_deleted && self.has(FOREGROUND)
    }

    /// Being deleted with its dependents orphaned.
    pub fn orphaning(&self) -> bool {
        self.being_deleted && self.has(ORPHAN)
    }
}

/// What a graph change asks the collector's workers to do, by uid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Work {
    /// Upstream's attemptToDelete: check the object's owners (and, for an owner deleting its
    /// dependents, whether it may now lose its finalizer).
    Delete(String),
    /// Upstream's attemptToOrphan: strip the owner's references from its dependents, then its
    /// `orphan` finalizer.
    Orphan(String),
}

/// The graph. Not synchronised itself: the collector holds it under one mutex.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    /// Owner uid → uids of the nodes that reference it (the owner may not be a node).
    dependents: HashMap<String, BTreeSet<String>>,
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// The nodes that reference `owner`.
    pub fn dependents(&self, owner: &str) -> Vec<&Node> {
        self.dependents
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|uid| self.nodes.get(uid))
            .collect()
    }

    /// The dependents whose reference to `owner` has `blockOwnerDeletion: true`.
    pub fn blocking_dependents(&self, owner: &str) -> Vec<&Node> {
        self.dependents(owner)
            .into_iter()
            .filter(|d| {
                d.owners
                    .iter()
                    .any(|o| o.uid == owner && o.block_owner_deletion == Some(true))
            })
            .collect()
    }

    /// The uids of every node of this kind (to find those a relist no longer returns).
    pub fn uids_of(&self, api_version: &str, kind: &str) -> Vec<String> {
        self.nodes
            .values()
            .filter(|n| n.id.api_version == api_version && n.id.kind == kind)
            .map(|n| n.id.uid.clone())
            .collect()
    }

    /// An object was added or changed.
    pub fn upsert(&mut self, node: Node) -> Vec<Work> {
        let uid = node.id.uid.clone();
        let old = self.nodes.get(&uid).cloned();
        let mut work = Vec::new();
        let old_owners: Vec<OwnerReference> =
            old.as_ref().map(|o| o.owners.clone()).unwrap_or_default();
        for gone in old_owners.iter().filter(|o| !node.owners.contains(o)) {
            if let Some(set) = self.dependents.get_mut(&gone.uid) {
                set.remove(&uid);
                if set.is_empty() {
                    self.dependents.remove(&gone.uid);
                }
            }
            // An owner waiting for its dependents may be free now.
            if self
                .nodes
                .get(&gone.uid)
                .is_some_and(Node::deleting_dependents)
            {
                work.push(Work::Delete(gone.uid.clone()));
            }
        }
        for owner in &node.owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(uid.clone());
        }
        // Owners not known, or being deleted in the foreground: the dependent's owners need a
        // look (upstream's virtual nodes and attemptToDelete of dependents).
        let owners_changed = old.as_ref().is_none_or(|o| o.owners != node.owners);
        let needs_look = node.owners.iter().any(|o| match self.nodes.get(&o.uid) {
            None => true,
            Some(owner) => owner.deleting_dependents(),
        });
        if owners_changed && needs_look {
            work.push(Work::Delete(uid.clone()));
        }
        let became_foreground =
            node.deleting_dependents() && !old.as_ref().is_some_and(Node::deleting_dependents);
        if node.deleting_dependents() {
            work.push(Work::Delete(uid.clone()));
            if became_foreground {
                work.extend(
                    self.dependents(&uid)
                        .iter()
                        .map(|d| Work::Delete(d.id.uid.clone())),
                );
            }
        }
        if node.orphaning() {
            work.push(Work::Orphan(uid.clone()));
        }
        // A dependent that is itself going away may unblock its foreground owners.
        if node.being_deleted {
            for o in &node.owners {
                if self
                    .nodes
                    .get(&o.uid)
                    .is_some_and(Node::deleting_dependents)
                {
                    work.push(Work::Delete(o.uid.clone()));
                }
            }
        }
        self.nodes.insert(uid, node);
        work.sort();
        work.dedup();
        work
    }

    /// An object was deleted: its dependents lost an owner, and its foreground owners may lose
    /// their finalizer.
    pub fn remove(&mut self, uid: &str) -> Vec<Work> {
        let Some(node) = self.nodes.remove(uid) else {
            return Vec::new();
        };
        let mut work: Vec<Work> = self
            .dependents(uid)
            .iter()
            .map(|d| Work::Delete(d.id.uid.clone()))
            .collect();
        for owner in &node.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(uid);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
            if self
                .nodes
                .get(&owner.uid)
                .is_some_and(Node::deleting_dependents)
            {
                work.push(Work::Delete(owner.uid.clone()));
            }
        }
        work.sort();
        work.dedup();
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn owner_ref(uid: &str, block: bool) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: format!("rs-{uid}"),
            uid: uid.into(),
            block_owner_deletion: block.then_some(true),
            controller: Some(true),
        }
    }

    fn node(uid: &str, owners: Vec<OwnerReference>) -> Node {
        Node {
            id: Identity {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("ns".into()),
                name: format!("n-{uid}"),
                uid: uid.into(),
            },
            owners,
            being_deleted: false,
            finalizers: vec![],
        }
    }

    fn delete(uid: &str) -> Work {
        Work::Delete(uid.into())
    }

    #[test]
    fn a_dependent_of_an_unknown_owner_is_looked_at_once() {
        let mut g = Graph::default();
        assert_eq!(
            g.upsert(node("p", vec![owner_ref("rs", true)])),
            vec![delete("p")]
        );
        // the same owners again: nothing new
        assert!(g.upsert(node("p", vec![owner_ref("rs", true)])).is_empty());
        // once the owner is known, a dependent is not looked at
        assert!(g.upsert(node("rs", vec![])).is_empty());
        assert!(g.upsert(node("q", vec![owner_ref("rs", true)])).is_empty());
    }

    #[test]
    fn removing_an_owner_queues_its_dependents() {
        let mut g = Graph::default();
        g.upsert(node("rs", vec![]));
        g.upsert(node("p", vec![owner_ref("rs", true)]));
        g.upsert(node("q", vec![owner_ref("rs", false)]));
        assert_eq!(g.remove("rs"), vec![delete("p"), delete("q")]);
        assert_eq!(g.dependents("rs").len(), 2, "the index outlives the owner");
        g.remove("p");
        assert_eq!(g.dependents("rs").len(), 1);
    }

    #[test]
    fn a_foreground_owner_queues_itself_and_its_dependents_and_is_requeued_as_they_go() {
        let mut g = Graph::default();
        g.upsert(node("rs", vec![]));
        g.upsert(node("p", vec![owner_ref("rs", true)]));
        g.upsert(node("q", vec![owner_ref("rs", false)]));
        let mut rs = node("rs", vec![]);
        rs.being_deleted = true;
        rs.finalizers = vec![FOREGROUND.into()];
        assert_eq!(g.upsert(rs), vec![delete("p"), delete("q"), delete("rs")]);
        assert_eq!(
            g.blocking_dependents("rs")
                .iter()
                .map(|n| n.id.uid.as_str())
                .collect::<Vec<_>>(),
            vec!["p"]
        );
        assert_eq!(g.remove("p"), vec![delete("rs")]);
    }

    #[test]
    fn an_orphaning_owner_is_queued_for_orphaning() {
        let mut g = Graph::default();
        let mut rs = node("rs", vec![]);
        rs.being_deleted = true;
        rs.finalizers = vec![ORPHAN.into()];
        assert_eq!(g.upsert(rs), vec![Work::Orphan("rs".into())]);
    }
}
