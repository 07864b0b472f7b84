//! `replicaset`: keeps `spec.replicas` active pods from each ReplicaSet's template (upstream's
//! ReplicaSetController). It adopts orphan pods its selector matches and releases owned pods it
//! no longer matches (upstream's `ControllerRefManager`), creates missing pods in slow-start
//! batches (1, 2, 4, …; the first failure stops the rest), deletes surplus pods in
//! [`crate::ranking`] order, and does not act on a ReplicaSet again until its informer has seen
//! the pods it created or deleted ([`Expectations`]). It writes `status` (replicas,
//! fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration, the
//! `ReplicaFailure` condition) and events `SuccessfulCreate`, `FailedCreate`, `SuccessfulDelete`,
//! `FailedDelete`.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use skiff_apimachinery::labels::Selector;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::{Event, EventType, Recorder};
use skiff_runtime::informer::Change;
use skiff_runtime::mutation::MutationCache;
use skiff_runtime::workqueue::WorkQueue;
use tokio::time::Instant;

use crate::expectations::Expectations;
use crate::{Context, claim, podutil, ranking};

/// Upstream's `BurstReplicas`: at most this many creates or deletes per sync.
pub const BURST_REPLICAS: usize = 500;

/// Why a sync failed; each is retried with the key's backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The ReplicaSet's selector does not parse.
    #[error("replicaset {key}: invalid selector: {source}")]
    Selector {
        key: String,
        source: skiff_apimachinery::labels::Error,
    },
    /// Adopting or releasing a pod failed.
    #[error("replicaset {key}: claiming pod {pod}: {source}")]
    Claim {
        key: String,
        pod: String,
        source: kube::Error,
    },
    /// Creating or deleting pods failed (the rest of the batch was skipped).
    #[error("replicaset {key}: {source}")]
    Manage { key: String, source: kube::Error },
    /// Writing the status failed.
    #[error("replicaset {key}: updating status: {source}")]
    Status { key: String, source: kube::Error },
}

/// The API writes of this controller.
#[async_trait]
pub trait ReplicaSetApi: Send + Sync {
    /// Creates a pod (its name generated); returns it as stored.
    async fn create_pod(&self, namespace: &str, pod: &Pod) -> kube::Result<Pod>;
    async fn delete_pod(&self, namespace: &str, name: &str) -> kube::Result<()>;
    /// Applies a strategic-merge patch to a pod (adoption and release).
    async fn patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> kube::Result<()>;
    /// Replaces the ReplicaSet's status (a merge patch of `status`).
    async fn patch_status(&self, rs: &ReplicaSet, status: &ReplicaSetStatus) -> kube::Result<()>;
    /// Records an event about the ReplicaSet.
    fn event(&self, rs: &ReplicaSet, type_: EventType, reason: &str, note: String);
}

fn rs_key(rs: &ReplicaSet) -> String {
    podutil::key(&rs.metadata)
}

fn wanted(rs: &ReplicaSet) -> usize {
    rs.spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0) as usize
}

