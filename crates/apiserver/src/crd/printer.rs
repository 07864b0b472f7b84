//! `kubectl get` tables of custom resources: the `Name` column, then the version's
//! `additionalPrinterColumns` (an `Age` column when it has none), each cell the column's
//! JSONPath read from the object and typed as upstream's `tableconvertor` types it.

use jiff::Timestamp;
use serde_json::{Value, json};
use skiff_apimachinery::table::human_duration;

/// One printer column of a CRD version.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub path: JsonPath,
}

/// The Name column upstream puts first (ObjectMeta's description of `name`).
const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// The columns of a version (its `additionalPrinterColumns`), defaulted as upstream: without
/// any, one `Age` column of `.metadata.creationTimestamp`. Paths are checked when the CRD is
/// validated, so a column whose path does not parse is left out.
pub fn columns(version: &Value) -> Vec<Column> {
    let declared = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array);
    let Some(declared) = declared.filter(|d| !d.is_empty()) else {
        let path = JsonPath::parse(".metadata.creationTimestamp").expect("a valid path");
        return vec![Column {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            path,
        }];
    };
    let text = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    declared
        .iter()
        .filter_map(|c| {
            Some(Column {
                name: text(c, "name"),
                type_: text(c, "type"),
                format: text(c, "format"),
                description: text(c, "description"),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                path: JsonPath::parse(c.get("jsonPath")?.as_str()?).ok()?,
            })
        })
        .collect()
}

/// The Table's column definitions.
pub fn definitions(columns: &[Column]) -> Vec<Value> {
    let name = json!({"name": "Name", "type": "string", "format": "name",
                      "description": NAME_DESCRIPTION, "priority": 0});
    std::iter::once(name)
        .chain(columns.iter().map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format,
                   "description": c.description, "priority": c.priority})
        }))
        .collect()
}

/// One object's cells.
pub fn cells(columns: &[Column], object: &Value, now: Timestamp) -> Vec<Value> {
    let name = object
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or_default();
    std::iter::once(name)
        .chain(columns.iter().map(|c| cell(c, object, now)))
        .collect()
}

/// A cell as upstream's `cellForJSONValue`: the first value the path finds, kept only when it
/// has the column's type (`null` otherwise); a date prints as the time since it.
fn cell(column: &Column, object: &Value, now: Timestamp) -> Value {
    let found = column.path.find(object);
    let Some(first) = found.first() else {
        return Value::Null;
    };
    match (column.type_.as_str(), first) {
        ("integer", Value::Number(n)) if n.is_i64() => (*first).clone(),
        ("number", Value::Number(_)) | ("boolean", Value::Bool(_)) => (*first).clone(),
        // A string column prints every match, space-separated, as kubectl's JSONPath does.
        ("string", _) => json!(
            found
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        ),
        ("date", Value::String(s)) => match s.parse::<Timestamp>() {
            Ok(t) => json!(human_duration(now.duration_since(t))),
            Err(_) => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// The JSONPath subset printer columns and selectable fields use: `.field`, `['field']`,
/// `[n]`, `[*]` and `[?(@.path=="value")]` filters. (Upstream's `client-go/util/jsonpath`
/// has no crate counterpart; its templates are more than columns need.)
#[derive(Debug, Clone, PartialEq)]
pub struct JsonPath(Vec<Step>);

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    All,
    /// Items whose value at the path equals the literal.
    Filter(Vec<String>, Value),
}

impl JsonPath {
    /// Parses a path such as `.status.conditions[?(@.type=="Ready")].status`.
    pub fn parse(text: &str) -> Result<JsonPath, String> {
        let bad = |why: &str| format!("invalid JSONPath {text:?}: {why}");
        let text = text.trim();
        let text = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(text);
        let mut steps = Vec::new();
        let mut rest = text.strip_prefix('$').unwrap_or(text);
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('.') {
                let end = after.find(['.', '[']).unwrap_or(after.len());
                if end == 0 {
                    return Err(bad("empty field name"));
                }
                steps.push(Step::Field(after[..end].to_string()));
                rest = &after[end..];
            } else if let Some(after) = rest.strip_prefix('[') {
                let end = after.find(']').ok_or_else(|| bad("unclosed ["))?;
                let inner = after[..end].trim();
                // A filter may hold `]` in its literal: take up to the `)]` that closes it.
                let (step, consumed) = if inner.starts_with("?(") {
                    // the filter starts after the `?(` and the whitespace before it (which may
                    // be more than one byte: `[\u{2003}?(…)]`)
                    let open = after.len() - after.trim_start().len() + 2;
                    let close = after.find(")]").ok_or_else(|| bad("unclosed filter"))?;
                    let filter =
                        parse_filter(&after[open..close]).ok_or_else(|| bad("bad filter"))?;
                    (filter, close + 2)
                } else if inner == "*" {
                    (Step::All, end + 1)
                } else if let Some(quoted) =
                    inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\''))
                {
                    (Step::Field(quoted.to_string()), end + 1)
                } else {
                    let index = inner.parse().map_err(|_| bad("bad index"))?;
                    (Step::Index(index), end + 1)
                };
                steps.push(step);
                rest = &after[consumed..];
            } else {
                return Err(bad("expected . or ["));
            }
        }
        if steps.is_empty() {
            return Err(bad("empty path"));
        }
        Ok(JsonPath(steps))
    }

    /// Every value the path reaches in `object`, in document order.
    pub fn find<'a>(&self, object: &'a Value) -> Vec<&'a Value> {
        let mut here = vec![object];
        for step in &self.0 {
            here = here
                .into_iter()
                .flat_map(|v| -> Vec<&'a Value> {
                    match (step, v) {
                        (Step::Field(f), Value::Object(m)) => m.get(f).into_iter().collect(),
                        (Step::Index(i), Value::Array(a)) => a.get(*i).into_iter().collect(),
                        (Step::All, Value::Array(a)) => a.iter().collect(),
                        (Step::All, Value::Object(m)) => m.values().collect(),
                        (Step::Filter(path, want), Value::Array(a)) => a
                            .iter()
                            .filter(|item| at(item, path) == Some(want))
                            .collect(),
                        _ => Vec::new(),
                    }
                })
                .collect();
        }
        here
    }

    /// The path as JSON pointer, when it names one field (`/spec/replicas`).
    pub fn pointer(&self) -> Option<String> {
        self.0
            .iter()
            .map(|s| match s {
                Step::Field(f) => Some(format!("/{}", f.replace('~', "~0").replace('/', "~1"))),
                _ => None,
            })
            .collect()
    }
}

