//! The plugin against fixed policies, params and namespaces.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::{ResourceType, lookup};
use skiff_apimachinery::labels::Selector;

use super::policy::{Hook, Policies, hooks};
use super::*;
use crate::admission::{Notes, Operation};
use crate::authn::UserInfo;

struct Fixed(Arc<Vec<Hook>>);

impl Policies for Fixed {
    fn hooks(&self) -> Arc<Vec<Hook>> {
        self.0.clone()
    }
}

/// ConfigMaps in namespace `team`.
struct ConfigMaps(Vec<Value>);

impl ParamSource for ConfigMaps {
    fn kind(&self, kind: &policy::ParamKind) -> Option<Arc<ResourceType>> {
        let rt = skiff_apimachinery::catalog::by_kind(&kind.api_version, &kind.kind)?;
        Some(Arc::new(rt.clone()))
    }

    fn get(&self, _rt: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        self.0
            .iter()
            .find(|c| c["metadata"]["namespace"] == namespace && c["metadata"]["name"] == name)
            .cloned()
    }

    fn select(&self, _rt: &ResourceType, namespace: &str, s: &Selector) -> Vec<Value> {
        self.0
            .iter()
            .filter(|c| c["metadata"]["namespace"] == namespace)
            .filter(|c| s.matches(&c["metadata"]["labels"]))
            .cloned()
            .collect()
    }
}

/// Every namespace exists, labelled with its name and `env: test` for `team`.
struct Labelled;

#[async_trait]
impl Namespaces for Labelled {
    async fn namespace(&self, name: &str) -> Result<Option<Value>> {
        let mut labels = json!({"kubernetes.io/metadata.name": name});
        if name == "team" {
            labels["env"] = json!("test");
        }
        Ok(Some(json!({"metadata": {"name": name, "labels": labels}})))
    }
}

fn replica_policy(extra: Value) -> Value {
    let mut p = json!({"metadata": {"name": "replicas.example.com"}, "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"operations": ["CREATE", "UPDATE"],
            "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
        "validations": [{"expression": "object.spec.replicas <= 5"}]}});
    if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    p
}

fn binding(name: &str, spec: Value) -> Value {
    let mut b = json!({"metadata": {"name": name}, "spec": {
        "policyName": "replicas.example.com", "validationActions": ["Deny"]}});
    if let (Some(s), Some(extra)) = (b["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    b
}

fn plugin(
    policies: &[Value],
    bindings: &[Value],
    params: Vec<Value>,
) -> ValidatingAdmissionPolicy<Fixed, ConfigMaps, Labelled> {
    ValidatingAdmissionPolicy {
        policies: Fixed(Arc::new(hooks(policies, bindings))),
        params: ConfigMaps(params),
        namespaces: Labelled,
        conversion: crate::conversion::tests::converter(),
    }
}

fn attrs<'a>(user: &'a UserInfo, namespace: &'a str, name: &'a str) -> Attributes<'a> {
    Attributes {
        operation: Operation::Create,
        resource: lookup("apps", "v1", "deployments").unwrap(),
        subresource: "",
        namespace,
        name,
        user,
        old: None,
        dry_run: false,
        notes: Notes::default(),
    }
}

fn deployment(replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "team", "labels": {"app": "web"}},
           "spec": {"replicas": replicas}})
}

