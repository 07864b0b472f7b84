//! One Deployment sync's state and the steps every strategy shares (upstream's `sync.go`):
//! finding or creating the new ReplicaSet and syncing revisions, scaling a ReplicaSet with its
//! `ScalingReplicaSet` event, proportional scaling of a resized or paused Deployment, and
//! deleting ReplicaSets beyond `revisionHistoryLimit`.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use skiff_runtime::controller::Action;
use skiff_runtime::events::EventType;

use super::util::{self, desired, max_surge, replicas};
use super::{DeploymentApi, Error, Result, hash, key};
use crate::podutil;

/// The ReplicaSets of a Deployment: the one whose template is the Deployment's, and the rest.
#[derive(Debug, Clone, Default)]
pub struct Sets {
    pub new: Option<ReplicaSet>,
    pub old: Vec<ReplicaSet>,
}

impl Sets {
    pub fn all(&self) -> impl Iterator<Item = &ReplicaSet> {
        self.old.iter().chain(self.new.iter())
    }

    /// Puts an updated ReplicaSet in place of the one with its uid.
    pub fn replace(&mut self, rs: ReplicaSet) {
        let uid = rs.metadata.uid.clone();
        if let Some(new) = self.new.as_mut().filter(|n| n.metadata.uid == uid) {
            *new = rs;
        } else if let Some(old) = self.old.iter_mut().find(|o| o.metadata.uid == uid) {
            *old = rs;
        }
    }
}

/// One sync of one Deployment: the working copy and what the sync learnt.
pub struct Syncer<'a> {
    pub api: &'a dyn DeploymentApi,
    pub now: jiff::Timestamp,
    /// The Deployment as this sync changes it.
    pub d: Deployment,
    /// The annotations the server holds (a status write does not store annotations).
    stored_annotations: Option<BTreeMap<String, String>>,
    /// When to look again even without a change (a progress deadline or minReadySeconds).
    pub requeue: Option<Duration>,
}

