//! JSON to [`Schema`]: every keyword of `JSONSchemaProps` read with its JSON type checked (a
//! keyword of the wrong type is an error where upstream fails decoding the CRD), unsupported
//! keywords recorded for the checks to reject, and `x-kubernetes-validations` compiled.

use serde_json::{Map, Value};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Additional, Checks, Extensions, Pattern, Schema, cel, regex::Regex};

/// Keywords upstream rejects, in the order its conversion reports them.
const UNSUPPORTED: &[&str] = &[
    "id",
    "$schema",
    "$ref",
    "patternProperties",
    "dependencies",
    "additionalItems",
    "definitions",
];

/// Parses `json` (a schema object) at `path`; decoding errors go to `errs`. `resource_root`:
/// the schema of a whole resource (the version's schema), whose `metadata` rules see only
/// names of.
pub(super) fn parse(
    json: &Value,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
    resource_root: bool,
) -> Schema {
    let Some(obj) = json.as_object() else {
        errs.push(FieldError::invalid(path, json.clone(), "must be an object"));
        return Schema::default();
    };
    let mut r = Reader { obj, path, errs };
    let mut unsupported: Vec<&'static str> = UNSUPPORTED
        .iter()
        .copied()
        .filter(|k| r.present(k))
        .collect();
    let items = match obj.get("items") {
        Some(Value::Array(_)) => {
            unsupported.push("items");
            None
        }
        Some(v @ Value::Object(_)) => Some(Box::new(parse(v, &path.child("items"), r.errs, false))),
        Some(Value::Null) | None => None,
        Some(other) => {
            r.wrong("items", other, "an object");
            None
        }
    };
    let additional_properties = match obj.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(Additional::Bool(*b)),
        Some(v @ Value::Object(_)) => Some(Additional::Schema(Box::new(parse(
            v,
            &path.child("additionalProperties"),
            r.errs,
            false,
        )))),
        Some(Value::Null) | None => None,
        Some(other) => {
            r.wrong("additionalProperties", other, "a boolean or an object");
            None
        }
    };
    let properties = r
        .object("properties")
        .map(|props| {
            props
                .iter()
                .map(|(k, v)| {
                    let child = parse(v, &path.child("properties").key(k), r.errs, false);
                    (k.clone(), child)
                })
                .collect()
        })
        .unwrap_or_default();
    let checks = Checks {
        maximum: r.number("maximum"),
        exclusive_maximum: r.boolean("exclusiveMaximum"),
        minimum: r.number("minimum"),
        exclusive_minimum: r.boolean("exclusiveMinimum"),
        max_length: r.integer("maxLength"),
        min_length: r.integer("minLength"),
        pattern: r
            .string("pattern")
            .filter(|p| !p.is_empty())
            .map(|source| Pattern {
                compiled: Regex::new(&source),
                source,
            }),
        max_items: r.integer("maxItems"),
        min_items: r.integer("minItems"),
        unique_items: r.boolean("uniqueItems"),
        multiple_of: r.number("multipleOf"),
        enumeration: r.array("enum").to_vec(),
        max_properties: r.integer("maxProperties"),
        min_properties: r.integer("minProperties"),
        required: r.strings("required"),
        all_of: r.schemas("allOf"),
        any_of: r.schemas("anyOf"),
        one_of: r.schemas("oneOf"),
        not: obj
            .get("not")
            .filter(|v| !v.is_null())
            .map(|v| Box::new(parse(v, &path.child("not"), r.errs, false))),
    };
    let x = Extensions {
        preserve_unknown_fields: r.opt_boolean("x-kubernetes-preserve-unknown-fields"),
        embedded_resource: r.boolean("x-kubernetes-embedded-resource"),
        int_or_string: r.boolean("x-kubernetes-int-or-string"),
        list_type: r.string("x-kubernetes-list-type"),
        list_map_keys: r.strings("x-kubernetes-list-map-keys"),
        map_type: r.string("x-kubernetes-map-type"),
        rules: Vec::new(),
    };
    let mut schema = Schema {
        type_name: r.string("type").unwrap_or_default(),
        format: r.string("format").unwrap_or_default(),
        title: r.string("title").unwrap_or_default(),
        description: r.string("description").unwrap_or_default(),
        external_docs: r.present("externalDocs"),
        nullable: r.boolean("nullable"),
        default: obj.get("default").filter(|v| !v.is_null()).cloned(),
        properties,
        additional_properties,
        items,
        checks,
        x,
        unsupported,
        only_type: obj.keys().all(|k| k == "type" || k == "example"),
        has_rules: false,
        rule_fields: None,
        has_embedded: false,
        has_keyed_lists: false,
    };
    // Rules are compiled against the finished node: field paths and field references are
    // checked against its properties.
    let rules_path = path.child("x-kubernetes-validations");
    let rules: Vec<cel::Rule> = r
        .array("x-kubernetes-validations")
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let rule_path = rules_path.index(i);
            let Some(fields) = rule.as_object() else {
                r.errs.push(FieldError::invalid(
                    &rule_path,
                    rule.clone(),
                    "must be an object",
                ));
                return cel::Rule::parse(rule, Default::default(), &schema, false);
            };
            let mut rr = Reader {
                obj: fields,
                path: &rule_path,
                errs: r.errs,
            };
            let fields = cel::RuleFields {
                rule: rr.string("rule").unwrap_or_default(),
                message: rr.string("message").unwrap_or_default(),
                message_expression: rr.string("messageExpression").unwrap_or_default(),
                reason: rr.string("reason"),
                field_path: rr.string("fieldPath").unwrap_or_default(),
                optional_old_self: rr.opt_boolean("optionalOldSelf"),
            };
            let resource = resource_root || schema.x.embedded_resource;
            cel::Rule::parse(rule, fields, &schema, resource)
        })
        .collect();
    let below = |schema: &Schema, has: fn(&Schema) -> bool| {
        schema.items.as_deref().is_some_and(has)
            || schema.properties.values().any(has)
            || schema.additional_schema().flatten().is_some_and(has)
    };
    schema.has_rules = !rules.is_empty() || below(&schema, |s| s.has_rules);
    schema.has_embedded = schema.x.embedded_resource || below(&schema, |s| s.has_embedded);
    schema.has_keyed_lists = matches!(schema.x.list_type.as_deref(), Some("set" | "map"))
        || below(&schema, |s| s.has_keyed_lists);
    schema.rule_fields = cel::selected(&rules);
    schema.x.rules = rules;
    schema
}

