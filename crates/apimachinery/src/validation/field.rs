//! Field paths and field errors, as upstream's `k8s.io/apimachinery/pkg/util/validation/field`:
//! the path an error points at (`spec.containers[0].image`), its type (`FieldValueRequired`),
//! the offending value, and the exact `Error()` text clients see in a 422 `Status`.

use super::gofmt;
use serde_json::Value;
use std::fmt;

/// A path from the root of an object to one field, rendered as upstream renders `field.Path`:
/// names joined by `.`, indices and map keys in brackets (`metadata.labels[app]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FieldPath {
    elements: Vec<Element>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Element {
    Name(String),
    Subscript(String),
}

impl FieldPath {
    /// A path whose root is the field `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            elements: vec![Element::Name(name.into())],
        }
    }

    /// This path extended by the field `name`.
    #[must_use]
    pub fn child(&self, name: impl Into<String>) -> Self {
        self.push(Element::Name(name.into()))
    }

    /// This path subscripted by a list index: `spec.containers[0]`.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        self.push(Element::Subscript(index.to_string()))
    }

    /// This path subscripted by a map key: `metadata.labels[app]`.
    #[must_use]
    pub fn key(&self, key: impl Into<String>) -> Self {
        self.push(Element::Subscript(key.into()))
    }

    fn push(&self, element: Element) -> Self {
        let mut elements = self.elements.clone();
        elements.push(element);
        Self { elements }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, element) in self.elements.iter().enumerate() {
            match element {
                // Upstream renders an empty name like an empty subscript.
                Element::Name(name) if !name.is_empty() => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(name)?;
                }
                Element::Name(name) | Element::Subscript(name) => write!(f, "[{name}]")?,
            }
        }
        Ok(())
    }
}

/// Why a field is invalid; one-to-one with the `StatusCause` types of a 422 `Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorType {
    /// A value that should refer to something (an ID, a name) found nothing.
    NotFound,
    /// A required value is missing (empty string, null, empty list).
    Required,
    /// A value that must be unique collides with another.
    Duplicate,
    /// A value is malformed: failed a format, out of range.
    Invalid,
    /// A value of an enumerated field is not one of the supported values.
    NotSupported,
    /// A well-formed value is not permitted under the current conditions.
    Forbidden,
    /// A value is too long; the message omits the value itself.
    TooLong,
    /// A list has too many items.
    TooMany,
    /// A list has too few items.
    TooFew,
    /// A value is too short.
    TooShort,
    /// Something went wrong that is not the user's input.
    Internal,
    /// A value does not have the schema's type for the field.
    TypeInvalid,
}

