//! What the eviction manager measures, as upstream's `makeSignalObservations` reads it from
//! the summary API: each signal's available amount and capacity on this node, and each pod's
//! usage for ranking. The real [`HostStats`] reads the host (the root memory cgroup,
//! `statvfs`, `/proc`) and containerd's CRI (`ListContainerStats`, `ImageFsInfo`); tests use a
//! [`StatsProvider`] of their own.
//!
//! - `memory.available`: capacity (`MemTotal`) less the root cgroup's working set, as cAdvisor
//!   computes it: on cgroup v1 `memory.usage_in_bytes` less `total_inactive_file` of the root
//!   memory cgroup; on cgroup v2 (whose root has no `memory.current`) `MemTotal − MemFree`
//!   less `Inactive(file)` from `/proc/meminfo`.
//! - `allocatableMemory.available`: the `kubepods` cgroup's limit less its working set, when
//!   that cgroup exists (Skiff puts no pod in it yet, so on a Skiff node it does not).
//! - `nodefs.*`: the filesystem of the kubelet's data dir; `imagefs.*`: the filesystem CRI
//!   `ImageFsInfo` names (containerd's snapshotter), both through `statvfs`.
//! - `pid.available`: the smaller of `kernel.pid_max` and `kernel.threads-max`, less the tasks
//!   `/proc/loadavg` counts.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::cgroups::driver::stat_field;
use crate::cri::CriClient;
use crate::fs_stats::{FsStats, disk_usage, fs_stats};
use crate::host::meminfo_field;
use crate::kubelet_config::Signal;
use crate::pod_sync::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};

/// One signal as observed: what is left and what there is in all (bytes, inodes or pids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    pub available: i64,
    pub capacity: i64,
}

/// Every signal observed in one look at the node.
pub type Observations = BTreeMap<Signal, Observation>;

/// One container's usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    /// Memory working set, in bytes.
    pub memory: Option<u64>,
    /// Its writable layer, in bytes.
    pub rootfs: Option<u64>,
    /// Its log files, in bytes.
    pub logs: Option<u64>,
}

/// One pod's usage, as upstream's `PodStats` gives the ranking functions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodUsage {
    pub containers: Vec<ContainerUsage>,
    /// Processes (threads included) in its containers' cgroups.
    pub processes: Option<u64>,
}

impl PodUsage {
    /// The memory working set of its containers.
    pub fn memory(&self) -> u64 {
        self.containers.iter().filter_map(|c| c.memory).sum()
    }

    /// Its ephemeral storage in use: its containers' writable layers and logs.
    pub fn ephemeral_storage(&self) -> u64 {
        self.containers
            .iter()
            .map(|c| c.rootfs.unwrap_or(0) + c.logs.unwrap_or(0))
            .sum()
    }
}

/// Where the eviction manager's figures come from.
#[async_trait]
pub trait StatsProvider: Send + Sync {
    /// Every signal this node can measure now; a signal it cannot read is left out (its
    /// thresholds are then not met).
    async fn observe(&self) -> Observations;
    /// `memory.available` alone: cheap enough to read many times a second.
    fn memory_available(&self) -> Option<Observation>;
    /// The usage of the pods the runtime has containers for, by pod uid.
    async fn pod_usage(&self) -> HashMap<String, PodUsage>;
}

/// How the host's memory cgroups are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cgroups {
    /// One hierarchy per controller (`/sys/fs/cgroup/memory`, `/sys/fs/cgroup/pids`).
    V1,
    /// The unified hierarchy.
    V2,
}

/// The real node: the host's files and containerd's CRI.
pub struct HostStats {
    cri: CriClient,
    /// The kubelet's data dir (nodefs).
    data_dir: PathBuf,
    /// The containers' logs (`<namespace>_<name>_<uid>/<container>/`).
    log_dir: PathBuf,
    /// `/proc`, and the cgroup filesystem (`/sys/fs/cgroup`).
    proc: PathBuf,
    cgroup_fs: PathBuf,
    cgroups: Cgroups,
    /// `--cgroup-root`, under which `kubepods` would be.
    cgroup_root: String,
}

