//! Pod volumes as upstream's kubelet lays them out: each volume of a pod in
//! `{data_dir}/pods/{uid}/volumes/kubernetes.io~{plugin}/{name}` (hostPath volumes are the host
//! path itself), set up before the pod's sandbox and refreshed every `--sync-frequency`
//! ([`REFRESH`] by default, upstream's 1 minute) so that configMap, secret, downwardAPI and
//! projected files follow their sources; torn down (tmpfs unmounted, directory removed) when
//! the pod is removed.
//!
//! # Layout
//! - [`host`]: host side effects (tmpfs, hostPath checks) behind [`host::HostOps`], with a fake.
//! - [`atomic_writer`]: upstream's `..data` symlink swap that writes a volume's files.
//! - [`empty_dir`], [`host_path`], [`config_map`], [`secret`], [`downward_api`], [`projected`]:
//!   one file per volume type; [`keys`] is what configMap and secret share.
//! - [`token`]: projected service account tokens, requested and refreshed.
//! - [`claim`]: persistentVolumeClaim and generic ephemeral volumes: the claim's bound
//!   hostPath or local volume (hollow nodes: a directory under the pod's), and the group
//!   its `pv.beta.kubernetes.io/gid` annotation gives the pod.
//! - [`mounts`]: a container's `volumeMounts` (and the pod's /etc/hosts) as CRI mounts.
//! - [`ownership`]: the pod's `fsGroup` applied to a volume (upstream's `SetVolumeOwnership`):
//!   emptyDir when made, configMap/secret/downwardAPI/projected each time their files are
//!   written, a `local` persistent volume when first mounted read-write.

pub mod atomic_writer;
pub mod claim;
pub mod config_map;
pub mod downward_api;
pub mod empty_dir;
pub mod host;
pub mod host_path;
pub mod keys;
pub mod mounts;
pub mod ownership;
pub mod projected;
pub mod secret;
pub mod token;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use parking_lot::Mutex;

use crate::api::PodApi;
use host::HostOps;
use ownership::{ChangePolicy, Ownership};

/// How often a pod's volume files are rewritten from their sources by default (upstream's
/// `syncFrequency`).
pub const REFRESH: Duration = Duration::from_secs(60);
/// How long after a first failed set-up it is tried again (and its FailedMount event
/// repeated); each failure in a row doubles the wait, up to [`RETRY`] (upstream's volume
/// operations back off from 500 ms too, up to two minutes). A claim the kubelet sees a moment
/// before its binding is complete is thus mounted half a second later, not ten.
pub const FIRST_RETRY: Duration = Duration::from_millis(500);
/// The longest wait between two failed set-ups.
pub const RETRY: Duration = Duration::from_secs(10);

/// The wait after `failures` failed set-ups in a row (at least one).
fn retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(8);
    (FIRST_RETRY * 2u32.pow(doublings)).min(RETRY)
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing the mounts under {}: {source}", path.display())]
    ListMounts {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("unmounting {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("removing {}: {source}", path.display())]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A volume that could not be set up; its Display is upstream's FailedMount message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub volume: String,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MountVolume.SetUp failed for volume \"{}\" : {}",
            self.volume, self.message
        )
    }
}

/// Something about a volume that did set up, for a Warning event on the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// The event's reason (upstream's, e.g. `AlreadyMountedVolume`).
    pub reason: &'static str,
    pub message: String,
}

/// What [`VolumeManager::set_up`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SetUp {
    /// Every volume of the pod was set up (now or before): its containers may start.
    pub ready: bool,
    /// The volumes that failed in this attempt (empty when nothing was due).
    pub failures: Vec<Failure>,
    /// Warnings about volumes set up in this attempt.
    pub warnings: Vec<Warning>,
    /// When not ready: how long until the next attempt.
    pub retry_in: Option<Duration>,
}

/// When a pod's volumes were last set up, and whether its containers may start (all of them
/// were set up then or, for a failed refresh, before).
#[derive(Debug, Clone, Copy)]
struct Attempt {
    at: Timestamp,
    ok: bool,
    /// Failed attempts in a row, this one included.
    failures: u32,
}