fn at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, f| v.get(f))
}

/// `@.type=="Ready"` (or `'Ready'`, or a number or boolean literal).
fn parse_filter(text: &str) -> Option<Step> {
    let (left, right) = text.split_once("==")?;
    let path = left.trim().strip_prefix("@.")?;
    let right = right.trim();
    let literal = match right.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        Some(s) => json!(s),
        None => serde_json::from_str(right).ok()?,
    };
    Some(Step::Filter(
        path.split('.').map(str::to_string).collect(),
        literal,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-12-02T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn paths_reach_fields_indices_and_filtered_items() {
        let obj = json!({"spec": {"replicas": 3, "a.b": "dotted"},
                         "status": {"conditions": [{"type": "Synced", "status": "False"},
                                                   {"type": "Ready", "status": "True"}]}});
        let find = |p: &str| {
            JsonPath::parse(p)
                .unwrap()
                .find(&obj)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(find(".spec.replicas"), [json!(3)]);
        assert_eq!(find(".spec['a.b']"), [json!("dotted")]);
        assert_eq!(find(".status.conditions[1].type"), [json!("Ready")]);
        assert_eq!(
            find(".status.conditions[*].type"),
            [json!("Synced"), json!("Ready")]
        );
        assert_eq!(
            find(r#".status.conditions[?(@.type=="Ready")].status"#),
            [json!("True")]
        );
        assert!(find(".spec.missing").is_empty());
        assert_eq!(
            JsonPath::parse(".spec.replicas")
                .unwrap()
                .pointer()
                .as_deref(),
            Some("/spec/replicas")
        );
        assert!(JsonPath::parse(".spec[0]").unwrap().pointer().is_none());
        assert!(JsonPath::parse("spec").is_err());
        assert!(JsonPath::parse(".spec[").is_err());
        // whitespace before a filter, multi-byte included, is trimmed (a panic, found by the
        // fuzz tests)
        for space in [" ", "\u{2003}"] {
            let path = JsonPath::parse(&format!("[{space}?(@.type==\"Ready\")]")).unwrap();
            assert_eq!(path.find(&json!([{"type": "Ready"}])).len(), 1);
        }
    }

    #[test]
    fn cells_take_the_column_type_or_are_null() {
        let version = json!({"additionalPrinterColumns": [
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Wrong", "type": "integer", "jsonPath": ".status.phase"},
            {"name": "Since", "type": "date", "jsonPath": ".status.since", "priority": 1},
        ]});
        let cols = columns(&version);
        let defs = definitions(&cols);
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(defs[4]["priority"], 1);
        let obj = json!({"metadata": {"name": "w"}, "spec": {"replicas": 2},
                         "status": {"phase": "Up", "since": "2026-12-02T09:58:00Z"}});
        assert_eq!(
            cells(&cols, &obj, now()),
            [json!("w"), json!(2), json!("Up"), Value::Null, json!("2m")]
        );
    }

    #[test]
    fn a_version_without_columns_prints_its_age() {
        let cols = columns(&json!({}));
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2026-12-02T09:00:00Z"}});
        assert_eq!(definitions(&cols)[1]["name"], "Age");
        assert_eq!(cells(&cols, &obj, now()), [json!("w"), json!("60m")]);
    }
}
