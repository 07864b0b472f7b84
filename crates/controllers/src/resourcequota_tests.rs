//! Unit tests of ResourceQuota status with a fake object lister and `now` passed in, and of
//! which quota changes queue which quotas.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::json;

use super::*;

#[derive(Default)]
struct Recording {
    /// Objects by plural (`count/deployments.apps` by `deployments.apps`).
    objects: HashMap<String, Vec<Value>>,
    listed: Mutex<Vec<String>>,
    written: Mutex<Vec<ResourceQuotaStatus>>,
}

#[async_trait]
impl Quotas for Recording {
    async fn list(&self, namespace: &str, group: &str, plural: &str) -> kube::Result<Vec<Value>> {
        let key = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        self.listed.lock().push(key.clone());
        Ok(self
            .objects
            .get(&key)
            .into_iter()
            .flatten()
            .filter(|o| o.pointer("/metadata/namespace").and_then(Value::as_str) == Some(namespace))
            .cloned()
            .collect())
    }

    async fn update_status(&self, quota: &ResourceQuota) -> kube::Result<()> {
        self.written.lock().push(quota.status.clone().unwrap());
        Ok(())
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const NOW: &str = "2026-01-01T10:00:00Z";

fn rq(spec: Value, status: Value) -> ResourceQuota {
    serde_json::from_value(json!({
        "metadata": {"name": "q", "namespace": "ns"}, "spec": spec, "status": status,
    }))
    .unwrap()
}

fn pod(name: &str, ns: &str, cpu: Option<&str>, extra: Value) -> Value {
    let resources = match cpu {
        Some(c) => json!({"requests": {"cpu": c, "memory": "64Mi"}, "limits": {"cpu": c}}),
        None => json!({}),
    };
    let mut p = json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]},
        "status": {"phase": "Running"},
    });
    for (k, v) in extra.as_object().unwrap() {
        for (k2, v2) in v.as_object().unwrap() {
            p[k][k2] = v2.clone();
        }
    }
    p
}

fn api(objects: &[(&str, Vec<Value>)]) -> Recording {
    Recording {
        objects: objects
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..Default::default()
    }
}

fn written(api: &Recording) -> Value {
    serde_json::to_value(api.written.lock().last().cloned().unwrap()).unwrap()
}

#[tokio::test]
async fn used_counts_live_pods_and_their_compute_in_the_quotas_namespace_only() {
    let api = api(&[(
        "pods",
        vec![
            pod("a", "ns", Some("500m"), json!({})),
            pod("b", "ns", Some("1"), json!({})),
            pod(
                "done",
                "ns",
                Some("4"),
                json!({"status": {"phase": "Succeeded"}}),
            ),
            pod("elsewhere", "other", Some("4"), json!({})),
        ],
    )]);
    let hard = json!({"hard": {"pods": "10", "requests.cpu": "4", "limits.cpu": "8",
                               "requests.memory": "1Gi", "count/pods": "20", "cpu": "4000m"}});
    let after = reconcile(&rq(hard, json!({})), at(NOW), &api)
        .await
        .unwrap();
    assert_eq!(after, SYNC_PERIOD);
    assert_eq!(
        written(&api),
        json!({
            "hard": {"pods": "10", "requests.cpu": "4", "limits.cpu": "8",
                     "requests.memory": "1Gi", "count/pods": "20", "cpu": "4"},
            "used": {"pods": "2", "requests.cpu": "1500m", "limits.cpu": "1500m",
                     "requests.memory": "128Mi", "count/pods": "3", "cpu": "1500m"},
        })
    );
}

#[tokio::test]
async fn the_status_is_written_only_when_it_changed() {
    let api = api(&[("pods", vec![pod("a", "ns", None, json!({}))])]);
    let current = rq(
        json!({"hard": {"pods": "2"}}),
        json!({"hard": {"pods": "2"}, "used": {"pods": "1"}}),
    );
    reconcile(&current, at(NOW), &api).await.unwrap();
    assert!(api.written.lock().is_empty());
    let stale = rq(
        json!({"hard": {"pods": "2"}}),
        json!({"hard": {"pods": "2"}, "used": {"pods": "2"}}),
    );
    reconcile(&stale, at(NOW), &api).await.unwrap();
    assert_eq!(written(&api)["used"], json!({"pods": "1"}));
}