fn min_ready_seconds(rs: &ReplicaSet) -> i32 {
    rs.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

/// One sync of one ReplicaSet (upstream's `syncReplicaSet`) over the pods it may claim: its own
/// and its namespace's orphans ([`claim::claimable_in`]; any others are ignored).
pub async fn reconcile(
    rs: &ReplicaSet,
    candidates: Vec<Arc<Pod>>,
    api: &dyn ReplicaSetApi,
    expectations: &Expectations,
    now: jiff::Timestamp,
    instant: Instant,
) -> Result<Action, Error> {
    let key = rs_key(rs);
    let selector = podutil::selector(rs.spec.as_ref().map(|s| &s.selector)).map_err(|source| {
        Error::Selector {
            key: key.clone(),
            source,
        }
    })?;
    let needs_sync = expectations.satisfied(&key, instant);
    let active: Vec<Arc<Pod>> = candidates
        .into_iter()
        .filter(|p| podutil::is_active(p))
        .collect();
    let pods = claim_pods(rs, &selector, active, api).await?;
    let mut manage_error = None;
    if needs_sync && rs.metadata.deletion_timestamp.is_none() {
        manage_error = manage_replicas(rs, &pods, api, expectations, now, instant).await;
    }
    let status = calculate_status(rs, &pods, manage_error.as_ref(), now);
    if needs_status_update(rs, &status) {
        api.patch_status(rs, &status)
            .await
            .map_err(|source| Error::Status {
                key: key.clone(),
                source,
            })?;
    }
    if let Some(source) = manage_error {
        return Err(Error::Manage { key, source });
    }
    // come back when a ready pod becomes available, or unobserved expectations expire
    let min_ready = min_ready_seconds(rs);
    let next = pods
        .iter()
        .filter_map(|p| podutil::available_in(p, min_ready, now))
        .chain(expectations.expires_in(&key, instant))
        .min();
    Ok(next.map_or(Action::AwaitChange, Action::RequeueAfter))
}

/// Upstream's `ClaimPods`: the active pods this ReplicaSet controls after adopting matching
/// orphans and releasing owned pods that no longer match.
async fn claim_pods(
    rs: &ReplicaSet,
    selector: &Selector,
    pods: Vec<Arc<Pod>>,
    api: &dyn ReplicaSetApi,
) -> Result<Vec<Arc<Pod>>, Error> {
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    let namespace = rs.namespace().unwrap_or_default();
    let mut claimed = Vec::with_capacity(pods.len());
    for pod in pods {
        let matches = selector.matches(podutil::labels(&pod.metadata));
        let controller = podutil::controller_of(&pod.metadata);
        // the common case, checked before anything is allocated
        match controller {
            Some(r) if r.uid != uid => continue,
            Some(_) if matches || deleting => {
                claimed.push(pod);
                continue;
            }
            _ => {}
        }
        let pod_name = pod.name_any();
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let failed = |source| Error::Claim {
            key: rs_key(rs),
            pod: pod_name.clone(),
            source,
        };
        match controller {
            Some(r) if r.uid == uid => {
                let release = json!({"metadata": {
                    "ownerReferences": [{"$patch": "delete", "uid": uid}],
                    "uid": pod_uid,
                }});
                match api.patch_pod(&namespace, &pod_name, release).await {
                    Ok(()) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => {}
                    Err(e) => return Err(failed(e)),
                }
            }
            Some(_) => {}
            None => {
                if !matches || deleting || pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let owner = podutil::controller_ref("apps/v1", "ReplicaSet", &rs.metadata);
                let adopt = json!({"metadata": {"ownerReferences": [owner], "uid": pod_uid}});
                match api.patch_pod(&namespace, &pod_name, adopt).await {
                    Ok(()) => {
                        let mut adopted = (*pod).clone();
                        adopted
                            .metadata
                            .owner_references
                            .get_or_insert_with(Vec::new)
                            .push(owner);
                        claimed.push(Arc::new(adopted));
                    }
                    Err(e) if podutil::is_not_found(&e) => {}
                    Err(e) => return Err(failed(e)),
                }
            }
        }
    }
    Ok(claimed)
}

/// A pod from the ReplicaSet's template (upstream's `GetPodFromTemplate`).
pub fn pod_from_template(rs: &ReplicaSet) -> Pod {
    let template = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", rs.name_any())),
            namespace: rs.namespace(),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![podutil::controller_ref(
                "apps/v1",
                "ReplicaSet",
                &rs.metadata,
            )]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// Upstream's `manageReplicas`: creates or deletes the difference, at most [`BURST_REPLICAS`].
async fn manage_replicas(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    api: &dyn ReplicaSetApi,
    expectations: &Expectations,
    now: jiff::Timestamp,
    instant: Instant,
) -> Option<kube::Error> {
    let key = rs_key(rs);
    let namespace = rs.namespace().unwrap_or_default();
    let want = wanted(rs);
    if pods.len() < want {
        let count = (want - pods.len()).min(BURST_REPLICAS);
        expectations.expect_creations(&key, count, instant);
        let template = pod_from_template(rs);
        let create = || async {
            match api.create_pod(&namespace, &template).await {
                Ok(pod) => {
                    api.event(
                        rs,
                        EventType::Normal,
                        "SuccessfulCreate",
                        format!("Created pod: {}", pod.name_any()),
                    );
                    Ok(())
                }
                // upstream ignores creates refused because the namespace is terminating
                Err(kube::Error::Api(s))
                    if s.message.contains("because it is being terminated") =>
                {
                    Ok(())
                }
                Err(e) => {
                    let note = format!("Error creating: {}", podutil::error_message(&e));
                    api.event(rs, EventType::Warning, "FailedCreate", note);
                    Err(e)
                }
            }
        };
        let (created, error) = slow_start_batch(count, 1, create).await;
        for _ in created..count {
            expectations.creation_observed(&key);
        }
        return error;
    }
    if pods.len() > want {
        let count = (pods.len() - want).min(BURST_REPLICAS);
        let victims = ranking::pods_to_delete(pods, pods, count, now);
        let keys: Vec<String> = victims.iter().map(|p| podutil::key(&p.metadata)).collect();
        expectations.expect_deletions(&key, keys, instant);
        let namespace = namespace.as_str();
        let results = futures::future::join_all(victims.iter().map(|pod| async move {
            let name = pod.name_any();
            let result = api.delete_pod(namespace, &name).await;
            (pod, name, result)
        }))
        .await;
        let mut error = None;
        for (pod, name, result) in results {
            match result {
                Ok(()) => api.event(
                    rs,
                    EventType::Normal,
                    "SuccessfulDelete",
                    format!("Deleted pod: {name}"),
                ),
                Err(e) => {
                    expectations.deletion_observed(&key, &podutil::key(&pod.metadata));
                    if !podutil::is_not_found(&e) {
                        let note = format!("Error deleting: {}", podutil::error_message(&e));
                        api.event(rs, EventType::Warning, "FailedDelete", note);
                        error.get_or_insert(e);
                    }
                }
            }
        }
        return error;
    }
    None
}

/// Upstream's `slowStartBatch`: calls `f` `count` times in concurrent batches of
/// `initial`, 2·`initial`, 4·`initial`, …, stopping after the first batch with a failure;
/// returns the successes and the first error.
pub async fn slow_start_batch<F, Fut>(
    count: usize,
    initial: usize,
    f: F,
) -> (usize, Option<kube::Error>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    let mut remaining = count;
    let mut successes = 0;
    let mut batch = remaining.min(initial);
    while batch > 0 {
        let results = futures::future::join_all((0..batch).map(|_| f())).await;
        let mut error = None;
        for r in results {
            match r {
                Ok(()) => successes += 1,
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        if error.is_some() {
            return (successes, error);
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining);
    }
    (successes, None)
}

/// Upstream's `calculateStatus`.
fn calculate_status(
    rs: &ReplicaSet,
    pods: &[Arc<Pod>],
    manage_error: Option<&kube::Error>,
    now: jiff::Timestamp,
) -> ReplicaSetStatus {
    let template_labels = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let min_ready = min_ready_seconds(rs);
    let count = |f: &dyn Fn(&Pod) -> bool| pods.iter().filter(|p| f(p)).count() as i32;
    let fully_labeled = count(&|p| {
        let labels = podutil::labels(&p.metadata);
        template_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    });
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let has_failure = conditions.iter().any(|c| c.type_ == "ReplicaFailure");
    match manage_error {
        Some(e) if !has_failure => {
            let reason = if pods.len() < wanted(rs) {
                "FailedCreate"
            } else {
                "FailedDelete"
            };
            conditions.push(ReplicaSetCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(podutil::error_message(e)),
                last_transition_time: Some(Time(now)),
            });
        }
        None if has_failure => conditions.retain(|c| c.type_ != "ReplicaFailure"),
        _ => {}
    }
    ReplicaSetStatus {
        replicas: pods.len() as i32,
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(count(&podutil::is_ready)),
        available_replicas: Some(count(&|p| podutil::is_available(p, min_ready, now))),
        observed_generation: rs.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        terminating_replicas: old.terminating_replicas,
    }
}

fn needs_status_update(rs: &ReplicaSet, new: &ReplicaSetStatus) -> bool {
    let old = rs.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    old.replicas != new.replicas
        || n(old.fully_labeled_replicas) != n(new.fully_labeled_replicas)
        || n(old.ready_replicas) != n(new.ready_replicas)
        || n(old.available_replicas) != n(new.available_replicas)
        || old.observed_generation.unwrap_or(0) < rs.metadata.generation.unwrap_or(0)
        || old.conditions.unwrap_or_default() != new.conditions.clone().unwrap_or_default()
}

/// The ReplicaSets whose selector matches an orphan pod.
fn matching(pod: &Pod, store: &Cache<ReplicaSet>) -> Vec<Arc<ReplicaSet>> {
    claim::selecting(&pod.metadata, store, |rs| {
        rs.spec.as_ref().map(|s| &s.selector)
    })
}

type Queue = WorkQueue<ObjectRef<ReplicaSet>>;

fn enqueue(queue: &Queue, rs: &ReplicaSet) {
    queue.add(ObjectRef::from_obj(rs));
}

/// Upstream's `addPod`/`updatePod`/`deletePod`: lowers expectations and queues the owners.
fn on_pod(change: &Change<Pod>, store: &Cache<ReplicaSet>, exp: &Expectations, queue: &Queue) {
    let deleted = |pod: &Pod| {
        if let Some(rs) = claim::controller_in(&pod.metadata, store) {
            exp.deletion_observed(&rs_key(&rs), &podutil::key(&pod.metadata));
            enqueue(queue, &rs);
        }
    };
    match change {
        Change::Added(pod) => {
            if pod.metadata.deletion_timestamp.is_some() {
                return deleted(pod);
            }
            if podutil::controller_of(&pod.metadata).is_some() {
                if let Some(rs) = claim::controller_in(&pod.metadata, store) {
                    exp.creation_observed(&rs_key(&rs));
                    enqueue(queue, &rs);
                }
                return;
            }
            for rs in matching(pod, store) {
                enqueue(queue, &rs);
            }
        }
        Change::Updated { old, new } => {
            if new.metadata.deletion_timestamp.is_some() {
                deleted(new);
                if old.metadata.labels != new.metadata.labels {
                    deleted(old);
                }
                return;
            }
            let (old_ref, new_ref) = (
                podutil::controller_of(&old.metadata),
                podutil::controller_of(&new.metadata),
            );
            if old_ref != new_ref
                && let Some(rs) = claim::controller_in(&old.metadata, store)
            {
                enqueue(queue, &rs);
            }
            if new_ref.is_some() {
                if let Some(rs) = claim::controller_in(&new.metadata, store) {
                    enqueue(queue, &rs);
                }
                return;
            }
            if old.metadata.labels != new.metadata.labels || old_ref != new_ref {
                for rs in matching(new, store) {
                    enqueue(queue, &rs);
                }
            }
        }
        Change::Deleted { last, .. } => deleted(last),
    }
}

struct KubeReplicaSets {
    client: kube::Client,
    events: Recorder,
    /// Where the status writes go, for the next sync to read before the watch brings them.
    written: MutationCache<ReplicaSet>,
}

#[async_trait]
impl ReplicaSetApi for KubeReplicaSets {
    async fn create_pod(&self, namespace: &str, pod: &Pod) -> kube::Result<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.create(&PostParams::default(), pod).await
    }

    async fn delete_pod(&self, namespace: &str, name: &str) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.delete(name, &DeleteParams::default()).await.map(|_| ())
    }

    async fn patch_pod(
        &self,
        namespace: &str,
        name: &str,
        patch: serde_json::Value,
    ) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .map(|_| ())
    }

    async fn patch_status(&self, rs: &ReplicaSet, status: &ReplicaSetStatus) -> kube::Result<()> {
        let api: Api<ReplicaSet> =
            Api::namespaced(self.client.clone(), &rs.namespace().unwrap_or_default());
        let updated = crate::status::update(&api, rs, |r| r.status = Some(status.clone())).await?;
        self.written.mutated(updated);
        Ok(())
    }

    fn event(&self, rs: &ReplicaSet, type_: EventType, reason: &str, note: String) {
        let event = Event::new(type_, rs.object_ref(&()), reason, note);
        self.events.record(event);
    }
}

