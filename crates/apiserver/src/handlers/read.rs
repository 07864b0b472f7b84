//! get and list. Gets read the store; lists are served from the watch cache at a revision that
//! honours `resourceVersion`/`resourceVersionMatch` (consistent by default, as upstream's
//! consistent list from cache), paged with `limit`/`continue` (later pages read the store at the
//! first page's revision), filtered by label and field selectors on the server, and rendered as
//! JSON, YAML, Table or PartialObjectMetadata.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use http::Response;
use serde_json::{Value, json};
use skiff_apimachinery::{fields, labels, table};
use skiff_store::{KeyRange, RangeRequest, StoreExt, prefix_end};

use super::{Body, Ctx, bytes_response, object};
use crate::cache::Cached;
use crate::conversion;
use crate::encoding::Output;
use crate::error::{ApiError, Result};
use crate::storage;
use crate::strategy::Strategy;

/// What a list or watch selects.
#[derive(Debug)]
pub struct Filter {
    pub labels: labels::Selector,
    pub fields: fields::Selector,
}

impl Filter {
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
    render_one(&ctx, &obj)
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

/// Renders one object in the negotiated output.
pub fn render_one(ctx: &Ctx, obj: &Value) -> Result<Response<Body>> {
    render(ctx, 200, obj)
}

/// Renders one stored object with `code`, in its served form.
pub fn render(ctx: &Ctx, code: u16, stored: &Value) -> Result<Response<Body>> {
    let converted;
    let obj = if conversion::needed(&ctx.rt) {
        converted = conversion::to_external(&ctx.rt, stored.clone());
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
        Output::PartialMetadata => super::json(code, &partial(obj)),
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
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    /// The revision of the first page; later pages read the store at it.
    rv: i64,
    /// The path (below the resource prefix) of the first object of the next page.
    start: String,
}

fn encode_continue(rv: i64, start: &str) -> String {
    let t = ContinueToken {
        rv,
        start: start.to_string(),
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&t).unwrap_or_default())
}

fn decode_continue(s: &str) -> Result<ContinueToken> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion",
            )
        })
}

fn parse_rv(s: &str) -> Result<i64> {
    s.parse::<i64>()
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {s:?}")))
}

pub async fn list(ctx: Ctx) -> Result<Response<Body>> {
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
        let token = decode_continue(token)?;
        let cache = ctx.cache()?;
        return match cache.list_at(&ctx.info.namespace, token.rv) {
            Some(snapshot) => page(&ctx, &filter, &snapshot, &token.start, limit),
            None => list_from_store(&ctx, &filter, token.rv, &token.start, limit).await,
        };
    }
    let cache = ctx.cache()?;
    match (rv, rv_match) {
        (_, m) if !m.is_empty() && !matches!(m, "Exact" | "NotOlderThan") => {
            return Err(ApiError::bad_request(format!(
                "unsupported resourceVersionMatch: {m:?}"
            )));
        }
        ("", "") => {
            ctx.server.cache.wait_fresh().await?;
        }
        ("", _) => {
            return Err(ApiError::bad_request(
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
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
    let snapshot = cache.list(&ctx.info.namespace);
    page(&ctx, &filter, &snapshot, "", limit)
}

/// One page of a cached snapshot, from the object at path `start` on.
fn page(
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
    for c in snapshot.objects[first..]
        .iter()
        .filter(|c| filter.matches(c))
    {
        if limit > 0 && items.len() == limit {
            next = Some(encode_continue(snapshot.revision, &c.path()));
            break;
        }
        items.push(c.clone());
    }
    render_list(ctx, snapshot.revision, &items, next.as_deref())
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
                next = Some(encode_continue(revision, &c.path()));
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
    }
    let revision = if revision == 0 {
        ctx.server.cache.revision()
    } else {
        revision
    };
    render_list(ctx, revision, &items, next.as_deref())
}

fn render_list(
    ctx: &Ctx,
    revision: i64,
    items: &[Arc<Cached>],
    cont: Option<&str>,
) -> Result<Response<Body>> {
    let rv = json!(revision.to_string());
    match ctx.output {
        Output::Json => {
            // Items are already serialized: splice them into the list without re-encoding.
            let mut meta = json!({"resourceVersion": rv});
            if let Some(c) = cont {
                meta["continue"] = json!(c);
            }
            let head = format!(
                "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
                ctx.rt.list_kind(),
                ctx.rt.api_version(),
                meta
            );
            let mut out = Vec::with_capacity(
                head.len() + items.iter().map(|c| c.json_len() + 1).sum::<usize>() + 2,
            );
            out.extend_from_slice(head.as_bytes());
            for (i, c) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if conversion::needed(&ctx.rt) {
                    out.extend_from_slice(&conversion::external_bytes(&ctx.rt, &c.json()));
                } else {
                    c.write_json(&mut out);
                }
            }
            out.extend_from_slice(b"]}");
            Ok(bytes_response(200, out, "application/json"))
        }
        Output::Table => {
            let objects = items
                .iter()
                .map(|c| c.object())
                .collect::<Result<Vec<_>>>()?;
            Ok(super::json(200, &table_of(ctx, &objects, &rv, cont)))
        }
        Output::PartialMetadata => {
            let objects = items
                .iter()
                .map(|c| c.object().map(|o| partial(&o)))
                .collect::<Result<Vec<_>>>()?;
            let mut meta = json!({"resourceVersion": rv});
            if let Some(c) = cont {
                meta["continue"] = json!(c);
            }
            Ok(super::json(
                200,
                &json!({"kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": objects}),
            ))
        }
        Output::Yaml => {
            let objects = items
                .iter()
                .map(|c| c.object())
                .collect::<Result<Vec<_>>>()?;
            let mut meta = json!({"resourceVersion": rv});
            if let Some(c) = cont {
                meta["continue"] = json!(c);
            }
            Ok(object(
                200,
                Output::Yaml,
                &json!({"kind": ctx.rt.list_kind(),
                "apiVersion": ctx.rt.api_version(), "metadata": meta, "items": objects}),
            ))
        }
    }
}
