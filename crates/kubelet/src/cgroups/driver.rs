//! The cgroupfs driver, as upstream's `cgroupManager` with libcontainer's `fs`/`fs2` managers
//! under it: a cgroup ([`CgroupName`]) is a directory in every mounted v1 hierarchy (made level
//! by level, a new cpuset given its parent's CPUs and memory nodes), or one directory of the v2
//! hierarchy with the controllers enabled in its parents' `cgroup.subtree_control`. Its
//! [`ResourceConfig`] is written to the v1 files (`cpu.shares`, `cpu.cfs_period_us`,
//! `cpu.cfs_quota_us`, `memory.limit_in_bytes`, `pids.max`) or the v2 ones (`cpu.weight`,
//! `cpu.max`, `memory.max`, `pids.max`). Destroying one kills what is left in it and removes
//! it, its children first.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::fs::{CgroupFs, Layout};
use super::resources::{ResourceConfig, shares_to_weight, weight_to_shares};

/// At and above this, a v1 `memory.limit_in_bytes` means no limit (the kernel writes
/// `PAGE_COUNTER_MAX` pages; 2^62 is below it on any page size and far above any memory).
const V1_UNLIMITED_MEMORY: i64 = 1 << 62;

/// What a cgroup's tasks have used ([`Cgroupfs::usage`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    /// CPU time on all cores, in nanoseconds.
    pub cpu_ns: Option<u64>,
    pub memory: Option<CgroupMemory>,
    /// Processes and threads (`pids.current`).
    pub tasks: Option<u64>,
}

/// A cgroup's memory, in bytes (faults in counts), as cAdvisor reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMemory {
    pub usage: u64,
    /// Usage less the inactive file pages, which the kernel reclaims first.
    pub working_set: u64,
    /// Anonymous and swap-cache memory.
    pub rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// The limit, when there is one.
    pub limit: Option<u64>,
}

/// A `key value` line of a cgroup's `memory.stat` or `cpu.stat`.
pub fn stat_field(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// A cgroup by its path components below the hierarchies' roots (upstream's `CgroupName`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CgroupName(pub Vec<String>);

impl CgroupName {
    /// From the cgroupfs form (`/kubepods/burstable`); `/` is the root.
    pub fn parse(cgroupfs: &str) -> CgroupName {
        CgroupName(
            cgroupfs
                .split('/')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect(),
        )
    }

    /// The child cgroup `name`.
    pub fn child(&self, name: &str) -> CgroupName {
        let mut parts = self.0.clone();
        parts.push(name.to_string());
        CgroupName(parts)
    }

    /// The cgroupfs form, as runtimes take it for a `cgroup_parent` (`/kubepods/pod<uid>`).
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    fn under(&self, mount: &Path) -> PathBuf {
        self.0
            .iter()
            .fold(mount.to_path_buf(), |p, part| p.join(part))
    }
}

impl std::fmt::Display for CgroupName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_cgroupfs())
    }
}

/// The v1 hierarchies whose directory decides whether a cgroup exists (upstream's allow list:
/// other hierarchies, which runc may not use, do not count).
const EXISTENCE_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "name=systemd",
    "pids",
    "hugetlb",
];

/// Cgroups in the mounted hierarchies.
pub struct Cgroupfs {
    fs: Arc<dyn CgroupFs>,
    layout: Layout,
}

impl Cgroupfs {
    /// The driver over the host's hierarchies as `fs` reports them.
    pub fn new(fs: Arc<dyn CgroupFs>) -> io::Result<Cgroupfs> {
        let layout = fs.layout()?;
        Ok(Cgroupfs { fs, layout })
    }

    pub fn is_v2(&self) -> bool {
        matches!(self.layout, Layout::V2(_))
    }

    /// The cgroup's directory in each hierarchy, with whether that hierarchy decides its
    /// existence.
    fn dirs(&self, name: &CgroupName) -> Vec<(PathBuf, bool)> {
        match &self.layout {
            Layout::V1(hierarchies) => hierarchies
                .iter()
                .map(|h| {
                    let counts = h
                        .controllers
                        .iter()
                        .any(|c| EXISTENCE_CONTROLLERS.contains(&c.as_str()));
                    (name.under(&h.mount), counts)
                })
                .collect(),
            Layout::V2(mount) => vec![(name.under(mount), true)],
        }
    }

    /// The directory of the v1 hierarchy with `controller`, or the v2 one.
    fn dir_of(&self, name: &CgroupName, controller: &str) -> Option<PathBuf> {
        match &self.layout {
            Layout::V1(hierarchies) => hierarchies
                .iter()
                .find(|h| h.has(controller))
                .map(|h| name.under(&h.mount)),
            Layout::V2(mount) => Some(name.under(mount)),
        }
    }

    /// The directories of the cgroup that are missing (upstream's `Validate`).
    pub fn missing(&self, name: &CgroupName) -> Vec<PathBuf> {
        self.dirs(name)
            .into_iter()
            .filter(|(dir, counts)| *counts && !self.fs.exists(dir))
            .map(|(dir, _)| dir)
            .collect()
    }

