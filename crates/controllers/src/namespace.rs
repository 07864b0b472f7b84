//! `namespace`: empties a namespace that is being deleted and then lets it go (upstream's
//! NamespaceController). Every namespaced resource the server serves (found by discovery) is
//! deleted in it, with `deletecollection` where served and one by one otherwise; meanwhile the
//! namespace's status carries upstream's deletion conditions. Once nothing is left the
//! `kubernetes` finalizer is removed through `namespaces/{name}/finalize`, and the API server
//! deletes the namespace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use skiff_runtime::backoff::ItemBackoff;
use skiff_runtime::controller::{Action, Controller};

use crate::resources::{self, Served};
use crate::{Context, triggers};

/// The spec finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";

/// What one namespaced object left behind looks like to the remaining-content check.
#[derive(Debug, Clone, Default)]
pub struct Remaining {
    /// Its `metadata.finalizers`.
    pub finalizers: Vec<String>,
}

/// The reads and writes this controller makes.
#[async_trait]
pub trait NamespaceContent: Send + Sync {
    /// Every resource the server serves.
    async fn discover(&self) -> kube::Result<Vec<Served>>;
    /// `DELETE` the collection of `resource` in `namespace`.
    async fn delete_collection(&self, namespace: &str, resource: &Served) -> kube::Result<()>;
    /// Lists `resource` in `namespace` and deletes each object.
    async fn delete_each(&self, namespace: &str, resource: &Served) -> kube::Result<()>;
    /// What is left of `resource` in `namespace`.
    async fn remaining(&self, namespace: &str, resource: &Served) -> kube::Result<Vec<Remaining>>;
    /// Replaces the namespace's status conditions.
    async fn set_conditions(
        &self,
        namespace: &str,
        conditions: &[NamespaceCondition],
    ) -> kube::Result<()>;
    /// Writes `spec.finalizers` through `namespaces/{name}/finalize`.
    async fn finalize(&self, namespace: &Namespace, finalizers: Vec<String>) -> kube::Result<()>;
}

/// What a reconcile found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The namespace is not being deleted, or this controller's finalizer is already gone:
    /// nothing to do until it changes.
    Untouched,
    /// Content remains (waiting for graceful deletion or other finalizers): look again later.
    ContentRemaining,
    /// Everything is gone and the `kubernetes` finalizer was removed.
    Finalized,
}

/// Why a namespace could not be emptied this time (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("discovery failed for namespace {namespace}: {source}")]
    Discovery {
        namespace: String,
        source: kube::Error,
    },
    #[error("failed to delete content of namespace {namespace}: {details}")]
    Content { namespace: String, details: String },
    #[error("updating namespace {namespace}: {source}")]
    Write {
        namespace: String,
        source: kube::Error,
    },
}

/// One condition as upstream's namespace deleter sets it.
fn condition(kind: &str, status: bool, reason: &str, message: String) -> NamespaceCondition {
    NamespaceCondition {
        type_: kind.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: None,
    }
}

/// The conditions for one pass: `discovery` the discovery error, `failures` the resources whose
/// deletion or listing failed, `counts` the objects left per resource, `finalizers` the objects
/// left per finalizer.
pub fn deletion_conditions(
    discovery: Option<&str>,
    failures: &BTreeMap<String, String>,
    counts: &BTreeMap<String, usize>,
    finalizers: &BTreeMap<String, usize>,
) -> Vec<NamespaceCondition> {
    let mut out = vec![match discovery {
        Some(e) => condition(
            "NamespaceDeletionDiscoveryFailure",
            true,
            "DiscoveryFailed",
            format!("Discovery failed for some groups, 1 failing: {e}"),
        ),
        None => condition(
            "NamespaceDeletionDiscoveryFailure",
            false,
            "ResourcesDiscovered",
            "All resources successfully discovered".into(),
        ),
    }];
    out.push(condition(
        "NamespaceDeletionGroupVersionParsingFailure",
        false,
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed".into(),
    ));
    out.push(if failures.is_empty() {
        condition(
            "NamespaceDeletionContentFailure",
            false,
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".into(),
        )
    } else {
        let list: Vec<String> = failures.iter().map(|(r, e)| format!("{r}: {e}")).collect();
        condition(
            "NamespaceDeletionContentFailure",
            true,
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                failures.len(),
                list.join(", ")
            ),
        )
    });
    let left: Vec<String> = counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} has {n} resource instances"))
        .collect();
    out.push(if left.is_empty() {
        condition(
            "NamespaceContentRemaining",
            false,
            "ContentRemoved",
            "All content successfully removed".into(),
        )
    } else {
        condition(
            "NamespaceContentRemaining",
            true,
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", left.join(", ")),
        )
    });
    let held: Vec<String> = finalizers
        .iter()
        .map(|(f, n)| format!("{f} in {n} resource instances"))
        .collect();
    out.push(if held.is_empty() {
        condition(
            "NamespaceFinalizersRemaining",
            false,
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".into(),
        )
    } else {
        condition(
            "NamespaceFinalizersRemaining",
            true,
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                held.join(", ")
            ),
        )
    });
    out
}