impl<'a> Syncer<'a> {
    pub fn new(api: &'a dyn DeploymentApi, d: Deployment, now: jiff::Timestamp) -> Syncer<'a> {
        Syncer {
            api,
            now,
            stored_annotations: d.metadata.annotations.clone(),
            d,
            requeue: None,
        }
    }

    pub fn action(&self) -> Action {
        self.requeue
            .map_or(Action::AwaitChange, Action::RequeueAfter)
    }

    pub(super) fn failed(&self, step: String) -> impl FnOnce(kube::Error) -> Error {
        let key = key(&self.d);
        move |source| Error::Api { key, step, source }
    }

    /// Writes the status (upstream's `UpdateStatus`). A changed revision annotation is written
    /// to the Deployment first: Skiff's status writes keep only `.status`.
    pub async fn write_status(&mut self) -> Result<()> {
        if self.d.metadata.annotations != self.stored_annotations {
            let before = self.d.metadata.generation;
            let updated = self
                .api
                .update_deployment(&self.d)
                .await
                .map_err(self.failed("updating the revision annotation".into()))?;
            self.stored_annotations = updated.metadata.annotations.clone();
            let status = self.d.status.get_or_insert_with(Default::default);
            if status.observed_generation == before {
                status.observed_generation = updated.metadata.generation;
            }
            self.d.metadata = updated.metadata;
        }
        let updated = self
            .api
            .update_status(&self.d)
            .await
            .map_err(self.failed("updating status".into()))?;
        self.d.metadata.resource_version = updated.metadata.resource_version;
        Ok(())
    }

    /// Upstream's `getAllReplicaSetsAndSyncRevision`.
    pub async fn sets(&mut self, list: &[ReplicaSet], create: bool) -> Result<Sets> {
        let template = self.template();
        let mut sorted: Vec<&ReplicaSet> = list.iter().collect();
        sorted.sort_by(|a, b| util::by_creation(a, b));
        let existing = sorted.into_iter().find(|rs| {
            rs.spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .is_some_and(|t| hash::equal_ignore_hash(t, &template))
        });
        let new_uid = existing.and_then(|rs| rs.metadata.uid.clone());
        let old: Vec<ReplicaSet> = list
            .iter()
            .filter(|rs| new_uid.is_none() || rs.metadata.uid != new_uid)
            .cloned()
            .collect();
        let new = self.new_replica_set(existing, &old, create).await?;
        Ok(Sets { new, old })
    }

    fn template(&self) -> k8s_openapi::api::core::v1::PodTemplateSpec {
        self.d
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default()
    }

    fn min_ready_seconds(&self) -> Option<i32> {
        self.d.spec.as_ref().and_then(|s| s.min_ready_seconds)
    }

    /// Upstream's `getNewReplicaSet`: syncs the existing new ReplicaSet's revision, or creates it.
    async fn new_replica_set(
        &mut self,
        existing: Option<&ReplicaSet>,
        old: &[ReplicaSet],
        create: bool,
    ) -> Result<Option<ReplicaSet>> {
        let new_revision = util::max_revision(old) + 1;
        if let Some(existing) = existing {
            let mut rs = existing.clone();
            let annotations_changed =
                util::set_new_replica_set_annotations(&self.d, &mut rs, new_revision, true);
            let min_ready = self.min_ready_seconds();
            let min_ready_changed = rs
                .spec
                .as_ref()
                .and_then(|s| s.min_ready_seconds)
                .unwrap_or(0)
                != min_ready.unwrap_or(0);
            if annotations_changed || min_ready_changed {
                rs.spec
                    .get_or_insert_with(Default::default)
                    .min_ready_seconds = min_ready;
                rs = self
                    .api
                    .update_replica_set(&rs)
                    .await
                    .map_err(self.failed(format!("updating replica set {}", rs.name_any())))?;
            }
            let revision = util::revision(&rs).to_string();
            let mut needs_update = util::set_deployment_revision(&mut self.d, &revision);
            let deadline = util::has_progress_deadline(&self.d);
            let status = self.d.status.get_or_insert_with(Default::default);
            if deadline && util::condition(status, "Progressing").is_none() {
                let message = format!("Found new replica set {:?}", rs.name_any());
                let c = util::new_condition(
                    "Progressing",
                    "True",
                    "FoundNewReplicaSet",
                    message,
                    self.now,
                );
                util::set_condition(status, c);
                needs_update = true;
            }
            if needs_update {
                self.write_status().await?;
            }
            return Ok(Some(rs));
        }
        if !create {
            return Ok(None);
        }
        self.create_new_replica_set(old, new_revision)
            .await
            .map(Some)
    }

    async fn create_new_replica_set(
        &mut self,
        old: &[ReplicaSet],
        new_revision: i64,
    ) -> Result<ReplicaSet> {
        let collision_count = self.d.status.as_ref().and_then(|s| s.collision_count);
        let mut template = self.template();
        let template_hash = hash::compute(&template, collision_count);
        template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert(hash::LABEL.into(), template_hash.clone());
        let mut selector = self
            .d
            .spec
            .as_ref()
            .map(|s| s.selector.clone())
            .unwrap_or_default();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(hash::LABEL.into(), template_hash.clone());
        let name = format!("{}-{template_hash}", self.d.name_any());
        let mut rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: self.d.namespace(),
                owner_references: Some(vec![podutil::controller_ref(
                    "apps/v1",
                    "Deployment",
                    &self.d.metadata,
                )]),
                labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
                ..Default::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: self.min_ready_seconds(),
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let all: Vec<&ReplicaSet> = old.iter().chain(std::iter::once(&rs)).collect();
        let count = super::rolling::new_rs_new_replicas(&self.d, all.iter().copied(), &rs);
        util::set_replicas(&mut rs, count);
        util::set_new_replica_set_annotations(&self.d, &mut rs, new_revision, false);
        let created = match self.api.create_replica_set(&rs).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let found = self
                    .api
                    .get_replica_set(&rs.namespace().unwrap_or_default(), &name)
                    .await
                    .map_err(self.failed(format!("reading replica set {name}")))?;
                let ours = podutil::controller_of(&found.metadata)
                    .is_some_and(|r| Some(&r.uid) == self.d.metadata.uid.as_ref());
                let same = found
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| hash::equal_ignore_hash(t, &self.template()));
                if ours && same {
                    // our own, not yet in the cache: it is the new ReplicaSet
                    return Ok(found);
                }
                let status = self.d.status.get_or_insert_with(Default::default);
                status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
                let _ = self.write_status().await;
                return Err(Error::Collision {
                    key: key(&self.d),
                    name,
                });
            }
            Err(e) => {
                let message = format!(
                    "Failed to create new replica set {name:?}: {}",
                    podutil::error_message(&e)
                );
                if util::has_progress_deadline(&self.d) {
                    let c = util::new_condition(
                        "Progressing",
                        "False",
                        "ReplicaSetCreateError",
                        message.clone(),
                        self.now,
                    );
                    util::set_condition(self.d.status.get_or_insert_with(Default::default), c);
                    let _ = self.write_status().await;
                }
                self.api.event(
                    &self.d,
                    EventType::Warning,
                    "ReplicaSetCreateError",
                    message,
                );
                return Err(self.failed(format!("creating replica set {name}"))(e));
            }
        };
        if count > 0 {
            self.api.event(
                &self.d,
                EventType::Normal,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {count}"),
            );
        }
        util::set_deployment_revision(&mut self.d, &new_revision.to_string());
        if util::has_progress_deadline(&self.d) {
            let message = format!("Created new replica set {name:?}");
            let c = util::new_condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                message,
                self.now,
            );
            util::set_condition(self.d.status.get_or_insert_with(Default::default), c);
        }
        self.write_status().await?;
        Ok(created)
    }

    /// Upstream's `scaleReplicaSet`: sets the size and the replicas annotations; whether the
    /// size changed, and the ReplicaSet as now stored.
    pub async fn scale_replica_set(
        &mut self,
        rs: &ReplicaSet,
        size: i32,
        operation: &str,
    ) -> Result<(bool, ReplicaSet)> {
        let size_changed = replicas(rs) != size;
        let (want, max) = (desired(&self.d), desired(&self.d) + max_surge(&self.d));
        if !size_changed && !util::replicas_annotations_need_update(rs, want, max) {
            return Ok((false, rs.clone()));
        }
        let mut copy = rs.clone();
        util::set_replicas(&mut copy, size);
        util::set_replicas_annotations(&mut copy, want, max);
        let updated = self
            .api
            .update_replica_set(&copy)
            .await
            .map_err(self.failed(format!("scaling replica set {}", rs.name_any())))?;
        if size_changed {
            self.api.event(
                &self.d,
                EventType::Normal,
                "ScalingReplicaSet",
                format!(
                    "Scaled {operation} replica set {} from {} to {size}",
                    rs.name_any(),
                    replicas(rs)
                ),
            );
        }
        Ok((size_changed, updated))
    }

    /// Upstream's `scaleReplicaSetAndRecordEvent`.
    pub async fn scale_to(&mut self, rs: &ReplicaSet, size: i32) -> Result<(bool, ReplicaSet)> {
        if replicas(rs) == size {
            return Ok((false, rs.clone()));
        }
        let operation = if replicas(rs) < size { "up" } else { "down" };
        self.scale_replica_set(rs, size, operation).await
    }

    /// Upstream's `isScalingEvent`: an active ReplicaSet was sized for another replica count.
    pub async fn is_scaling_event(&mut self, list: &[ReplicaSet]) -> Result<bool> {
        let sets = self.sets(list, false).await?;
        let want = desired(&self.d);
        Ok(sets
            .all()
            .filter(|rs| replicas(rs) > 0)
            .any(|rs| util::desired_annotation(rs).is_some_and(|d| d != want)))
    }

    /// Upstream's `sync`: scaling only (resized or paused Deployments), then the status.
    pub async fn sync(&mut self, list: &[ReplicaSet]) -> Result<()> {
        let mut sets = self.sets(list, false).await?;
        self.scale(&mut sets).await?;
        if self.d.spec.as_ref().and_then(|s| s.paused) == Some(true) {
            self.cleanup(&sets.old).await?;
        }
        self.sync_deployment_status(&sets).await
    }

    /// Upstream's `syncStatusOnly` (a Deployment being deleted).
    pub async fn sync_status_only(&mut self, list: &[ReplicaSet]) -> Result<()> {
        let sets = self.sets(list, false).await?;
        self.sync_deployment_status(&sets).await
    }

    /// Upstream's `scale`: the one active ReplicaSet gets all replicas; a saturated new one
    /// drains the old ones; otherwise a rolling Deployment's change in size is spread over its
    /// active ReplicaSets in proportion to their sizes.
    async fn scale(&mut self, sets: &mut Sets) -> Result<()> {
        let want = desired(&self.d);
        if let Some(rs) = active_or_latest(sets) {
            if replicas(&rs) != want {
                let (_, updated) = self.scale_to(&rs, want).await?;
                sets.replace(updated);
            }
            return Ok(());
        }
        if is_saturated(&self.d, sets.new.as_ref()) {
            for old in sets.old.clone().iter().filter(|rs| replicas(rs) > 0) {
                let (_, updated) = self.scale_to(old, 0).await?;
                sets.replace(updated);
            }
            return Ok(());
        }
        if !util::is_rolling_update(&self.d) {
            return Ok(());
        }
        let mut active: Vec<ReplicaSet> =
            sets.all().filter(|rs| replicas(rs) > 0).cloned().collect();
        let allowed = if want > 0 {
            want + max_surge(&self.d)
        } else {
            0
        };
        let to_add = allowed - util::replica_count(&active);
        let operation = match to_add {
            n if n > 0 => {
                active.sort_by(util::by_size_newer);
                "up"
            }
            n if n < 0 => {
                active.sort_by(util::by_size_older);
                "down"
            }
            _ => "",
        };
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::with_capacity(active.len());
        for rs in &active {
            let proportion = if to_add != 0 {
                proportion(rs, &self.d, to_add, added)
            } else {
                0
            };
            added += proportion;
            sizes.push(replicas(rs) + proportion);
        }
        if to_add != 0
            && let Some(first) = sizes.first_mut()
        {
            *first = (*first + to_add - added).max(0);
        }
        for (rs, size) in active.iter().zip(sizes) {
            let (_, updated) = self.scale_replica_set(rs, size, operation).await?;
            sets.replace(updated);
        }
        Ok(())
    }

    /// Upstream's `cleanupDeployment`: deletes the oldest scaled-down ReplicaSets beyond
    /// `revisionHistoryLimit`.
    pub async fn cleanup(&mut self, old: &[ReplicaSet]) -> Result<()> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut cleanable: Vec<&ReplicaSet> = old
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let excess = cleanable.len() as i64 - i64::from(limit);
        if excess <= 0 {
            return Ok(());
        }
        cleanable.sort_by(|a, b| util::by_revision(a, b));
        for rs in cleanable.into_iter().take(excess as usize) {
            let observed = rs.status.as_ref().and_then(|s| s.observed_generation);
            if util::status_replicas(rs) != 0
                || replicas(rs) != 0
                || rs.metadata.generation > observed
            {
                continue;
            }
            self.api
                .delete_replica_set(rs)
                .await
                .map_err(self.failed(format!("deleting replica set {}", rs.name_any())))?;
        }
        Ok(())
    }
}

