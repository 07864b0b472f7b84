//! The node's heartbeats, shared by the real kubelet and hollow ones: the Lease renewed every
//! 10 s, and the status re-read on the same tick and posted when it changed or 5 minutes
//! passed (upstream's split). Periods are jittered as upstream's `wait.JitterUntil` with factor
//! 0.04, and a first offset lets many nodes in one process spread their writes; unlike
//! upstream's sliding period, each tick is scheduled from the one before, not from the end of
//! its work, so that the spread survives a stall.

use crate::admission::NodeView;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::Api;

use crate::cri::ContainerRuntime;
use crate::host::HostInfo;
use crate::node;

/// Upstream's jitter factor for the lease and status loops: each wait is the period plus up
/// to 4 % of it.
pub const JITTER_FACTOR: f64 = 0.04;

/// Where a heartbeat's node status comes from.
#[async_trait]
pub trait StatusSource: Send + Sync + 'static {
    /// The node's status as of `now`; `posted` is the status last posted, for the parts that
    /// could not be read this time.
    async fn read(&self, posted: &NodeStatus, now: Timestamp) -> NodeStatus;
}

/// A real node's status: the host re-read and the runtime's images listed.
pub struct HostStatus {
    pub runtime: Arc<dyn ContainerRuntime>,
    pub runtime_version: String,
    pub node_ip: Option<std::net::IpAddr>,
    pub data_dir: std::path::PathBuf,
    /// The kubelet server's port, reported in `status.daemonEndpoints`.
    pub kubelet_port: u16,
    /// What the node keeps back from its capacity.
    pub reservation: node::Reservation,
}

#[async_trait]
impl StatusSource for HostStatus {
    async fn read(&self, posted: &NodeStatus, now: Timestamp) -> NodeStatus {
        let host = HostInfo::read(self.node_ip, &self.data_dir);
        let mut status = node::node_status(
            &host,
            &self.reservation,
            &self.runtime_version,
            self.kubelet_port,
            now,
        );
        match self.runtime.list_images().await {
            Ok(images) => status.images = Some(node::node_images(&images)),
            // keep what was posted rather than report no images
            Err(_) => status.images = posted.images.clone(),
        }
        status
    }
}

/// `period` lengthened by a random fraction of up to [`JITTER_FACTOR`].
pub fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + JITTER_FACTOR * fastrand::f64())
}

/// Renews the node's Lease and posts its status until aborted; the first tick comes after
/// `offset`, each later one after a jittered [`node::LEASE_RENEW`]. Each posted status's
/// reply (the whole Node) goes to `view`.
pub async fn run(
    client: kube::Client,
    view: NodeView,
    source: impl StatusSource,
    offset: Duration,
) {
    let node = view.get();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    let name = node.metadata.name.clone().unwrap_or_default();
    let mut lease = None;
    let mut posted = node.status.clone().unwrap_or_default();
    let mut posted_at = tokio::time::Instant::now();
    let mut next = tokio::time::Instant::now() + offset;
    loop {
        tokio::time::sleep_until(next).await;
        if let Err(e) = node::renew_lease(&leases, &node, &mut lease, Timestamp::now()).await {
            tracing::warn!(error = %e, "node lease");
        }
        let mut status = source.read(&posted, Timestamp::now()).await;
        if node::status_changed(&posted, &status) || posted_at.elapsed() >= node::STATUS_REPORT {
            node::keep_transition_times(&posted, &mut status);
            match node::post_status(&nodes, &name, &status).await {
                Ok(latest) => {
                    view.set(latest);
                    posted = status;
                    posted_at = tokio::time::Instant::now();
                }
                Err(e) => tracing::warn!(error = %e, "node status"),
            }
        }
        // the next tick keeps to this node's schedule rather than sliding from the end of this
        // one: after a stall (many nodes starting in one process), the late ticks bunch for one
        // round, not for every round after it
        next = (next + jittered(node::LEASE_RENEW)).max(tokio::time::Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_period_is_never_shorter_and_at_most_four_percent_longer() {
        let period = Duration::from_secs(10);
        for _ in 0..1000 {
            let d = jittered(period);
            assert!(d >= period && d <= Duration::from_millis(10_400), "{d:?}");
        }
    }
}
