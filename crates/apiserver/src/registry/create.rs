//! Creating an object: the strategy's defaults, admission, allocation, validation and one
//! create-if-absent transaction, allocating again when another create took an address first.

use serde_json::{Value, json};
use skiff_store::StoreExt;

use super::{
    Fields, MAX_RETRIES, attrs, commit, encode, name_of, redecode_patched, reservation_diff,
    validate,
};
use crate::admission::Operation;
use crate::allocator;
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::handlers::apply::record_update;
use crate::storage;
use crate::strategy::generic;

/// Creates `obj` (in the request's version; its name set): POST and server-side apply of a
/// missing object. Returns the object as stored (as it would be, for a dry run).
pub(crate) async fn create(ctx: &Ctx, obj: Value, fields: Fields) -> Result<Value> {
    ctx.strategy.check_create()?;
    let mut obj = if ctx.server.conversion.needed(&ctx.rt) {
        ctx.server.conversion.to_internal(&ctx.rt, obj).await?
    } else {
        obj
    };
    let name = name_of(&obj).to_string();
    generic::prepare_create(&ctx.rt, &mut obj, ctx.server.now());
    ctx.strategy.prepare_for_create(&mut obj);
    ctx.strategy.prepare_for_create_by(&mut obj, &ctx.user);
    if fields == Fields::Record {
        record_update(ctx, &json!({}), &mut obj);
    }
    let a = attrs(ctx, Operation::Create, &name, None);
    ctx.server.admission.mutate(&a, Some(&mut obj)).await?;
    crate::timing::step("mutating admission");
    redecode_patched(ctx, &a, &mut obj);
    if ctx.info.subresource.is_empty() {
        ctx.strategy.prepare_admitted(&mut obj);
    }
    let key = storage::key(&ctx.rt, &ctx.info.namespace, &name);
    // Only objects that hold allocations may need a second attempt (and so a pristine copy).
    let unallocated = allocator::allocates(&obj).then(|| obj.clone());
    for attempt in 0..MAX_RETRIES {
        let mut obj = match &unallocated {
            Some(pristine) if attempt > 0 => pristine.clone(),
            _ if attempt > 0 => break,
            _ => std::mem::take(&mut obj),
        };
        allocator::allocate(&*ctx.server.store, &ctx.server.ranges, &mut obj, None).await?;
        validate(ctx, &obj, None)?;
        ctx.server.admission.validate(&a, Some(&obj)).await?;
        crate::timing::step("validated");
        let value = encode(ctx, &obj).await?;
        if ctx.dry_run() {
            // As upstream's dry run, everything but the write: a name in use is a conflict.
            if ctx.server.store.get(key.as_bytes()).await?.is_some() {
                return Err(ApiError::already_exists(ctx.target(&name)));
            }
            return Ok(obj);
        }
        let (reserve, _) = reservation_diff(Some(&obj), None);
        let sent = ctx.server.now();
        if let Some(rev) = commit(ctx, &key, 0, Some(value), &reserve, &[]).await? {
            storage::set_resource_version(&mut obj, rev);
            crate::trace::wrote(ctx, None, Some(&obj), rev, sent);
            return Ok(obj);
        }
        if reserve.is_empty() || ctx.server.store.get(key.as_bytes()).await?.is_some() {
            return Err(ApiError::already_exists(ctx.target(&name)));
        }
        // Lost a race for an address: allocate again.
    }
    Err(allocator::already_allocated(
        unallocated.as_ref().unwrap_or(&Value::Null),
    ))
}
