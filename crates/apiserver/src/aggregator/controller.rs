//! The aggregator's loop inside the API server. Each pass, from the watch cache:
//!
//! 1. publishes `extension-apiserver-authentication` ([`super::authentication`]);
//! 2. creates, corrects or deletes the Local APIServices ([`super::autoregister`]);
//! 3. checks every APIService ([`super::available`]) and writes its `Available` condition
//!    when that changed (upstream's reasons and messages);
//! 4. publishes the [`State`] the proxy, discovery and OpenAPI read.
//!
//! A pass runs when an APIService or a CustomResourceDefinition changes, when the Service or
//! an EndpointSlice of a remote APIService does, and at least every [`super::Aggregator::recheck`].
//! Writes go through the same handlers as clients' (`Ctx::internal`), as upstream's loopback
//! client does.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use serde_json::Value;
use tokio::sync::broadcast::{Receiver, error::RecvError};

use super::autoregister::{self, Action};
use super::available;
use super::registration::ApiService;
use super::{State, authentication, discovery};
use crate::cache::{CacheEvent, Cached, WatchStart};
use crate::error::Result;
use crate::handlers::Ctx;
use crate::registry::{self, DeleteOptions, Fields};
use crate::server::ApiServer;
use crate::services::{CachedServices, SERVICE_NAME_LABEL};
use crate::strategy::generic;

/// Runs the loop until the server is gone.
pub fn spawn(server: Weak<ApiServer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut starting = true;
        loop {
            let Some(strong) = server.upgrade() else {
                return;
            };
            let Some((api_services, mut api_rx)) = watch(&strong, autoregister::resource()) else {
                return;
            };
            let api_services: Vec<Value> = api_services
                .iter()
                .filter_map(|c| c.object().ok())
                .collect();
            let crds_rt =
                skiff_apimachinery::catalog::lookup(crate::crd::GROUP, "v1", crate::crd::PLURAL)
                    .expect("CRDs are built in");
            let Some((crds, mut crd_rx)) = watch(&strong, crds_rt) else {
                return;
            };
            let crds: Vec<autoregister::CrdVersions> =
                crds.iter().filter_map(|c| c.decode().ok()).collect();
            let services_rt =
                skiff_apimachinery::catalog::lookup("", "v1", "services").expect("built in");
            let slices_rt =
                skiff_apimachinery::catalog::lookup("discovery.k8s.io", "v1", "endpointslices")
                    .expect("built in");
            let (Some((_, mut svc_rx)), Some((_, mut slice_rx))) =
                (watch(&strong, services_rt), watch(&strong, slices_rt))
            else {
                return;
            };
            match sync(&strong, starting, &api_services, &crds).await {
                Ok(()) => starting = false,
                Err(e) => tracing::warn!(error = %e, "api aggregation"),
            }
            let remote: HashSet<(String, String)> = strong
                .aggregator
                .state()
                .services
                .values()
                .filter_map(|s| s.service.as_ref())
                .map(|s| (s.namespace.clone(), s.name.clone()))
                .collect();
            let recheck = tokio::time::sleep(strong.aggregator.recheck());
            drop(strong);
            tokio::pin!(recheck);
            let concerns_service =
                |c: &Cached| remote.contains(&(c.namespace.clone(), c.name.clone()));
            let concerns_slice = |c: &Cached| {
                c.labels
                    .get(SERVICE_NAME_LABEL)
                    .is_some_and(|n| remote.contains(&(c.namespace.clone(), n.clone())))
            };
            loop {
                let next = tokio::select! {
                    e = api_rx.recv() => relevant(e, |_| true),
                    e = crd_rx.recv() => relevant(e, |_| true),
                    e = svc_rx.recv() => relevant(e, concerns_service),
                    e = slice_rx.recv() => relevant(e, concerns_slice),
                    () = &mut recheck => Wake::Pass,
                };
                match next {
                    Wake::Pass => break,
                    Wake::Wait if server.strong_count() > 0 => continue,
                    Wake::Wait | Wake::Stop => return,
                }
            }
        }
    })
}

/// What one cache event asks of the loop.
enum Wake {
    /// Run a pass.
    Pass,
    /// Nothing that concerns the aggregator: keep waiting.
    Wait,
    /// The cache is gone (the server stopped).
    Stop,
}