/// `fresh` merged over the namespace's current conditions: a condition whose status did not
/// change keeps its transition time, the others get `now`. `None` when nothing changed.
fn merge_conditions(
    current: &[NamespaceCondition],
    fresh: Vec<NamespaceCondition>,
    now: Timestamp,
) -> Option<Vec<NamespaceCondition>> {
    let mut changed = false;
    let mut out: Vec<NamespaceCondition> = current
        .iter()
        .filter(|c| !fresh.iter().any(|f| f.type_ == c.type_))
        .cloned()
        .collect();
    for mut f in fresh {
        match current.iter().find(|c| c.type_ == f.type_) {
            Some(c) if c.status == f.status => {
                changed |= c.reason != f.reason || c.message != f.message;
                f.last_transition_time = c.last_transition_time.clone();
            }
            _ => {
                changed = true;
                f.last_transition_time = Some(Time(now));
            }
        }
        out.push(f);
    }
    changed.then_some(out)
}

/// One pass over a namespace: deletes what is in it if it is being deleted, records the
/// conditions, and removes the `kubernetes` finalizer once it is empty.
pub async fn reconcile(
    ns: &Namespace,
    api: &dyn NamespaceContent,
    now: Timestamp,
) -> Result<Outcome, Error> {
    let name = ns.name_any();
    let spec_finalizers: Vec<String> = ns
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default();
    if ns.metadata.deletion_timestamp.is_none() || !spec_finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Outcome::Untouched);
    }
    let current = ns
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let write = |conditions: Vec<NamespaceCondition>| async {
        match merge_conditions(&current, conditions, now) {
            Some(c) => api
                .set_conditions(&name, &c)
                .await
                .map_err(|source| Error::Write {
                    namespace: name.clone(),
                    source,
                }),
            None => Ok(()),
        }
    };
    let served = match api.discover().await {
        Ok(s) => s,
        Err(source) => {
            let msg = source.to_string();
            write(deletion_conditions(
                Some(&msg),
                &BTreeMap::new(),
                &BTreeMap::new(),
                &BTreeMap::new(),
            ))
            .await?;
            return Err(Error::Discovery {
                namespace: name,
                source,
            });
        }
    };
    let deletable: Vec<&Served> = served
        .iter()
        .filter(|s| s.namespaced && s.supports("list"))
        .filter(|s| s.supports("delete") || s.supports("deletecollection"))
        .collect();
    let mut failures = BTreeMap::new();
    let mut counts = BTreeMap::new();
    let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
    for resource in deletable {
        let deleted = if resource.supports("deletecollection") {
            api.delete_collection(&name, resource).await
        } else {
            api.delete_each(&name, resource).await
        };
        if let Err(e) = deleted {
            failures.insert(resource.qualified(), e.to_string());
            continue;
        }
        match api.remaining(&name, resource).await {
            Ok(left) => {
                if !left.is_empty() {
                    counts.insert(resource.qualified(), left.len());
                }
                for f in left.iter().flat_map(|o| o.finalizers.iter()) {
                    *finalizers.entry(f.clone()).or_default() += 1;
                }
            }
            Err(e) => {
                failures.insert(resource.qualified(), e.to_string());
            }
        }
    }
    write(deletion_conditions(None, &failures, &counts, &finalizers)).await?;
    if !failures.is_empty() {
        let details: Vec<String> = failures.iter().map(|(r, e)| format!("{r}: {e}")).collect();
        return Err(Error::Content {
            namespace: name,
            details: details.join(", "),
        });
    }
    if !counts.is_empty() {
        return Ok(Outcome::ContentRemaining);
    }
    let rest: Vec<String> = spec_finalizers
        .into_iter()
        .filter(|f| f != FINALIZER)
        .collect();
    api.finalize(ns, rest)
        .await
        .map_err(|source| Error::Write {
            namespace: name,
            source,
        })?;
    Ok(Outcome::Finalized)
}

