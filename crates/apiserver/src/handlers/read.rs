//! get and list. Gets read the store; lists are served from the watch cache at a revision that
//! honours `resourceVersion`/`resourceVersionMatch` (consistent by default, as upstream's
//! consistent list from cache), paged with `limit`/`continue` (later pages read the store at the
//! first page's revision), filtered by label and field selectors on the server, and rendered as
//! JSON, YAML, Table or PartialObjectMetadata.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};
use skiff_apimachinery::{fields, labels, table};
use skiff_store::{KeyRange, RangeRequest, StoreExt, prefix_end};

use super::{Body, Ctx, object};
use crate::cache::Cached;
use crate::encoding::Output;
use crate::error::{ApiError, Result};
use crate::protobuf::order;
use crate::storage;
use crate::strategy::Strategy;

/// What a list or watch selects.
#[derive(Debug)]
pub struct Filter {
    pub labels: labels::Selector,
    pub fields: fields::Selector,
}

impl Filter {
    /// Whether the filter selects everything (only then does a page say how many remain, as
    /// upstream).
    pub fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Parses `labelSelector` and `fieldSelector`; a field the kind cannot select on is 400.
    pub fn from_query(ctx: &Ctx) -> Result<Self> {
        let labels = labels::Selector::parse(
            ctx.query
                .get("labelSelector")
                .map(String::as_str)
                .unwrap_or(""),
        )
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = fields::Selector::parse(
            ctx.query
                .get("fieldSelector")
                .map(String::as_str)
                .unwrap_or(""),
        )
        .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
        let supported = supported_fields(&*ctx.strategy);
        for r in fields.requirements() {
            if !supported.contains(&r.field.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    r.field
                )));
            }
        }
        Ok(Filter { labels, fields })
    }

    pub fn matches(&self, c: &Cached) -> bool {
        self.labels.matches(&c.labels) && self.fields.matches(|f| c.field(f))
    }
}

fn supported_fields(strategy: &dyn Strategy) -> Vec<&'static str> {
    let mut out = vec!["metadata.name", "metadata.namespace"];
    out.extend(strategy.fields(&json!({})).into_iter().map(|(f, _)| f));
    out
}

pub async fn get(ctx: Ctx) -> Result<Response<Body>> {
    let obj = fetch(&ctx, &ctx.info.name).await?;
    render_one(&ctx, &obj).await
}

/// The stored object named `name` in the request's namespace, or 404.
pub async fn fetch(ctx: &Ctx, name: &str) -> Result<Value> {
    let key = storage::key(&ctx.rt, &ctx.info.namespace, name);
    let Some(kv) = ctx.server.store.get(key.as_bytes()).await? else {
        return Err(ApiError::not_found(ctx.target(name)));
    };
    let mut obj = storage::decode(&kv)?;
    // Defaults on read (custom resources only) are the stored version's, whose strategy the
    // watch cache holds.
    if !ctx.rt.builtin {
        ctx.cache()?.strategy.default_on_read(&mut obj);
    }
    Ok(obj)
}

/// The stored object named `name` in the form handlers work on (converted from the version it
/// was stored in, when that may differ).
pub async fn fetch_internal(ctx: &Ctx, name: &str) -> Result<Value> {
    let stored = fetch(ctx, name).await?;
    if !ctx.server.conversion.needed(&ctx.rt) {
        return Ok(stored);
    }
    ctx.server.conversion.to_internal(&ctx.rt, stored).await
}

/// Renders one object in the negotiated output.
pub async fn render_one(ctx: &Ctx, obj: &Value) -> Result<Response<Body>> {
    render(ctx, 200, obj).await
}

/// Renders one object (stored or handled) with `code`, in its served form.
pub async fn render(ctx: &Ctx, code: u16, stored: &Value) -> Result<Response<Body>> {
    let converted;
    let obj = if ctx.server.conversion.needed(&ctx.rt) {
        converted = ctx
            .server
            .conversion
            .to_external(&ctx.rt, stored.clone())
            .await?;
        &converted
    } else {
        stored
    };
    Ok(match ctx.output {
        Output::Table => super::json(
            code,
            &table_of(
                ctx,
                std::slice::from_ref(obj),
                &obj["metadata"]["resourceVersion"],
                None,
            ),
        ),
        out @ Output::PartialMetadata { .. } => object(code, out, &partial(obj)),
        out => object(code, out, obj),
    })
}

fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
           "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// A `meta.k8s.io/v1` Table of `objects` with upstream's columns for the resource.
