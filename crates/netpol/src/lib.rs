//! Skiff's NetworkPolicy enforcement (`skiff network-policy`), the role kube-router's network
//! policy controller plays in k3s: NetworkPolicies, Pods and Namespaces from the API server,
//! with upstream's semantics, programmed into an nftables table of its own on this node.
//!
//! Informers feed a [`ruleset::Ruleset`] change by change; it keeps each policy's rules and
//! every set's elements (pod IPs per policy and per rule peer), so that a pod or namespace
//! label change becomes an element update of the named sets and only a policy change rewrites
//! the table. The sync loop applies what changed with one `nft -f` transaction. Host commands
//! go through `skiff_runtime`'s [`Runner`](skiff_runtime::runner::Runner), so the rendering is
//! tested against a recording fake and the real one can run inside a network namespace.
//!
//! # Layout
//! - [`model`]: policies with parsed selectors, ipBlocks as ranges, ports; pods as policies
//!   see them.
//! - [`nftables`]: the `inet skiff-netpol` table's layout, its set names, the text of a whole
//!   table and of element updates.
//! - [`ruleset`]: the desired table, updated per pod, namespace and policy change.
//! - [`controller`]: the informers' handlers, the bridge netfilter setting, the sync loop.

pub mod controller;
pub mod model;
pub mod nftables;
pub mod ruleset;

/// What went wrong programming the node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `nft -f` refused the transaction (nothing of it applied) or could not run.
    #[error("applying the network policy table: {0}")]
    Apply(#[source] skiff_runtime::runner::Error),
    /// Bridged pod traffic cannot be filtered: br_netfilter's
    /// `net.bridge.bridge-nf-call-iptables` is missing and could not be loaded or set.
    #[error("bridged pod traffic would bypass network policies: {0}")]
    BridgeNetfilter(#[source] skiff_runtime::runner::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
