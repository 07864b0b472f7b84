//! The real node's summary: the node from the root cgroup, `/proc` and `statvfs`; each pod
//! the kubelet runs from its cgroup (`kubepods/…/pod<uid>`), its network namespace's
//! `/proc/<pid>/net/dev` and its volume directories; each running container from CRI
//! `ListContainerStats` and its log directory.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    ContainerStats, CpuStats, Error, FsStats, InterfaceStats, MemoryStats, NetworkStats, NodeStats,
    PodReference, PodStats, ProcessStats, PvcReference, Rates, RlimitStats, RuntimeStats, Summary,
    SummaryProvider, VolumeStats, running_by_pod, sum_cpu, sum_memory,
};
use crate::cgroups::PodCgroups;
use crate::cgroups::driver::{CgroupMemory, CgroupName, CgroupUsage, Cgroupfs};
use crate::cgroups::fs::RealCgroupFs;
use k8s_cri::v1 as cri;

use crate::cri::{ContainerRuntime, CriClient};
use crate::eviction::signals::running_tasks;
use crate::fs_stats::{disk_usage, fs_stats};
use crate::host::meminfo_field;
use crate::pod_sync::pod_log_dir;
use crate::server::pods::PodRegistry;

/// The interface a pod's network figures are reported for (upstream's default).
const POD_INTERFACE: &str = "eth0";

/// What the real node's summary is read from.
pub struct HostSummary {
    pub node_name: String,
    pub cri: CriClient,
    pub pods: PodRegistry,
    /// The pods' cgroups, when the kubelet makes them (`cgroupsPerQOS`).
    pub pod_cgroups: Option<Arc<PodCgroups>>,
    /// The kubelet's data dir: nodefs, and the pods' volumes under `pods/<uid>/volumes`.
    pub data_dir: PathBuf,
    /// The pods' logs (`<namespace>_<name>_<uid>/<container>/`).
    pub log_dir: PathBuf,
    cgroups: Option<Cgroupfs>,
    proc: PathBuf,
    boot_time: Time,
    rates: Rates,
}

impl HostSummary {
    pub fn new(
        node_name: &str,
        cri: CriClient,
        pods: PodRegistry,
        pod_cgroups: Option<Arc<PodCgroups>>,
        data_dir: &Path,
        log_dir: &Path,
    ) -> HostSummary {
        let proc = PathBuf::from("/proc");
        let boot_time = std::fs::read_to_string(proc.join("stat"))
            .ok()
            .and_then(|stat| boot_time(&stat))
            .unwrap_or_else(Timestamp::now);
        HostSummary {
            node_name: node_name.to_string(),
            cri,
            pods,
            pod_cgroups,
            data_dir: data_dir.to_path_buf(),
            log_dir: log_dir.to_path_buf(),
            cgroups: Cgroupfs::new(Arc::new(RealCgroupFs)).ok(),
            proc,
            boot_time: Time(boot_time),
            rates: Rates::default(),
        }
    }

    fn read(&self, path: impl AsRef<Path>) -> Option<String> {
        std::fs::read_to_string(self.proc.join(path)).ok()
    }

    async fn node(&self, time: &Time, at: Instant, cpu_and_memory_only: bool) -> NodeStats {
        let root = self
            .cgroups
            .as_ref()
            .map(|c| c.usage(&CgroupName::parse("/")))
            .unwrap_or_default();
        let meminfo = self.read("meminfo").unwrap_or_default();
        let capacity = meminfo_field(&meminfo, "MemTotal");
        // the v2 root has no memory files: its figures from /proc/meminfo, as cAdvisor
        let memory = root.memory.clone().or_else(|| {
            let usage = capacity?.saturating_sub(meminfo_field(&meminfo, "MemFree")?);
            Some(CgroupMemory {
                usage,
                working_set: usage.saturating_sub(meminfo_field(&meminfo, "Inactive(file)")?),
                rss: meminfo_field(&meminfo, "AnonPages"),
                ..Default::default()
            })
        });
        let mut node = NodeStats {
            node_name: self.node_name.clone(),
            system_containers: Vec::new(),
            start_time: self.boot_time.clone(),
            cpu: cpu_stats(&self.rates, "node", time, at, root.cpu_ns),
            memory: memory.map(|m| memory_stats(time, &m, capacity)),
            network: None,
            fs: None,
            runtime: None,
            rlimit: None,
        };
        if cpu_and_memory_only {
            return node;
        }
        let dev = self.read("net/dev").unwrap_or_default();
        let default = self
            .read("net/route")
            .and_then(|routes| default_interface(&routes));
        node.network = network_stats(time, &dev, default.as_deref(), |name| {
            name != "lo" && !name.starts_with("veth")
        });
        node.fs = fs_stats(&self.data_dir)
            .ok()
            .map(|fs| FsStats::of(time.clone(), &fs, fs.used_bytes()));
        let read: crate::image_gc::FsStatsFn = Arc::new(fs_stats);
        node.runtime = crate::image_gc::image_fs_stats(&self.cri, &read)
            .await
            .ok()
            .map(|image_fs| RuntimeStats {
                image_fs: Some(FsStats::of(
                    time.clone(),
                    &image_fs.fs,
                    image_fs.images_bytes,
                )),
            });
        node.rlimit = Some(RlimitStats {
            time: time.clone(),
            maxpid: crate::host::max_pids(),
            curproc: self
                .read("loadavg")
                .and_then(|l| running_tasks(&l))
                .and_then(|n| i64::try_from(n).ok()),
        });
        node
    }

