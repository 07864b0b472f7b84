//! flannel's `vxlan` backend (k3s's default): an overlay over UDP, so that nodes only need to
//! reach each other by IP, across routers too.
//!
//! This node's VTEP is the device [`DEVICE`] (VNI [`VNI`], UDP port [`PORT`], no learning,
//! sending from the node IP's interface), addressed with its pod CIDR's network address as a
//! /32 and with an MTU [`OVERHEAD`] bytes below that interface's, which the pods' interfaces
//! get too. The Node publishes the device's MAC and the node IP in flannel's annotations
//! ([`Vxlan::annotations`]), so that flannel and Skiff nodes read each other. For every other
//! Node that publishes them (`backend-type: vxlan`) and has a pod CIDR, this node keeps:
//! - a route `podCIDR via <their VTEP address> dev flannel.1 onlink` (their pod CIDR's network
//!   address: the kernel sends to it through the device),
//! - a permanent neighbour entry `<their VTEP address> lladdr <their VTEP MAC>` on the device
//!   (no ARP over the overlay),
//! - a forwarding entry `<their VTEP MAC> dst <their public IP>` on the device (where the
//!   encapsulated frame goes).
//!
//! The device is Skiff's own, so the neighbour and forwarding entries on it that no Node wants
//! are stale and removed; the routes are kept by [`super::routes`].

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;
use serde::{Deserialize, Serialize};

use super::{
    ANN_BACKEND_DATA, ANN_BACKEND_TYPE, ANN_PUBLIC_IP, Error, Ipv4Net, Peer, Result, Route,
    RouteChanges, flannel_annotations, json, links, peers_by_cidr,
};
use crate::podnet_runner::{Cmd, Runner};

/// The VXLAN device (flannel's name for VNI 1).
pub const DEVICE: &str = "flannel.1";
/// The VXLAN network identifier (flannel's default).
pub const VNI: u32 = 1;
/// The UDP port (flannel's default, the Linux kernel's historical one; IANA's is 4789).
pub const PORT: u16 = 8472;
/// The bytes encapsulation adds to a frame: outer IPv4 (20), UDP (8), VXLAN (8) and inner
/// Ethernet (14) headers, as flannel's `encapOverhead`.
pub const OVERHEAD: u32 = 50;

/// `backend-data` of a vxlan Node, as flannel writes it: `{"VNI":1,"VtepMAC":"…"}`.
#[derive(Debug, Serialize, Deserialize)]
struct BackendData {
    #[serde(rename = "VNI")]
    vni: u32,
    #[serde(rename = "VtepMAC")]
    vtep_mac: String,
}

/// This node's VTEP, once [`Vxlan::setup`] made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vxlan {
    /// The node IP: where VXLAN packets leave from and other nodes send theirs.
    pub public_ip: Ipv4Addr,
    /// The device's MAC address (lowercase), which other nodes' forwarding entries name.
    pub vtep_mac: String,
    /// The device's MTU (the underlying interface's less [`OVERHEAD`]).
    pub mtu: u32,
}

