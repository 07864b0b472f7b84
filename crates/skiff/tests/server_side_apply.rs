//! Server-side apply and managedFields against a real `skiff apiserver` process: unmodified
//! kubectl 1.33 and 1.27 (`apply --server-side`, conflicts with `kubectl scale`,
//! `--force-conflicts`, `--show-managed-fields`, dry runs) and kube-rs (`Patch::Apply`, forcing,
//! status applies, the required field manager).

mod support;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::{ApiServer, Backend, KUBECTL_127, KUBECTL_133, kube_client as client, run};

/// A Deployment with `replicas` and the env vars `env` in its one container.
fn deployment(replicas: u32, env: &[&str]) -> String {
    let env: String = env
        .iter()
        .map(|n| {
            format!(
                "        - name: {n}\n          value: \"{}\"\n",
                n.to_lowercase()
            )
        })
        .collect();
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {{app: web}}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        env:
{env}"#
    )
}

fn get_json(api: &ApiServer, kubectl: &str, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&api.kubectl(kubectl, &all)).expect("kubectl get -o json")
}

fn env_names(deploy: &Value) -> Vec<String> {
    deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The (manager, operation, subresource) of every managedFields entry.
fn entries(obj: &Value) -> Vec<(String, String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("manager"), s("operation"), s("subresource"))
        })
        .collect()
}

/// The whole server-side apply workflow a user types with kubectl.
fn kubectl_server_side_apply(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let apply = ["apply", "--server-side", "-f", "-"];

    let out = api.kubectl_stdin(kubectl, &apply, Some(&deployment(2, &["A", "B"])));
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );
    let deploy = get_json(
        &api,
        kubectl,
        &["deployment", "web", "--show-managed-fields"],
    );
    assert_eq!(env_names(&deploy), ["A", "B"]);
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_eq!(
        entries(&deploy),
        [("kubectl".into(), "Apply".into(), String::new())]
    );
    let fields = &deploy["metadata"]["managedFields"][0]["fieldsV1"];
    assert!(
        fields
            .pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"web\"}/f:env/k:{\"name\":\"B\"}/f:value")
            .is_some(),
        "{fields}"
    );
    // Default output hides managedFields; --show-managed-fields shows them.
    let plain = api.kubectl(kubectl, &["get", "deployment", "web", "-o", "yaml"]);
    assert!(!plain.contains("managedFields"), "{plain}");
    let shown = api.kubectl(
        kubectl,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "yaml",
            "--show-managed-fields",
        ],
    );
    assert!(
        shown.contains("managedFields:") && shown.contains("operation: Apply"),
        "{shown}"
    );

    // Re-applying the same file changes nothing, not even the resourceVersion.
    let rv = deploy["metadata"]["resourceVersion"].clone();
    api.kubectl_stdin(kubectl, &apply, Some(&deployment(2, &["A", "B"])));
    let again = get_json(&api, kubectl, &["deployment", "web"]);
    assert_eq!(again["metadata"]["resourceVersion"], rv);

    // Dropping an env var from the file removes it from the object.
    api.kubectl_stdin(kubectl, &apply, Some(&deployment(2, &["A"])));
    let deploy = get_json(&api, kubectl, &["deployment", "web"]);
    assert_eq!(env_names(&deploy), ["A"]);
    assert_eq!(deploy["metadata"]["generation"], 2);

    // kubectl scale takes spec.replicas through the scale subresource.
    api.kubectl(kubectl, &["scale", "deployment", "web", "--replicas=5"]);
    let deploy = get_json(
        &api,
        kubectl,
        &["deployment", "web", "--show-managed-fields"],
    );
    let scaler = entries(&deploy)
        .into_iter()
        .find(|(_, op, _)| op == "Update")
        .expect("an Update entry for kubectl scale");
    assert_eq!(scaler.2, "scale", "{:?}", entries(&deploy));

    // Applying another replica count now conflicts, and kubectl says so.
    let err = api.kubectl_fails(kubectl, &apply, Some(&deployment(3, &["A"])));
    let expected = format!(
        "Apply failed with 1 conflict: conflict with \"{}\" with subresource \"scale\" using apps/v1: .spec.replicas",
        scaler.0
    );
    assert!(err.contains(&expected), "{err}");
    assert!(err.contains("force-conflicts"), "kubectl's advice: {err}");
    let deploy = get_json(&api, kubectl, &["deployment", "web"]);
    assert_eq!(deploy["spec"]["replicas"], 5);

    // A server-side dry run changes nothing.
    let mut dry = apply.to_vec();
    dry.extend(["--dry-run=server", "--force-conflicts"]);
    api.kubectl_stdin(kubectl, &dry, Some(&deployment(3, &["A"])));
    assert_eq!(
        get_json(&api, kubectl, &["deployment", "web"])["spec"]["replicas"],
        5
    );

    // --force-conflicts takes the field back; the scaler, left with nothing, loses its entry.
    let mut forced = apply.to_vec();
    forced.push("--force-conflicts");
    api.kubectl_stdin(kubectl, &forced, Some(&deployment(3, &["A"])));
    let deploy = get_json(
        &api,
        kubectl,
        &["deployment", "web", "--show-managed-fields"],
    );
    assert_eq!(deploy["spec"]["replicas"], 3);
    assert_eq!(
        entries(&deploy),
        [("kubectl".into(), "Apply".into(), String::new())]
    );

    // Another kind of write adds an Update entry beside the Apply one.
    api.kubectl(kubectl, &["label", "deployment", "web", "team=blue"]);
    let shown = api.kubectl(
        kubectl,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "yaml",
            "--show-managed-fields",
        ],
    );
    assert!(
        shown.contains("operation: Apply") && shown.contains("operation: Update"),
        "{shown}"
    );
    assert!(shown.contains("f:team: {}"), "{shown}");

    // A plain create records the creating command as an Update manager.
    api.kubectl(
        kubectl,
        &["create", "configmap", "plain", "--from-literal=k=v"],
    );
    let cm = get_json(
        &api,
        kubectl,
        &["configmap", "plain", "--show-managed-fields"],
    );
    assert_eq!(
        entries(&cm),
        [("kubectl-create".into(), "Update".into(), String::new())]
    );
}

