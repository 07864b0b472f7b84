//! `nodeipam` (upstream's NodeIpamController with the RangeAllocator): with
//! `--allocate-node-cidrs`, every Node without `spec.podCIDR` gets a free `--node-cidr-mask-size`
//! range of `--cluster-cidr` in `spec.podCIDR` and `spec.podCIDRs`. One task owns the
//! allocation table (so a range is never handed out twice); it is rebuilt from the Nodes'
//! existing ranges before anything is allocated, so it survives restarts. A deleted Node's range
//! is released, also when the Node went while the watch was disconnected (the shared
//! informer's tombstone after its relist). When none is left the Node gets a
//! `CIDRNotAvailable` event. IPv4 only.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use skiff_runtime::events::{Event, Recorder};
use skiff_runtime::informer::Change;
use tokio::sync::mpsc;

use crate::Context;

/// A malformed `--cluster-cidr` / `--node-cidr-mask-size`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("invalid --cluster-cidr {0:?}: want an IPv4 CIDR such as 10.42.0.0/16")]
    ClusterCidr(String),
    #[error("--node-cidr-mask-size {mask} must be between the cluster prefix /{prefix} and /32")]
    MaskSize { mask: u8, prefix: u8 },
}

/// Free and used node ranges of the cluster CIDR, by index.
#[derive(Debug, Clone)]
pub struct Allocator {
    base: u32,
    prefix: u8,
    mask: u8,
    used: BTreeSet<u32>,
}

impl Allocator {
    pub fn new(cluster_cidr: &str, mask: u8) -> Result<Allocator, Error> {
        let (base, prefix) =
            parse(cluster_cidr).ok_or_else(|| Error::ClusterCidr(cluster_cidr.into()))?;
        if mask < prefix || mask > 32 || mask - prefix > 24 {
            return Err(Error::MaskSize { mask, prefix });
        }
        Ok(Allocator {
            base,
            prefix,
            mask,
            used: BTreeSet::new(),
        })
    }

    fn capacity(&self) -> u32 {
        1 << (self.mask - self.prefix)
    }

    fn index_of(&self, cidr: &str) -> Option<u32> {
        let (addr, len) = parse(cidr)?;
        let in_cluster = self.prefix == 0 || (addr ^ self.base) >> (32 - self.prefix) == 0;
        if len != self.mask || !in_cluster {
            return None;
        }
        let index = (addr - self.base)
            .checked_shr(32 - u32::from(self.mask))
            .unwrap_or(0);
        Some(index)
    }

    fn cidr(&self, index: u32) -> String {
        let shift = 32 - u32::from(self.mask);
        let addr = self.base + index.checked_shl(shift).unwrap_or(0);
        format!("{}/{}", Ipv4Addr::from(addr), self.mask)
    }

    /// Marks an existing range used; `false` if it is not one of this cluster's ranges.
    pub fn occupy(&mut self, cidr: &str) -> bool {
        match self.index_of(cidr) {
            Some(i) => {
                self.used.insert(i);
                true
            }
            None => false,
        }
    }

    pub fn release(&mut self, cidr: &str) {
        if let Some(i) = self.index_of(cidr) {
            self.used.remove(&i);
        }
    }

    /// The lowest free range, now used; `None` when all are.
    pub fn allocate(&mut self) -> Option<String> {
        let free = (0..self.capacity()).find(|i| !self.used.contains(i))?;
        self.used.insert(free);
        Some(self.cidr(free))
    }
}

/// `a.b.c.d/n` as (network address, n); host bits are cleared.
fn parse(cidr: &str) -> Option<(u32, u8)> {
    let (addr, len) = cidr.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    let len: u8 = len.parse().ok().filter(|l| *l <= 32)?;
    let bits = u32::from(addr);
    let net = if len == 0 {
        0
    } else {
        bits & (u32::MAX << (32 - u32::from(len)))
    };
    Some((net, len))
}

fn pod_cidr(node: &Node) -> Option<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.pod_cidr.clone())
        .filter(|c| !c.is_empty())
}

/// The allocation table and which node holds which range.
#[derive(Debug)]
pub struct Ipam {
    allocator: Allocator,
    held: HashMap<String, String>,
}

impl Ipam {
    pub fn new(allocator: Allocator) -> Ipam {
        Ipam {
            allocator,
            held: HashMap::new(),
        }
    }

    /// Records the range a node already has.
    pub fn observe(&mut self, node: &Node) {
        if let Some(cidr) = pod_cidr(node)
            && self.allocator.occupy(&cidr)
        {
            self.held.insert(node.name_any(), cidr);
        }
    }

