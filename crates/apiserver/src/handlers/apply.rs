//! Server-side apply (`PATCH` with `Content-Type: application/apply-patch+yaml`) and the
//! managedFields bookkeeping of every other write: which manager a request writes as, which
//! fields its path may own, and the glue from [`skiff_apimachinery::managedfields`] to the
//! [`registry`](crate::registry), whose defaulting, validation, admission and store
//! transaction an apply goes through like any patch.

use http::{Response, header};
use serde_json::{Value, json};
use skiff_apimachinery::managedfields::{self, Scope, Writer};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::write::check_fields;
use super::{Body, Ctx};
use crate::error::{ApiError, Result};
use crate::handlers::read::{render, render_one};
use crate::registry::{self, Fields};
use crate::strategy::generic;

/// The media type of an apply patch.
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// The bytes of a User-Agent upstream keeps as a field manager name.
const MAX_MANAGER_LEN: usize = 128;

/// The manager a write is recorded for: `fieldManager`, else the User-Agent up to its first
/// `/` (`kubectl`, `OpenAPI-Generator`), printable characters only, as upstream's
/// `managerOrUserAgent`.
pub fn manager(ctx: &Ctx) -> String {
    if let Some(m) = ctx.query.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = ctx.header(header::USER_AGENT).unwrap_or("");
    let mut out = String::new();
    for c in ua.split('/').next().unwrap_or("").chars() {
        if out.len() >= MAX_MANAGER_LEN {
            break;
        }
        if !c.is_control() {
            out.push(c);
        }
    }
    out
}

/// The fields a request to this path may own.
fn scope(ctx: &Ctx) -> Scope {
    match ctx.info.subresource.as_str() {
        "status" => Scope::OnlyStatus,
        "" if ctx.rt.has_status() => Scope::NotStatus,
        _ => Scope::Everything,
    }
}

