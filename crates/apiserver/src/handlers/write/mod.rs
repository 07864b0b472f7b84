//! Writes: create, update (PUT), patch, delete and deletecollection, and the write subresources
//! (`status`, `scale`, `binding`, `finalize`, `eviction`). Each write runs defaulting, the
//! status split, validation and admission, then one store transaction guarded on the object's
//! revision (create-if-absent, update-if-unchanged, delete-if-unchanged), retried when the client
//! did not pin a resourceVersion.
//!
//! # Layout
//! - this file: what every write shares (reading the body, validation, admission attributes,
//!   the guarded store transaction, reservation keys).
//! - [`create`]: POST, `generateName`, and the create path apply shares.
//! - [`update`]: PUT and patches, over the guaranteed-update loop apply shares.
//! - [`delete`]: delete options, graceful and finalized deletion, deletecollection.
//! - [`subresource`]: `status`, `finalize`, `binding`, `eviction`, and whole-object replacement
//!   for `scale`.

mod create;
mod delete;
mod eviction;
mod subresource;
mod token;
mod update;

use bytes::Bytes;
use http::header;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};
use skiff_store::{
    Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange, PutRequest, TxnOp, TxnRequest,
};

use super::Ctx;
use super::apply::managed_fields_of;
use crate::admission::{Attributes, Operation};
use crate::allocator;
use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};
use crate::storage;
use crate::strategy::generic;

pub use create::create;
pub(super) use create::create_object;
pub(crate) use delete::{DeleteOptions, delete_one};
pub use delete::{delete, delete_collection};
pub use subresource::{replace_object, subresource};
pub(crate) use update::update_with;
pub use update::{patch, update};

/// How a write treats `metadata.managedFields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fields {
    /// Record an `Update` entry for the request's manager (creates, updates, patches).
    Record,
    /// The new object's entries are already computed (server-side apply).
    Computed,
}

/// Whether a prepared write changes nothing the store would keep, managedFields included.
fn no_op(obj: &Value, current: &Value) -> bool {
    generic::unchanged(obj, current) && managed_fields_of(obj) == managed_fields_of(current)
}

/// Guaranteed updates retry this often on a conflicting concurrent write.
const MAX_RETRIES: usize = 16;

fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn rv_of(obj: &Value) -> Option<i64> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
}

/// Reads a create/update body (in the request's version) and checks its type and namespace
/// against the URL.
async fn read_object(ctx: &mut Ctx, kind: &str, api_version: &str) -> Result<Value> {
    let format = BodyFormat::from_content_type(ctx.header(header::CONTENT_TYPE))?;
    let body = ctx.body().await?;
    let mut obj = encoding::expect_object(encoding::decode(format, &body)?)?;
    match obj.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => obj["apiVersion"] = json!(api_version),
        Some(v) if v != api_version => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({api_version})"
            )));
        }
        Some(_) => {}
    }
    match obj.get("kind").and_then(Value::as_str) {
        None | Some("") => obj["kind"] = json!(kind),
        Some(k) if k != kind => {
            return Err(ApiError::bad_request(format!(
                "{k} in version \"{api_version}\" cannot be handled as a {kind}: no kind \"{k}\" is registered for this resource"
            )));
        }
        Some(_) => {}
    }
    check_fields(ctx, &mut obj)?;
    if !obj.get("metadata").is_none_or(Value::is_object) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    if obj.get("metadata").is_none() {
        obj["metadata"] = json!({});
    }
    if ctx.rt.namespaced && kind == ctx.rt.kind {
        let ns = ctx.info.namespace.clone();
        match obj["metadata"].get("namespace").and_then(Value::as_str) {
            None | Some("") => obj["metadata"]["namespace"] = json!(ns),
            Some(n) if n != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            Some(_) => {}
        }
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    Ok(obj)
}

