//! PUT and patches (JSON, merge, strategic merge; apply patches go to `apply.rs`), each a
//! change the registry's guaranteed update applies to the current object.

use http::{Response, header};
use serde_json::{Value, json};
use skiff_apimachinery::patch::{self, PatchType};

use super::{check_fields, read_object};
use crate::encoding;
use crate::error::{ApiError, Result};
use crate::handlers::apply as ssa;
use crate::handlers::read::render_one;
use crate::handlers::{Body, Ctx};
use crate::registry::{self, Fields, name_of, rv_of};

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
    let updated = registry::update(&ctx, pinned, Fields::Record, |_| Ok(obj.clone())).await?;
    render_one(&ctx, &updated).await
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
    let patched = registry::update(&ctx, pinned, Fields::Record, |current| {
        let mut patched = patch::apply(group, rkind, current, kind, &body).map_err(patch_error)?;
        check_fields(&ctx, &mut patched)?;
        Ok(patched)
    })
    .await?;
    render_one(&ctx, &patched).await
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
        _ => ApiError::bad_request(message),
    }
}

/// The kind a patch is applied to (for strategic merge metadata).
fn patch_type_of(ctx: &Ctx) -> (&str, &str) {
    (&ctx.rt.group, &ctx.rt.kind)
}