impl Cgroups {
    fn of(cgroup_fs: &Path) -> Cgroups {
        if cgroup_fs.join("memory/memory.usage_in_bytes").exists() {
            Cgroups::V1
        } else {
            Cgroups::V2
        }
    }
}

/// This host's `memory.available`, read as the eviction manager reads it: for tests and
/// benchmarks that set a threshold from it.
pub fn host_memory_available() -> Option<Observation> {
    let cgroup_fs = Path::new("/sys/fs/cgroup");
    memory_available(Path::new("/proc"), cgroup_fs, &Cgroups::of(cgroup_fs))
}

fn memory_available(proc: &Path, cgroup_fs: &Path, cgroups: &Cgroups) -> Option<Observation> {
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let meminfo = read(&proc.join("meminfo"))?;
    match cgroups {
        Cgroups::V1 => {
            let dir = cgroup_fs.join("memory");
            let usage = read(&dir.join("memory.usage_in_bytes"))?;
            let stat = read(&dir.join("memory.stat"))?;
            memory_v1(&meminfo, &usage, &stat)
        }
        Cgroups::V2 => memory_v2(&meminfo),
    }
}

impl HostStats {
    pub fn new(cri: CriClient, data_dir: &Path, log_dir: &Path, cgroup_root: &str) -> HostStats {
        let cgroup_fs = PathBuf::from("/sys/fs/cgroup");
        let cgroups = Cgroups::of(&cgroup_fs);
        HostStats {
            cri,
            data_dir: data_dir.to_path_buf(),
            log_dir: log_dir.to_path_buf(),
            proc: PathBuf::from("/proc"),
            cgroup_fs,
            cgroups,
            cgroup_root: cgroup_root.to_string(),
        }
    }

    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    /// `allocatableMemory.available` from the `kubepods` cgroup, if there is one.
    fn allocatable_memory(&self) -> Option<Observation> {
        let relative = Path::new(self.cgroup_root.trim_start_matches('/')).join("kubepods");
        match self.cgroups {
            Cgroups::V1 => {
                let dir = self.cgroup_fs.join("memory").join(relative);
                let limit = parse_number(&self.read(&dir.join("memory.limit_in_bytes"))?)?;
                let usage = parse_number(&self.read(&dir.join("memory.usage_in_bytes"))?)?;
                let stat = self.read(&dir.join("memory.stat"))?;
                let inactive = stat_field(&stat, "total_inactive_file")?;
                Some(limited(limit, usage.saturating_sub(inactive)))
            }
            Cgroups::V2 => {
                let dir = self.cgroup_fs.join(relative);
                let limit = parse_number(&self.read(&dir.join("memory.max"))?)?;
                let usage = parse_number(&self.read(&dir.join("memory.current"))?)?;
                let inactive = stat_field(&self.read(&dir.join("memory.stat"))?, "inactive_file")?;
                Some(limited(limit, usage.saturating_sub(inactive)))
            }
        }
    }

    fn pids(&self) -> Option<Observation> {
        let sys = self.proc.join("sys/kernel");
        let pid_max = parse_number(&self.read(&sys.join("pid_max"))?)?;
        let threads_max = parse_number(&self.read(&sys.join("threads-max"))?)?;
        let tasks = running_tasks(&self.read(&self.proc.join("loadavg"))?)?;
        Some(pid_observation(pid_max.min(threads_max), tasks))
    }

    /// The filesystem CRI `ImageFsInfo` names for images (as image garbage collection reads
    /// it).
    async fn image_fs(&self) -> Option<FsStats> {
        let read: crate::image_gc::FsStatsFn = std::sync::Arc::new(fs_stats);
        match crate::image_gc::image_fs_stats(&self.cri, &read).await {
            Ok(s) => Some(s.fs),
            Err(e) => {
                tracing::debug!(error = %e, "reading the image filesystem");
                None
            }
        }
    }

    /// Processes in a container's cgroup where containerd puts a container whose sandbox has
    /// no cgroup parent (`cgroupsPerQOS: false`): `/k8s.io/<id>`.
    fn container_processes(&self, id: &str) -> Option<u64> {
        self.pids_current(Path::new("k8s.io").join(id))
    }

