//! The pod network across nodes, as flannel's backends run it: on this node, whatever makes
//! every other Node's pod CIDR reachable, and a masquerade chain, `SKIFF-POSTROUTING`, for
//! traffic from the cluster CIDR to outside it. Two backends ([`Backend`]), k3s's
//! `--flannel-backend` values:
//! - [`vxlan`] (the default, as k3s's): an overlay. A VXLAN device `flannel.1` whose address
//!   and MAC the Node publishes in flannel's annotations; for every other Node that publishes
//!   them, a route to its pod CIDR through the device, a permanent neighbour (ARP) entry for
//!   its VTEP address and a forwarding (FDB) entry sending its VTEP MAC to its public IP. Nodes
//!   only need to reach each other by IP (UDP 8472), across routers too.
//! - [`host_gw`]: a route `podCIDR via InternalIP` for every other Node whose InternalIP is on a
//!   network this host is directly attached to; no encapsulation, one L2 network.
//!
//! It runs inside the kubelet (as k3s's agent runs flannel in its own process): the kubelet is
//! on every real node and already knows its node name, and the routes only make sense next to
//! the CNI bridge the kubelet configures (whose own masquerading it replaces). Both backends'
//! routes carry [`ROUTE_PROTOCOL`] (as routing daemons such as calico's bird mark theirs), so
//! it only ever deletes routes it made, and it leaves a pod CIDR alone when another route
//! already claims it; the VXLAN device is Skiff's own, so every neighbour and FDB entry on it
//! is too. Nodes come from the kubelet's shared Node informer (no polling); every change
//! recomputes what is wanted and applies the difference (one mechanism for both backends:
//! [`PodNetwork::sync`]).
//!
//! # Layout
//! - [`routes`]: the route table: Skiff's routes against the wanted ones.
//! - [`host_gw`]: the peers and routes of the host-gw backend.
//! - [`vxlan`]: the VXLAN device, the Node annotations, and the peers, routes, neighbour and
//!   FDB entries of the vxlan backend.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use skiff_runtime::informer::{Change, Informers};
use tokio::sync::Notify;

use crate::podnet_runner::{self, Cmd, Runner};

pub mod host_gw;
pub mod routes;
pub mod vxlan;

pub use routes::{Route, RouteChanges};
pub use vxlan::Vxlan;

/// The route protocol number Skiff's routes carry (`ip route … proto 83`, 'S'); not one of
/// iproute2's named protocols.
pub const ROUTE_PROTOCOL: &str = "83";

/// The nat chain holding the masquerade rules, jumped to from POSTROUTING.
pub const CHAIN: &str = "SKIFF-POSTROUTING";

const JUMP_COMMENT: &str = "skiff: pod network masquerade";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid --cluster-cidr {0:?}: want an IPv4 CIDR such as 10.42.0.0/16")]
    ClusterCidr(String),
    #[error("invalid pod CIDR {0:?}: the vxlan backend wants an IPv4 CIDR")]
    PodCidr(String),
    #[error("the vxlan backend needs an IPv4 node IP, not {0}")]
    NodeIp(IpAddr),
    #[error("no interface of this host has the node IP {0}, which VXLAN packets leave from")]
    NoInterface(Ipv4Addr),
    #[error("the VXLAN device {0} has no MAC address")]
    NoMac(String),
    #[error(transparent)]
    Run(#[from] podnet_runner::Error),
    #[error("reading the output of {command}: {source}")]
    Parse {
        command: String,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An IPv4 address with a prefix length: a network (`10.42.1.0/24`) or an interface address
/// with its network (`10.250.0.2/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ipv4Net {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Net {
    /// `a.b.c.d/n`; `None` for anything else (IPv6 included).
    pub fn parse(text: &str) -> Option<Ipv4Net> {
        let (addr, prefix) = text.split_once('/')?;
        let prefix: u8 = prefix.parse().ok()?;
        (prefix <= 32).then_some(Ipv4Net {
            addr: addr.parse().ok()?,
            prefix,
        })
    }

    fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32 - u32::from(self.prefix))
            .unwrap_or(0)
    }

    /// The network itself (host bits cleared), as `ip route` names it.
    pub fn network(&self) -> Ipv4Net {
        Ipv4Net {
            addr: Ipv4Addr::from(u32::from(self.addr) & self.mask()),
            prefix: self.prefix,
        }
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) ^ u32::from(self.addr)) & self.mask() == 0
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// flannel's Node annotations (its kube subnet manager's, prefix `flannel.alpha.coreos.com`):
/// the backend a Node runs, what its peers need of it (vxlan: its VTEP) and its address.
pub const ANN_BACKEND_TYPE: &str = "flannel.alpha.coreos.com/backend-type";
pub const ANN_BACKEND_DATA: &str = "flannel.alpha.coreos.com/backend-data";
pub const ANN_PUBLIC_IP: &str = "flannel.alpha.coreos.com/public-ip";
pub const ANN_KUBE_SUBNET_MANAGER: &str = "flannel.alpha.coreos.com/kube-subnet-manager";