struct KubeContent(kube::Client);

impl KubeContent {
    fn api(&self, namespace: &str, resource: &Served) -> Api<DynamicObject> {
        Api::namespaced_with(self.0.clone(), namespace, &resource.resource)
    }
}

/// A 404 (gone already) is success for a delete.
fn ignore_not_found<T>(r: kube::Result<T>) -> kube::Result<()> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

#[async_trait]
impl NamespaceContent for KubeContent {
    async fn discover(&self) -> kube::Result<Vec<Served>> {
        resources::discover(&self.0, false).await
    }

    async fn delete_collection(&self, namespace: &str, resource: &Served) -> kube::Result<()> {
        ignore_not_found(
            self.api(namespace, resource)
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await,
        )
    }

    async fn delete_each(&self, namespace: &str, resource: &Served) -> kube::Result<()> {
        let api = self.api(namespace, resource);
        for obj in api.list_metadata(&ListParams::default()).await? {
            if obj.metadata.deletion_timestamp.is_none() {
                ignore_not_found(api.delete(&obj.name_any(), &DeleteParams::default()).await)?;
            }
        }
        Ok(())
    }

    async fn remaining(&self, namespace: &str, resource: &Served) -> kube::Result<Vec<Remaining>> {
        let list = self
            .api(namespace, resource)
            .list_metadata(&ListParams::default())
            .await?;
        Ok(list
            .items
            .into_iter()
            .map(|o| Remaining {
                finalizers: o.metadata.finalizers.unwrap_or_default(),
            })
            .collect())
    }

    async fn set_conditions(
        &self,
        namespace: &str,
        conditions: &[NamespaceCondition],
    ) -> kube::Result<()> {
        let api: Api<Namespace> = Api::all(self.0.clone());
        let Some(current) = api.get_opt(namespace).await? else {
            return Ok(());
        };
        let set = |ns: &mut Namespace| {
            ns.status.get_or_insert_with(Default::default).conditions = Some(conditions.to_vec());
        };
        ignore_not_found(crate::status::update(&api, &current, set).await)
    }

    async fn finalize(&self, namespace: &Namespace, finalizers: Vec<String>) -> kube::Result<()> {
        let api: Api<Namespace> = Api::all(self.0.clone());
        let mut ns = namespace.clone();
        ns.spec.get_or_insert_with(Default::default).finalizers = Some(finalizers);
        ns.metadata.managed_fields = None;
        // The conditions were just written: only spec.finalizers changes, so no precondition.
        ns.metadata.resource_version = None;
        ignore_not_found(
            api.replace_subresource("finalize", &ns.name_any(), &PostParams::default(), &ns)
                .await,
        )
    }
}

/// Runs the controller over every namespace (upstream's `--concurrent-namespace-syncs`, 10).
/// A namespace whose content remains is looked at again after 1 s, doubling to 30 s while it
/// stays.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let api = Arc::new(KubeContent(ctx.client.clone()));
    let waiting = Arc::new(ItemBackoff::new(
        Duration::from_secs(1),
        Duration::from_secs(30),
    ));
    let namespaces = ctx.informers.get::<Namespace>();
    let controller = Controller::new("namespace").workers(10);
    triggers::run_each(controller, &namespaces, move |ns| {
        let (api, waiting) = (api.clone(), waiting.clone());
        async move {
            let key = ObjectRef::from_obj(ns.as_ref());
            Ok::<_, Error>(
                match reconcile(&ns, api.as_ref(), Timestamp::now()).await? {
                    Outcome::ContentRemaining => Action::RequeueAfter(waiting.failed(key)),
                    Outcome::Untouched | Outcome::Finalized => {
                        waiting.forget(&key);
                        Action::AwaitChange
                    }
                },
            )
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
#[path = "namespace_tests.rs"]
mod tests;
