//! Core `v1` Events: the field selector set of upstream's `ToSelectableFields` (`source` is the
//! reporting component, `source.component`) and the legacy check that an Event without
//! `eventTime` sits in its involved object's namespace.

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::common::str_at;
use super::{Strategy, string_at};

#[derive(Debug)]
pub struct EventStrategy;

/// Selectable fields and where each sits in a `v1` Event.
const FIELDS: [(&str, &str); 11] = [
    ("involvedObject.kind", "involvedObject.kind"),
    ("involvedObject.namespace", "involvedObject.namespace"),
    ("involvedObject.name", "involvedObject.name"),
    ("involvedObject.uid", "involvedObject.uid"),
    ("involvedObject.apiVersion", "involvedObject.apiVersion"),
    (
        "involvedObject.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("involvedObject.fieldPath", "involvedObject.fieldPath"),
    ("reason", "reason"),
    ("reportingComponent", "reportingComponent"),
    ("source", "source.component"),
    ("type", "type"),
];

impl Strategy for EventStrategy {
    fn validate(&self, event: &Value) -> Vec<FieldError> {
        if event.get("eventTime").is_some_and(|t| !t.is_null()) {
            return Vec::new();
        }
        let namespace = str_at(event, "/metadata/namespace");
        let involved = str_at(event, "/involvedObject/namespace");
        let matches = if involved.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved
        };
        if matches {
            return Vec::new();
        }
        vec![FieldError::invalid(
            &FieldPath::new("involvedObject").child("namespace"),
            involved,
            "does not match event.namespace",
        )]
    }

    fn fields(&self, event: &Value) -> Vec<(&'static str, String)> {
        FIELDS
            .iter()
            .map(|(name, path)| (*name, string_at(event, path)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn source_is_the_reporting_components_name() {
        let event = json!({"source": {"component": "kubelet", "host": "n1"}, "type": "Normal"});
        let fields = EventStrategy.fields(&event);
        assert!(fields.contains(&("source", "kubelet".to_string())));
        assert!(fields.contains(&("type", "Normal".to_string())));
        assert_eq!(EventStrategy.fields(&json!({})).len(), 11);
    }

    #[test]
    fn legacy_events_sit_in_their_objects_namespace() {
        let cases = [
            (
                json!({"metadata": {"namespace": "a"}, "involvedObject": {"namespace": "a"}}),
                0,
            ),
            (
                json!({"metadata": {"namespace": "default"}, "involvedObject": {}}),
                0,
            ),
            (
                json!({"metadata": {"namespace": "a"}, "involvedObject": {"namespace": "b"}}),
                1,
            ),
            (
                json!({"metadata": {"namespace": "a"}, "involvedObject": {"namespace": "b"},
                       "eventTime": "2026-01-01T00:00:00.000000Z"}),
                0,
            ),
        ];
        for (event, want) in cases {
            assert_eq!(EventStrategy.validate(&event).len(), want, "{event}");
        }
        let wrong = json!({"metadata": {"namespace": "a"}, "involvedObject": {"namespace": "b"}});
        assert_eq!(
            EventStrategy.validate(&wrong)[0].to_string(),
            "involvedObject.namespace: Invalid value: \"b\": does not match event.namespace"
        );
    }
}
