//! Namespaces: phase `Active` on create and the `kubernetes` finalizer, which the namespace
//! controller removes once everything in a terminating namespace is gone.

use serde_json::{Value, json};

use super::{Strategy, string_at};

#[derive(Debug)]
pub struct NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn name_validation(&self) -> fn(&str) -> Vec<String> {
        skiff_apimachinery::validation::is_dns1123_label
    }

    fn returns_deleted_object(&self) -> bool {
        true
    }

    /// `finalize` writes exactly the `spec.finalizers` an update otherwise keeps.
    fn prepare_for_subresource_update(&self, sub: &str, ns: &mut Value, old: &Value) -> bool {
        if sub != "finalize" {
            return false;
        }
        let finalizers = ns["spec"]["finalizers"].take();
        self.prepare_for_update(ns, old);
        ns["spec"]["finalizers"] = finalizers;
        true
    }

    fn prepare_for_delete(&self, ns: &mut Value) {
        ns["status"]["phase"] = json!("Terminating");
    }

    fn prepare_for_create(&self, ns: &mut Value) {
        ns["spec"] = json!({"finalizers": ["kubernetes"]});
        ns["status"] = json!({"phase": "Active"});
        // Upstream labels every namespace with its own name (NamespaceDefaultLabelName).
        let name = string_at(ns, "metadata.name");
        if !ns["metadata"]["labels"].is_object() {
            ns["metadata"]["labels"] = json!({});
        }
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    }

    fn prepare_for_update(&self, ns: &mut Value, old: &Value) {
        // spec.finalizers change only through /finalize.
        ns["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
        let name = string_at(ns, "metadata.name");
        if !ns["metadata"]["labels"].is_object() {
            ns["metadata"]["labels"] = json!({});
        }
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    }

    fn fields(&self, ns: &Value) -> Vec<(&'static str, String)> {
        vec![("status.phase", string_at(ns, "status.phase"))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_namespace_is_active_with_the_kubernetes_finalizer_and_name_label() {
        let mut ns = json!({"metadata": {"name": "team-a"}});
        NamespaceStrategy.prepare_for_create(&mut ns);
        assert_eq!(ns["status"]["phase"], "Active");
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(
            ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "team-a"
        );
    }
}
