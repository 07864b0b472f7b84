//! Deleting an object: preconditions, admission, graceful deletion (a `deletionTimestamp` and
//! grace period), finalizers (`foregroundDeletion`, `orphan`, the kind's own), and immediate
//! removal with the release of reserved addresses.

use serde_json::{Value, json};

use super::{MAX_RETRIES, attrs, commit, finalizers, reservation_diff, rv_of};
use crate::admission::Operation;
use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::handlers::read::fetch;
use crate::storage;
use crate::strategy::generic;

/// What a delete asks (`DeleteOptions`): grace period, propagation, preconditions.
#[derive(Debug, Default)]
pub(crate) struct DeleteOptions {
    pub grace: Option<i64>,
    pub propagation: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Deletes one object (or starts its graceful/finalized deletion); returns its last state.
pub(crate) async fn delete(ctx: &Ctx, name: &str, options: &DeleteOptions) -> Result<Value> {
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
