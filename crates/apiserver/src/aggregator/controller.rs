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

use super::autoregister::{self, Action};
use super::available;
use super::registration::ApiService;
use super::{State, authentication, discovery};
use crate::cache::Cached;
use crate::error::Result;
use crate::handlers::Ctx;
use crate::registry::{self, DeleteOptions, Fields};
use crate::server::ApiServer;
use crate::services::{CachedServices, SERVICE_NAME_LABEL};
use crate::strategy::generic;

/// Runs the loop until the server is gone.
pub fn spawn(server: Weak<ApiServer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let lookup = |group, plural| {
            skiff_apimachinery::catalog::lookup(group, "v1", plural).expect("built in")
        };
        let types = [
            autoregister::resource(),
            lookup(crate::crd::GROUP, crate::crd::PLURAL),
            lookup("", "services"),
            lookup("discovery.k8s.io", "endpointslices"),
        ];
        let mut starting = true;
        loop {
            let Some(strong) = server.upgrade() else {
                return;
            };
            let Some(mut changes) = strong.cache.subscribe(&types) else {
                return;
            };
            let api_services: Vec<Value> = changes.snapshots[0]
                .objects
                .iter()
                .filter_map(|c| c.object().ok())
                .collect();
            let crds: Vec<autoregister::CrdVersions> = changes.snapshots[1]
                .objects
                .iter()
                .filter_map(|c| c.decode().ok())
                .collect();
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
            // every APIService and CRD change; the Services of remote APIServices, and their
            // EndpointSlices
            let concerns = |index: usize, c: &Cached| {
                let service = match index {
                    2 => c.name.as_str(),
                    3 => match c.labels.get(SERVICE_NAME_LABEL) {
                        Some(name) => name,
                        None => return false,
                    },
                    _ => return true,
                };
                remote.contains(&(c.namespace.clone(), service.to_string()))
            };
            let changed = tokio::select! {
                changed = changes.changed_if(concerns) => changed,
                () = recheck => true,
            };
            if !changed {
                return;
            }
        }
    })
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