/// The annotations a Node running `backend_type` publishes, as flannel writes them.
fn flannel_annotations(
    backend_type: &str,
    backend_data: String,
    public_ip: IpAddr,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ANN_BACKEND_TYPE.into(), backend_type.into()),
        (ANN_BACKEND_DATA.into(), backend_data),
        (ANN_PUBLIC_IP.into(), public_ip.to_string()),
        (ANN_KUBE_SUBNET_MANAGER.into(), "true".into()),
    ])
}

/// Another Node as the pod network reaches it: the address its pods are reached through
/// (host-gw: its InternalIP; vxlan: the public IP it published) and, for vxlan, the MAC of its
/// VTEP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub ip: Ipv4Addr,
    pub vtep_mac: Option<String>,
}

/// Every other Node, by its pod CIDR (as a network), that `peer` makes a [`Peer`] of.
fn peers_by_cidr<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    me: &str,
    peer: impl Fn(&Node) -> Option<Peer>,
) -> BTreeMap<Ipv4Net, Peer> {
    nodes
        .into_iter()
        .filter(|node| node.metadata.name.as_deref() != Some(me))
        .filter_map(|node| {
            let cidr = node
                .spec
                .as_ref()
                .and_then(|s| s.pod_cidr.as_deref())
                .and_then(Ipv4Net::parse)?;
            Some((cidr.network(), peer(node)?))
        })
        .collect()
}

/// How this node reaches other nodes' pods (k3s's `--flannel-backend`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// Routes via the other nodes' InternalIPs, on a shared L2 network ([`host_gw`]);
    /// `public_ip` is the node IP it publishes.
    HostGw { public_ip: IpAddr },
    /// The VXLAN overlay through this node's device ([`vxlan`]).
    Vxlan(Vxlan),
}

/// A link as `ip -j -4 addr show` lists it.
#[derive(Debug, Deserialize)]
struct LinkJson {
    ifname: String,
    #[serde(default)]
    mtu: u32,
    #[serde(default)]
    addr_info: Vec<AddrJson>,
}

#[derive(Debug, Deserialize)]
struct AddrJson {
    family: String,
    local: String,
    prefixlen: u8,
}

impl LinkJson {
    fn addresses(&self) -> impl Iterator<Item = Ipv4Net> + '_ {
        self.addr_info
            .iter()
            .filter(|a| a.family == "inet")
            .filter_map(|a| {
                Some(Ipv4Net {
                    addr: a.local.parse().ok()?,
                    prefix: a.prefixlen,
                })
            })
    }
}

/// This host's links with their IPv4 addresses.
async fn links(runner: &dyn Runner) -> Result<Vec<LinkJson>> {
    json(runner, &Cmd::new("ip", &["-j", "-4", "addr", "show"])).await
}

/// Runs `cmd` and reads its JSON output (no output reads as an empty list).
async fn json<T: serde::de::DeserializeOwned>(runner: &dyn Runner, cmd: &Cmd) -> Result<T> {
    let out = runner.run(cmd).await?;
    let out = if out.trim().is_empty() { "[]" } else { &out };
    serde_json::from_str(out).map_err(|source| Error::Parse {
        command: cmd.line(),
        source,
    })
}

/// The pod network of one node, over a [`Runner`].
pub struct PodNetwork {
    runner: Arc<dyn Runner>,
    node_name: String,
    cluster_cidr: Ipv4Net,
    backend: Backend,
    /// The peers the last successful sync was for: a sync for the same peers is skipped
    /// without running anything (every Node heartbeat is a watch event).
    synced: Option<BTreeMap<Ipv4Net, Peer>>,
}

impl PodNetwork {
    pub fn new(
        runner: Arc<dyn Runner>,
        node_name: &str,
        cluster_cidr: &str,
        backend: Backend,
    ) -> Result<PodNetwork> {
        let cidr = Ipv4Net::parse(cluster_cidr)
            .ok_or_else(|| Error::ClusterCidr(cluster_cidr.into()))?
            .network();
        Ok(PodNetwork {
            runner,
            node_name: node_name.into(),
            cluster_cidr: cidr,
            backend,
            synced: None,
        })
    }

    /// The MTU of the pods' interfaces and the CNI bridge: the VXLAN device's, which leaves
    /// room for the encapsulation; none (the default) for host-gw.
    pub fn pod_mtu(&self) -> Option<u32> {
        match &self.backend {
            Backend::HostGw { .. } => None,
            Backend::Vxlan(vxlan) => Some(vxlan.mtu),
        }
    }

