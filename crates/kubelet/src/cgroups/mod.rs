//! Pod cgroups in upstream's QoS hierarchy (`pkg/kubelet/cm`'s node, QoS and pod container
//! managers), with the cgroupfs driver: under `cgroupRoot`, `kubepods` holds what the node
//! gives pods (its allocatable as shares, memory and pids limits), `kubepods/burstable` and
//! `kubepods/besteffort` hold those classes' pods and Guaranteed pods sit in `kubepods`
//! itself; each pod gets `pod<uid>` with its limits before its sandbox is made, and the
//! sandbox's `cgroup_parent` names it, so that containerd puts the pause and the containers
//! below it. The Burstable class's shares follow its pods' CPU requests as pods come and go
//! (BestEffort keeps the minimum). A pod's cgroup is removed once its containers are (the pod
//! deleted or finished). With `cgroupsPerQOS: false` none of this is made and pods go where
//! the runtime puts them.
//!
//! # Layout
//! - [`fs`]: the cgroup filesystem behind a trait ([`fs::CgroupFs`]), with a fake.
//! - [`driver`]: the cgroupfs driver: cgroups made, set, destroyed in v1 or v2 hierarchies.
//! - [`resources`]: the values pods, QoS classes and `kubepods` get, without I/O.

pub mod driver;
pub mod fs;
pub mod resources;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;