fn relevant(
    event: std::result::Result<CacheEvent, RecvError>,
    concerns: impl Fn(&Cached) -> bool,
) -> Wake {
    match event {
        Ok(CacheEvent::Object { object, prev, .. }) => {
            if concerns(&object) || prev.is_some_and(|p| concerns(&p)) {
                Wake::Pass
            } else {
                Wake::Wait
            }
        }
        Ok(CacheEvent::Progress(_)) => Wake::Wait,
        // missed events: look at everything again
        Err(RecvError::Lagged(_)) => Wake::Pass,
        Err(RecvError::Closed) => Wake::Stop,
    }
}

/// The objects of a type and a receiver of its changes from that point.
fn watch(
    server: &ApiServer,
    rt: &skiff_apimachinery::catalog::ResourceType,
) -> Option<(Vec<Arc<Cached>>, Receiver<CacheEvent>)> {
    let cache = server.cache.get(rt)?;
    let Some(WatchStart::Snapshot(snapshot, rx)) = cache.watch("", None) else {
        return None;
    };
    Some((snapshot.objects, rx))
}

fn api_service_ctx(server: &Arc<ApiServer>, verb: &str, name: &str, subresource: &str) -> Ctx {
    Ctx::internal_on(
        server,
        (super::GROUP, super::PLURAL),
        verb,
        name,
        subresource,
    )
}

/// One pass; the first error is returned after everything else was tried.
async fn sync(
    server: &Arc<ApiServer>,
    starting: bool,
    api_services: &[Value],
    crds: &[autoregister::CrdVersions],
) -> Result<()> {
    let mut first_error = None;
    let mut keep = |r: Result<()>| {
        if let Err(e) = r
            && first_error.is_none()
        {
            first_error = Some(e);
        }
    };
    if let Some(options) = &server.aggregator.options {
        keep(authentication::ensure(server, options).await);
    }
    let builtin: Vec<(&str, &str)> = skiff_apimachinery::catalog::builtins()
        .iter()
        .map(|r| (r.group.as_str(), r.version.as_str()))
        .collect();
    let wanted = autoregister::wanted(builtin, crds);
    for action in autoregister::plan(&wanted, api_services, starting) {
        keep(apply(server, action).await);
    }
    let services = CachedServices(server.cache.clone());
    let checks = api_services.iter().map(|object| {
        let services = services.clone();
        async move {
            let s = ApiService::from_object(object);
            let (condition, list) = available::check(&server.aggregator, &services, &s).await;
            (object, s, condition, list)
        }
    });
    let mut state = State::default();
    for (object, mut s, condition, list) in futures::future::join_all(checks).await {
        let wanted = generic::Condition {
            type_: "Available",
            status: condition.status,
            reason: condition.reason,
            message: &condition.message,
        };
        if !wanted.is_in(object) {
            let resource = (super::GROUP, super::PLURAL);
            keep(registry::write_condition(server, resource, &s.name, &wanted).await);
        }
        s.available = condition.status == "True";
        if s.service.is_some() {
            let doc = match &list {
                Some(list) => discovery::version_discovery(&s.group, &s.version, list),
                None => discovery::stale(&s.version),
            };
            state.discovery.insert(s.name.clone(), doc);
        }
        state.services.insert(s.name.clone(), s);
    }
    server.aggregator.publish(state);
    first_error.map_or(Ok(()), Err)
}

async fn apply(server: &Arc<ApiServer>, action: Action) -> Result<()> {
    let result = match action {
        Action::Create(object) => {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let ctx = api_service_ctx(server, "create", &name, "");
            match registry::create(&ctx, object, Fields::Record).await {
                Err(e) if e.code == 409 => return Ok(()),
                other => other.map(|_| ()),
            }
        }
        Action::Update(object) => {
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let ctx = api_service_ctx(server, "update", &name, "");
            registry::update(&ctx, None, Fields::Record, |current| {
                let mut next = current.clone();
                next["spec"] = object["spec"].clone();
                let mut labels = current
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                labels.insert(
                    autoregister::AUTOMANAGED.into(),
                    object["metadata"]["labels"][autoregister::AUTOMANAGED].clone(),
                );
                next["metadata"]["labels"] = Value::Object(labels);
                Ok(next)
            })
            .await
            .map(|_| ())
        }
        Action::Delete(name) => {
            let ctx = api_service_ctx(server, "delete", &name, "");
            registry::delete(&ctx, &name, &DeleteOptions::default())
                .await
                .map(|_| ())
        }
    };
    match result {
        Err(e) if e.code == 404 => Ok(()),
        other => other,
    }
}
