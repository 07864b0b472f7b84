//! ValidatingAdmissionPolicy end to end against a real `skiff apiserver` with real kubectl
//! (1.33): a replica limit refuses a large Deployment with upstream's message, a limit read
//! from a ConfigMap param refuses by its `messageExpression` (and a missing param refuses under
//! `parameterNotFoundAction: Deny`), a Warn binding makes kubectl print the warning, a failing
//! expression admits under `failurePolicy: Ignore`, a policy whose CEL does not compile is
//! refused with 422, and kubectl lists policies and bindings with upstream's columns; a custom
//! resource is a `paramKind` once its CRD is established (until then the policy fails with
//! upstream's message) and policies match custom resources.

mod support;

use std::process::Output;

use support::{ApiServer, Backend, KUBECTL_133, output_text};

/// Runs `kubectl args` until `done` accepts its output: policies and bindings reach the plugin
/// through the watch cache, a moment after the write that made them returned.
fn until(api: &ApiServer, args: &[&str], done: impl Fn(&Output) -> bool) -> Output {
    api.kubectl_until(KUBECTL_133, args, None, done)
}

/// Upstream's documentation example: at most 5 replicas in namespaces labelled
/// `environment: test`.
const REPLICA_LIMIT: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: staging, labels: {environment: test}}
---
apiVersion: v1
kind: Namespace
metadata: {name: prod}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: demo-policy.example.com}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= 5
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: demo-binding-test.example.com}
spec:
  policyName: demo-policy.example.com
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {environment: test}
"#;

#[test]
fn a_replica_limit_refuses_large_deployments_with_upstreams_message() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(REPLICA_LIMIT));
    let create = |ns: &'static str, replicas: &'static str, dry_run: bool| {
        let mut args = vec![
            "create",
            "deployment",
            "nginx",
            "--image=nginx",
            "-n",
            ns,
            "--replicas",
            replicas,
        ];
        if dry_run {
            args.push("--dry-run=server");
        }
        args
    };
    until(&api, &create("staging", "6", true), |out| {
        !out.status.success()
    });
    let stderr = api.kubectl_fails(KUBECTL_133, &create("staging", "6", false), None);
    assert_eq!(
        stderr.trim(),
        "error: failed to create deployment: deployments.apps \"nginx\" is forbidden: \
         ValidatingAdmissionPolicy 'demo-policy.example.com' with binding \
         'demo-binding-test.example.com' denied request: failed expression: \
         object.spec.replicas <= 5"
    );
    api.kubectl(KUBECTL_133, &create("staging", "3", false));
    api.kubectl(KUBECTL_133, &create("prod", "6", false));
    let update = api.kubectl_fails(
        KUBECTL_133,
        &[
            "patch",
            "deployment/nginx",
            "-n",
            "staging",
            "-p",
            r#"{"spec":{"replicas":7}}"#,
        ],
        None,
    );
    assert!(
        update.contains("with binding 'demo-binding-test.example.com' denied request"),
        "{update}"
    );

    let policies = api.kubectl(KUBECTL_133, &["get", "validatingadmissionpolicies"]);
    let lines: Vec<Vec<&str>> = policies
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]);
    assert_eq!(lines[1][..3], ["demo-policy.example.com", "1", "<unset>"]);
    let bindings = api.kubectl(KUBECTL_133, &["get", "validatingadmissionpolicybindings"]);
    let lines: Vec<Vec<&str>> = bindings
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "POLICYNAME", "PARAMREF", "AGE"]);
    assert_eq!(
        lines[1][..3],
        [
            "demo-binding-test.example.com",
            "demo-policy.example.com",
            "<unset>"
        ]
    );
    let observed = api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "validatingadmissionpolicy",
            "demo-policy.example.com",
            "-o",
            "jsonpath={.metadata.generation}/{.status.observedGeneration}",
        ],
    );
    assert_eq!(observed, "1/1");
}