#[tokio::test]
async fn scopes_count_only_the_pods_they_match() {
    let pods = vec![
        pod("best", "ns", None, json!({})),
        pod("burst", "ns", Some("1"), json!({})),
        pod(
            "job",
            "ns",
            Some("1"),
            json!({"spec": {"activeDeadlineSeconds": 60}}),
        ),
        pod(
            "high",
            "ns",
            None,
            json!({"spec": {"priorityClassName": "high"}}),
        ),
    ];
    let api = api(&[("pods", pods)]);
    for (scopes, used) in [
        (json!({"scopes": ["BestEffort"]}), "2"),
        (json!({"scopes": ["NotBestEffort"]}), "2"),
        (json!({"scopes": ["Terminating"]}), "1"),
        (json!({"scopes": ["NotTerminating", "NotBestEffort"]}), "1"),
        (
            json!({"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
            "1",
        ),
    ] {
        let mut spec = scopes.clone();
        spec["hard"] = json!({"pods": "10"});
        reconcile(&rq(spec, json!({})), at(NOW), &api)
            .await
            .unwrap();
        assert_eq!(written(&api)["used"]["pods"], json!(used), "{scopes}");
    }
}

#[tokio::test]
async fn object_counts_cover_services_claims_and_any_served_kind() {
    let api = api(&[
        (
            "services",
            vec![json!({"metadata": {"namespace": "ns"},
                        "spec": {"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]}})],
        ),
        (
            "persistentvolumeclaims",
            vec![json!({"metadata": {"namespace": "ns"},
                        "spec": {"resources": {"requests": {"storage": "5Gi"}}}})],
        ),
        (
            "configmaps",
            vec![json!({"metadata": {"namespace": "ns"}}); 3],
        ),
        (
            "deployments.apps",
            vec![json!({"metadata": {"namespace": "ns"}}); 2],
        ),
    ]);
    let spec = json!({"hard": {"services": "5", "services.nodeports": "5",
                               "services.loadbalancers": "1", "persistentvolumeclaims": "5",
                               "requests.storage": "10Gi", "configmaps": "10",
                               "count/deployments.apps": "4", "secrets": "3"}});
    reconcile(&rq(spec, json!({})), at(NOW), &api)
        .await
        .unwrap();
    assert_eq!(
        written(&api)["used"],
        json!({"services": "1", "services.nodeports": "2", "services.loadbalancers": "0",
               "persistentvolumeclaims": "1", "requests.storage": "5Gi", "configmaps": "3",
               "count/deployments.apps": "2", "secrets": "0"})
    );
    assert!(!api.listed.lock().contains(&"pods".to_string()));
}

#[tokio::test]
async fn a_terminating_pod_is_counted_until_its_grace_period_ends_then_rechecked() {
    let api = api(&[(
        "pods",
        vec![pod(
            "a",
            "ns",
            None,
            json!({"metadata": {"deletionTimestamp": "2026-01-01T10:00:30Z"}}),
        )],
    )]);
    let quota = rq(json!({"hard": {"pods": "2"}}), json!({}));
    let after = reconcile(&quota, at(NOW), &api).await.unwrap();
    assert_eq!(after, Duration::from_secs(31));
    assert_eq!(written(&api)["used"], json!({"pods": "1"}));
    reconcile(&quota, at("2026-01-01T10:00:31Z"), &api)
        .await
        .unwrap();
    assert_eq!(written(&api)["used"], json!({"pods": "0"}));
}

#[test]
fn only_changes_that_can_lower_usage_trigger_a_recount() {
    let now = at(NOW);
    let running = pod("a", "ns", Some("1"), json!({}));
    let done = pod("a", "ns", Some("1"), json!({"status": {"phase": "Failed"}}));
    assert!(replenishes("pods", &running, &done, now));
    assert!(!replenishes("pods", &done, &running, now));
    assert!(!replenishes("pods", &running, &running, now));
    let cluster_ip = json!({"spec": {"type": "ClusterIP"}});
    let lb = json!({"spec": {"type": "LoadBalancer"}});
    assert!(replenishes("services", &lb, &cluster_ip, now));
    assert!(!replenishes("configmaps", &lb, &cluster_ip, now));
}

#[test]
fn a_quota_whose_status_lags_its_spec_needs_a_sync() {
    let hard = |q: &ResourceQuota| from_quantities(q.spec.as_ref().and_then(|s| s.hard.as_ref()));
    let fresh = rq(json!({"hard": {"pods": "2"}}), json!({}));
    assert!(needs_sync(&fresh, &hard(&fresh)));
    let synced = rq(
        json!({"hard": {"pods": "2"}}),
        json!({"hard": {"pods": "2"}, "used": {"pods": "1"}}),
    );
    assert!(!needs_sync(&synced, &hard(&synced)));
    let raised = rq(
        json!({"hard": {"pods": "3"}}),
        json!({"hard": {"pods": "2"}, "used": {"pods": "1"}}),
    );
    assert!(needs_sync(&raised, &hard(&raised)));
}

fn served(group: &str, plural: &str, namespaced: bool, verbs: &[&str]) -> resources::Served {
    resources::Served {
        resource: kube::discovery::ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            kind: "Kind".into(),
            plural: plural.into(),
        },
        namespaced,
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    }
}

#[test]
fn the_quota_monitor_follows_quotable_resources_not_watched_with_a_store() {
    let crud = [
        "create", "delete", "get", "list", "patch", "update", "watch",
    ];
    assert!(monitored(&served("example.com", "widgets", true, &crud)));
    assert!(monitored(&served("apps", "deployments", true, &crud)));
    // watched with a store already
    assert!(!monitored(&served("", "pods", true, &crud)));
    // not quotable: cluster-scoped, not creatable, or events
    assert!(!monitored(&served("example.com", "gadgets", false, &crud)));
    assert!(!monitored(&served(
        "example.com",
        "readonly",
        true,
        &["get", "list", "watch", "delete"]
    )));
    assert!(!monitored(&served("events.k8s.io", "events", true, &crud)));
    assert!(!monitored(&served("", "events", true, &crud)));
}

#[tokio::test]
async fn a_new_quota_queues_its_namespace_and_a_known_one_only_itself_when_it_lags() {
    let named = |name: &str, ns: &str, status: Value| {
        let mut q = rq(json!({"hard": {"pods": "2"}}), status);
        q.metadata.name = Some(name.into());
        q.metadata.namespace = Some(ns.into());
        Arc::new(q)
    };
    let synced = json!({"hard": {"pods": "2"}, "used": {"pods": "0"}});
    let quotas = Cache::from_objects(
        [
            named("a", "ns", synced.clone()),
            named("b", "ns", synced.clone()),
            named("c", "other", synced.clone()),
        ]
        .map(|q| (*q).clone()),
    );
    let queue = Queue::new("quotas");
    let mut handle = quota_handler(quotas, queue.clone());
    let drain = |queue: &Queue| {
        let mut keys = Vec::new();
        while let Some(key) = queue.get().now_or_never().flatten() {
            queue.done(&key);
            keys.push(key.name);
        }
        keys.sort();
        keys
    };
    handle(&Change::Added(named("a", "ns", synced.clone())));
    assert_eq!(drain(&queue), ["a", "b"]);
    let (old, new) = (named("a", "ns", synced.clone()), named("a", "ns", synced));
    handle(&Change::Updated { old, new });
    assert!(drain(&queue).is_empty(), "nothing to do for a synced quota");
    let (old, new) = (named("a", "ns", json!({})), named("a", "ns", json!({})));
    handle(&Change::Updated { old, new });
    assert_eq!(drain(&queue), ["a"]);
}
