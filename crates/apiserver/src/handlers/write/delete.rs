//! DELETE and deletecollection: delete options from the body and the query, then the
//! registry's delete for each object; a finished delete answers a Success Status unless the
//! kind returns the deleted object.

use http::{Response, header};
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};
use crate::handlers::read::{Filter, render};
use crate::handlers::{Body, Ctx, object, success_status};
use crate::registry::{self, DeleteOptions};

async fn delete_options(ctx: &mut Ctx) -> Result<DeleteOptions> {
    let body = ctx.body().await?;
    let mut o = DeleteOptions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let v = encoding::decode(
            BodyFormat::from_content_type(ctx.header(header::CONTENT_TYPE))?,
            &body,
        )?;
        o.grace = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        o.propagation = v
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            o.propagation = Some("Orphan".into());
        }
        o.uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.resource_version = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        if v.get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x == "All"))
        {
            ctx.query.insert("dryRun".into(), "All".into());
        }
    }
    if let Some(g) = ctx.query.get("gracePeriodSeconds") {
        o.grace =
            Some(g.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid gracePeriodSeconds: {g:?}"))
            })?);
    }
    if let Some(p) = ctx.query.get("propagationPolicy") {
        o.propagation = Some(p.clone());
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Orphan" | "Background" | "Foreground")
    {
        return Err(ApiError::invalid(
            "DeleteOptions",
            "meta.k8s.io",
            "",
            &[FieldError::not_supported(
                &FieldPath::new("propagationPolicy"),
                json!(p),
                &["Foreground", "Background", "Orphan"],
            )],
        ));
    }
    Ok(o)
}

pub async fn delete(mut ctx: Ctx) -> Result<Response<Body>> {
    let options = delete_options(&mut ctx).await?;
    let name = ctx.info.name.clone();
    let obj = registry::delete(&ctx, &name, &options).await?;
    // A pending deletion (grace period, finalizers) answers with the object; a finished one with
    // a Success Status, except for the kinds upstream sets `ReturnDeletedObject` on.
    let pending = obj.pointer("/metadata/deletionTimestamp").is_some();
    if pending || ctx.strategy.returns_deleted_object() {
        return render(&ctx, 200, &obj).await;
    }
    let mut details = json!({"name": name, "kind": ctx.rt.plural,
                             "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)});
    if !ctx.rt.group.is_empty() {
        details["group"] = json!(ctx.rt.group);
    }
    Ok(crate::handlers::json(200, &success_status(details)))
}

pub async fn delete_collection(mut ctx: Ctx) -> Result<Response<Body>> {
    let options = delete_options(&mut ctx).await?;
    let filter = Filter::from_query(&ctx)?;
    ctx.server.cache.wait_fresh().await?;
    let snapshot = ctx
        .cache()?
        .list_selected(&ctx.info.namespace, &filter.fields);
    let mut items = Vec::new();
    for c in snapshot.objects.iter().filter(|c| filter.matches(c)) {
        let mut scoped = ctx.info.clone();
        scoped.namespace = c.namespace.clone();
        let one = Ctx {
            info: scoped,
            ..ctx.share()
        };
        match registry::delete(&one, &c.name, &options).await {
            Ok(obj) => items.push(obj),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    // The deleted objects are answered in the request's version, converted together.
    if ctx.server.conversion.needed(&ctx.rt) {
        items = ctx
            .server
            .conversion
            .to_external_all(&ctx.rt, items)
            .await?;
    }
    Ok(object(
        200,
        ctx.output,
        &json!({"kind": ctx.rt.list_kind(), "apiVersion": ctx.rt.api_version(),
                "metadata": {}, "items": items}),
    ))
}
