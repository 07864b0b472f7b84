//! Discovery: what groups, versions and resources exist. The legacy documents (`/api`,
//! `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`) and the aggregated form
//! (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) that kubectl ≥ 1.30 asks for on `/api` and
//! `/apis`. All are built from one snapshot of the registry, so a type installed or removed while
//! serving appears or disappears in every document at once.

use http::Method;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::{Catalog, ResourceType};

use super::{Body, bytes_response, json};
use crate::aggregator::State;
use crate::aggregator::discovery::stale;
use crate::aggregator::registration::{DiscoveryGroup, Served, discovery_order, name_of};
use crate::request::RequestInfo;
use crate::server::ApiServer;

const AGGREGATED_V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const AGGREGATED_V2BETA1: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";

/// Answers a discovery path, or `None` when the path is not discovery.
pub fn handle(
    server: &ApiServer,
    method: &Method,
    info: &RequestInfo,
    accept: Option<&str>,
) -> Option<http::Response<Body>> {
    if method != Method::GET {
        return None;
    }
    let path = info.path.trim_end_matches('/');
    let legacy = path == "/api" || path.starts_with("/api/");
    if !(legacy || path == "/apis" || path.starts_with("/apis/")) {
        return None;
    }
    let catalog = server.registry.snapshot();
    let state = server.aggregator.state();
    let parts: Vec<&str> = info.parts.iter().map(String::as_str).collect();
    match (legacy, parts.as_slice()) {
        (true, []) => Some(match aggregated_version(accept) {
            Some(v) => aggregated(&catalog, &state, v, true),
            None => json(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                        "serverAddress": ""}]}),
            ),
        }),
        (true, ["v1"]) => Some(json(200, &resource_list(&catalog, "", "v1"))),
        (false, []) => Some(match aggregated_version(accept) {
            Some(v) => aggregated(&catalog, &state, v, false),
            None => json(
                200,
                &json!({"kind": "APIGroupList", "apiVersion": "v1",
                        "groups": discovery_order(&catalog, &state).iter().map(group)
                                      .collect::<Vec<_>>()}),
            ),
        }),
        (false, [g]) => discovery_order(&catalog, &state)
            .iter()
            .find(|group| group.name == *g)
            .map(|g| {
                let mut doc = group(g);
                doc["kind"] = json!("APIGroup");
                doc["apiVersion"] = json!("v1");
                json(200, &doc)
            }),
        (false, [g, v]) if catalog.serves(g, v) => Some(json(200, &resource_list(&catalog, g, v))),
        _ => None,
    }
}

/// Which aggregated discovery version the client accepts, if any (in its order of preference).
fn aggregated_version(accept: Option<&str>) -> Option<&'static str> {
    for clause in accept?.split(',') {
        let c = clause.replace(' ', "");
        if !c.contains("as=APIGroupDiscoveryList") || !c.contains("g=apidiscovery.k8s.io") {
            continue;
        }
        if c.contains("v=v2beta1") {
            return Some("v2beta1");
        }
        if c.contains("v=v2") {
            return Some("v2");
        }
    }
    None
}

fn group(group: &DiscoveryGroup) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{}/{v}", group.name), "version": v});
    json!({"name": group.name,
           "versions": group.versions.iter().map(|(v, _)| gv(v)).collect::<Vec<_>>(),
           "preferredVersion": gv(&group.versions[0].0)})
}

fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for rt in catalog
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut r = json!({
            "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": rt.verbs,
        });
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            r["categories"] = json!(rt.categories);
        }
        resources.push(r);
        for sub in &rt.subresources {
            let mut s = json!({
                "name": format!("{}/{}", rt.plural, sub.name), "singularName": "",
                "namespaced": rt.namespaced, "kind": sub.kind, "verbs": sub.verbs,
            });
            if sub.group != rt.group || sub.version != rt.version {
                s["group"] = json!(sub.group);
                s["version"] = json!(sub.version);
            }
            resources.push(s);
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
           "resources": resources})
}

fn discovery_resource(rt: &ResourceType) -> Value {
    let mut r = json!({
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": rt.verbs,
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    if !rt.subresources.is_empty() {
        r["subresources"] = rt
            .subresources
            .iter()
            .map(|s| {
                json!({"subresource": s.name,
                       "responseKind": {"group": s.group, "version": s.version, "kind": s.kind},
                       "verbs": s.verbs})
            })
            .collect();
    }
    r
}

fn aggregated(
    catalog: &Catalog,
    state: &State,
    version: &'static str,
    legacy: bool,
) -> http::Response<Body> {
    let groups = if legacy {
        vec![DiscoveryGroup {
            name: String::new(),
            versions: vec![("v1".into(), Served::Local)],
        }]
    } else {
        discovery_order(catalog, state)
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|(v, served)| match served {
                    Served::Local => {
                        let resources: Vec<Value> = catalog
                            .iter()
                            .filter(|r| r.group == g.name && r.version == *v)
                            .map(|r| discovery_resource(r))
                            .collect();
                        json!({"version": v, "resources": resources, "freshness": "Current"})
                    }
                    Served::Remote => state
                        .discovery
                        .get(&name_of(&g.name, v))
                        .cloned()
                        .unwrap_or_else(|| stale(v)),
                })
                .collect();
            json!({"metadata": {"name": g.name}, "versions": versions})
        })
        .collect();
    let doc = json!({"kind": "APIGroupDiscoveryList",
                     "apiVersion": format!("apidiscovery.k8s.io/{version}"),
                     "metadata": {}, "items": items});
    let ct = if version == "v2" {
        AGGREGATED_V2
    } else {
        AGGREGATED_V2BETA1
    };
    bytes_response(200, crate::protobuf::order::to_vec(&doc), ct)
}
