//! Admission plugins end to end against a real `skiff apiserver` with real kubectl: LimitRange
//! defaults land on new pods and its max refuses a pod with upstream's 403; PodSecurity
//! `enforce` refuses a pod with upstream's message and `warn` makes kubectl print `Warning:`;
//! admission webhooks served over HTTPS by the test itself mutate (a JSONPatch adding a label),
//! deny, fail closed or open when down, and time out instead of hanging.

mod support;

use std::process::Output;

use support::{ApiServer, Backend, HANG_GUARD, KUBECTL_133};

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `kubectl args` with `stdin` until `done` accepts its output: objects the plugins read
/// (LimitRanges, namespace labels, webhook configurations) reach them through the watch cache,
/// a moment after the write that made them returned.
fn until(api: &ApiServer, args: &[&str], stdin: &str, done: impl Fn(&Output) -> bool) -> Output {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let out = api.kubectl_output(KUBECTL_133, args, Some(stdin));
        if done(&out) {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl {args:?} never gave the expected answer: {:?}",
            text(&out)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
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
        |out| text(out).0.contains(annotation),
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
        |out| text(out).1.contains("Warning:"),
    );
    let warned = api.kubectl_output(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&bare_pod("warned")),
    );
    let (out, err) = text(&warned);
    assert!(warned.status.success(), "{err}");
    assert!(out.contains("pod/bare created"), "{out}");
    assert!(
        err.contains(
            "Warning: would violate PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false"
        ),
        "{err}"
    );
}
