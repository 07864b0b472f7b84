//! One sync of a StatefulSet decided from what it sees (upstream's `updateStatefulSet`,
//! `processReplica`, `processCondemned`, `updateStatefulSetAfterInvariantEstablished` and
//! `updateStatus`): the writes to make, in order, the status that follows and when to look again.
//! No I/O: [`crate::statefulset`] makes the writes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::podutil;
use crate::revision::HASH_LABEL;
use crate::statefulset_claims::{self as retention, ClaimPod};
use crate::statefulset_pods as identity;

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It Failed or Succeeded: it is created again at the next sync.
    Finished,
    /// Its ordinal is no longer among the replicas.
    ScaledDown,
    /// It is not at the update revision (rolling update); counted out of `currentReplicas`.
    Update,
}

/// One write of a sync.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Create the pod with this ordinal (and its missing claims) at the current (`false`) or
    /// update (`true`) revision.
    Create { ordinal: i32, updated: bool },
    /// Create the missing claims of the (Pending) pod with this ordinal.
    CreateClaims { ordinal: i32 },
    /// Bring the owner references of claim `claim` of pod `pod` (uid `uid`, empty before it
    /// exists) in line with the retention policy; `conflicting`: another controller manages it.
    SetClaimOwners {
        claim: String,
        pod: String,
        uid: String,
        in_range: bool,
        conflicting: bool,
    },
    /// Delete this pod (name, uid).
    Delete { name: String, uid: String, why: Why },
}

fn phase(pod: &Pod) -> &str {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()).unwrap_or("")
}

/// Upstream's `isRunningAndReady` (a terminating pod may still be).
fn running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && podutil::is_ready(pod)
}

fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn hash(pod: &Pod) -> Option<&str> {
    pod.labels().get(HASH_LABEL).map(String::as_str)
}

/// A revision of the set: pods are labelled, and the status names it, with its name (as
/// upstream's); a pod labelled with its bare hash, as older Skiff labelled them, is at it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rev<'a> {
    pub name: &'a str,
    pub hash: &'a str,
}

impl Rev<'_> {
    /// Whether the pod is at this revision.
    pub fn has(&self, pod: &Pod) -> bool {
        hash(pod).is_some_and(|h| h == self.name || h == self.hash)
    }
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    let spec = set.spec.as_ref();
    spec.and_then(|s| s.min_ready_seconds).unwrap_or(0).max(0)
}

fn wanted_replicas(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1)
        .max(0)
}

/// The ordinals of the set's replicas: `spec.ordinals.start` (0 by default) onwards (upstream's
/// `getStartOrdinal` and `getEndOrdinal`).
fn ordinals(set: &StatefulSet) -> std::ops::Range<i32> {
    let spec = set.spec.as_ref();
    let start = spec.and_then(|s| s.ordinals.as_ref()).and_then(|o| o.start);
    let start = start.unwrap_or(0).max(0);
    start..start.saturating_add(wanted_replicas(set))
}

/// `maxUnavailable` of the rolling update scaled to `replicas` (a percentage rounds down), at
/// least one (upstream's `getStatefulSetMaxUnavailable`).
fn max_unavailable(v: Option<&IntOrString>, replicas: i32) -> i32 {
    let n = match v {
        None => 1,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
            (pct * i64::from(replicas) / 100) as i32
        }
    };
    n.max(1)
}

/// What one sync sees: the set's pods by ordinal and its namespace's claims by name.
pub struct View<'a> {
    pub pods: BTreeMap<i32, &'a Pod>,
    pub claims: BTreeMap<&'a str, &'a PersistentVolumeClaim>,
    pub now: jiff::Timestamp,
}

