//! Auditing against a real `skiff apiserver` with `--audit-policy-file` and `--audit-log-path`:
//! real kubectl (1.33, protobuf bodies) creates, reads and deletes objects and the log holds
//! the events the policy asks for at its levels (bodies for configmaps, metadata only for
//! secrets, nothing for the rest), with the authorization decision and the impersonated user;
//! the `Audit-Id` header names the request's events; a request with a bad token is one
//! `ResponseStarted` event with code 401 and no user; a small
//! `--audit-log-maxsize` rotates the log into upstream-named backups, pruned to
//! `--audit-log-maxbackup`; a custom resource's create is audited with its group and resource.

mod support;

use std::path::{Path, PathBuf};

use http::Request;
use serde_json::Value;
use support::https::{self, Client};
use support::{ApiServer, Backend, KUBECTL_133};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  nonResourceURLs: ["/api*", "/apis*", "/openapi*", "/version", "/healthz*", "/readyz*", "/livez*"]
- level: Metadata
  resources:
  - group: ""
    resources: [secrets]
- level: RequestResponse
  resources:
  - group: ""
    resources: [configmaps]
  omitManagedFields: true
"#;

/// Starts a server auditing into `dir/audit.log` with `POLICY` and `extra` flags.
fn start(dir: &Path, policy: &str, extra: &[&str]) -> (ApiServer, PathBuf) {
    let policy_path = dir.join("policy.yaml");
    std::fs::write(&policy_path, policy).expect("write the policy");
    let log = dir.join("audit.log");
    let mut args = vec![
        "--audit-policy-file",
        policy_path.to_str().unwrap(),
        "--audit-log-path",
        log.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (ApiServer::start_with(Backend::Embedded, &args), log)
}

/// The complete lines of the log (the writer may be half-way through the last one).
fn events(log: &Path) -> Vec<Value> {
    let text = support::read(log);
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect()
}

fn is(e: &Value, stage: &str, verb: &str, resource: &str) -> bool {
    e["stage"] == stage && e["verb"] == verb && e["objectRef"]["resource"] == resource
}

/// Waits until the log holds an event `pred` accepts (the writer task is asynchronous), then
/// returns every event.
async fn wait_for(log: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    support::eventually(what, || {
        let all = events(log);
        let found = all.iter().any(&pred);
        async move { found.then_some(all) }
    })
    .await
}

fn one(all: &[Value], pred: impl Fn(&Value) -> bool) -> &Value {
    let found: Vec<&Value> = all.iter().filter(|e| pred(e)).collect();
    assert_eq!(found.len(), 1, "expected one event, got {found:#?}");
    found[0]
}

#[test]
fn the_log_records_creates_reads_and_deletes_at_the_levels_of_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let (api, log) = start(dir.path(), POLICY, &[]);
    api.kubectl(
        KUBECTL_133,
        &[
            "create",
            "configmap",
            "audited",
            "--from-literal=colour=blue",
        ],
    );
    api.kubectl(KUBECTL_133, &["get", "configmap", "audited", "-o", "json"]);
    api.kubectl(
        KUBECTL_133,
        &[
            "create",
            "secret",
            "generic",
            "pw",
            "--from-literal=password=hunter2",
        ],
    );
    api.kubectl(KUBECTL_133, &["get", "secret", "pw"]);
    api.kubectl(KUBECTL_133, &["get", "pods"]);
    api.kubectl(KUBECTL_133, &["delete", "configmap", "audited"]);
    let admin = Client::new(&api, "admin", Some("system:masters"));
    let alice = Client::new(&api, "alice", Some("dev"));
    support::run(async {
        let all = wait_for(&log, "the configmap delete", |e| {
            is(e, "ResponseComplete", "delete", "configmaps")
        })
        .await;

        let create = one(&all, |e| is(e, "ResponseComplete", "create", "configmaps"));
        assert_eq!(create["kind"], "Event");
        assert_eq!(create["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(create["level"], "RequestResponse");
        assert_eq!(
            create["objectRef"],
            serde_json::json!({"resource": "configmaps", "namespace": "default", "name": "audited", "apiVersion": "v1"})
        );
        assert_eq!(create["responseStatus"]["code"], 201);
        assert_eq!(
            create["requestURI"],
            "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create&fieldValidation=Strict"
        );
        assert_eq!(create["user"]["username"], "admin");
        assert!(
            create["user"]["groups"]
                .as_array()
                .unwrap()
                .contains(&"system:masters".into())
        );
        assert_eq!(create["sourceIPs"], serde_json::json!(["127.0.0.1"]));
        assert!(create["userAgent"].as_str().unwrap().starts_with("kubectl"));
        assert_eq!(
            create["annotations"]["authorization.k8s.io/decision"],
            "allow"
        );
        // kubectl 1.33 sent protobuf: the log has it as JSON
        assert_eq!(create["requestObject"]["data"]["colour"], "blue");
        assert_eq!(create["responseObject"]["metadata"]["name"], "audited");
        assert!(
            create["responseObject"]["metadata"]
                .get("managedFields")
                .is_none()
        );
        assert!(
            create["requestReceivedTimestamp"].as_str().unwrap()
                <= create["stageTimestamp"].as_str().unwrap()
        );
        let received = one(&all, |e| is(e, "RequestReceived", "create", "configmaps"));
        assert_eq!(received["auditID"], create["auditID"]);
        assert!(received.get("responseStatus").is_none());

        // (kubectl delete reads the object again until it is gone: a later 404)
        let read = one(&all, |e| {
            is(e, "ResponseComplete", "get", "configmaps") && e["responseStatus"]["code"] == 200
        });
        assert_eq!(read["responseStatus"]["code"], 200);
        assert_eq!(read["responseObject"]["data"]["colour"], "blue");
        let delete = one(&all, |e| is(e, "ResponseComplete", "delete", "configmaps"));
        assert_eq!(delete["objectRef"]["name"], "audited");
        assert_eq!(delete["responseStatus"]["code"], 200);

        let secret = one(&all, |e| is(e, "ResponseComplete", "create", "secrets"));
        assert_eq!(secret["level"], "Metadata");
        assert_eq!(secret["objectRef"]["name"], "pw");
        assert!(secret.get("requestObject").is_none() && secret.get("responseObject").is_none());
        one(&all, |e| is(e, "ResponseComplete", "get", "secrets"));
        let text = support::read(&log);
        assert!(
            !text.contains("hunter2") && !text.contains("aHVudGVyMg=="),
            "secret data in the log"
        );
        assert!(
            !all.iter().any(|e| e["objectRef"]["resource"] == "pods"),
            "pods are level None"
        );
        assert!(
            !all.iter().any(|e| e["requestURI"] == "/api"),
            "discovery is level None"
        );

        // the Audit-Id header names the request's events; a client may choose its own
        let resp = admin
            .send(
                Request::get("/api/v1/namespaces/default/secrets/pw")
                    .header("host", "127.0.0.1")
                    .header("audit-id", "e2e-chosen-id")
                    .body(https::body(""))
                    .unwrap(),
            )
            .await;
        assert_eq!(resp.headers()["audit-id"], "e2e-chosen-id");
        let resp = alice
            .send(
                Request::get("/api/v1/namespaces/default/secrets/pw")
                    .header("host", "127.0.0.1")
                    .body(https::body(""))
                    .unwrap(),
            )
            .await;
        let id = resp.headers()["audit-id"].to_str().unwrap().to_string();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        let impersonated = admin
            .send(
                Request::get("/api/v1/namespaces/default/configmaps")
                    .header("host", "127.0.0.1")
                    .header("impersonate-user", "bob")
                    .body(https::body(""))
                    .unwrap(),
            )
            .await;
        assert_eq!(impersonated.status(), 403);
        let impersonated_id = impersonated.headers()["audit-id"]
            .to_str()
            .unwrap()
            .to_string();
        let unaudited = admin
            .send(
                Request::get("/version")
                    .header("host", "127.0.0.1")
                    .body(https::body(""))
                    .unwrap(),
            )
            .await;
        assert!(unaudited.headers().contains_key("audit-id"));

        // the impersonated request was the last audited one
        let all = wait_for(&log, "the impersonated read", |e| {
            e["auditID"] == impersonated_id.as_str() && e["stage"] == "ResponseComplete"
        })
        .await;
        one(&all, |e| {
            e["auditID"] == "e2e-chosen-id" && e["stage"] == "ResponseComplete"
        });
        let as_bob = one(&all, |e| {
            e["auditID"] == impersonated_id.as_str() && e["stage"] == "ResponseComplete"
        });
        assert_eq!(as_bob["user"]["username"], "admin");
        assert_eq!(as_bob["impersonatedUser"]["username"], "bob");
        assert_eq!(
            as_bob["annotations"]["authorization.k8s.io/decision"],
            "forbid"
        );
        let refused = one(&all, |e| {
            e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete"
        });
        assert_eq!(refused["user"]["username"], "alice");
        assert_eq!(refused["responseStatus"]["code"], 403);
        assert_eq!(refused["responseStatus"]["reason"], "Forbidden");
        assert_eq!(
            refused["annotations"]["authorization.k8s.io/decision"],
            "forbid"
        );
    });
}

#[test]
fn a_request_that_fails_authentication_is_one_response_started_event_with_401() {
    let dir = tempfile::tempdir().unwrap();
    let (api, log) = start(dir.path(), POLICY, &[]);
    let pki = skiff_apiserver::pki::Pki::load(&api.data_dir.join("tls")).expect("the cluster CA");
    let no_certificate = Client::to(&api, &pki.ca_cert_pem, api.port, None);
    support::run(async {
        let resp = no_certificate
            .send(
                Request::get("/api/v1/namespaces/default/secrets")
                    .header("host", "127.0.0.1")
                    .header("authorization", "Bearer not-a-token")
                    .body(https::body(""))
                    .unwrap(),
            )
            .await;
        assert_eq!(resp.status(), 401);
        let id = resp.headers()["audit-id"].to_str().unwrap().to_string();
        let all = wait_for(&log, "the failed authentication", |e| {
            e["auditID"] == id.as_str()
        })
        .await;
        let event = one(&all, |e| e["auditID"] == id.as_str());
        assert_eq!(event["stage"], "ResponseStarted");
        assert_eq!(event["level"], "Metadata");
        assert_eq!(event["verb"], "list");
        assert_eq!(event["objectRef"]["resource"], "secrets");
        assert_eq!(event["user"], serde_json::json!({}));
        assert_eq!(event["sourceIPs"], serde_json::json!(["127.0.0.1"]));
        assert_eq!(
            event["responseStatus"],
            serde_json::json!({"metadata": {}, "code": 401,
                "message": "Authentication failed, attempted: bearer"})
        );
    });
}

#[test]
fn past_its_size_the_log_rotates_into_upstream_named_backups_pruned_to_maxbackup() {
    let dir = tempfile::tempdir().unwrap();
    let (api, log) = start(
        dir.path(),
        POLICY,
        &["--audit-log-maxsize", "1", "--audit-log-maxbackup", "1"],
    );
    let admin = Client::new(&api, "admin", Some("system:masters"));
    support::run(async {
        // each create logs its 600 KB body twice (request and response): over 1 MB an event
        let data = "x".repeat(600 * 1024);
        for name in ["big-1", "big-2", "big-3"] {
            let cm = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"k":"{data}"}}}}"#
            );
            let resp = admin
                .send(
                    Request::post("/api/v1/namespaces/default/configmaps")
                        .header("host", "127.0.0.1")
                        .header("content-type", "application/json")
                        .body(https::body(cm))
                        .unwrap(),
                )
                .await;
            assert_eq!(resp.status(), 201);
        }
        wait_for(&log, "the last create in the current log", |e| {
            is(e, "ResponseComplete", "create", "configmaps") && e["objectRef"]["name"] == "big-3"
        })
        .await;
    });
    let mut backups: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("audit-"))
        .collect();
    backups.sort();
    assert_eq!(backups.len(), 1, "{backups:?}");
    // audit-2026-11-30T18-01-02.345.log (a -N suffix when two rotations share a millisecond)
    let stamp = backups[0]
        .strip_prefix("audit-")
        .and_then(|s| s.strip_suffix(".log"))
        .unwrap();
    let bytes = stamp.as_bytes();
    assert!(stamp.len() >= 23, "{stamp}");
    for (i, c) in bytes[..23].iter().enumerate() {
        match i {
            4 | 7 | 13 | 16 => assert_eq!(*c, b'-', "{stamp}"),
            10 => assert_eq!(*c, b'T', "{stamp}"),
            19 => assert_eq!(*c, b'.', "{stamp}"),
            _ => assert!(c.is_ascii_digit(), "{stamp}"),
        }
    }
    let backup = events(&dir.path().join(&backups[0]));
    assert!(!backup.is_empty() && backup.iter().all(|e| e["kind"] == "Event"));
    assert!(std::fs::metadata(&log).unwrap().len() > 0);
}

