//! Skiff's ingress controller (`skiff ingress`): `networking.k8s.io/v1` Ingresses of the
//! IngressClasses whose controller is `skiff.io/ingress-controller` (the class `skiff` that
//! `skiff server` creates as the default), served by a reverse proxy on every node's HTTP and
//! HTTPS ports, as k3s's Traefik serves them through ServiceLB.
//!
//! Built on hyper 1 (hyper-util's server; hyper's connection-level client) and rustls (tokio-rustls), not on
//! pingora: pingora brings BoringSSL or OpenSSL and a runtime of its own beside tokio, while
//! hyper is the HTTP stack the API server and kube-rs already run in this binary, and rustls
//! chooses a certificate per handshake through a [`rustls::server::ResolvesServerCert`], which
//! is all SNI needs. The proxy itself is then small: route, pick an endpoint, forward. Plain
//! HTTP/1.1 requests on the HTTP port take a fast path ([`h1`]) on httparse, hyper's own
//! parser, that forwards heads and bodies as bytes: through hyper's server and client a
//! proxied request cost half as much user-space CPU again as through nginx, and `skiff bench
//! ingress` holds the proxy to nginx's requests/s; every other request, and TLS, stays with
//! hyper.
//!
//! Informers feed a rebuild loop that makes a whole new [`config::Config`] (routing table,
//! certificates) on every change and swaps it in atomically; requests and handshakes read the
//! newest one, so reloads never drop a connection. One elected instance writes the Ingresses'
//! `status.loadBalancer` and the Warning events.
//!
//! # Layout
//! - [`route`]: the routing table: hosts, paths, precedence, round-robin backends.
//! - [`config`]: one configuration built from the informers' objects, without I/O.
//! - [`tls`]: certificates from `kubernetes.io/tls` Secrets, chosen by SNI.
//! - [`controller`]: the informers and the rebuild loop.
//! - [`proxy`]: one request forwarded (headers, upgrades).
//! - [`h1`]: the HTTP port's fast path for plain HTTP/1.1 requests, which hands the rest to
//!   [`proxy`].
//! - [`access`]: the access log, a line per request.
//! - [`upstream`]: each worker's connections to the endpoints, pooled and driven in line.
//! - [`listen`]: the HTTP and HTTPS ports, and the worker threads (one per core) serving them.
//! - [`status`]: the elected status and event writer.

pub mod access;
pub mod config;
pub mod controller;
pub mod h1;
pub mod listen;
pub mod proxy;
pub mod route;
pub mod status;
pub mod tls;
pub mod upstream;

/// What the controller's setup did wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A port could not be bound (in use, or no permission for a port below 1024).
    #[error("binding {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// The self-signed default certificate could not be made.
    #[error("making the default certificate: {0}")]
    DefaultCertificate(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<rcgen::Error> for Error {
    fn from(e: rcgen::Error) -> Error {
        Error::DefaultCertificate(e.to_string())
    }
}