    pub fn exists(&self, name: &CgroupName) -> bool {
        self.missing(name).is_empty()
    }

    /// Makes the cgroup (and missing ancestors) in every hierarchy, then sets `config`.
    pub fn create(&self, name: &CgroupName, config: &ResourceConfig) -> io::Result<()> {
        match &self.layout {
            Layout::V1(hierarchies) => {
                for h in hierarchies {
                    let mut dir = h.mount.clone();
                    for part in &name.0 {
                        let parent = dir.clone();
                        dir.push(part);
                        if self.fs.exists(&dir) {
                            continue;
                        }
                        self.fs.create_dir(&dir)?;
                        if h.has("cpuset") {
                            // a cpuset without CPUs or memory nodes takes no process
                            for file in ["cpuset.cpus", "cpuset.mems"] {
                                let value = self.fs.read(&parent.join(file))?;
                                self.fs.write(&dir.join(file), value.trim())?;
                            }
                        }
                    }
                }
            }
            Layout::V2(mount) => {
                let mut dir = mount.clone();
                for part in &name.0 {
                    let parent = dir.clone();
                    dir.push(part);
                    self.enable_controllers(&parent)?;
                    self.fs.create_dir(&dir)?;
                }
            }
        }
        self.set(name, config)
    }

    /// Enables every controller `dir` has for its children (libcontainer's `fs2` does so for
    /// each level it makes): all at once, else each that it can.
    fn enable_controllers(&self, dir: &Path) -> io::Result<()> {
        let available = self.fs.read(&dir.join("cgroup.controllers"))?;
        let wanted: Vec<String> = available
            .split_whitespace()
            .map(|c| format!("+{c}"))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let control = dir.join("cgroup.subtree_control");
        if self.fs.write(&control, &wanted.join(" ")).is_err() {
            for c in &wanted {
                let _ = self.fs.write(&control, c);
            }
        }
        Ok(())
    }

    /// Writes `config`'s values to the cgroup's files.
    pub fn set(&self, name: &CgroupName, config: &ResourceConfig) -> io::Result<()> {
        let write =
            |controller: &str, file: &str, value: String| match self.dir_of(name, controller) {
                Some(dir) => self.fs.write(&dir.join(file), &value),
                // a v1 controller that is not mounted cannot be set (upstream's runc skips it)
                None => Ok(()),
            };
        let limit = |v: i64| {
            if v < 0 {
                "max".to_string()
            } else {
                v.to_string()
            }
        };
        if self.is_v2() {
            if let Some(shares) = config.cpu_shares {
                write("cpu", "cpu.weight", shares_to_weight(shares).to_string())?;
            }
            if config.cpu_quota.is_some() || config.cpu_period.is_some() {
                let quota = match config.cpu_quota {
                    Some(q) if q > 0 => q.to_string(),
                    _ => "max".to_string(),
                };
                let value = match config.cpu_period {
                    Some(p) => format!("{quota} {p}"),
                    None => quota,
                };
                write("cpu", "cpu.max", value)?;
            }
            if let Some(memory) = config.memory.filter(|m| *m != 0) {
                write("memory", "memory.max", limit(memory))?;
            }
        } else {
            if let Some(shares) = config.cpu_shares {
                write("cpu", "cpu.shares", shares.to_string())?;
            }
            if let Some(period) = config.cpu_period {
                write("cpu", "cpu.cfs_period_us", period.to_string())?;
            }
            if let Some(quota) = config.cpu_quota.filter(|q| *q != 0) {
                write("cpu", "cpu.cfs_quota_us", quota.to_string())?;
            }
            if let Some(memory) = config.memory.filter(|m| *m != 0) {
                write("memory", "memory.limit_in_bytes", memory.to_string())?;
            }
        }
        if let Some(pids) = config.pids_limit.filter(|p| *p != 0) {
            write("pids", "pids.max", limit(pids))?;
        }
        Ok(())
    }

    /// The CPU shares, CFS quota and period and memory limit the cgroup has (upstream's
    /// `GetCgroupConfig`): v2's `cpu.weight` read back as shares; no limit reads as -1. A file
    /// that cannot be read leaves its value unset.
    pub fn get(&self, name: &CgroupName) -> ResourceConfig {
        let read = |controller: &str, file: &str| {
            let dir = self.dir_of(name, controller)?;
            Some(self.fs.read(&dir.join(file)).ok()?.trim().to_string())
        };
        let number = |v: &str| {
            if v == "max" {
                Some(-1)
            } else {
                v.parse::<i64>().ok()
            }
        };
        if self.is_v2() {
            let max = read("cpu", "cpu.max");
            let mut parts = max.as_deref().unwrap_or_default().split_whitespace();
            let (quota, period) = (parts.next(), parts.next());
            ResourceConfig {
                cpu_shares: read("cpu", "cpu.weight")
                    .and_then(|w| w.parse::<u64>().ok())
                    .map(weight_to_shares),
                cpu_quota: quota.and_then(number),
                cpu_period: period.and_then(|p| p.parse().ok()),
                memory: read("memory", "memory.max").as_deref().and_then(number),
                pids_limit: None,
            }
        } else {
            // v1 writes an unlimited memory limit as the largest page-aligned number
            let memory = read("memory", "memory.limit_in_bytes")
                .as_deref()
                .and_then(number);
            ResourceConfig {
                cpu_shares: read("cpu", "cpu.shares").and_then(|v| v.parse().ok()),
                cpu_quota: read("cpu", "cpu.cfs_quota_us").as_deref().and_then(number),
                cpu_period: read("cpu", "cpu.cfs_period_us").and_then(|v| v.parse().ok()),
                memory: memory.map(|m| if m >= V1_UNLIMITED_MEMORY { -1 } else { m }),
                pids_limit: None,
            }
        }
    }

