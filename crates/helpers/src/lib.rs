//! Scheduling helpers that the scheduler, the kubelet and the controllers share, in the role of
//! upstream's `k8s.io/component-helpers` (`scheduling/corev1`: tolerations and node affinity).
//! Pure functions of API objects, with no client and no runtime, so that the kubelet and the
//! controllers need not depend on the whole scheduler.
//!
//! # Layout
//! - [`tolerations`]: whether tolerations tolerate taints.
//! - [`node_affinity`]: node selector terms, weighted preferred terms, and a pod's
//!   `nodeSelector` with its required node affinity.
//! - [`views`]: a node's labels and a pod's labels and spec, borrowed without cloning.

pub mod node_affinity;
pub mod tolerations;
pub mod views;
