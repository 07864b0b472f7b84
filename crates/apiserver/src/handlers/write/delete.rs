//! DELETE and deletecollection: delete options and preconditions, graceful deletion (a
//! `deletionTimestamp` and grace period), finalizers (`foregroundDeletion`, `orphan`), and
//! immediate removal with the release of reserved addresses.

use http::{Response, header};
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{MAX_RETRIES, attrs, commit, finalizers, reservation_diff, rv_of};
use crate::admission::Operation;
use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};
use crate::handlers::read::{Filter, fetch, render};
use crate::handlers::{Body, Ctx, object, success_status};
use crate::storage;
use crate::strategy::generic;

/// `DeleteOptions` from the body (if any) and the query.
#[derive(Debug, Default)]
pub(crate) struct DeleteOptions {
    grace: Option<i64>,
    propagation: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
}

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
    let obj = delete_one(&ctx, &name, &options).await?;
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

/// Deletes one object (or starts its graceful/finalized deletion); returns its last state.
pub(crate) async fn delete_one(ctx: &Ctx, name: &str, options: &DeleteOptions) -> Result<Value> {
    let key = storage::key(&ctx.rt, &ctx.info.namespace, name);
    for _ in 0..MAX_RETRIES {
        let current = fetch(ctx, name).await?;
        let current_rv = rv_of(&current).unwrap_or(0);
        let uid = current
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        if let Some(want) = &options.uid
            && want != uid
        {
            return Err(ApiError::conflict(
                ctx.target(name),
                &format!(
                    "Precondition failed: UID in precondition: {want}, UID in object meta: {uid}"
                ),
            ));
        }
        if let Some(want) = &options.resource_version
            && *want != current_rv.to_string()
        {
            return Err(ApiError::conflict(
                ctx.target(name),
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {want}, ResourceVersion in object meta: {current_rv}"
                ),
            ));
        }
        ctx.server
            .admission
            .validate(&attrs(ctx, Operation::Delete, name, Some(&current)), None)
            .await?;
        let mut next = current.clone();
        let grace = ctx
            .strategy
            .graceful_delete_seconds(&current, options.grace);
        let mut pending = finalizers(&current);
        match options.propagation.as_deref() {
            Some("Foreground") if !pending.iter().any(|f| f == "foregroundDeletion") => {
                pending.push("foregroundDeletion".into());
                add_finalizer(&mut next, "foregroundDeletion");
            }
            Some("Orphan") if !pending.iter().any(|f| f == "orphan") => {
                pending.push("orphan".into());
                add_finalizer(&mut next, "orphan");
            }
            _ => {}
        }
        if current.pointer("/metadata/deletionTimestamp").is_none() {
            for f in ctx.strategy.delete_finalizers() {
                if !pending.iter().any(|p| p == f) {
                    pending.push(f.to_string());
                    add_finalizer(&mut next, f);
                }
            }
        }
        let immediate = pending.is_empty() && grace.is_none();
        if ctx.dry_run() {
            return Ok(current);
        }
        let release = if immediate {
            reservation_diff(None, Some(&current)).1
        } else {
            Vec::new()
        };
        let op = if immediate {
            None
        } else {
            let now = ctx.server.now();
            let meta = &mut next["metadata"];
            let grace = grace.unwrap_or(0);
            let already = meta.get("deletionTimestamp").is_some();
            if !already {
                let at = now
                    .checked_add(jiff::SignedDuration::from_secs(grace))
                    .unwrap_or(now);
                meta["deletionTimestamp"] = json!(generic::timestamp(at));
                meta["deletionGracePeriodSeconds"] = json!(grace);
            } else if meta
                .get("deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                > grace
            {
                // A shorter grace period replaces the running one (kubectl delete --grace-period).
                meta["deletionGracePeriodSeconds"] = json!(grace);
            }
            ctx.strategy.prepare_for_delete(&mut next);
            if next == current {
                return Ok(current);
            }
            Some(storage::encode(&next))
        };
        let sent = ctx.server.now();
        if let Some(rev) = commit(ctx, &key, current_rv, op, &[], &release).await? {
            crate::trace::wrote(
                ctx,
                Some(&current),
                (!immediate).then_some(&next),
                rev,
                sent,
            );
            let mut out = if immediate { current } else { next };
            storage::set_resource_version(&mut out, rev);
            return Ok(out);
        }
    }
    Err(ApiError::conflict(
        ctx.target(name),
        "too many concurrent updates",
    ))
}

fn add_finalizer(obj: &mut Value, f: &str) {
    if !obj["metadata"]["finalizers"].is_array() {
        obj["metadata"]["finalizers"] = json!([]);
    }
    if let Some(a) = obj["metadata"]["finalizers"].as_array_mut() {
        a.push(json!(f));
    }
}

pub async fn delete_collection(mut ctx: Ctx) -> Result<Response<Body>> {
    let options = delete_options(&mut ctx).await?;
    let filter = Filter::from_query(&ctx)?;
    ctx.server.cache.wait_fresh().await?;
    let snapshot = ctx.cache()?.list(&ctx.info.namespace);
    let mut items = Vec::new();
    for c in snapshot.objects.iter().filter(|c| filter.matches(c)) {
        let mut scoped = ctx.info.clone();
        scoped.namespace = c.namespace.clone();
        let one = Ctx {
            info: scoped,
            ..ctx.share()
        };
        match delete_one(&one, &c.name, &options).await {
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