fn warnings(a: &Attributes<'_>) -> Vec<String> {
    let mut resp = crate::handlers::json(200, &json!({}));
    a.notes.warnings.apply(&mut resp);
    resp.headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_deny_binding_refuses_with_upstreams_message_code_and_cause() {
    let p = plugin(
        &[replica_policy(json!({}))],
        &[binding("limit", json!({}))],
        vec![],
    );
    let user = UserInfo::anonymous();
    let a = attrs(&user, "team", "web");
    p.validate(&a, Some(&deployment(5))).await.unwrap();
    let err = p.validate(&a, Some(&deployment(6))).await.unwrap_err();
    let message = "ValidatingAdmissionPolicy 'replicas.example.com' with binding 'limit' \
                   denied request: failed expression: object.spec.replicas <= 5";
    assert_eq!(err.code, 422);
    assert_eq!(err.reason, "Invalid");
    assert_eq!(
        err.message,
        format!("deployments.apps \"web\" is forbidden: {message}")
    );
    assert_eq!(
        err.details.unwrap(),
        json!({"name": "web", "group": "apps", "kind": "deployments",
               "causes": [{"message": message}]})
    );
    let mut scale = attrs(&user, "team", "web");
    scale.subresource = "scale";
    p.validate(&scale, Some(&deployment(6))).await.unwrap();
}

#[tokio::test]
async fn bindings_narrow_by_namespace_selector_excluded_rules_and_names() {
    let policies = [replica_policy(json!({}))];
    let user = UserInfo::anonymous();
    let test_only = plugin(
        &policies,
        &[binding(
            "test-only",
            json!({"matchResources": {"namespaceSelector": {"matchLabels": {"env": "test"}}}}),
        )],
        vec![],
    );
    assert!(
        test_only
            .validate(&attrs(&user, "team", "web"), Some(&deployment(6)))
            .await
            .is_err()
    );
    test_only
        .validate(&attrs(&user, "prod", "web"), Some(&deployment(6)))
        .await
        .unwrap();
    let excluded = plugin(
        &policies,
        &[binding(
            "not-web",
            json!({"matchResources": {"excludeResourceRules": [{"operations": ["*"],
                "apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["deployments"],
                "resourceNames": ["web"]}]}}),
        )],
        vec![],
    );
    excluded
        .validate(&attrs(&user, "team", "web"), Some(&deployment(6)))
        .await
        .unwrap();
    assert!(
        excluded
            .validate(&attrs(&user, "team", "api"), Some(&deployment(6)))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn warn_and_audit_actions_admit_with_a_warning_and_an_annotation() {
    let p = plugin(
        &[replica_policy(json!({"validations": [
            {"expression": "object.spec.replicas <= 5", "message": "too many replicas",
             "reason": "Forbidden"}]}))],
        &[binding(
            "warn",
            json!({"validationActions": ["Warn", "Audit"]}),
        )],
        vec![],
    );
    let user = UserInfo::anonymous();
    let a = attrs(&user, "team", "web");
    p.validate(&a, Some(&deployment(6))).await.unwrap();
    assert_eq!(
        warnings(&a),
        [
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'replicas.example.com' \
          with binding 'warn': too many replicas\""
        ]
    );
    let audit = a.notes.audit.all();
    let failure: Value =
        serde_json::from_str(&audit["validation.policy.admission.k8s.io/validation_failure"])
            .unwrap();
    assert_eq!(
        failure,
        json!([{"message": "too many replicas", "policy": "replicas.example.com",
                "binding": "warn", "expressionIndex": 0, "validationActions": ["Warn", "Audit"]}])
    );
}

#[tokio::test]
async fn params_come_from_the_named_object_in_the_request_namespace() {
    let policy = replica_policy(json!({
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "object.spec.replicas <= int(params.data.maxReplicas)",
                         "messageExpression": "'at most ' + params.data.maxReplicas + ' replicas'",
                         "reason": "Forbidden"}]}));
    let limits = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "limits", "namespace": "team", "labels": {"limits": "yes"}},
        "data": {"maxReplicas": "2"}});
    let by_name = |action: &str| {
        binding(
            "limits",
            json!({"paramRef": {"name": "limits", "parameterNotFoundAction": action}}),
        )
    };
    let user = UserInfo::anonymous();
    let p = plugin(
        std::slice::from_ref(&policy),
        &[by_name("Deny")],
        vec![limits.clone()],
    );
    p.validate(&attrs(&user, "team", "web"), Some(&deployment(2)))
        .await
        .unwrap();
    let err = p
        .validate(&attrs(&user, "team", "web"), Some(&deployment(3)))
        .await
        .unwrap_err();
    assert_eq!(err.code, 403);
    assert!(
        err.message.ends_with("denied request: at most 2 replicas"),
        "{}",
        err.message
    );
    let err = p
        .validate(&attrs(&user, "other", "web"), Some(&deployment(1)))
        .await
        .unwrap_err();
    assert!(
        err.message.ends_with(
            "with binding 'limits' denied request: failed to configure binding: \
             no params found for policy binding with `Deny` parameterNotFoundAction"
        ),
        "{}",
        err.message
    );
    let allow = plugin(
        std::slice::from_ref(&policy),
        &[by_name("Allow")],
        vec![limits.clone()],
    );
    allow
        .validate(&attrs(&user, "other", "web"), Some(&deployment(9)))
        .await
        .unwrap();
    let selected = plugin(
        &[policy],
        &[binding(
            "selected",
            json!({"paramRef": {"selector": {"matchLabels": {"limits": "yes"}},
                                "parameterNotFoundAction": "Deny"}}),
        )],
        vec![limits],
    );
    assert!(
        selected
            .validate(&attrs(&user, "team", "web"), Some(&deployment(3)))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn errors_admit_under_ignore_and_refuse_under_fail() {
    let failing = |policy: &str| {
        replica_policy(json!({"failurePolicy": policy,
            "validations": [{"expression": "object.spec.template.spec.hostNetwork == false"}]}))
    };
    let user = UserInfo::anonymous();
    let a = attrs(&user, "team", "web");
    plugin(&[failing("Ignore")], &[binding("b", json!({}))], vec![])
        .validate(&a, Some(&deployment(1)))
        .await
        .unwrap();
    let err = plugin(&[failing("Fail")], &[binding("b", json!({}))], vec![])
        .validate(&a, Some(&deployment(1)))
        .await
        .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains(
            "denied request: expression 'object.spec.template.spec.hostNetwork == false' resulted in error: "
        ),
        "{}",
        err.message
    );
    let unknown = replica_policy(json!({"paramKind": {"apiVersion": "rules.example.com/v1",
                                                        "kind": "ReplicaLimit"}}));
    let err = plugin(&[unknown], &[binding("b", json!({}))], vec![])
        .validate(&a, Some(&deployment(1)))
        .await
        .unwrap_err();
    assert_eq!(
        err.message,
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replicas.example.com' \
         denied request: failed to configure policy: failed to find resource referenced by \
         paramKind: 'rules.example.com/v1, Kind=ReplicaLimit'"
    );
}

