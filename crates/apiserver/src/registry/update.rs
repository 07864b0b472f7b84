//! The guaranteed update: read, compute the new object, write it guarded on the revision read,
//! retry on a conflicting write unless the client pinned a resourceVersion.

use serde_json::{Value, json};

use super::{
    Fields, MAX_RETRIES, attrs, commit, encode, finalizers, no_op, redecode_patched,
    reservation_diff, rv_of, validate,
};
use crate::admission::Operation;
use crate::allocator;
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::handlers::apply::{managed_fields_of, record_update};
use crate::handlers::read::fetch_internal;
use crate::storage;
use crate::strategy::generic;

/// A guaranteed update: reads the object, computes the new one with `change` (which sees and
/// returns it in the request's version), and writes it guarded on the revision read; retried on
/// conflict unless the client pinned `pinned`. Returns the object as stored (the current one
/// when nothing changed; as it would be, for a dry run).
pub(crate) async fn update(
    ctx: &Ctx,
    pinned: Option<i64>,
    fields: Fields,
    mut change: impl FnMut(&Value) -> Result<Value>,
) -> Result<Value> {
    let name = ctx.info.name.as_str();
    let key = storage::key(&ctx.rt, &ctx.info.namespace, name);
    for _ in 0..MAX_RETRIES {
        let current = fetch_internal(ctx, name).await?;
        let current_rv = rv_of(&current).unwrap_or(0);
        if pinned.is_some_and(|p| p != current_rv) {
            return Err(ApiError::conflict(
                ctx.target(name),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut obj = if ctx.server.conversion.needed(&ctx.rt) {
            let conversion = &ctx.server.conversion;
            let served = conversion.to_external(&ctx.rt, current.clone()).await?;
            conversion.to_internal(&ctx.rt, change(&served)?).await?
        } else {
            change(&current)?
        };
        obj["metadata"]["name"] = json!(name);
        if ctx.rt.namespaced {
            obj["metadata"]["namespace"] = json!(ctx.info.namespace);
        }
        let computed = managed_fields_of(&obj).clone();
        generic::prepare_update(&ctx.rt, &mut obj, &current, &ctx.info.subresource);
        let sub = &ctx.info.subresource;
        if !ctx
            .strategy
            .prepare_for_subresource_update(sub, &mut obj, &current)
        {
            ctx.strategy.prepare_for_update(&mut obj, &current);
        }
        match fields {
            Fields::Record => record_update(ctx, &current, &mut obj),
            // A status write keeps only the status: put the computed entries back.
            Fields::Computed if computed.is_null() => {
                if let Some(m) = obj["metadata"].as_object_mut() {
                    m.remove("managedFields");
                }
            }
            Fields::Computed => obj["metadata"]["managedFields"] = computed,
        }
        storage::set_resource_version(&mut obj, current_rv);
        // an object stored under an older encryption key is rewritten even when unchanged
        if no_op(&obj, &current) && !ctx.server.gates.stale(&key).await {
            return Ok(current);
        }
        let a = attrs(ctx, Operation::Update, name, Some(&current));
        ctx.server.admission.mutate(&a, Some(&mut obj)).await?;
        crate::timing::step("mutating admission");
        redecode_patched(ctx, &a, &mut obj);
        allocator::allocate(
            &*ctx.server.store,
            &ctx.server.ranges,
            &mut obj,
            Some(&current),
        )
        .await?;
        validate(ctx, &obj, Some(&current))?;
        ctx.server.admission.validate(&a, Some(&obj)).await?;
        crate::timing::step("validated");
        // Removing the last finalizer of an object being deleted deletes it.
        let finished = obj.pointer("/metadata/deletionTimestamp").is_some()
            && finalizers(&obj).is_empty()
            && obj
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0;
        let value = match finished {
            true => None,
            false => Some(encode(ctx, &obj).await?),
        };
        if ctx.dry_run() {
            return Ok(obj);
        }
        let (op, (reserve, release)) = match value {
            None => (None, reservation_diff(None, Some(&current))),
            Some(value) => (Some(value), reservation_diff(Some(&obj), Some(&current))),
        };
        let sent = ctx.server.now();
        match commit(ctx, &key, current_rv, op, &reserve, &release).await? {
            Some(rev) => {
                storage::set_resource_version(&mut obj, rev);
                crate::trace::wrote(ctx, Some(&current), (!finished).then_some(&obj), rev, sent);
                return Ok(obj);
            }
            None if pinned.is_some() => {
                return Err(ApiError::conflict(
                    ctx.target(name),
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
            None => continue,
        }
    }
    Err(ApiError::conflict(
        ctx.target(name),
        "too many concurrent updates",
    ))
}

/// Writes a whole new state of the request's object (for subresources that compute it, in the
/// form handlers work on), guarded on the revision it was computed from. Returns the object
/// written, in that form.
pub(crate) async fn replace(ctx: &Ctx, next: Value) -> Result<Value> {
    let name = ctx.info.name.clone();
    let key = storage::key(&ctx.rt, &ctx.info.namespace, &name);
    let current = fetch_internal(ctx, &name).await?;
    let current_rv = rv_of(&current).unwrap_or(0);
    let mut obj = next;
    generic::prepare_update(&ctx.rt, &mut obj, &current, "scale");
    record_update(ctx, &current, &mut obj);
    if no_op(&obj, &current) {
        return Ok(current);
    }
    validate(ctx, &obj, Some(&current))?;
    let value = encode(ctx, &obj).await?;
    let sent = ctx.server.now();
    match commit(ctx, &key, current_rv, Some(value), &[], &[]).await? {
        Some(rev) => {
            storage::set_resource_version(&mut obj, rev);
            crate::trace::wrote(ctx, Some(&current), Some(&obj), rev, sent);
            Ok(obj)
        }
        None => Err(ApiError::conflict(
            ctx.target(&name),
            "the object has been modified; please apply your changes to the latest version and try again",
        )),
    }
}
