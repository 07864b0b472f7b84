//! Skiff's kubelet: the last hop of the seeds' chain. It registers its Node, keeps a Lease,
//! watches only its own pods through the API server and runs them through containerd's CRI,
//! writing their status back.
//!
//! # Layout
//! - [`cri`]: the [`cri::ContainerRuntime`] trait and its CRI client over a unix socket.
//! - [`fake`]: a recording fake runtime for tests.
//! - [`containerd`]: managed containerd (config, supervision).
//! - [`images`]: the built-in pause and busybox images and image import.

pub mod containerd;
pub mod cri;
pub mod fake;
pub mod images;
