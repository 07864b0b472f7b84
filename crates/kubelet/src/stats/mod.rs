//! The kubelet's Summary API (upstream's `k8s.io/kubelet/pkg/apis/stats/v1alpha1`, served at
//! `/stats/summary`) and the resource metrics derived from it (`/metrics/resource`, what
//! metrics-server scrapes): the node's and each pod's CPU, memory, network, filesystems and
//! processes, per container too.
//!
//! As upstream's kubelet with cAdvisor, the node and the pods are measured from their cgroups
//! (the root cgroup and `kubepods/…/pod<uid>`), `/proc` and `statvfs`; the containers from the
//! runtime's CRI `ListContainerStats` (CPU time, memory, writable layer), their logs from the
//! log directory. `usageNanoCores`, a rate, is the CPU time used between this look and the one
//! before it ([`Rates`]); the first look at a cgroup has none, as upstream before cAdvisor's
//! first housekeeping.
//!
//! # Layout
//! - this file: the API's types, as upstream serializes them, and [`SummaryProvider`].
//! - [`host`]: the real node's provider.
//! - [`hollow`]: a hollow node's synthetic figures.
//! - [`resource`]: `/metrics/resource` in Prometheus' text format.
//! - [`cadvisor`]: `/metrics/cadvisor`, the containers' usage under cAdvisor's names.

pub mod cadvisor;
pub mod hollow;
pub mod host;
pub mod resource;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::cri::ContainerState;
use crate::pod_sync::LABEL_POD_UID;

/// `Summary`: the node and its pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub system_containers: Vec<ContainerStats>,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rlimit: Option<RlimitStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<FsStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlimitStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxpid: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curproc: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: Time,
    pub containers: Vec<ContainerStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkStats>,
    #[serde(default, rename = "volume", skip_serializing_if = "Vec::is_empty")]
    pub volume_stats: Vec<VolumeStats>,
    #[serde(
        default,
        rename = "ephemeral-storage",
        skip_serializing_if = "Option::is_none"
    )]
    pub ephemeral_storage: Option<FsStats>,
    #[serde(
        default,
        rename = "process_stats",
        skip_serializing_if = "Option::is_none"
    )]
    pub process_stats: Option<ProcessStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_count: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<FsStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