/// A limit per namespace, read from its `replica-limits` ConfigMap; a Warn-only policy; a
/// policy whose expression fails on every Deployment but fails open.
const PARAMS_WARN_IGNORE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: v1
kind: Namespace
metadata: {name: unlimited}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: replica-limits, namespace: team}
data: {maxReplicas: "3"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit.example.com}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  variables:
  - {name: limit, expression: "int(params.data.maxReplicas)"}
  validations:
  - expression: object.spec.replicas <= variables.limit
    messageExpression: "'replicas must be at most ' + string(variables.limit)"
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replica-limit-binding}
spec:
  policyName: replica-limit.example.com
  validationActions: [Deny]
  paramRef: {name: replica-limits, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: [team, unlimited]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: owner.example.com}
spec:
  failurePolicy: Ignore
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
  - expression: object.metadata.annotations['owner'] != ''
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: owner-binding}
spec:
  policyName: owner.example.com
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: small.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
  - {expression: object.spec.replicas <= 1, message: keep it small}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: small-warn}
spec:
  policyName: small.example.com
  validationActions: [Warn]
"#;

#[test]
fn params_warnings_and_failure_policies_behave_as_upstreams() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(PARAMS_WARN_IGNORE));
    let create = |ns: &'static str, name: &'static str, replicas: &'static str| {
        vec![
            "create",
            "deployment",
            name,
            "--image=nginx",
            "-n",
            ns,
            "--replicas",
            replicas,
        ]
    };
    let mut dry_run = create("team", "big", "4");
    dry_run.push("--dry-run=server");
    until(&api, &dry_run, |out| !out.status.success());
    let refused = api.kubectl_fails(KUBECTL_133, &create("team", "big", "4"), None);
    assert!(
        refused.contains(
            "error: failed to create deployment: deployments.apps \"big\" is forbidden: \
             ValidatingAdmissionPolicy 'replica-limit.example.com' with binding \
             'replica-limit-binding' denied request: replicas must be at most 3"
        ),
        "{refused}"
    );
    let missing = api.kubectl_fails(KUBECTL_133, &create("unlimited", "any", "1"), None);
    assert!(
        missing.contains(
            "with binding 'replica-limit-binding' denied request: failed to configure binding: \
             no params found for policy binding with `Deny` parameterNotFoundAction"
        ),
        "{missing}"
    );
    // Within the limit: admitted although the owner policy's expression fails (Ignore), with
    // the small policy's warning.
    let out = api.kubectl_output(KUBECTL_133, &create("team", "web", "2"), None);
    let (stdout, stderr) = output_text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("deployment.apps/web created"), "{stdout}");
    assert_eq!(
        stderr.trim(),
        "Warning: Validation failed for ValidatingAdmissionPolicy 'small.example.com' with \
         binding 'small-warn': keep it small"
    );
}

#[test]
fn a_policy_whose_cel_does_not_compile_is_invalid() {
    let api = ApiServer::start(Backend::Embedded);
    let bad = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: bad.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: object.spec.(
"#;
    let stderr = api.kubectl_fails(KUBECTL_133, &["apply", "-f", "-"], Some(bad));
    assert!(
        stderr.contains(
            "The ValidatingAdmissionPolicy \"bad.example.com\" is invalid: \
             spec.validations[0].expression: Invalid value: \"object.spec.(\": \
             compilation failed: ERROR: <input>:1:13: Syntax error"
        ),
        "{stderr}"
    );
    let binding = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: bad-binding}
spec:
  policyName: bad.example.com
  validationActions: [Deny, Warn]
"#;
    let stderr = api.kubectl_fails(KUBECTL_133, &["apply", "-f", "-"], Some(binding));
    assert!(
        stderr.contains("spec.validationActions: Invalid value: [\"Deny\",\"Warn\"]: must not contain both Deny and Warn"),
        "{stderr}"
    );
}

/// Upstream's documentation example with its own param kind: a `ReplicaLimit` custom resource
/// (`rules.example.com/v1`) holds the limit, and the policy exists before its CRD does.
const CUSTOM_PARAM_POLICY: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: limited, labels: {environment: test}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicalimit-policy.example.com}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: rules.example.com/v1, kind: ReplicaLimit}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
  - expression: object.spec.replicas <= params.maxReplicas
    messageExpression: "'replicas must be at most ' + string(params.maxReplicas)"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replicalimit-binding-test.example.com}
