//! Writes: create, update (PUT), patch, delete and deletecollection, and the write subresources
//! (`status`, `scale`, `binding`, `finalize`, `eviction`). Each write runs defaulting, the
//! status split, validation and admission, then one store transaction guarded on the object's
//! revision (create-if-absent, update-if-unchanged, delete-if-unchanged), retried when the client
//! did not pin a resourceVersion.

use bytes::Bytes;
use http::{Response, header};
use serde_json::{Value, json};
use skiff_apimachinery::catalog::Subresource;
use skiff_apimachinery::patch::{self, PatchType};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};
use skiff_store::{
    Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange, PutRequest, StoreExt, TxnOp,
    TxnRequest,
};

use super::apply::{self as ssa, managed_fields_of, record_update};
use super::read::{Filter, fetch, render, render_one};
use super::{Body, Ctx, object, success_status};
use crate::admission::{Attributes, Operation};
use crate::allocator;
use crate::conversion;
use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};
use crate::storage;
use crate::strategy::{self, generic};

/// How a write treats `metadata.managedFields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fields {
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

/// Characters of a `generateName` suffix (upstream's, without vowels and look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generated_name(base: &str) -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let suffix: String = bytes[..5]
        .iter()
        .map(|b| NAME_ALPHABET[*b as usize % NAME_ALPHABET.len()] as char)
        .collect();
    format!("{base}{suffix}")
}

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

/// Reads a create/update body and checks its type and namespace against the URL.
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
    strict_fields(ctx, &obj)?;
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
    Ok(conversion::to_internal(ctx.rt, obj))
}

/// `fieldValidation=Strict`: fields the schema does not define are a 400, as upstream's strict
/// decoding (`Ignore` and the default `Warn` accept them; unknown fields are dropped on output
/// only by typed clients, so Skiff keeps them as stored).
pub(super) fn strict_fields(ctx: &Ctx, obj: &Value) -> Result<()> {
    if ctx.query.get("fieldValidation").map(String::as_str) != Some("Strict") {
        return Ok(());
    }
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or(ctx.rt.kind);
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let unknown = skiff_openapi::unknown_fields(group, version, kind, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        list.join(", ")
    )))
}

/// Upstream's `ValidatePathSegmentName`: any name that can be one URL path segment.
fn path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

fn validate(ctx: &Ctx, obj: &Value, old: Option<&Value>) -> Result<()> {
    let name_check = match (ctx.rt.group, ctx.rt.plural) {
        ("", "namespaces" | "services") => validation::is_dns1123_label,
        // RBAC names are path segments (`system:controller:…`), as upstream.
        ("rbac.authorization.k8s.io", _) => path_segment_name,
        _ => validation::is_dns1123_subdomain,
    };
    let mut errs =
        validation::validate_object_meta(&obj["metadata"], ctx.rt.namespaced, name_check);
    let strategy = strategy::for_resource(ctx.rt);
    errs.extend(match old {
        Some(old) => strategy.validate_update(obj, old),
        None => strategy.validate(obj),
    });
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            ctx.rt.kind,
            ctx.rt.group,
            name_of(obj),
            &errs,
        ))
    }
}

