//! flannel's `host-gw` backend: a route `podCIDR via InternalIP` for every other Node whose
//! InternalIP is on a network this host is directly attached to, so pods reach pods on other
//! nodes without an overlay. Nodes on other networks get no route (they need the
//! [`super::vxlan`] backend).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;

use super::{Ipv4Net, Peer, Route, peers_by_cidr};

/// Every other Node's pod CIDR (as a network) with its InternalIP: what the routes depend on.
pub fn peers<'a>(nodes: impl IntoIterator<Item = &'a Node>, me: &str) -> BTreeMap<Ipv4Net, Peer> {
    peers_by_cidr(nodes, me, |node| {
        Some(Peer {
            ip: internal_ip(node)?,
            vtep_mac: None,
        })
    })
}

/// The routes this node should have: to the peers whose InternalIP is on one of `local`'s
/// networks (directly reachable, as host-gw requires) and is not one of this host's own
/// addresses.
pub fn wanted_routes(
    peers: &BTreeMap<Ipv4Net, Peer>,
    local: &[Ipv4Net],
) -> BTreeMap<Ipv4Net, Route> {
    peers
        .iter()
        .filter(|(_, peer)| {
            let ip = peer.ip;
            let ours = ip.is_loopback() || local.iter().any(|l| l.addr == ip);
            let reachable = local
                .iter()
                .any(|l| !l.addr.is_loopback() && l.contains(ip));
            !ours && reachable
        })
        .map(|(cidr, peer)| (*cidr, Route::via(peer.ip)))
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