/// Moving from client-side to server-side apply: kubectl takes the fields the last-applied
/// annotation still describes without conflict, then migrates the managedFields itself.
fn client_side_then_server_side_apply(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(&deployment(2, &["A"])));
    let deploy = get_json(
        &api,
        kubectl,
        &["deployment", "web", "--show-managed-fields"],
    );
    assert_eq!(
        entries(&deploy),
        [(
            "kubectl-client-side-apply".into(),
            "Update".into(),
            String::new()
        )]
    );
    let out = api.kubectl_stdin(
        kubectl,
        &["apply", "--server-side", "-f", "-"],
        Some(&deployment(3, &["A"])),
    );
    assert!(out.contains("serverside-applied"), "{out}");
    let deploy = get_json(
        &api,
        kubectl,
        &["deployment", "web", "--show-managed-fields"],
    );
    assert_eq!(deploy["spec"]["replicas"], 3);
    let mut managers = entries(&deploy);
    managers.sort();
    assert_eq!(
        managers,
        [
            ("kubectl".into(), "Apply".into(), String::new()),
            ("kubectl-last-applied".into(), "Apply".into(), String::new()),
        ]
    );
    let last =
        deploy["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .expect("the annotation is kept");
    assert!(last.contains("\"replicas\":3"), "{last}");
}

fn config_map(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
           "data": data})
}

