//! The pod network across nodes, host-gw style (flannel's `host-gw` backend): on this node, a
//! route `podCIDR via InternalIP` for every other Node whose InternalIP is on a network this host
//! is directly attached to, so pods reach pods on other nodes without an overlay; and a
//! masquerade chain, `SKIFF-POSTROUTING`, for traffic from the cluster CIDR to outside it.
//!
//! It runs inside the kubelet (`--flannel-backend host-gw`, as k3s's agent runs flannel in its
//! own process): the kubelet is on every real node and already knows its node name, and the
//! routes only make sense next to the CNI bridge the kubelet configures (whose own masquerading
//! it replaces); one module needs no crate of its own. Its routes carry [`ROUTE_PROTOCOL`] (as
//! routing daemons such as calico's bird mark theirs), so it only ever deletes routes it
//! made, and it leaves a pod CIDR alone when another route already claims it. Nodes come from the
//! kubelet's shared Node informer (no polling); every change recomputes the wanted routes and
//! applies the difference.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;
use skiff_runtime::informer::{Change, Informers};
use tokio::sync::Notify;

use crate::podnet_runner::{self, Cmd, Runner};

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

/// Every other Node's pod CIDR (as a network) with its InternalIP: what the routes depend on.
pub fn peers<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    me: &str,
) -> BTreeMap<Ipv4Net, Ipv4Addr> {
    nodes
        .into_iter()
        .filter(|node| node.metadata.name.as_deref() != Some(me))
        .filter_map(|node| {
            let cidr = node
                .spec
                .as_ref()
                .and_then(|s| s.pod_cidr.as_deref())
                .and_then(Ipv4Net::parse)?;
            Some((cidr.network(), internal_ip(node)?))
        })
        .collect()
}

/// The routes this node should have: the peers whose InternalIP is on one of `local`'s
/// networks (directly reachable, as host-gw requires) and is not one of this host's own
/// addresses.
pub fn wanted_routes(
    peers: &BTreeMap<Ipv4Net, Ipv4Addr>,
    local: &[Ipv4Net],
) -> BTreeMap<Ipv4Net, Ipv4Addr> {
    peers
        .iter()
        .filter(|(_, ip)| {
            let ours = ip.is_loopback() || local.iter().any(|l| l.addr == **ip);
            let reachable = local
                .iter()
                .any(|l| !l.addr.is_loopback() && l.contains(**ip));
            !ours && reachable
        })
        .map(|(cidr, ip)| (*cidr, *ip))
        .collect()
}

fn internal_ip(node: &Node) -> Option<Ipv4Addr> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")?
        .address
        .parse()
        .ok()
}

/// A link as `ip -j addr show` lists it.
#[derive(Debug, Deserialize)]
struct LinkJson {
    #[serde(default)]
    addr_info: Vec<AddrJson>,
}

#[derive(Debug, Deserialize)]
struct AddrJson {
    family: String,
    local: String,
    prefixlen: u8,
}

/// A route as `ip -j route show` lists it.
#[derive(Debug, Deserialize)]
struct RouteJson {
    dst: String,
    gateway: Option<String>,
}

/// What one route sync changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RouteChanges {
    /// Routes added or pointed at a new gateway.
    pub replaced: Vec<(Ipv4Net, Ipv4Addr)>,
    /// Skiff's routes to pod CIDRs no Node (reachable from here) has any more.
    pub deleted: Vec<Ipv4Net>,
    /// Pod CIDRs another route (not Skiff's) already claims: left alone.
    pub conflicting: Vec<Ipv4Net>,
}

/// The host-gw dataplane of one node, over a [`Runner`].
pub struct HostGw {
    runner: Arc<dyn Runner>,
    node_name: String,
    cluster_cidr: Ipv4Net,
    /// The peers the last successful sync was for: a sync for the same peers is skipped
    /// without running anything (every Node heartbeat is a watch event).
    synced: Option<BTreeMap<Ipv4Net, Ipv4Addr>>,
}

impl HostGw {
    pub fn new(runner: Arc<dyn Runner>, node_name: &str, cluster_cidr: &str) -> Result<HostGw> {
        let cidr = Ipv4Net::parse(cluster_cidr)
            .ok_or_else(|| Error::ClusterCidr(cluster_cidr.into()))?
            .network();
        Ok(HostGw {
            runner,
            node_name: node_name.into(),
            cluster_cidr: cidr,
            synced: None,
        })
    }