    /// What the cgroup's tasks have used (cAdvisor's reading): CPU time, memory, tasks. A
    /// figure whose file cannot be read is left out; the v2 root has no memory files.
    pub fn usage(&self, name: &CgroupName) -> CgroupUsage {
        let read = |controller: &str, file: &str| {
            let dir = self.dir_of(name, controller)?;
            self.fs.read(&dir.join(file)).ok()
        };
        let number = |text: Option<String>| text?.trim().parse::<u64>().ok();
        let v2 = self.is_v2();
        let cpu_ns = if v2 {
            read("cpu", "cpu.stat")
                .and_then(|stat| stat_field(&stat, "usage_usec"))
                .map(|us| us * 1000)
        } else {
            number(read("cpuacct", "cpuacct.usage"))
        };
        let (usage_file, limit_file) = if v2 {
            ("memory.current", "memory.max")
        } else {
            ("memory.usage_in_bytes", "memory.limit_in_bytes")
        };
        let memory = number(read("memory", usage_file)).map(|usage| {
            let stat = read("memory", "memory.stat").unwrap_or_default();
            // v1's `total_*` figures count the whole subtree, as v2's do
            let field = |key: &str| {
                let v1_key = format!("total_{key}");
                stat_field(&stat, if v2 { key } else { &v1_key })
            };
            let limit = number(read("memory", limit_file))
                .filter(|l| i64::try_from(*l).is_ok_and(|l| l < V1_UNLIMITED_MEMORY));
            CgroupMemory {
                usage,
                working_set: usage.saturating_sub(field("inactive_file").unwrap_or(0)),
                rss: field(if v2 { "anon" } else { "rss" }),
                page_faults: field("pgfault"),
                major_page_faults: field("pgmajfault"),
                limit,
            }
        });
        CgroupUsage {
            cpu_ns,
            memory,
            tasks: number(read("pids", "pids.current")),
        }
    }

    /// The first process in the cgroup or below it (one of a pod's, to find its network
    /// namespace through `/proc/<pid>/net`).
    pub fn first_process(&self, name: &CgroupName) -> Option<u32> {
        let dir = self.dir_of(name, "memory")?;
        self.first_process_in(&dir)
    }

    fn first_process_in(&self, dir: &Path) -> Option<u32> {
        let procs = self.fs.read(&dir.join("cgroup.procs")).ok()?;
        procs
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .or_else(|| {
                let children = self.fs.children(dir).ok()?;
                children
                    .iter()
                    .find_map(|c| self.first_process_in(&dir.join(c)))
            })
    }

    /// The names of the cgroup's children (in any hierarchy that decides existence).
    pub fn children(&self, name: &CgroupName) -> Vec<String> {
        let mut out: Vec<String> = self
            .dirs(name)
            .into_iter()
            .filter(|(_, counts)| *counts)
            .flat_map(|(dir, _)| self.fs.children(&dir).unwrap_or_default())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Kills whatever runs in the cgroup or below it, then removes it, children first, in
    /// every hierarchy; one that is gone is success. An error (a process not yet gone) leaves
    /// what could not be removed for the next try.
    pub fn destroy(&self, name: &CgroupName) -> io::Result<()> {
        for (dir, _) in self.dirs(name) {
            self.kill_all(&dir);
        }
        let mut first_error = None;
        for (dir, _) in self.dirs(name) {
            if let Err(e) = self.remove_tree(&dir) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn kill_all(&self, dir: &Path) {
        if !self.fs.exists(dir) {
            return;
        }
        for child in self.fs.children(dir).unwrap_or_default() {
            self.kill_all(&dir.join(child));
        }
        let procs = self.fs.read(&dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Err(e) = self.fs.kill(pid) {
                tracing::warn!(pid, cgroup = %dir.display(), error = %e, "killing a process left in a pod cgroup");
            }
        }
    }

    fn remove_tree(&self, dir: &Path) -> io::Result<()> {
        if !self.fs.exists(dir) {
            return Ok(());
        }
        for child in self.fs.children(dir)? {
            self.remove_tree(&dir.join(child))?;
        }
        self.fs.remove_dir(dir)
    }
}