#[tokio::test]
async fn policies_and_bindings_themselves_are_never_validated() {
    let everything = json!({"metadata": {"name": "replicas.example.com"}, "spec": {
        "matchConstraints": {"resourceRules": [{"operations": ["*"], "apiGroups": ["*"],
            "apiVersions": ["*"], "resources": ["*"]}]},
        "validations": [{"expression": "false"}]}});
    let p = plugin(&[everything], &[binding("b", json!({}))], vec![]);
    let user = UserInfo::anonymous();
    let mut a = attrs(&user, "", "b");
    a.resource = lookup(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
    )
    .unwrap();
    p.validate(&a, Some(&json!({"metadata": {"name": "b"}})))
        .await
        .unwrap();
    assert!(
        p.validate(&attrs(&user, "team", "web"), Some(&deployment(1)))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn the_first_refusal_in_policy_order_is_reported() {
    let named = |name: &str, extra: Value| {
        let mut p = replica_policy(extra);
        p["metadata"]["name"] = json!(name);
        p
    };
    let bound = |name: &str, policy: &str, spec: Value| {
        let mut b = binding(name, spec);
        b["spec"]["policyName"] = json!(policy);
        b
    };
    // b's binding cannot find its param (found first), a's validation refuses.
    let p = plugin(
        &[
            named(
                "b.example.com",
                json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}),
            ),
            named("a.example.com", json!({})),
        ],
        &[
            bound(
                "first",
                "b.example.com",
                json!({"paramRef": {"name": "absent", "parameterNotFoundAction": "Deny"}}),
            ),
            bound("second", "a.example.com", json!({})),
        ],
        vec![],
    );
    let user = UserInfo::anonymous();
    let err = p
        .validate(&attrs(&user, "team", "web"), Some(&deployment(6)))
        .await
        .unwrap_err();
    assert!(
        err.message
            .contains("ValidatingAdmissionPolicy 'a.example.com' with binding 'second'"),
        "{}",
        err.message
    );
}
