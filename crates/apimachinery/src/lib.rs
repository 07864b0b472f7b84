//! Kubernetes API machinery that works on objects as JSON (`serde_json::Value`): the pieces of
//! upstream's `apimachinery` and printers that the API server needs and that have no I/O, plus
//! upstream's upgrade-aware proxy, shared by the API server and the kubelet.
//!
//! # Layout
//! - [`autoscaling`]: `autoscaling/v1` HorizontalPodAutoscalers as views of v2 ones.
//! - [`catalog`]: the resource types served (the built-in table, and the registry that changes
//!   while serving), with discovery's names, verbs and subresources.
//! - [`duration`]: Go's duration text (`1m30s`), as `time.ParseDuration` reads it.
//! - [`labels`]: label selectors (`a=b,c!=d,e in (f),!g`), parsed and matched as upstream.
//! - [`fields`]: field selectors (`spec.nodeName=n1,status.phase!=Running`).
//! - [`validation`]: names, label keys and values, and field error lists (`field.ErrorList`).
//! - [`patch`]: JSON patch, JSON merge patch and strategic merge patch.
//! - [`managedfields`]: server-side apply and `metadata.managedFields` (field ownership).
//! - [`table`]: `kubectl get` columns and rows per resource (`as=Table`).
//! - [`proxy`]: forwarding a request, SPDY and WebSocket upgrades included, to a backend.
//! - [`quantity`]: resource quantities (`100m`, `128Mi`) as millis and units.
//! - [`quota`]: ResourceQuota usage, scopes and constraints (controller and admission share it).
//! - [`version`]: the Kubernetes version Skiff implements, and components' `User-Agent`.
//! - `fuzz_tests` (tests only): property-based fuzzing of the decoders above.

pub mod autoscaling;
pub mod catalog;
pub mod duration;
pub mod fields;
pub mod labels;
pub mod managedfields;
pub mod patch;
pub mod proxy;
pub mod quantity;
pub mod quota;
pub mod table;
pub mod validation;
pub mod version;

#[cfg(test)]
mod fuzz_tests;