    /// This host's IPv4 addresses with their networks.
    pub async fn local_addresses(&self) -> Result<Vec<Ipv4Net>> {
        let cmd = Cmd::new("ip", &["-j", "-4", "addr", "show"]);
        let links: Vec<LinkJson> = self.json(&cmd).await?;
        Ok(links
            .iter()
            .flat_map(|l| &l.addr_info)
            .filter(|a| a.family == "inet")
            .filter_map(|a| {
                Some(Ipv4Net {
                    addr: a.local.parse().ok()?,
                    prefix: a.prefixlen,
                })
            })
            .collect())
    }

    /// Brings the routes in line with `nodes`: deletes Skiff's routes no Node wants, adds or
    /// re-points the wanted ones, and skips the pod CIDRs another route claims. Does nothing
    /// when no Node's pod CIDR or InternalIP changed since the last successful sync.
    pub async fn sync_routes<'a>(
        &mut self,
        nodes: impl IntoIterator<Item = &'a Node>,
    ) -> Result<RouteChanges> {
        let peers = peers(nodes, &self.node_name);
        if self.synced.as_ref() == Some(&peers) {
            return Ok(RouteChanges::default());
        }
        let local = self.local_addresses().await?;
        let wanted = wanted_routes(&peers, &local);
        let ours = self.routes(Some(ROUTE_PROTOCOL)).await?;
        let others: BTreeSet<Ipv4Net> = self
            .routes(None)
            .await?
            .into_keys()
            .filter(|dst| !ours.contains_key(dst))
            .collect();
        let mut changes = RouteChanges::default();
        for dst in ours.keys().filter(|dst| !wanted.contains_key(dst)) {
            let dst_text = dst.to_string();
            self.runner
                .run(&Cmd::new(
                    "ip",
                    &["route", "del", &dst_text, "proto", ROUTE_PROTOCOL],
                ))
                .await?;
            changes.deleted.push(*dst);
        }
        for (dst, gateway) in &wanted {
            if ours.get(dst) == Some(&Some(*gateway)) {
                continue;
            }
            if others.contains(dst) {
                changes.conflicting.push(*dst);
                continue;
            }
            let (dst_text, via) = (dst.to_string(), gateway.to_string());
            self.runner
                .run(&Cmd::new(
                    "ip",
                    &[
                        "route",
                        "replace",
                        &dst_text,
                        "via",
                        &via,
                        "proto",
                        ROUTE_PROTOCOL,
                    ],
                ))
                .await?;
            changes.replaced.push((*dst, *gateway));
        }
        self.synced = Some(peers);
        Ok(changes)
    }

    /// The main table's IPv4 routes (only those with `protocol`, if given), by destination.
    async fn routes(&self, protocol: Option<&str>) -> Result<BTreeMap<Ipv4Net, Option<Ipv4Addr>>> {
        let mut args = vec!["-j", "-4", "route", "show", "table", "main"];
        if let Some(p) = protocol {
            args.extend(["proto", p]);
        }
        let routes: Vec<RouteJson> = self.json(&Cmd::new("ip", &args)).await?;
        Ok(routes
            .iter()
            .filter_map(|r| {
                let dst = Ipv4Net::parse(&r.dst)?;
                Some((dst, r.gateway.as_deref().and_then(|g| g.parse().ok())))
            })
            .collect())
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

    async fn json<T: serde::de::DeserializeOwned>(&self, cmd: &Cmd) -> Result<T> {
        let out = self.runner.run(cmd).await?;
        let out = if out.trim().is_empty() { "[]" } else { &out };
        serde_json::from_str(out).map_err(|source| Error::Parse {
            command: cmd.line(),
            source,
        })
    }
}

