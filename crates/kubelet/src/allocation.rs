//! What this kubelet allocated to each pod it runs (upstream's allocation manager,
//! `pkg/kubelet/allocation`): for each resizable container (app containers and sidecars) the
//! requests and limits it was admitted with or last resized to (*allocated*), and those its
//! running container was created or updated with (*actuated*). Containers are started with
//! the allocated resources, not the spec's: a spec that differs is a resize the kubelet has
//! yet to accept ([`crate::resize`]). Both are kept in one JSON checkpoint in the kubelet's data
//! dir (upstream keeps them in `allocated_pods_state` and `actuated_pods_state` under its root
//! dir), so that a restarted kubelet carries on with what it had allocated. The resize
//! conditions of each pod (`PodResizePending`, `PodResizeInProgress`) are kept here too, in
//! memory, as upstream's status manager keeps them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, PodCondition, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use skiff_apimachinery::quantity::{Quantity, format_canonical};

use crate::actions::is_sidecar;

/// The checkpoint's file name in the kubelet's data dir.
pub const CHECKPOINT_FILE: &str = "pod_resources_state.json";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Upstream's words when its allocation checkpoint cannot be read back.
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete pod allocation checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore { path: PathBuf, reason: String },
    #[error("writing the pod allocation checkpoint {path:?}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One pod's resources, by container name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct PodResources {
    allocated: BTreeMap<String, ResourceRequirements>,
    #[serde(default)]
    actuated: BTreeMap<String, ResourceRequirements>,
}

/// What the checkpoint holds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Checkpoint {
    /// By pod uid.
    pods: BTreeMap<String, PodResources>,
}

/// A pod's resize conditions, as the kubelet last set them.
#[derive(Debug, Clone, Default)]
struct ResizeConditions {
    pending: Option<PodCondition>,
    in_progress: Option<PodCondition>,
}

/// `PodResizePending`'s reasons (upstream's `PodReasonDeferred`, `PodReasonInfeasible`) and
/// `PodResizeInProgress`'s on failure (`PodReasonError`).
pub const REASON_DEFERRED: &str = "Deferred";
pub const REASON_INFEASIBLE: &str = "Infeasible";
pub const REASON_ERROR: &str = "Error";
pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// The allocations of one kubelet. `state` guards the checkpoint's contents and the
/// conditions; it is held only to read or change them (and to write the file), never across
/// an await. `decisions` is held across a decision that reads other pods' allocations and
/// changes one (a new pod's admission, a resize's), so that two pods cannot both take the
/// same room (upstream's `allocationMutex`).
pub struct Allocations {
    /// Where the checkpoint lives; None keeps it in memory (hollow nodes, tests).
    path: Option<PathBuf>,
    state: Mutex<(Checkpoint, HashMap<String, ResizeConditions>)>,
    decisions: tokio::sync::Mutex<()>,
}

/// The containers whose resources can change in place: app containers and sidecars (upstream's
/// `IsResizableContainer`; other init containers have run to completion).
pub fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let sidecars = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c));
    sidecars.chain(spec.into_iter().flat_map(|s| s.containers.iter()))
}

/// A container's requests and limits with each quantity in its canonical form (as upstream's
/// `Quantity` serializes: `0.5` becomes `500m`), without claims.
pub fn canonical(resources: Option<&ResourceRequirements>) -> ResourceRequirements {
    let list = |l: Option<&BTreeMap<String, K8sQuantity>>| {
        let out: BTreeMap<String, K8sQuantity> = l
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let q = Quantity::parse(&v.0)
                    .map(|q| format_canonical(q.nano_value(), q.format()))
                    .unwrap_or_else(|_| v.0.clone());
                (k.clone(), K8sQuantity(q))
            })
            .collect();
        (!out.is_empty()).then_some(out)
    };
    let r = resources;
    ResourceRequirements {
        limits: list(r.and_then(|r| r.limits.as_ref())),
        requests: list(r.and_then(|r| r.requests.as_ref())),
        claims: None,
    }
}

/// Whether two containers' requests and limits are the same amounts (upstream's semantic
/// equality: `500m` is `0.5`).
pub fn same_resources(a: Option<&ResourceRequirements>, b: Option<&ResourceRequirements>) -> bool {
    canonical(a) == canonical(b)
}