spec:
  policyName: replicalimit-policy.example.com
  validationActions: [Deny]
  paramRef: {name: replica-limit-test.example.com, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {environment: test}
"#;

const REPLICA_LIMIT_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: replicalimits.rules.example.com}
spec:
  group: rules.example.com
  scope: Namespaced
  names: {plural: replicalimits, singular: replicalimit, kind: ReplicaLimit}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          maxReplicas: {type: integer}
---
apiVersion: rules.example.com/v1
kind: ReplicaLimit
metadata: {name: replica-limit-test.example.com, namespace: limited}
maxReplicas: 3
"#;

#[test]
fn a_custom_resource_is_a_param_kind_once_its_crd_is_established() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(CUSTOM_PARAM_POLICY),
    );
    let create = |name: &'static str, replicas: &'static str, dry_run: bool| {
        let mut args = vec![
            "create",
            "deployment",
            name,
            "--image=nginx",
            "-n",
            "limited",
            "--replicas",
            replicas,
        ];
        if dry_run {
            args.push("--dry-run=server");
        }
        args
    };
    // No such kind yet: the policy cannot be configured, and fails closed.
    let out = until(&api, &create("any", "1", true), |out| !out.status.success());
    assert!(
        output_text(&out).1.contains(
            "deployments.apps \"any\" is forbidden: ValidatingAdmissionPolicy \
             'replicalimit-policy.example.com' denied request: failed to configure policy: \
             failed to find resource referenced by paramKind: \
             'rules.example.com/v1, Kind=ReplicaLimit'"
        ),
        "{:?}",
        output_text(&out)
    );

    // Once the CRD is established and the param created, the policy reads it.
    api.kubectl_until(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(REPLICA_LIMIT_CRD),
        |out| out.status.success(),
    );
    until(&api, &create("small", "2", true), |out| {
        out.status.success()
    });
    let refused = api.kubectl_fails(KUBECTL_133, &create("big", "4", false), None);
    assert!(
        refused.contains(
            "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy \
             'replicalimit-policy.example.com' with binding \
             'replicalimit-binding-test.example.com' denied request: replicas must be at most 3"
        ),
        "{refused}"
    );
    api.kubectl(KUBECTL_133, &create("small", "2", false));

    // A change of the param is seen by the next request.
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "replicalimit",
            "replica-limit-test.example.com",
            "-n",
            "limited",
            "--type=merge",
            "-p",
            r#"{"maxReplicas":5}"#,
        ],
    );
    until(&api, &create("big", "4", true), |out| out.status.success());

    // Policies match custom resources too: the params themselves are held to a ceiling.
    api.kubectl_stdin(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(LIMIT_CEILING_POLICY),
    );
    let too_high = REPLICA_LIMIT_CRD
        .split("---")
        .nth(1)
        .unwrap()
        .replace("name: replica-limit-test.example.com", "name: too-high")
        .replace("maxReplicas: 3", "maxReplicas: 50");
    let out = api.kubectl_until(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&too_high),
        |out| !out.status.success(),
    );
    assert!(
        output_text(&out).1.contains(
            "replicalimits.rules.example.com \"too-high\" is forbidden: \
             ValidatingAdmissionPolicy 'limit-ceiling.example.com' with binding \
             'limit-ceiling-binding' denied request: failed expression: object.maxReplicas <= 10"
        ),
        "{:?}",
        output_text(&out)
    );
}

const LIMIT_CEILING_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: limit-ceiling.example.com}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [rules.example.com], apiVersions: [v1], operations: [CREATE, UPDATE],
       resources: [replicalimits]}
  validations:
  - expression: object.maxReplicas <= 10
    reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: limit-ceiling-binding}
spec:
  policyName: limit-ceiling.example.com
  validationActions: [Deny]
"#;
