//! Upstream's `deploymentutil` helpers: revisions and the annotations copied to ReplicaSets,
//! `maxSurge`/`maxUnavailable` fenceposts, replica sums over ReplicaSets, the orders ReplicaSets
//! are scaled in, and Deployment conditions.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Upstream's `maxRevHistoryLengthInChars`.
const MAX_REVISION_HISTORY_CHARS: usize = 2000;

/// Annotations of the Deployment not copied to its ReplicaSets (upstream's `skipCopyAnnotation`).
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    REVISION_HISTORY,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

pub fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

pub fn set_replicas(rs: &mut ReplicaSet, n: i32) {
    rs.spec.get_or_insert_with(Default::default).replicas = Some(n);
}

pub fn status_replicas(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map_or(0, |s| s.replicas)
}

pub fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

pub fn ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

pub fn desired(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn annotation<'a>(meta: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
    meta.as_ref()?.get(key).map(String::as_str)
}

/// The `deployment.kubernetes.io/revision` of a ReplicaSet (0 when missing or invalid).
pub fn revision(rs: &ReplicaSet) -> i64 {
    annotation(&rs.metadata.annotations, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

pub fn max_revision<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i64 {
    sets.into_iter().map(revision).max().unwrap_or(0)
}

/// Sets the Deployment's revision annotation; whether it changed.
pub fn set_deployment_revision(d: &mut Deployment, revision: &str) -> bool {
    let annotations = d.metadata.annotations.get_or_insert_with(Default::default);
    if annotations.get(REVISION).map(String::as_str) == Some(revision) {
        return false;
    }
    annotations.insert(REVISION.into(), revision.into());
    true
}

/// Sets `desired-replicas` and `max-replicas`; whether either changed.
pub fn set_replicas_annotations(rs: &mut ReplicaSet, desired: i32, max: i32) -> bool {
    let annotations = rs.metadata.annotations.get_or_insert_with(Default::default);
    let mut changed = false;
    for (key, value) in [(DESIRED_REPLICAS, desired), (MAX_REPLICAS, max)] {
        let value = value.to_string();
        if annotations.get(key) != Some(&value) {
            annotations.insert(key.into(), value);
            changed = true;
        }
    }
    changed
}

pub fn replicas_annotations_need_update(rs: &ReplicaSet, desired: i32, max: i32) -> bool {
    annotation(&rs.metadata.annotations, DESIRED_REPLICAS) != Some(&desired.to_string())
        || annotation(&rs.metadata.annotations, MAX_REPLICAS) != Some(&max.to_string())
}

pub fn desired_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata.annotations, DESIRED_REPLICAS)?
        .parse()
        .ok()
}

pub fn max_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(&rs.metadata.annotations, MAX_REPLICAS)?
        .parse()
        .ok()
}

/// Upstream's `SetNewReplicaSetAnnotations`: copies the Deployment's annotations, raises the
/// revision (keeping earlier ones in `revision-history`), and for a ReplicaSet about to be
/// created sets the replicas annotations. Whether anything changed.
pub fn set_new_replica_set_annotations(
    d: &Deployment,
    rs: &mut ReplicaSet,
    new_revision: i64,
    exists: bool,
) -> bool {
    let mut changed = false;
    let annotations = rs.metadata.annotations.get_or_insert_with(Default::default);
    for (k, v) in d.metadata.annotations.iter().flatten() {
        if NOT_COPIED.contains(&k.as_str()) || annotations.get(k) == Some(v) {
            continue;
        }
        annotations.insert(k.clone(), v.clone());
        changed = true;
    }
    let old = annotations.get(REVISION).cloned();
    let old_revision = match old.as_deref().map(str::parse::<i64>) {
        None => 0,
        Some(Ok(r)) => r,
        Some(Err(_)) => return changed,
    };
    if old_revision < new_revision {
        annotations.insert(REVISION.into(), new_revision.to_string());
        changed = true;
        if let Some(old) = old {
            let history = annotations
                .get(REVISION_HISTORY)
                .cloned()
                .unwrap_or_default();
            let mut revisions: Vec<&str> = history.split(',').filter(|r| !r.is_empty()).collect();
            revisions.push(&old);
            while revisions.join(",").len() > MAX_REVISION_HISTORY_CHARS && revisions.len() > 1 {
                revisions.remove(0);
            }
            let joined = revisions.join(",");
            annotations.insert(REVISION_HISTORY.into(), joined);
        }
    }
    if !exists {
        let (desired, max) = (desired(d), desired(d) + max_surge(d));
        changed |= set_replicas_annotations(rs, desired, max);
    }
    changed
}

fn rolling(d: &Deployment) -> Option<(Option<&IntOrString>, Option<&IntOrString>)> {
    let strategy = d.spec.as_ref()?.strategy.as_ref()?;
    if strategy.type_.as_deref() != Some("RollingUpdate") {
        return None;
    }
    let r = strategy.rolling_update.as_ref();
    Some((
        r.and_then(|r| r.max_surge.as_ref()),
        r.and_then(|r| r.max_unavailable.as_ref()),
    ))
}

pub fn is_rolling_update(d: &Deployment) -> bool {
    rolling(d).is_some()
}

pub fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