impl Vxlan {
    /// Makes [`DEVICE`] what it should be for `node_ip` and `pod_cidr`: kept when it exists
    /// with the same VNI, local address, underlying interface, port and no learning (so its
    /// MAC, which other Nodes hold, stays), created again otherwise; then its MTU set, up, and
    /// its only address the pod CIDR's network address as a /32.
    pub async fn setup(runner: &dyn Runner, node_ip: Ipv4Addr, pod_cidr: &str) -> Result<Vxlan> {
        let vtep_addr = Ipv4Net::parse(pod_cidr)
            .ok_or_else(|| Error::PodCidr(pod_cidr.into()))?
            .network()
            .addr;
        let links = links(runner).await?;
        let underlay = links
            .iter()
            .find(|l| l.ifname != DEVICE && l.addresses().any(|a| a.addr == node_ip))
            .ok_or(Error::NoInterface(node_ip))?;
        let details: Vec<LinkDetails> =
            json(runner, &Cmd::new("ip", &["-j", "-d", "link", "show"])).await?;
        let existing = details.iter().find(|l| l.ifname == DEVICE);
        let kept = existing.is_some_and(|l| l.is_vtep(node_ip, &underlay.ifname));
        if !kept {
            if existing.is_some() {
                runner
                    .run(&Cmd::new("ip", &["link", "del", DEVICE]))
                    .await?;
            }
            let (vni, ip, port) = (VNI.to_string(), node_ip.to_string(), PORT.to_string());
            runner
                .run(&Cmd::new(
                    "ip",
                    &[
                        "link",
                        "add",
                        DEVICE,
                        "type",
                        "vxlan",
                        "id",
                        &vni,
                        "local",
                        &ip,
                        "dev",
                        &underlay.ifname,
                        "dstport",
                        &port,
                        "nolearning",
                    ],
                ))
                .await?;
        }
        let mtu = underlay.mtu.saturating_sub(OVERHEAD);
        let mtu_text = mtu.to_string();
        runner
            .run(&Cmd::new(
                "ip",
                &["link", "set", DEVICE, "mtu", &mtu_text, "up"],
            ))
            .await?;
        let wanted = Ipv4Net {
            addr: vtep_addr,
            prefix: 32,
        };
        if kept {
            let stale = links
                .iter()
                .filter(|l| l.ifname == DEVICE)
                .flat_map(|l| l.addresses())
                .filter(|a| *a != wanted);
            for addr in stale {
                let addr = addr.to_string();
                runner
                    .run(&Cmd::new("ip", &["addr", "del", &addr, "dev", DEVICE]))
                    .await?;
            }
        }
        let wanted = wanted.to_string();
        runner
            .run(&Cmd::new(
                "ip",
                &["addr", "replace", &wanted, "dev", DEVICE],
            ))
            .await?;
        let shown: Vec<LinkDetails> = json(
            runner,
            &Cmd::new("ip", &["-j", "link", "show", "dev", DEVICE]),
        )
        .await?;
        let vtep_mac = shown
            .first()
            .and_then(|l| l.address.as_deref())
            .and_then(parse_mac)
            .ok_or_else(|| Error::NoMac(DEVICE.into()))?;
        Ok(Vxlan {
            public_ip: node_ip,
            vtep_mac,
            mtu,
        })
    }

