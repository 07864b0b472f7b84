//! JSON merge patch (RFC 7386, `application/merge-patch+json`): objects merge key by key,
//! `null` deletes a key, and every other value (lists included) replaces what was there.

use super::{Error, Result, json_type_name};
use serde_json::Value;

/// Applies the merge patch `patch` (JSON bytes) to a copy of `original`. The patch must be an
/// object: a patch that would replace the whole object with a list or a scalar can never
/// decode as the object's kind, so it is refused here as a bad request.
pub fn apply(original: &Value, patch: &[u8]) -> Result<Value> {
    let patch: Value = serde_json::from_slice(patch).map_err(Error::DecodeMergePatch)?;
    if !patch.is_object() {
        return Err(Error::MergePatchNotObject {
            found: json_type_name(&patch),
        });
    }
    let mut patched = original.clone();
    json_patch::merge(&mut patched, &patch);
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "labels": {"app": "web", "tier": "front"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:1"}, {"name": "side"}]}
        })
    }

    #[test]
    fn objects_merge_and_null_deletes_a_key() {
        let patched = apply(
            &pod(),
            br#"{"metadata":{"labels":{"tier":null,"env":"prod"}}}"#,
        )
        .unwrap();
        assert_eq!(
            patched["metadata"]["labels"],
            json!({"app": "web", "env": "prod"})
        );
        assert_eq!(patched["metadata"]["name"], "p");
    }

    #[test]
    fn lists_are_replaced_whole_even_when_their_elements_have_names() {
        let patched = apply(
            &pod(),
            br#"{"spec":{"containers":[{"name":"app","image":"nginx:2"}]}}"#,
        )
        .unwrap();
        assert_eq!(
            patched["spec"]["containers"],
            json!([{"name": "app", "image": "nginx:2"}])
        );
    }

    #[test]
    fn nulls_inside_a_new_object_are_dropped() {
        let patched = apply(&pod(), br#"{"status":{"phase":"Running","reason":null}}"#).unwrap();
        assert_eq!(patched["status"], json!({"phase": "Running"}));
    }

    #[test]
    fn a_patch_that_is_not_an_object_is_a_bad_request() {
        for (body, found) in [
            (&b"[1]"[..], "array"),
            (b"null", "null"),
            (b"\"x\"", "string"),
        ] {
            let err = apply(&pod(), body).unwrap_err();
            assert!(
                matches!(err, Error::MergePatchNotObject { found: f } if f == found),
                "{err}"
            );
            assert_eq!(err.status_code(), 400);
        }
        let err = apply(&pod(), b"{").unwrap_err();
        assert!(matches!(err, Error::DecodeMergePatch(_)));
        assert_eq!(err.status_code(), 400);
    }
}