impl View<'_> {
    /// Upstream's `isRunningAndAvailable`: Ready for `minReadySeconds`.
    fn available(&self, set: &StatefulSet, pod: &Pod) -> bool {
        podutil::is_available(pod, min_ready_seconds(set), self.now)
    }

    /// Upstream's `isUnavailable`: not available, or terminating.
    fn unavailable(&self, set: &StatefulSet, pod: Option<&&Pod>) -> bool {
        pod.is_none_or(|p| !self.available(set, p) || terminating(p))
    }

    /// The names of the claims of the pod with ordinal `n`.
    fn claim_names(set: &StatefulSet, n: i32) -> Vec<String> {
        let pod = identity::pod_name(set, n);
        let spec = set.spec.as_ref();
        let templates = spec.and_then(|s| s.volume_claim_templates.as_deref());
        let templates = templates.unwrap_or_default();
        templates
            .iter()
            .map(|t| identity::claim_name(&t.name_any(), &pod))
            .collect()
    }

    /// Steps fixing the owners of the pod's existing claims that disagree with the policy
    /// (upstream's `ClaimsMatchRetentionPolicy` then `UpdatePodClaimForRetentionPolicy`).
    fn fix_claims(&self, set: &StatefulSet, n: i32, uid: &str, in_range: bool) -> Vec<Step> {
        let name = identity::pod_name(set, n);
        let pod = ClaimPod {
            name: &name,
            uid,
            in_range,
        };
        Self::claim_names(set, n)
            .into_iter()
            .filter_map(|c| {
                let claim = self.claims.get(c.as_str())?;
                (!retention::up_to_date(claim, set, &pod)).then(|| Step::SetClaimOwners {
                    conflicting: retention::has_unexpected_controller(claim, set, &pod),
                    claim: c,
                    pod: name.clone(),
                    uid: uid.to_string(),
                    in_range,
                })
            })
            .collect()
    }

    /// Whether a claim of the pod with ordinal `n` is missing or being deleted.
    fn claims_missing(&self, set: &StatefulSet, n: i32) -> bool {
        Self::claim_names(set, n).iter().any(|c| {
            self.claims
                .get(c.as_str())
                .is_none_or(|claim| claim.metadata.deletion_timestamp.is_some())
        })
    }

    /// Whether a claim of the pod with ordinal `n`, about to be created, is stale.
    fn claim_is_stale(&self, set: &StatefulSet, n: i32) -> bool {
        let name = identity::pod_name(set, n);
        let pod = ClaimPod {
            name: &name,
            uid: "",
            in_range: true,
        };
        Self::claim_names(set, n).iter().any(|c| {
            self.claims
                .get(c.as_str())
                .is_some_and(|claim| retention::is_stale(set, claim, &pod))
        })
    }
}

/// The steps of one sync (upstream's `updateStatefulSet` then, for RollingUpdate,
/// `updateStatefulSetAfterInvariantEstablished`), given the current and update revisions.
pub fn plan(set: &StatefulSet, view: &View, current: Rev, update: Rev) -> Vec<Step> {
    let spec = set.spec.clone().unwrap_or_default();
    let range = ordinals(set);
    let ordered = spec.pod_management_policy.as_deref() != Some("Parallel");
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let rolling = strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate";
    let explicit = strategy.rolling_update;
    let rolling_update = explicit.clone().unwrap_or_default();
    let partition = rolling_update.partition.unwrap_or(0).max(0);
    let pods = &view.pods;
    let delete = |p: &Pod, why: Why| Step::Delete {
        name: p.name_any(),
        uid: p.uid().unwrap_or_default(),
        why,
    };
    let uid = |p: &Pod| p.uid().unwrap_or_default();
    let mut steps = Vec::new();
    // the partition counts from the first ordinal
    let update_min = range.start.saturating_add(partition);
    // a replacement pod is made at the current revision below the partition, else the update
    // (upstream's newVersionedStatefulSetPod: without a rollingUpdate, below the current replicas)
    let current_below = match &explicit {
        Some(_) => update_min,
        None if rolling => {
            let status = set.status.as_ref();
            let current_replicas = status.and_then(|s| s.current_replicas).unwrap_or(0);
            range.start.saturating_add(current_replicas)
        }
        None => range.start,
    };
    let updated_for = |n: i32| !(n < current_below && current != update);
    // the pods outside the range, highest ordinal first
    let condemned: Vec<(i32, &Pod)> = pods
        .iter()
        .rev()
        .filter(|(n, _)| !range.contains(n))
        .map(|(n, p)| (*n, *p))
        .collect();
    // the first unavailable pod: a missing or unavailable replica, else a condemned one
    let first_unavailable = range
        .clone()
        .find(|n| view.unavailable(set, pods.get(n)))
        .or_else(|| {
            let mut up = condemned.iter().rev();
            up.find(|(_, p)| view.unavailable(set, Some(p)))
                .map(|(n, _)| *n)
        });

    // 1. the pods that should exist, lowest ordinal first (upstream's processReplica)
    for n in range.clone() {
        let Some(p) = pods.get(&n) else {
            if view.claim_is_stale(set, n) {
                // an older pod's claim is on its way out: wait for the collector
                if ordered {
                    return steps;
                }
                continue;
            }
            steps.push(Step::Create {
                ordinal: n,
                updated: updated_for(n),
            });
            // existing claims get their references as far as they can before the pod exists
            steps.extend(view.fix_claims(set, n, "", true));
            if ordered {
                return steps;
            }
            continue;
        };
        if matches!(phase(p), "Failed" | "Succeeded") {
            if !terminating(p) {
                steps.push(delete(p, Why::Finished));
            }
            if ordered {
                return steps;
            }
            continue;
        }
        let mut claims_fixed = false;
        if phase(p) == "Pending" {
            if view.claims_missing(set, n) {
                steps.push(Step::CreateClaims { ordinal: n });
            }
            steps.extend(view.fix_claims(set, n, &uid(p), true));
            claims_fixed = true;
        }
        if ordered && (terminating(p) || !running_and_ready(p) || !view.available(set, p)) {
            return steps;
        }
        if !claims_fixed {
            steps.extend(view.fix_claims(set, n, &uid(p), true));
        }
    }
    // 2. the claims of every condemned pod, before any is deleted
    for (n, p) in &condemned {
        steps.extend(view.fix_claims(set, *n, &uid(p), false));
    }
    // 3. the condemned pods, highest ordinal first (upstream's processCondemned)
    for (n, p) in &condemned {
        if terminating(p) {
            if ordered {
                return steps;
            }
            continue;
        }
        let first = first_unavailable == Some(*n);
        if ordered && !first && (!running_and_ready(p) || !view.available(set, p)) {
            return steps;
        }
        steps.push(delete(p, Why::ScaledDown));
        if ordered {
            return steps;
        }
    }
    if !rolling {
        return steps;
    }
    // 4. rolling update from the highest ordinal down to the partition, deleting as many pods
    // not at the update revision as maxUnavailable leaves room for
    let max = max_unavailable(rolling_update.max_unavailable.as_ref(), range.len() as i32);
    let unavailable = range
        .clone()
        .filter(|n| view.unavailable(set, pods.get(n)))
        .count() as i32;
    let mut room = max - unavailable;
    for n in (update_min..range.end).rev() {
        if room <= 0 {
            break;
        }
        let Some(p) = pods.get(&n) else { continue };
        if !update.has(p) && !terminating(p) {
            steps.push(delete(p, Why::Update));
            room -= 1;
        }
    }
    steps
}