impl Attempt {
    /// When the next attempt is due.
    fn next(&self, refresh: Duration) -> Timestamp {
        let wait = if self.failures == 0 {
            refresh
        } else {
            retry_after(self.failures)
        };
        self.at + wait
    }
}

/// The volumes of this kubelet's pods.
pub struct VolumeManager {
    pods_dir: PathBuf,
    host: Arc<dyn HostOps>,
    /// How often set-up volumes are refreshed.
    refresh: Duration,
    tokens: token::TokenCache,
    /// Pod uid → its last set-up attempt. Guards the map only, never held across an await.
    attempts: Mutex<HashMap<String, Attempt>>,
    /// How persistentVolumeClaim volumes are treated.
    claims: claim::Claims,
    /// (pod uid, volume name) → where a set-up claim volume is on the host. Guards the map
    /// only, never held across an await.
    claim_mounts: Mutex<HashMap<(String, String), ClaimMount>>,
    /// Whether configMap, secret, downwardAPI and projected volumes get their files.
    files: bool,
}

/// A set-up claim volume.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClaimMount {
    path: PathBuf,
    read_only: bool,
    /// The persistent volume's `pv.beta.kubernetes.io/gid` annotation.
    gid: Option<String>,
}

/// The JSON name of a volume's type (`persistentVolumeClaim`, `nfs`…).
fn volume_type(volume: &Volume) -> String {
    match serde_json::to_value(volume) {
        Ok(serde_json::Value::Object(map)) => map
            .keys()
            .find(|k| *k != "name")
            .cloned()
            .unwrap_or_else(|| "unknown".into()),
        _ => "unknown".into(),
    }
}

impl VolumeManager {
    /// Pods' directories go under `pods_dir` (`{data_dir}/pods`); volumes are refreshed every
    /// `refresh`.
    pub fn new(pods_dir: PathBuf, host: Arc<dyn HostOps>, refresh: Duration) -> VolumeManager {
        VolumeManager {
            pods_dir,
            host,
            refresh,
            tokens: token::TokenCache::default(),
            attempts: Mutex::new(HashMap::new()),
            claims: claim::Claims::default(),
            claim_mounts: Mutex::new(HashMap::new()),
            files: true,
        }
    }

    /// Builds configMap, secret, downwardAPI and projected volumes (reading their sources and
    /// requesting tokens from the API as a kubelet does) without writing their files: for
    /// hollow nodes, whose pods have no processes to read them. With 150,000 hollow pods,
    /// writing them at each refresh was 37% of the hollow nodes' CPU.
    pub fn without_files(mut self) -> VolumeManager {
        self.files = false;
        self
    }

    /// Treats persistentVolumeClaim volumes as `claims` says (real nodes: [`claim::Claims::Bound`],
    /// the default; hollow nodes: node-local).
    pub fn with_claims(mut self, claims: claim::Claims) -> VolumeManager {
        self.claims = claims;
        self
    }

