//! The service change tracker (upstream's `ServiceChangeTracker` and `EndpointsChangeTracker`):
//! the informers' latest Services, EndpointSlices and node addresses, and which Services changed
//! since the last sync. A change to one Service or one of its slices marks only that Service.
//!
//! Shared as `Arc<parking_lot::Mutex<ChangeTracker>>` between the informers (which update it) and
//! the sync loop (which takes the changes); the lock is held for one update or one
//! [`ChangeTracker::take`], never while rules are applied.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use skiff_runtime::informer::Change;

use crate::model::{PortEntry, ServiceKey, service_ports};

/// The label an EndpointSlice names its Service with.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The Cluster Autoscaler's taint on a node it is about to delete.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// What changed since the last [`ChangeTracker::take`].
#[derive(Debug, Default)]
pub struct Changes {
    /// Every changed Service with its ports now (empty: gone, or no longer proxied).
    pub services: BTreeMap<ServiceKey, Vec<PortEntry>>,
    /// The node's addresses, when they changed.
    pub node_ips: Option<Vec<Ipv4Addr>>,
    /// When the oldest of these changes arrived (upstream's queued update).
    pub queued_at: Option<Instant>,
    /// Whether the node may serve load-balancer traffic, when that changed: not when it is
    /// being deleted or tainted `ToBeDeletedByClusterAutoscaler` (the proxy's `/healthz`).
    pub node_eligible: Option<bool>,
}

#[derive(Debug)]
pub struct ChangeTracker {
    node_name: String,
    services: HashMap<ServiceKey, Arc<Service>>,
    /// Slices by their Service, then by slice name.
    slices: HashMap<ServiceKey, BTreeMap<String, Arc<EndpointSlice>>>,
    /// Which Service each slice (by namespace and name) belongs to, so that a slice relabelled
    /// to another Service leaves the first.
    slice_owners: HashMap<ServiceKey, ServiceKey>,
    node_ips: Vec<Ipv4Addr>,
    dirty: BTreeSet<ServiceKey>,
    node_dirty: bool,
    queued_at: Option<Instant>,
    node_eligible: bool,
    eligible_dirty: bool,
}

impl ChangeTracker {
    pub fn new(node_name: &str) -> Self {
        ChangeTracker {
            node_name: node_name.to_string(),
            services: HashMap::new(),
            slices: HashMap::new(),
            slice_owners: HashMap::new(),
            node_ips: Vec::new(),
            dirty: BTreeSet::new(),
            node_dirty: false,
            queued_at: None,
            node_eligible: true,
            eligible_dirty: false,
        }
    }

    /// A Service was added or updated.
    pub fn service_updated(&mut self, service: Arc<Service>) {
        let Some(key) = object_key(&service.metadata) else {
            return;
        };
        self.services.insert(key.clone(), service);
        self.mark(key);
    }

    pub fn service_deleted(&mut self, service: &Service) {
        let Some(key) = object_key(&service.metadata) else {
            return;
        };
        self.services.remove(&key);
        self.mark(key);
    }

    /// A slice was added or updated; slices without a Service label are not proxied.
    pub fn slice_updated(&mut self, slice: Arc<EndpointSlice>) {
        let Some((key, name)) = slice_key(&slice) else {
            return;
        };
        let id = ServiceKey::new(&key.namespace, &name);
        if let Some(previous) = self.slice_owners.insert(id, key.clone())
            && previous != key
        {
            self.forget_slice(&previous, &name);
        }
        self.slices
            .entry(key.clone())
            .or_default()
            .insert(name, slice);
        self.mark(key);
    }

    pub fn slice_deleted(&mut self, slice: &EndpointSlice) {
        let Some((key, name)) = slice_key(slice) else {
            return;
        };
        self.slice_owners
            .remove(&ServiceKey::new(&key.namespace, &name));
        self.forget_slice(&key, &name);
    }

    fn forget_slice(&mut self, key: &ServiceKey, name: &str) {
        if let Some(slices) = self.slices.get_mut(key) {
            slices.remove(name);
            if slices.is_empty() {
                self.slices.remove(key);
            }
        }
        self.mark(key.clone());
    }

    /// `key` changed: the next sync rewrites it.
    fn mark(&mut self, key: ServiceKey) {
        self.dirty.insert(key);
        self.queued_at.get_or_insert_with(Instant::now);
    }

    /// Applies one change of the Service informer.
    pub fn service_changed(&mut self, change: &Change<Service>) {
        match change {
            Change::Added(service) | Change::Updated { new: service, .. } => {
                self.service_updated(service.clone());
            }
            Change::Deleted { last, .. } => self.service_deleted(last),
        }
    }

