//! API Priority and Fairness's bootstrap configuration (`apf_bootstrap.yaml`): the mandatory
//! and suggested FlowSchemas and PriorityLevelConfigurations, maintained on every start as
//! upstream's API server maintains them:
//! - a missing one is created (upstream re-creates a deleted suggested object too; keeping an
//!   object with `apf.kubernetes.io/autoupdate-spec: "false"` is how one is kept changed);
//! - an existing one gets the bootstrap spec when its `apf.kubernetes.io/autoupdate-spec`
//!   annotation is `true`, or when it has no readable annotation and has never been changed
//!   (generation 1); it is then annotated `true`;
//! - an object annotated `true` that is not part of the bootstrap configuration is deleted.
//!
//! The API server does this at start and then every minute ([`spawn_upkeep`]).

use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::Value;
use skiff_apimachinery::catalog::{ResourceType, lookup};
use skiff_store::{KeyRange, RangeRequest, Store};

use super::reconcile::Change;
use crate::error::Result;
use crate::registry::{Guard, Txn};
use crate::storage;

/// The annotation that says whether the API server keeps an object's spec.
pub const AUTOUPDATE_SPEC: &str = "apf.kubernetes.io/autoupdate-spec";

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// The bootstrap configuration, in upstream's order.
#[derive(Debug, Deserialize)]
pub struct Configuration {
    pub mandatory: Vec<Value>,
    pub suggested: Vec<Value>,
}

/// The bootstrap configuration (parsed once).
pub fn configuration() -> &'static Configuration {
    static CONFIGURATION: OnceLock<Configuration> = OnceLock::new();
    CONFIGURATION.get_or_init(|| {
        serde_yaml::from_str(include_str!("apf_bootstrap.yaml"))
            .expect("apf_bootstrap.yaml is valid (tested)")
    })
}

/// What the stored `existing` needs to match `expected`: the bootstrap spec and the
/// annotation `true`, or nothing (see the module's documentation).
fn plan(existing: &Value, expected: &Value) -> Change {
    let annotated = existing
        .pointer(&format!(
            "/metadata/annotations/{}",
            AUTOUPDATE_SPEC.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    let keep_spec = match annotated.and_then(|a| a.parse::<bool>().ok()) {
        Some(update) => update,
        // an object never changed since it was created is taken over
        None => {
            existing
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                == Some(1)
        }
    };
    if existing["spec"] == expected["spec"] && annotated == Some("true") {
        return Change::None;
    }
    if !keep_spec {
        return Change::Kept;
    }
    let mut updated = existing.clone();
    updated["spec"] = expected["spec"].clone();
    updated["metadata"]["annotations"][AUTOUPDATE_SPEC] = Value::from("true");
    Change::Update(updated)
}

/// The resource type of a bootstrap object.
fn resource_of(object: &Value) -> &'static ResourceType {
    let plural = match object["kind"].as_str() {
        Some("FlowSchema") => "flowschemas",
        _ => "prioritylevelconfigurations",
    };
    lookup(GROUP, "v1", plural).expect("flowcontrol kinds are in the catalog")
}

/// How often the configuration is maintained again after start, as upstream.
const UPKEEP: std::time::Duration = std::time::Duration::from_secs(60);

/// Maintains the configuration again every minute (after [`run`] at start), so that a deleted
/// or changed object annotated `true` comes back without a restart.
pub fn spawn_upkeep(store: Arc<dyn Store>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP).await;
            if let Err(e) = run(&store).await {
                tracing::warn!(error = %e, "maintaining API Priority and Fairness's configuration");
            }
        }
    })
}