    /// Processes in a pod's cgroup (`kubepods[/burstable|/besteffort]/pod<uid>` under the
    /// cgroup root), when pods have cgroups: the pause process and every container's.
    fn pod_processes(&self, uid: &str) -> Option<u64> {
        let kubepods = Path::new(self.cgroup_root.trim_start_matches('/')).join("kubepods");
        let pod = format!("pod{uid}");
        ["", "burstable", "besteffort"]
            .into_iter()
            .find_map(|class| self.pids_current(kubepods.join(class).join(&pod)))
    }

    /// `pids.current` of the cgroup at `relative` (v1: in the pids hierarchy).
    fn pids_current(&self, relative: PathBuf) -> Option<u64> {
        let dir = match self.cgroups {
            Cgroups::V1 => self.cgroup_fs.join("pids").join(relative),
            Cgroups::V2 => self.cgroup_fs.join(relative),
        };
        parse_number(&self.read(&dir.join("pids.current"))?)
    }
}

/// A fresh look at a filesystem as the two signals of one family.
fn fs_observations(out: &mut Observations, bytes: Signal, inodes: Signal, fs: FsStats) {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    out.insert(
        bytes,
        Observation {
            available: as_i64(fs.available_bytes),
            capacity: as_i64(fs.capacity_bytes),
        },
    );
    out.insert(
        inodes,
        Observation {
            available: as_i64(fs.inodes_free),
            capacity: as_i64(fs.inodes),
        },
    );
}

#[async_trait]
impl StatsProvider for HostStats {
    async fn observe(&self) -> Observations {
        let mut out = Observations::new();
        if let Some(memory) = self.memory_available() {
            out.insert(Signal::MemoryAvailable, memory);
        }
        if let Some(allocatable) = self.allocatable_memory() {
            out.insert(Signal::AllocatableMemoryAvailable, allocatable);
        }
        if let Ok(fs) = fs_stats(&self.data_dir) {
            fs_observations(
                &mut out,
                Signal::NodeFsAvailable,
                Signal::NodeFsInodesFree,
                fs,
            );
        }
        if let Some(fs) = self.image_fs().await {
            fs_observations(
                &mut out,
                Signal::ImageFsAvailable,
                Signal::ImageFsInodesFree,
                fs,
            );
        }
        if let Some(pids) = self.pids() {
            out.insert(Signal::PidAvailable, pids);
        }
        out
    }

    fn memory_available(&self) -> Option<Observation> {
        memory_available(&self.proc, &self.cgroup_fs, &self.cgroups)
    }

    async fn pod_usage(&self) -> HashMap<String, PodUsage> {
        let stats = match self.cri.list_container_stats().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "listing container stats for eviction");
                return HashMap::new();
            }
        };
        let mut pods: HashMap<String, PodUsage> = HashMap::new();
        for s in stats {
            let Some(attributes) = s.attributes else {
                continue;
            };
            let label = |k: &str| attributes.labels.get(k).cloned().unwrap_or_default();
            let uid = label(LABEL_POD_UID);
            if uid.is_empty() {
                continue;
            }
            let name = attributes.metadata.map(|m| m.name).unwrap_or_default();
            let log_dir = self
                .log_dir
                .join(format!(
                    "{}_{}_{uid}",
                    label(LABEL_POD_NAMESPACE),
                    label(LABEL_POD_NAME)
                ))
                .join(&name);
            let pod = pods.entry(uid).or_default();
            if let Some(n) = self.container_processes(&attributes.id) {
                *pod.processes.get_or_insert(0) += n;
            }
            pod.containers.push(ContainerUsage {
                memory: s.memory.and_then(|m| m.working_set_bytes).map(|v| v.value),
                rootfs: s.writable_layer.and_then(|w| w.used_bytes).map(|v| v.value),
                logs: Some(disk_usage(&log_dir)),
                name,
            });
        }
        // with pod cgroups, the pod's own count (its containers are below it)
        for (uid, pod) in &mut pods {
            if let Some(n) = self.pod_processes(uid) {
                pod.processes = Some(n);
            }
        }
        pods
    }
}