    /// flannel's annotations for this node, which other nodes (Skiff's or flannel's) build
    /// their routes, neighbour and forwarding entries from.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let data = BackendData {
            vni: VNI,
            vtep_mac: self.vtep_mac.clone(),
        };
        let data = serde_json::to_string(&data).expect("backend data serializes");
        flannel_annotations("vxlan", data, self.public_ip.into())
    }

    /// Every other Node that published a vxlan VTEP (a public IP that is not this node's, and
    /// a MAC), by its pod CIDR.
    pub fn peers<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a Node>,
        me: &str,
    ) -> BTreeMap<Ipv4Net, Peer> {
        peers_by_cidr(nodes, me, |node| {
            let annotations = node.metadata.annotations.as_ref()?;
            if annotations.get(ANN_BACKEND_TYPE)?.as_str() != "vxlan" {
                return None;
            }
            let data: BackendData =
                serde_json::from_str(annotations.get(ANN_BACKEND_DATA)?).ok()?;
            let ip: Ipv4Addr = annotations.get(ANN_PUBLIC_IP)?.parse().ok()?;
            (ip != self.public_ip).then_some(Peer {
                ip,
                vtep_mac: Some(parse_mac(&data.vtep_mac)?),
            })
        })
    }

    /// Adds the forwarding and neighbour entries the peers need, keeps the routes to their pod
    /// CIDRs, then removes the entries no peer needs any more: new entries exist before a
    /// route sends traffic to them, and a route is gone before its entries go.
    pub async fn sync(
        &self,
        runner: &dyn Runner,
        peers: &BTreeMap<Ipv4Net, Peer>,
    ) -> Result<RouteChanges> {
        let wanted = Wanted::of(peers);
        let fdb = self.fdb(runner).await?;
        let neighbours = self.neighbours(runner).await?;
        for (mac, dst) in &wanted.fdb {
            if fdb.get(mac) != Some(dst) {
                let dst = dst.to_string();
                runner
                    .run(&Cmd::new(
                        "bridge",
                        &[
                            "fdb",
                            "replace",
                            mac,
                            "dev",
                            DEVICE,
                            "dst",
                            &dst,
                            "self",
                            "permanent",
                        ],
                    ))
                    .await?;
            }
        }
        for (ip, mac) in &wanted.neighbours {
            if neighbours.get(ip) != Some(mac) {
                let ip = ip.to_string();
                runner
                    .run(&Cmd::new(
                        "ip",
                        &[
                            "neigh",
                            "replace",
                            &ip,
                            "lladdr",
                            mac,
                            "dev",
                            DEVICE,
                            "nud",
                            "permanent",
                        ],
                    ))
                    .await?;
            }
        }
        let changes = super::routes::sync(runner, &wanted.routes).await?;
        for ip in neighbours
            .keys()
            .filter(|ip| !wanted.neighbours.contains_key(ip))
        {
            let ip = ip.to_string();
            runner
                .run(&Cmd::new("ip", &["neigh", "del", &ip, "dev", DEVICE]))
                .await?;
        }
        for (mac, dst) in fdb.iter().filter(|(mac, _)| !wanted.fdb.contains_key(*mac)) {
            let dst = dst.to_string();
            runner
                .run(&Cmd::new(
                    "bridge",
                    &["fdb", "del", mac, "dev", DEVICE, "dst", &dst, "self"],
                ))
                .await?;
        }
        Ok(changes)
    }

    /// The device's permanent neighbour entries: VTEP address → MAC.
    async fn neighbours(&self, runner: &dyn Runner) -> Result<BTreeMap<Ipv4Addr, String>> {
        let cmd = Cmd::new("ip", &["-j", "-4", "neigh", "show", "dev", DEVICE]);
        let entries: Vec<NeighJson> = json(runner, &cmd).await?;
        Ok(entries
            .into_iter()
            .filter(|n| n.state.iter().any(|s| s == "PERMANENT"))
            .filter_map(|n| Some((n.dst.parse().ok()?, parse_mac(n.lladdr.as_deref()?)?)))
            .collect())
    }

    /// The device's forwarding entries with a destination: MAC → public IP.
    async fn fdb(&self, runner: &dyn Runner) -> Result<BTreeMap<String, Ipv4Addr>> {
        let cmd = Cmd::new("bridge", &["-j", "fdb", "show", "dev", DEVICE]);
        let entries: Vec<FdbJson> = json(runner, &cmd).await?;
        Ok(entries
            .into_iter()
            .filter_map(|e| Some((parse_mac(&e.mac)?, e.dst?.parse().ok()?)))
            .collect())
    }
}

/// What the peers need on this node.
#[derive(Debug, Default, PartialEq, Eq)]
struct Wanted {
    routes: BTreeMap<Ipv4Net, Route>,
    /// VTEP address → VTEP MAC.
    neighbours: BTreeMap<Ipv4Addr, String>,
    /// VTEP MAC → public IP.
    fdb: BTreeMap<String, Ipv4Addr>,
}

impl Wanted {
    fn of(peers: &BTreeMap<Ipv4Net, Peer>) -> Wanted {
        let mut wanted = Wanted::default();
        for (cidr, peer) in peers {
            let Some(mac) = &peer.vtep_mac else { continue };
            let vtep = cidr.network().addr;
            wanted.routes.insert(*cidr, Route::onlink(vtep, DEVICE));
            wanted.neighbours.insert(vtep, mac.clone());
            wanted.fdb.insert(mac.clone(), peer.ip);
        }
        wanted
    }
}

/// A link as `ip -j -d link show` lists it.
#[derive(Debug, Deserialize)]
struct LinkDetails {
    ifname: String,
    address: Option<String>,
    linkinfo: Option<LinkInfo>,
}

#[derive(Debug, Deserialize)]
struct LinkInfo {
    info_kind: Option<String>,
    #[serde(default)]
    info_data: serde_json::Value,
}

