//! ClusterRole aggregation, upstream's `clusterrole-aggregation` controller run inside the API
//! server: a ClusterRole with an `aggregationRule` gets as its rules the union of the rules of
//! the ClusterRoles its selectors match (by name order, no duplicates), kept current as roles
//! come, change and go. It reads the watch cache and writes with a compare on the role's
//! revision, so a concurrent user edit wins and the next event recomputes.

use std::sync::Arc;

use serde_json::Value;
use skiff_store::Store;

use crate::registry::{Guard, Txn};

use crate::cache::Cacher;
use crate::error::Result;
use crate::storage;

fn cluster_roles() -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::lookup("rbac.authorization.k8s.io", "v1", "clusterroles")
        .expect("clusterroles")
}

/// The aggregated roles of `roles` whose rules are not what their selectors give, with the
/// rules they should have.
pub fn stale(roles: &[Value]) -> Vec<Value> {
    let mut settled = roles.to_vec();
    crate::bootstrap::rbac::aggregate(&mut settled);
    settled
        .into_iter()
        .filter(|r| r.get("aggregationRule").is_some())
        .filter(|r| {
            roles
                .iter()
                .find(|o| o["metadata"]["name"] == r["metadata"]["name"])
                .is_some_and(|o| {
                    o["rules"] != r["rules"]
                        && !(o.get("rules").is_none() && r["rules"] == Value::Array(vec![]))
                })
        })
        .collect()
}

/// Brings every aggregated role up to date once; how many were written.
pub async fn sync(cache: &Cacher, store: &Arc<dyn Store>) -> Result<usize> {
    let rt = cluster_roles();
    let snapshot = cache.resource(rt).list("");
    let mut roles = Vec::with_capacity(snapshot.objects.len());
    let mut revisions = std::collections::HashMap::new();
    for c in &snapshot.objects {
        revisions.insert(c.name.clone(), c.revision);
        roles.push(c.object()?);
    }
    let mut written = 0;
    for role in stale(&roles) {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let key = storage::key(rt, "", name);
        let committed = Txn::new()
            .put(&key, Guard::At(revisions[name]), storage::encode(&role))
            .commit(&**store)
            .await?;
        written += usize::from(committed.is_some());
    }
    Ok(written)
}

/// Runs the aggregation loop until the cache goes away: a sync now, then one after each batch
/// of ClusterRole changes.
pub fn spawn(cache: Arc<Cacher>, store: Arc<dyn Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(mut changes) = cache.subscribe(&[cluster_roles()]) else {
                return;
            };
            if let Err(e) = sync(&cache, &store).await {
                tracing::warn!(error = %e, "aggregating cluster roles");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            if !changes.changed().await {
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(name: &str, labels: Value, rules: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "rules": rules})
    }

    #[test]
    fn an_aggregated_role_gets_the_rules_of_the_roles_it_selects() {
        let mut monitoring = role("monitoring", json!({}), json!([]));
        monitoring["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-monitoring": "true"}}]});
        let a = role(
            "a",
            json!({"rbac.example.com/aggregate-to-monitoring": "true"}),
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
        );
        let b = role(
            "b",
            json!({}),
            json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]),
        );
        let out = stale(&[monitoring.clone(), a.clone(), b]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["rules"], a["rules"]);
        monitoring["rules"] = a["rules"].clone();
        assert!(
            stale(&[monitoring, a]).is_empty(),
            "settled roles are left alone"
        );
    }
}