    /// Applies one change of the EndpointSlice informer.
    pub fn slice_changed(&mut self, change: &Change<EndpointSlice>) {
        match change {
            Change::Added(slice) | Change::Updated { new: slice, .. } => {
                self.slice_updated(slice.clone());
            }
            Change::Deleted { last, .. } => self.slice_deleted(last),
        }
    }

    /// Applies one change of this node's informer; a deleted node keeps its last addresses
    /// and is no longer eligible.
    pub fn node_changed(&mut self, change: &Change<Node>) {
        match change {
            Change::Added(node) | Change::Updated { new: node, .. } => self.node_updated(node),
            Change::Deleted { .. } => self.set_eligible(false),
        }
    }

    fn set_eligible(&mut self, eligible: bool) {
        if eligible != self.node_eligible {
            self.node_eligible = eligible;
            self.eligible_dirty = true;
        }
    }

    /// This node changed: its InternalIP and ExternalIP addresses are where NodePorts answer.
    pub fn node_updated(&mut self, node: &Node) {
        let mut ips: Vec<Ipv4Addr> = node
            .status
            .iter()
            .flat_map(|s| s.addresses.iter().flatten())
            .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        ips.sort();
        ips.dedup();
        if ips != self.node_ips {
            self.node_ips = ips;
            self.node_dirty = true;
            self.queued_at.get_or_insert_with(Instant::now);
        }
        let deleting = node.metadata.deletion_timestamp.is_some();
        let to_be_deleted = node
            .spec
            .iter()
            .flat_map(|s| s.taints.iter().flatten())
            .any(|t| t.key == TO_BE_DELETED_TAINT);
        self.set_eligible(!deleting && !to_be_deleted);
    }

    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty() || self.node_dirty || self.eligible_dirty
    }

    /// The changed Services' ports as they are now, clearing the dirty marks.
    pub fn take(&mut self) -> Changes {
        let dirty = std::mem::take(&mut self.dirty);
        let services = dirty
            .into_iter()
            .map(|key| {
                let ports = match self.services.get(&key) {
                    Some(service) => {
                        let slices = self.slices.get(&key);
                        let slices = slices.into_iter().flat_map(|s| s.values().map(Arc::as_ref));
                        service_ports(service, slices, &self.node_name)
                    }
                    None => Vec::new(),
                };
                (key, ports)
            })
            .collect();
        let node_ips = std::mem::take(&mut self.node_dirty).then(|| self.node_ips.clone());
        let node_eligible = std::mem::take(&mut self.eligible_dirty).then_some(self.node_eligible);
        Changes {
            services,
            node_ips,
            queued_at: self.queued_at.take(),
            node_eligible,
        }
    }
}