fn attrs<'a>(ctx: &'a Ctx, op: Operation, name: &'a str, old: Option<&'a Value>) -> Attributes<'a> {
    Attributes {
        operation: op,
        resource: ctx.rt,
        subresource: &ctx.info.subresource,
        namespace: &ctx.info.namespace,
        name,
        user: &ctx.user,
        old,
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

pub async fn create(mut ctx: Ctx) -> Result<Response<Body>> {
    let (kind, api_version) = (ctx.rt.kind, ctx.rt.api_version());
    let mut obj = read_object(&mut ctx, kind, &api_version).await?;
    if name_of(&obj).is_empty() {
        match obj
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
        {
            Some(base) if !base.is_empty() => {
                obj["metadata"]["name"] = json!(generated_name(base));
            }
            _ => {
                return Err(ApiError::invalid(
                    ctx.rt.kind,
                    ctx.rt.group,
                    "",
                    &[FieldError::required(
                        &FieldPath::new("metadata").child("name"),
                        "name or generateName is required",
                    )],
                ));
            }
        }
    }
    create_object(&ctx, obj, Fields::Record).await
}

/// The create path shared by POST, apply and the subresources that create (bindings are not
/// objects).
pub(super) async fn create_object(
    ctx: &Ctx,
    mut obj: Value,
    fields: Fields,
) -> Result<Response<Body>> {
    let name = name_of(&obj).to_string();
    generic::prepare_create(ctx.rt, &mut obj, ctx.server.now());
    strategy::for_resource(ctx.rt).prepare_for_create(&mut obj);
    if fields == Fields::Record {
        record_update(ctx, &json!({}), &mut obj);
    }
    let a = attrs(ctx, Operation::Create, &name, None);
    ctx.server.admission.mutate(&a, Some(&mut obj)).await?;
    let key = storage::key(ctx.rt, &ctx.info.namespace, &name);
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
        if ctx.dry_run() {
            return render(ctx, 201, &obj);
        }
        let (reserve, _) = reservation_diff(Some(&obj), None);
        let op = put_op(&key, storage::encode(&obj)?);
        if let Some(rev) = commit(ctx, &key, 0, op, &reserve, &[]).await? {
            storage::set_resource_version(&mut obj, rev);
            return render(ctx, 201, &obj);
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

pub async fn update(mut ctx: Ctx) -> Result<Response<Body>> {
    let (kind, api_version) = (ctx.rt.kind, ctx.rt.api_version());
    let obj = read_object(&mut ctx, kind, &api_version).await?;
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

/// A guaranteed update: reads the object, computes the new one with `change`, and writes it
/// guarded on the revision read; retried on conflict unless the client pinned `pinned`.
pub(super) async fn update_with(
    ctx: &Ctx,
    pinned: Option<i64>,
    fields: Fields,
    mut change: impl FnMut(&Value) -> Result<Value>,
) -> Result<Response<Body>> {
    let name = ctx.info.name.as_str();
    let key = storage::key(ctx.rt, &ctx.info.namespace, name);
    for _ in 0..MAX_RETRIES {
        let current = fetch(ctx, name).await?;
        let current_rv = rv_of(&current).unwrap_or(0);
        if pinned.is_some_and(|p| p != current_rv) {
            return Err(ApiError::conflict(
                ctx.target(name),
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let mut obj = change(&current)?;
        obj["metadata"]["name"] = json!(name);
        if ctx.rt.namespaced {
            obj["metadata"]["namespace"] = json!(ctx.info.namespace);
        }
        let computed = managed_fields_of(&obj).clone();
        generic::prepare_update(ctx.rt, &mut obj, &current, &ctx.info.subresource);
        strategy::for_resource(ctx.rt).prepare_for_update(&mut obj, &current);
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
        if no_op(&obj, &current) {
            return render_one(ctx, &current);
        }
        let a = attrs(ctx, Operation::Update, name, Some(&current));
        ctx.server.admission.mutate(&a, Some(&mut obj)).await?;
        allocator::allocate(
            &*ctx.server.store,
            &ctx.server.ranges,
            &mut obj,
            Some(&current),
        )
        .await?;
        validate(ctx, &obj, Some(&current))?;
        ctx.server.admission.validate(&a, Some(&obj)).await?;
        if ctx.dry_run() {
            return render_one(ctx, &obj);
        }
        // Removing the last finalizer of an object being deleted deletes it.
        let finished = obj.pointer("/metadata/deletionTimestamp").is_some()
            && finalizers(&obj).is_empty()
            && obj
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0;
        let (op, (reserve, release)) = if finished {
            (delete_op(&key), reservation_diff(None, Some(&current)))
        } else {
            (
                put_op(&key, storage::encode(&obj)?),
                reservation_diff(Some(&obj), Some(&current)),
            )
        };
        match commit(ctx, &key, current_rv, op, &reserve, &release).await? {
            Some(rev) => {
                storage::set_resource_version(&mut obj, rev);
                return render_one(ctx, &obj);
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

pub async fn patch(mut ctx: Ctx) -> Result<Response<Body>> {
    let ct = ctx.header(header::CONTENT_TYPE).unwrap_or("").to_string();
    if encoding::media_type(&ct) == ssa::APPLY_PATCH {
        return ssa::apply(ctx).await;
    }
    let Some(kind) = PatchType::from_content_type(&encoding::media_type(&ct)) else {
        return Err(ApiError::unsupported_media_type(&ct));
    };
    ssa::validate_patch_options(&ctx, false)?;
    let body = ctx.body().await?;
    let (group, rkind) = patch_type_of(&ctx);
    let pinned = serde_json::from_slice::<Value>(&body)
        .ok()
        .as_ref()
        .and_then(rv_of);
    update_with(&ctx, pinned, Fields::Record, |current| {
        let served = conversion::to_external(ctx.rt, current.clone());
        let patched = patch::apply(group, rkind, &served, kind, &body).map_err(patch_error)?;
        strict_fields(&ctx, &patched)?;
        Ok(conversion::to_internal(ctx.rt, patched))
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
fn patch_type_of(ctx: &Ctx) -> (&'static str, &'static str) {
    (ctx.rt.group, ctx.rt.kind)
}

/// `DeleteOptions` from the body (if any) and the query.
#[derive(Debug, Default)]
struct DeleteOptions {
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
    let returns_object = ctx.rt.group.is_empty()
        && matches!(
            ctx.rt.plural,
            "pods" | "services" | "serviceaccounts" | "namespaces"
        );
    if pending || returns_object {
        return render(&ctx, 200, &obj);
    }
    let mut details = json!({"name": name, "kind": ctx.rt.plural,
                             "uid": obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null)});
    if !ctx.rt.group.is_empty() {
        details["group"] = json!(ctx.rt.group);
    }
    Ok(super::json(200, &success_status(details)))
}

/// Deletes one object (or starts its graceful/finalized deletion); returns its last state.
async fn delete_one(ctx: &Ctx, name: &str, options: &DeleteOptions) -> Result<Value> {
    let key = storage::key(ctx.rt, &ctx.info.namespace, name);
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
        let grace = strategy::for_resource(ctx.rt).graceful_delete_seconds(&current, options.grace);
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
            delete_op(&key)
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
            if ctx.rt.plural == "namespaces" && ctx.rt.group.is_empty() {
                next["status"]["phase"] = json!("Terminating");
            }
            if next == current {
                return Ok(current);
            }
            put_op(&key, storage::encode(&next)?)
        };
        if let Some(rev) = commit(ctx, &key, current_rv, op, &[], &release).await? {
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
    let snapshot = ctx.server.cache.resource(ctx.rt).list(&ctx.info.namespace);
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
    Ok(object(
        200,
        ctx.output,
        &json!({"kind": ctx.rt.list_kind(), "apiVersion": ctx.rt.api_version(),
                "metadata": {}, "items": items}),
    ))
}

/// Requests to a subresource.
pub async fn subresource(mut ctx: Ctx, sub: &'static Subresource) -> Result<Response<Body>> {
    let verb = ctx.info.verb.clone();
    match (sub.name, verb.as_str()) {
        ("status", "get") => super::read::get(ctx).await,
        ("status", "update") | ("finalize", "update") => {
            let (kind, api_version) = (ctx.rt.kind, ctx.rt.api_version());
            let obj = read_object(&mut ctx, kind, &api_version).await?;
            let pinned = rv_of(&obj);
            let finalize = sub.name == "finalize";
            update_with(&ctx, pinned, Fields::Record, |current| {
                if finalize {
                    // Only spec.finalizers changes.
                    let mut next = current.clone();
                    next["spec"]["finalizers"] = obj["spec"]["finalizers"].clone();
                    Ok(next)
                } else {
                    Ok(obj.clone())
                }
            })
            .await
        }
        ("status", "patch") => patch(ctx).await,
        ("scale", _) => super::scale::handle(ctx).await,
        ("binding", "create") => bind(ctx).await,
        ("eviction", "create") => {
            let name = ctx.info.name.clone();
            delete_one(&ctx, &name, &DeleteOptions::default()).await?;
            Ok(super::json(
                201,
                &success_status(json!({"name": name, "kind": "pods"})),
            ))
        }
        (other, _) => Err(ApiError::service_unavailable(format!(
            "{}/{other} is not served yet (it needs the kubelet or the token issuer)",
            ctx.rt.plural
        ))),
    }
}

/// `pods/{name}/binding`: sets `spec.nodeName` once (409 if already set) and the PodScheduled
/// condition, as upstream's `assignPod`.
async fn bind(mut ctx: Ctx) -> Result<Response<Body>> {
    let binding = read_object(&mut ctx, "Binding", "v1").await?;
    let name = ctx.info.name.clone();
    if !name_of(&binding).is_empty() && name_of(&binding) != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            name_of(&binding)
        )));
    }
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "Binding",
            "",
            &name,
            &[FieldError::required(
                &FieldPath::new("target").child("name"),
                "",
            )],
        ));
    }
    let now = generic::timestamp(ctx.server.now());
    update_with(&ctx, None, Fields::Record, |pod| {
        if let Some(existing) = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict(
                ctx.target(&name),
                &format!("pod {name} is already assigned to node \"{existing}\""),
            ));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict(
                ctx.target(&name),
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let mut pod = pod.clone();
        pod["spec"]["nodeName"] = json!(node);
        if let Some(ann) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            for (k, v) in ann {
                pod["metadata"]["annotations"][k] = v.clone();
            }
        }
        let mut conditions: Vec<Value> = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| c["type"] != "PodScheduled");
        conditions.push(json!({"type": "PodScheduled", "status": "True",
                               "lastProbeTime": null, "lastTransitionTime": now}));
        pod["status"]["conditions"] = json!(conditions);
        Ok(pod)
    })
    .await?;
    Ok(super::json(201, &success_status(Value::Null)))
}

/// Writes a whole new state of the request's object (for subresources that compute it), guarded
/// on the revision it was computed from. Returns the stored object.
pub async fn replace_object(ctx: &Ctx, next: Value) -> Result<Value> {
    let name = ctx.info.name.clone();
    let key = storage::key(ctx.rt, &ctx.info.namespace, &name);
    let current = fetch(ctx, &name).await?;
    let current_rv = rv_of(&current).unwrap_or(0);
    let mut obj = next;
    generic::prepare_update(ctx.rt, &mut obj, &current, "scale");
    record_update(ctx, &current, &mut obj);
    if no_op(&obj, &current) {
        return Ok(current);
    }
    validate(ctx, &obj, Some(&current))?;
    match commit(
        ctx,
        &key,
        current_rv,
        put_op(&key, storage::encode(&obj)?),
        &[],
        &[],
    )
    .await?
    {
        Some(rev) => {
            storage::set_resource_version(&mut obj, rev);
            Ok(obj)
        }
        None => Err(ApiError::conflict(
            ctx.target(&name),
            "the object has been modified; please apply your changes to the latest version and try again",
        )),
    }
}
