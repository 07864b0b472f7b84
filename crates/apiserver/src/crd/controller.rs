//! The controllers upstream's apiextensions-apiserver runs for CustomResourceDefinitions, as one
//! loop inside the API server: it reads CRDs from the watch cache and, for each,
//!
//! - accepts its names unless another CRD of the group holds one of them (`NamesAccepted`,
//!   with upstream's `…Conflict` reasons), as upstream's naming controller;
//! - serves its versions from the accepted names (with their conversion, `None` or `Webhook`),
//!   then marks it `Established` (so a client that waits for the condition finds the
//!   resource), as the establishing controller and the CRD handler do;
//! - on deletion (`customresourcecleanup` finalizer): marks it `Terminating`, deletes its
//!   custom resources (their own finalizers respected), stops serving it once none is left,
//!   then removes the finalizer, as the finalizer controller.
//!
//! Writes go through the same handlers as clients' (`Ctx::internal`), as upstream's loopback
//! client does, so admission, validation and managedFields apply.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::{CRUD, ResourceType, Subresource};

use super::definition::{storage_version, versions};
use super::resource::CustomResourceStrategy;
use super::{FINALIZER, GROUP, PLURAL};
use crate::cache::Cached;
use crate::error::Result;
use crate::handlers::Ctx;
use crate::registry::{self, DeleteOptions, Fields};
use crate::request::RequestInfo;
use crate::server::ApiServer;
use crate::strategy::{Strategy, generic};

/// How often a CRD whose custom resources are being deleted is looked at again (their
/// finalizers may take a while; upstream's finalizer controller polls too).
const CLEANUP_POLL: Duration = Duration::from_millis(500);

/// Runs the loop until the server is gone.
pub fn spawn(server: Weak<ApiServer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut controller = Controller::default();
        loop {
            let Some(strong) = server.upgrade() else {
                return;
            };
            let Some(mut changes) = strong.cache.subscribe(&[definitions()]) else {
                return;
            };
            let pending = match controller
                .sync(&strong, &changes.snapshots[0].objects)
                .await
            {
                Ok(pending) => pending,
                Err(e) => {
                    tracing::warn!(error = %e, "custom resource definitions");
                    true
                }
            };
            drop(strong);
            // The next CRD change, or a poll while custom resources are being cleaned up.
            let changed = if pending {
                tokio::time::timeout(CLEANUP_POLL, changes.changed())
                    .await
                    .unwrap_or(true)
            } else {
                changes.changed().await
            };
            if !changed {
                return;
            }
        }
    })
}

fn definitions() -> &'static ResourceType {
    skiff_apimachinery::catalog::lookup(GROUP, "v1", PLURAL).expect("CRDs are built in")
}

/// The names a CRD asks for or was given (`spec.names`, `status.acceptedNames`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Names {
    plural: String,
    singular: String,
    kind: String,
    list_kind: String,
    short_names: Vec<String>,
    categories: Vec<String>,
}

impl Names {
    fn read(v: Option<&Value>) -> Names {
        v.and_then(|v| Names::deserialize(v).ok())
            .unwrap_or_default()
    }

