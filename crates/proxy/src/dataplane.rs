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