/// `obj` (as handlers work on it) encoded for the store: converted to the storage version first
/// when that may differ, so a conversion that fails stores nothing.
async fn encode(ctx: &Ctx, obj: &Value) -> Result<Bytes> {
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

/// Field validation of a body against its schema, as upstream's `fieldValidation`: with
/// `Strict` fields the schema does not define are a 400 (strict decoding); with `Warn`, the
/// default, each becomes a `Warning` header; `Ignore` says nothing. Either way they are dropped
/// from `obj`, as upstream's decoding (or a custom resource's pruning) drops them: nothing a
/// typed client cannot read is stored.
pub(super) fn check_fields(ctx: &Ctx, obj: &mut Value) -> Result<()> {
    let strict = match ctx.query.get("fieldValidation").map(String::as_str) {
        Some("Ignore") => None,
        Some("Strict") => Some(true),
        None | Some("" | "Warn") => Some(false),
        Some(other) => {
            // Upstream validates the verb's options (`CreateOptions`, `PatchOptions`, …) first.
            let options = match ctx.info.verb.as_str() {
                "create" => "CreateOptions",
                "patch" => "PatchOptions",
                _ => "UpdateOptions",
            };
            let err = FieldError::not_supported(
                &FieldPath::new("fieldValidation"),
                json!(other),
                &["", "Ignore", "Strict", "Warn"],
            );
            return Err(ApiError::invalid(options, "meta.k8s.io", "", &[err]));
        }
    };
    let unknown = ctx.strategy.unknown_fields(obj);
    let list = unknown.iter().map(|f| format!("unknown field \"{f}\""));
    match strict {
        None => Ok(()),
        Some(false) => {
            list.for_each(|w| ctx.warnings.push(w));
            Ok(())
        }
        Some(true) if unknown.is_empty() => Ok(()),
        Some(true) => {
            let kind = obj
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or(&ctx.rt.kind);
            let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let version = api_version.rsplit('/').next().unwrap_or("");
            Err(ApiError::bad_request(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
                list.collect::<Vec<_>>().join(", ")
            )))
        }
    }
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

fn validate(ctx: &Ctx, obj: &Value, old: Option<&Value>) -> Result<()> {
    let name_check = match (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) {
        ("", "namespaces" | "services") => validation::is_dns1123_label,
        // RBAC names are path segments (`system:controller:…`), as upstream.
        ("rbac.authorization.k8s.io", _) => validation::is_path_segment_name,
        _ => validation::is_dns1123_subdomain,
    };
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
        Some(old) => strategy.validate_update(obj, old),
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

fn attrs<'a>(ctx: &'a Ctx, op: Operation, name: &'a str, old: Option<&'a Value>) -> Attributes<'a> {
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

fn put_op(key: &str, value: Bytes) -> TxnOp {
    TxnOp::Put(PutRequest {
        key: Bytes::from(key.to_string()),
        value,
        lease: 0,
        prev_kv: false,
    })
}

fn delete_op(key: &str) -> TxnOp {
    TxnOp::Delete(DeleteRequest {
        range: KeyRange::key(key.to_string()),
        prev_kv: false,
    })
}

/// Writes `op` at `key` if the key is still at `revision` (0: absent), creating the reservation
/// keys in `reserve` (which must be absent) and deleting those in `release`, atomically. Returns
/// the new revision, or `None` when a guard failed.
async fn commit(
    ctx: &Ctx,
    key: &str,
    revision: i64,
    op: TxnOp,
    reserve: &[String],
    release: &[String],
) -> Result<Option<i64>> {
    let target = if revision == 0 {
        CompareTarget::CreateRevision(0)
    } else {
        CompareTarget::ModRevision(revision)
    };
    let mut compare = vec![Compare::new(key.to_string(), CompareOp::Equal, target)];
    let mut success = vec![op];
    for r in reserve {
        compare.push(Compare::new(
            r.clone(),
            CompareOp::Equal,
            CompareTarget::CreateRevision(0),
        ));
        success.push(put_op(r, Bytes::from(key.to_string())));
    }
    success.extend(release.iter().map(|r| delete_op(r)));
    let resp = ctx
        .server
        .store
        .txn(TxnRequest {
            compare,
            success,
            failure: vec![],
        })
        .await?;
    Ok(resp.succeeded.then_some(resp.revision))
}

/// Reservation keys `new` holds and `old` does not, and the reverse.
fn reservation_diff(new: Option<&Value>, old: Option<&Value>) -> (Vec<String>, Vec<String>) {
    let new = new.map(allocator::reservations).unwrap_or_default();
    let old = old.map(allocator::reservations).unwrap_or_default();
    let reserve = new.iter().filter(|k| !old.contains(k)).cloned().collect();
    let release = old.iter().filter(|k| !new.contains(k)).cloned().collect();
    (reserve, release)
}

fn finalizers(obj: &Value) -> Vec<String> {
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
