//! A Job's pods: new ones from its template (upstream's `podControl.CreatePodsWithControllerRef`
//! plus the Indexed additions: index annotation and label, hostname `<job>-<index>`, the
//! `JOB_COMPLETION_INDEX` variable), the tracking finalizer, and how the controller reads a
//! pod: active, terminating, ready, failed, when it finished, and which to remove first.

use std::cmp::Reverse;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use super::indexes::COMPLETION_INDEX;

/// The finalizer that keeps a finished pod until the Job has counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// The owner reference a Job's pods carry.
pub fn owner_reference(job: &Job) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        name: job.name_any(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A new pod for `job` (for completion `index` if it is Indexed).
pub fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let name = job.name_any();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let mut meta = template.metadata.unwrap_or_default();
    let mut spec = template.spec.unwrap_or_default();
    meta.name = None;
    meta.generate_name = Some(match index {
        Some(i) => format!("{}-{i}-", truncate(&name, 63 - 12)),
        None => format!("{}-", truncate(&name, 63 - 6)),
    });
    meta.namespace = job.metadata.namespace.clone();
    meta.owner_references = Some(vec![owner_reference(job)]);
    meta.finalizers
        .get_or_insert_with(Vec::new)
        .push(TRACKING_FINALIZER.into());
    if let Some(i) = index {
        let i = i.to_string();
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), i.clone());
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(COMPLETION_INDEX.into(), i.clone());
        if spec.hostname.as_deref().is_none_or(str::is_empty) {
            spec.hostname = Some(format!("{}-{i}", truncate(&name, 63 - 12)));
        }
        let env = EnvVar {
            name: "JOB_COMPLETION_INDEX".into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.annotations['{COMPLETION_INDEX}']"),
                }),
                ..Default::default()
            }),
        };
        let containers = spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut());
        for c in containers {
            let vars = c.env.get_or_insert_with(Vec::new);
            if !vars.iter().any(|v| v.name == env.name) {
                vars.push(env.clone());
            }
        }
    }
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: None,
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn succeeded(pod: &Pod) -> bool {
    phase(pod) == "Succeeded"
}

pub fn finished(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Upstream's `IsPodActive`: not finished and not being deleted.
pub fn active(pod: &Pod) -> bool {
    !finished(pod) && pod.metadata.deletion_timestamp.is_none()
}

/// Being deleted but not finished yet.
pub fn terminating(pod: &Pod) -> bool {
    !finished(pod) && pod.metadata.deletion_timestamp.is_some()
}

pub fn ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

pub fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.finalizers().iter().any(|f| f == TRACKING_FINALIZER)
}

/// Upstream's `isPodFailed`: Failed, or (unless only failed pods are replaced) deleted before
/// it succeeded, so that pods removed before finishing count as failures.
pub fn failed(pod: &Pod, only_failed_replaced: bool) -> bool {
    if phase(pod) == "Failed" {
        return true;
    }
    !only_failed_replaced && pod.metadata.deletion_timestamp.is_some() && !succeeded(pod)
}

/// When a pod finished: its last container's end, else its deletion, else `now`.
pub fn finish_time(pod: &Pod, now: Timestamp) -> Timestamp {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    statuses
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max()
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now)
}

/// Sum of the container restarts of a pod (restartPolicy OnFailure failures).
pub fn restarts(pod: &Pod) -> i32 {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    statuses
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .sum()
}

/// Orders active pods as upstream's `controller.ActivePods` for removal: unscheduled before
/// scheduled, pending before running, not ready before ready, then newest first.
pub fn sort_for_removal(pods: &mut [&Pod]) {
    pods.sort_by_key(|p| {
        let scheduled = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some();
        let running = phase(p) == "Running";
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (scheduled, running, ready(p), Reverse(created))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(indexed: bool) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u1"},
            "spec": {
                "completionMode": if indexed { "Indexed" } else { "NonIndexed" },
                "template": {
                    "metadata": {"labels": {"job-name": "pi"}},
                    "spec": {"restartPolicy": "Never",
                             "containers": [{"name": "c", "image": "busybox"}]}
                }
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_new_pod_is_owned_tracked_and_named_after_its_job() {
        let pod = new_pod(&job(false), None);
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(pod.finalizers(), &[TRACKING_FINALIZER.to_string()]);
        let owner = &pod.owner_references()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Job", "u1"));
        assert_eq!(owner.controller, Some(true));
        assert_eq!(pod.labels()["job-name"], "pi");
        assert!(pod.spec.unwrap().hostname.is_none());
    }

    #[test]
    fn an_indexed_pod_carries_its_index_hostname_and_variable() {
        let pod = new_pod(&job(true), Some(2));
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("pi-2-"));
        assert_eq!(pod.annotations()[COMPLETION_INDEX], "2");
        assert_eq!(pod.labels()[COMPLETION_INDEX], "2");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("pi-2"));
        let env = &spec.containers[0].env.as_ref().unwrap()[0];
        assert_eq!(env.name, "JOB_COMPLETION_INDEX");
        let path = &env.value_from.as_ref().unwrap().field_ref.as_ref().unwrap();
        assert_eq!(
            path.field_path,
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
    }

    #[test]
    fn a_pod_deleted_before_succeeding_counts_as_failed_unless_only_failed_pods_are_replaced() {
        let mut pod: Pod = serde_json::from_value(json!({"status": {"phase": "Running"}})).unwrap();
        assert!(!failed(&pod, false));
        pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        assert!(failed(&pod, false));
        assert!(!failed(&pod, true));
        assert!(terminating(&pod) && !active(&pod));
    }
}