const WIDGET_POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  resources:
  - group: example.com
    resources: [widgets]
"#;

#[test]
fn a_custom_resource_create_is_audited_with_its_group_and_resource() {
    let dir = tempfile::tempdir().unwrap();
    let (api, log) = start(dir.path(), WIDGET_POLICY, &[]);
    support::crd::install_widgets(&api);
    api.kubectl_stdin(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&support::crd::widget("default", "w", "")),
    );
    support::run(async {
        let all = wait_for(&log, "the widget create", |e| {
            is(e, "ResponseComplete", "create", "widgets")
        })
        .await;
        let create = one(&all, |e| is(e, "ResponseComplete", "create", "widgets"));
        assert_eq!(create["level"], "RequestResponse");
        assert_eq!(
            create["objectRef"],
            serde_json::json!({"resource": "widgets", "namespace": "default", "name": "w",
                               "apiGroup": "example.com", "apiVersion": "v1"})
        );
        assert_eq!(
            create["requestURI"],
            "/apis/example.com/v1/namespaces/default/widgets?fieldManager=kubectl-create&fieldValidation=Strict"
        );
        assert_eq!(create["responseStatus"]["code"], 201);
        assert_eq!(create["requestObject"]["spec"]["color"], "blue");
        assert_eq!(create["responseObject"]["kind"], "Widget");
        assert_eq!(create["responseObject"]["metadata"]["name"], "w");
        // the CRD itself is not in the policy's rules
        assert!(
            !all.iter()
                .any(|e| e["objectRef"]["resource"] == "customresourcedefinitions")
        );
    });
}
