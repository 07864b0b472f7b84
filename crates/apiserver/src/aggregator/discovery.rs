//! A remote group version in aggregated discovery: its `APIResourceList` (what the
//! availability probe fetched) turned into an `apidiscovery.k8s.io/v2` `APIVersionDiscovery`,
//! subresources (`pods/status`) folded into their resource, as upstream's
//! `ConvertGroupVersionIntoToDiscovery`; without one, the version is listed `Stale` with no
//! resources (the merged document still names it, as upstream's does for a server it cannot
//! reach).

use serde_json::{Map, Value, json};

/// The `APIVersionDiscovery` of `group/version` from its `APIResourceList`.
pub fn version_discovery(group: &str, version: &str, list: &Value) -> Value {
    let mut resources: Vec<Value> = Vec::new();
    let mut subresources: Vec<(String, Value)> = Vec::new();
    for r in list["resources"].as_array().into_iter().flatten() {
        let name = r["name"].as_str().unwrap_or("");
        let kind = json!({
            "group": r["group"].as_str().unwrap_or(group),
            "version": r["version"].as_str().unwrap_or(version),
            "kind": r["kind"].as_str().unwrap_or(""),
        });
        let verbs = r.get("verbs").cloned().unwrap_or_else(|| json!([]));
        if let Some((parent, sub)) = name.split_once('/') {
            subresources.push((
                parent.to_string(),
                json!({"subresource": sub, "responseKind": kind, "verbs": verbs}),
            ));
            continue;
        }
        let mut out = Map::new();
        out.insert("resource".into(), json!(name));
        out.insert("responseKind".into(), kind);
        let namespaced = r["namespaced"].as_bool().unwrap_or(false);
        out.insert(
            "scope".into(),
            json!(if namespaced { "Namespaced" } else { "Cluster" }),
        );
        out.insert(
            "singularResource".into(),
            json!(r["singularName"].as_str().unwrap_or("")),
        );
        out.insert("verbs".into(), verbs);
        for key in ["shortNames", "categories"] {
            if let Some(v) = r
                .get(key)
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                out.insert(key.into(), v.clone());
            }
        }
        resources.push(Value::Object(out));
    }
    for (parent, sub) in subresources {
        if let Some(r) = resources
            .iter_mut()
            .find(|r| r["resource"] == parent.as_str())
            && let Some(obj) = r.as_object_mut()
        {
            obj.entry("subresources")
                .or_insert_with(|| json!([]))
                .as_array_mut()
                .expect("made an array")
                .push(sub);
        }
    }
    json!({"version": version, "resources": resources, "freshness": "Current"})
}

/// A remote group version whose discovery could not be fetched.
pub fn stale(version: &str) -> Value {
    json!({"version": version, "resources": [], "freshness": "Stale"})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_list_becomes_a_version_with_subresources_folded_in() {
        let list = json!({"kind": "APIResourceList", "groupVersion": "metrics.k8s.io/v1beta1",
            "resources": [
                {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics",
                 "verbs": ["get", "list"], "shortNames": []},
                {"name": "pods/status", "namespaced": true, "kind": "PodMetrics", "verbs": ["get"]},
                {"name": "nodes", "singularName": "node", "namespaced": false,
                 "kind": "NodeMetrics", "verbs": ["get", "list"], "categories": ["all"]}]});
        let v = version_discovery("metrics.k8s.io", "v1beta1", &list);
        assert_eq!(v["freshness"], "Current");
        assert_eq!(
            v["resources"][0],
            json!({"resource": "pods", "scope": "Namespaced", "singularResource": "",
                   "responseKind": {"group": "metrics.k8s.io", "version": "v1beta1",
                                    "kind": "PodMetrics"},
                   "verbs": ["get", "list"],
                   "subresources": [{"subresource": "status", "verbs": ["get"],
                                     "responseKind": {"group": "metrics.k8s.io",
                                                      "version": "v1beta1",
                                                      "kind": "PodMetrics"}}]})
        );
        assert_eq!(v["resources"][1]["scope"], "Cluster");
        assert_eq!(v["resources"][1]["categories"], json!(["all"]));
        assert_eq!(stale("v1")["freshness"], "Stale");
    }
}
