//! API aggregation with unmodified kubectl (1.33) against a real `skiff apiserver` process:
//! `kubectl get apiservices` lists the Local ones and a registered aggregated API server (run by
//! the test on loopback, reached through an `ExternalName` Service), `kubectl get` of its
//! resource prints the remote's table with the user kubectl authenticated as, and the
//! APIService reads `False (…)` once the server is gone.

mod support;

use support::{ApiServer, Backend, KUBECTL_133};

/// The aggregated server's answer to `path` (a Table for a list when kubectl asks for one).
fn answer(path: &str, user: &str) -> (u16, serde_json::Value) {
    use serde_json::json;
    match path {
        "/apis/wardle.example.com/v1alpha1" => (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1",
                   "groupVersion": "wardle.example.com/v1alpha1",
                   "resources": [{"name": "flunders", "singularName": "flunder",
                                  "namespaced": true, "kind": "Flunder",
                                  "verbs": ["get", "list"]}]}),
        ),
        "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders" => (
            200,
            json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {},
                   "columnDefinitions": [
                       {"name": "Name", "type": "string", "format": "name", "description": ""},
                       {"name": "Seen-User", "type": "string", "format": "", "description": ""}],
                   "rows": [{"cells": ["f1", user],
                             "object": {"kind": "PartialObjectMetadata",
                                        "apiVersion": "meta.k8s.io/v1",
                                        "metadata": {"name": "f1", "namespace": "default"}}}]}),
        ),
        _ => (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "code": 404}),
        ),
    }
}

/// Starts the aggregated server on a loopback port; it stops with the returned runtime.
fn aggregated_server() -> (tokio::runtime::Runtime, u16) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let port = support::https::json_server(&runtime, |head: http::request::Parts| async move {
        let user = head
            .headers
            .get("x-remote-user")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        answer(head.uri.path(), &user)
    });
    (runtime, port)
}

fn registration(port: u16) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{name: wardle, namespace: default}}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{{name: https, port: {port}}}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: v1alpha1.wardle.example.com}}
spec:
  group: wardle.example.com
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 15
  insecureSkipTLSVerify: true
  service: {{namespace: default, name: wardle, port: {port}}}
"#
    )
}

#[test]
fn kubectl_lists_api_services_and_gets_an_aggregated_resource() {
    let kubectl = KUBECTL_133;
    let api = ApiServer::start(Backend::Embedded);
    // the server's own group versions, Local and available (once the availability controller
    // has looked at them: Unknown until then)
    let out = api.kubectl_until(kubectl, &["get", "apiservices"], None, |out| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.starts_with("v1.apps ") && !l.contains("Unknown"))
    });
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"], "{out}");
    let apps: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("v1.apps "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(apps[..3], ["v1.apps", "Local", "True"], "{out}");

    let (server, port) = aggregated_server();
    let out = api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(&registration(port)));
    assert!(
        out.contains("apiservice.apiregistration.k8s.io/v1alpha1.wardle.example.com created"),
        "{out}"
    );
    let row = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("v1alpha1.wardle.example.com"))
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let args = ["get", "apiservices"];
    let out = api.kubectl_until(kubectl, &args, None, |out| {
        row(out).get(2).is_some_and(|a| a == "True")
    });
    assert_eq!(row(&out)[1], "default/wardle");

    // the aggregated resource, printed from the remote's table, as the admin kubectl is
    let out = api.kubectl(kubectl, &["get", "flunders", "-n", "default"]);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [vec!["NAME", "SEEN-USER"], vec!["f1", "admin"]],
        "{out}"
    );
    assert!(
        api.kubectl(
            kubectl,
            &["api-resources", "--api-group=wardle.example.com"]
        )
        .contains("flunders")
    );

    // the server goes away: the APIService is unavailable (checked again at once as its
    // Service changes) and kubectl gets 503
    drop(server);
    api.kubectl(
        kubectl,
        &["annotate", "service", "wardle", "-n", "default", "down=yes"],
    );
    let out = api.kubectl_until(kubectl, &args, None, |out| {
        row(out).get(2).is_some_and(|a| a == "False")
    });
    assert_eq!(row(&out)[3], "(FailedDiscoveryCheck)", "{:?}", row(&out));
    let err = api.kubectl_fails(kubectl, &["get", "flunders", "-n", "default"], None);
    assert!(err.contains("service unavailable"), "{err}");
}
