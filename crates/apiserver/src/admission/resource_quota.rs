//! Upstream's `ResourceQuota` admission plugin: a write in a namespace is charged against every
//! ResourceQuota there that limits what the object uses (and whose scopes match it). Each quota's
//! `status.hard` and `status.used` (the `resourcequota` controller's) are read from the store;
//! if the object would take any limited resource past `hard` the create is refused (403,
//! `exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2`), otherwise the quotas'
//! `status.used` is raised in one store transaction guarded by each quota's revision, retried
//! from a fresh read when another write got there first, before the object is stored: so that
//! concurrent creates can never together exceed a quota. A pod must also state in every
//! container the `cpu`/`memory` requests or limits a matching quota limits.
//!
//! Updates are charged where upstream's evaluators handle them, Services and
//! PersistentVolumeClaims (a type changed to NodePort or LoadBalancer, a claim's storage
//! request raised): by what the new object uses beyond the old one, never less than zero (a
//! shrink is given back by the controller's recount, as upstream). Other kinds are charged on
//! create only. A write that fails after it was charged leaves `used` too high until the
//! controller recounts.

use std::collections::BTreeSet;

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::quota::{self, ResourceList};

use super::{Attributes, Operation, Plugin};
use crate::error::{ApiError, Result};

/// How many times a charge is retried after losing a race on a quota's revision.
pub const MAX_CONFLICT_RETRIES: usize = 64;

/// Where quotas are read and charged.
#[async_trait]
pub trait QuotaStore: Send + Sync {
    /// The ResourceQuotas of `namespace` as stored now, `metadata.resourceVersion` set.
    async fn quotas(&self, namespace: &str) -> Result<Vec<Value>>;
    /// Stores these quotas (their `status.used` changed) in one transaction if each is still
    /// at its `resourceVersion`; `false` (nothing written) if any has moved on.
    async fn update(&self, namespace: &str, quotas: &[Value]) -> Result<bool>;
}

pub struct ResourceQuota<S> {
    pub store: S,
}

fn name(q: &Value) -> &str {
    q.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn forbidden(attrs: &Attributes<'_>, why: String) -> ApiError {
    let resource = if attrs.resource.group.is_empty() {
        attrs.resource.plural.to_string()
    } else {
        format!("{}.{}", attrs.resource.plural, attrs.resource.group)
    };
    ApiError::forbidden(format!("{resource} \"{}\" is forbidden: {why}", attrs.name))
}

/// Whether an update of this kind, to this subresource (`""` for the object), is charged:
/// upstream's evaluators whose `Handles` accepts it (services and persistentvolumeclaims, and
/// a pod's `resize`).
pub fn charges_updates(group: &str, plural: &str, subresource: &str) -> bool {
    group.is_empty()
        && match subresource {
            "" => matches!(plural, "services" | "persistentvolumeclaims"),
            "resize" => plural == "pods",
            _ => false,
        }
}

/// What charging `obj` does to `quotas`: the quotas whose `status.used` it raises (changed),
/// or the refusal. An update (`attrs.old` set) is charged what `obj` uses beyond the old object.
pub fn charge(
    attrs: &Attributes<'_>,
    obj: &Value,
    quotas: &[Value],
    now: jiff::Timestamp,
) -> Result<Vec<Value>> {
    let (group, plural) = (
        attrs.resource.group.as_str(),
        attrs.resource.plural.as_str(),
    );
    let mut usage = quota::usage(group, plural, obj, now);
    if attrs.operation == Operation::Update {
        let old = attrs.old.ok_or_else(|| {
            forbidden(
                attrs,
                "unable to get previous usage since prior version of object was not found".into(),
            )
        })?;
        usage = quota::subtract_non_negative(&usage, &quota::usage(group, plural, old, now));
    }
    // first every matching quota must be usable: constraints met, usage known
    let mut matching: Vec<(&Value, ResourceList, BTreeSet<String>)> = Vec::new();
    for q in quotas {
        let hard = quota::parse_list(q.pointer("/status/hard"));
        if !quota::matches(q, &hard, group, plural, obj) {
            continue;
        }
        let restricted = quota::matching_resources(&hard, group, plural);
        if group.is_empty() && plural == "pods" {
            quota::pod_constraints(obj, &restricted)
                .map_err(|e| forbidden(attrs, format!("failed quota: {}: {e}", name(q))))?;
        }
        let used = q.pointer("/status/used").and_then(Value::as_object);
        let unknown: Vec<&str> = restricted
            .iter()
            .filter(|r| !used.is_some_and(|u| u.contains_key(*r)))
            .map(String::as_str)
            .collect();
        if !unknown.is_empty() {
            return Err(forbidden(
                attrs,
                format!(
                    "status unknown for quota: {}, resources: {}",
                    name(q),
                    restricted.iter().cloned().collect::<Vec<_>>().join(",")
                ),
            ));
        }
        matching.push((q, hard, restricted));
    }
    let mut changed = Vec::new();
    for (q, hard, restricted) in matching {
        let requested = quota::mask(&usage, &restricted);
        if requested.values().all(|a| a.nanos == 0) {
            continue;
        }
        let used = quota::parse_list(q.pointer("/status/used"));
        let new_used = quota::add(&used, &requested);
        let names: BTreeSet<String> = requested.keys().cloned().collect();
        let exceeded = quota::exceeded(&quota::mask(&new_used, &names), &hard);
        if !exceeded.is_empty() {
            return Err(forbidden(
                attrs,
                format!(
                    "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                    name(q),
                    quota::pretty(&quota::mask(&requested, &exceeded)),
                    quota::pretty(&quota::mask(&used, &exceeded)),
                    quota::pretty(&quota::mask(&hard, &exceeded)),
                ),
            ));
        }
        let mut next = q.clone();
        next["status"]["used"] = quota::to_json(&new_used);
        changed.push(next);
    }
    Ok(changed)
}

#[async_trait]
impl<S: QuotaStore> Plugin for ResourceQuota<S> {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let Some(obj) = object else { return Ok(()) };
        let charged = match attrs.operation {
            Operation::Create => attrs.subresource.is_empty(),
            Operation::Update => charges_updates(
                attrs.resource.group.as_str(),
                attrs.resource.plural.as_str(),
                attrs.subresource,
            ),
            Operation::Delete => false,
        };
        if !charged || !attrs.resource.namespaced || attrs.namespace.is_empty() {
            return Ok(());
        }
        for _ in 0..MAX_CONFLICT_RETRIES {
            let quotas = self.store.quotas(attrs.namespace).await?;
            if quotas.is_empty() {
                return Ok(());
            }
            let changed = charge(attrs, obj, &quotas, jiff::Timestamp::now())?;
            if changed.is_empty() || attrs.dry_run {
                return Ok(());
            }
            if self.store.update(attrs.namespace, &changed).await? {
                return Ok(());
            }
            // another write charged a quota first: read again
            tokio::task::yield_now().await;
        }
        Err(ApiError::internal(format!(
            "resource quota evaluation in namespace {} gave up after {MAX_CONFLICT_RETRIES} conflicting writes",
            attrs.namespace
        )))
    }
}

#[cfg(test)]
#[path = "resource_quota_tests.rs"]
mod tests;