impl LinkDetails {
    /// Whether this is the VXLAN device [`Vxlan::setup`] would create.
    fn is_vtep(&self, local: Ipv4Addr, underlay: &str) -> bool {
        let Some(info) = &self.linkinfo else {
            return false;
        };
        let data = &info.info_data;
        info.info_kind.as_deref() == Some("vxlan")
            && data["id"] == VNI
            && data["local"] == local.to_string()
            && data["link"] == underlay
            && data["port"] == PORT
            && data["learning"] == false
    }
}

/// A neighbour entry as `ip -j neigh show` lists it.
#[derive(Debug, Deserialize)]
struct NeighJson {
    dst: String,
    lladdr: Option<String>,
    #[serde(default)]
    state: Vec<String>,
}

/// A forwarding entry as `bridge -j fdb show` lists it.
#[derive(Debug, Deserialize)]
struct FdbJson {
    mac: String,
    dst: Option<String>,
}

/// A MAC address `aa:bb:cc:dd:ee:ff` (any case), lowercase; `None` for anything else.
fn parse_mac(text: &str) -> Option<String> {
    let octets: Vec<&str> = text.split(':').collect();
    let valid = octets.len() == 6
        && octets
            .iter()
            .all(|o| o.len() == 2 && o.chars().all(|c| c.is_ascii_hexdigit()));
    valid.then(|| text.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::podnet::tests::{ADDRS, ALL, OURS, ip, net, node, runner};
    use crate::podnet::{Backend, PodNetwork};
    use crate::podnet_runner::RecordingRunner;

    const DETAILS: &str = "ip -j -d link show";
    const SHOW: &str = "ip -j link show dev flannel.1";
    const NEIGH: &str = "ip -j -4 neigh show dev flannel.1";
    const FDB: &str = "bridge -j fdb show dev flannel.1";
    const MAC_A: &str = "0a:00:00:00:00:0a";

    fn with_mac(runner: &RecordingRunner) {
        runner.answer(
            SHOW,
            r#"[{"ifname":"flannel.1","address":"0A:00:00:00:00:0A"}]"#,
        );
    }

    fn vtep() -> Vxlan {
        Vxlan {
            public_ip: ip("10.250.0.2"),
            vtep_mac: MAC_A.into(),
            mtu: 1450,
        }
    }

    /// A Node as a vxlan node publishes itself.
    fn vxlan_node(name: &str, cidr: &str, public_ip: &str, mac: &str) -> Node {
        let mut node = node(name, Some(cidr), public_ip);
        let published = Vxlan {
            public_ip: ip(public_ip),
            vtep_mac: mac.into(),
            mtu: 1450,
        };
        node.metadata.annotations = Some(published.annotations());
        node
    }

    fn network(runner: &Arc<RecordingRunner>) -> PodNetwork {
        PodNetwork::new(runner.clone(), "a", "10.42.0.0/16", Backend::Vxlan(vtep())).unwrap()
    }

    #[tokio::test]
    async fn setup_creates_the_device_on_the_node_ips_interface_with_room_for_the_encapsulation() {
        let runner = runner();
        with_mac(&runner);
        let vxlan = Vxlan::setup(runner.as_ref(), ip("10.250.0.2"), "10.42.3.0/24")
            .await
            .unwrap();
        assert_eq!(
            vxlan,
            Vxlan {
                public_ip: ip("10.250.0.2"),
                vtep_mac: MAC_A.into(),
                mtu: 1450
            }
        );
        assert_eq!(
            runner.take_lines(),
            [
                ADDRS,
                DETAILS,
                "ip link add flannel.1 type vxlan id 1 local 10.250.0.2 dev eth0 dstport 8472 nolearning",
                "ip link set flannel.1 mtu 1450 up",
                "ip addr replace 10.42.3.0/32 dev flannel.1",
                SHOW,
            ]
        );
    }

    #[tokio::test]
    async fn setup_keeps_a_matching_device_and_its_mac_and_drops_its_stale_addresses() {
        let runner = runner();
        with_mac(&runner);
        runner.answer(
            ADDRS,
            r#"[{"ifname":"eth0","mtu":9000,"addr_info":[{"family":"inet","local":"10.250.0.2","prefixlen":24}]},
                {"ifname":"flannel.1","mtu":8950,"addr_info":[{"family":"inet","local":"10.42.7.0","prefixlen":32},
                                                             {"family":"inet","local":"10.42.3.0","prefixlen":32}]}]"#,
        );
        runner.answer(
            DETAILS,
            r#"[{"ifname":"eth0","address":"52:54:00:00:00:01"},
                {"ifname":"flannel.1","address":"0a:00:00:00:00:0a","linkinfo":{"info_kind":"vxlan",
                 "info_data":{"id":1,"local":"10.250.0.2","link":"eth0","port":8472,"learning":false}}}]"#,
        );
        let vxlan = Vxlan::setup(runner.as_ref(), ip("10.250.0.2"), "10.42.3.0/24")
            .await
            .unwrap();
        assert_eq!(vxlan.mtu, 8950);
        assert_eq!(
            runner.take_lines()[2..],
            [
                "ip link set flannel.1 mtu 8950 up",
                "ip addr del 10.42.7.0/32 dev flannel.1",
                "ip addr replace 10.42.3.0/32 dev flannel.1",
                SHOW,
            ]
        );
    }

    #[tokio::test]
    async fn setup_replaces_a_device_made_for_another_address() {
        let runner = runner();
        with_mac(&runner);
        runner.answer(
            DETAILS,
            r#"[{"ifname":"flannel.1","linkinfo":{"info_kind":"vxlan",
                 "info_data":{"id":1,"local":"10.250.0.9","link":"eth0","port":8472,"learning":false}}}]"#,
        );
        Vxlan::setup(runner.as_ref(), ip("10.250.0.2"), "10.42.3.0/24")
            .await
            .unwrap();
        assert_eq!(
            runner.take_lines()[2..4],
            [
                "ip link del flannel.1",
                "ip link add flannel.1 type vxlan id 1 local 10.250.0.2 dev eth0 dstport 8472 nolearning",
            ]
        );
    }

    #[tokio::test]
    async fn setup_fails_when_no_interface_has_the_node_ip() {
        let runner = runner();
        let err = Vxlan::setup(runner.as_ref(), ip("192.168.9.9"), "10.42.3.0/24")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NoInterface(_)), "{err}");
        assert_eq!(
            err.to_string(),
            "no interface of this host has the node IP 192.168.9.9, which VXLAN packets leave from"
        );
    }

    #[test]
    fn the_node_publishes_flannels_annotations() {
        let network = network(&runner());
        assert_eq!(
            network.node_annotations(),
            BTreeMap::from([
                (
                    "flannel.alpha.coreos.com/backend-data".to_string(),
                    r#"{"VNI":1,"VtepMAC":"0a:00:00:00:00:0a"}"#.to_string()
                ),
                (
                    "flannel.alpha.coreos.com/backend-type".into(),
                    "vxlan".into()
                ),
                (
                    "flannel.alpha.coreos.com/kube-subnet-manager".into(),
                    "true".into()
                ),
                (
                    "flannel.alpha.coreos.com/public-ip".into(),
                    "10.250.0.2".into()
                ),
            ])
        );
        assert_eq!(network.pod_mtu(), Some(1450));
    }

    #[test]
    fn peers_are_the_other_nodes_that_publish_a_vtep() {
        let mut host_gw = node("host-gw", Some("10.42.6.0/24"), "10.250.0.6");
        host_gw.metadata.annotations = Some(BTreeMap::from([(
            ANN_BACKEND_TYPE.to_string(),
            "host-gw".to_string(),
        )]));
        let mut bad_mac = vxlan_node("bad-mac", "10.42.7.0/24", "10.250.0.7", MAC_A);
        bad_mac.metadata.annotations.as_mut().unwrap().insert(
            ANN_BACKEND_DATA.into(),
            r#"{"VNI":1,"VtepMAC":"nope"}"#.into(),
        );
        let nodes = [
            vxlan_node("a", "10.42.0.0/24", "10.250.0.2", MAC_A),
            vxlan_node("b", "10.42.1.0/24", "192.168.1.3", "0B:00:00:00:00:0B"),
            vxlan_node(
                "same-host",
                "10.42.2.0/24",
                "10.250.0.2",
                "0c:00:00:00:00:0c",
            ),
            node("unannotated", Some("10.42.3.0/24"), "10.250.0.3"),
            host_gw,
            bad_mac,
        ];
        assert_eq!(
            vtep().peers(&nodes, "a"),
            BTreeMap::from([(
                net("10.42.1.0/24"),
                Peer {
                    ip: ip("192.168.1.3"),
                    vtep_mac: Some("0b:00:00:00:00:0b".into()),
                }
            )])
        );
    }

    #[tokio::test]
    async fn a_new_peer_gets_its_fdb_and_neighbour_entries_before_its_onlink_route() {
        let runner = runner();
        let mut network = network(&runner);
        let nodes = [vxlan_node(
            "b",
            "10.42.1.0/24",
            "192.168.1.3",
            "0b:00:00:00:00:0b",
        )];
        let changes = network.sync(&nodes).await.unwrap();
        assert_eq!(
            changes.replaced,
            [(net("10.42.1.0/24"), Route::onlink(ip("10.42.1.0"), DEVICE))]
        );
        assert_eq!(
            runner.take_lines(),
            [
                FDB,
                NEIGH,
                "bridge fdb replace 0b:00:00:00:00:0b dev flannel.1 dst 192.168.1.3 self permanent",
                "ip neigh replace 10.42.1.0 lladdr 0b:00:00:00:00:0b dev flannel.1 nud permanent",
                OURS,
                ALL,
                "ip route replace 10.42.1.0/24 via 10.42.1.0 dev flannel.1 onlink proto 83",
            ]
        );
        // the same peers again: nothing to look at
        network.sync(&nodes).await.unwrap();
        assert!(runner.take_lines().is_empty());
    }

    #[tokio::test]
    async fn entries_of_gone_and_changed_peers_are_replaced_or_removed_after_their_routes() {
        let runner = runner();
        let mut network = network(&runner);
        runner.answer(
            FDB,
            r#"[{"mac":"0b:00:00:00:00:0b","dst":"192.168.1.3","flags":["self"],"state":"permanent"},
                {"mac":"0d:00:00:00:00:0d","dst":"192.168.1.4","flags":["self"],"state":"permanent"},
                {"mac":"33:33:00:00:00:01","flags":["self"],"state":"permanent"}]"#,
        );
        runner.answer(
            NEIGH,
            r#"[{"dst":"10.42.1.0","lladdr":"0b:00:00:00:00:0b","state":["PERMANENT"]},
                {"dst":"10.42.4.0","lladdr":"0d:00:00:00:00:0d","state":["PERMANENT"]},
                {"dst":"10.42.5.9","state":["FAILED"]}]"#,
        );
        runner.answer(
            OURS,
            r#"[{"dst":"10.42.1.0/24","gateway":"10.42.1.0","dev":"flannel.1","flags":["onlink"]},
                {"dst":"10.42.4.0/24","gateway":"10.42.4.0","dev":"flannel.1","flags":["onlink"]}]"#,
        );
        let nodes = [
            // b moved to another address; d is gone
            vxlan_node("b", "10.42.1.0/24", "192.168.2.3", "0b:00:00:00:00:0b"),
        ];
        let changes = network.sync(&nodes).await.unwrap();
        assert_eq!(changes.deleted, [net("10.42.4.0/24")]);
        assert!(changes.replaced.is_empty(), "{changes:?}");
        assert_eq!(
            runner.take_lines()[2..],
            [
                "bridge fdb replace 0b:00:00:00:00:0b dev flannel.1 dst 192.168.2.3 self permanent",
                OURS,
                ALL,
                "ip route del 10.42.4.0/24 proto 83",
                "ip neigh del 10.42.4.0 dev flannel.1",
                "bridge fdb del 0d:00:00:00:00:0d dev flannel.1 dst 192.168.1.4 self",
            ]
        );
    }

    #[test]
    fn macs_are_six_hex_octets() {
        assert_eq!(
            parse_mac("0A:bb:00:11:22:33").as_deref(),
            Some("0a:bb:00:11:22:33")
        );
        for bad in [
            "",
            "0a:bb:00:11:22",
            "0a:bb:00:11:22:3g",
            "0abb:00:11:22:33:44",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }
}
