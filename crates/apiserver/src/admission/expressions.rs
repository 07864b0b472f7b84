//! CEL for admission, shared by webhook `matchConditions` and ValidatingAdmissionPolicies: one
//! environment (the `cel` crate's standard library with its `strings` and `lists` extensions,
//! as much of upstream's base environment as the crate has), compiling, JSON as CEL values, and
//! evaluating against named variables (`object`, `oldObject`, `request`, `params`, …).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use serde_json::Value;

pub use cel::Program;

/// CEL's reserved words: not identifiers (upstream's `isCELIdentifier`), and escaped as
/// `__word__` in property names.
pub const RESERVED_WORDS: &[&str] = &[
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// Upstream's limit on a `messageExpression` result (`MaxEvaluatedMessageExpressionSizeBytes`).
pub const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// Built once: building an environment registers every standard function.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    env.add_extension(cel::extensions::strings)
        .expect("the strings extension is declared once");
    env.add_extension(cel::extensions::lists)
        .expect("the lists extension is declared once");
    Arc::new(env)
});

/// Compiles `expression`; `Err` is upstream's `compilation failed: …` text.
pub fn compile(expression: &str) -> Result<Program, String> {
    ENV.compile(expression)
        .map_err(|e| format!("compilation failed: {e}"))
}

/// A JSON value as CEL sees it: integers are `int` (upstream's unstructured objects hold
/// int64), larger ones `uint`, the rest `double`.
pub fn value(json: &Value) -> cel::Value {
    match json {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::from(s.as_str()),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(value).collect())),
        Value::Object(fields) => cel::Value::from(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), value(v)))
                .collect::<HashMap<String, cel::Value>>(),
        ),
    }
}

/// A context holding `variables`, in the shared environment.
pub fn context<'a>(
    variables: impl IntoIterator<Item = (&'a str, cel::Value)>,
) -> cel::Context<'static, 'static> {
    let mut context = cel::Context::with_env(ENV.clone());
    for (name, v) in variables {
        context.add_variable_from_value(name, v);
    }
    context
}

/// Runs `program`; `Err` is the evaluation error's text.
pub fn evaluate(program: &Program, context: &cel::Context<'_, '_>) -> Result<cel::Value, String> {
    program.execute(context).map_err(|e| e.to_string())
}

/// Upstream's match conditions: any false means no match; otherwise an error (not a bool, or
/// failing to evaluate) is reported for the failure policy to decide.
pub fn conditions(
    conditions: &[(String, Arc<Program>)],
    context: &cel::Context<'_, '_>,
) -> Result<bool, String> {
    let mut error = None;
    for (name, program) in conditions {
        match evaluate(program, context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Ok(false),
            Ok(other) => {
                error.get_or_insert(format!(
                    "failed to evaluate match condition {name:?}: expected a bool, got {other:?}"
                ));
            }
            Err(e) => {
                error.get_or_insert(format!("failed to evaluate match condition {name:?}: {e}"));
            }
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(expression: &str, object: Value) -> Result<cel::Value, String> {
        let program = compile(expression)?;
        evaluate(&program, &context([("object", value(&object))]))
    }

    #[test]
    fn json_integers_are_ints_so_arithmetic_with_literals_works() {
        let deploy = json!({"spec": {"replicas": 3}});
        assert_eq!(
            run("object.spec.replicas + 1 == 4", deploy.clone()),
            Ok(cel::Value::Bool(true))
        );
        assert_eq!(
            run("string(object.spec.replicas)", deploy),
            Ok(cel::Value::from("3"))
        );
    }

    #[test]
    fn macros_and_extensions_are_available() {
        let pod = json!({"metadata": {"name": "Web"},
            "spec": {"containers": [{"image": "nginx:1"}, {"image": "busybox"}]}});
        assert_eq!(
            run(
                "object.spec.containers.all(c, c.image.contains(':')) || has(object.spec.x)",
                pod.clone()
            ),
            Ok(cel::Value::Bool(false))
        );
        assert_eq!(
            run("object.metadata.name.lowerAscii()", pod),
            Ok(cel::Value::from("web"))
        );
        assert!(
            compile("object.(")
                .unwrap_err()
                .starts_with("compilation failed: ")
        );
    }
}
