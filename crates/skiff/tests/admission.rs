//! Admission plugins end to end against a real `skiff apiserver` with real kubectl: LimitRange
//! defaults land on new pods and its max refuses a pod with upstream's 403; PodSecurity
//! `enforce` refuses a pod with upstream's message and `warn` makes kubectl print `Warning:`;
//! admission webhooks served over HTTPS by the test itself mutate (a JSONPatch adding a label),
//! deny, fail closed or open when down, and time out instead of hanging; on custom resources
//! too, a patched custom resource pruned to its schema.

mod support;

use std::process::Output;

use support::{ApiServer, Backend, KUBECTL_133, output_text};

/// Runs `kubectl args` with `stdin` until `done` accepts its output: objects the plugins read
/// (LimitRanges, namespace labels, webhook configurations) reach them through the watch cache,
/// a moment after the write that made them returned.
fn until(api: &ApiServer, args: &[&str], stdin: &str, done: impl Fn(&Output) -> bool) -> Output {
    api.kubectl_until(KUBECTL_133, args, Some(stdin), done)
}

const LIMITS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: limited}
---
apiVersion: v1
kind: LimitRange
metadata: {name: limits, namespace: limited}
spec:
  limits:
  - type: Container
    default: {cpu: 500m, memory: 128Mi}
    defaultRequest: {cpu: 100m, memory: 64Mi}
    max: {cpu: "1"}
"#;

const PLAIN_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: limited}
spec:
  containers: [{name: app, image: busybox}]
"#;

#[test]
fn limit_range_defaults_are_applied_and_its_max_refuses() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(LIMITS));
    let annotation = "LimitRanger plugin set: cpu, memory request for container app; \
                      cpu, memory limit for container app";
    until(
        &api,
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        PLAIN_POD,
        |out| output_text(out).0.contains(annotation),
    );
    let created = api.kubectl_stdin(
        KUBECTL_133,
        &["create", "-o", "json", "-f", "-"],
        Some(PLAIN_POD),
    );
    let pod: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(
        pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        annotation
    );
    assert_eq!(
        pod["spec"]["containers"][0]["resources"],
        serde_json::json!({"limits": {"cpu": "500m", "memory": "128Mi"},
                           "requests": {"cpu": "100m", "memory": "64Mi"}})
    );
    // the QoS class counts what LimitRanger set (upstream computes it after admission)
    assert_eq!(pod["status"]["qosClass"], "Burstable");

    let big = PLAIN_POD.replace("name: web", "name: big").replace(
        "image: busybox}",
        "image: busybox, resources: {limits: {cpu: \"2\"}}}",
    );
    let err = api.kubectl_fails(KUBECTL_133, &["create", "-f", "-"], Some(&big));
    assert!(
        err.contains(
            "Error from server (Forbidden): error when creating \"STDIN\": pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{err}"
    );
}

const SECURE: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: enforced
  labels: {pod-security.kubernetes.io/enforce: restricted}
---
apiVersion: v1
kind: Namespace
metadata:
  name: warned
  labels: {pod-security.kubernetes.io/warn: restricted, pod-security.kubernetes.io/warn-version: latest}
"#;

fn bare_pod(namespace: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: bare, namespace: {namespace}}}\n\
         spec:\n  containers: [{{name: c, image: busybox}}]\n"
    )
}