    /// A range for a node that has none: the one given it before if it is still being
    /// written, else a new one.
    pub fn allocate_for(&mut self, name: &str) -> Option<String> {
        if let Some(cidr) = self.held.get(name) {
            return Some(cidr.clone());
        }
        let cidr = self.allocator.allocate()?;
        self.held.insert(name.into(), cidr.clone());
        Some(cidr)
    }

    /// Frees a deleted node's range (or one that could not be written).
    pub fn forget(&mut self, name: &str) {
        if let Some(cidr) = self.held.remove(name) {
            self.allocator.release(&cidr);
        }
    }
}

/// The writes this controller makes.
#[async_trait]
pub trait NodeCidrs: Send + Sync {
    async fn assign(&self, node: &str, cidr: &str) -> kube::Result<()>;
    /// Records `CIDRNotAvailable` on the node.
    async fn not_available(&self, node: &Node) -> kube::Result<()>;
}

/// The pass over nodes still lacking a range: assigns what it can; returns those to retry.
pub async fn assign_pending(
    ipam: &mut Ipam,
    pending: Vec<Node>,
    reported: &mut HashSet<String>,
    api: &dyn NodeCidrs,
) -> Vec<Node> {
    let mut retry = Vec::new();
    for node in pending {
        let name = node.name_any();
        match ipam.allocate_for(&name) {
            Some(cidr) => {
                if let Err(error) = api.assign(&name, &cidr).await {
                    tracing::warn!(node = %name, %cidr, %error, "nodeipam: will retry");
                    ipam.forget(&name);
                    retry.push(node);
                }
            }
            None => {
                if reported.insert(name.clone())
                    && let Err(error) = api.not_available(&node).await
                {
                    tracing::warn!(node = %name, %error, "nodeipam: event not recorded");
                }
                retry.push(node);
            }
        }
    }
    retry
}

struct KubeCidrs {
    client: kube::Client,
    recorder: Recorder,
}

#[async_trait]
impl NodeCidrs for KubeCidrs {
    async fn assign(&self, node: &str, cidr: &str) -> kube::Result<()> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        match nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }

    async fn not_available(&self, node: &Node) -> kube::Result<()> {
        let note = format!("Node {} status is now: CIDRNotAvailable", node.name_any());
        let event = Event::normal(node.object_ref(&()), "CIDRNotAvailable", note);
        self.recorder.record(event.with_action("Allocating"));
        Ok(())
    }
}

/// What the allocation task keeps between changes: the table, the nodes still waiting for a
/// range, and those already told none is left.
#[derive(Debug)]
pub struct Allocation {
    pub ipam: Ipam,
    pub pending: Vec<Node>,
    pub reported: HashSet<String>,
}

impl Allocation {
    pub fn new(ipam: Ipam) -> Allocation {
        Allocation {
            ipam,
            pending: Vec::new(),
            reported: HashSet::new(),
        }
    }

    /// Applies one change of the Node informer: a node's range is recorded, a node without one
    /// waits for one, and a deleted node's range is freed, also when the watch missed the
    /// deletion and a relist found the node gone.
    pub fn observe(&mut self, change: &Change<Node>) {
        let node = change.object();
        let name = node.name_any();
        self.pending.retain(|p| p.name_any() != name);
        match change {
            Change::Added(_) | Change::Updated { .. } => {
                self.ipam.observe(node);
                if pod_cidr(node).is_none() {
                    self.pending.push(node.as_ref().clone());
                }
            }
            Change::Deleted { .. } => {
                self.reported.remove(&name);
                self.ipam.forget(&name);
            }
        }
    }

    /// Assigns ranges to the pending nodes that can get one.
    pub async fn assign(&mut self, api: &dyn NodeCidrs) {
        if !self.pending.is_empty() {
            let todo = std::mem::take(&mut self.pending);
            self.pending = assign_pending(&mut self.ipam, todo, &mut self.reported, api).await;
        }
    }
}