    /// The host operations the volumes use (shared with the local-path volume deleter).
    pub fn host(&self) -> Arc<dyn HostOps> {
        self.host.clone()
    }

    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.pods_dir.join(uid)
    }

    fn plugin_dir(&self, uid: &str, plugin: &str, name: &str) -> PathBuf {
        self.pod_dir(uid).join("volumes").join(plugin).join(name)
    }

    /// Where the volume is on the host, or None for a type Skiff does not support (or a claim
    /// volume not set up yet).
    pub fn host_path(&self, uid: &str, volume: &Volume) -> Option<PathBuf> {
        let plugin = if volume.empty_dir.is_some() {
            empty_dir::PLUGIN
        } else if let Some(h) = &volume.host_path {
            return Some(PathBuf::from(&h.path));
        } else if volume.config_map.is_some() {
            config_map::PLUGIN
        } else if volume.secret.is_some() {
            secret::PLUGIN
        } else if volume.downward_api.is_some() {
            downward_api::PLUGIN
        } else if volume.projected.is_some() {
            projected::PLUGIN
        } else if volume.persistent_volume_claim.is_some() || volume.ephemeral.is_some() {
            if self.claims == claim::Claims::Bound {
                return self.claim_mount(uid, &volume.name).map(|m| m.path);
            }
            claim::PLUGIN
        } else {
            return None;
        };
        Some(self.plugin_dir(uid, plugin, &volume.name))
    }

    /// Sets up the pod's volumes when due: the first time, [`FIRST_RETRY`] after a failure
    /// (doubling while they fail, up to [`RETRY`]), and the refresh period after the last
    /// success.
    pub async fn set_up(
        &self,
        api: &dyn PodApi,
        pod: &Pod,
        allocatable: &BTreeMap<String, ApiQuantity>,
        now: Timestamp,
    ) -> SetUp {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let last = self.attempts.lock().get(&uid).copied();
        if let Some(last) = last {
            let next = last.next(self.refresh);
            if now < next {
                let wait = now.duration_until(next).unsigned_abs();
                return SetUp {
                    ready: last.ok,
                    retry_in: (!last.ok).then_some(wait),
                    ..SetUp::default()
                };
            }
        }
        let mut failures = Vec::new();
        let mut warnings = Vec::new();
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            match self.set_up_one(api, pod, volume, allocatable, now).await {
                Ok(warning) => warnings.extend(warning),
                Err(failure) => failures.push(failure),
            }
        }
        // a refresh that fails leaves a running pod's earlier files (and its readiness) alone
        let ok = failures.is_empty() || last.is_some_and(|l| l.ok);
        let failed = match last {
            Some(l) if !failures.is_empty() => l.failures + 1,
            _ => u32::from(!failures.is_empty()),
        };
        let attempt = Attempt {
            at: now,
            ok,
            failures: failed,
        };
        self.attempts.lock().insert(uid, attempt);
        SetUp {
            ready: ok,
            failures,
            warnings,
            retry_in: (!ok).then(|| retry_after(failed)),
        }
    }

    async fn set_up_one(
        &self,
        api: &dyn PodApi,
        pod: &Pod,
        volume: &Volume,
        allocatable: &BTreeMap<String, ApiQuantity>,
        now: Timestamp,
    ) -> Result<Option<Warning>, Failure> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let fail = |message: String| Failure {
            volume: volume.name.clone(),
            message,
        };
        let fs_group = ownership::pod_fs_group(pod).map_err(fail)?;
        if let Some(used) = claim::claim_use(pod, volume) {
            return match self.claims {
                claim::Claims::NodeLocal => {
                    let dir = self.plugin_dir(uid, claim::PLUGIN, &volume.name);
                    claim::node_local(api, pod, namespace, &used, &dir)
                        .await
                        .map(|()| None)
                        .map_err(fail)
                }
                claim::Claims::Bound => {
                    let resolved = claim::resolve(api, pod, namespace, &used)
                        .await
                        .map_err(fail)?;
                    // a mount failure names the persistent volume, as upstream's does
                    let (mount, warning) =
                        self.mount_claim(uid, &resolved, fs_group)
                            .map_err(|message| Failure {
                                volume: resolved.volume.clone(),
                                message,
                            })?;
                    self.claim_mounts
                        .lock()
                        .insert((uid.to_string(), volume.name.clone()), mount);
                    Ok(warning)
                }
            };
        }
        let Some(dir) = self.host_path(uid, volume) else {
            return Err(fail(format!(
                "skiff does not support {} volumes",
                volume_type(volume)
            )));
        };
        let payload = if let Some(source) = &volume.empty_dir {
            let made = empty_dir::set_up(&dir, source, self.host.as_ref()).map_err(fail)?;
            if made && let Some((group, _)) = fs_group {
                // upstream's emptyDir always walks, and goes on whatever the walk says
                let owner = Ownership {
                    group,
                    read_only: false,
                    policy: ChangePolicy::Always,
                };
                if let Err(e) = self.host.set_ownership(&dir, &owner) {
                    tracing::warn!(path = %dir.display(), error = %e, "applying fsGroup");
                }
            }
            return Ok(None);
        } else if let Some(source) = &volume.host_path {
            return host_path::set_up(&dir, source.type_.as_deref(), self.host.as_ref())
                .map(|()| None)
                .map_err(fail);
        } else if let Some(source) = &volume.config_map {
            config_map::payload(api, namespace, source)
                .await
                .map_err(fail)?
        } else if let Some(source) = &volume.secret {
            self.ensure_tmpfs(&dir).map_err(fail)?;
            secret::payload(api, namespace, source)
                .await
                .map_err(fail)?
        } else if let Some(source) = &volume.downward_api {
            let items = source.items.as_deref().unwrap_or_default();
            let mode = source.default_mode.unwrap_or(keys::DEFAULT_MODE);
            downward_api::payload(pod, items, mode, allocatable).map_err(fail)?
        } else if let Some(source) = &volume.projected {
            self.ensure_tmpfs(&dir).map_err(fail)?;
            projected::payload(api, pod, source, allocatable, &self.tokens, now)
                .await
                .map_err(fail)?
        } else {
            return Ok(None);
        };
        // these volumes are read-only to the pod: the read-only mask, at every write
        let owner = fs_group.map(|(group, _)| Ownership {
            group,
            read_only: true,
            policy: ChangePolicy::Always,
        });
        let owner = owner.as_ref().map(|o| (self.host.as_ref(), o));
        if self.files {
            atomic_writer::write(&dir, &payload, owner).map_err(|e| fail(e.to_string()))?;
        }
        Ok(None)
    }

    fn claim_mount(&self, uid: &str, volume: &str) -> Option<ClaimMount> {
        self.claim_mounts
            .lock()
            .get(&(uid.to_string(), volume.to_string()))
            .cloned()
    }

    /// Whether the pod's claim volume `volume` is mounted read-only (its source says so).
    pub fn claim_read_only(&self, uid: &str, volume: &str) -> bool {
        self.claim_mount(uid, volume).is_some_and(|m| m.read_only)
    }

    /// The groups the pod's processes get from the persistent volumes it has mounted (their
    /// `pv.beta.kubernetes.io/gid`), besides those of its securityContext
    /// ([`claim::extra_supplemental_groups`]).
    pub fn extra_supplemental_groups(&self, pod: &Pod) -> Vec<i64> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mounts = self.claim_mounts.lock();
        let gids = mounts
            .iter()
            .filter(|((u, _), _)| u == uid)
            .filter_map(|(_, m)| m.gid.as_deref());
        claim::extra_supplemental_groups(pod, gids)
    }

    /// Makes a resolved claim volume's data reachable: a hostPath volume's path checked (a
    /// local-path volume's directory created `0777` first), a local volume bind-mounted into
    /// the pod's directory (once, then given the pod's fsGroup: [`Self::local_ownership`]).
    /// hostPath volumes never get the fsGroup, as upstream's plugin.
    fn mount_claim(
        &self,
        uid: &str,
        resolved: &claim::Resolved,
        fs_group: Option<(u32, ChangePolicy)>,
    ) -> Result<(ClaimMount, Option<Warning>), String> {
        let mut warning = None;
        let path = match &resolved.source {
            claim::Source::HostPath { path, type_ } => {
                let path = PathBuf::from(path);
                // a path that cannot be examined counts as missing (see host_path::set_up)
                let missing = self.host.file_kind(&path).unwrap_or(None).is_none();
                if resolved.local_path && missing {
                    self.host
                        .create_dir_all(&path, claim::LOCAL_PATH_MODE)
                        .map_err(|e| e.to_string())?;
                }
                host_path::set_up(&path, type_.as_deref(), self.host.as_ref())?;
                path
            }
            claim::Source::Local { path } => {
                let source = PathBuf::from(path);
                if self
                    .host
                    .file_kind(&source)
                    .map_err(|e| e.to_string())?
                    .is_none()
                {
                    return Err(format!("path {path:?} does not exist"));
                }
                let target = self.plugin_dir(uid, claim::LOCAL_PLUGIN, &resolved.volume);
                std::fs::create_dir_all(&target)
                    .map_err(|e| format!("mkdir {}: {e}", target.display()))?;
                if !self
                    .host
                    .is_mount_point(&target)
                    .map_err(|e| e.to_string())?
                {
                    self.host
                        .bind_mount(&source, &target, resolved.read_only)
                        .map_err(|e| format!("mounting {path} at {}: {e}", target.display()))?;
                    if !resolved.read_only
                        && let Some((group, policy)) = fs_group
                    {
                        warning =
                            self.local_ownership(uid, &source, &target, resolved, group, policy)?;
                    }
                }
                target
            }
        };
        let mount = ClaimMount {
            path,
            read_only: resolved.read_only,
            gid: resolved.gid.clone(),
        };
        Ok((mount, warning))
    }

    /// A `local` volume just mounted read-write at `target` gets the pod's fsGroup, as
    /// upstream's plugin gives it: only when no other pod of this node has the volume mounted
    /// (else the volume is left as it is, with upstream's `AlreadyMountedVolume` warning when
    /// its group is not the fsGroup), walking as the pod's `fsGroupChangePolicy` says. A walk
    /// that fails unmounts the volume, so that the next attempt walks again.
    fn local_ownership(
        &self,
        uid: &str,
        source: &Path,
        target: &Path,
        resolved: &claim::Resolved,
        group: u32,
        policy: ChangePolicy,
    ) -> Result<Option<Warning>, String> {
        let volume = &resolved.volume;
        let mounted_here = Path::new("volumes").join(claim::LOCAL_PLUGIN).join(volume);
        let own = self.pod_dir(uid);
        let others = self
            .host
            .mounts_under(&self.pods_dir)
            .map_err(|e| format!("listing the mounts under {}: {e}", self.pods_dir.display()))?
            .into_iter()
            .any(|p| p.ends_with(&mounted_here) && !p.starts_with(&own));
        if others {
            let old = self
                .host
                .group_of(source)
                .map_err(|e| format!("failed to check fsGroup for {} ({e})", source.display()))?;
            return Ok((old != group).then(|| Warning {
                reason: "AlreadyMountedVolume",
                message: format!(
                    "The requested fsGroup is {group}, but the volume {volume} has GID {old}. \
                     The volume may not be shareable."
                ),
            }));
        }
        let owner = Ownership {
            group,
            read_only: false,
            policy,
        };
        if let Err(e) = self.host.set_ownership(target, &owner) {
            let _ = self.host.unmount(target);
            return Err(format!(
                "applying fsGroup {group} to {}: {e}",
                target.display()
            ));
        }
        Ok(None)
    }

    fn ensure_tmpfs(&self, dir: &Path) -> Result<(), String> {
        if !self.files {
            return Ok(());
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        if !self.host.is_mount_point(dir).map_err(|e| e.to_string())? {
            self.host
                .mount_tmpfs(dir, None)
                .map_err(|e| format!("mounting tmpfs at {}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// Unmounts what is mounted under the pod's directory and removes it; forgets the pod.
    /// A mount stacked on another at one path (listed once) is unmounted in a second round;
    /// the directory is removed only once nothing is mounted under it, so that a bind-mounted
    /// local volume's data is never removed with it.
    pub fn tear_down(&self, uid: &str) -> Result<()> {
        self.attempts.lock().remove(uid);
        self.tokens.forget(uid);
        self.claim_mounts.lock().retain(|(u, _), _| u != uid);
        let dir = self.pod_dir(uid);
        for _round in 0..3 {
            let mounts = self
                .host
                .mounts_under(&dir)
                .map_err(|source| Error::ListMounts {
                    path: dir.clone(),
                    source,
                })?;
            if mounts.is_empty() {
                break;
            }
            for path in mounts {
                self.host
                    .unmount(&path)
                    .map_err(|source| Error::Unmount { path, source })?;
            }
        }
        let left = self
            .host
            .mounts_under(&dir)
            .map_err(|source| Error::ListMounts {
                path: dir.clone(),
                source,
            })?;
        if let Some(path) = left.into_iter().next() {
            return Err(Error::Unmount {
                path,
                source: std::io::Error::other("still mounted after unmounting it"),
            });
        }
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Remove {
                path: dir,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Tears down the directories of pods that `keep` does not name (pods deleted while the
    /// kubelet was down); failures are logged.
    pub fn tear_down_others(&self, keep: impl Fn(&str) -> bool) {
        for uid in self.pods_on_disk() {
            if !keep(&uid) {
                tracing::info!(uid, "removing the volumes of a pod that is gone");
                if let Err(e) = self.tear_down(&uid) {
                    tracing::warn!(uid, error = %e, "removing the volumes of a pod that is gone");
                }
            }
        }
    }

    /// The uids of the pods that have a directory here.
    pub fn pods_on_disk(&self) -> Vec<String> {
        std::fs::read_dir(&self.pods_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .collect()
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