/// Maintains the bootstrap configuration in `store` (see the module's documentation).
pub async fn run(store: &Arc<dyn Store>) -> Result<()> {
    let configuration = configuration();
    let expected = || {
        configuration
            .mandatory
            .iter()
            .chain(&configuration.suggested)
    };
    for object in expected() {
        super::maintain(store, resource_of(object), object, |old| plan(old, object)).await?;
    }
    // objects the API server maintains that the configuration no longer has
    for plural in ["flowschemas", "prioritylevelconfigurations"] {
        let rt = lookup(GROUP, "v1", plural).expect("flowcontrol kinds are in the catalog");
        let listed = store
            .range(RangeRequest {
                range: KeyRange::prefix(storage::prefix(rt, "")),
                ..Default::default()
            })
            .await?;
        for kv in &listed.kvs {
            let object = storage::decode(kv)?;
            let name = &object["metadata"]["name"];
            let maintained = object["metadata"]["annotations"][AUTOUPDATE_SPEC] == "true";
            let known = expected()
                .any(|e| e["metadata"]["name"] == *name && resource_of(e).plural == plural);
            if maintained && !known {
                let key = String::from_utf8_lossy(&kv.key).into_owned();
                Txn::new()
                    .delete(&key, Guard::At(kv.mod_revision))
                    .commit(&**store)
                    .await?;
                tracing::info!(%plural, %name, "removed an APF object the configuration no longer has");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_configuration_has_upstreams_objects_all_annotated() {
        let c = configuration();
        let names = |list: &[Value], kind: &str| -> Vec<String> {
            list.iter()
                .filter(|o| o["kind"] == kind)
                .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            names(&c.mandatory, "PriorityLevelConfiguration"),
            ["exempt", "catch-all"]
        );
        assert_eq!(names(&c.mandatory, "FlowSchema"), ["exempt", "catch-all"]);
        assert_eq!(
            names(&c.suggested, "PriorityLevelConfiguration"),
            [
                "system",
                "node-high",
                "leader-election",
                "workload-high",
                "workload-low",
                "global-default"
            ]
        );
        assert_eq!(names(&c.suggested, "FlowSchema").len(), 11);
        for object in c.mandatory.iter().chain(&c.suggested) {
            assert_eq!(object["metadata"]["annotations"][AUTOUPDATE_SPEC], "true");
            if object["kind"] == "FlowSchema" {
                // every flow schema names a priority level of the configuration
                let level = &object["spec"]["priorityLevelConfiguration"]["name"];
                assert!(
                    c.mandatory
                        .iter()
                        .chain(&c.suggested)
                        .any(|o| o["kind"] == "PriorityLevelConfiguration"
                            && o["metadata"]["name"] == *level),
                    "{level}"
                );
            }
        }
    }

    #[test]
    fn specs_are_kept_as_the_annotation_and_generation_say() {
        let expected = json!({"metadata": {"name": "system"}, "spec": {"type": "Limited", "v": 1}});
        let existing = |annotation: Option<&str>, generation: i64, v: i64| {
            let mut o = json!({"metadata": {"name": "system", "generation": generation},
                               "spec": {"type": "Limited", "v": v}});
            if let Some(a) = annotation {
                o["metadata"]["annotations"] = json!({AUTOUPDATE_SPEC: a});
            }
            o
        };
        // annotated true: the spec is put back
        let Change::Update(updated) = plan(&existing(Some("true"), 4, 2), &expected) else {
            panic!("an update")
        };
        assert_eq!(updated["spec"]["v"], 1);
        assert_eq!(updated["metadata"]["generation"], 4);
        assert_eq!(plan(&existing(Some("true"), 4, 1), &expected), Change::None);
        // annotated false: left as its owner made it
        assert_eq!(
            plan(&existing(Some("false"), 1, 2), &expected),
            Change::Kept
        );
        // not annotated: taken over while never changed, otherwise left
        let Change::Update(updated) = plan(&existing(None, 1, 1), &expected) else {
            panic!("an update")
        };
        assert_eq!(updated["metadata"]["annotations"][AUTOUPDATE_SPEC], "true");
        assert_eq!(plan(&existing(None, 2, 2), &expected), Change::Kept);
        assert_eq!(
            plan(&existing(Some("maybe"), 3, 2), &expected),
            Change::Kept
        );
    }
}