/// Runs `f` with the [`Writer`] of this request.
fn with_writer<T>(ctx: &Ctx, f: impl FnOnce(&Writer<'_>) -> T) -> T {
    let manager = manager(ctx);
    let api_version = ctx.rt.api_version();
    let now = generic::timestamp(ctx.server.now());
    let writer = Writer {
        manager: &manager,
        api_version: &api_version,
        subresource: &ctx.info.subresource,
        scope: scope(ctx),
        now: &now,
        group: &ctx.rt.group,
        kind: &ctx.rt.kind,
        custom: ctx.strategy.apply_schema(),
    };
    f(&writer)
}

/// Records the write of `new` over `live` (`{}` for a create) in `new`'s managedFields.
/// Bindings and evictions are not recorded, as upstream.
pub fn record_update(ctx: &Ctx, live: &Value, new: &mut Value) {
    if !matches!(
        ctx.info.subresource.as_str(),
        "" | "status" | "scale" | "finalize" | "ephemeralcontainers"
    ) {
        return;
    }
    with_writer(ctx, |w| managedfields::update(live, new, w));
}

/// `metadata.managedFields` of an object (`Null` when absent).
pub fn managed_fields_of(obj: &Value) -> &Value {
    obj.pointer("/metadata/managedFields")
        .unwrap_or(&Value::Null)
}

/// `PatchOptions` checks that depend on the patch type (upstream's `ValidatePatchOptions`).
pub fn validate_patch_options(ctx: &Ctx, apply: bool) -> Result<()> {
    let err = |e: FieldError| ApiError::invalid("PatchOptions", "meta.k8s.io", "", &[e]);
    if apply {
        if ctx.query.get("fieldManager").is_none_or(String::is_empty) {
            return Err(err(FieldError::required(
                &FieldPath::new("fieldManager"),
                "is required for apply patch",
            )));
        }
    } else if ctx.query.contains_key("force") {
        return Err(err(FieldError::forbidden(
            &FieldPath::new("force"),
            "may not be specified for non-apply patch",
        )));
    }
    Ok(())
}

/// The Status of a failed apply.
fn apply_error(ctx: &Ctx, e: managedfields::Error) -> ApiError {
    use managedfields::Error as E;
    match e {
        E::Conflicts(ref list) => {
            let causes: Vec<Value> = list
                .iter()
                .map(|c| {
                    json!({"reason": "FieldManagerConflict",
                           "message": format!("conflict with {}", c.manager),
                           "field": c.field})
                })
                .collect();
            ApiError {
                details: Some(json!({"causes": causes})),
                ..ApiError::with_code(409, "Conflict", e.to_string())
            }
        }
        E::ManagedFieldsInApply => ApiError::bad_request(e.to_string()),
        E::MissingListKey { .. } | E::DuplicateListKey { .. } => ApiError::internal(format!(
            "failed to create typed patch object ({}/{}; {}, Kind={}): {e}",
            ctx.info.namespace,
            ctx.info.name,
            ctx.rt.api_version(),
            ctx.rt.kind
        )),
        E::BadFieldsV1 { .. } | E::BadEntry { .. } => {
            ApiError::internal(format!("failed to decode managed fields: {e}"))
        }
    }
}

/// Reads the applied configuration: YAML or JSON, an object of the request's kind and version.
async fn read_config(ctx: &mut Ctx) -> Result<Value> {
    let body = ctx.body().await?;
    let trimmed = body.trim_ascii_start();
    let decoded: std::result::Result<Value, String> = if trimmed.starts_with(b"{") {
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    } else {
        serde_yaml::from_slice(&body).map_err(|e| e.to_string())
    };
    let mut config = match decoded {
        Ok(v @ Value::Object(_)) => v,
        Ok(Value::Null) => json!({}),
        Ok(other) => {
            return Err(ApiError::bad_request(format!(
                "error decoding YAML: the applied configuration must be an object, got {other}"
            )));
        }
        Err(e) => return Err(ApiError::bad_request(format!("error decoding YAML: {e}"))),
    };
    let expected = ctx.rt.api_version();
    let version = config
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if version != expected {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {version}, expected: {expected}"
        )));
    }
    let kind = config.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != ctx.rt.kind {
        return Err(ApiError::bad_request(format!(
            "Incorrect kind specified in apply patch. Specified patch kind: {kind}, expected: {}",
            ctx.rt.kind
        )));
    }
    if !config.get("metadata").is_none_or(Value::is_object) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    check_fields(ctx, &mut config)?;
    let meta = |k: &str| {
        config
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let name = meta("name");
    if !name.is_empty() && name != ctx.info.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            ctx.info.name
        )));
    }
    let namespace = meta("namespace");
    if ctx.rt.namespaced && !namespace.is_empty() && namespace != ctx.info.namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(config)
}

/// `PATCH` with an apply patch: merges the configuration into the object (creating it if it
/// does not exist) and writes the result through the shared write path.
pub async fn apply(mut ctx: Ctx) -> Result<Response<Body>> {
    validate_patch_options(&ctx, true)?;
    let force = match ctx.query.get("force").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid value for force: {other:?}"
            )));
        }
    };
    let config = read_config(&mut ctx).await?;
    let pinned = config
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok());
    let updated = registry::update(&ctx, pinned, Fields::Computed, |current| {
        with_writer(&ctx, |w| managedfields::apply(current, &config, w, force))
            .map_err(|e| apply_error(&ctx, e))
    })
    .await;
    match updated {
        Err(e) if e.code == 404 && ctx.info.subresource.is_empty() => {}
        Err(e) => return Err(e),
        Ok(updated) => return render_one(&ctx, &updated).await,
    }
    // Apply creates.
    if let Some(uid) = config
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
    {
        return Err(ApiError::conflict(
            ctx.target(&ctx.info.name),
            &format!(
                "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
            ),
        ));
    }
    let mut obj = with_writer(&ctx, |w| {
        managedfields::apply(&json!({}), &config, w, force)
    })
    .map_err(|e| apply_error(&ctx, e))?;
    obj["metadata"]["name"] = json!(ctx.info.name);
    if ctx.rt.namespaced {
        obj["metadata"]["namespace"] = json!(ctx.info.namespace);
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    let created = registry::create(&ctx, obj, Fields::Computed).await?;
    render(&ctx, 201, &created).await
}
