//! `disruption`: PodDisruptionBudget status (upstream's DisruptionController): the pods a
//! budget selects, how many are healthy (Ready and not being deleted), how many must be
//! (`minAvailable`, or the expected count less `maxUnavailable`, as integers or percentages of
//! the expected count, which for percentages and `maxUnavailable` is the sum of the pods'
//! controllers' scale: Deployment, ReplicaSet, StatefulSet or ReplicationController), and so how
//! many disruptions are allowed now, with the `DisruptionAllowed` condition. Evictions the API
//! server granted (`disruptedPods`) count as unhealthy until the pod is gone or two minutes
//! have passed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::PostParams;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use skiff_runtime::controller::{Action, Controller};

use crate::{Context, triggers};

/// How long an eviction the API server granted is waited for (upstream's `DeletionTimeout`).
const DELETION_TIMEOUT: jiff::SignedDuration = jiff::SignedDuration::from_secs(120);

/// The reads and writes this controller makes beyond its caches.
#[async_trait]
pub trait Budgets: Send + Sync {
    /// The scale (`spec.replicas`) of the controller `kind/name`, following a ReplicaSet up to
    /// its Deployment; with the uid of the controller counted, so each is counted once.
    async fn scale(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> kube::Result<Option<(String, i32)>>;
    async fn update_status(&self, pdb: &PodDisruptionBudget) -> kube::Result<()>;
}

/// Whether `selector` selects `labels` (`matchLabels` and `matchExpressions`).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        let have = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => have.is_some_and(|v| values.contains(v)),
            "NotIn" => have.is_none_or(|v| !values.contains(v)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

fn selected(pdb: &PodDisruptionBudget, pod: &Pod) -> bool {
    let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    pod.namespace() == pdb.namespace() && selects(selector, pod.labels())
}

fn healthy(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `value` of `total` as upstream's `GetScaledValueFromIntOrPercent` rounding up; `None` if
/// it is neither an integer nor a percentage.
pub fn scaled(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(i) => Some(*i),
        IntOrString::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some(((percent * i64::from(total) + 99) / 100) as i32)
        }
    }
}

fn is_percent(v: &IntOrString) -> bool {
    matches!(v, IntOrString::String(_))
}

/// Upstream's `getExpectedScale`: the sum of the scale of the pods' controllers.
async fn expected_scale(pods: &[&Pod], api: &dyn Budgets) -> kube::Result<Result<i32, String>> {
    let mut counted: HashMap<String, i32> = HashMap::new();
    for pod in pods {
        let owner = pod
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true));
        let Some(owner) = owner else {
            return Ok(Err(format!(
                "found no controllers for pod {:?}",
                pod.name_any()
            )));
        };
        let ns = pod.namespace().unwrap_or_default();
        match api.scale(&ns, &owner.kind, &owner.name).await? {
            Some((uid, replicas)) => {
                counted.insert(uid, replicas);
            }
            None => {
                return Ok(Err(format!(
                    "found no controllers for pod {:?}",
                    pod.name_any()
                )));
            }
        }
    }
    Ok(Ok(counted.values().sum()))
}

fn condition(
    allowed: bool,
    reason: &str,
    generation: Option<i64>,
    now: Timestamp,
    old: Option<&Condition>,
) -> Condition {
    let status = if allowed { "True" } else { "False" };
    let transition = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: "DisruptionAllowed".into(),
        status: status.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: generation,
        last_transition_time: transition,
    }
}

/// Computes `pdb`'s status from the pods it selects at `now`; returns it and when to look
/// again for a pending eviction to time out.
pub async fn status_for(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
    api: &dyn Budgets,
) -> kube::Result<(PodDisruptionBudgetStatus, Option<Duration>)> {
    let spec = pdb.spec.clone().unwrap_or_default();
    let old = pdb.status.clone().unwrap_or_default();
    let generation = pdb.metadata.generation;
    let selected: Vec<&Pod> = pods
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| selected(pdb, p))
        .collect();
    let old_condition = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed");
    let fail_safe = |message: String| {
        tracing::warn!(pdb = %pdb.name_any(), %message, "disruption: failing safe");
        let mut status = old.clone();
        status.disruptions_allowed = 0;
        status.conditions = Some(vec![condition(
            false,
            "SyncFailed",
            generation,
            now,
            old_condition,
        )]);
        status.conditions.as_mut().unwrap()[0].message = message;
        status
    };
    let (expected, desired) = if let Some(max) = &spec.max_unavailable {
        let expected = match expected_scale(&selected, api).await? {
            Ok(n) => n,
            Err(m) => return Ok((fail_safe(m), None)),
        };
        let Some(max) = scaled(max, expected) else {
            return Ok((fail_safe("invalid maxUnavailable".into()), None));
        };
        (expected, (expected - max).max(0))
    } else if let Some(min) = &spec.min_available {
        if is_percent(min) {
            let expected = match expected_scale(&selected, api).await? {
                Ok(n) => n,
                Err(m) => return Ok((fail_safe(m), None)),
            };
            (expected, scaled(min, expected).unwrap_or(0))
        } else {
            (selected.len() as i32, scaled(min, 0).unwrap_or(0))
        }
    } else {
        (selected.len() as i32, 0)
    };

    // evictions granted but not seen through yet
    let mut disrupted = BTreeMap::new();
    let mut recheck: Option<Duration> = None;
    for (name, at) in old.disrupted_pods.clone().unwrap_or_default() {
        let Some(pod) = selected.iter().find(|p| p.name_any() == name) else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let expires = at.0 + DELETION_TIMEOUT;
        if expires <= now {
            continue;
        }
        let left = Duration::try_from(expires.duration_since(now)).unwrap_or_default();
        recheck = Some(recheck.map_or(left, |r| r.min(left)));
        disrupted.insert(name, at);
    }
    let current = selected
        .iter()
        .filter(|p| healthy(p) && !disrupted.contains_key(&p.name_any()))
        .count() as i32;
    let mut allowed = current - desired;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    let reason = if allowed > 0 {
        "SufficientPods"
    } else {
        "InsufficientPods"
    };
    let status = PodDisruptionBudgetStatus {
        current_healthy: current,
        desired_healthy: desired,
        disruptions_allowed: allowed,
        expected_pods: expected,
        observed_generation: generation,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        conditions: Some(vec![condition(
            allowed > 0,
            reason,
            generation,
            now,
            old_condition,
        )]),
    };
    Ok((status, recheck))
}