#[test]
fn pod_security_enforce_refuses_and_warn_prints_a_warning() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(SECURE));
    until(
        &api,
        &["create", "--dry-run=server", "-f", "-"],
        &bare_pod("enforced"),
        |out| !out.status.success(),
    );
    let err = api.kubectl_fails(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&bare_pod("enforced")),
    );
    assert!(
        err.contains(
            "Error from server (Forbidden): error when creating \"STDIN\": pods \"bare\" is forbidden: \
             violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false \
             (container \"c\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \
             \"RuntimeDefault\" or \"Localhost\")"
        ),
        "{err}"
    );

    until(
        &api,
        &["create", "--dry-run=server", "-f", "-"],
        &bare_pod("warned"),
        |out| output_text(out).1.contains("Warning:"),
    );
    let warned = api.kubectl_output(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&bare_pod("warned")),
    );
    let (out, err) = output_text(&warned);
    assert!(warned.status.success(), "{err}");
    assert!(out.contains("pod/bare created"), "{out}");
    assert!(
        err.contains(
            "Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        ),
        "{err}"
    );
    // the oldest kubectl prints the warning too
    let old = api.kubectl_output(
        support::KUBECTL_127,
        &["create", "--dry-run=server", "-f", "-"],
        Some(&bare_pod("warned").replace("name: bare", "name: other")),
    );
    let (_, err) = output_text(&old);
    assert!(old.status.success(), "{err}");
    assert!(
        err.contains("Warning: would violate PodSecurity \"restricted:latest\""),
        "{err}"
    );
}

/// An HTTPS admission webhook server in the test process, with its own CA (rcgen, through the
/// API server's PKI code): `/mutate` adds the label `mutated=yes` with a JSONPatch,
/// `/mutate-spec` sets a Widget's `spec.color` and adds a field its schema lacks, `/deny`
/// refuses, `/slow` answers after five seconds.
struct WebhookServer {
    port: u16,
    ca_bundle: String,
    _runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

fn review_answer(path: &str, review: &serde_json::Value) -> serde_json::Value {
    use base64::Engine;
    let request = &review["request"];
    let mut response = serde_json::json!({"uid": request["uid"], "allowed": true});
    match path {
        "/mutate" => {
            let patch = if request["object"]["metadata"]["labels"].is_object() {
                serde_json::json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            } else {
                serde_json::json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            };
            response["patchType"] = "JSONPatch".into();
            response["patch"] = base64::engine::general_purpose::STANDARD
                .encode(patch.to_string())
                .into();
            response["warnings"] = serde_json::json!(["mutated by the test webhook"]);
        }
        "/mutate-spec" => {
            // one field the Widget schema defines, one it does not (pruned after admission)
            let patch = serde_json::json!([
                {"op": "replace", "path": "/spec/color", "value": "red"},
                {"op": "add", "path": "/spec/shade", "value": "dark"}]);
            response["patchType"] = "JSONPatch".into();
            response["patch"] = base64::engine::general_purpose::STANDARD
                .encode(patch.to_string())
                .into();
        }
        "/deny" => {
            response["allowed"] = false.into();
            response["status"] = serde_json::json!({"code": 403, "message": format!(
                "{} named {} are not welcome",
                request["resource"]["resource"].as_str().unwrap_or(""),
                request["name"].as_str().unwrap_or(""))});
        }
        _ => {}
    }
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "response": response})
}

impl WebhookServer {
    fn start() -> WebhookServer {
        use http_body_util::BodyExt;

        let dir = tempfile::tempdir().unwrap();
        let pki = skiff_apiserver::pki::Pki::ensure(dir.path(), &["127.0.0.1".to_string()])
            .expect("webhook certificates");
        let acceptor = support::https::loopback_acceptor(&pki);
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        |req: hyper::Request<hyper::body::Incoming>| async move {
                            let path = req.uri().path().to_string();
                            let body = req.into_body().collect().await?.to_bytes();
                            let review: serde_json::Value =
                                serde_json::from_slice(&body).unwrap_or_default();
                            if path == "/slow" {
                                tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                            }
                            let answer = review_answer(&path, &review).to_string();
                            Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from(answer),
                            )))
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        use base64::Engine;
        WebhookServer {
            port,
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(&pki.ca_cert_pem),
            _runtime: runtime,
            _dir: dir,
        }
    }

    /// One webhook entry calling `path`, for pods in namespaces labelled `hooks=<selects>`.
    fn webhook(&self, name: &str, path: &str, selects: &str, extra: &str) -> String {
        self.entry(
            name,
            path,
            "[\"\"]",
            "pods",
            &format!("  namespaceSelector: {{matchLabels: {{hooks: {selects}}}}}\n{extra}"),
        )
    }

    /// One webhook entry calling `path` for creates of `resource` in `groups` (a YAML list).
    fn entry(&self, name: &str, path: &str, groups: &str, resource: &str, extra: &str) -> String {
        format!(
            "- name: {name}\n  clientConfig: {{url: \"https://127.0.0.1:{}{path}\", caBundle: {}}}\n  \
             rules: [{{operations: [CREATE], apiGroups: {groups}, apiVersions: [v1], resources: [{resource}]}}]\n  \
             sideEffects: None\n  admissionReviewVersions: [v1]\n{extra}",
            self.port, self.ca_bundle
        )
    }
}