/// Typed access to one schema object's keywords; a keyword of the wrong JSON type is recorded
/// as an error and read as absent.
struct Reader<'a> {
    obj: &'a Map<String, Value>,
    path: &'a FieldPath,
    errs: &'a mut Vec<FieldError>,
}

impl<'a> Reader<'a> {
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn present(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn wrong(&mut self, key: &str, value: &Value, expected: &str) {
        self.errs.push(FieldError::invalid(
            &self.path.child(key),
            value.clone(),
            format!("must be {expected}"),
        ));
    }

    fn typed<T>(
        &mut self,
        key: &str,
        expected: &str,
        f: impl Fn(&'a Value) -> Option<T>,
    ) -> Option<T> {
        let value = self.get(key)?;
        let typed = f(value);
        if typed.is_none() {
            self.wrong(key, value, expected);
        }
        typed
    }

    fn string(&mut self, key: &str) -> Option<String> {
        self.typed(key, "a string", |v| v.as_str().map(str::to_string))
    }

    fn opt_boolean(&mut self, key: &str) -> Option<bool> {
        self.typed(key, "a boolean", Value::as_bool)
    }

    fn boolean(&mut self, key: &str) -> bool {
        self.opt_boolean(key).unwrap_or(false)
    }

    fn number(&mut self, key: &str) -> Option<f64> {
        self.typed(key, "a number", Value::as_f64)
    }

    fn integer(&mut self, key: &str) -> Option<i64> {
        self.typed(key, "an integer", Value::as_i64)
    }

    fn array(&mut self, key: &str) -> &'a [Value] {
        self.typed(key, "an array", |v| v.as_array().map(Vec::as_slice))
            .unwrap_or_default()
    }

    fn object(&mut self, key: &str) -> Option<&'a Map<String, Value>> {
        self.typed(key, "an object", Value::as_object)
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        self.typed(key, "an array of strings", |v| {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
    }

    fn schemas(&mut self, key: &str) -> Vec<Schema> {
        let path = self.path.child(key);
        self.array(key)
            .iter()
            .enumerate()
            .map(|(i, v)| parse(v, &path.index(i), self.errs, false))
            .collect()
    }
}
