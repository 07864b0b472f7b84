//! JSON patch (RFC 6902, `application/json-patch+json`): a list of `add`, `remove`, `replace`,
//! `move`, `copy` and `test` operations applied in order, all or nothing.

use super::{Error, Result};
use serde_json::Value;

/// The most operations one JSON patch may carry (upstream's `maxJSONPatchOperations`); more is
/// refused with 413 before anything is applied.
pub const MAX_OPERATIONS: usize = 10_000;

/// Applies the JSON patch `patch` (JSON bytes) to a copy of `original`.
pub fn apply(original: &Value, patch: &[u8]) -> Result<Value> {
    let operations: json_patch::Patch =
        serde_json::from_slice(patch).map_err(Error::DecodeJsonPatch)?;
    if operations.len() > MAX_OPERATIONS {
        return Err(Error::TooManyOperations {
            max: MAX_OPERATIONS,
            got: operations.len(),
        });
    }
    // A failed patch leaves the copy half patched and it is dropped: `patch_unsafe`, as
    // `json_patch::patch`'s undo of the applied operations panics where it cannot undo them
    // (a move to the root, then a failing operation).
    let mut patched = original.clone();
    json_patch::patch_unsafe(&mut patched, &operations).map_err(Error::ApplyJsonPatch)?;
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1"},
                {"name": "sidecar", "image": "envoy"}
            ]}}}
        })
    }

    #[test]
    fn a_failed_patch_after_a_move_to_the_root_is_refused_without_a_panic() {
        // found by the fuzz tests: undoing the move panicked inside json-patch
        let doc = json!({"name": {"metadata": null}});
        let patch = br#"[{"op":"move","from":"/name","path":""},{"op":"remove","path":""}]"#;
        let err = apply(&doc, patch).unwrap_err();
        assert_eq!(err.status_code(), 422);
    }

    #[test]
    fn operations_apply_in_order() {
        let patch = br#"[
            {"op": "test", "path": "/spec/replicas", "value": 1},
            {"op": "replace", "path": "/spec/replicas", "value": 3},
            {"op": "add", "path": "/metadata/labels/tier", "value": "front"},
            {"op": "remove", "path": "/spec/template/spec/containers/1"},
            {"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copy"},
            {"op": "move", "from": "/metadata/labels/copy", "path": "/metadata/labels/moved"}
        ]"#;
        let patched = apply(&deployment(), patch).unwrap();
        assert_eq!(patched["spec"]["replicas"], 3);
        assert_eq!(
            patched["metadata"]["labels"],
            json!({"app": "web", "tier": "front", "moved": "web"})
        );
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "image": "nginx:1"}])
        );
    }

    #[test]
    fn appending_to_a_list_uses_the_dash_index() {
        let patch = br#"[{"op": "add", "path": "/spec/template/spec/containers/-",
                         "value": {"name": "third", "image": "busybox"}}]"#;
        let patched = apply(&deployment(), patch).unwrap();
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"][2]["name"],
            "third"
        );
    }

    #[test]
    fn a_failed_test_leaves_the_original_untouched_and_is_unprocessable() {
        let original = deployment();
        let patch = br#"[
            {"op": "replace", "path": "/spec/replicas", "value": 5},
            {"op": "test", "path": "/spec/replicas", "value": 1}
        ]"#;
        let err = apply(&original, patch).unwrap_err();
        assert!(matches!(err, Error::ApplyJsonPatch(_)), "{err}");
        assert_eq!(err.status_code(), 422);
        assert_eq!(original, deployment());
    }

    #[test]
    fn removing_a_missing_path_is_unprocessable() {
        let err = apply(&deployment(), br#"[{"op":"remove","path":"/spec/paused"}]"#).unwrap_err();
        assert_eq!(err.status_code(), 422);
    }

    #[test]
    fn a_body_that_is_not_a_list_of_operations_is_a_bad_request() {
        for body in [
            &br#"{"op":"add"}"#[..],
            b"not json",
            br#"[{"op":"frobnicate","path":"/a"}]"#,
        ] {
            let err = apply(&deployment(), body).unwrap_err();
            assert!(matches!(err, Error::DecodeJsonPatch(_)), "{err}");
            assert_eq!(err.status_code(), 400);
        }
    }

    #[test]
    fn more_operations_than_the_limit_are_refused() {
        let op = json!({"op": "test", "path": "/metadata/name", "value": "web"});
        let patch = serde_json::to_vec(&vec![op; MAX_OPERATIONS + 1]).unwrap();
        let err = apply(&deployment(), &patch).unwrap_err();
        assert!(matches!(err, Error::TooManyOperations { got, .. } if got == MAX_OPERATIONS + 1));
        assert_eq!(err.status_code(), 413);
    }
}
