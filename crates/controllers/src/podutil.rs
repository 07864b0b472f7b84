//! `podutil`: what the workload controllers ask of pods and owner references, as upstream's
//! `podutil` and `controller` helpers: active, ready and available pods, controller references,
//! and label selectors.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use skiff_apimachinery::labels::Selector;

/// A pod that counts towards its controller's replicas: not finished and not being deleted
/// (upstream's `IsPodActive`).
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the pod is done: `Succeeded`, `Failed`, or deleted with no container (init, app or
/// ephemeral) running (upstream's volume `IsPodTerminated`).
pub fn is_terminated(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    if matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return true;
    }
    let not_running = |list: Option<&Vec<k8s_openapi::api::core::v1::ContainerStatus>>| {
        list.is_none_or(|cs| {
            cs.iter().all(|c| {
                c.state
                    .as_ref()
                    .is_none_or(|st| st.terminated.is_some() || st.waiting.is_some())
            })
        })
    };
    pod.metadata.deletion_timestamp.is_some()
        && status.is_none_or(|s| {
            not_running(s.init_container_statuses.as_ref())
                && not_running(s.container_statuses.as_ref())
                && not_running(s.ephemeral_container_statuses.as_ref())
        })
}

/// When the pod's Ready condition last turned True, if it is True.
pub fn ready_since(pod: &Pod) -> Option<Option<jiff::Timestamp>> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    (ready.status == "True").then(|| ready.last_transition_time.as_ref().map(|t| t.0))
}

/// Whether the pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Whether the pod has been ready for at least `min_ready_seconds` at `now` (upstream's
/// `IsPodAvailable`).
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: jiff::Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(None) => false,
        Some(Some(since)) => {
            since + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds)) < now
        }
    }
}

/// How long until a ready pod becomes available (`None` if it is not ready or already is).
pub fn available_in(
    pod: &Pod,
    min_ready_seconds: i32,
    now: jiff::Timestamp,
) -> Option<std::time::Duration> {
    let since = ready_since(pod)??;
    if min_ready_seconds <= 0 {
        return None;
    }
    let at = since + jiff::SignedDuration::from_secs(i64::from(min_ready_seconds));
    let left = at.duration_since(now);
    (!left.is_negative()).then(|| left.unsigned_abs() + std::time::Duration::from_millis(100))
}

/// The owner reference with `controller: true`, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// A controller reference to `owner` (`controller` and `blockOwnerDeletion` true).
pub fn controller_ref(api_version: &str, kind: &str, owner: &ObjectMeta) -> OwnerReference {
    controller_ref_to(
        api_version,
        kind,
        owner.name.as_deref().unwrap_or_default(),
        owner.uid.as_deref().unwrap_or_default(),
    )
}

/// A controller reference to the object `name` with `uid`.
pub fn controller_ref_to(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A `metav1.LabelSelector` as a selector (null matches nothing, empty matches everything).
pub fn selector(
    selector: Option<&LabelSelector>,
) -> Result<Selector, skiff_apimachinery::labels::Error> {
    let value = serde_json::to_value(selector).unwrap_or_default();
    Selector::from_label_selector(&value)
}

/// The labels of an object (empty when it has none), borrowed: a ReplicaSet's sync matches
/// every pod of its namespace, and cloning each pod's labels was a tenth of the controller
/// manager's CPU in `skiff bench controllers`.
pub fn labels(meta: &ObjectMeta) -> &std::collections::BTreeMap<String, String> {
    static EMPTY: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&EMPTY)
}

/// `namespace/name` of an object.
pub fn key(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// The message of an API error (`Status.message`), else the error itself.
pub fn error_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Whether an API error is `NotFound`.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// The pod's conditions with `DisruptionTarget=True` for `reason` in place of any earlier one:
/// what a controller writes into a pod's status before deleting it.
pub fn with_disruption_target(
    pod: &Pod,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) -> Vec<k8s_openapi::api::core::v1::PodCondition> {
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ != "DisruptionTarget");
    conditions.push(k8s_openapi::api::core::v1::PodCondition {
        type_: "DisruptionTarget".into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
        ..Default::default()
    });
    conditions
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ready: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "conditions": ready.map(|t| vec![json!({
                "type": "Ready", "status": "True", "lastTransitionTime": t})])},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_available_once_ready_for_min_ready_seconds() {
        let p = pod(Some("2026-01-01T00:00:00Z"));
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
        assert!(is_available(&p, 0, at("2026-01-01T00:00:00Z")));
        assert!(!is_available(&p, 10, at("2026-01-01T00:00:10Z")));
        assert!(is_available(&p, 10, at("2026-01-01T00:00:11Z")));
        assert!(available_in(&p, 10, at("2026-01-01T00:00:04Z")).is_some());
        assert!(!is_available(&pod(None), 0, at("2026-01-01T00:00:00Z")));
    }

    #[test]
    fn a_null_selector_matches_nothing_and_match_labels_must_all_match() {
        assert!(selector(None).unwrap().is_nothing());
        let s: LabelSelector = serde_json::from_value(json!({"matchLabels": {"a": "1"}})).unwrap();
        let s = selector(Some(&s)).unwrap();
        let mut labels = std::collections::BTreeMap::new();
        assert!(!s.matches(&labels));
        labels.insert("a".to_string(), "1".to_string());
        assert!(s.matches(&labels));
    }
}
