//! `pod-template-hash`: the label value naming a Deployment's ReplicaSet for one template, as
//! upstream's `ComputeHash`: FNV-1a (32 bit) of the template plus `status.collisionCount`
//! (little-endian, 8 bytes), printed in decimal and safe-encoded (`SafeEncodeString`). Upstream
//! hashes Go's dump of the struct; Skiff hashes the template's JSON with empty values dropped, so
//! the value is as stable but not byte-identical to upstream's.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// The label every ReplicaSet and pod of a Deployment carries.
pub const LABEL: &str = "pod-template-hash";

/// Upstream's `rand.SafeEncodeString` alphabet (no vowels, no confusable characters).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv1a32(hash: u32, bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(hash, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// Upstream's `SafeEncodeString`.
pub fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// Drops nulls, empty objects and empty arrays (Go's semantic equality treats nil and empty
/// alike), recursively.
pub fn normalized(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, normalized(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(normalized).collect()),
        other => other,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The `pod-template-hash` of `template` with `collision_count`.
pub fn compute(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let json = normalized(serde_json::to_value(template).unwrap_or_default());
    let mut hash = fnv1a32(0x811c_9dc5, json.to_string().as_bytes());
    if let Some(count) = collision_count {
        let mut bytes = [0u8; 8];
        bytes[..4].copy_from_slice(&(count as u32).to_le_bytes());
        hash = fnv1a32(hash, &bytes);
    }
    safe_encode(&hash.to_string())
}

/// Whether two templates are the same apart from the `pod-template-hash` label (upstream's
/// `EqualIgnoreHash`, with nil and empty alike).
pub fn equal_ignore_hash(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(LABEL);
        }
        normalized(serde_json::to_value(t).unwrap_or_default())
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]}}))
        .unwrap()
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a32(0x811c_9dc5, b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(0x811c_9dc5, b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(0x811c_9dc5, b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn the_hash_is_safe_encoded_stable_and_changes_with_template_and_collisions() {
        let h = compute(&template("a"), None);
        assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)), "{h}");
        assert!((8..=10).contains(&h.len()), "a u32 in decimal: {h}");
        assert_eq!(h, compute(&template("a"), None));
        assert_ne!(h, compute(&template("b"), None));
        assert_ne!(h, compute(&template("a"), Some(1)));
        assert_ne!(
            compute(&template("a"), Some(1)),
            compute(&template("a"), Some(2))
        );
        assert_eq!(safe_encode("0123"), "4567");
    }

    #[test]
    fn templates_compare_equal_ignoring_the_hash_label_and_empty_fields() {
        let mut labeled = template("a");
        labeled
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL.into(), "x".into());
        labeled.metadata.as_mut().unwrap().annotations = Some(Default::default());
        assert!(equal_ignore_hash(&labeled, &template("a")));
        assert!(!equal_ignore_hash(&labeled, &template("b")));
    }
}