fn namespace(name: &str, hooks: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}, labels: {{hooks: {hooks}}}}}\n---\n"
    )
}

fn pod_in(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  containers: [{{name: c, image: busybox}}]\n"
    )
}

#[test]
fn webhooks_mutate_with_a_json_patch_and_deny_with_their_message() {
    let hooks = WebhookServer::start();
    let api = ApiServer::start(Backend::Embedded);
    let objects = format!(
        "{}{}apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n\
         metadata: {{name: labeller}}\nwebhooks:\n{}---\n\
         apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: bouncer}}\nwebhooks:\n{}",
        namespace("mutated", "mutate"),
        namespace("guarded", "deny"),
        hooks.webhook(
            "label.skiff.test",
            "/mutate",
            "mutate",
            "  matchConditions: [{name: not-skipped, expression: \"object.metadata.name != 'skipped'\"}]\n"
        ),
        hooks.webhook("deny.skiff.test", "/deny", "deny", ""),
    );
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(&objects));
    let listed = api.kubectl(KUBECTL_133, &["get", "mutatingwebhookconfigurations"]);
    assert!(listed.starts_with("NAME       WEBHOOKS   AGE"), "{listed}");
    assert!(listed.contains("labeller   1 "), "{listed}");

    until(
        &api,
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &pod_in("mutated", "web"),
        |out| output_text(out).0.contains("\"mutated\": \"yes\""),
    );
    let out = api.kubectl_output(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&pod_in("mutated", "web")),
    );
    let (_, err) = output_text(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("Warning: mutated by the test webhook"),
        "{err}"
    );
    let labels = api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "pod",
            "web",
            "-n",
            "mutated",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert_eq!(labels, r#"{"mutated":"yes"}"#);
    // a false match condition skips the webhook
    api.kubectl_stdin(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&pod_in("mutated", "skipped")),
    );
    let labels = api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "pod",
            "skipped",
            "-n",
            "mutated",
            "-o",
            "jsonpath={.metadata.labels}",
        ],
    );
    assert_eq!(labels, "");

    // dry runs until the configuration is loaded, so that no pod is created meanwhile
    until(
        &api,
        &["create", "--dry-run=server", "-f", "-"],
        &pod_in("guarded", "intruder"),
        |out| !out.status.success(),
    );
    let err = api.kubectl_fails(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&pod_in("guarded", "intruder")),
    );
    assert!(
        err.contains(
            // the webhook's status names no reason, so kubectl names none either (as upstream)
            "Error from server: error when creating \"STDIN\": admission webhook \
             \"deny.skiff.test\" denied the request: pods named intruder are not welcome"
        ),
        "{err}"
    );
}