fn object_key(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<ServiceKey> {
    Some(ServiceKey::new(
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref()?,
    ))
}

fn slice_key(slice: &EndpointSlice) -> Option<(ServiceKey, String)> {
    let meta = &slice.metadata;
    let service = meta.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    Some((
        ServiceKey::new(meta.namespace.as_deref().unwrap_or("default"), service),
        meta.name.clone()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::{service, slice};
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus, Taint};

    #[test]
    fn a_slice_change_marks_only_its_service() {
        let mut tracker = ChangeTracker::new("n1");
        tracker.service_updated(Arc::new(service(
            "ns",
            "a",
            "10.43.0.1",
            &[("", "TCP", 80)],
        )));
        tracker.service_updated(Arc::new(service(
            "ns",
            "b",
            "10.43.0.2",
            &[("", "TCP", 80)],
        )));
        assert_eq!(tracker.take().services.len(), 2);
        assert!(!tracker.has_changes());
        let s = slice(
            "ns",
            "b",
            "b-1",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true)],
        );
        tracker.slice_updated(Arc::new(s));
        let changes = tracker.take();
        assert_eq!(
            changes.services.keys().collect::<Vec<_>>(),
            [&ServiceKey::new("ns", "b")]
        );
        assert_eq!(
            changes.services.values().next().unwrap()[0].endpoints.len(),
            1
        );
    }

    #[test]
    fn a_deleted_service_is_reported_with_no_ports() {
        let mut tracker = ChangeTracker::new("n1");
        let svc = service("ns", "a", "10.43.0.1", &[("", "TCP", 80)]);
        tracker.service_updated(Arc::new(svc.clone()));
        tracker.take();
        tracker.service_deleted(&svc);
        let changes = tracker.take();
        assert_eq!(changes.services[&ServiceKey::new("ns", "a")], Vec::new());
    }

    #[test]
    fn a_slice_relabelled_to_another_service_leaves_the_first() {
        let mut tracker = ChangeTracker::new("n1");
        tracker.service_updated(Arc::new(service(
            "ns",
            "a",
            "10.43.0.1",
            &[("", "TCP", 80)],
        )));
        tracker.service_updated(Arc::new(service(
            "ns",
            "b",
            "10.43.0.2",
            &[("", "TCP", 80)],
        )));
        let s = slice(
            "ns",
            "a",
            "moving",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true)],
        );
        tracker.slice_updated(Arc::new(s.clone()));
        tracker.take();
        let mut moved = s;
        moved.metadata.labels = Some([(SERVICE_NAME_LABEL.to_string(), "b".to_string())].into());
        tracker.slice_updated(Arc::new(moved));
        let changes = tracker.take();
        assert!(
            changes.services[&ServiceKey::new("ns", "a")][0]
                .endpoints
                .is_empty()
        );
        assert_eq!(
            changes.services[&ServiceKey::new("ns", "b")][0]
                .endpoints
                .len(),
            1
        );
    }

    #[test]
    fn informer_changes_apply_and_a_tombstone_removes() {
        let mut tracker = ChangeTracker::new("n1");
        let svc = Arc::new(service("ns", "a", "10.43.0.1", &[("", "TCP", 80)]));
        let s = Arc::new(slice(
            "ns",
            "a",
            "a-1",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true)],
        ));
        tracker.service_changed(&Change::Added(svc.clone()));
        tracker.slice_changed(&Change::Added(s.clone()));
        let key = ServiceKey::new("ns", "a");
        assert_eq!(tracker.take().services[&key][0].endpoints.len(), 1);

        let mut on_n2 = s.as_ref().clone();
        on_n2.endpoints[0].node_name = Some("n2".to_string());
        tracker.slice_changed(&Change::Updated {
            old: s.clone(),
            new: Arc::new(on_n2.clone()),
        });
        assert!(!tracker.take().services[&key][0].endpoints[0].local);

        // a relist after the watch was down no longer has the slice: its tombstone
        tracker.slice_changed(&Change::Deleted {
            last: Arc::new(on_n2),
            final_state_unknown: true,
        });
        assert!(tracker.take().services[&key][0].endpoints.is_empty());
        tracker.service_changed(&Change::Deleted {
            last: svc,
            final_state_unknown: true,
        });
        assert_eq!(tracker.take().services[&key], Vec::new());
        assert!(tracker.services.is_empty() && tracker.slices.is_empty());
        assert!(tracker.slice_owners.is_empty());
    }

    #[test]
    fn node_changes_update_its_addresses() {
        let mut tracker = ChangeTracker::new("n1");
        let address = |type_: &str, address: &str| NodeAddress {
            type_: type_.to_string(),
            address: address.to_string(),
        };
        let node = Arc::new(Node {
            status: Some(NodeStatus {
                addresses: Some(vec![
                    address("InternalIP", "192.168.0.2"),
                    address("Hostname", "n1"),
                ]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        });
        tracker.node_changed(&Change::Added(node.clone()));
        let changes = tracker.take();
        assert_eq!(changes.node_ips, Some(vec![Ipv4Addr::new(192, 168, 0, 2)]));
        assert!(changes.queued_at.is_some());
        assert_eq!(changes.node_eligible, None, "eligible from the start");

        // tainted by the autoscaler: no longer eligible, the addresses unchanged
        let mut tainted = (*node).clone();
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: TO_BE_DELETED_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }]),
            ..NodeSpec::default()
        });
        tracker.node_changed(&Change::Updated {
            old: node.clone(),
            new: Arc::new(tainted),
        });
        let changes = tracker.take();
        assert_eq!(
            (changes.node_ips, changes.node_eligible),
            (None, Some(false))
        );
        tracker.node_changed(&Change::Updated {
            old: node.clone(),
            new: node.clone(),
        });
        assert_eq!(tracker.take().node_eligible, Some(true));

        // deleted: it keeps its addresses and is no longer eligible
        tracker.node_changed(&Change::Deleted {
            last: node,
            final_state_unknown: false,
        });
        let changes = tracker.take();
        assert_eq!(
            (changes.node_ips, changes.node_eligible),
            (None, Some(false))
        );
        assert!(!tracker.has_changes());
    }

    #[test]
    fn slices_without_a_service_label_are_ignored() {
        let mut tracker = ChangeTracker::new("n1");
        let mut s = slice(
            "ns",
            "b",
            "b-1",
            ("", "TCP", 80),
            &[("10.42.0.2", "n1", true)],
        );
        s.metadata.labels = None;
        tracker.slice_updated(Arc::new(s));
        assert!(!tracker.has_changes());
    }
}
