//! Skiff's scheduler (seed 000): an API client that watches pods and nodes, picks a node for
//! each unscheduled pod with upstream's Filter/Score framework and plugins, and POSTs a
//! `Binding` to `pods/{name}/binding`. It never talks to a kubelet.
//!
//! # Layout
//! - [`framework`]: statuses, pod and node views, the extension-point traits, the runtime.
//! - [`plugins`]: upstream's default plugins, one file each, and the registry by name.
//! - [`queue`]: activeQ, backoffQ, the unschedulable pods and those PreEnqueue plugins gate.
//! - [`cache`]: nodes and their pods, with assumed pods.
//! - [`nominator`]: pods preemption nominated to nodes, kept room for until bound.
//! - [`algorithm`]: one pod's Filter/Score pass and the `FailedScheduling` message.
//! - [`scheduler`]: the loop: pop, schedule, assume, bind concurrently.
//! - [`api`]: the writes (bindings, events, conditions) behind a trait.
//! - [`binder`]: the `DefaultBinder` plugin.
//! - [`config`]: `KubeSchedulerConfiguration` and the profiles it builds.
//! - [`informer`]: the handlers on the shared informers that feed the scheduler.
//! - [`volumes`]: the storage caches the volume plugins read, with what VolumeBinding assumed.
//! - [`metrics`]: `/metrics` with upstream's names.

pub mod algorithm;
pub mod api;
pub mod binder;
pub mod cache;
pub mod config;
pub mod framework;
pub mod informer;
pub mod metrics;
pub mod nominator;
pub mod plugins;
pub mod queue;
pub mod scheduler;
pub mod volumes;

pub use scheduler::{DEFAULT_SCHEDULER_NAME, Scheduler};
