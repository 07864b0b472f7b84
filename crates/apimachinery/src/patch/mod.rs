//! PATCH bodies applied to stored objects: JSON patch (RFC 6902), JSON merge patch (RFC 7386)
//! and strategic merge patch, with the error each failure maps to on the wire.
//!
//! The API server converts a YAML body to JSON, picks the [`PatchType`] from the request's
//! `Content-Type` and calls [`apply`] with the object as stored; it then validates and stores
//! the result like an update.
//!
//! # Layout
//! - [`json`]: RFC 6902 operations, through the `json-patch` crate.
//! - [`merge`]: RFC 7386 merge patch, through the `json-patch` crate.
//! - [`strategic`]: strategic merge patch, upstream's `strategicpatch.StrategicMergePatch`.
//! - [`schema`]: the patch strategy and merge key of every list field of the built-in types.
//! - `gofmt`: values printed the way Go's `%v` prints them, for upstream's error messages.

mod gofmt;
pub mod json;
pub mod merge;
pub mod schema;
pub mod strategic;

use serde_json::Value;

/// The patch formats a PATCH request can carry, told apart by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// `application/json-patch+json`: a list of RFC 6902 operations.
    Json,
    /// `application/merge-patch+json`: RFC 7386; objects merge, anything else replaces.
    Merge,
    /// `application/strategic-merge-patch+json`: a merge patch whose lists merge by key where
    /// the type says so, with `$patch` and the other directives.
    StrategicMerge,
}

impl PatchType {
    /// The patch type of a request's `Content-Type` (parameters such as `; charset=utf-8` are
    /// ignored). `None` for anything else, including `application/apply-patch+yaml`
    /// (server-side apply), which is not a patch in this sense.
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media_type = content_type.split(';').next().unwrap_or_default().trim();
        match media_type.to_ascii_lowercase().as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            _ => None,
        }
    }

    /// The `Content-Type` a client sends for this patch type.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
        }
    }
}

