//! Cluster DNS (`skiff dns`): the answers CoreDNS's kubernetes plugin gives (Services by name,
//! headless endpoints, SRV for named ports, pod A records with `pods insecure`, PTR), served
//! over UDP and TCP by `hickory-server`, fed by watches on Services and EndpointSlices; every
//! other name is forwarded to the host's resolvers through a small cache.
//!
//! # Layout
//! - [`records`]: what the informers have told us, indexed per Service and per reverse IP.
//! - [`lookup`]: one question against the records: records, NODATA, NXDOMAIN or not ours.
//! - [`forward`]: other names sent to upstream resolvers (behind the [`forward::Exchange`]
//!   trait), with a TTL-bounded cache; `/etc/resolv.conf` parsing.
//! - [`handler`]: the hickory request handler tying lookup, forwarding and metrics together.
//! - [`informer`]: the Service and EndpointSlice informers' handlers filling the records.
//! - [`metrics`]: `/metrics` with CoreDNS's metric names.
//! - [`server`]: binding the UDP and TCP sockets and the HTTP endpoints.

pub mod forward;
pub mod handler;
pub mod informer;
pub mod lookup;
pub mod metrics;
pub mod records;
pub mod server;

/// What can fail in the DNS server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--cluster-domain` is not a domain name.
    #[error("cluster domain {0:?} is not a valid domain name: {1}")]
    ClusterDomain(String, String),
    /// No upstream resolver is configured (none in resolv.conf and no `--upstream`).
    #[error("no upstream resolvers: {0}")]
    NoUpstream(String),
    /// Binding a listening socket failed.
    #[error("binding {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
    /// Too many questions are already waiting for upstreams.
    #[error("{0} questions already forwarded; refusing more")]
    Overloaded(usize),
    /// Every upstream failed to answer a forwarded question.
    #[error("forwarding {name} {qtype}: {reason}")]
    Forward {
        name: String,
        qtype: String,
        reason: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
