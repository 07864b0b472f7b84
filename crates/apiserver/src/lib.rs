//! Skiff's API server: the Kubernetes REST API over the store, the only door to it (seeds
//! 000–002). Requests pass authentication, authorization and admission, then per-kind strategy
//! (defaults, validation) and one guarded store transaction; reads and watches come from a watch
//! cache fed by one store watch.
//!
//! # Layout
//! - [`server`]: configuration, shared state (with the registry of served types, which
//!   [`ApiServer::install`] and [`ApiServer::remove`] change), the HTTPS listener and the request
//!   pipeline.
//! - [`coalesce`]: HTTP/2 connections write once per scheduler round, not once per frame.
//! - [`pki`]: the cluster CA, serving and client certificates, the admin kubeconfig.
//! - [`kubelet_client`]: TLS connections to kubelets with the API server's client certificate.
//! - [`https_client`]: HTTPS connections to webhooks, OIDC issuers and aggregated API servers.
//! - [`services`]: finding a Service's address (its EndpointSlices) for those calls.
//! - [`authn`], [`authz`], [`admission`]: the three gates.
//! - [`audit`]: audit events (`--audit-policy-file`, `--audit-log-path`) and `Audit-Id`.
//! - [`flowcontrol`]: API Priority and Fairness (FlowSchemas, priority levels, fair queuing,
//!   429).
//! - [`overload`]: the in-flight limits used when APF is off (429) and the request timeout (504).
//! - [`impersonation`]: `Impersonate-*` headers (`kubectl --as`), checked with the authorizers.
//! - [`tokens`]: the service account token signer (TokenRequest's JWTs).
//! - [`request`]: what a request asks for (verb, group, resource, namespace, name, subresource).
//! - [`handlers`]: discovery, health, and the resource verbs.
//! - [`strategy`]: per-kind defaulting, validation and selectable fields.
//! - [`storage`]: key layout and the stored encoding of objects.
//! - [`registry`]: the generic registry every write goes through (strategy, admission,
//!   allocation, conversion, one guarded store transaction, the only place one is built).
//! - [`encryption`]: encryption at rest (`--encryption-provider-config`), a store wrapper.
//! - [`cache`]: the watch cache, one per served resource, added and dropped as types are.
//! - [`stamped`]: stored JSON served with its `resourceVersion` spliced in, without a copy.
//! - [`crd`]: CustomResourceDefinitions and custom resources.
//! - [`aggregator`]: APIServices: Local ones for what is served here, remote ones proxied to
//!   aggregated API servers and merged into discovery (upstream's kube-aggregator).
//! - [`conversion`]: stored, handled and served forms of objects (custom resources' versions,
//!   through conversion webhooks; events.k8s.io Events).
//! - [`webhook_client`], [`https_client`]: the API server as a client of admission and
//!   conversion webhooks.
//! - [`encoding`], [`protobuf`]: request body formats and content negotiation.
//! - [`allocator`]: Service ClusterIPs and NodePorts.
//! - [`bootstrap`]: namespaces, the `kubernetes` Service and the default RBAC policy every
//!   cluster has.
//! - [`metrics`]: the `/metrics` endpoint's counters and gauges.
//! - [`trace`]: the lifecycle trace of recent objects (`/debug/trace/…`, `/ui/trace/…`).
//! - [`error`]: `Status` errors.
//! - `fuzz_tests` (tests only): property-based fuzzing of the request decoders.

pub mod admission;
pub mod aggregator;
pub mod allocator;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod bootstrap;
pub mod cache;
pub mod coalesce;
pub mod conversion;
pub mod crd;
pub mod encoding;
pub mod encryption;
pub mod error;
pub mod flowcontrol;
pub mod handlers;
pub mod https_client;
pub mod impersonation;
pub mod kubelet_client;
pub mod metrics;
pub mod overload;
pub mod pacing;
pub mod pki;
pub mod protobuf;
pub mod registry;
pub mod request;
pub mod server;
pub mod services;
pub mod stamped;
pub mod storage;
pub mod strategy;
pub mod timing;
pub mod tokens;
pub mod trace;
pub mod webhook_client;

#[cfg(test)]
mod fuzz_tests;

pub use error::{ApiError, Result};
pub use server::{ApiServer, Config, Listener};