struct KubeBudgets(kube::Client);

#[async_trait]
impl Budgets for KubeBudgets {
    async fn scale(
        &self,
        namespace: &str,
        kind: &str,
        name: &str,
    ) -> kube::Result<Option<(String, i32)>> {
        let c = self.0.clone();
        let of = |meta: &kube::api::ObjectMeta, replicas: Option<i32>| {
            Some((meta.uid.clone().unwrap_or_default(), replicas.unwrap_or(1)))
        };
        Ok(match kind {
            "ReplicaSet" => {
                let Some(rs) = Api::<ReplicaSet>::namespaced(c.clone(), namespace)
                    .get_opt(name)
                    .await?
                else {
                    return Ok(None);
                };
                let deployment = rs
                    .owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true) && r.kind == "Deployment");
                if let Some(d) = deployment {
                    let Some(d) = Api::<Deployment>::namespaced(c, namespace)
                        .get_opt(&d.name)
                        .await?
                    else {
                        return Ok(None);
                    };
                    of(&d.metadata, d.spec.as_ref().and_then(|s| s.replicas))
                } else {
                    of(&rs.metadata, rs.spec.as_ref().and_then(|s| s.replicas))
                }
            }
            "StatefulSet" => Api::<StatefulSet>::namespaced(c, namespace)
                .get_opt(name)
                .await?
                .and_then(|s| of(&s.metadata, s.spec.as_ref().and_then(|s| s.replicas))),
            "ReplicationController" => Api::<ReplicationController>::namespaced(c, namespace)
                .get_opt(name)
                .await?
                .and_then(|s| of(&s.metadata, s.spec.as_ref().and_then(|s| s.replicas))),
            "Deployment" => Api::<Deployment>::namespaced(c, namespace)
                .get_opt(name)
                .await?
                .and_then(|s| of(&s.metadata, s.spec.as_ref().and_then(|s| s.replicas))),
            _ => None,
        })
    }

    async fn update_status(&self, pdb: &PodDisruptionBudget) -> kube::Result<()> {
        let api: Api<PodDisruptionBudget> =
            Api::namespaced(self.0.clone(), &pdb.namespace().unwrap_or_default());
        api.replace_status(&pdb.name_any(), &PostParams::default(), pdb)
            .await
            .map(|_| ())
    }
}

/// Syncs one budget: writes its status if it changed.
pub async fn reconcile(
    pdb: &PodDisruptionBudget,
    pods: &[Arc<Pod>],
    now: Timestamp,
    api: &dyn Budgets,
) -> kube::Result<Option<Duration>> {
    let (status, recheck) = status_for(pdb, pods, now, api).await?;
    if pdb.status.as_ref() != Some(&status) {
        let mut next = pdb.clone();
        next.status = Some(status);
        api.update_status(&next).await?;
    }
    Ok(recheck)
}

/// Runs the controller: budgets are the keys; a pod's change queues the budgets selecting it.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("disruption");
    let budgets = ctx.informers.get::<PodDisruptionBudget>();
    let pods = ctx.informers.get::<Pod>();
    triggers::queue_own_keys(&budgets, controller.queue());
    pods.add_handler({
        let (queue, budgets) = (controller.queue().clone(), budgets.cache().clone());
        move |change| {
            let pod = change.object();
            for pdb in budgets.namespaced(&pod.namespace().unwrap_or_default()) {
                if selected(&pdb, pod) {
                    queue.add(ObjectRef::from_obj(pdb.as_ref()));
                }
            }
        }
    });
    budgets.cache().wait_until_ready().await;
    pods.cache().wait_until_ready().await;
    tracing::info!("disruption: caches synced");
    let api = Arc::new(KubeBudgets(ctx.client.clone()));
    let (budgets, pods) = (budgets.cache().clone(), pods.cache().clone());
    controller
        .run(move |key| {
            let api = api.clone();
            let (pdb, pods) = (budgets.get(&key), pods.clone());
            async move {
                let Some(pdb) = pdb else {
                    return Ok(Action::AwaitChange);
                };
                let pods = pods.namespaced(&pdb.namespace().unwrap_or_default());
                let recheck = reconcile(&pdb, &pods, Timestamp::now(), api.as_ref()).await?;
                Ok::<_, kube::Error>(recheck.map_or(Action::AwaitChange, Action::RequeueAfter))
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
#[path = "disruption_tests.rs"]
mod tests;
