//! Write subresources: `status`, `approval`, `finalize`, `resize` and a pod's
//! `ephemeralcontainers` (updates of one part of the object, which the kind's strategy keeps
//! to that part), `binding` (a pod's node, once), `eviction` (a delete) and `token` (a service
//! account token).

use http::Response;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::Subresource;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::read_object;
use super::update::patch;
use crate::error::{ApiError, Result, Target};
use crate::handlers::read::render_one;
use crate::handlers::{Body, Ctx, success_status};
use crate::registry::{self, Fields, name_of, rv_of};
use crate::strategy::generic;

/// Requests to a subresource.
pub async fn subresource(mut ctx: Ctx, sub: &Subresource) -> Result<Response<Body>> {
    let verb = ctx.info.verb.clone();
    match (sub.name.as_str(), verb.as_str()) {
        ("status" | "approval" | "resize" | "ephemeralcontainers", "get") => {
            crate::handlers::read::get(ctx).await
        }
        ("status" | "approval" | "resize" | "ephemeralcontainers" | "finalize", "update") => {
            let (kind, api_version) = (ctx.rt.kind.clone(), ctx.rt.api_version());
            let obj = read_object(&mut ctx, &kind, &api_version).await?;
            let pinned = rv_of(&obj);
            let finalize = sub.name == "finalize";
            let updated = registry::update(&ctx, pinned, Fields::Record, |current| {
                if finalize {
                    // Only spec.finalizers changes.
                    let mut next = current.clone();
                    next["spec"]["finalizers"] = obj["spec"]["finalizers"].clone();
                    Ok(next)
                } else {
                    Ok(obj.clone())
                }
            })
            .await?;
            render_one(&ctx, &updated).await
        }
        ("status" | "approval" | "resize" | "ephemeralcontainers", "patch") => patch(ctx).await,
        ("scale", _) => crate::handlers::scale::handle(ctx).await,
        ("binding", "create") => bind(ctx).await,
        ("token", "create") => super::token::create(ctx).await,
        ("eviction", "create") => super::eviction::evict(ctx).await,
        ("log", "get") => crate::handlers::kubelet::log::get(ctx).await,
        ("exec" | "attach" | "portforward", _) => {
            crate::handlers::kubelet::connect::connect(ctx).await
        }
        ("proxy", _) => crate::handlers::proxy::proxy(ctx).await,
        (other, _) => Err(ApiError::service_unavailable(format!(
            "{}/{other} is not served yet (it needs the kubelet)",
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
    registry::update(&ctx, None, Fields::Record, |pod| {
        if let Some(why) = crate::strategy::pod::binding_refusal(pod, &name) {
            // upstream's `assignPod` answers a Conflict on pods/binding
            let target = Target {
                group: "",
                resource: "pods/binding",
                name: &name,
            };
            return Err(ApiError::conflict(target, &why));
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
    Ok(crate::handlers::json(201, &success_status(Value::Null)))
}
