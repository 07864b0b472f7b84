//! The `scale` subresource (`kubectl scale`): an `autoscaling/v1` Scale view of a workload's
//! `spec.replicas`, `status.replicas` and selector (or of the fields a custom resource names);
//! writes change only the spec's replicas.

use http::Response;
use serde_json::{Value, json};
use skiff_apimachinery::labels;
use skiff_apimachinery::patch::{self, PatchType};

use super::read::fetch_internal;
use super::{Body, Ctx};
use crate::encoding::{self, BodyFormat};
use crate::error::{ApiError, Result};
use crate::strategy::ScalePaths;

/// The Scale of a workload, or of a custom resource with its `paths`.
pub fn scale_of(obj: &Value, paths: Option<&ScalePaths>) -> Value {
    let meta = &obj["metadata"];
    let (spec_replicas, status_replicas) = match paths {
        Some(p) => (p.spec_replicas.as_str(), p.status_replicas.as_str()),
        None => ("/spec/replicas", "/status/replicas"),
    };
    let selector = obj.pointer("/spec/selector");
    let selector = if let Some(p) = paths {
        p.label_selector
            .as_deref()
            .and_then(|at| obj.pointer(at))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    } else if obj["kind"] == "ReplicationController" {
        // A ReplicationController's selector is a plain label map.
        let pairs = selector
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()));
        labels::Selector::from_set(pairs).to_string()
    } else {
        selector
            .and_then(|s| labels::Selector::from_label_selector(s).ok())
            .map(|s| s.to_string())
            .unwrap_or_default()
    };
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                     "resourceVersion": meta["resourceVersion"],
                     "creationTimestamp": meta["creationTimestamp"]},
        "spec": {"replicas": obj.pointer(spec_replicas).cloned().unwrap_or(json!(0))},
        "status": {"replicas": obj.pointer(status_replicas).cloned().unwrap_or(json!(0)),
                   "selector": selector},
    })
}

pub async fn handle(mut ctx: Ctx) -> Result<Response<Body>> {
    let current = fetch_internal(&ctx, &ctx.info.name.clone()).await?;
    let paths = ctx.strategy.scale_paths().cloned();
    let scale = scale_of(&current, paths.as_ref());
    let wanted = match ctx.info.verb.as_str() {
        "get" => return Ok(super::json(200, &scale)),
        "update" => {
            let format = BodyFormat::from_content_type(ctx.header(http::header::CONTENT_TYPE))?;
            let body = ctx.body().await?;
            encoding::expect_object(encoding::decode(format, &body)?)?
        }
        "patch" => {
            let ct = ctx
                .header(http::header::CONTENT_TYPE)
                .unwrap_or("")
                .to_string();
            let kind = PatchType::from_content_type(&encoding::media_type(&ct))
                .ok_or_else(|| ApiError::unsupported_media_type(&ct))?;
            let body = ctx.body().await?;
            patch::apply("autoscaling", "Scale", &scale, kind, &body)
                .map_err(|e| ApiError::bad_request(e.to_string()))?
        }
        v => return Err(ApiError::method_not_supported(v, "Scale")),
    };
    let replicas = wanted
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("spec.replicas must be an integer"))?;
    let pinned = wanted
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok());
    let rv = current["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse::<i64>().ok());
    if pinned.is_some() && pinned != rv {
        return Err(ApiError::conflict(
            ctx.target(&ctx.info.name),
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    let mut next = current.clone();
    let at = paths
        .as_ref()
        .map_or("/spec/replicas", |p| &p.spec_replicas);
    set_at(&mut next, at, json!(replicas));
    let resp = crate::registry::replace(&ctx, next).await?;
    Ok(super::json(200, &scale_of(&resp, paths.as_ref())))
}

/// Sets the value at JSON pointer `at`, creating the objects on the way.
fn set_at(obj: &mut Value, at: &str, value: Value) {
    let mut here = obj;
    for part in at.split('/').skip(1) {
        if !here.is_object() {
            *here = json!({});
        }
        here = here
            .as_object_mut()
            .expect("made an object above")
            .entry(part.to_string())
            .or_insert(Value::Null);
    }
    *here = value;
}
