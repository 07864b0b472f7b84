//! `pods/{name}/eviction` (upstream's EvictionREST): a pod covered by a PodDisruptionBudget is
//! deleted only if the budget allows one more disruption, which is taken from it first
//! (`status.disruptionsAllowed` decremented, the pod recorded in `status.disruptedPods`, both
//! guarded by the budget's revision); otherwise 429 with upstream's message and a
//! `DisruptionBudget` cause. Finished and unready pods follow upstream's exemptions.

use http::Response;
use serde_json::{Value, json};
use skiff_apimachinery::catalog;
use skiff_apimachinery::labels::Selector;
use skiff_store::{KeyRange, RangeRequest};

use crate::error::{ApiError, Result};
use crate::handlers::read::fetch;
use crate::handlers::{Body, Ctx, success_status};
use crate::registry::{self, DeleteOptions, commit, rv_of};
use crate::storage;
use crate::strategy::generic;

/// Upstream's `MaxDisruptedPodSize`.
const MAX_DISRUPTED_PODS: usize = 2000;
/// Attempts at the budget's guarded update before giving up.
const ATTEMPTS: usize = 5;

/// What an eviction may do, given the pod and the budgets of its namespace.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Delete the pod without touching any budget.
    Delete,
    /// Write this budget (one disruption taken), then delete the pod.
    Take(Value),
}

fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn too_many(message_cause: String) -> ApiError {
    let mut e = ApiError::with_code(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
    );
    e.details = Some(json!({
        "causes": [{"reason": "DisruptionBudget", "message": message_cause}],
        "retryAfterSeconds": 0,
    }));
    e
}