fn managers(cm: &ConfigMap) -> Vec<(String, String)> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn kube_rs_apply_creates_updates_conflicts_and_forces() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let client = client(&api).await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let mine = PatchParams::apply("my-controller");

        let created = cms
            .patch(
                "settings",
                &mine,
                &Patch::Apply(config_map(json!({"a": "1", "b": "2"}))),
            )
            .await
            .expect("apply creates");
        assert_eq!(
            managers(&created),
            [("my-controller".into(), "Apply".into())]
        );
        let updated = cms
            .patch(
                "settings",
                &mine,
                &Patch::Apply(config_map(json!({"a": "3"}))),
            )
            .await
            .expect("apply updates");
        let data = updated.data.clone().unwrap_or_default();
        assert_eq!(data.get("a").map(String::as_str), Some("3"));
        assert!(
            !data.contains_key("b"),
            "an omitted key is removed: {data:?}"
        );

        // Another manager changing the same key conflicts.
        let theirs = PatchParams::apply("other");
        let err = cms
            .patch(
                "settings",
                &theirs,
                &Patch::Apply(config_map(json!({"a": "4"}))),
            )
            .await
            .expect_err("a conflict");
        let kube::Error::Api(status) = err else {
            panic!("not an API error: {err:?}")
        };
        assert_eq!(status.code, 409);
        assert_eq!(status.reason, "Conflict");
        assert_eq!(
            status.message,
            r#"Apply failed with 1 conflict: conflict with "my-controller": .data.a"#
        );
        // Forcing takes the key.
        let forced = cms
            .patch(
                "settings",
                &theirs.clone().force(),
                &Patch::Apply(config_map(json!({"a": "4"}))),
            )
            .await
            .expect("a forced apply");
        assert_eq!(
            forced.data.unwrap_or_default().get("a").map(String::as_str),
            Some("4")
        );
        // Causes name the field and the owner.
        let raw = http::Request::patch(
            "/api/v1/namespaces/default/configmaps/settings?fieldManager=third",
        )
        .header("Content-Type", "application/apply-patch+yaml")
        .body(serde_json::to_vec(&config_map(json!({"a": "5"}))).unwrap())
        .unwrap();
        let err = client
            .request::<ConfigMap>(raw)
            .await
            .expect_err("a conflict");
        let kube::Error::Api(status) = err else {
            panic!("not an API error: {err:?}")
        };
        let causes = status.details.expect("details").causes;
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].reason, "FieldManagerConflict");
        assert_eq!(causes[0].field, ".data.a");
        assert_eq!(causes[0].message, r#"conflict with "other""#);

        // Sending `managedFields: [{}]` clears every entry.
        let cleared = cms
            .patch(
                "settings",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"managedFields": [{}]}})),
            )
            .await
            .expect("a merge patch clearing managedFields");
        assert!(managers(&cleared).is_empty(), "{:?}", managers(&cleared));
        assert_eq!(
            cleared
                .data
                .unwrap_or_default()
                .get("a")
                .map(String::as_str),
            Some("4")
        );

        // Without a field manager an apply is invalid.
        let raw = http::Request::patch("/api/v1/namespaces/default/configmaps/settings")
            .header("Content-Type", "application/apply-patch+yaml")
            .body(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n".to_vec())
            .unwrap();
        let err = client.request::<ConfigMap>(raw).await.expect_err("invalid");
        let kube::Error::Api(status) = err else {
            panic!("not an API error: {err:?}")
        };
        assert_eq!(status.code, 422);
        assert!(
            status.message.contains("fieldManager: Required value"),
            "{}",
            status.message
        );
    });
}

#[test]
fn kube_rs_apply_to_status_owns_only_the_status() {
    let api = ApiServer::start(Backend::Embedded);
    run(async {
        let client = client(&api).await;
        let deploys: Api<Deployment> = Api::namespaced(client, "default");
        let spec = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        deploys
            .patch("web", &PatchParams::apply("deployer"), &Patch::Apply(spec))
            .await
            .expect("apply creates the deployment");
        let status = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                            "metadata": {"name": "web"},
                            "status": {"observedGeneration": 1, "replicas": 1}});
        let out = deploys
            .patch_status(
                "web",
                &PatchParams::apply("status-writer"),
                &Patch::Apply(status),
            )
            .await
            .expect("apply to status");
        assert_eq!(out.status.and_then(|s| s.replicas), Some(1));
        let entry = out
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .find(|e| e.manager.as_deref() == Some("status-writer"))
            .expect("the status writer's entry");
        assert_eq!(entry.subresource.as_deref(), Some("status"));
        assert_eq!(entry.operation.as_deref(), Some("Apply"));
        assert_eq!(
            entry.fields_v1.expect("fields").0,
            json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}})
        );
    });
}

macro_rules! for_kubectl {
    ($($name:ident => $body:expr;)*) => {
        mod kubectl_1_33 {
            use super::*;
            $(#[test] fn $name() { $body(KUBECTL_133) })*
        }
        mod kubectl_1_27 {
            use super::*;
            $(#[test] fn $name() { $body(KUBECTL_127) })*
        }
    };
}

for_kubectl! {
    server_side_apply_creates_prunes_conflicts_forces_and_shows_managed_fields
        => kubectl_server_side_apply;
    server_side_apply_takes_over_from_client_side_apply => client_side_then_server_side_apply;
}