/// Sets up masquerading, then keeps the routes in line with the Nodes of the shared Node
/// informer, for as long as the task runs: once its cache is ready, and after every change. A
/// failed sync is logged and retried on the next change (Node heartbeats bring one every few
/// seconds).
pub async fn run(informers: Informers, mut host_gw: HostGw) {
    if let Err(error) = host_gw.ensure_masquerade().await {
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
        match host_gw.sync_routes(state.iter().map(|n| n.as_ref())).await {
            Ok(changes) => {
                for (dst, via) in &changes.replaced {
                    tracing::info!(%dst, %via, "podnet: route to a node's pods");
                }
                for dst in &changes.deleted {
                    tracing::info!(%dst, "podnet: removed the route of a node that is gone");
                }
                for dst in &changes.conflicting {
                    tracing::warn!(%dst, "podnet: another route claims this pod CIDR; left alone");
                }
            }
            Err(error) => tracing::warn!(%error, "podnet: syncing routes failed"),
        }
        changed.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;

    use super::*;
    use crate::podnet_runner::RecordingRunner;

    fn node(name: &str, cidr: Option<&str>, ip: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: cidr.map(Into::into),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]),
                ..Default::default()
            }),
        }
    }

    fn net(text: &str) -> Ipv4Net {
        Ipv4Net::parse(text).unwrap()
    }

    fn ip(text: &str) -> Ipv4Addr {
        text.parse().unwrap()
    }

    const ADDRS: &str = "ip -j -4 addr show";
    const OURS: &str = "ip -j -4 route show table main proto 83";
    const ALL: &str = "ip -j -4 route show table main";

    fn host() -> (Arc<RecordingRunner>, HostGw) {
        let runner = Arc::new(RecordingRunner::default());
        runner.answer(
            ADDRS,
            r#"[{"ifname":"lo","addr_info":[{"family":"inet","local":"127.0.0.1","prefixlen":8}]},
                {"ifname":"eth0","addr_info":[{"family":"inet","local":"10.250.0.2","prefixlen":24}]}]"#,
        );
        let host_gw = HostGw::new(runner.clone(), "a", "10.42.0.0/16").unwrap();
        (runner, host_gw)
    }

    #[test]
    fn other_nodes_on_a_directly_attached_network_get_a_route_to_their_pod_cidr() {
        let local = [net("127.0.0.1/8"), net("10.250.0.2/24")];
        let nodes = [
            node("a", Some("10.42.0.0/24"), "10.250.0.2"),
            node("b", Some("10.42.1.0/24"), "10.250.0.3"),
            node("far", Some("10.42.2.0/24"), "192.168.7.3"),
            node("no-cidr", None, "10.250.0.4"),
            node("loopback", Some("10.42.3.0/24"), "127.0.0.1"),
            node("same-host", Some("10.42.4.0/24"), "10.250.0.2"),
            node("v6", Some("fd00::/64"), "10.250.0.5"),
            node("host-bits", Some("10.42.5.7/24"), "10.250.0.6"),
        ];
        assert_eq!(
            wanted_routes(&peers(&nodes, "a"), &local),
            BTreeMap::from([
                (net("10.42.1.0/24"), ip("10.250.0.3")),
                (net("10.42.5.0/24"), ip("10.250.0.6")),
            ])
        );
    }

    #[tokio::test]
    async fn a_sync_adds_a_marked_route_per_other_node() {
        let (runner, mut host_gw) = host();
        let nodes = [
            node("a", Some("10.42.0.0/24"), "10.250.0.2"),
            node("b", Some("10.42.1.0/24"), "10.250.0.3"),
        ];
        let changes = host_gw.sync_routes(&nodes).await.unwrap();
        assert_eq!(changes.replaced, [(net("10.42.1.0/24"), ip("10.250.0.3"))]);
        assert_eq!(
            runner.take_lines(),
            [
                ADDRS,
                OURS,
                ALL,
                "ip route replace 10.42.1.0/24 via 10.250.0.3 proto 83"
            ]
        );
    }

    #[tokio::test]
    async fn stale_and_moved_routes_are_fixed_and_foreign_ones_never_touched() {
        let (runner, mut host_gw) = host();
        runner.answer(
            OURS,
            r#"[{"dst":"10.42.1.0/24","gateway":"10.250.0.3"},
                {"dst":"10.42.2.0/24","gateway":"10.250.0.4"},
                {"dst":"10.42.9.0/24","gateway":"10.250.0.9"}]"#,
        );
        runner.answer(
            ALL,
            r#"[{"dst":"default","gateway":"10.250.0.1"},
                {"dst":"10.250.0.0/24","dev":"eth0"},
                {"dst":"10.42.0.0/24","dev":"cni0"},
                {"dst":"10.42.1.0/24","gateway":"10.250.0.3"},
                {"dst":"10.42.2.0/24","gateway":"10.250.0.4"},
                {"dst":"10.42.3.0/24","gateway":"10.250.0.77"},
                {"dst":"10.42.9.0/24","gateway":"10.250.0.9"}]"#,
        );
        let nodes = [
            node("a", Some("10.42.0.0/24"), "10.250.0.2"),
            // unchanged
            node("b", Some("10.42.1.0/24"), "10.250.0.3"),
            // its node has a new address
            node("c", Some("10.42.2.0/24"), "10.250.0.5"),
            // someone else's route already covers it
            node("d", Some("10.42.3.0/24"), "10.250.0.6"),
        ];
        let changes = host_gw.sync_routes(&nodes).await.unwrap();
        assert_eq!(
            changes,
            RouteChanges {
                replaced: vec![(net("10.42.2.0/24"), ip("10.250.0.5"))],
                deleted: vec![net("10.42.9.0/24")],
                conflicting: vec![net("10.42.3.0/24")],
            }
        );
        assert_eq!(
            runner.take_lines()[3..],
            [
                "ip route del 10.42.9.0/24 proto 83",
                "ip route replace 10.42.2.0/24 via 10.250.0.5 proto 83",
            ]
        );
    }

    #[tokio::test]
    async fn a_deleted_node_loses_its_route_and_unchanged_nodes_cost_nothing() {
        let (runner, mut host_gw) = host();
        let b = node("b", Some("10.42.1.0/24"), "10.250.0.3");
        host_gw.sync_routes([&b]).await.unwrap();
        runner.take_lines();

        host_gw.sync_routes([&b]).await.unwrap();
        assert!(runner.take_lines().is_empty());

        runner.answer(OURS, r#"[{"dst":"10.42.1.0/24","gateway":"10.250.0.3"}]"#);
        runner.answer(ALL, r#"[{"dst":"10.42.1.0/24","gateway":"10.250.0.3"}]"#);
        let changes = host_gw.sync_routes([]).await.unwrap();
        assert_eq!(changes.deleted, [net("10.42.1.0/24")]);
        assert_eq!(
            runner.take_lines()[3..],
            ["ip route del 10.42.1.0/24 proto 83"]
        );
    }

    #[tokio::test]
    async fn a_failed_route_change_is_retried_on_the_next_sync() {
        let (runner, mut host_gw) = host();
        let add = "ip route replace 10.42.1.0/24 via 10.250.0.3 proto 83";
        runner.failing.lock().insert(add.into());
        let b = node("b", Some("10.42.1.0/24"), "10.250.0.3");
        assert!(host_gw.sync_routes([&b]).await.is_err());
        runner.failing.lock().clear();
        runner.take_lines();
        host_gw.sync_routes([&b]).await.unwrap();
        assert_eq!(runner.take_lines().last().map(String::as_str), Some(add));
    }

    #[tokio::test]
    async fn masquerading_rewrites_its_own_chain_and_adds_the_jump_once() {
        let (runner, host_gw) = host();
        let check = "iptables -w -t nat -C POSTROUTING -m comment --comment skiff: pod network masquerade -j SKIFF-POSTROUTING";
        runner.failing.lock().insert(check.into());
        host_gw.ensure_masquerade().await.unwrap();
        let commands = runner.commands.lock().clone();
        assert_eq!(commands[0].line(), "iptables-restore -w --noflush");
        let rules = commands[0].stdin.clone().unwrap();
        assert!(
            rules.starts_with("*nat\n:SKIFF-POSTROUTING - [0:0]\n"),
            "{rules}"
        );
        assert!(rules.contains(
            "-A SKIFF-POSTROUTING -s 10.42.0.0/16 -d 10.42.0.0/16 -m comment --comment \"skiff: pod to pod, kept\" -j RETURN\n"
        ));
        assert!(rules.contains(
            "-A SKIFF-POSTROUTING -s 10.42.0.0/16 ! -d 224.0.0.0/4 -m comment --comment \"skiff: pods leaving the cluster CIDR\" -j MASQUERADE --random-fully\n"
        ));
        assert!(rules.ends_with("COMMIT\n"));
        assert_eq!(
            runner.take_lines()[1..],
            [check.to_string(), check.replace(" -C ", " -A ")]
        );

        // the jump is there now: only the chain is rewritten
        runner.failing.lock().clear();
        host_gw.ensure_masquerade().await.unwrap();
        assert_eq!(
            runner.take_lines(),
            ["iptables-restore -w --noflush", check]
        );
    }

    #[test]
    fn a_malformed_cluster_cidr_is_refused() {
        let runner = Arc::new(RecordingRunner::default());
        assert!(matches!(
            HostGw::new(runner, "a", "10.42.0.0"),
            Err(Error::ClusterCidr(_))
        ));
    }
}