impl Default for Allocations {
    fn default() -> Self {
        Allocations::in_memory()
    }
}

impl Allocations {
    /// Allocations kept in memory only.
    pub fn in_memory() -> Allocations {
        Allocations {
            path: None,
            state: Mutex::default(),
            decisions: tokio::sync::Mutex::new(()),
        }
    }

    /// The allocations checkpointed in `dir`, or none if there is no checkpoint yet.
    pub fn load(dir: &Path) -> Result<Allocations> {
        let path = dir.join(CHECKPOINT_FILE);
        let checkpoint = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| Error::Restore {
                path: path.clone(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Checkpoint::default(),
            Err(e) => {
                return Err(Error::Restore {
                    path,
                    reason: e.to_string(),
                });
            }
        };
        Ok(Allocations {
            path: Some(path),
            state: Mutex::new((checkpoint, HashMap::new())),
            decisions: tokio::sync::Mutex::new(()),
        })
    }

    /// Held across a decision that reads the other pods' allocations and changes one.
    pub async fn decision(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.decisions.lock().await
    }

    /// Writes the checkpoint: a new file renamed over the old one, so that a crash leaves
    /// either.
    fn save(&self, checkpoint: &Checkpoint) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let write = || {
            let tmp = path.with_extension("json.tmp");
            let bytes = serde_json::to_vec(checkpoint).map_err(std::io::Error::other)?;
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, &bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })
    }

    /// Changes the checkpoint with `f`, which says whether it changed anything, and writes it
    /// if so.
    fn update(&self, f: impl FnOnce(&mut Checkpoint) -> bool) -> Result<()> {
        let mut state = self.state.lock();
        if f(&mut state.0) {
            self.save(&state.0)?;
        }
        Ok(())
    }

    /// Whether the pod has an allocation.
    pub fn is_allocated(&self, uid: &str) -> bool {
        self.state.lock().0.pods.contains_key(uid)
    }

    /// The resources allocated to one container of a pod.
    pub fn allocated(&self, uid: &str, container: &str) -> Option<ResourceRequirements> {
        let state = self.state.lock();
        state.0.pods.get(uid)?.allocated.get(container).cloned()
    }

    /// The resources a pod's container was last created or updated with.
    pub fn actuated(&self, uid: &str, container: &str) -> Option<ResourceRequirements> {
        let state = self.state.lock();
        state.0.pods.get(uid)?.actuated.get(container).cloned()
    }

    /// The pod with each resizable container's resources replaced by what was allocated to it
    /// (upstream's `UpdatePodFromAllocation`), if any differs; None when the pod is as
    /// allocated (or has no allocation).
    pub fn differing(&self, pod: &Pod) -> Option<Pod> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let state = self.state.lock();
        let allocated = &state.0.pods.get(uid)?.allocated;
        let differs = |c: &Container| {
            allocated
                .get(&c.name)
                .is_some_and(|a| !same_resources(c.resources.as_ref(), Some(a)))
        };
        if !resizable(pod).any(differs) {
            return None;
        }
        let mut out = pod.clone();
        let spec = out.spec.as_mut()?;
        let containers = spec
            .init_containers
            .iter_mut()
            .flatten()
            .filter(|c| is_sidecar(c))
            .chain(spec.containers.iter_mut());
        for c in containers {
            if let Some(a) = allocated.get(&c.name) {
                c.resources = Some(a.clone());
            }
        }
        Some(out)
    }

    /// [`Allocations::differing`], or the pod itself when it is as allocated.
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        match self.differing(pod) {
            Some(p) => Arc::new(p),
            None => pod.clone(),
        }
    }

    /// Records the pod's resizable containers' resources as its allocation (at admission, and
    /// when a resize is accepted).
    pub fn set_allocated(&self, pod: &Pod) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let allocated: BTreeMap<String, ResourceRequirements> = resizable(pod)
            .map(|c| (c.name.clone(), canonical(c.resources.as_ref())))
            .collect();
        self.update(|c| {
            let pod = c.pods.entry(uid).or_default();
            let changed = pod.allocated != allocated;
            pod.allocated = allocated;
            changed
        })
    }

    /// Records the resources a container was just created or updated with.
    pub fn set_actuated(&self, uid: &str, container: &Container) -> Result<()> {
        let resources = canonical(container.resources.as_ref());
        self.update(|c| {
            let pod = c.pods.entry(uid.to_string()).or_default();
            pod.actuated
                .insert(container.name.clone(), resources.clone())
                != Some(resources)
        })
    }

    /// Forgets a pod (removed from the node).
    pub fn remove(&self, uid: &str) -> Result<()> {
        self.state.lock().1.remove(uid);
        self.update(|c| c.pods.remove(uid).is_some())
    }

    /// Forgets every pod but those `keep` names (the pods of the first list after a
    /// restart): upstream's `RemoveOrphanedPods`.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) -> Result<()> {
        self.state.lock().1.retain(|uid, _| keep(uid));
        self.update(|c| {
            let before = c.pods.len();
            c.pods.retain(|uid, _| keep(uid));
            c.pods.len() != before
        })
    }

    /// Sets `PodResizePending` with `reason` and `message`; its transition time changes with
    /// the reason (upstream's `SetPodResizePendingCondition`).
    pub fn set_pending(&self, uid: &str, reason: &str, message: &str, now: Timestamp) {
        let mut state = self.state.lock();
        let conditions = state.1.entry(uid.to_string()).or_default();
        conditions.pending = Some(condition(
            POD_RESIZE_PENDING,
            conditions.pending.as_ref(),
            reason,
            message,
            now,
        ));
    }

    pub fn clear_pending(&self, uid: &str) {
        if let Some(c) = self.state.lock().1.get_mut(uid) {
            c.pending = None;
        }
    }

    /// Sets `PodResizeInProgress`; with an empty reason and message, those it has are kept
    /// (an error stays until the next attempt clears it with [`Allocations::clear_in_progress`]).
    pub fn set_in_progress(&self, uid: &str, reason: &str, message: &str, now: Timestamp) {
        let mut state = self.state.lock();
        let conditions = state.1.entry(uid.to_string()).or_default();
        let old = conditions.in_progress.as_ref();
        let (reason, message) = match old {
            Some(o) if reason.is_empty() && message.is_empty() => (
                o.reason.clone().unwrap_or_default(),
                o.message.clone().unwrap_or_default(),
            ),
            _ => (reason.to_string(), message.to_string()),
        };
        conditions.in_progress = Some(condition(
            POD_RESIZE_IN_PROGRESS,
            old,
            &reason,
            &message,
            now,
        ));
    }

    /// Removes `PodResizeInProgress`; whether the pod had it.
    pub fn clear_in_progress(&self, uid: &str) -> bool {
        let mut state = self.state.lock();
        state
            .1
            .get_mut(uid)
            .is_some_and(|c| c.in_progress.take().is_some())
    }

    /// The pod's resize conditions, `PodResizePending` first.
    pub fn conditions(&self, uid: &str) -> Vec<PodCondition> {
        let state = self.state.lock();
        let Some(c) = state.1.get(uid) else {
            return Vec::new();
        };
        c.pending.iter().chain(&c.in_progress).cloned().collect()
    }

    /// The pods whose resize is deferred (waiting for room on the node).
    pub fn deferred(&self) -> Vec<String> {
        let state = self.state.lock();
        state
            .1
            .iter()
            .filter(|(_, c)| {
                c.pending
                    .as_ref()
                    .is_some_and(|p| p.reason.as_deref() == Some(REASON_DEFERRED))
            })
            .map(|(uid, _)| uid.clone())
            .collect()
    }
}

