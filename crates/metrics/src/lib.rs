//! The resource metrics pipeline, in the role of metrics-server (which k3s ships): every
//! kubelet's `/metrics/resource` is scraped at a fixed resolution, the last two samples of each
//! node and container are kept, and `metrics.k8s.io/v1beta1` serves their CPU rate (between the
//! two samples, as metrics-server computes it) and memory working set as NodeMetrics and
//! PodMetrics, which `kubectl top` and the HPA controller read.
//!
//! # Layout
//! - [`scrape`]: one kubelet's resource metrics (Prometheus text) read into a [`scrape::Batch`].
//! - [`storage`]: the last two batches of every node, and usage computed from them.
//! - [`api`]: NodeMetrics and PodMetrics as the API serves them.

pub mod api;
pub mod scrape;
pub mod storage;
