//! POST: a new object (named, or named from `generateName`), and the create path that
//! server-side apply of a missing object shares.

use http::Response;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{
    Fields, attrs, commit, encode, name_of, put_op, read_object, redecode_patched,
    reservation_diff, validate,
};
use crate::admission::Operation;
use crate::allocator;
use crate::error::{ApiError, Result};
use crate::handlers::apply::record_update;
use crate::handlers::read::render;
use crate::handlers::{Body, Ctx};
use crate::storage;
use crate::strategy::certificatesigningrequest as csr;
use crate::strategy::{self, generic};
use skiff_store::StoreExt;

use super::MAX_RETRIES;

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

pub async fn create(mut ctx: Ctx) -> Result<Response<Body>> {
    let (kind, api_version) = (ctx.rt.kind.clone(), ctx.rt.api_version());
    let mut obj = read_object(&mut ctx, &kind, &api_version).await?;
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
                    &ctx.rt.kind,
                    &ctx.rt.group,
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
/// objects); `obj` is in the request's version.
pub(in crate::handlers) async fn create_object(
    ctx: &Ctx,
    obj: Value,
    fields: Fields,
) -> Result<Response<Body>> {
    ctx.strategy.check_create()?;
    let mut obj = if ctx.server.conversion.needed(&ctx.rt) {
        ctx.server.conversion.to_internal(&ctx.rt, obj).await?
    } else {
        obj
    };
    let name = name_of(&obj).to_string();
    generic::prepare_create(&ctx.rt, &mut obj, ctx.server.now());
    ctx.strategy.prepare_for_create(&mut obj);
    if (ctx.rt.group.as_str(), ctx.rt.plural.as_str()) == (csr::GROUP, csr::PLURAL) {
        csr::set_requester(&mut obj, &ctx.user);
    }
    if fields == Fields::Record {
        record_update(ctx, &json!({}), &mut obj);
    }
    let a = attrs(ctx, Operation::Create, &name, None);
    ctx.server.admission.mutate(&a, Some(&mut obj)).await?;
    redecode_patched(ctx, &a, &mut obj);
    if ctx.rt.group.is_empty() && ctx.rt.plural == "pods" && ctx.info.subresource.is_empty() {
        strategy::pod::set_qos_class(&mut obj);
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
        let value = encode(ctx, &obj).await?;
        if ctx.dry_run() {
            // As upstream's dry run, everything but the write: a name in use is a conflict.
            if ctx.server.store.get(key.as_bytes()).await?.is_some() {
                return Err(ApiError::already_exists(ctx.target(&name)));
            }
            return render(ctx, 201, &obj).await;
        }
        let (reserve, _) = reservation_diff(Some(&obj), None);
        let op = put_op(&key, value);
        let sent = ctx.server.now();
        if let Some(rev) = commit(ctx, &key, 0, op, &reserve, &[]).await? {
            storage::set_resource_version(&mut obj, rev);
            crate::trace::wrote(ctx, None, Some(&obj), rev, sent);
            return render(ctx, 201, &obj).await;
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