pub fn table_of(ctx: &Ctx, objects: &[Value], rv: &Value, cont: Option<&str>) -> Value {
    let now = ctx.server.now();
    let include = ctx
        .query
        .get("includeObject")
        .map(String::as_str)
        .unwrap_or("Metadata");
    let own = ctx.strategy.table_columns();
    let columns: Vec<Value> = own.clone().unwrap_or_else(|| {
        table::columns(&ctx.rt.group, &ctx.rt.plural)
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": c.type_, "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect()
    });
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let cells = match own {
                Some(_) => ctx.strategy.table_row(o, now),
                None => table::row(&ctx.rt.group, &ctx.rt.plural, o, now),
            };
            let mut row = json!({ "cells": cells });
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => row["object"] = partial(o),
            }
            row
        })
        .collect();
    let mut meta = json!({"resourceVersion": rv});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
           "columnDefinitions": columns, "rows": rows})
}

/// Where the next page of a paged list starts.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ContinueToken {
    /// The revision of the first page; later pages read the store at it (a negative one, as
    /// upstream's, reads the latest).
    pub(crate) rv: i64,
    /// The path (below the resource prefix) of the first object of the next page.
    pub(crate) start: String,
}

pub(crate) fn encode_continue(rv: i64, start: &str) -> String {
    let t = ContinueToken {
        rv,
        start: start.to_string(),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&t).unwrap_or_default())
}

