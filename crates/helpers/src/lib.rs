//! Scheduling helpers that the scheduler, the kubelet and the controllers share, in the role of
//! upstream's `k8s.io/component-helpers` (`scheduling/corev1`: tolerations and node affinity),
//! plus the resource fit check the kubelet's admission shares with the scheduler (which
//! upstream's kubelet imports from the scheduler itself). Pure functions of API objects, with
//! no client and no runtime, so that the kubelet and the controllers need not depend on the
//! whole scheduler.
//!
//! # Layout
//! - [`tolerations`]: whether tolerations tolerate taints.
//! - [`node_affinity`]: node selector terms, weighted preferred terms, and a pod's
//!   `nodeSelector` with its required node affinity.
//! - [`resources`]: amounts of resources, a pod's effective requests, a node's allocatable, and
//!   which resources a node lacks for a pod.
//! - [`ports`]: the host ports a pod asks for and when two uses of one collide.
//! - [`admission`]: the checks a kubelet makes before running a pod bound to its node.
//! - [`views`]: a node's labels and a pod's labels and spec, borrowed without cloning.
//! - [`ephemeral`]: the claim of a generic ephemeral volume (`<pod>-<volume>`) and whether a
//!   claim of that name was made for the pod.
//! - [`local_path`]: the names and paths Skiff's local-path provisioner and its nodes share.
//! - [`volume`]: how claims and volumes match (classes, modes, pre-binding, the smallest fit,
//!   the default StorageClass), for the PersistentVolume controller and volume binding.
//! - [`binding`]: the queue wait Skiff's scheduler annotates its Bindings with, for the API
//!   server's lifecycle trace.

pub mod admission;
pub mod binding;
pub mod ephemeral;
pub mod local_path;
pub mod node_affinity;
pub mod ports;
pub mod resources;
pub mod tolerations;
pub mod views;
pub mod volume;
