//! VolumeAttachments (`storage.k8s.io/v1`): upstream's `ValidateVolumeAttachment` (an attacher,
//! a node name, exactly one of `persistentVolumeName` and `inlineVolumeSpec`) and the spec fixed
//! once created (`ValidateVolumeAttachmentUpdate`). The attacher writes `status`.

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath, is_dns1123_subdomain};

use super::Strategy;
use super::common::{semantic_eq, str_at};

#[derive(Debug)]
pub struct VolumeAttachmentStrategy;

const EXACTLY_ONE: &str = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";

impl Strategy for VolumeAttachmentStrategy {
    fn validate(&self, va: &Value) -> Vec<FieldError> {
        let path = FieldPath::new("spec");
        let mut errs = Vec::new();
        let attacher = str_at(va, "/spec/attacher");
        if attacher.is_empty() {
            errs.push(FieldError::required(&path.child("attacher"), ""));
        }
        let source = path.child("source");
        let set = |p: &str| va.pointer(p).filter(|v| !v.is_null());
        match (
            set("/spec/source/persistentVolumeName"),
            set("/spec/source/inlineVolumeSpec"),
        ) {
            (None, None) => errs.push(FieldError::required(&source, EXACTLY_ONE)),
            (Some(_), Some(_)) => errs.push(FieldError::forbidden(&source, EXACTLY_ONE)),
            (Some(name), None) if name.as_str().unwrap_or("").is_empty() => {
                errs.push(FieldError::required(
                    &source.child("persistentVolumeName"),
                    "must specify non empty persistentVolumeName",
                ));
            }
            _ => {}
        }
        let node = str_at(va, "/spec/nodeName");
        errs.extend(
            is_dns1123_subdomain(node)
                .into_iter()
                .map(|msg| FieldError::invalid(&path.child("nodeName"), node, msg)),
        );
        errs
    }

    fn validate_update(&self, va: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.validate(va);
        if !semantic_eq(va.get("spec"), old.get("spec")) {
            errs.push(FieldError::invalid(
                &FieldPath::new("spec"),
                va.get("spec").cloned().unwrap_or(Value::Null),
                super::common::IMMUTABLE,
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn an_attachment_names_its_attacher_node_and_one_source() {
        let va = json!({"spec": {"attacher": "csi.example.com", "nodeName": "node-1",
                                 "source": {"persistentVolumeName": "pv-1"}}});
        assert!(VolumeAttachmentStrategy.validate(&va).is_empty());
        let mut none = va.clone();
        none["spec"]["source"] = json!({});
        none["spec"]["attacher"] = json!("");
        assert_eq!(
            errors(VolumeAttachmentStrategy.validate(&none)),
            [
                "spec.attacher: Required value",
                "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
            ]
        );
        let mut moved = va.clone();
        moved["spec"]["nodeName"] = json!("node-2");
        let errs = errors(VolumeAttachmentStrategy.validate_update(&moved, &va));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("spec: Invalid value: {")
                && errs[0].ends_with("field is immutable")
        );
    }
}
