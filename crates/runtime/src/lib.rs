//! Skiff's client layer, on top of kube-rs: what every component that Lists and Watches the API
//! server shares (client-go's `informers`, `workqueue`, `record`, `leaderelection`).
//!
//! # Layout
//! - [`informer`]: one List+Watch and one indexed [`cache`] per resource per process, with
//!   change handlers and, for a component that keeps little of each object, a transform
//!   (client-go's shared informer factory and `SetTransform`).
//! - [`mutation`]: a controller's own writes laid over a cache until its watch brings them
//!   (client-go's `MutationCache`).
//! - [`workqueue`]: the rate-limited, deduplicating queue of keys a controller reconciles.
//! - [`controller`]: N workers draining a work queue through a reconcile function.
//! - [`events`]: the event recorder (client-go's `record`: aggregation, series, spam filter).
//! - [`metrics`]: the work queues' Prometheus series.
//! - [`backoff`]: per-key retry delays (client-go's item exponential backoff).
//! - [`http2`]: the components' HTTP/2 transport to the API server, many requests per
//!   connection, as client-go's.
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//!   `leaderelection` does it.
//! - [`runner`]: host commands of the node agents (`nft`, `iptables`, `ip`), real (optionally
//!   in a network namespace) and a recording fake.
//! - [`ratelimit`]: client-side QPS and burst, as client-go's, for kube's `ClientBuilder`.
//! - [`trace`]: the `traceparent` of requests made on an object's behalf.

pub mod backoff;
pub mod cache;
pub mod controller;
pub mod events;
pub mod http2;
pub mod informer;
pub mod leader;
pub mod metrics;
pub mod mutation;
pub mod ratelimit;
pub mod runner;
pub mod trace;
pub mod workqueue;