impl ErrorType {
    /// The machine-readable cause type (`FieldValueRequired`, `FieldValueInvalid`, …).
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotFound => "FieldValueNotFound",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::TooFew => "FieldValueTooFew",
            Self::TooShort => "FieldValueTooShort",
            Self::Internal => "InternalError",
            Self::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// The human-readable prefix of the message (`Required value`, `Invalid value`, …).
    pub fn message(self) -> &'static str {
        match self {
            Self::NotFound => "Not found",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
            Self::TooFew => "Too few",
            Self::TooShort => "Too short",
            Self::Internal => "Internal error",
        }
    }

    /// Whether upstream prints the bad value after the prefix for this type.
    fn shows_value(self) -> bool {
        !matches!(
            self,
            Self::Required | Self::Forbidden | Self::TooLong | Self::TooShort | Self::Internal
        )
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// One field-level validation error; `Display` gives upstream's `field.Error.Error()` text.
///
/// `bad_value` is `None` where upstream omits the value (required, forbidden, too long, or a
/// quantity that was not given).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{field}: {}", self.body())]
pub struct FieldError {
    /// Why the field is invalid.
    pub kind: ErrorType,
    /// The rendered path of the field.
    pub field: String,
    /// The offending value, if the message shows it.
    pub bad_value: Option<Value>,
    /// Further explanation; may be empty.
    pub detail: String,
}

/// A list of field errors, as upstream's `field.ErrorList`.
pub type ErrorList = Vec<FieldError>;

impl FieldError {
    fn new(
        kind: ErrorType,
        path: &FieldPath,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: path.to_string(),
            bad_value,
            detail: detail.into(),
        }
    }

    /// A required value is missing.
    pub fn required(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, path, None, detail)
    }

    /// `value` is malformed.
    pub fn invalid(path: &FieldPath, value: impl Into<Value>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, path, Some(value.into()), detail)
    }

    /// `value` is not one of `valid`; the detail lists them quoted.
    pub fn not_supported(path: &FieldPath, value: impl Into<Value>, valid: &[&str]) -> Self {
        let detail = if valid.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = valid.iter().map(|v| gofmt::quote(v)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(ErrorType::NotSupported, path, Some(value.into()), detail)
    }

    /// `value` collides with another that must be unique.
    pub fn duplicate(path: &FieldPath, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::Duplicate, path, Some(value.into()), "")
    }

    /// `value` refers to something that does not exist.
    pub fn not_found(path: &FieldPath, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::NotFound, path, Some(value.into()), "")
    }

    /// The field is not permitted here.
    pub fn forbidden(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, path, None, detail)
    }

    /// The value is longer than `max_len` bytes; the value itself is not shown.
    pub fn too_long(path: &FieldPath, max_len: usize) -> Self {
        let unit = if max_len == 1 { "byte" } else { "bytes" };
        Self::new(
            ErrorType::TooLong,
            path,
            None,
            format!("may not be more than {max_len} {unit}"),
        )
    }

    /// A list has `actual` items (if known) where at most `max` are allowed.
    pub fn too_many(path: &FieldPath, actual: Option<usize>, max: usize) -> Self {
        let unit = if max == 1 { "item" } else { "items" };
        Self::new(
            ErrorType::TooMany,
            path,
            actual.map(Value::from),
            format!("must have at most {max} {unit}"),
        )
    }

    /// A list has `actual` items where at least `min` are required.
    pub fn too_few(path: &FieldPath, actual: usize, min: usize) -> Self {
        let unit = if min == 1 { "item" } else { "items" };
        Self::new(
            ErrorType::TooFew,
            path,
            Some(actual.into()),
            format!("must have at least {min} {unit}"),
        )
    }

    /// The value is shorter than `min_len` characters.
    pub fn too_short(path: &FieldPath, value: &str, min_len: usize) -> Self {
        let unit = if min_len == 1 {
            "character"
        } else {
            "characters"
        };
        Self::new(
            ErrorType::TooShort,
            path,
            Some(value.into()),
            format!("must be at least {min_len} {unit}"),
        )
    }

    /// Validation itself failed for a reason unrelated to the input.
    pub fn internal(path: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Internal, path, None, detail)
    }

    /// `value` does not have the field's type.
    pub fn type_invalid(
        path: &FieldPath,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::TypeInvalid, path, Some(value.into()), detail)
    }

    /// The message without the field path, as upstream's `ErrorBody()`; this is the `message` of
    /// the error's `StatusCause`.
    pub fn body(&self) -> String {
        let mut s = self.kind.message().to_string();
        if self.kind.shows_value()
            && let Some(value) = &self.bad_value
        {
            s.push_str(": ");
            match value {
                Value::String(v) => s.push_str(&gofmt::quote(v)),
                Value::Number(n) => s.push_str(&gofmt::number(n)),
                Value::Bool(b) => s.push_str(if *b { "true" } else { "false" }),
                other => s.push_str(&gofmt::json(other)),
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

/// The text of upstream's `ErrorList.ToAggregate().Error()`: `None` for no errors, the one message
/// for one, and `[a, b]` for several, with repeated messages dropped.
pub fn aggregate(errors: &[FieldError]) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        let msg = e.to_string();
        if !seen.contains(&msg) {
            seen.push(msg);
        }
    }
    match seen.len() {
        0 => None,
        1 => seen.pop(),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_render_names_with_dots_and_subscripts_in_brackets() {
        let spec = FieldPath::new("spec");
        assert_eq!(spec.to_string(), "spec");
        assert_eq!(
            spec.child("containers").index(0).to_string(),
            "spec.containers[0]"
        );
        assert_eq!(
            spec.child("containers").index(0).child("image").to_string(),
            "spec.containers[0].image"
        );
        assert_eq!(
            FieldPath::new("metadata")
                .child("labels")
                .key("app")
                .to_string(),
            "metadata.labels[app]"
        );
        assert_eq!(FieldPath::new("a").index(1).index(2).to_string(), "a[1][2]");
        assert_eq!(
            FieldPath::new("values").index(0).key("k").to_string(),
            "values[0][k]"
        );
    }

    #[test]
    fn error_types_carry_upstream_reasons_and_prefixes() {
        let cases = [
            (ErrorType::NotFound, "FieldValueNotFound", "Not found"),
            (ErrorType::Required, "FieldValueRequired", "Required value"),
            (
                ErrorType::Duplicate,
                "FieldValueDuplicate",
                "Duplicate value",
            ),
            (ErrorType::Invalid, "FieldValueInvalid", "Invalid value"),
            (
                ErrorType::NotSupported,
                "FieldValueNotSupported",
                "Unsupported value",
            ),
            (ErrorType::Forbidden, "FieldValueForbidden", "Forbidden"),
            (ErrorType::TooLong, "FieldValueTooLong", "Too long"),
            (ErrorType::TooMany, "FieldValueTooMany", "Too many"),
            (ErrorType::TooFew, "FieldValueTooFew", "Too few"),
            (ErrorType::TooShort, "FieldValueTooShort", "Too short"),
            (ErrorType::Internal, "InternalError", "Internal error"),
            (
                ErrorType::TypeInvalid,
                "FieldValueTypeInvalid",
                "Invalid value",
            ),
        ];
        for (kind, reason, message) in cases {
            assert_eq!(kind.reason(), reason);
            assert_eq!(kind.message(), message);
            assert_eq!(kind.to_string(), message);
        }
    }

    #[test]
    fn errors_display_exactly_as_upstream_field_errors() {
        let image = FieldPath::new("spec")
            .child("containers")
            .index(0)
            .child("image");
        let name = FieldPath::new("metadata").child("name");
        let cases = [
            (
                FieldError::required(&image, ""),
                "spec.containers[0].image: Required value",
            ),
            (
                FieldError::required(&name, "name or generateName is required"),
                "metadata.name: Required value: name or generateName is required",
            ),
            (
                FieldError::invalid(&name, "Foo", "bad"),
                r#"metadata.name: Invalid value: "Foo": bad"#,
            ),
            (
                FieldError::invalid(&name, 5, "neg"),
                "metadata.name: Invalid value: 5: neg",
            ),
            (
                FieldError::invalid(&name, true, ""),
                "metadata.name: Invalid value: true",
            ),
            (
                FieldError::invalid(&name, json!(["a", "b"]), "x"),
                r#"metadata.name: Invalid value: ["a","b"]: x"#,
            ),
            (
                FieldError::invalid(&name, Value::Null, "x"),
                "metadata.name: Invalid value: null: x",
            ),
            (
                FieldError::not_supported(&name, "Sometimes", &["Always", "IfNotPresent", "Never"]),
                r#"metadata.name: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never""#,
            ),
            (
                FieldError::duplicate(&name, "a"),
                r#"metadata.name: Duplicate value: "a""#,
            ),
            (
                FieldError::not_found(&name, "a"),
                r#"metadata.name: Not found: "a""#,
            ),
            (
                FieldError::forbidden(&name, "not allowed on this type"),
                "metadata.name: Forbidden: not allowed on this type",
            ),
            (
                FieldError::too_long(&name, 262144),
                "metadata.name: Too long: may not be more than 262144 bytes",
            ),
            (
                FieldError::too_long(&name, 1),
                "metadata.name: Too long: may not be more than 1 byte",
            ),
            (
                FieldError::too_many(&name, Some(5), 3),
                "metadata.name: Too many: 5: must have at most 3 items",
            ),
            (
                FieldError::too_many(&name, None, 1),
                "metadata.name: Too many: must have at most 1 item",
            ),
            (
                FieldError::too_few(&name, 0, 1),
                "metadata.name: Too few: 0: must have at least 1 item",
            ),
            (
                FieldError::too_short(&name, "a", 2),
                "metadata.name: Too short: must be at least 2 characters",
            ),
            (
                FieldError::internal(&name, "boom"),
                "metadata.name: Internal error: boom",
            ),
            (
                FieldError::type_invalid(&name, 1, "must be of type string"),
                "metadata.name: Invalid value: 1: must be of type string",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want);
        }
    }

    #[test]
    fn aggregate_joins_several_errors_in_brackets_and_drops_repeats() {
        let p = FieldPath::new("a");
        assert_eq!(aggregate(&[]), None);
        let one = FieldError::required(&p, "");
        assert_eq!(
            aggregate(std::slice::from_ref(&one)).as_deref(),
            Some("a: Required value")
        );
        let two = FieldError::forbidden(&p, "no");
        assert_eq!(
            aggregate(&[one.clone(), two, one]).as_deref(),
            Some("[a: Required value, a: Forbidden: no]")
        );
    }
}