/// Runs the allocator until the process stops (idle without `--allocate-node-cidrs`). The
/// shared Node informer's handler hands its changes to the one task that owns the table.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    if !ctx.config.allocate_node_cidrs {
        std::future::pending::<()>().await;
    }
    let allocator = Allocator::new(&ctx.config.cluster_cidr, ctx.config.node_cidr_mask_size)?;
    let mut allocation = Allocation::new(Ipam::new(allocator));
    let api = KubeCidrs {
        client: ctx.client.clone(),
        recorder: ctx.recorder("cidrAllocator"),
    };
    let (changes, mut received) = mpsc::unbounded_channel();
    let nodes = ctx.informers.get::<Node>();
    nodes.add_handler(move |change: &Change<Node>| {
        let copy = match change {
            Change::Added(n) => Change::Added(n.clone()),
            Change::Updated { old, new } => Change::Updated {
                old: old.clone(),
                new: new.clone(),
            },
            Change::Deleted {
                last,
                final_state_unknown,
            } => Change::Deleted {
                last: last.clone(),
                final_state_unknown: *final_state_unknown,
            },
        };
        let _ = changes.send(copy);
    });
    // Only once every existing range is known is any handed out: the handler has sent every
    // node of the first list by the time the cache is ready.
    nodes.cache().wait_until_ready().await;
    while let Ok(change) = received.try_recv() {
        allocation.observe(&change);
    }
    let mut retry = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            change = received.recv() => {
                let Some(change) = change else { return Err(crate::Error::InformerStopped("node")) };
                allocation.observe(&change);
            }
            _ = retry.tick() => {}
        }
        allocation.assign(&api).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use parking_lot::Mutex;

    fn node(name: &str, cidr: Option<&str>) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.spec = Some(NodeSpec {
            pod_cidr: cidr.map(str::to_string),
            ..Default::default()
        });
        n
    }

    #[test]
    fn ranges_are_cut_in_order_and_reused_after_release() {
        let mut a = Allocator::new("10.42.0.0/16", 24).unwrap();
        assert_eq!(a.allocate().as_deref(), Some("10.42.0.0/24"));
        assert_eq!(a.allocate().as_deref(), Some("10.42.1.0/24"));
        a.release("10.42.0.0/24");
        assert_eq!(a.allocate().as_deref(), Some("10.42.0.0/24"));
        assert!(!a.occupy("10.43.0.0/24"), "outside the cluster range");
        assert!(!a.occupy("10.42.5.0/25"), "another size");
        assert!(a.occupy("10.42.2.0/24"));
        assert_eq!(a.allocate().as_deref(), Some("10.42.3.0/24"));
        assert_eq!(
            Allocator::new("10.42.0.0/16", 8).unwrap_err(),
            Error::MaskSize {
                mask: 8,
                prefix: 16
            }
        );
        assert!(Allocator::new("fd00::/64", 80).is_err());
    }

    #[derive(Default)]
    struct Recording {
        assigned: Mutex<Vec<(String, String)>>,
        unavailable: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl NodeCidrs for Recording {
        async fn assign(&self, node: &str, cidr: &str) -> kube::Result<()> {
            self.assigned.lock().push((node.into(), cidr.into()));
            Ok(())
        }
        async fn not_available(&self, node: &Node) -> kube::Result<()> {
            self.unavailable.lock().push(node.name_any());
            Ok(())
        }
    }

    #[tokio::test]
    async fn existing_ranges_are_kept_and_exhaustion_is_reported_once() {
        let mut ipam = Ipam::new(Allocator::new("10.0.0.0/30", 31).unwrap());
        ipam.observe(&node("old", Some("10.0.0.0/31")));
        let api = Recording::default();
        let mut reported = HashSet::new();
        let pending = vec![node("a", None), node("b", None)];
        let left = assign_pending(&mut ipam, pending, &mut reported, &api).await;
        assert_eq!(
            *api.assigned.lock(),
            vec![("a".to_string(), "10.0.0.2/31".to_string())]
        );
        assert_eq!(left.len(), 1);
        let left = assign_pending(&mut ipam, left, &mut reported, &api).await;
        assert_eq!(*api.unavailable.lock(), vec!["b"], "one event per node");
        // a deleted node frees its range for the waiting one
        ipam.forget("old");
        assert!(
            assign_pending(&mut ipam, left, &mut reported, &api)
                .await
                .is_empty()
        );
        assert_eq!(api.assigned.lock()[1], ("b".into(), "10.0.0.0/31".into()));
    }

    #[tokio::test]
    async fn a_node_deleted_while_the_watch_was_down_frees_its_range() {
        let mut allocation = Allocation::new(Ipam::new(Allocator::new("10.0.0.0/30", 31).unwrap()));
        let gone = Arc::new(node("gone", Some("10.0.0.0/31")));
        allocation.observe(&Change::Added(gone.clone()));
        allocation.observe(&Change::Added(Arc::new(node("kept", Some("10.0.0.2/31")))));
        allocation.observe(&Change::Added(Arc::new(node("new", None))));
        let api = Recording::default();
        allocation.assign(&api).await;
        assert_eq!(*api.unavailable.lock(), vec!["new"], "every range is held");
        // the relist after a reconnect no longer has `gone`: the informer's tombstone
        allocation.observe(&Change::Deleted {
            last: gone,
            final_state_unknown: true,
        });
        allocation.assign(&api).await;
        assert_eq!(
            *api.assigned.lock(),
            vec![("new".to_string(), "10.0.0.0/31".to_string())]
        );
        assert!(allocation.pending.is_empty());
    }
}