#[test]
fn webhooks_that_are_down_or_slow_follow_their_failure_policy() {
    let hooks = WebhookServer::start();
    // a port nothing listens on any more
    let down_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = |name: &str, selects: &str, policy: &str| {
        hooks
            .webhook(name, "/", selects, &format!("  failurePolicy: {policy}\n"))
            .replace(&format!(":{}/", hooks.port), &format!(":{down_port}/"))
    };
    let api = ApiServer::start(Backend::Embedded);
    let objects = format!(
        "{}{}{}apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: fragile}}\nwebhooks:\n{}{}{}",
        namespace("closed", "closed"),
        namespace("open", "open"),
        namespace("slow", "slow"),
        down("closed.skiff.test", "closed", "Fail"),
        down("open.skiff.test", "open", "Ignore"),
        hooks.webhook("slow.skiff.test", "/slow", "slow", "  timeoutSeconds: 1\n"),
    );
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(&objects));

    until(
        &api,
        &["create", "--dry-run=server", "-f", "-"],
        &pod_in("closed", "p"),
        |out| !out.status.success(),
    );
    let err = api.kubectl_fails(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&pod_in("closed", "p")),
    );
    assert!(
        err.contains(&format!(
            "Error from server (InternalError): error when creating \"STDIN\": Internal error occurred: \
             failed calling webhook \"closed.skiff.test\": failed to call webhook: Post \
             \"https://127.0.0.1:{down_port}/?timeout=10s\": dial tcp 127.0.0.1:{down_port}:"
        )),
        "{err}"
    );
    // the same configuration holds the Ignore webhook: it is loaded, and fails open
    api.kubectl_stdin(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&pod_in("open", "p")),
    );

    let err = api.kubectl_fails(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&pod_in("slow", "p")),
    );
    assert!(
        err.contains(&format!(
            "failed calling webhook \"slow.skiff.test\": failed to call webhook: Post \
             \"https://127.0.0.1:{}/slow?timeout=1s\": context deadline exceeded",
            hooks.port
        )),
        "{err}"
    );
}

#[test]
fn webhooks_mutate_and_validate_custom_resources() {
    use support::crd::{install_widgets, widget};

    let hooks = WebhookServer::start();
    let api = ApiServer::start(Backend::Embedded);
    install_widgets(&api);
    let objects = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n\
         metadata: {{name: widget-labeller}}\nwebhooks:\n{}{}---\n\
         apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n\
         metadata: {{name: widget-bouncer}}\nwebhooks:\n{}",
        hooks.entry(
            "label.skiff.test",
            "/mutate",
            "[example.com]",
            "widgets",
            ""
        ),
        hooks.entry(
            "paint.skiff.test",
            "/mutate-spec",
            "[example.com]",
            "widgets",
            ""
        ),
        hooks.entry(
            "deny.skiff.test",
            "/deny",
            "[example.com]",
            "widgets",
            "  objectSelector: {matchLabels: {guard: deny}}\n"
        ),
    );
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(&objects));

    // the mutating webhook's JSONPatch lands on the custom resource
    until(
        &api,
        &["create", "--dry-run=server", "-o", "json", "-f", "-"],
        &widget("default", "w", ""),
        |out| output_text(out).0.contains("\"mutated\": \"yes\""),
    );
    api.kubectl_stdin(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&widget("default", "w", "")),
    );
    let labels = api.kubectl(
        KUBECTL_133,
        &["get", "widget", "w", "-o", "jsonpath={.metadata.labels}"],
    );
    assert_eq!(labels, r#"{"mutated":"yes"}"#);
    // the patched object is pruned to the schema, as upstream's conformance test requires
    let spec = api.kubectl(
        KUBECTL_133,
        &["get", "widget", "w", "-o", "jsonpath={.spec}"],
    );
    assert_eq!(spec, r#"{"color":"red"}"#);

    // the validating webhook is called for the custom resource and its refusal stands
    let guarded = widget("default", "intruder", ", labels: {guard: deny}");
    until(
        &api,
        &["create", "--dry-run=server", "-f", "-"],
        &guarded,
        |out| !out.status.success(),
    );
    let err = api.kubectl_fails(KUBECTL_133, &["create", "-f", "-"], Some(&guarded));
    assert!(
        err.contains(
            "Error from server: error when creating \"STDIN\": admission webhook \
             \"deny.skiff.test\" denied the request: widgets named intruder are not welcome"
        ),
        "{err}"
    );
}
