//! PUT and patches (JSON, merge, strategic merge; apply patches go to `apply.rs`), over the
//! guaranteed-update loop: read, compute, write guarded on the revision read, retry.

use http::{Response, header};
use serde_json::{Value, json};
use skiff_apimachinery::patch::{self, PatchType};

use super::{
    Fields, MAX_RETRIES, attrs, check_fields, commit, delete_op, encode, finalizers, name_of,
    no_op, put_op, read_object, redecode_patched, reservation_diff, rv_of, validate,
};
use crate::admission::Operation;
use crate::allocator;
use crate::encoding;
use crate::error::{ApiError, Result};
use crate::handlers::apply::{self as ssa, managed_fields_of, record_update};
use crate::handlers::read::{fetch_internal, render_one};
use crate::handlers::{Body, Ctx};
use crate::storage;
use crate::strategy::certificatesigningrequest as csr;
use crate::strategy::generic;

pub async fn update(mut ctx: Ctx) -> Result<Response<Body>> {
    let (kind, api_version) = (ctx.rt.kind.clone(), ctx.rt.api_version());
    let obj = read_object(&mut ctx, &kind, &api_version).await?;
    let name = ctx.info.name.clone();
    match name_of(&obj) {
        "" => {}
        n if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
        _ => {}
    }
    let pinned = rv_of(&obj);
    update_with(&ctx, pinned, Fields::Record, |_| Ok(obj.clone())).await
}

/// A guaranteed update: reads the object, computes the new one with `change` (which sees and
/// returns it in the request's version), and writes it guarded on the revision read; retried on
/// conflict unless the client pinned `pinned`.
pub(crate) async fn update_with(
    ctx: &Ctx,
    pinned: Option<i64>,
    fields: Fields,
    mut change: impl FnMut(&Value) -> Result<Value>,
) -> Result<Response<Body>> {
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
        if (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) == (csr::GROUP, csr::PLURAL) {
            csr::prepare_subresource_update(&ctx.info.subresource, &mut obj, &current);
        }
        // `finalize` writes exactly the spec.finalizers a strategy otherwise keeps from `current`.
        let finalized =
            (ctx.info.subresource == "finalize").then(|| obj["spec"]["finalizers"].clone());
        ctx.strategy.prepare_for_update(&mut obj, &current);
        if let Some(f) = finalized {
            obj["spec"]["finalizers"] = f;
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
            return render_one(ctx, &current).await;
        }
        let a = attrs(ctx, Operation::Update, name, Some(&current));
        ctx.server.admission.mutate(&a, Some(&mut obj)).await?;
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
            return render_one(ctx, &obj).await;
        }
        let (op, (reserve, release)) = match value {
            None => (delete_op(&key), reservation_diff(None, Some(&current))),
            Some(value) => (
                put_op(&key, value),
                reservation_diff(Some(&obj), Some(&current)),
            ),
        };
        let sent = ctx.server.now();
        match commit(ctx, &key, current_rv, op, &reserve, &release).await? {
            Some(rev) => {
                storage::set_resource_version(&mut obj, rev);
                crate::trace::wrote(ctx, Some(&current), (!finished).then_some(&obj), rev, sent);
                return render_one(ctx, &obj).await;
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

pub async fn patch(mut ctx: Ctx) -> Result<Response<Body>> {
    let ct = ctx.header(header::CONTENT_TYPE).unwrap_or("").to_string();
    if encoding::media_type(&ct) == ssa::APPLY_PATCH {
        return ssa::apply(ctx).await;
    }
    let Some(kind) = PatchType::from_content_type(&encoding::media_type(&ct)) else {
        return Err(ApiError::unsupported_media_type(&ct));
    };
    // Custom resources have no Go struct to read merge keys from: upstream offers them only
    // the other patch types.
    if kind == PatchType::StrategicMerge && !ctx.rt.builtin {
        return Err(ApiError::with_code(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    ssa::validate_patch_options(&ctx, false)?;
    let body = ctx.body().await?;
    let (group, rkind) = patch_type_of(&ctx);
    let pinned = serde_json::from_slice::<Value>(&body)
        .ok()
        .as_ref()
        .and_then(rv_of);
    update_with(&ctx, pinned, Fields::Record, |current| {
        let mut patched = patch::apply(group, rkind, current, kind, &body).map_err(patch_error)?;
        check_fields(&ctx, &mut patched)?;
        Ok(patched)
    })
    .await
}

/// A patch that cannot be applied, with the status upstream gives it.
fn patch_error(e: patch::Error) -> ApiError {
    let message = e.to_string();
    match e.status_code() {
        413 => ApiError::too_large(message),
        415 => ApiError::unsupported_media_type(&message),
        // Upstream's NewGenericServerResponse: a fixed message, the patch error as a cause.
        422 => ApiError {
            details: Some(json!({"causes": [{"reason": "UnexpectedServerResponse",
                                             "message": message}]})),
            ..ApiError::with_code(
                422,
                "Invalid",
                "the server rejected our request due to an error in our request",
            )
        },
        500 => ApiError::internal(message),
        _ => ApiError::bad_request(message),
    }
}

/// The kind a patch is applied to (for strategic merge metadata).
fn patch_type_of(ctx: &Ctx) -> (&str, &str) {
    (&ctx.rt.group, &ctx.rt.kind)
}
