//! Skiff's scheduler (seed 000): an API client that watches pods and nodes, picks a node for
//! each unscheduled pod with upstream's Filter/Score framework and plugins, and POSTs a
//! `Binding` to `pods/{name}/binding`. It never talks to a kubelet.
//!
//! # Layout
//! - [`framework`]: statuses, pod and node views, the extension-point traits, the runtime.
//! - [`plugins`]: upstream's default plugins, one file each, and the registry by name.
//! - [`queue`]: activeQ, backoffQ and the unschedulable pods.
//! - [`cache`]: nodes and their pods, with assumed pods.

pub mod cache;
pub mod framework;
pub mod plugins;
pub mod queue;
