//! Per-type behaviour of the registry (upstream's `rest.RESTCreateStrategy` and friends):
//! defaulting, what a create or update may change, validation, and the fields a field selector
//! can name. One file per kind that needs more than the generic rules.
//!
//! # Layout
//! - [`generic`]: rules every kind follows (metadata, generation, status reset).
//! - [`pod`]: Pod defaults, validation, initial status, field set.
//! - [`namespace`]: Namespace phase and the `kubernetes` finalizer.

pub mod generic;
pub mod namespace;
pub mod pod;

use serde_json::Value;
use skiff_apimachinery::catalog::ResourceType;
use skiff_apimachinery::validation::FieldError;

/// The type-specific half of create/update handling. Every method has the generic default.
pub trait Strategy: Send + Sync {
    /// Fills defaults and resets what a create may not set (e.g. status), before validation.
    fn prepare_for_create(&self, _object: &mut Value) {}

    /// Fills defaults on the new object of an update; `old` is the stored object.
    fn prepare_for_update(&self, _object: &mut Value, _old: &Value) {}

    /// Field errors of a new object (metadata is validated generically).
    fn validate(&self, _object: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Field errors of an update, e.g. changes to immutable fields.
    fn validate_update(&self, object: &Value, _old: &Value) -> Vec<FieldError> {
        self.validate(object)
    }

    /// Field-selector values beyond `metadata.name` and `metadata.namespace`.
    fn fields(&self, _object: &Value) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Whether deleting needs a grace period (pods bound to a node).
    fn graceful_delete_seconds(&self, _object: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }
}

/// Kinds with no rules of their own.
#[derive(Debug)]
pub struct Plain;

impl Strategy for Plain {}

/// The strategy of a resource type.
pub fn for_resource(rt: &ResourceType) -> &'static dyn Strategy {
    match (rt.group, rt.plural) {
        ("", "pods") => &pod::PodStrategy,
        ("", "namespaces") => &namespace::NamespaceStrategy,
        ("", "nodes") => &NodeFields,
        ("", "secrets") => &SecretFields,
        ("", "events") => &EventFields,
        ("", "services") => &ServiceFields,
        ("apps", "replicasets") => &ReplicaSetFields,
        ("batch", "jobs") => &JobFields,
        _ => &Plain,
    }
}

/// Reads a string at a dotted path (`spec.nodeName`), empty when absent.
pub fn string_at(object: &Value, path: &str) -> String {
    let mut v = object;
    for part in path.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

macro_rules! field_strategy {
    ($name:ident, [$($field:literal),* $(,)?]) => {
        #[doc = concat!("Field selectors of ", stringify!($name), ".")]
        #[derive(Debug)]
        pub struct $name;

        impl Strategy for $name {
            fn fields(&self, object: &Value) -> Vec<(&'static str, String)> {
                vec![$(($field, string_at(object, $field))),*]
            }
        }
    };
}

field_strategy!(NodeFields, ["spec.unschedulable"]);
field_strategy!(SecretFields, ["type"]);
field_strategy!(ServiceFields, ["spec.clusterIP", "spec.type"]);
field_strategy!(ReplicaSetFields, ["status.replicas"]);
field_strategy!(JobFields, ["status.successful"]);
field_strategy!(
    EventFields,
    [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ]
);