    fn to_json(&self) -> Value {
        let mut out = json!({"plural": self.plural, "kind": self.kind});
        if !self.singular.is_empty() {
            out["singular"] = json!(self.singular);
        }
        if !self.list_kind.is_empty() {
            out["listKind"] = json!(self.list_kind);
        }
        if !self.short_names.is_empty() {
            out["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            out["categories"] = json!(self.categories);
        }
        out
    }

    /// Why `self` cannot be accepted next to `other`'s accepted names (upstream's naming
    /// controller's reasons and messages), if it cannot.
    fn conflict(&self, other: &Names) -> Option<(&'static str, String)> {
        let used = |name: &str| format!("{name:?} is already in use");
        if !self.plural.is_empty() && self.plural == other.plural {
            return Some(("PluralConflict", used(&self.plural)));
        }
        if !self.singular.is_empty() && self.singular == other.singular {
            return Some(("SingularConflict", used(&self.singular)));
        }
        if let Some(s) = self
            .short_names
            .iter()
            .find(|s| other.short_names.contains(s))
        {
            return Some(("ShortNamesConflict", used(s)));
        }
        if !self.kind.is_empty() && self.kind == other.kind {
            return Some(("KindConflict", used(&self.kind)));
        }
        if !self.list_kind.is_empty() && self.list_kind == other.list_kind {
            return Some(("ListKindConflict", used(&self.list_kind)));
        }
        None
    }
}

/// What each pass reads of every CRD: enough to settle names and to tell the CRDs with
/// nothing to do (decoded without their schemas).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Summary {
    metadata: SummaryMeta,
    spec: SummarySpec,
    status: SummaryStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SummaryMeta {
    name: String,
    creation_timestamp: String,
    deletion_timestamp: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SummarySpec {
    group: String,
    names: Names,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SummaryStatus {
    accepted_names: Names,
    conditions: Vec<SummaryCondition>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SummaryCondition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
}

impl Summary {
    /// Established under the names it asks for, and not being deleted: once such a CRD's
    /// revision was handled, a pass has nothing to do for it.
    fn settled(&self) -> bool {
        self.metadata.deletion_timestamp.is_none()
            && self.status.accepted_names == self.spec.names
            && self
                .status
                .conditions
                .iter()
                .any(|c| c.kind == "Established" && c.status == "True")
    }
}

/// What is served for one CRD, and from which definition.
struct Served {
    group: String,
    plural: String,
    /// The spec and accepted names it was built from, serialized: a change reinstalls.
    source: Vec<u8>,
    /// Its versions as the OpenAPI documents describe them.
    documented: Vec<skiff_openapi::Custom>,
    /// Its versions' strategies (told when the CRD starts terminating).
    strategies: Vec<Arc<CustomResourceStrategy>>,
}

#[derive(Default)]
struct Controller {
    /// By CRD name.
    served: HashMap<String, Served>,
    /// The revision of each CRD last handled without error.
    handled: HashMap<String, i64>,
    /// Whether what is served changed since the OpenAPI documents were last published.
    unpublished: bool,
}

fn name_of(crd: &Value) -> &str {
    crd.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

impl Controller {
    /// Brings every CRD and what is served for it up to date; whether some CRD waits for its
    /// custom resources to go. Only the CRDs changed since they were last handled, or not
    /// settled, are decoded whole.
    async fn sync(&mut self, server: &Arc<ApiServer>, cached: &[Arc<Cached>]) -> Result<bool> {
        let mut crds: Vec<(Summary, &Arc<Cached>)> = cached
            .iter()
            .filter_map(|c| Some((c.decode::<Summary>().ok()?, c)))
            .collect();
        // The first CRD to claim a name keeps it.
        crds.sort_by(|(a, _), (b, _)| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        let mut accepted: Vec<(String, String, Names)> = crds
            .iter()
            .map(|(s, _)| {
                let names = s.status.accepted_names.clone();
                (s.metadata.name.clone(), s.spec.group.clone(), names)
            })
            .collect();
        let mut pending = false;
        for (summary, cached) in &crds {
            let name = summary.metadata.name.clone();
            if summary.settled() && self.handled.get(&name) == Some(&cached.revision) {
                continue;
            }
            let crd = &cached.object()?;
            if crd.pointer("/metadata/deletionTimestamp").is_some() {
                pending |= self.finalize(server, crd).await?;
                continue;
            }
            let group = text(crd, "/spec/group");
            let wanted = Names::read(crd.pointer("/spec/names"));
            let conflict = accepted
                .iter()
                .filter(|(other, g, _)| *other != name && g == group)
                .find_map(|(_, _, names)| wanted.conflict(names));
            let mut status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
            let names = match &conflict {
                None => {
                    generic::set_condition(
                        &mut status,
                        server.now(),
                        "NamesAccepted",
                        "True",
                        "NoConflicts",
                        "no conflicts found",
                    );
                    wanted
                }
                Some((reason, message)) => {
                    generic::set_condition(
                        &mut status,
                        server.now(),
                        "NamesAccepted",
                        "False",
                        reason,
                        message,
                    );
                    Names::read(crd.pointer("/status/acceptedNames"))
                }
            };
            if let Some(entry) = accepted.iter_mut().find(|(n, _, _)| *n == name) {
                entry.2 = names.clone();
            }
            status["acceptedNames"] = names.to_json();
            if !names.plural.is_empty() {
                self.serve(server, crd, &names).await?;
                // Documented before it is established, so `kubectl explain` finds it then.
                self.publish(server);
                generic::set_condition(
                    &mut status,
                    server.now(),
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                );
            }
            if crd.get("status") != Some(&status) {
                write_status(server, &name, status).await?;
            }
            self.handled.insert(name, cached.revision);
        }
        // CRDs gone without their finalizer (removed from the store directly).
        let present: Vec<&str> = crds.iter().map(|(s, _)| s.metadata.name.as_str()).collect();
        self.handled.retain(|n, _| present.contains(&n.as_str()));
        let gone: Vec<String> = self
            .served
            .keys()
            .filter(|n| !present.contains(&n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.unserve(server, &name);
        }
        self.publish(server);
        Ok(pending)
    }

    /// Serves the CRD's versions under its accepted `names` (again, if its definition changed).
    async fn serve(&mut self, server: &ApiServer, crd: &Value, names: &Names) -> Result<()> {
        let name = name_of(crd).to_string();
        let source = serde_json::to_vec(&(&crd["spec"], names.to_json())).unwrap_or_default();
        if self.served.get(&name).is_some_and(|s| s.source == source) {
            return Ok(());
        }
        let group = text(crd, "/spec/group").to_string();
        let types = served_types(crd, names);
        let documented = types
            .iter()
            .map(|(rt, _)| skiff_openapi::Custom {
                resource: rt.clone(),
                schema: Arc::new(
                    versions(crd)
                        .find(|v| v["name"] == rt.version.as_str())
                        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
                        .cloned()
                        .unwrap_or_default(),
                ),
            })
            .collect();
        // Versions no longer served, and the old plural if the names changed, go first.
        if let Some(old) = self.served.get(&name) {
            let keep: Vec<&str> = types.iter().map(|(rt, _)| rt.version.as_str()).collect();
            let same = old.plural == names.plural;
            server.remove(&old.group, &old.plural, |rt| {
                same && keep.contains(&rt.version.as_str())
            });
        }
        // How its versions convert, before anything is served through them.
        server.conversion.set(
            &group,
            &names.plural,
            crate::conversion::Custom::from_crd(crd),
        );
        let strategies: Vec<_> = types.iter().map(|(_, s)| s.clone()).collect();
        let storage = storage_version(crd).unwrap_or("");
        let stored: Arc<dyn Strategy> = match types.iter().find(|(rt, _)| rt.version == storage) {
            Some((_, s)) => s.clone(),
            None => {
                let version = versions(crd).find(|v| v["name"] == storage);
                Arc::new(CustomResourceStrategy::new(version.unwrap_or(&Value::Null)))
            }
        };
        let installed = types
            .into_iter()
            .map(|(rt, s)| (rt, s as Arc<dyn Strategy>))
            .collect();
        server.install(installed, stored).await?;
        self.served.insert(
            name,
            Served {
                group,
                plural: names.plural.clone(),
                source,
                documented,
                strategies,
            },
        );
        self.unpublished = true;
        Ok(())
    }

    fn unserve(&mut self, server: &ApiServer, name: &str) {
        if let Some(old) = self.served.remove(name) {
            server.remove(&old.group, &old.plural, |_| false);
            self.unpublished = true;
        }
    }

    /// Publishes the OpenAPI documents of what is served, if that changed.
    fn publish(&mut self, server: &ApiServer) {
        if std::mem::take(&mut self.unpublished) {
            let mut custom: Vec<skiff_openapi::Custom> = self
                .served
                .values()
                .flat_map(|s| s.documented.iter().cloned())
                .collect();
            custom.sort_by(|a, b| {
                (&a.resource.group, &a.resource.plural, &a.resource.version).cmp(&(
                    &b.resource.group,
                    &b.resource.plural,
                    &b.resource.version,
                ))
            });
            server.openapi.publish(custom);
        }
    }

    /// One step of deleting a CRD: `Terminating`, its custom resources deleted, then (none
    /// left) no longer served and the finalizer removed. Whether it must be looked at again.
    async fn finalize(&mut self, server: &Arc<ApiServer>, crd: &Value) -> Result<bool> {
        let has_finalizer = crd
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
        if !has_finalizer {
            return Ok(false);
        }
        let name = name_of(crd).to_string();
        for strategy in self
            .served
            .get(&name)
            .into_iter()
            .flat_map(|s| &s.strategies)
        {
            strategy.terminate();
        }
        let mut status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
        generic::set_condition(
            &mut status,
            server.now(),
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        );
        if crd.get("status") != Some(&status) {
            write_status(server, &name, status).await?;
        }
        let group = text(crd, "/spec/group");
        let plural = text(crd, "/status/acceptedNames/plural");
        let served = server
            .registry
            .snapshot()
            .iter()
            .find(|rt| !rt.builtin && rt.group == group && rt.plural == plural)
            .cloned();
        if let Some(rt) = served
            && let Some(cache) = server.cache.get(&rt)
        {
            let left = cache.list("").objects;
            if !left.is_empty() {
                for c in left {
                    let info = RequestInfo::resource_request(
                        "delete",
                        &rt.group,
                        &rt.plural,
                        &c.namespace,
                        &c.name,
                    );
                    let ctx = Ctx::internal(server.clone(), rt.clone(), info);
                    match registry::delete(&ctx, &c.name, &DeleteOptions::default()).await {
                        Ok(_) => {}
                        Err(e) if e.code == 404 => {}
                        Err(e) => return Err(e),
                    }
                }
                return Ok(true);
            }
        }
        self.unserve(server, &name);
        let ctx = definition_ctx(server, "update", &name, "");
        registry::update(&ctx, None, Fields::Record, |current| {
            let mut next = current.clone();
            if let Some(f) = next["metadata"]["finalizers"].as_array_mut() {
                f.retain(|f| f != FINALIZER);
            }
            Ok(next)
        })
        .await?;
        Ok(false)
    }
}

/// The served versions of a CRD as resource types with their strategies, highest priority
/// first (the group's preferred version), as upstream orders a group's versions.
fn served_types(crd: &Value, names: &Names) -> Vec<(ResourceType, Arc<CustomResourceStrategy>)> {
    let group = text(crd, "/spec/group").to_string();
    let storage = storage_version(crd).unwrap_or("").to_string();
    let namespaced = text(crd, "/spec/scope") == "Namespaced";
    let mut served: Vec<&Value> = versions(crd)
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
        .collect();
    served.sort_by(|a, b| version_order(text(a, "/name"), text(b, "/name")));
    served
        .into_iter()
        .map(|v| {
            let version = text(v, "/name").to_string();
            let mut subresources = Vec::new();
            let verbs = || vec!["get".to_string(), "patch".into(), "update".into()];
            if v.pointer("/subresources/status").is_some() {
                subresources.push(Subresource {
                    name: "status".into(),
                    group: group.clone(),
                    version: version.clone(),
                    kind: names.kind.clone(),
                    verbs: verbs(),
                });
            }
            if v.pointer("/subresources/scale").is_some() {
                subresources.push(Subresource {
                    name: "scale".into(),
                    group: "autoscaling".into(),
                    version: "v1".into(),
                    kind: "Scale".into(),
                    verbs: verbs(),
                });
            }
            let rt = ResourceType {
                group: group.clone(),
                version: version.clone(),
                kind: names.kind.clone(),
                plural: names.plural.clone(),
                singular: names.singular.clone(),
                namespaced,
                short_names: names.short_names.clone(),
                categories: names.categories.clone(),
                verbs: CRUD.iter().map(|v| v.to_string()).collect(),
                subresources,
                builtin: false,
                storage_version: (version != storage).then(|| storage.clone()),
            };
            (rt, Arc::new(CustomResourceStrategy::new(v)))
        })
        .collect()
}

/// Upstream's kube-aware version order (`version.CompareKubeAwareVersionStrings`): GA before
/// beta before alpha, higher numbers first, then versions that do not look like Kubernetes
/// versions, alphabetically.
pub fn version_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (stage, minor) = if tail.is_empty() {
            (2, 0)
        } else if let Some(n) = tail.strip_prefix("beta") {
            (1, n.parse().ok()?)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n.parse().ok()?)
        } else {
            return None;
        };
        Some((major, stage, minor))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

fn definition_ctx(server: &Arc<ApiServer>, verb: &str, name: &str, subresource: &str) -> Ctx {
    Ctx::internal_on(server, (GROUP, PLURAL), verb, name, subresource)
}

/// Writes a CRD's status through its `status` subresource.
async fn write_status(server: &Arc<ApiServer>, name: &str, status: Value) -> Result<()> {
    let ctx = definition_ctx(server, "update", name, "status");
    registry::update(&ctx, None, Fields::Record, |current| {
        let mut next = current.clone();
        next["status"] = status.clone();
        Ok(next)
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_upstream_orders_them() {
        let mut v = vec![
            "v1alpha1", "foo", "v2", "v1beta2", "v1", "v1beta1", "bar", "v10",
        ];
        v.sort_by(|a, b| version_order(a, b));
        assert_eq!(
            v,
            [
                "v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"
            ]
        );
    }

    #[test]
    fn a_name_another_crd_accepted_is_a_conflict_with_upstreams_reason() {
        let taken = Names::read(Some(&json!({"plural": "widgets", "kind": "Widget",
                                             "shortNames": ["wd"]})));
        let wanted = Names::read(Some(&json!({"plural": "gadgets", "kind": "Widget"})));
        assert_eq!(
            wanted.conflict(&taken),
            Some(("KindConflict", "\"Widget\" is already in use".to_string()))
        );
        let short = Names::read(Some(&json!({"plural": "gadgets", "kind": "Gadget",
                                            "shortNames": ["wd"]})));
        assert_eq!(short.conflict(&taken).unwrap().0, "ShortNamesConflict");
        let free = Names::read(Some(&json!({"plural": "gadgets", "kind": "Gadget"})));
        assert_eq!(free.conflict(&taken), None);
    }
}
