//! Evaluating one policy for one request and one param (upstream's `validator.Validate`):
//! match conditions, variables, validations with their messages and reasons, audit annotation
//! values; errors go to the policy's failure policy. Synchronous: CEL contexts never live
//! across an await.

use std::collections::HashMap;

use serde_json::Value;

use super::policy::{Policy, Validation};
use crate::admission::expressions::{self, MAX_MESSAGE_BYTES, conditions, evaluate as run};

/// The request as CEL sees it, converted once per request.
pub struct Input {
    pub object: cel::Value,
    pub old_object: cel::Value,
    /// The AdmissionRequest (kind, resource, name, namespace, operation, userInfo, …).
    pub request: cel::Value,
    /// The request's Namespace, null for cluster-scoped requests.
    pub namespace_object: cel::Value,
}

/// A validation that refused, or an error that fails closed.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The validation's index (0 for match condition errors).
    pub index: usize,
    pub message: String,
    /// The Status reason the refusal carries (`Invalid` unless the validation gives one).
    pub reason: &'static str,
}

/// What one evaluation found.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// Refusals, for the binding's validation actions to act on.
    pub failures: Vec<Failure>,
    /// Audit annotations that failed and fail closed: these refuse whatever the actions.
    pub annotation_errors: Vec<String>,
    /// Audit annotation keys and values.
    pub annotations: Vec<(String, String)>,
}

/// Evaluates `policy` against `input` with `params` (null for none).
pub fn evaluate(policy: &Policy, input: &Input, params: &Value) -> Outcome {
    let mut context = expressions::context([
        ("object", input.object.clone()),
        ("oldObject", input.old_object.clone()),
        ("request", input.request.clone()),
        ("namespaceObject", input.namespace_object.clone()),
        ("params", expressions::value(params)),
    ]);
    let mut outcome = Outcome::default();
    let error = |message: String| Failure {
        index: 0,
        message,
        reason: "Invalid",
    };
    match conditions(&policy.match_conditions, &context) {
        Ok(true) => {}
        Ok(false) => return outcome,
        Err(_) if policy.fail_open => return outcome,
        Err(why) => {
            outcome.failures.push(error(why));
            return outcome;
        }
    }
    // Variables are evaluated in order (each may use the ones before); one that fails is left
    // out, and an expression that then fails names its error.
    let mut variables = HashMap::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for (name, e) in &policy.variables {
        match run(&e.program, &context) {
            Ok(v) => {
                variables.insert(name.clone(), v);
                context.add_variable_from_value("variables", cel::Value::from(variables.clone()));
            }
            Err(why) => failed.push((name.clone(), why)),
        }
    }
    if variables.is_empty() {
        context.add_variable_from_value("variables", cel::Value::from(variables));
    }
    let resulted_in_error = |source: &str, why: String| {
        let why = failed
            .iter()
            .find(|(name, _)| source.contains(&format!("variables.{name}")))
            .map_or(why, |(name, e)| {
                format!("composited variable \"{name}\" fails to evaluate: {e}")
            });
        format!("expression '{source}' resulted in error: {why}")
    };
    for (index, v) in policy.validations.iter().enumerate() {
        match run(&v.expression.program, &context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(_) => outcome.failures.push(Failure {
                index,
                message: message(v, &context),
                reason: v.reason,
            }),
            Err(_) if policy.fail_open => {}
            Err(why) => outcome.failures.push(Failure {
                index,
                ..error(resulted_in_error(&v.expression.source, why))
            }),
        }
    }
    for (key, e) in &policy.audit_annotations {
        let failure = match run(&e.program, &context) {
            Ok(cel::Value::String(s)) => {
                if !s.trim().is_empty() {
                    outcome
                        .annotations
                        .push((key.clone(), s.trim().to_string()));
                }
                continue;
            }
            Ok(cel::Value::Null) => continue,
            Ok(other) => format!(
                "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                e.source,
                type_name(&other)
            ),
            Err(why) => resulted_in_error(&e.source, why),
        };
        if !policy.fail_open {
            outcome.annotation_errors.push(failure);
        }
    }
    outcome
}