/// Upstream's `FindActiveOrLatest`: the only active ReplicaSet, or the newest when none is.
fn active_or_latest(sets: &Sets) -> Option<ReplicaSet> {
    if sets.new.is_none() && sets.old.is_empty() {
        return None;
    }
    let active: Vec<&ReplicaSet> = sets.all().filter(|rs| replicas(rs) > 0).collect();
    match active.len() {
        0 => sets.new.clone().or_else(|| {
            sets.old
                .iter()
                .max_by(|a, b| util::by_creation(a, b))
                .cloned()
        }),
        1 => Some(active[0].clone()),
        _ => None,
    }
}

/// Upstream's `IsSaturated`: the new ReplicaSet is sized for, and has available, every replica.
fn is_saturated(d: &Deployment, rs: Option<&ReplicaSet>) -> bool {
    let Some(rs) = rs else { return false };
    let want = desired(d);
    replicas(rs) == want
        && util::desired_annotation(rs) == Some(want)
        && util::available(rs) == want
}

/// Upstream's `GetProportion`/`getReplicaSetFraction`: this ReplicaSet's share of `to_add`.
fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if desired(d) == 0 {
        -replicas(rs)
    } else {
        let total = desired(d) + max_surge(d);
        let annotated = util::max_annotation(rs)
            .unwrap_or_else(|| d.status.as_ref().map_or(0, |s| s.replicas.unwrap_or(0)));
        if annotated == 0 {
            0
        } else {
            let size = f64::from(replicas(rs)) * f64::from(total) / f64::from(annotated);
            size.round() as i32 - replicas(rs)
        }
    };
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}