/// A resize condition (status `True`), its transition time carried over while the reason
/// stays the same. `lastProbeTime` is when the reason or message last changed (upstream sets
/// it on every evaluation).
fn condition(
    type_: &str,
    old: Option<&PodCondition>,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> PodCondition {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let (reason, message) = (non_empty(reason), non_empty(message));
    let same_reason = old.filter(|o| o.reason == reason);
    let since = same_reason
        .and_then(|o| o.last_transition_time.clone())
        .unwrap_or(Time(now));
    let probed = same_reason
        .filter(|o| o.message == message)
        .and_then(|o| o.last_probe_time.clone())
        .unwrap_or(Time(now));
    PodCondition {
        type_: type_.into(),
        status: "True".into(),
        reason,
        message,
        last_transition_time: Some(since),
        last_probe_time: Some(probed),
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, cpu_limit: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {
                "initContainers": [
                    {"name": "init", "image": "busybox",
                     "resources": {"requests": {"cpu": "1"}}},
                    {"name": "sidecar", "image": "busybox", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "50m"}}},
                ],
                "containers": [{"name": "c", "image": "busybox", "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": cpu_limit, "memory": "128Mi"}}}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_checkpoint_survives_a_restart_and_a_resized_spec_reads_as_allocated() {
        let dir = tempfile::tempdir().unwrap();
        let allocations = Allocations::load(dir.path()).unwrap();
        let admitted = pod("u1", "0.2");
        allocations.set_allocated(&admitted).unwrap();
        allocations
            .set_actuated("u1", &admitted.spec.as_ref().unwrap().containers[0])
            .unwrap();
        assert!(
            allocations.differing(&pod("u1", "200m")).is_none(),
            "0.2 is 200m"
        );

        let restarted = Allocations::load(dir.path()).unwrap();
        assert!(restarted.is_allocated("u1"));
        let c = restarted.allocated("u1", "c").unwrap();
        assert_eq!(c.limits.unwrap()["cpu"].0, "200m", "kept canonical");
        assert!(restarted.actuated("u1", "c").is_some());
        assert!(
            restarted.allocated("u1", "init").is_none(),
            "only resizable containers are allocated"
        );
        assert!(restarted.allocated("u1", "sidecar").is_some());

        let resized = pod("u1", "300m");
        let as_allocated = restarted.differing(&resized).expect("the spec differs");
        let c = &as_allocated.spec.unwrap().containers[0];
        assert_eq!(
            c.resources.as_ref().unwrap().limits.as_ref().unwrap()["cpu"].0,
            "200m"
        );

        restarted.retain(|uid| uid == "other").unwrap();
        assert!(!Allocations::load(dir.path()).unwrap().is_allocated("u1"));
    }

    #[test]
    fn a_corrupt_checkpoint_is_refused_with_upstreams_advice() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CHECKPOINT_FILE), "{not json").unwrap();
        let Err(e) = Allocations::load(dir.path()) else {
            panic!("a corrupt checkpoint loaded");
        };
        let message = e.to_string();
        assert!(message.starts_with("could not restore state from checkpoint: "));
        assert!(message.contains("please drain this node and delete pod allocation checkpoint"));
    }

    #[test]
    fn conditions_keep_their_transition_time_while_the_reason_stays_and_errors_stick() {
        let allocations = Allocations::in_memory();
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        allocations.set_pending("u", REASON_DEFERRED, "no room", t0);
        allocations.set_pending("u", REASON_DEFERRED, "still no room", t1);
        let pending = &allocations.conditions("u")[0];
        assert_eq!(pending.last_transition_time, Some(Time(t0)));
        assert_eq!(pending.message.as_deref(), Some("still no room"));
        assert_eq!(allocations.deferred(), ["u"]);
        allocations.set_pending("u", REASON_INFEASIBLE, "too big", t1);
        assert_eq!(
            allocations.conditions("u")[0].last_transition_time,
            Some(Time(t1))
        );
        assert!(allocations.deferred().is_empty());

        allocations.set_in_progress("u", REASON_ERROR, "boom", t0);
        allocations.set_in_progress("u", "", "", t1);
        let types: Vec<_> = allocations
            .conditions("u")
            .into_iter()
            .map(|c| (c.type_, c.reason))
            .collect();
        assert_eq!(
            types,
            [
                (POD_RESIZE_PENDING.to_string(), Some("Infeasible".into())),
                (POD_RESIZE_IN_PROGRESS.to_string(), Some("Error".into()))
            ]
        );
        allocations.clear_pending("u");
        assert!(allocations.clear_in_progress("u"));
        assert!(!allocations.clear_in_progress("u"));
        assert!(allocations.conditions("u").is_empty());
    }
}