    /// The pods with a running container, each with its running containers (the newest of a
    /// name, as upstream after a restart).
    async fn pods(
        &self,
        time: &Time,
        at: Instant,
        cpu_and_memory_only: bool,
    ) -> Result<Vec<PodStats>, Error> {
        let containers = self.cri.list_containers(HashMap::new()).await?;
        let stats = self.cri.list_container_stats().await?;
        let stats: HashMap<String, cri::ContainerStats> = stats
            .into_iter()
            .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
            .collect();
        let running = running_by_pod(&containers);
        let mut out = Vec::new();
        let mut alive = HashSet::from(["node".to_string()]);
        for pod in self.pods.list() {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let Some(pod_containers) = running.get(uid.as_str()) else {
                continue;
            };
            let mut containers: Vec<ContainerStats> = pod_containers
                .values()
                .map(|c| {
                    alive.insert(format!("container/{}", c.id));
                    self.container(time, at, &pod, c, stats.get(&c.id), cpu_and_memory_only)
                })
                .collect();
            containers.sort_by(|a, b| a.name.cmp(&b.name));
            alive.insert(format!("pod/{uid}"));
            out.push(self.pod(time, at, &pod, containers, cpu_and_memory_only));
        }
        self.rates.retain(|key| alive.contains(key));
        Ok(out)
    }

    fn container(
        &self,
        time: &Time,
        at: Instant,
        pod: &Pod,
        container: &cri::Container,
        stats: Option<&cri::ContainerStats>,
        cpu_and_memory_only: bool,
    ) -> ContainerStats {
        let name = container
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let value = |v: Option<cri::UInt64Value>| v.map(|v| v.value);
        let cpu_ns = stats.and_then(|s| value(s.cpu.as_ref()?.usage_core_nano_seconds));
        let key = format!("container/{}", container.id);
        let memory = stats.and_then(|s| s.memory).map(|m| MemoryStats {
            time: time.clone(),
            available_bytes: value(m.available_bytes),
            usage_bytes: value(m.usage_bytes),
            working_set_bytes: value(m.working_set_bytes),
            rss_bytes: value(m.rss_bytes),
            page_faults: value(m.page_faults),
            major_page_faults: value(m.major_page_faults),
        });
        let mut out = ContainerStats {
            name,
            start_time: Time(
                Timestamp::from_nanosecond(i128::from(container.created_at))
                    .unwrap_or(Timestamp::UNIX_EPOCH),
            ),
            cpu: cpu_stats(&self.rates, &key, time, at, cpu_ns),
            memory,
            rootfs: None,
            logs: None,
        };
        if !cpu_and_memory_only {
            out.rootfs = stats
                .and_then(|s| s.writable_layer.clone())
                .and_then(|w| w.used_bytes)
                .map(|used| FsStats::used(time.clone(), used.value));
            let logs = pod_log_dir(&self.log_dir, pod).join(&out.name);
            out.logs = Some(FsStats::used(time.clone(), disk_usage(&logs)));
        }
        out
    }

