//! The [`Dataplane`] trait both modes implement, and the [`Context`] they render with.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use crate::Result;
use crate::model::{PortEntry, ServiceKey};

/// The mark KUBE-MARK-MASQ sets and KUBE-POSTROUTING masquerades (upstream's default
/// `--iptables-masquerade-bit` 14).
pub const MASQUERADE_MARK: &str = "0x4000";

/// What rendering needs besides the Services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The pod network (`--cluster-cidr`): traffic from outside it to a ClusterIP is masqueraded.
    pub cluster_cidr: String,
    /// This node's addresses, where NodePorts answer; empty: every local address.
    pub node_ips: Vec<Ipv4Addr>,
}

impl Default for Context {
    fn default() -> Self {
        Context {
            cluster_cidr: "10.42.0.0/16".into(),
            node_ips: Vec::new(),
        }
    }
}

/// Whether the IPv4 CIDR `cidr` (`a.b.c.d/n`, as the model keeps source ranges) holds `ip`.
pub fn cidr_contains(cidr: &str, ip: Ipv4Addr) -> bool {
    let Some((network, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(network), Ok(bits)) = (network.parse::<Ipv4Addr>(), bits.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
    u32::from(network) & mask == u32::from(ip) & mask
}

/// Every proxied Service's ports, by Service.
pub type ServiceTable = BTreeMap<ServiceKey, Vec<PortEntry>>;

/// A proxy mode's rule renderer and applier.
pub trait Dataplane: Send {
    /// Programs `table` in one transaction. With `full`, everything is rewritten and stale rules
    /// of a previous run are removed; otherwise only the chains of the `changed` Services are
    /// rewritten. On error nothing was applied: the caller retries with `full`.
    fn sync(
        &mut self,
        table: &ServiceTable,
        changed: &BTreeSet<ServiceKey>,
        context: &Context,
        full: bool,
    ) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_hold_the_addresses_of_their_network() {
        let ip = Ipv4Addr::new(192, 168, 1, 20);
        assert!(cidr_contains("192.168.1.0/24", ip));
        assert!(cidr_contains("0.0.0.0/0", ip));
        assert!(cidr_contains("192.168.1.20/32", ip));
        assert!(!cidr_contains("192.168.2.0/24", ip));
        assert!(!cidr_contains("garbage", ip));
    }
}