/// Upstream's `checkAndDecrement` and its exemptions, at `now` (RFC 3339).
pub fn decide(pod: &Value, budgets: &[Value], now: &str) -> Result<Decision> {
    if matches!(phase(pod), "Succeeded" | "Failed" | "Pending")
        || pod.pointer("/metadata/deletionTimestamp").is_some()
    {
        return Ok(Decision::Delete);
    }
    let labels = pod
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    let matching: Vec<&Value> = budgets
        .iter()
        .filter(|b| {
            let selector = b.pointer("/spec/selector").unwrap_or(&Value::Null);
            Selector::from_label_selector(selector).is_ok_and(|s| s.matches(&labels))
        })
        .collect();
    let budget = match matching.as_slice() {
        [] => return Ok(Decision::Delete),
        [one] => *one,
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let name = budget
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (current, desired) = (
        int(budget, "/status/currentHealthy"),
        int(budget, "/status/desiredHealthy"),
    );
    if !ready(pod) {
        let policy = budget
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str);
        if policy == Some("AlwaysAllow") || (current >= desired && desired > 0) {
            return Ok(Decision::Delete);
        }
    }
    if int(budget, "/status/observedGeneration") < int(budget, "/metadata/generation") {
        return Err(too_many(format!(
            "The disruption budget {name} is still being processed by the server."
        )));
    }
    let allowed = int(budget, "/status/disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden("pdb disruptions allowed is negative"));
    }
    let disrupted = budget
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(ApiError::forbidden(
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many(format!(
            "The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        )));
    }
    let mut next = budget.clone();
    next["status"]["disruptionsAllowed"] = json!(allowed - 1);
    let pod_name = pod
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    if let Some(pod_name) = pod_name.as_str() {
        if !next["status"]["disruptedPods"].is_object() {
            next["status"]["disruptedPods"] = json!({});
        }
        next["status"]["disruptedPods"][pod_name] = json!(now);
    }
    if allowed - 1 == 0 {
        let conditions = next["status"]["conditions"].as_array_mut();
        if let Some(c) =
            conditions.and_then(|cs| cs.iter_mut().find(|c| c["type"] == "DisruptionAllowed"))
        {
            if c["status"] != "False" {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!("False");
            c["reason"] = json!("InsufficientPods");
        }
    }
    Ok(Decision::Take(next))
}

/// The budgets of the request's namespace, as stored.
async fn budgets(ctx: &Ctx) -> Result<Vec<Value>> {
    let Some(rt) = catalog::lookup("policy", "v1", "poddisruptionbudgets") else {
        return Ok(Vec::new());
    };
    let prefix = storage::prefix(rt, &ctx.info.namespace);
    let resp = ctx
        .server
        .store
        .range(RangeRequest {
            range: KeyRange::prefix(prefix.as_bytes().to_vec()),
            ..Default::default()
        })
        .await?;
    resp.kvs.iter().map(storage::decode).collect()
}

/// Handles `POST pods/{name}/eviction`.
pub async fn evict(ctx: Ctx) -> Result<Response<Body>> {
    let name = ctx.info.name.clone();
    let Some(rt) = catalog::lookup("policy", "v1", "poddisruptionbudgets") else {
        return Err(ApiError::internal("poddisruptionbudgets are not served"));
    };
    let mut taken = false;
    for _ in 0..ATTEMPTS {
        let pod = fetch(&ctx, &name).await?;
        let now = generic::timestamp(ctx.server.now());
        match decide(&pod, &budgets(&ctx).await?, &now)? {
            Decision::Delete => {
                taken = true;
                break;
            }
            Decision::Take(budget) => {
                let budget_name = budget["metadata"]["name"].as_str().unwrap_or_default();
                let key = storage::key(rt, &ctx.info.namespace, budget_name);
                let mut stored = budget.clone();
                if let Some(m) = stored["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                let rev = rv_of(&budget).unwrap_or(0);
                if commit(&ctx, &key, rev, Some(storage::encode(&stored)), &[], &[])
                    .await?
                    .is_some()
                {
                    taken = true;
                    break;
                }
            }
        }
    }
    if !taken {
        return Err(ApiError::with_code(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        ));
    }
    registry::delete(&ctx, &name, &DeleteOptions::default()).await?;
    Ok(crate::handlers::json(
        201,
        &success_status(json!({"name": name, "kind": "pods"})),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(phase: &str, ready: bool) -> Value {
        json!({"metadata": {"name": "web-1", "labels": {"app": "web"}},
               "status": {"phase": phase, "conditions": [
                   {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
    }

    fn budget(allowed: i64, current: i64, desired: i64) -> Value {
        json!({"metadata": {"name": "web-pdb", "generation": 1, "resourceVersion": "9"},
               "spec": {"selector": {"matchLabels": {"app": "web"}}},
               "status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
                          "currentHealthy": current, "desiredHealthy": desired,
                          "conditions": [{"type": "DisruptionAllowed", "status": "True",
                                          "reason": "SufficientPods"}]}})
    }

    #[test]
    fn a_budget_with_no_disruptions_left_refuses_with_429_and_its_numbers() {
        let err = decide(&pod("Running", true), &[budget(0, 2, 2)], "t").unwrap_err();
        assert_eq!((err.code, err.reason), (429, "TooManyRequests"));
        assert_eq!(
            err.message,
            "Cannot evict pod as it would violate the pod's disruption budget."
        );
        let cause = &err.details.unwrap()["causes"][0];
        assert_eq!(cause["reason"], "DisruptionBudget");
        assert_eq!(
            cause["message"],
            "The disruption budget web-pdb needs 2 healthy pods and has 2 currently"
        );
    }

    #[test]
    fn an_allowed_eviction_takes_one_disruption_and_records_the_pod() {
        let Decision::Take(next) =
            decide(&pod("Running", true), &[budget(1, 3, 2)], "now").unwrap()
        else {
            panic!("expected the budget to be taken from");
        };
        assert_eq!(next["status"]["disruptionsAllowed"], 0);
        assert_eq!(next["status"]["disruptedPods"]["web-1"], "now");
        assert_eq!(next["status"]["conditions"][0]["status"], "False");
        assert_eq!(
            next["status"]["conditions"][0]["reason"],
            "InsufficientPods"
        );
    }

    #[test]
    fn finished_unmatched_and_unready_pods_of_a_healthy_budget_are_just_deleted() {
        assert_eq!(
            decide(&pod("Succeeded", false), &[budget(0, 0, 2)], "t").unwrap(),
            Decision::Delete
        );
        assert_eq!(
            decide(&pod("Running", true), &[], "t").unwrap(),
            Decision::Delete
        );
        assert_eq!(
            decide(&pod("Running", false), &[budget(0, 2, 2)], "t").unwrap(),
            Decision::Delete
        );
    }

    #[test]
    fn a_budget_not_yet_observed_or_two_budgets_refuse() {
        let mut stale = budget(1, 3, 2);
        stale["metadata"]["generation"] = json!(2);
        let err = decide(&pod("Running", true), &[stale], "t").unwrap_err();
        assert_eq!(err.code, 429);
        let err = decide(
            &pod("Running", true),
            &[budget(1, 3, 2), budget(1, 3, 2)],
            "t",
        )
        .unwrap_err();
        assert_eq!(err.code, 500);
    }
}