/// Runs the controller until the process stops: ReplicaSets are the keys; pod changes queue
/// their owner (or, for orphans, the ReplicaSets that match them).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("replicaset");
    let expectations = Arc::new(Expectations::default());
    let replicasets = ctx.informers.get::<ReplicaSet>();
    let pods = ctx.informers.get::<Pod>();
    claim::index_by_controller(pods.cache());
    replicasets.add_handler({
        let (queue, exp) = (controller.queue().clone(), expectations.clone());
        move |change| match change {
            Change::Added(rs) | Change::Updated { new: rs, .. } => enqueue(&queue, rs),
            Change::Deleted { last, .. } => exp.forget(&rs_key(last)),
        }
    });
    pods.add_handler({
        let queue = controller.queue().clone();
        let (store, exp) = (replicasets.cache().clone(), expectations.clone());
        move |change| on_pod(change, &store, &exp, &queue)
    });
    replicasets.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    tracing::info!("replicaset: caches synced");
    let sets = MutationCache::new(replicasets.cache().clone());
    let api = Arc::new(KubeReplicaSets {
        client: ctx.client.clone(),
        events: ctx.recorder("replicaset-controller"),
        written: sets.clone(),
    });
    let pods = pods.cache().clone();
    controller
        .run(move |key| {
            let (api, expectations) = (api.clone(), expectations.clone());
            let (rs, pods) = (sets.get(&key), pods.clone());
            async move {
                let Some(rs) = rs else {
                    return Ok(Action::AwaitChange);
                };
                let pods = claim::claimable_in(&rs.metadata, &pods);
                let now = jiff::Timestamp::now();
                reconcile(&rs, pods, api.as_ref(), &expectations, now, Instant::now()).await
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records every write; `fail_create_at` makes that (1-based) create fail with a 403.
    #[derive(Default)]
    struct Recording {
        creates: AtomicUsize,
        fail_create_at: Option<usize>,
        deleted: Mutex<Vec<String>>,
        patched: Mutex<Vec<(String, serde_json::Value)>>,
        statuses: Mutex<Vec<ReplicaSetStatus>>,
        events: Mutex<Vec<(String, String)>>,
    }

    #[async_trait]
    impl ReplicaSetApi for Recording {
        async fn create_pod(&self, _: &str, pod: &Pod) -> kube::Result<Pod> {
            let n = self.creates.fetch_add(1, Ordering::SeqCst) + 1;
            if self.fail_create_at == Some(n) {
                return Err(kube::Error::Api(Box::new(
                    kube::core::Status::failure(
                        "exceeded quota: q, requested: pods=1, used: pods=6, limited: pods=6",
                        "Forbidden",
                    )
                    .with_code(403),
                )));
            }
            let mut pod = pod.clone();
            pod.metadata.name = Some(format!(
                "{}{n}",
                pod.metadata.generate_name.clone().unwrap()
            ));
            Ok(pod)
        }

        async fn delete_pod(&self, _: &str, name: &str) -> kube::Result<()> {
            self.deleted.lock().push(name.into());
            Ok(())
        }

        async fn patch_pod(
            &self,
            _: &str,
            name: &str,
            patch: serde_json::Value,
        ) -> kube::Result<()> {
            self.patched.lock().push((name.into(), patch));
            Ok(())
        }

        async fn patch_status(
            &self,
            _: &ReplicaSet,
            status: &ReplicaSetStatus,
        ) -> kube::Result<()> {
            self.statuses.lock().push(status.clone());
            Ok(())
        }

        fn event(&self, _: &ReplicaSet, _: EventType, reason: &str, note: String) {
            self.events.lock().push((reason.into(), note));
        }
    }

    fn rs(replicas: i32) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "rs-uid", "generation": 2},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web", "tier": "front"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        }))
        .unwrap()
    }

    fn pod(name: &str, labels: serde_json::Value, owner: Option<&str>, ready: bool) -> Arc<Pod> {
        let owners = owner.map(|uid| {
            vec![json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "web", "uid": uid, "controller": true})]
        });
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels,
                             "ownerReferences": owners},
                "spec": {"containers": [], "nodeName": "n1"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready",
                    "status": if ready { "True" } else { "False" },
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            }))
            .unwrap(),
        )
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    #[tokio::test]
    async fn creates_missing_pods_in_slow_start_batches_and_stops_at_the_first_failure() {
        let api = Recording {
            fail_create_at: Some(4),
            ..Default::default()
        };
        let exp = Expectations::default();
        let t = Instant::now();
        let err = reconcile(&rs(10), vec![], &api, &exp, now(), t)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Manage { .. }), "{err}");
        // batches of 1 and 2 succeed; the batch of 4 has one failure; nothing after it
        assert_eq!(api.creates.load(Ordering::SeqCst), 7);
        let events = api.events.lock().clone();
        assert_eq!(
            events.iter().filter(|e| e.0 == "SuccessfulCreate").count(),
            6
        );
        assert_eq!(events[0].1, "Created pod: web-1");
        let failed = events.iter().find(|e| e.0 == "FailedCreate").unwrap();
        assert!(
            failed.1.starts_with("Error creating: exceeded quota"),
            "{failed:?}"
        );
        let status = api.statuses.lock().last().cloned().unwrap();
        let cond = &status.conditions.unwrap()[0];
        assert_eq!(
            (cond.type_.as_str(), cond.reason.as_deref()),
            ("ReplicaFailure", Some("FailedCreate"))
        );
        assert_eq!(status.observed_generation, Some(2));
        // six creations are still expected: the RS is not acted on until they are seen
        assert!(!exp.satisfied("ns/web", t));
        for _ in 0..6 {
            exp.creation_observed("ns/web");
        }
        assert!(exp.satisfied("ns/web", t));
    }

    #[tokio::test]
    async fn does_not_create_again_until_its_creations_are_observed() {
        let api = Recording::default();
        let exp = Expectations::default();
        let t = Instant::now();
        reconcile(&rs(3), vec![], &api, &exp, now(), t)
            .await
            .unwrap();
        assert_eq!(api.creates.load(Ordering::SeqCst), 3);
        // the watch lags: no pods seen yet, but nothing more is created
        let action = reconcile(&rs(3), vec![], &api, &exp, now(), t)
            .await
            .unwrap();
        assert_eq!(api.creates.load(Ordering::SeqCst), 3);
        assert_eq!(action, Action::RequeueAfter(crate::expectations::TIMEOUT));
        for _ in 0..3 {
            exp.creation_observed("ns/web");
        }
        let owned: Vec<_> = (0..3)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    json!({"app": "web"}),
                    Some("rs-uid"),
                    true,
                )
            })
            .collect();
        reconcile(&rs(3), owned, &api, &exp, now(), t)
            .await
            .unwrap();
        assert_eq!(api.creates.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn deletes_surplus_pods_unready_first_and_ignores_pods_being_deleted() {
        let api = Recording::default();
        let exp = Expectations::default();
        let mut gone = (*pod("gone", json!({"app": "web"}), Some("rs-uid"), true)).clone();
        gone.metadata.deletion_timestamp = Some(Time(now()));
        let pods = vec![
            pod("a", json!({"app": "web"}), Some("rs-uid"), true),
            pod("b", json!({"app": "web"}), Some("rs-uid"), false),
            pod("c", json!({"app": "web"}), Some("rs-uid"), true),
            Arc::new(gone),
        ];
        reconcile(&rs(2), pods, &api, &exp, now(), Instant::now())
            .await
            .unwrap();
        assert_eq!(*api.deleted.lock(), vec!["b"]);
        assert_eq!(
            api.events.lock()[0],
            ("SuccessfulDelete".into(), "Deleted pod: b".into())
        );
        assert!(!exp.satisfied("ns/web", Instant::now()));
        exp.deletion_observed("ns/web", "ns/b");
        assert!(exp.satisfied("ns/web", Instant::now()));
        let status = api.statuses.lock().last().cloned().unwrap();
        assert_eq!(status.replicas, 3, "the pod being deleted does not count");
    }

    #[tokio::test]
    async fn adopts_matching_orphans_and_releases_owned_pods_that_no_longer_match() {
        let api = Recording::default();
        let exp = Expectations::default();
        let pods = vec![
            pod("orphan", json!({"app": "web"}), None, true),
            pod("relabeled", json!({"app": "other"}), Some("rs-uid"), true),
            pod("foreign", json!({"app": "web"}), Some("other-uid"), true),
        ];
        reconcile(&rs(1), pods, &api, &exp, now(), Instant::now())
            .await
            .unwrap();
        let patched = api.patched.lock().clone();
        assert_eq!(patched.len(), 2, "{patched:?}");
        assert_eq!(patched[0].0, "orphan");
        let adopt = &patched[0].1["metadata"];
        assert_eq!(adopt["ownerReferences"][0]["uid"], "rs-uid");
        assert_eq!(adopt["ownerReferences"][0]["controller"], true);
        assert_eq!(adopt["ownerReferences"][0]["blockOwnerDeletion"], true);
        assert_eq!(adopt["uid"], "orphan");
        assert_eq!(patched[1].0, "relabeled");
        assert_eq!(
            patched[1].1["metadata"]["ownerReferences"][0]["$patch"],
            "delete"
        );
        // the adopted pod fills the one replica: nothing created or deleted
        assert_eq!(api.creates.load(Ordering::SeqCst), 0);
        assert!(api.deleted.lock().is_empty());
    }

    #[tokio::test]
    async fn status_counts_fully_labeled_ready_and_available_pods() {
        let api = Recording::default();
        let exp = Expectations::default();
        let mut slow = rs(3);
        slow.spec.as_mut().unwrap().min_ready_seconds = Some(3600);
        let pods = vec![
            pod(
                "a",
                json!({"app": "web", "tier": "front"}),
                Some("rs-uid"),
                true,
            ),
            pod("b", json!({"app": "web"}), Some("rs-uid"), true),
            pod(
                "c",
                json!({"app": "web", "tier": "front"}),
                Some("rs-uid"),
                false,
            ),
        ];
        let at: jiff::Timestamp = "2026-01-01T00:30:00Z".parse().unwrap();
        let action = reconcile(&slow, pods.clone(), &api, &exp, at, Instant::now())
            .await
            .unwrap();
        let s = api.statuses.lock().last().cloned().unwrap();
        assert_eq!(
            (
                s.replicas,
                s.fully_labeled_replicas,
                s.ready_replicas,
                s.available_replicas
            ),
            (3, Some(2), Some(2), Some(0))
        );
        assert!(
            action != Action::AwaitChange,
            "comes back when the pods become available"
        );
        reconcile(
            &slow,
            pods,
            &api,
            &exp,
            now() + jiff::SignedDuration::from_secs(1),
            Instant::now(),
        )
        .await
        .unwrap();
        let s = api.statuses.lock().last().cloned().unwrap();
        assert_eq!(s.available_replicas, Some(2));
    }

    #[tokio::test]
    async fn slow_start_batches_double() {
        let sizes = Mutex::new(Vec::new());
        let calls = AtomicUsize::new(0);
        let (n, err) = slow_start_batch(10, 1, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .await;
        sizes.lock().push(n);
        assert_eq!(
            (n, err.is_none(), calls.load(Ordering::SeqCst)),
            (10, true, 10)
        );
    }
}