/// Upstream's `GetScaledValueFromIntOrPercent`: an int as is, `N%` of `total` rounded up or down.
pub fn scaled_value(v: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match v {
        None => 0,
        Some(IntOrString::Int(i)) => *i,
        Some(IntOrString::String(s)) => {
            let Some(percent) = s.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) else {
                return 0;
            };
            let exact = percent as f64 * f64::from(total) / 100.0;
            (if round_up {
                exact.ceil()
            } else {
                exact.floor()
            }) as i32
        }
    }
}

/// Upstream's `ResolveFenceposts`: (maxSurge rounded up, maxUnavailable rounded down), with
/// maxUnavailable 1 if both come to 0.
pub fn resolve_fenceposts(
    surge: Option<&IntOrString>,
    unavailable: Option<&IntOrString>,
    desired: i32,
) -> (i32, i32) {
    let surge = scaled_value(surge, desired, true);
    let unavailable = scaled_value(unavailable, desired, false);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

pub fn max_surge(d: &Deployment) -> i32 {
    rolling(d).map_or(0, |(s, u)| resolve_fenceposts(s, u, desired(d)).0)
}

pub fn max_unavailable(d: &Deployment) -> i32 {
    match rolling(d) {
        Some((s, u)) if desired(d) > 0 => resolve_fenceposts(s, u, desired(d)).1.min(desired(d)),
        _ => 0,
    }
}

/// Sum of `spec.replicas`.
pub fn replica_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(replicas).sum()
}

/// Sum of `status.replicas`.
pub fn actual_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(status_replicas).sum()
}

pub fn available_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(available).sum()
}

pub fn ready_count<'a>(sets: impl IntoIterator<Item = &'a ReplicaSet>) -> i32 {
    sets.into_iter().map(ready).sum()
}

fn created(rs: &ReplicaSet) -> Option<jiff::Timestamp> {
    rs.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// Upstream's `ReplicaSetsByCreationTimestamp` (oldest first, then by name).
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Upstream's `ReplicaSetsBySizeOlder` (largest first, then oldest).
pub fn by_size_older(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    replicas(b)
        .cmp(&replicas(a))
        .then_with(|| by_creation(a, b))
}

/// Upstream's `ReplicaSetsBySizeNewer` (largest first, then newest).
pub fn by_size_newer(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    replicas(b)
        .cmp(&replicas(a))
        .then_with(|| by_creation(b, a))
}

/// Upstream's `ReplicaSetsByRevision` (lowest revision first, then oldest).
pub fn by_revision(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    revision(a)
        .cmp(&revision(b))
        .then_with(|| by_creation(a, b))
}

pub fn has_progress_deadline(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.progress_deadline_seconds)
        .is_some_and(|s| s != i32::MAX)
}

pub fn condition<'a>(status: &'a DeploymentStatus, type_: &str) -> Option<&'a DeploymentCondition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: jiff::Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Upstream's `SetDeploymentCondition`: nothing if status and reason are unchanged; keeps the
/// transition time if only the reason changed; the condition moves to the end.
pub fn set_condition(status: &mut DeploymentStatus, mut c: DeploymentCondition) {
    if let Some(current) = condition(status, &c.type_) {
        if current.status == c.status && current.reason == c.reason {
            return;
        }
        if current.status == c.status {
            c.last_transition_time = current.last_transition_time.clone();
        }
    }
    remove_condition(status, &c.type_);
    status.conditions.get_or_insert_with(Vec::new).push(c);
}

pub fn remove_condition(status: &mut DeploymentStatus, type_: &str) {
    if let Some(conditions) = status.conditions.as_mut() {
        conditions.retain(|c| c.type_ != type_);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }

    #[test]
    fn surge_rounds_up_and_unavailable_rounds_down() {
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 10),
            (3, 2)
        );
        assert_eq!(
            resolve_fenceposts(Some(&pct("25%")), Some(&pct("25%")), 1000),
            (250, 250)
        );
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(0)), Some(&pct("10%")), 5),
            (0, 1),
            "both zero: one may be unavailable"
        );
        assert_eq!(
            resolve_fenceposts(Some(&IntOrString::Int(2)), None, 5),
            (2, 0)
        );
    }

    #[test]
    fn a_reused_replica_set_keeps_its_old_revisions_in_the_history() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "d", "annotations": {"team": "a", REVISION: "9"}},
            "spec": {"replicas": 4, "selector": {}, "template": {},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}},
        }))
        .unwrap();
        let mut rs = ReplicaSet::default();
        assert!(set_new_replica_set_annotations(&d, &mut rs, 1, false));
        let a = rs.metadata.annotations.clone().unwrap();
        assert_eq!(a[REVISION], "1");
        assert_eq!(a["team"], "a");
        assert_eq!(a[DESIRED_REPLICAS], "4");
        assert_eq!(a[MAX_REPLICAS], "5", "4 + 25% rounded up");
        assert!(!a.contains_key(REVISION_HISTORY));
        assert!(set_new_replica_set_annotations(&d, &mut rs, 3, true));
        assert!(set_new_replica_set_annotations(&d, &mut rs, 5, true));
        let a = rs.metadata.annotations.unwrap();
        assert_eq!(
            (a[REVISION].as_str(), a[REVISION_HISTORY].as_str()),
            ("5", "1,3")
        );
    }
}
