//! CustomResourceDefinitions with unmodified kubectl (1.33 and 1.27) against a real
//! `skiff apiserver` process, as upstream's CronTab walkthrough does it: the CRD applied and
//! established, objects applied (defaulted, validated), listed with the CRD's printer columns
//! and short name and in `get all`, explained, scaled, their status patched, and the CRD deleted
//! with them.

mod support;

use support::{ApiServer, Backend, KUBECTL_127, KUBECTL_133};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec:
                type: string
                pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'
              image:
                type: string
              replicas:
                type: integer
                minimum: 1
                maximum: 10
                default: 1
          status:
            type: object
            properties:
              replicas:
                type: integer
"#;

const LISTED_CRD: &str = r#"
apiVersion: v1
kind: List
items:
- apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  metadata:
    name: gadgets.lists.example.com
  spec:
    group: lists.example.com
    scope: Namespaced
    names: {plural: gadgets, singular: gadget, kind: Gadget}
    versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                mode: {type: string, enum: [fast, safe], default: safe}
"#;

const CRONTAB: &str = r#"
apiVersion: stable.example.com/v1
kind: CronTab
metadata:
  name: my-new-cron-object
spec:
  cronSpec: "* * * * */5"
  image: my-awesome-cron-image
"#;

const BAD_CRONTAB: &str = r#"
apiVersion: stable.example.com/v1
kind: CronTab
metadata:
  name: bad
spec:
  cronSpec: "every minute"
  replicas: 20
"#;

fn crontabs(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let out = api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(CRD));
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created"
        ),
        "{out}"
    );
    api.kubectl(
        kubectl,
        &[
            "wait",
            "--for=condition=established",
            "--timeout=10s",
            "crd/crontabs.stable.example.com",
        ],
    );
    // In a List, kubectl validates each item against the published OpenAPI v2 itself: a
    // schema's free-form `enum` and `default` values must pass.
    let out = api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(LISTED_CRD));
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/gadgets.lists.example.com created"
        ),
        "{out}"
    );
    let out = api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(CRONTAB));
    assert!(
        out.contains("crontab.stable.example.com/my-new-cron-object created"),
        "{out}"
    );

    // Printer columns, with the schema's default filled in.
    let out = api.kubectl(kubectl, &["get", "crontabs"]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "SPEC", "REPLICAS", "AGE"], "{out}");
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("my-new-cron-object") && row.contains("* * * * */5") && row.contains(" 1 "),
        "{out}"
    );
    // The short name and the `all` category.
    assert!(
        api.kubectl(kubectl, &["get", "ct"])
            .contains("my-new-cron-object")
    );
    let all = api.kubectl(kubectl, &["get", "all"]);
    assert!(
        all.contains("crontab.stable.example.com/my-new-cron-object"),
        "{all}"
    );

    // `kubectl explain` reads the schema from the published OpenAPI documents.
    let explain = api.kubectl(kubectl, &["explain", "crontab.spec"]);
    assert!(
        explain.contains("cronSpec")
            && explain.contains("replicas")
            && explain.contains("<integer>"),
        "{explain}"
    );

    // Validation: both failing fields in one error, nothing stored.
    let err = api.kubectl_fails(kubectl, &["apply", "-f", "-"], Some(BAD_CRONTAB));
    assert!(err.contains(r#"The CronTab "bad" is invalid"#), "{err}");
    assert!(
        err.contains(
            r#"spec.cronSpec: Invalid value: "every minute": spec.cronSpec in body should match"#
        ),
        "{err}"
    );
    assert!(
        err.contains("spec.replicas: Invalid value: 20: spec.replicas in body should be less than or equal to 10"),
        "{err}"
    );

    // Scale, and status through its subresource.
    let out = api.kubectl(
        kubectl,
        &["scale", "crontab", "my-new-cron-object", "--replicas=3"],
    );
    assert!(
        out.contains("crontab.stable.example.com/my-new-cron-object scaled"),
        "{out}"
    );
    let replicas = api.kubectl(
        kubectl,
        &[
            "get",
            "ct",
            "my-new-cron-object",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    assert_eq!(replicas, "3");
    api.kubectl(
        kubectl,
        &[
            "patch",
            "crontab",
            "my-new-cron-object",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"replicas":3}}"#,
        ],
    );
    let status = api.kubectl(
        kubectl,
        &[
            "get",
            "ct",
            "my-new-cron-object",
            "-o",
            "jsonpath={.status.replicas}",
        ],
    );
    assert_eq!(status, "3");

    // Deleting the CRD takes its objects and the resource with it (kubectl still has it in its
    // discovery cache, so it asks, and the resource is not found).
    api.kubectl(kubectl, &["delete", "crd", "crontabs.stable.example.com"]);
    let err = api.kubectl_fails(kubectl, &["get", "crontabs"], None);
    assert!(
        err.contains(r#"Unable to list "stable.example.com/v1, Resource=crontabs": the server could not find the requested resource"#),
        "{err}"
    );
    let out = api.kubectl(
        kubectl,
        &["api-resources", "--api-group=stable.example.com"],
    );
    assert!(!out.contains("crontabs"), "{out}");
}

#[test]
fn kubectl_1_33_creates_uses_and_deletes_a_crd() {
    crontabs(KUBECTL_133);
}

#[test]
fn kubectl_1_27_creates_uses_and_deletes_a_crd() {
    crontabs(KUBECTL_127);
}