/// `NetworkStats`: the default interface's counters inline, and every interface's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NetworkStats {
    pub time: Time,
    #[serde(flatten)]
    pub default: InterfaceStats,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<InterfaceStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterfaceStats {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_errors: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_errors: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

impl FsStats {
    /// Only a usage in bytes (a container's writable layer or logs, a pod's volume).
    pub fn used(time: Time, bytes: u64) -> FsStats {
        FsStats {
            time,
            available_bytes: None,
            capacity_bytes: None,
            used_bytes: Some(bytes),
            inodes_free: None,
            inodes: None,
            inodes_used: None,
        }
    }

    /// A whole filesystem (`statvfs`), `used` bytes of it counted for its user.
    pub fn of(time: Time, fs: &crate::fs_stats::FsStats, used: u64) -> FsStats {
        FsStats {
            time,
            available_bytes: Some(fs.available_bytes),
            capacity_bytes: Some(fs.capacity_bytes),
            used_bytes: Some(used),
            inodes_free: Some(fs.inodes_free),
            inodes: Some(fs.inodes),
            inodes_used: Some(fs.inodes.saturating_sub(fs.inodes_free)),
        }
    }
}

/// `VolumeStats`: a pod volume's usage, named as in the pod's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStats {
    #[serde(flatten)]
    pub fs: FsStats,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_ref: Option<PvcReference>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PvcReference {
    pub name: String,
    pub namespace: String,
}

/// Why no summary could be made.
#[derive(Debug, thiserror::Error)]
#[error("failed to list pod stats: {0}")]
pub struct Error(#[from] pub crate::cri::Error);

/// Where the summary comes from: the real node, or a hollow node's synthetic figures.
#[async_trait]
pub trait SummaryProvider: Send + Sync {
    /// The node and its pods now. `cpu_and_memory_only` (upstream's `only_cpu_and_memory`
    /// query parameter, what resource metrics need) leaves filesystems, network and volumes out.
    async fn summary(&self, cpu_and_memory_only: bool) -> Result<Summary, Error>;
}

/// The running containers of each pod, by pod uid and container name: the newest of a name,
/// as upstream after a restart.
pub fn running_by_pod(
    containers: &[k8s_cri::v1::Container],
) -> HashMap<&str, HashMap<&str, &k8s_cri::v1::Container>> {
    let mut running: HashMap<&str, HashMap<&str, &k8s_cri::v1::Container>> = HashMap::new();
    for c in containers {
        let (Some(uid), Some(meta)) = (c.labels.get(LABEL_POD_UID), c.metadata.as_ref()) else {
            continue;
        };
        if c.state != ContainerState::ContainerRunning as i32 {
            continue;
        }
        let newest = running
            .entry(uid.as_str())
            .or_default()
            .entry(meta.name.as_str())
            .or_insert(c);
        if c.created_at > newest.created_at {
            *newest = c;
        }
    }
    running
}

/// A pod's CPU as the sum of its containers' (no pod cgroup to read).
pub fn sum_cpu(time: &Time, containers: &[ContainerStats]) -> Option<CpuStats> {
    let cpus: Vec<&CpuStats> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    if cpus.is_empty() {
        return None;
    }
    let sum = |f: fn(&CpuStats) -> Option<u64>| cpus.iter().map(|c| f(c)).sum::<Option<u64>>();
    Some(CpuStats {
        time: time.clone(),
        usage_nano_cores: sum(|c| c.usage_nano_cores),
        usage_core_nano_seconds: sum(|c| c.usage_core_nano_seconds),
    })
}

/// A pod's memory as the sum of its containers' (no pod cgroup to read).
pub fn sum_memory(time: &Time, containers: &[ContainerStats]) -> Option<MemoryStats> {
    let all: Vec<&MemoryStats> = containers
        .iter()
        .filter_map(|c| c.memory.as_ref())
        .collect();
    if all.is_empty() {
        return None;
    }
    let sum = |f: fn(&MemoryStats) -> Option<u64>| all.iter().map(|m| f(m)).sum::<Option<u64>>();
    Some(MemoryStats {
        time: time.clone(),
        available_bytes: None,
        usage_bytes: sum(|m| m.usage_bytes),
        working_set_bytes: sum(|m| m.working_set_bytes),
        rss_bytes: sum(|m| m.rss_bytes),
        page_faults: sum(|m| m.page_faults),
        major_page_faults: sum(|m| m.major_page_faults),
    })
}

/// The shortest window a CPU rate is taken over: looks closer together than this share the
/// rate of the earlier one, instead of dividing a few microseconds of CPU by a few of time.
pub const MIN_RATE_WINDOW: Duration = Duration::from_secs(1);

/// `usageNanoCores` from cumulative CPU time: per key (a cgroup, a container), the last
/// sample and the rate measured when it was taken.
#[derive(Default)]
pub struct Rates {
    last: Mutex<HashMap<String, Sample>>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: std::time::Instant,
    cpu_ns: u64,
    rate: Option<u64>,
}

impl Rates {
    /// The nanocores used by `key` since its previous sample (none for its first, or when the
    /// counter went backwards: a new cgroup of the same name).
    pub fn rate(&self, key: &str, at: std::time::Instant, cpu_ns: u64) -> Option<u64> {
        let mut last = self.last.lock();
        let rate = match last.get(key) {
            Some(prev) if at.saturating_duration_since(prev.at) < MIN_RATE_WINDOW => {
                return prev.rate;
            }
            Some(prev) if cpu_ns >= prev.cpu_ns => {
                let elapsed = at.saturating_duration_since(prev.at).as_nanos();
                let used = u128::from(cpu_ns - prev.cpu_ns);
                u64::try_from(used * 1_000_000_000 / elapsed.max(1)).ok()
            }
            _ => None,
        };
        last.insert(key.to_string(), Sample { at, cpu_ns, rate });
        rate
    }

    /// Forgets the keys `keep` does not accept (pods and containers gone).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.last.lock().retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests;