/// The status from the pods as they are (upstream's `updateStatus` and
/// `completeRollingUpdate`), less the `update_deletions` this sync made.
pub fn status(
    set: &StatefulSet,
    view: &View,
    current: Rev,
    update: Rev,
    update_deletions: i32,
) -> StatefulSetStatus {
    let pods: Vec<&Pod> = view.pods.values().copied().collect();
    let count = |f: &dyn Fn(&Pod) -> bool| pods.iter().filter(|p| f(p)).count() as i32;
    let created = |p: &Pod| !phase(p).is_empty();
    let replicas = count(&created);
    let ready = count(&running_and_ready);
    let available = count(&|p| running_and_ready(p) && view.available(set, p));
    let live_at = |rev: Rev| count(&|p: &Pod| created(p) && !terminating(p) && rev.has(p));
    let updated = live_at(update);
    let mut current_revision = current.name.to_string();
    let mut current_replicas = live_at(current) - update_deletions;
    let wanted = wanted_replicas(set);
    let spec = set.spec.as_ref();
    let strategy = spec.and_then(|s| s.update_strategy.as_ref());
    let rolling = strategy
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate";
    if rolling && updated == wanted && ready == wanted && replicas == wanted {
        current_revision = update.name.to_string();
        current_replicas = updated;
    }
    StatefulSetStatus {
        observed_generation: set.metadata.generation,
        replicas,
        ready_replicas: Some(ready).filter(|n| *n > 0),
        available_replicas: Some(available),
        current_replicas: Some(current_replicas).filter(|n| *n > 0),
        updated_replicas: Some(updated).filter(|n| *n > 0),
        current_revision: Some(current_revision),
        update_revision: Some(update.name.to_string()),
        collision_count: Some(
            set.status
                .as_ref()
                .and_then(|s| s.collision_count)
                .unwrap_or(0),
        ),
        conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
    }
}

/// When to look again for availability: with `minReadySeconds` and fewer available replicas
/// than wanted, when the next ready pod becomes available, else after `minReadySeconds`
/// (upstream's `enqueueSSAfter`).
pub fn requeue(set: &StatefulSet, view: &View, status: &StatefulSetStatus) -> Option<Duration> {
    let min_ready = min_ready_seconds(set);
    if min_ready == 0 || status.available_replicas == Some(wanted_replicas(set)) {
        return None;
    }
    let next = view
        .pods
        .values()
        .filter_map(|p| podutil::available_in(p, min_ready, view.now))
        .min();
    Some(next.unwrap_or(Duration::from_secs(min_ready as u64)))
}