/// A refusal's message: the `messageExpression` result when it is a usable string (one line,
/// not blank, at most 5 KiB), else `message`, else `failed expression: <expression>`.
fn message(v: &Validation, context: &cel::Context<'_, '_>) -> String {
    let evaluated = v
        .message_expression
        .as_ref()
        .and_then(|m| match run(&m.program, context) {
            Ok(cel::Value::String(s)) => Some(s.trim().to_string()),
            _ => None,
        });
    match evaluated {
        Some(m) if !m.is_empty() && m.len() <= MAX_MESSAGE_BYTES && !m.contains('\n') => m,
        _ if !v.message.trim().is_empty() => v.message.trim().to_string(),
        _ => format!("failed expression: {}", v.expression.source.trim()),
    }
}

fn type_name(v: &cel::Value) -> &'static str {
    match v {
        cel::Value::Int(_) => "int",
        cel::Value::UInt(_) => "uint",
        cel::Value::Float(_) => "double",
        cel::Value::Bool(_) => "bool",
        cel::Value::Bytes(_) => "bytes",
        cel::Value::List(_) => "list",
        cel::Value::Map(_) => "map",
        _ => "dyn",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::validating_policy::policy::Policy;
    use serde_json::json;

    fn policy(spec: Value) -> Policy {
        Policy::parse(&json!({"metadata": {"name": "p"}, "spec": spec}))
    }

    fn input(object: Value) -> Input {
        Input {
            object: expressions::value(&object),
            old_object: cel::Value::Null,
            request: expressions::value(&json!({"operation": "CREATE", "namespace": "team"})),
            namespace_object: expressions::value(
                &json!({"metadata": {"name": "team", "labels": {"tier": "gold"}}}),
            ),
        }
    }

    fn deployment(replicas: i64) -> Input {
        input(json!({"metadata": {"name": "web"}, "spec": {"replicas": replicas}}))
    }

    #[test]
    fn false_validations_fail_with_their_message_reason_and_index() {
        let p = policy(json!({"validations": [
            {"expression": "object.spec.replicas <= 5"},
            {"expression": "object.spec.replicas <= 3", "message": "  too many  ", "reason": "Forbidden"},
            {"expression": "object.spec.replicas <= 2", "message": "fallback",
             "messageExpression": "'replicas ' + string(object.spec.replicas) + ' in ' + namespaceObject.metadata.labels.tier"},
            {"expression": "object.spec.replicas <= 1", "message": "fallback",
             "messageExpression": "'two\\nlines'"}]}));
        assert_eq!(
            evaluate(&p, &deployment(1), &Value::Null),
            Outcome::default()
        );
        let failures = evaluate(&p, &deployment(6), &Value::Null).failures;
        let got: Vec<(usize, &str, &str)> = failures
            .iter()
            .map(|f| (f.index, f.message.as_str(), f.reason))
            .collect();
        assert_eq!(
            got,
            [
                (0, "failed expression: object.spec.replicas <= 5", "Invalid"),
                (1, "too many", "Forbidden"),
                (2, "replicas 6 in gold", "Invalid"),
                (3, "fallback", "Invalid"),
            ]
        );
    }

    #[test]
    fn errors_follow_the_failure_policy() {
        let spec = |failure: &str| {
            json!({"failurePolicy": failure,
                   "validations": [{"expression": "object.spec.missing > 1"}]})
        };
        let closed = evaluate(&policy(spec("Fail")), &deployment(1), &Value::Null);
        assert_eq!(closed.failures.len(), 1);
        assert!(
            closed.failures[0]
                .message
                .starts_with("expression 'object.spec.missing > 1' resulted in error: "),
            "{}",
            closed.failures[0].message
        );
        let open = evaluate(&policy(spec("Ignore")), &deployment(1), &Value::Null);
        assert_eq!(open, Outcome::default());
    }

    #[test]
    fn match_conditions_variables_and_params_are_visible_to_validations() {
        let p = policy(json!({
            "matchConditions": [{"name": "not-system", "expression": "request.namespace != 'kube-system'"}],
            "variables": [{"name": "limit", "expression": "int(params.data.max)"},
                          {"name": "over", "expression": "object.spec.replicas > variables.limit"}],
            "validations": [{"expression": "!variables.over",
                             "messageExpression": "'at most ' + string(variables.limit)"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"},
                                 {"key": "none", "valueExpression": "null"}]}));
        let params = json!({"data": {"max": "3"}});
        let outcome = evaluate(&p, &deployment(4), &params);
        assert_eq!(outcome.failures[0].message, "at most 3");
        assert_eq!(outcome.annotations, [("replicas".into(), "4".into())]);
        let mut system = deployment(4);
        system.request = expressions::value(&json!({"namespace": "kube-system"}));
        assert_eq!(evaluate(&p, &system, &params), Outcome::default());
    }
}