/// Reads the `continue` token of a list whose objects' paths start with `within` (`ns/` for
/// one namespace, empty for all), refusing with 400 what upstream's `storage.DecodeContinue`
/// refuses: revision 0, an empty start, a start that is not a clean path. The token is the
/// client's to forge and the store is read from its start to the end of the list's prefix, so
/// a start outside the list (another namespace's objects) is refused too.
pub(crate) fn decode_continue(s: &str, within: &str) -> Result<ContinueToken> {
    let invalid = |why: String| ApiError::bad_request(format!("invalid continue token: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|e| invalid(format!("continue key is not valid: {e}")))?;
    let token: ContinueToken = serde_json::from_slice(&bytes)
        .map_err(|e| invalid(format!("continue key is not valid: {e}")))?;
    if token.rv == 0 {
        return Err(invalid(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    if token.start.is_empty() {
        return Err(invalid(
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)".into(),
        ));
    }
    let clean = token
        .start
        .split('/')
        .all(|segment| !matches!(segment, "" | "." | ".."));
    if !clean || !token.start.starts_with(within) {
        return Err(invalid(format!(
            "continue key is not valid: {}",
            token.start
        )));
    }
    Ok(token)
}

/// Upstream's `ValidateListOptions` for a list (`watch` false) or a watch: a 422 `Invalid`
/// `ListOptions` naming each option that does not go with the others.
pub(super) fn validate_list_options(ctx: &Ctx, watch: bool) -> Result<()> {
    let q = |k: &str| ctx.query.get(k).map(String::as_str).unwrap_or("");
    let (rv, rv_match, cont) = (
        q("resourceVersion"),
        q("resourceVersionMatch"),
        q("continue"),
    );
    let send_initial = ctx.query.contains_key("sendInitialEvents");
    let at = FieldPath::new("resourceVersionMatch");
    let mut errs = Vec::new();
    if watch {
        if send_initial && rv_match != "NotOlderThan" {
            errs.push(FieldError::forbidden(
                &at,
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !rv_match.is_empty() {
            if !send_initial {
                errs.push(FieldError::forbidden(
                    &at,
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if rv_match != "NotOlderThan" {
                errs.push(FieldError::not_supported(&at, rv_match, &["NotOlderThan"]));
            }
        }
    } else {
        if !rv_match.is_empty() {
            if rv.is_empty() {
                errs.push(FieldError::forbidden(
                    &at,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !matches!(rv_match, "Exact" | "NotOlderThan") {
                errs.push(FieldError::not_supported(
                    &at,
                    rv_match,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if rv_match == "Exact" && rv == "0" {
                errs.push(FieldError::forbidden(
                    &at,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial {
            errs.push(FieldError::forbidden(
                &FieldPath::new("sendInitialEvents"),
                "sendInitialEvents is forbidden for list",
            ));
        }
    }
    if !rv_match.is_empty() && !cont.is_empty() {
        errs.push(FieldError::forbidden(
            &at,
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("ListOptions", "meta.k8s.io", "", &errs))
    }
}

fn parse_rv(s: &str) -> Result<i64> {
    s.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

pub async fn list(ctx: Ctx) -> Result<Response<Body>> {
    validate_list_options(&ctx, false)?;
    let filter = Filter::from_query(&ctx)?;
    let limit = match ctx.query.get("limit") {
        Some(l) => l
            .parse::<usize>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?,
        None => 0,
    };
    let rv = ctx
        .query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let rv_match = ctx
        .query
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    if let Some(token) = ctx.query.get("continue").filter(|c| !c.is_empty()) {
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let within = if ctx.rt.namespaced && !ctx.info.namespace.is_empty() {
            format!("{}/", ctx.info.namespace)
        } else {
            String::new()
        };
        let token = decode_continue(token, &within)?;
        let cache = ctx.cache()?;
        return match cache.list_at(&ctx.info.namespace, &filter.fields, token.rv) {
            Some(snapshot) => page(&ctx, &filter, &snapshot, &token.start, limit).await,
            None => list_from_store(&ctx, &filter, token.rv, &token.start, limit).await,
        };
    }
    let cache = ctx.cache()?;
    match (rv, rv_match) {
        ("", _) => {
            ctx.server.cache.wait_fresh().await?;
        }
        (rv, "Exact") => {
            let rv = parse_rv(rv)?;
            return list_from_store(&ctx, &filter, rv, "", limit).await;
        }
        ("0", _) => {}
        (rv, _) => {
            ctx.server.cache.wait_for(parse_rv(rv)?).await?;
        }
    }
    let snapshot = cache.list_selected(&ctx.info.namespace, &filter.fields);
    page(&ctx, &filter, &snapshot, "", limit).await
}

/// One page of a cached snapshot, from the object at path `start` on.
async fn page(
    ctx: &Ctx,
    filter: &Filter,
    snapshot: &crate::cache::Snapshot,
    start: &str,
    limit: usize,
) -> Result<Response<Body>> {
    let first = if start.is_empty() {
        0
    } else {
        snapshot
            .objects
            .partition_point(|c| c.path().as_str() < start)
    };
    let mut items: Vec<Arc<Cached>> = Vec::new();
    let mut next = None;
    for (i, c) in snapshot.objects[first..].iter().enumerate() {
        if !filter.matches(c) {
            continue;
        }
        if limit > 0 && items.len() == limit {
            let remaining = snapshot.objects.len() - first - i;
            next = Some(Page {
                token: encode_continue(snapshot.revision, &c.path()),
                remaining: filter.is_everything().then_some(remaining),
            });
            break;
        }
        items.push(c.clone());
    }
    render_list(ctx, snapshot.revision, items, next.as_ref()).await
}

/// Where a paged list goes on: the continue token and, for an unfiltered list, how many
/// objects follow (`remainingItemCount`).
struct Page {
    token: String,
    remaining: Option<usize>,
}

/// A page read from the store at `revision`, starting at `start` (a path below the prefix).
async fn list_from_store(
    ctx: &Ctx,
    filter: &Filter,
    revision: i64,
    start: &str,
    limit: usize,
) -> Result<Response<Body>> {
    let prefix = storage::prefix(&ctx.rt, &ctx.info.namespace);
    let resource_prefix = storage::prefix(&ctx.rt, "");
    let end = prefix_end(prefix.as_bytes());
    let mut from = if start.is_empty() {
        prefix.clone().into_bytes()
    } else {
        format!("{resource_prefix}{start}").into_bytes()
    };
    let mut items = Vec::new();
    let mut next = None;
    let mut from_first_page = true;
    loop {
        let page = ctx
            .server
            .store
            .range(RangeRequest {
                range: KeyRange {
                    key: Bytes::from(from.clone()),
                    range_end: end.clone(),
                },
                revision,
                limit: if limit > 0 { (limit + 1) as i64 } else { 0 },
                ..Default::default()
            })
            .await
            .map_err(|e| match e {
                skiff_store::Error::Compacted { .. } => ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                ),
                e => e.into(),
            })?;
        for kv in &page.kvs {
            let c = Cached::from_stored(&*ctx.strategy, &kv.value, kv.mod_revision, &kv.key)?;
            if !filter.matches(&c) {
                continue;
            }
            if limit > 0 && items.len() == limit {
                // The range counts every key from where it started, this page's included.
                let remaining = usize::try_from(page.count)
                    .unwrap_or(0)
                    .saturating_sub(items.len());
                next = Some(Page {
                    token: encode_continue(revision, &c.path()),
                    remaining: (filter.is_everything() && from_first_page).then_some(remaining),
                });
                break;
            }
            items.push(Arc::new(c));
        }
        if next.is_some() || !page.more || page.kvs.is_empty() {
            break;
        }
        let mut last = page
            .kvs
            .last()
            .map(|kv| kv.key.to_vec())
            .unwrap_or_default();
        last.push(0);
        from = last;
        from_first_page = false;
    }
    let revision = if revision == 0 {
        ctx.server.cache.revision()
    } else {
        revision
    };
    render_list(ctx, revision, items, next.as_ref()).await
}

/// A list's `metadata`: its resourceVersion and, for a page, where the next one starts.
fn list_meta(rv: &Value, next: Option<&Page>) -> Value {
    let mut meta = json!({ "resourceVersion": rv });
    if let Some(p) = next {
        meta["continue"] = json!(p.token);
        if let Some(n) = p.remaining {
            meta["remainingItemCount"] = json!(n);
        }
    }
    meta
}

async fn render_list(
    ctx: &Ctx,
    revision: i64,
    items: Vec<Arc<Cached>>,
    next: Option<&Page>,
) -> Result<Response<Body>> {
    let rv = json!(revision.to_string());
    let cont = next.map(|p| p.token.as_str());
    // Items served in another form than stored are converted together (one webhook call).
    let converted = if ctx.server.conversion.needed(&ctx.rt) {
        let objects = items
            .iter()
            .map(|c| c.object())
            .collect::<Result<Vec<_>>>()?;
        Some(
            ctx.server
                .conversion
                .to_external_all(&ctx.rt, objects)
                .await?,
        )
    } else {
        None
    };
    let objects = match (ctx.output, converted) {
        (Output::Json, converted) => {
            return Ok(json_list(ctx, &rv, next, items, converted));
        }
        (_, Some(objects)) => objects,
        (_, None) => items
            .iter()
            .map(|c| c.object())
            .collect::<Result<Vec<_>>>()?,
    };
    match ctx.output {
        Output::Table => Ok(super::json(200, &table_of(ctx, &objects, &rv, cont))),
        out @ Output::PartialMetadata { .. } => {
            let objects: Vec<Value> = objects.iter().map(partial).collect();
            let meta = list_meta(&rv, next);
            Ok(object(
                200,
                out,
                &json!({"kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": objects}),
            ))
        }
        out => {
            let meta = list_meta(&rv, next);
            Ok(object(
                200,
                out,
                &json!({"kind": ctx.rt.list_kind(),
                "apiVersion": ctx.rt.api_version(), "metadata": meta, "items": objects}),
            ))
        }
    }
}

/// A JSON list of `items`, spliced from their serialized form (or from `converted`, their
/// served form, when that differs) without re-encoding. A list longer than one chunk is
/// streamed as the connection takes it (as upstream's streaming list encoder), so a list of
/// every pod in a large cluster is never held whole in memory.
fn json_list(
    ctx: &Ctx,
    rv: &Value,
    next: Option<&Page>,
    items: Vec<Arc<Cached>>,
    converted: Option<Vec<Value>>,
) -> Response<Body> {
    let mut head = order::to_vec(&json!({"kind": ctx.rt.list_kind(),
        "apiVersion": ctx.rt.api_version(), "metadata": list_meta(rv, next)}));
    head.pop(); // the closing brace: items follow metadata in every list kind
    head.extend_from_slice(b",\"items\":[");
    let mut chunks = ListChunks {
        head,
        items,
        converted,
        written: 0,
        done: false,
    };
    let first = chunks.next().unwrap_or_default(); // the head, at least
    let body = if chunks.done {
        super::full(first)
    } else {
        let frames =
            futures::stream::iter(std::iter::once(first).chain(chunks)).map(|b| Ok(Frame::data(b)));
        BodyExt::boxed(StreamBody::new(frames))
    };
    super::response(200, body, "application/json")
}

/// How much of a list is serialized at a time.
const LIST_CHUNK_BYTES: usize = 256 * 1024;

/// The chunks of a JSON list: its head, then items until a chunk holds `LIST_CHUNK_BYTES`,
/// then the closing brackets with the last items.
struct ListChunks {
    head: Vec<u8>,
    items: Vec<Arc<Cached>>,
    converted: Option<Vec<Value>>,
    written: usize,
    done: bool,
}

impl Iterator for ListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = std::mem::take(&mut self.head);
        out.reserve(LIST_CHUNK_BYTES);
        while out.len() < LIST_CHUNK_BYTES && self.written < self.items.len() {
            let i = self.written;
            if i > 0 {
                out.push(b',');
            }
            match &self.converted {
                Some(objects) => order::write(&objects[i], &mut out),
                None => self.items[i].write_json(&mut out),
            }
            self.written += 1;
        }
        if self.written == self.items.len() {
            out.extend_from_slice(b"]}");
            self.done = true;
        }
        Some(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_read_back_inside_their_list() {
        let t = decode_continue(&encode_continue(7, "ns/b"), "ns/").unwrap();
        assert_eq!(
            t,
            ContinueToken {
                rv: 7,
                start: "ns/b".into()
            }
        );
        assert!(decode_continue(&encode_continue(7, "other/b"), "").is_ok());
    }

    #[test]
    fn forged_continue_tokens_are_bad_requests() {
        // a token starting in another namespace read that namespace's objects from the store
        for (rv, start) in [
            (7, "other/b"),
            (7, "ns/../b"),
            (7, "ns//b"),
            (7, ""),
            (0, "ns/b"),
        ] {
            let err = decode_continue(&encode_continue(rv, start), "ns/").unwrap_err();
            assert_eq!(err.code, 400, "{rv} {start:?}");
        }
        assert_eq!(decode_continue("!", "").unwrap_err().code, 400);
    }
}