    /// The annotations this node publishes on its Node (flannel's): the vxlan backend's VTEP,
    /// which the other nodes need; host-gw's type (backend data `null`, as flannel's), so that a
    /// node switched from vxlan is no VXLAN peer any more.
    pub fn node_annotations(&self) -> BTreeMap<String, String> {
        match &self.backend {
            Backend::HostGw { public_ip } => {
                flannel_annotations("host-gw", "null".into(), *public_ip)
            }
            Backend::Vxlan(vxlan) => vxlan.annotations(),
        }
    }

    /// Brings the host in line with `nodes`: removes what Skiff made for Nodes that are gone
    /// or changed, adds what the others need, and skips the pod CIDRs another route claims.
    /// Does nothing when no other Node's pod CIDR or address changed since the last
    /// successful sync.
    pub async fn sync<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a Node>,
    ) -> Result<RouteChanges> {
        let runner = self.runner.as_ref();
        let peers = match &self.backend {
            Backend::HostGw { .. } => host_gw::peers(nodes, &self.node_name),
            Backend::Vxlan(vxlan) => vxlan.peers(nodes, &self.node_name),
        };
        if self.synced.as_ref() == Some(&peers) {
            return Ok(RouteChanges::default());
        }
        let changes = match &self.backend {
            Backend::HostGw { .. } => {
                let local: Vec<Ipv4Net> = links(runner)
                    .await?
                    .iter()
                    .flat_map(LinkJson::addresses)
                    .collect();
                routes::sync(runner, &host_gw::wanted_routes(&peers, &local)).await?
            }
            Backend::Vxlan(vxlan) => vxlan.sync(runner, &peers).await?,
        };
        self.synced = Some(peers);
        Ok(changes)
    }

    /// The masquerade chain, rewritten whole (`iptables-restore --noflush` flushes a chain it
    /// declares and leaves the rest of the table alone), and POSTROUTING's jump to it, added
    /// once: traffic between pods keeps its source (no masquerade across nodes); traffic from a
    /// pod to outside the cluster CIDR, multicast excepted, leaves with the node's address.
    pub async fn ensure_masquerade(&self) -> Result<()> {
        let cc = self.cluster_cidr;
        let rules = format!(
            "*nat\n\
             :{CHAIN} - [0:0]\n\
             -A {CHAIN} -s {cc} -d {cc} -m comment --comment \"skiff: pod to pod, kept\" -j RETURN\n\
             -A {CHAIN} -s {cc} ! -d 224.0.0.0/4 -m comment --comment \"skiff: pods leaving the cluster CIDR\" -j MASQUERADE --random-fully\n\
             COMMIT\n"
        );
        self.runner
            .run(&Cmd::new("iptables-restore", &["-w", "--noflush"]).stdin(rules))
            .await?;
        let jump = |op: &str| {
            Cmd::new(
                "iptables",
                &[
                    "-w",
                    "-t",
                    "nat",
                    op,
                    "POSTROUTING",
                    "-m",
                    "comment",
                    "--comment",
                    JUMP_COMMENT,
                    "-j",
                    CHAIN,
                ],
            )
        };
        match self.runner.run(&jump("-C")).await {
            Ok(_) => Ok(()),
            Err(podnet_runner::Error::Failed { .. }) => {
                self.runner.run(&jump("-A")).await?;
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Sets up masquerading, then keeps the host in line with the Nodes of the shared Node
/// informer, for as long as the task runs: once its cache is ready, and after every change. A
/// failed sync is logged and retried on the next change (Node heartbeats bring one every few
/// seconds).
pub async fn run(informers: Informers, mut network: PodNetwork) {
    if let Err(error) = network.ensure_masquerade().await {
        tracing::error!(%error, "podnet: setting up masquerading failed");
    }
    let nodes = informers.get::<Node>();
    nodes.cache().wait_until_ready().await;
    let changed = Arc::new(Notify::new());
    nodes.add_handler({
        let changed = changed.clone();
        move |_: &Change<Node>| changed.notify_one()
    });
    // the cached Nodes the handler was first handed are read below anyway
    let _ = changed.notified().now_or_never();
    loop {
        let state = nodes.cache().state();
        match network.sync(state.iter().map(|n| n.as_ref())).await {
            Ok(changes) => {
                for (dst, route) in &changes.replaced {
                    tracing::info!(%dst, %route, "podnet: route to a node's pods");
                }
                for dst in &changes.deleted {
                    tracing::info!(%dst, "podnet: removed the route of a node that is gone");
                }
                for dst in &changes.conflicting {
                    tracing::warn!(%dst, "podnet: another route claims this pod CIDR; left alone");
                }
            }
            Err(error) => tracing::warn!(%error, "podnet: syncing the pod network failed"),
        }
        changed.notified().await;
    }
}

#[cfg(test)]
pub(crate) mod tests;