use driver::{CgroupName, CgroupUsage, Cgroupfs};
use fs::CgroupFs;
use resources::{
    MIN_SHARES, QosClass, ResourceConfig, milli_cpu_to_shares, pod_cpu_request, pod_resource_config,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the cgroup hierarchies: {0}")]
    Layout(#[source] std::io::Error),
    /// Upstream's check that `cgroupRoot` exists before `kubepods` is made under it.
    #[error("invalid configuration: cgroup {name:?} has some missing paths: {}", paths_list(.missing))]
    MissingRoot { name: String, missing: Vec<PathBuf> },
    #[error("failed to create container for {cgroup}: {source}")]
    Create {
        cgroup: CgroupName,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to update cgroup {cgroup}: {source}")]
    Update {
        cgroup: CgroupName,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to delete cgroup {cgroup}: {source}")]
    Destroy {
        cgroup: CgroupName,
        #[source]
        source: std::io::Error,
    },
}

fn paths_list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long a pod cgroup whose last processes were just killed is waited for before its
/// removal is given up (they exit asynchronously).
const REMOVE_WAIT: Duration = Duration::from_secs(2);

/// What this kubelet holds of a pod's cgroup.
#[derive(Debug, Clone)]
struct PodEntry {
    qos: QosClass,
    config: ResourceConfig,
    /// Millicores, overhead included: the Burstable class's shares sum them.
    cpu_request: i64,
}

/// The QoS hierarchy and the pod cgroups of one kubelet.
pub struct PodCgroups {
    driver: Cgroupfs,
    /// `<cgroupRoot>/kubepods`.
    kubepods: CgroupName,
    /// `podPidsLimit` (≤ 0: none).
    pod_pids_limit: i64,
    /// The pods whose cgroup this kubelet made or updated, by uid. Held across the writes of
    /// one change, so that the Burstable shares written are those of the pods recorded.
    pods: Mutex<BTreeMap<String, PodEntry>>,
}

impl PodCgroups {
    /// Checks that `cgroup_root` exists, then makes (or updates) `kubepods` with
    /// `node_allocatable` and the QoS cgroups, as upstream's container manager does when the
    /// kubelet starts.
    pub fn start(
        fs: Arc<dyn CgroupFs>,
        cgroup_root: &str,
        pod_pids_limit: i64,
        node_allocatable: &ResourceConfig,
    ) -> Result<PodCgroups> {
        let driver = Cgroupfs::new(fs).map_err(Error::Layout)?;
        let root = CgroupName::parse(cgroup_root);
        let missing = driver.missing(&root);
        if !missing.is_empty() {
            return Err(Error::MissingRoot {
                name: root.to_cgroupfs(),
                missing,
            });
        }
        let kubepods = root.child("kubepods");
        driver
            .create(&kubepods, node_allocatable)
            .map_err(|source| Error::Create {
                cgroup: kubepods.clone(),
                source,
            })?;
        let this = PodCgroups {
            driver,
            kubepods,
            pod_pids_limit,
            pods: Mutex::default(),
        };
        for (qos, shares) in [
            (QosClass::Burstable, milli_cpu_to_shares(0)),
            (QosClass::BestEffort, MIN_SHARES),
        ] {
            let name = this.qos_cgroup(qos);
            let config = ResourceConfig {
                cpu_shares: Some(shares),
                ..Default::default()
            };
            this.driver
                .create(&name, &config)
                .map_err(|source| Error::Create {
                    cgroup: name.clone(),
                    source,
                })?;
        }
        tracing::info!(kubepods = %this.kubepods, v2 = this.driver.is_v2(), "pod cgroups in upstream's QoS hierarchy");
        Ok(this)
    }

    /// The cgroup of a QoS class's pods.
    fn qos_cgroup(&self, qos: QosClass) -> CgroupName {
        match qos {
            QosClass::Guaranteed => self.kubepods.clone(),
            QosClass::Burstable => self.kubepods.child("burstable"),
            QosClass::BestEffort => self.kubepods.child("besteffort"),
        }
    }

    fn pod_cgroup(&self, qos: QosClass, uid: &str) -> CgroupName {
        self.qos_cgroup(qos).child(&format!("pod{uid}"))
    }

    /// The pod's cgroup in the cgroupfs form a sandbox's `cgroup_parent` takes
    /// (`/kubepods/burstable/pod<uid>`).
    pub fn cgroup_parent(&self, pod: &Pod) -> String {
        self.cgroup_of(pod).to_cgroupfs()
    }

    /// What the pod's cgroup has used (the pause process and every container).
    pub fn usage(&self, pod: &Pod) -> CgroupUsage {
        self.driver.usage(&self.cgroup_of(pod))
    }

    /// A process of the pod, to find its network namespace.
    pub fn first_process(&self, pod: &Pod) -> Option<u32> {
        self.driver.first_process(&self.cgroup_of(pod))
    }

    fn cgroup_of(&self, pod: &Pod) -> CgroupName {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.pod_cgroup(QosClass::of(pod), uid)
    }

    /// Makes the pod's cgroup with its limits if it has none, and the Burstable class's shares
    /// with it (upstream's `UpdateQOSCgroups` and `EnsureExists` before a pod's sandbox). An
    /// existing cgroup keeps its limits (as upstream's `EnsureExists`): once the pod runs they
    /// change only with an in-place resize ([`PodCgroups::set_pod`], in the resize's order);
    /// one this kubelet did not make (before a restart) has its values read back.
    pub fn ensure_pod(&self, pod: &Pod) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let qos = QosClass::of(pod);
        let name = self.pod_cgroup(qos, &uid);
        let mut pods = self.pods.lock();
        let exists = self.driver.exists(&name);
        if exists && pods.contains_key(&uid) {
            return Ok(());
        }
        let entry = PodEntry {
            qos,
            config: if exists {
                self.driver.get(&name)
            } else {
                pod_resource_config(pod, self.pod_pids_limit)
            },
            cpu_request: pod_cpu_request(pod),
        };
        let before = burstable_request(&pods);
        pods.insert(uid, entry.clone());
        if burstable_request(&pods) != before {
            self.set_burstable_shares(&pods)?;
        }
        if exists {
            return Ok(());
        }
        self.driver
            .create(&name, &entry.config)
            .map_err(|source| Error::Create {
                cgroup: name,
                source,
            })
    }

    /// The values of the pod's cgroup as this kubelet set or read them (None before
    /// [`PodCgroups::ensure_pod`]).
    pub fn pod_config(&self, pod: &Pod) -> Option<ResourceConfig> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        self.pods.lock().get(uid).map(|e| e.config.clone())
    }

    /// The values the pod's cgroup should have for its (allocated) resources.
    pub fn desired_config(&self, pod: &Pod) -> ResourceConfig {
        pod_resource_config(pod, self.pod_pids_limit)
    }

    /// Sets some values of the pod's cgroup (one step of an in-place resize); when its CPU
    /// shares change, the Burstable class's shares follow the pod's (allocated) CPU request.
    pub fn set_pod(&self, pod: &Pod, config: &ResourceConfig) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let qos = QosClass::of(pod);
        let name = self.pod_cgroup(qos, &uid);
        let mut pods = self.pods.lock();
        self.driver
            .set(&name, config)
            .map_err(|source| Error::Update {
                cgroup: name.clone(),
                source,
            })?;
        let before = burstable_request(&pods);
        let entry = pods.entry(uid).or_insert_with(|| PodEntry {
            qos,
            config: ResourceConfig::default(),
            cpu_request: 0,
        });
        let c = &mut entry.config;
        let merged = ResourceConfig {
            cpu_shares: config.cpu_shares.or(c.cpu_shares),
            cpu_quota: config.cpu_quota.or(c.cpu_quota),
            cpu_period: config.cpu_period.or(c.cpu_period),
            memory: config.memory.or(c.memory),
            pids_limit: config.pids_limit.or(c.pids_limit),
        };
        *c = merged;
        if config.cpu_shares.is_some() {
            entry.cpu_request = pod_cpu_request(pod);
        }
        if burstable_request(&pods) != before {
            self.set_burstable_shares(&pods)?;
        }
        Ok(())
    }

    fn set_burstable_shares(&self, pods: &BTreeMap<String, PodEntry>) -> Result<()> {
        let name = self.qos_cgroup(QosClass::Burstable);
        let config = ResourceConfig {
            cpu_shares: Some(milli_cpu_to_shares(burstable_request(pods))),
            ..Default::default()
        };
        self.driver
            .set(&name, &config)
            .map_err(|source| Error::Update {
                cgroup: name,
                source,
            })
    }

    /// Removes the pod's cgroup (in whichever QoS class it is), killing what is left in it,
    /// and gives its CPU request back to the Burstable class's shares (upstream's pod
    /// container manager's `Destroy` and `UpdateQOSCgroups`). A cgroup that is gone is success.
    pub async fn remove_pod(&self, uid: &str) -> Result<()> {
        for qos in [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ] {
            let name = self.pod_cgroup(qos, uid);
            let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
            // killed processes leave their cgroup once they have exited
            while let Err(source) = self.driver.destroy(&name) {
                if tokio::time::Instant::now() >= deadline {
                    return Err(Error::Destroy {
                        cgroup: name,
                        source,
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let mut pods = self.pods.lock();
        if pods
            .remove(uid)
            .is_some_and(|e| e.qos == QosClass::Burstable)
        {
            self.set_burstable_shares(&pods)?;
        }
        Ok(())
    }
}

/// The CPU the Burstable pods request, in millicores.
fn burstable_request(pods: &BTreeMap<String, PodEntry>) -> i64 {
    pods.values()
        .filter(|e| e.qos == QosClass::Burstable)
        .map(|e| e.cpu_request)
        .sum()
}

#[cfg(test)]
mod tests;
