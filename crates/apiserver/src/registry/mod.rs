//! The generic registry, in the role of upstream's `genericregistry.Store`: what every write
//! of every kind does between the handler that parsed the request and the store. The kind's
//! [`Strategy`](crate::strategy::Strategy) defaults and validates, admission mutates and
//! validates, allocation reserves addresses and ports, conversion brings the object to its
//! storage version, and one guarded store transaction writes it (create-if-absent,
//! update-if-unchanged, delete-if-unchanged), retried when the client did not pin a
//! resourceVersion. Handlers parse, negotiate and render around it; built-in kinds and custom
//! resources go the same way, and the API server's own controllers (CRDs) write through it too.
//!
//! # Layout
//! - this file: what every write shares (admission attributes, validation, the stored encoding,
//!   reservation keys, the commit).
//! - [`txn`]: the guarded store transaction, the only place one is built.
//! - [`create`]: a new object.
//! - [`update`]: the guaranteed-update loop (PUT, patches, apply, subresources).
//! - [`delete`]: graceful and finalized deletion.

mod create;
mod delete;
mod txn;
mod update;

use bytes::Bytes;
use serde_json::Value;
use skiff_apimachinery::validation;

pub(crate) use create::create;
pub(crate) use delete::{DeleteOptions, delete};
pub use txn::{Guard, Txn};
pub(crate) use update::{replace, update};

use crate::admission::{Attributes, Operation};
use crate::allocator;
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::handlers::apply::managed_fields_of;
use crate::storage;
use crate::strategy::generic;

/// How a write treats `metadata.managedFields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fields {
    /// Record an `Update` entry for the request's manager (creates, updates, patches).
    Record,
    /// The new object's entries are already computed (server-side apply).
    Computed,
}

/// Whether a prepared write changes nothing the store would keep, managedFields included.
pub(crate) fn no_op(obj: &Value, current: &Value) -> bool {
    generic::unchanged(obj, current) && managed_fields_of(obj) == managed_fields_of(current)
}

/// Guaranteed updates retry this often on a conflicting concurrent write.
pub(crate) const MAX_RETRIES: usize = 16;

pub(crate) fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(crate) fn rv_of(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
}

/// `obj` (as handlers work on it) encoded for the store: converted to the storage version first
/// when that may differ, so a conversion that fails stores nothing.
pub(crate) async fn encode(ctx: &Ctx, obj: &Value) -> Result<Bytes> {
    if !ctx.server.conversion.needed(&ctx.rt) {
        return Ok(storage::encode(obj));
    }
    let stored = ctx
        .server
        .conversion
        .to_storage(&ctx.rt, obj.clone())
        .await?;
    Ok(storage::encode(&stored))
}

/// An object an admission webhook patched, decoded again as upstream decodes the patched
/// object: the fields its schema does not define are dropped (a custom resource is pruned) and
/// a custom resource's schema defaults are applied.
fn redecode_patched(ctx: &Ctx, a: &Attributes<'_>, obj: &mut Value) {
    if a.notes.patched() {
        ctx.strategy.unknown_fields(obj);
        ctx.strategy.default_on_read(obj);
    }
}

pub(crate) fn validate(ctx: &Ctx, obj: &Value, old: Option<&Value>) -> Result<()> {
    let name_check = ctx.strategy.name_validation();
    let mut errs =
        validation::validate_object_meta(&obj["metadata"], ctx.rt.namespaced, name_check);
    if let Some(old) = old {
        errs.extend(validation::validate_object_meta_update(
            &obj["metadata"],
            &old["metadata"],
        ));
    }
    let strategy = &ctx.strategy;
    errs.extend(match old {
        Some(old) => strategy.validate_subresource_update(&ctx.info.subresource, obj, old),
        None => strategy.validate(obj),
    });
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &ctx.rt.kind,
            &ctx.rt.group,
            name_of(obj),
            &errs,
        ))
    }
}

pub(crate) fn attrs<'a>(
    ctx: &'a Ctx,
    op: Operation,
    name: &'a str,
    old: Option<&'a Value>,
) -> Attributes<'a> {
    Attributes {
        operation: op,
        resource: &ctx.rt,
        subresource: &ctx.info.subresource,
        namespace: &ctx.info.namespace,
        name,
        user: &ctx.user,
        old,
        dry_run: ctx.dry_run(),
        notes: crate::admission::Notes::new(ctx.warnings.clone(), ctx.audit_annotations.clone()),
    }
}

/// Writes `value` (`None`: deletes) at `key` if the key is still at `revision` (0: absent),
/// taking the reservation keys in `reserve` and releasing those in `release`, atomically.
/// Returns the new revision, or `None` when a guard failed.
pub(crate) async fn commit(
    ctx: &Ctx,
    key: &str,
    revision: i64,
    value: Option<Bytes>,
    reserve: &[String],
    release: &[String],
) -> Result<Option<i64>> {
    let guard = Guard::revision(revision);
    let mut txn = match value {
        Some(value) => Txn::new().put(key, guard, value),
        None => Txn::new().delete(key, guard),
    };
    for r in reserve {
        txn = txn.reserve(r, key);
    }
    for r in release {
        txn = txn.release(r);
    }
    txn.commit(&*ctx.server.store).await
}

/// Reservation keys `new` holds and `old` does not, and the reverse.
pub(crate) fn reservation_diff(
    new: Option<&Value>,
    old: Option<&Value>,
) -> (Vec<String>, Vec<String>) {
    let new = new.map(allocator::reservations).unwrap_or_default();
    let old = old.map(allocator::reservations).unwrap_or_default();
    let reserve = new.iter().filter(|k| !old.contains(k)).cloned().collect();
    let release = old.iter().filter(|k| !new.contains(k)).cloned().collect();
    (reserve, release)
}

pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    let mut out: Vec<String> = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    // A namespace also waits for its spec finalizers (the namespace controller).
    if let Some(spec) = obj.pointer("/spec/finalizers").and_then(Value::as_array)
        && obj.get("kind").and_then(Value::as_str) == Some("Namespace")
    {
        out.extend(spec.iter().filter_map(|f| f.as_str().map(str::to_string)));
    }
    out
}

/// Sets `condition` in the status of the cluster-scoped object `name` of the built-in
/// `group`/v1 `plural`, through its status subresource, as the API server's own write; an
/// object deleted meanwhile is left alone.
pub async fn write_condition(
    server: &std::sync::Arc<crate::server::ApiServer>,
    resource: (&str, &str),
    name: &str,
    condition: &generic::Condition<'_>,
) -> Result<()> {
    let ctx = Ctx::internal_on(server, resource, "update", name, "status");
    let now = server.now();
    let result = update(&ctx, None, Fields::Record, |current| {
        let mut next = current.clone();
        let mut status = next.get("status").cloned().unwrap_or_default();
        condition.set(&mut status, now);
        next["status"] = status;
        Ok(next)
    })
    .await;
    match result {
        Err(e) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}
