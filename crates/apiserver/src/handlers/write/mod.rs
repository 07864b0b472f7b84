//! Write requests: create, update (PUT), patch, delete and deletecollection, and the write
//! subresources (`status`, `scale`, `binding`, `finalize`, `eviction`, `token`). Each reads and
//! checks the request (body, type, namespace, options, `fieldValidation`), hands the write to
//! the [`registry`](crate::registry), and renders what it stored.
//!
//! # Layout
//! - this file: reading a create/update body, and field validation.
//! - [`create`]: POST and `generateName`.
//! - [`update`]: PUT and patches.
//! - [`delete`]: delete options, DELETE and deletecollection.
//! - [`subresource`]: `status`, `finalize`, `binding`, and whole-object replacement for `scale`.
//! - `eviction`, `token`: the Eviction and TokenRequest subresources.

mod create;
mod delete;
mod eviction;
mod subresource;
mod token;
mod update;

use http::header;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Ctx;
use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};

pub use create::create;
pub use delete::{delete, delete_collection};
pub use subresource::subresource;
pub use update::{patch, update};

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
