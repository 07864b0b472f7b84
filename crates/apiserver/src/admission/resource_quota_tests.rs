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
        notes: Default::default(),
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

/// The plugin over one unscoped quota `q`.
fn one_quota(hard: Value, used: Value) -> ResourceQuota<Recording> {
    plugin(vec![quota("q", hard, used, json!({}))])
}

#[tokio::test]
async fn a_create_within_the_quota_raises_its_used() {
    let user = UserInfo::anonymous();
    let p = one_quota(
        json!({"pods": "2", "requests.cpu": "1"}),
        json!({"pods": "1", "requests.cpu": "250m"}),
    );
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
    let p = one_quota(json!({"pods": "2"}), json!({"pods": "2"}));
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
    let p = one_quota(json!({"pods": "2", "services": "1"}), json!({}));
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
    let p = one_quota(json!({"pods": "5"}), json!({"pods": "1"}));
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

fn update<'a>(user: &'a UserInfo, plural: &str, old: &'a Value) -> Attributes<'a> {
    Attributes {
        operation: Operation::Update,
        old: Some(old),
        ..attrs(user, plural, false)
    }
}

fn service(type_: &str, ports: usize) -> Value {
    let ports: Vec<Value> = (0..ports)
        .map(|i| json!({"port": 80 + i, "targetPort": 8080}))
        .collect();
    json!({"metadata": {"name": "web", "namespace": "ns", "resourceVersion": "3"},
           "spec": {"type": type_, "ports": ports}})
}

fn claim(storage: &str) -> Value {
    json!({"metadata": {"name": "web", "namespace": "ns", "resourceVersion": "3"},
           "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": storage}}}})
}

#[tokio::test]
async fn a_service_turned_into_a_load_balancer_is_charged_its_node_ports_and_balancer() {
    let user = UserInfo::anonymous();
    let p = one_quota(
        json!({"services": "5", "services.nodeports": "3", "services.loadbalancers": "1"}),
        json!({"services": "1", "services.nodeports": "0", "services.loadbalancers": "0"}),
    );
    let old = service("ClusterIP", 2);
    p.validate(
        &update(&user, "services", &old),
        Some(&service("LoadBalancer", 2)),
    )
    .await
    .unwrap();
    assert_eq!(
        p.store.quotas.lock()[0]["status"]["used"],
        json!({"services": "1", "services.nodeports": "2", "services.loadbalancers": "1"}),
        "the service itself is not counted again"
    );
    // a second balancer is past the quota
    let err = p
        .validate(
            &update(&user, "services", &service("NodePort", 1)),
            Some(&service("LoadBalancer", 1)),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (
            403,
            "services \"web\" is forbidden: exceeded quota: q, requested: services.loadbalancers=1, used: services.loadbalancers=1, limited: services.loadbalancers=1"
        )
    );
}

#[tokio::test]
async fn a_claim_resize_is_charged_the_growth_and_a_shrink_charges_nothing() {
    let user = UserInfo::anonymous();
    let p = one_quota(
        json!({"requests.storage": "10Gi"}),
        json!({"requests.storage": "4Gi"}),
    );
    let (small, big, huge) = (claim("2Gi"), claim("5Gi"), claim("20Gi"));
    p.validate(&update(&user, "persistentvolumeclaims", &small), Some(&big))
        .await
        .unwrap();
    assert_eq!(
        p.store.quotas.lock()[0]["status"]["used"]["requests.storage"],
        "7Gi"
    );
    p.validate(&update(&user, "persistentvolumeclaims", &big), Some(&small))
        .await
        .unwrap();
    assert_eq!(*p.store.updates.lock(), 1, "a shrink writes nothing");
    let err = p
        .validate(&update(&user, "persistentvolumeclaims", &big), Some(&huge))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "persistentvolumeclaims \"web\" is forbidden: exceeded quota: q, requested: requests.storage=15Gi, used: requests.storage=7Gi, limited: requests.storage=10Gi"
    );
}

#[tokio::test]
async fn updates_of_kinds_without_update_usage_and_unchanged_usage_charge_nothing() {
    let user = UserInfo::anonymous();
    let p = one_quota(
        json!({"pods": "1", "services": "1"}),
        json!({"pods": "1", "services": "1"}),
    );
    let old = pod(json!({}));
    p.validate(&update(&user, "pods", &old), Some(&pod(json!({}))))
        .await
        .unwrap();
    let svc = service("ClusterIP", 1);
    p.validate(&update(&user, "services", &svc), Some(&svc))
        .await
        .unwrap();
    assert_eq!(*p.store.updates.lock(), 0);
}

#[tokio::test]
async fn a_lost_race_on_an_update_is_retried_from_a_fresh_read() {
    let user = UserInfo::anonymous();
    let p = one_quota(
        json!({"services.nodeports": "4"}),
        json!({"services.nodeports": "1"}),
    );
    *p.store.conflicts.lock() = 2;
    let old = service("ClusterIP", 2);
    p.validate(
        &update(&user, "services", &old),
        Some(&service("NodePort", 2)),
    )
    .await
    .unwrap();
    assert_eq!(*p.store.updates.lock(), 1);
    assert_eq!(
        p.store.quotas.lock()[0]["status"]["used"]["services.nodeports"],
        "3"
    );
}

#[tokio::test]
async fn a_pod_resize_is_charged_what_it_adds_and_other_pod_updates_nothing() {
    let user = UserInfo::anonymous();
    let p = one_quota(json!({"requests.cpu": "2"}), json!({"requests.cpu": "1"}));
    let old = pod(json!({"requests": {"cpu": "1"}}));
    let resize = |old| Attributes {
        subresource: "resize",
        ..update(&user, "pods", old)
    };
    let grown = pod(json!({"requests": {"cpu": "1500m"}}));
    p.validate(&resize(&old), Some(&grown)).await.unwrap();
    assert_eq!(
        p.store.quotas.lock()[0]["status"]["used"]["requests.cpu"],
        "1500m"
    );
    let err = p
        .validate(&resize(&old), Some(&pod(json!({"requests": {"cpu": "3"}}))))
        .await
        .unwrap_err();
    assert!(err.message.contains("exceeded quota: q"), "{}", err.message);
    // an ordinary update (which cannot change resources) is not charged
    let plain = update(&user, "pods", &old);
    p.validate(&plain, Some(&pod(json!({"requests": {"cpu": "3"}}))))
        .await
        .unwrap();
}
