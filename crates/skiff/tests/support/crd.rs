//! The custom resource the suites use to show that API machinery (authorization, quota,
//! garbage collection, namespace deletion, admission, audit) treats custom resources as it
//! treats built-in ones: `widgets.example.com`, namespaced, served at `example.com/v1`.

use super::{ApiServer, KUBECTL_133};

/// The Widget CRD: a `spec.color` string, unknown fields pruned.
pub const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
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
              color: {type: string}
"#;

/// Creates the Widget CRD and waits until it is established (served).
pub fn install_widgets(api: &ApiServer) {
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(WIDGETS));
    api.kubectl(
        KUBECTL_133,
        &[
            "wait",
            "--for=condition=established",
            "--timeout=30s",
            "crd/widgets.example.com",
        ],
    );
}

/// A Widget manifest (YAML) named `name` in `namespace`, with `metadata` fields added (e.g.
/// `ownerReferences: [...]`, as YAML flow mappings after a comma).
pub fn widget(namespace: &str, name: &str, metadata: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\n\
         metadata: {{name: {name}, namespace: {namespace}{metadata}}}\n\
         spec: {{color: blue}}\n"
    )
}

/// The `example.com/v1` Widget resource, for kube-rs dynamic clients.
pub fn widget_resource() -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}
