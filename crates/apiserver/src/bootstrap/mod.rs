//! What exists from the first start, as upstream's bootstrap controllers create it: the
//! namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease`, the `kubernetes`
//! Service in `default` with Endpoints pointing at this API server (rewritten on every start, so
//! they follow the address), the `system-node-critical` and `system-cluster-critical`
//! PriorityClasses, the default RBAC policy, and API Priority and Fairness's mandatory and
//! suggested configuration.
//!
//! # Layout
//! - [`apf`]: the FlowSchemas and PriorityLevelConfigurations (`apf_bootstrap.yaml`).
//! - [`rbac`]: the bootstrap RBAC policy (`rbac_policy.yaml`) and ensuring it in the store.
//! - [`reconcile`]: upstream's union-mode reconciliation of one role or binding.

pub mod apf;
pub mod rbac;
pub mod reconcile;

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};
use skiff_apimachinery::catalog::{ResourceType, lookup};
use skiff_store::{Store, StoreExt};

use crate::registry::{Guard, Txn};
use reconcile::Change;

use crate::error::Result;
use crate::pki::KUBERNETES_SERVICE_IP;
use crate::storage;
use crate::strategy::{self, generic};

/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates `object` of `group/plural` unless it exists; with `replace`, overwrites an existing
/// one's spec-like content (keeping uid, creationTimestamp and status).
async fn ensure(
    store: &Arc<dyn Store>,
    group: &str,
    plural: &str,
    object: Value,
    replace: bool,
) -> Result<()> {
    let rt = lookup(group, "v1", plural).expect("bootstrap kinds are in the catalog");
    maintain(store, rt, &object, |old| {
        if !replace {
            return Change::None;
        }
        let mut object = object.clone();
        if let Some(status) = old.get("status") {
            object["status"] = status.clone();
        }
        Change::Update(object)
    })
    .await?;
    Ok(())
}

/// Attempts at one object before giving up on a write that keeps losing races.
const ATTEMPTS: usize = 5;

/// What [`maintain`] did to one object.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Created,
    Updated,
    Unchanged,
    /// It differs, and was left as its owner asked ([`Change::Kept`]).
    Protected,
}

/// Brings one bootstrap object in line with `expected`: creates it where nothing is stored,
/// otherwise writes what `change(stored)` asks for, retrying when another API server wrote
/// the object meanwhile.
async fn maintain(
    store: &Arc<dyn Store>,
    rt: &ResourceType,
    expected: &Value,
    change: impl Fn(&Value) -> Change,
) -> Result<Outcome> {
    let ns = expected["metadata"]["namespace"].as_str().unwrap_or("");
    let name = expected["metadata"]["name"].as_str().unwrap_or("");
    let key = storage::key(rt, ns, name);
    let put_if = |guard, object: &Value| {
        Txn::new()
            .put(&key, guard, storage::encode(object))
            .commit(&**store)
    };
    for _ in 0..ATTEMPTS {
        let Some(kv) = store.get(key.as_bytes()).await? else {
            let mut object = expected.clone();
            generic::prepare_create(rt, &mut object, jiff::Timestamp::now());
            strategy::for_resource(rt).prepare_for_create(&mut object);
            if put_if(Guard::Absent, &object).await?.is_some() {
                return Ok(Outcome::Created);
            }
            continue;
        };
        let old = storage::decode(&kv)?;
        let mut object = match change(&old) {
            Change::None => return Ok(Outcome::Unchanged),
            Change::Kept => return Ok(Outcome::Protected),
            Change::Update(object) => object,
            Change::Recreate => {
                // what cannot change in place: delete, then create on the next attempt
                Txn::new()
                    .delete(&key, Guard::At(kv.mod_revision))
                    .commit(&**store)
                    .await?;
                continue;
            }
        };
        generic::prepare_update(rt, &mut object, &old, "");
        strategy::for_resource(rt).prepare_for_update(&mut object, &old);
        if generic::unchanged(&object, &old) {
            return Ok(Outcome::Unchanged);
        }
        if put_if(Guard::At(kv.mod_revision), &object).await?.is_some() {
            return Ok(Outcome::Updated);
        }
    }
    Err(crate::error::ApiError::internal(format!(
        "bootstrap object {key} kept changing while it was maintained"
    )))
}

/// Makes sure the bootstrap objects exist; `advertise` is where clients reach this API server.
pub async fn run(store: &Arc<dyn Store>, advertise: SocketAddr) -> Result<()> {
    for ns in SYSTEM_NAMESPACES {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        ensure(store, "", "namespaces", obj, false).await?;
    }
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"type": "ClusterIP", "clusterIP": KUBERNETES_SERVICE_IP,
                 "clusterIPs": [KUBERNETES_SERVICE_IP], "ipFamilies": ["IPv4"],
                 "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                 "internalTrafficPolicy": "Cluster",
                 "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                            "targetPort": advertise.port()}]},
    });
    ensure(store, "", "services", service, false).await?;
    // The reservation of the kubernetes Service's address (so it is never handed out again).
    let reservation = format!("{}{KUBERNETES_SERVICE_IP}", crate::allocator::SERVICE_IPS);
    Txn::new()
        .reserve(&reservation, "/registry/core/services/default/kubernetes")
        .commit(&**store)
        .await?;
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": advertise.ip().to_string()}],
                     "ports": [{"name": "https", "port": advertise.port(), "protocol": "TCP"}]}],
    });
    ensure(store, "", "endpoints", endpoints, true).await?;
    for (name, value) in strategy::priorityclass::SYSTEM_CLASSES {
        let description = if name == "system-node-critical" {
            "Used for system critical pods that must not be moved from their current node."
        } else {
            "Used for system critical pods that must run in the cluster, but can be moved to \
             another node if necessary."
        };
        let class = json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description,
        });
        ensure(store, "scheduling.k8s.io", "priorityclasses", class, false).await?;
    }
    rbac::run(store).await?;
    apf::run(store).await?;
    Ok(())
}