    fn pod(
        &self,
        time: &Time,
        at: Instant,
        pod: &Pod,
        containers: Vec<ContainerStats>,
        cpu_and_memory_only: bool,
    ) -> PodStats {
        let meta = &pod.metadata;
        let uid = meta.uid.clone().unwrap_or_default();
        let usage = self
            .pod_cgroups
            .as_ref()
            .map(|c| c.usage(pod))
            .unwrap_or_default();
        // without pod cgroups, the sum of the containers
        let (cpu, memory) = if usage == CgroupUsage::default() {
            (sum_cpu(time, &containers), sum_memory(time, &containers))
        } else {
            let limit = usage.memory.as_ref().and_then(|m| m.limit);
            (
                cpu_stats(&self.rates, &format!("pod/{uid}"), time, at, usage.cpu_ns),
                usage.memory.as_ref().map(|m| memory_stats(time, m, limit)),
            )
        };
        let mut out = PodStats {
            pod_ref: PodReference {
                name: meta.name.clone().unwrap_or_default(),
                namespace: meta.namespace.clone().unwrap_or_default(),
                uid: uid.clone(),
            },
            start_time: pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.clone())
                .unwrap_or_else(|| time.clone()),
            containers,
            cpu,
            memory,
            network: None,
            volume_stats: Vec::new(),
            ephemeral_storage: None,
            process_stats: usage.tasks.map(|n| ProcessStats {
                process_count: Some(n),
            }),
        };
        if cpu_and_memory_only {
            return out;
        }
        let pid = self.pod_cgroups.as_ref().and_then(|c| c.first_process(pod));
        out.network = pid
            .and_then(|pid| self.read(format!("{pid}/net/dev")))
            .and_then(|dev| network_stats(time, &dev, Some(POD_INTERFACE), |n| n != "lo"));
        out.volume_stats = self.volumes(time, pod, &uid);
        let ephemeral: u64 = out
            .containers
            .iter()
            .flat_map(|c| [&c.rootfs, &c.logs])
            .flatten()
            .chain(
                out.volume_stats
                    .iter()
                    .filter(|v| v.pvc_ref.is_none())
                    .map(|v| &v.fs),
            )
            .filter_map(|fs| fs.used_bytes)
            .sum();
        out.ephemeral_storage = Some(FsStats::used(time.clone(), ephemeral));
        out
    }

    /// The pod's volumes that have a directory of their own (`pods/<uid>/volumes/<plugin>/
    /// <name>`): what their files take, and for a claim's volume its filesystem as well.
    fn volumes(&self, time: &Time, pod: &Pod, uid: &str) -> Vec<VolumeStats> {
        let claims: HashMap<&str, &str> = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| {
                Some((
                    v.name.as_str(),
                    v.persistent_volume_claim.as_ref()?.claim_name.as_str(),
                ))
            })
            .collect();
        let dir = self.data_dir.join("pods").join(uid).join("volumes");
        let mut out = Vec::new();
        for plugin in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for volume in std::fs::read_dir(plugin.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = volume.file_name().to_string_lossy().into_owned();
                let used = disk_usage(&volume.path());
                let pvc_ref = claims.get(name.as_str()).map(|claim| PvcReference {
                    name: claim.to_string(),
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                });
                let fs = match (&pvc_ref, fs_stats(&volume.path())) {
                    (Some(_), Ok(fs)) => FsStats::of(time.clone(), &fs, used),
                    _ => FsStats::used(time.clone(), used),
                };
                out.push(VolumeStats { fs, name, pvc_ref });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

#[async_trait]
impl SummaryProvider for HostSummary {
    async fn summary(&self, cpu_and_memory_only: bool) -> Result<Summary, Error> {
        let time = Time(Timestamp::now());
        let at = Instant::now();
        Ok(Summary {
            pods: self.pods(&time, at, cpu_and_memory_only).await?,
            node: self.node(&time, at, cpu_and_memory_only).await,
        })
    }
}

/// CPU figures from cumulative CPU time, with the rate since the last look at `key`.
fn cpu_stats(
    rates: &Rates,
    key: &str,
    time: &Time,
    at: Instant,
    ns: Option<u64>,
) -> Option<CpuStats> {
    let ns = ns?;
    Some(CpuStats {
        time: time.clone(),
        usage_nano_cores: rates.rate(key, at, ns),
        usage_core_nano_seconds: Some(ns),
    })
}

/// Memory figures of a cgroup; what is available is left of `limit` (none without one).
fn memory_stats(time: &Time, m: &CgroupMemory, limit: Option<u64>) -> MemoryStats {
    MemoryStats {
        time: time.clone(),
        available_bytes: limit.map(|l| l.saturating_sub(m.working_set)),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: m.rss,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    }
}

/// The interfaces of a `/proc/net/dev` that `keep` accepts, `default` (when among them) also
/// inline; None when `default` is named and absent.
fn network_stats(
    time: &Time,
    dev: &str,
    default: Option<&str>,
    keep: impl Fn(&str) -> bool,
) -> Option<NetworkStats> {
    let interfaces: Vec<InterfaceStats> = dev
        .lines()
        .filter_map(interface_stats)
        .filter(|i| keep(&i.name))
        .collect();
    let default = match default {
        Some(name) => interfaces.iter().find(|i| i.name == name)?.clone(),
        None => InterfaceStats::default(),
    };
    Some(NetworkStats {
        time: time.clone(),
        default,
        interfaces,
    })
}

/// One interface's line of `/proc/net/dev` (`  eth0: rx_bytes packets errs … tx_bytes …`).
fn interface_stats(line: &str) -> Option<InterfaceStats> {
    let (name, counters) = line.split_once(':')?;
    let fields: Vec<u64> = counters
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    if fields.len() < 11 {
        return None;
    }
    Some(InterfaceStats {
        name: name.trim().to_string(),
        rx_bytes: Some(fields[0]),
        rx_errors: Some(fields[2]),
        tx_bytes: Some(fields[8]),
        tx_errors: Some(fields[10]),
    })
}

/// The interface of the default route in `/proc/net/route` (destination and mask 0).
fn default_interface(routes: &str) -> Option<String> {
    routes.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 7 && f[1] == "00000000" && f[7] == "00000000").then(|| f[0].to_string())
    })
}

/// When the machine booted (`btime` of `/proc/stat`): the node's start time, as cAdvisor's
/// root container.
fn boot_time(stat: &str) -> Option<Timestamp> {
    let seconds = stat.lines().find_map(|l| l.strip_prefix("btime "))?;
    Timestamp::from_second(seconds.trim().parse().ok()?).ok()
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
