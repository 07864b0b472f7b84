//! Skiff's kube-proxy (`skiff proxy`): Services and EndpointSlices from the API server, with
//! upstream's semantics, programmed into iptables or nftables on this node.
//!
//! Informers feed a change tracker; the sync loop takes the changed Services at most once per
//! minimum sync period, folds them into the model, and lets the dataplane rewrite only what
//! changed (everything on the first sync and after a failure). Host commands go through a
//! [`runner::Runner`], so the renderers are tested against a recording fake and the real one can
//! run inside a network namespace.
//!
//! # Layout
//! - [`model`]: Service ports and endpoints from Services and slices; endpoint categories.
//! - [`tracker`]: the informers' latest objects and which Services changed.
//! - [`dataplane`]: the [`dataplane::Dataplane`] trait both modes implement.
//! - [`iptables`]: iptables mode, `iptables-restore --noflush` transactions.
//! - [`nftables`]: nftables mode, the `ip skiff` table through `nft -f`.
//! - [`hash`]: upstream's chain names.
//! - [`conntrack`]: stale UDP flows deleted after endpoints go away.
//! - [`healthcheck`]: the `healthCheckNodePort` servers of Local LoadBalancers.
//! - [`proxier`]: one sync, and the batching sync loop.
//! - [`informer`]: handlers on the shared informers of Services, EndpointSlices and this Node.
//! - [`metrics`]: `/metrics` with upstream's sync latency names.
//! - [`runner`]: host commands, real (optionally in a netns) and fake (`skiff_runtime`'s).

pub mod conntrack;
pub mod dataplane;
pub mod hash;
pub mod healthcheck;
pub mod informer;
pub mod iptables;
pub mod metrics;
pub mod model;
pub mod nftables;
pub mod proxier;
pub mod tracker;

/// Host commands: the node agents' shared runner (its error is the proxy's).
pub use skiff_runtime::runner;
pub use skiff_runtime::runner::{Error, Result};
