//! API errors: every failure a client can see is a `metav1.Status` with upstream's code, reason,
//! message and details (`kubectl` prints the message; clients switch on the reason).

use serde_json::{Value, json};
use skiff_apimachinery::validation::FieldError;

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// A request that failed, as the `Status` object the client receives.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code (`404`, `409`, `422`, …).
    pub code: u16,
    /// `metav1.StatusReason` (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, …).
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status: name, group, kind, causes.
    pub details: Option<Value>,
}

/// Which object an error is about (fills `Status.details`).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Group of the resource, `""` for core.
    pub group: &'a str,
    /// The resource (`pods`) as upstream puts it in `details.kind` and messages.
    pub resource: &'a str,
    pub name: &'a str,
}

impl Target<'_> {
    /// `pods` or `deployments.apps`, as upstream's `GroupResource.String()`.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    fn details(&self) -> Value {
        let mut d = json!({"name": self.name, "kind": self.resource});
        if !self.group.is_empty() {
            d["group"] = json!(self.group);
        }
        d
    }
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// An error with an explicit code and reason (for codes the named constructors do not
    /// cover).
    pub fn with_code(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message)
    }

    pub fn not_found(t: Target<'_>) -> Self {
        Self {
            details: Some(t.details()),
            ..Self::new(
                404,
                "NotFound",
                format!("{} \"{}\" not found", t.qualified(), t.name),
            )
        }
    }

    /// Upstream's `NewForbidden`: `pods "x" is forbidden: why` (`pods is forbidden: why`
    /// without a name), with the target in the details.
    pub fn forbidden_target(t: Target<'_>, why: &str) -> Self {
        let message = if t.name.is_empty() {
            format!("{} is forbidden: {why}", t.qualified())
        } else {
            format!("{} \"{}\" is forbidden: {why}", t.qualified(), t.name)
        };
        Self {
            details: Some(t.details()),
            ..Self::new(403, "Forbidden", message)
        }
    }

    pub fn already_exists(t: Target<'_>) -> Self {
        Self {
            details: Some(t.details()),
            ..Self::new(
                409,
                "AlreadyExists",
                format!("{} \"{}\" already exists", t.qualified(), t.name),
            )
        }
    }

    /// An update against a stale resourceVersion (upstream's optimistic-concurrency message).
    pub fn conflict(t: Target<'_>, why: &str) -> Self {
        Self {
            details: Some(t.details()),
            ..Self::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{}\": {why}",
                    t.qualified(),
                    t.name
                ),
            )
        }
    }

    /// 422 with one cause per field error (`kind "name" is invalid: [a, b]`).
    pub fn invalid(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Self {
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| {
                let full = e.to_string();
                let body = full
                    .strip_prefix(&format!("{}: ", e.field))
                    .unwrap_or(&full);
                json!({"reason": e.kind.reason(), "message": body, "field": e.field})
            })
            .collect();
        let list = if errors.len() == 1 {
            errors[0].to_string()
        } else {
            format!(
                "[{}]",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut details = json!({"name": name, "kind": kind, "causes": causes});
        if !group.is_empty() {
            details["group"] = json!(group);
        }
        Self {
            details: Some(details),
            ..Self::new(
                422,
                "Invalid",
                format!("{qualified} \"{name}\" is invalid: {list}"),
            )
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_supported(verb: &str, resource: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("{verb} is not supported on resources of kind \"{resource}\""),
        )
    }

    /// 410 for a watch or list from a compacted or too old resourceVersion.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {content_type:?})"
            ),
        )
    }

    pub fn not_acceptable(accept: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml (got {accept:?})"
            ),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// The `Status` object sent to the client.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            status["details"] = d.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<skiff_store::Error> for ApiError {
    fn from(e: skiff_store::Error) -> Self {
        match e {
            skiff_store::Error::Compacted { .. } => {
                ApiError::gone("The resourceVersion for the provided watch is too old.".to_string())
            }
            skiff_store::Error::FutureRevision { .. } => {
                ApiError::timeout(format!("Too large resource version: {e}"))
            }
            skiff_store::Error::ValueTooLarge { .. } => {
                ApiError::too_large(format!("object is too large to store: {e}"))
            }
            skiff_store::Error::Unavailable(_) => ApiError::service_unavailable(e.to_string()),
            other => ApiError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_qualified_resource() {
        let e = ApiError::not_found(Target {
            group: "apps",
            resource: "deployments",
            name: "web",
        });
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["group"], "apps");
        assert_eq!(s["details"]["kind"], "deployments");
    }
}
