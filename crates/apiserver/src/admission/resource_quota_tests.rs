//! Unit tests of ResourceQuota admission over a fake quota store that can be told to lose races.

use parking_lot::Mutex;
use serde_json::json;
use skiff_apimachinery::catalog::lookup;

use super::*;
use crate::authn::UserInfo;

/// Quotas kept in memory; `conflicts` updates fail first as if another create had won.
#[derive(Default)]
struct Recording {
    quotas: Mutex<Vec<Value>>,
    conflicts: Mutex<usize>,
    updates: Mutex<usize>,
}

#[async_trait]
impl QuotaStore for Recording {
    async fn quotas(&self, _namespace: &str) -> Result<Vec<Value>> {
        Ok(self.quotas.lock().clone())
    }

    async fn update(&self, _namespace: &str, quotas: &[Value]) -> Result<bool> {
        let mut conflicts = self.conflicts.lock();
        if *conflicts > 0 {
            *conflicts -= 1;
            return Ok(false);
        }
        *self.updates.lock() += 1;
        let mut stored = self.quotas.lock();
        for q in quotas {
            let slot = stored
                .iter_mut()
                .find(|s| s["metadata"]["name"] == q["metadata"]["name"])
                .unwrap();
            *slot = q.clone();
        }
        Ok(true)
    }
}

fn quota(name: &str, hard: Value, used: Value, extra: Value) -> Value {
    let mut q = json!({
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "7"},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": used},
    });
    if let Some(scopes) = extra.get("scopes") {
        q["spec"]["scopes"] = scopes.clone();
    }
    q
}

fn pod(resources: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "ns"},
           "spec": {"containers": [{"name": "app", "image": "i", "resources": resources}]}})
}

fn attrs<'a>(user: &'a UserInfo, plural: &str, dry_run: bool) -> Attributes<'a> {
    Attributes {
        operation: Operation::Create,
        resource: lookup("", "v1", plural).unwrap(),
        subresource: "",
        namespace: "ns",
        name: "web",
        user,
        old: None,
        dry_run,
    }
}

fn plugin(quotas: Vec<Value>) -> ResourceQuota<Recording> {
    ResourceQuota {
        store: Recording {
            quotas: Mutex::new(quotas),
            ..Default::default()
        },
    }
}

#[tokio::test]
async fn a_create_within_the_quota_raises_its_used() {
    let user = UserInfo::anonymous();
    let p = plugin(vec![quota(
        "q",
        json!({"pods": "2", "requests.cpu": "1"}),
        json!({"pods": "1", "requests.cpu": "250m"}),
        json!({}),
    )]);
    let obj = pod(json!({"requests": {"cpu": "500m"}}));
    p.validate(&attrs(&user, "pods", false), Some(&obj))
        .await
        .unwrap();
    assert_eq!(
        p.store.quotas.lock()[0]["status"]["used"],
        json!({"pods": "2", "requests.cpu": "750m"})
    );
}

#[tokio::test]
async fn a_create_past_the_quota_is_refused_with_upstreams_message() {
    let user = UserInfo::anonymous();
    let p = plugin(vec![quota(
        "q",
        json!({"pods": "2"}),
        json!({"pods": "2"}),
        json!({}),
    )]);
    let err = p
        .validate(&attrs(&user, "pods", false), Some(&pod(json!({}))))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            403,
            "pods \"web\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        )
    );
    assert_eq!(*p.store.updates.lock(), 0);
}

#[tokio::test]
async fn a_pod_must_state_what_a_quota_limits() {
    let user = UserInfo::anonymous();
    let p = plugin(vec![quota(
        "compute",
        json!({"limits.cpu": "2"}),
        json!({"limits.cpu": "0"}),
        json!({}),
    )]);
    let err = p
        .validate(
            &attrs(&user, "pods", false),
            Some(&pod(json!({"requests": {"cpu": "1"}}))),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        "pods \"web\" is forbidden: failed quota: compute: must specify limits.cpu for: app"
    );
}

#[tokio::test]
async fn a_quota_the_controller_has_not_counted_yet_refuses_until_it_has() {
    let user = UserInfo::anonymous();
    let p = plugin(vec![quota(
        "q",
        json!({"pods": "2", "services": "1"}),
        json!({}),
        json!({}),
    )]);
    let err = p
        .validate(&attrs(&user, "pods", false), Some(&pod(json!({}))))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "pods \"web\" is forbidden: status unknown for quota: q, resources: pods"
    );
}

#[tokio::test]
async fn a_lost_race_is_retried_from_a_fresh_read() {
    let user = UserInfo::anonymous();
    let p = plugin(vec![quota(
        "q",
        json!({"pods": "5"}),
        json!({"pods": "1"}),
        json!({}),
    )]);
    *p.store.conflicts.lock() = 3;
    p.validate(&attrs(&user, "pods", false), Some(&pod(json!({}))))
        .await
        .unwrap();
    assert_eq!(*p.store.updates.lock(), 1);
    assert_eq!(p.store.quotas.lock()[0]["status"]["used"]["pods"], "2");
}

#[tokio::test]
async fn unmatched_scopes_kinds_and_dry_runs_charge_nothing() {
    let user = UserInfo::anonymous();
    let p = plugin(vec![
        quota(
            "best-effort",
            json!({"pods": "0"}),
            json!({"pods": "0"}),
            json!({"scopes": ["BestEffort"]}),
        ),
        quota(
            "services",
            json!({"services": "0"}),
            json!({"services": "0"}),
            json!({}),
        ),
        quota("all", json!({"pods": "9"}), json!({"pods": "0"}), json!({})),
    ]);
    let burstable = pod(json!({"requests": {"cpu": "1"}}));
    p.validate(&attrs(&user, "pods", true), Some(&burstable))
        .await
        .unwrap();
    assert_eq!(*p.store.updates.lock(), 0, "dry run");
    p.validate(&attrs(&user, "pods", false), Some(&burstable))
        .await
        .unwrap();
    let stored = p.store.quotas.lock().clone();
    assert_eq!(stored[0]["status"]["used"]["pods"], "0");
    assert_eq!(stored[2]["status"]["used"]["pods"], "1");
    let err = p
        .validate(&attrs(&user, "pods", false), Some(&pod(json!({}))))
        .await
        .unwrap_err();
    assert!(
        err.message.contains("exceeded quota: best-effort"),
        "{}",
        err.message
    );
}