/// Applies `patch` (JSON bytes) of `patch_type` to `original`, an object of `kind` in API group
/// `group` (`""` for core), and returns the patched object. `original` is not modified.
///
/// Strategic merge patch needs the kind's patch metadata ([`schema::for_kind`]); a kind without
/// it is refused as upstream refuses it for custom resources.
pub fn apply(
    group: &str,
    kind: &str,
    original: &Value,
    patch_type: PatchType,
    patch: &[u8],
) -> Result<Value> {
    match patch_type {
        PatchType::Json => json::apply(original, patch),
        PatchType::Merge => merge::apply(original, patch),
        PatchType::StrategicMerge => {
            let root = schema::for_kind(group, kind).ok_or_else(|| Error::UnsupportedKind {
                group: group.to_string(),
                kind: kind.to_string(),
            })?;
            strategic::apply(original, patch, root)
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a patch could not be applied. [`Error::status_code`] is the HTTP status upstream's API
/// server answers with; the message is upstream's where upstream has a fixed one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The JSON patch body is not a JSON list of operations.
    #[error("decode json patch: {0}")]
    DecodeJsonPatch(#[source] serde_json::Error),
    /// The JSON patch has more operations than the server accepts.
    #[error("the allowed maximum operations in a JSON patch is {max}, got {got}")]
    TooManyOperations { max: usize, got: usize },
    /// An operation of a JSON patch failed (missing path, failed `test`, …).
    #[error("apply json patch: {0}")]
    ApplyJsonPatch(#[source] json_patch::PatchError),
    /// The merge patch body is not JSON.
    #[error("decode merge patch: {0}")]
    DecodeMergePatch(#[source] serde_json::Error),
    /// The merge patch body is JSON but not an object.
    #[error("merge patch must be a JSON object, got {found}")]
    MergePatchNotObject { found: &'static str },
    /// The strategic merge patch body is not JSON.
    #[error("decode strategic merge patch: {0}")]
    DecodeStrategicPatch(#[source] serde_json::Error),
    /// The strategic merge patch body is JSON but not an object (Go's unmarshal message).
    #[error("json: cannot unmarshal {found} into Go value of type map[string]interface {{}}")]
    StrategicPatchNotObject { found: &'static str },
    /// The object being patched is not a JSON object.
    #[error("invalid JSON document")]
    BadJsonDoc,
    /// Strategic merge patch of a kind without patch metadata (upstream: custom resources).
    #[error(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    UnsupportedKind { group: String, kind: String },
    /// A list holds lists.
    #[error("lists of lists are not supported")]
    NoListOfLists,
    /// A `$deleteFromPrimitiveList/<field>` key or value is malformed.
    #[error("invalid patch format of primitive list")]
    BadPatchFormatForPrimitiveList,
    /// `$retainKeys` is not a list, or the patch sets a field it does not list.
    #[error("invalid patch format of retainKeys")]
    BadPatchFormatForRetainKeys,
    /// A `$setElementOrder/<field>` key is malformed.
    #[error("invalid patch format of setElementOrder list")]
    BadPatchFormatForSetElementOrderList,
    /// An element of a list merged by key lacks the key.
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    /// A value has the wrong JSON type where the patch needs an object or a list (Go type
    /// names, as upstream prints them).
    #[error("expected a {expected}, but received a {actual}")]
    BadArgType {
        expected: &'static str,
        actual: &'static str,
    },
    /// `$patch` holds something other than `replace` or `delete` (or `merge` in a map).
    #[error("unknown patch type: {directive} in map: {map}")]
    BadPatchType { directive: String, map: String },
    /// A list element carries `$patch: merge`.
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    /// The elements of the live and patch lists do not all have one JSON type.
    #[error("list element types are not identical: {lists}")]
    ElementTypesDiffer { lists: String },
    /// `$setElementOrder` names a list that is empty on both sides.
    #[error("no elements in any of the given slices")]
    NoElements,
    /// A list merged by key holds an element that is not an object.
    #[error("value for key {index} is not a map")]
    ElementNotMap { index: usize },
    /// A list of objects has merge strategy but no merge key.
    #[error("cannot merge lists without merge key for type {element}")]
    NoMergeKeyDeclared { element: &'static str },
    /// The patch list and its `$setElementOrder` list order the same elements differently.
    #[error("the order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}")]
    SetElementOrderMismatch { patch: String, order: String },
}

impl Error {
    /// The HTTP status for this failure, upstream's: 400 for malformed bodies and directives,
    /// 413 for too many operations, 415 for strategic merge patch of a kind without metadata,
    /// 422 for patches that do not fit the object. Where upstream returns a plain Go error (a
    /// 500), the patch does not fit the object either, and it is a 422 here too.
    pub fn status_code(&self) -> u16 {
        match self {
            Error::DecodeJsonPatch(_)
            | Error::DecodeMergePatch(_)
            | Error::MergePatchNotObject { .. }
            | Error::DecodeStrategicPatch(_)
            | Error::StrategicPatchNotObject { .. }
            | Error::BadJsonDoc
            | Error::BadPatchFormatForPrimitiveList
            | Error::BadPatchFormatForRetainKeys
            | Error::BadPatchFormatForSetElementOrderList => 400,
            Error::TooManyOperations { .. } => 413,
            Error::UnsupportedKind { .. } => 415,
            Error::ApplyJsonPatch(_)
            | Error::NoListOfLists
            | Error::NoMergeKey { .. }
            | Error::BadArgType { .. }
            | Error::BadPatchType { .. }
            | Error::MergeDirectiveInList
            | Error::ElementTypesDiffer { .. }
            | Error::NoElements
            | Error::ElementNotMap { .. }
            | Error::NoMergeKeyDeclared { .. }
            | Error::SetElementOrderMismatch { .. } => 422,
        }
    }
}

/// The JSON type of a value as named in decode errors (`array`, `string`, …).
fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_map_to_patch_types_and_apply_is_not_one() {
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json"),
            Some(PatchType::StrategicMerge)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            None
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }

    #[test]
    fn content_type_round_trips() {
        for t in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
            assert_eq!(PatchType::from_content_type(t.content_type()), Some(t));
        }
    }

    #[test]
    fn apply_dispatches_on_patch_type() {
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "1"}}});
        let json = apply(
            "",
            "Pod",
            &pod,
            PatchType::Json,
            br#"[{"op":"add","path":"/metadata/labels/b","value":"2"}]"#,
        )
        .unwrap();
        assert_eq!(json["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        let merge = apply(
            "",
            "Pod",
            &pod,
            PatchType::Merge,
            br#"{"metadata":{"labels":{"a":null}}}"#,
        )
        .unwrap();
        assert_eq!(merge["metadata"]["labels"], json!({}));
        let smp = apply(
            "",
            "Pod",
            &pod,
            PatchType::StrategicMerge,
            br#"{"metadata":{"labels":{"c":"3"}}}"#,
        )
        .unwrap();
        assert_eq!(smp["metadata"]["labels"], json!({"a": "1", "c": "3"}));
    }

    #[test]
    fn strategic_merge_patch_of_an_unknown_kind_is_unsupported_media_type() {
        let err = apply(
            "example.com",
            "Widget",
            &json!({}),
            PatchType::StrategicMerge,
            b"{}",
        )
        .unwrap_err();
        assert!(matches!(err, Error::UnsupportedKind { .. }));
        assert_eq!(err.status_code(), 415);
    }

    #[test]
    fn malformed_directives_are_bad_requests_and_misfits_unprocessable() {
        assert_eq!(Error::BadPatchFormatForRetainKeys.status_code(), 400);
        assert_eq!(Error::NoListOfLists.status_code(), 422);
        assert_eq!(Error::MergeDirectiveInList.status_code(), 422);
    }
}
