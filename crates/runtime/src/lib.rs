//! What Skiff's components share as API clients, on top of kube-rs.
//!
//! # Layout
//! - [`backoff`]: per-key retry delays for reconcilers (client-go's item exponential backoff).
//! - [`http2`]: the components' HTTP/2 transport to the API server, many requests per
//!   connection, as client-go's.
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//!   `leaderelection` does it.
//! - [`ratelimit`]: client-side QPS and burst, as client-go's, for kube's `ClientBuilder`.

pub mod backoff;
pub mod http2;
pub mod leader;
pub mod ratelimit;