/// `memory.available` on cgroup v1: `MemTotal` less the root cgroup's usage less its
/// inactive file pages.
fn memory_v1(meminfo: &str, usage: &str, stat: &str) -> Option<Observation> {
    let capacity = meminfo_field(meminfo, "MemTotal")?;
    let working_set = parse_number(usage)?.saturating_sub(stat_field(stat, "total_inactive_file")?);
    Some(limited(capacity, working_set))
}

/// `memory.available` on cgroup v2, from `/proc/meminfo` alone.
fn memory_v2(meminfo: &str) -> Option<Observation> {
    let capacity = meminfo_field(meminfo, "MemTotal")?;
    let usage = capacity.saturating_sub(meminfo_field(meminfo, "MemFree")?);
    let working_set = usage.saturating_sub(meminfo_field(meminfo, "Inactive(file)")?);
    Some(limited(capacity, working_set))
}

/// What is left of `limit` with `working_set` in use (none when over it), as cAdvisor's
/// `AvailableBytes`; the capacity is the limit.
fn limited(limit: u64, working_set: u64) -> Observation {
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Observation {
        available: as_i64(limit.saturating_sub(working_set)),
        capacity: as_i64(limit),
    }
}

fn pid_observation(max: u64, tasks: u64) -> Observation {
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    Observation {
        available: max - i64::try_from(tasks).unwrap_or(i64::MAX).min(max),
        capacity: max,
    }
}

fn parse_number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The tasks the kernel counts in `/proc/loadavg` (`0.5 0.4 0.3 2/3518 12345`), which
/// upstream prefers to `sysinfo`'s, truncated above 65535.
pub(crate) fn running_tasks(loadavg: &str) -> Option<u64> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:        4000000 kB\nMemFree:          500000 kB\n\
                           MemAvailable:    3000000 kB\nInactive(file):   1000000 kB\n";

    #[test]
    fn memory_available_is_capacity_less_the_working_set_of_the_root_cgroup() {
        let stat = "cache 1\nrss 2\ntotal_cache 300\ntotal_inactive_file 1024000000\n";
        let m = memory_v1(MEMINFO, "3072000000\n", stat).unwrap();
        assert_eq!(m.capacity, 4_096_000_000);
        // working set: 3072000000 − 1024000000
        assert_eq!(m.available, 4_096_000_000 - 2_048_000_000);
        // cgroup v2: (total − free) − inactive file, from meminfo
        let m = memory_v2(MEMINFO).unwrap();
        assert_eq!(m.available, 4_096_000_000 - (3_584_000_000 - 1_024_000_000));
        // a working set above capacity leaves nothing, not a negative amount
        assert_eq!(limited(10, 20).available, 0);
    }

    #[test]
    fn pids_available_are_the_smaller_limit_less_the_tasks_running() {
        assert_eq!(running_tasks("1.36 3.49 4.53 2/3518 3715089\n"), Some(3518));
        assert_eq!(
            pid_observation(32768, 3518),
            Observation {
                available: 29250,
                capacity: 32768
            }
        );
        assert_eq!(running_tasks("garbage"), None);
    }

    #[test]
    fn stat_fields_are_found_by_their_whole_key() {
        let stat = "inactive_file 5\ntotal_inactive_file 7\n";
        assert_eq!(stat_field(stat, "total_inactive_file"), Some(7));
        assert_eq!(stat_field(stat, "inactive_file"), Some(5));
    }

    #[test]
    fn a_pods_usage_sums_its_containers() {
        let pod = PodUsage {
            containers: vec![
                ContainerUsage {
                    name: "a".into(),
                    memory: Some(10),
                    rootfs: Some(100),
                    logs: Some(1),
                },
                ContainerUsage {
                    name: "b".into(),
                    memory: None,
                    rootfs: Some(5),
                    logs: None,
                },
            ],
            processes: Some(3),
        };
        assert_eq!((pod.memory(), pod.ephemeral_storage()), (10, 106));
    }
}
