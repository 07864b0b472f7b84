//! Tests of structural schemas: the CRD schema checks with upstream's messages, validation of
//! custom resources, CEL rules, defaulting, pruning, and the regular expressions and formats
//! underneath.

use serde_json::{Value, json};
use skiff_apimachinery::validation::FieldPath;

use super::{Schema, formats, regex::Regex};

const P: &str = "spec.versions[0].schema.openAPIV3Schema";

fn root() -> FieldPath {
    FieldPath::new("spec")
        .child("versions")
        .index(0)
        .child("schema")
        .child("openAPIV3Schema")
}

/// The CRD errors for `schema`, as text, with the root path written `P`.
fn crd_errors(schema: Value) -> Vec<String> {
    Schema::new(&schema, &root())
        .err()
        .unwrap_or_default()
        .iter()
        .map(|e| e.to_string().replace(P, "P"))
        .collect()
}

fn parsed(schema: Value) -> Schema {
    Schema::new(&schema, &root()).unwrap_or_else(|e| panic!("schema rejected: {e:?}"))
}

fn object(properties: Value) -> Value {
    json!({"type": "object", "properties": properties})
}

/// A schema whose `spec` has `properties`.
fn with_spec(properties: Value) -> Schema {
    parsed(object(json!({"spec": object(properties)})))
}

fn errors(schema: &Schema, obj: Value) -> Vec<String> {
    schema
        .validate(&obj, None)
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn update_errors(schema: &Schema, obj: Value, old: Value) -> Vec<String> {
    schema
        .validate(&obj, Some(&old))
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn schemas_without_types_are_not_structural() {
    assert_eq!(
        crd_errors(json!({"properties": {"spec": {"type": "object"}}})),
        ["P.type: Required value: must not be empty at the root"]
    );
    assert_eq!(
        crd_errors(object(
            json!({"spec": {"properties": {"a": {"type": "string"}}}})
        )),
        ["P.properties[spec].type: Required value: must not be empty for specified object fields"]
    );
    assert_eq!(
        crd_errors(object(json!({"list": {"type": "array"}}))),
        ["P.properties[list].items: Required value: must be specified"]
    );
    assert_eq!(
        crd_errors(object(json!({"list": {"type": "array", "items": {}}}))),
        [
            "P.properties[list].items.type: Required value: must not be empty for specified array items"
        ]
    );
    // Untyped is fine where unknown fields are preserved, and for int-or-string.
    parsed(object(
        json!({"any": {"x-kubernetes-preserve-unknown-fields": true},
                         "port": {"x-kubernetes-int-or-string": true}}),
    ));
}

#[test]
fn value_validations_may_not_add_structure() {
    let schema = object(json!({"a": {"type": "string"}}));
    let mut schema = schema.as_object().cloned().unwrap_or_default();
    schema.insert(
        "anyOf".into(),
        json!([{"type": "object", "nullable": true, "properties": {"b": {"maxLength": 3}}}]),
    );
    assert_eq!(
        crd_errors(Value::Object(schema)),
        [
            "P.anyOf[0].nullable: Forbidden: must be false to be structural",
            "P.anyOf[0].type: Forbidden: must be empty to be structural",
            "P.properties[b]: Required value: because it is defined in P.anyOf[0].properties[b]",
        ]
    );
    assert_eq!(
        crd_errors(object(json!({"spec": {"type": "object",
            "allOf": [{"additionalProperties": {"type": "string"},
                       "x-kubernetes-validations": [{"rule": "true"}]}]}}))),
        [
            "P.properties[spec].allOf[0].additionalProperties: Forbidden: must be undefined to be structural",
            "P.properties[spec].allOf[0].x-kubernetes-validations: Forbidden: must be empty to be structural",
        ]
    );
    // int-or-string's spelling is the exception.
    parsed(object(json!({"port": {"x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}]}})));
}

#[test]
fn root_metadata_may_only_restrict_names() {
    assert_eq!(
        crd_errors(object(
            json!({"metadata": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 10}, "labels": {"type": "object"}}}})
        )),
        [
            "P.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"metadata": {"type": "object", "default": {}}})
        )),
        ["P.properties[metadata].default: Forbidden: must not be set in top-level metadata"]
    );
    parsed(object(
        json!({"metadata": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 10}}}}),
    ));
}

#[test]
fn unsupported_keywords_are_forbidden() {
    assert_eq!(
        crd_errors(
            json!({"type": "object", "definitions": {"x": {"type": "string"}},
            "properties": {"a": {"$ref": "#/definitions/x"}}})
        ),
        [
            "P.definitions: Forbidden: definitions is not supported",
            "P.properties[a].$ref: Forbidden: $ref is not supported",
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"l": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}})
        )),
        [
            "P.properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"a": {"type": "string", "x-kubernetes-preserve-unknown-fields": false}})
        )),
        [
            "P.properties[a].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
        ]
    );
    assert_eq!(
        crd_errors(object(json!({"a": {"type": "foo"}}))),
        [
            r#"P.properties[a].type: Unsupported value: "foo": supported values: "array", "boolean", "integer", "number", "object", "string""#
        ]
    );
    assert_eq!(
        crd_errors(json!({"type": "object", "$schema": "http://json-schema.org/schema#"})),
        [r#"P: Invalid value: "": OpenAPIV3Schema 'schema' is not supported"#]
    );
    assert_eq!(
        crd_errors(json!({"type": "object", "nullable": true})),
        ["P.nullable: Forbidden: nullable cannot be true at the root"]
    );
    assert_eq!(
        crd_errors(json!({"type": 5})),
        ["P.type: Invalid value: 5: must be a string"]
    );
}

#[test]
fn properties_and_additional_properties_exclude_each_other() {
    assert_eq!(
        crd_errors(object(
            json!({"m": {"type": "object", "properties": {"a": {"type": "string"}},
            "additionalProperties": {"type": "string"}}})
        )),
        [
            "P.properties[m].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
        ]
    );
    assert_eq!(
        crd_errors(json!({"type": "object", "additionalProperties": {"type": "string"}})),
        ["P.additionalProperties: Forbidden: must not be used at the root"]
    );
}

#[test]
fn patterns_must_be_go_regular_expressions() {
    assert_eq!(
        crd_errors(object(json!({"a": {"type": "string", "pattern": "a(b"}}))),
        [
            "P.properties[a].pattern: Invalid value: \"a(b\": must be a valid regular expression, but isn't: error parsing regexp: unclosed group: `a(b`"
        ]
    );
}

#[test]
fn list_types_and_map_keys_are_checked() {
    let item = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    assert_eq!(
        crd_errors(object(
            json!({"l": {"type": "array", "x-kubernetes-list-type": "map", "items": item}})
        )),
        [
            "P.properties[l].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"l": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"], "items": item}})
        )),
        [
            "P.properties[l].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"l": {"type": "object", "x-kubernetes-list-type": "bag"}})
        )),
        [
            r#"P.properties[l].type: Invalid value: "object": must be array if x-kubernetes-list-type is specified"#,
            r#"P.properties[l].x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", "map""#,
        ]
    );
}

#[test]
fn defaults_must_validate_and_be_pruned() {
    assert_eq!(
        crd_errors(object(
            json!({"replicas": {"type": "integer", "default": "three"}})
        )),
        [
            r#"P.properties[replicas].default: Invalid value: "string":  in body must be of type integer: "string""#
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"spec": {"type": "object", "default": {"a": 1, "b": 2},
            "properties": {"a": {"type": "integer"}}}})
        )),
        [
            r#"P.properties[spec].default: Invalid value: {"a":1,"b":2}: must not have unknown fields"#
        ]
    );
    assert_eq!(
        crd_errors(object(json!({"size": {"type": "integer", "default": 7,
            "x-kubernetes-validations": [{"rule": "self < 5", "message": "too big"}]}}))),
        ["P.properties[size].default: Invalid value: \"integer\": too big"]
    );
}

#[test]
fn rules_must_compile() {
    let errs = crd_errors(object(json!({"spec": {"type": "object",
        "properties": {"replicas": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.replicas >"}]}})));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with(r#"P.properties[spec].x-kubernetes-validations[0].rule: Invalid value: {"rule":"self.replicas \u003e"}: compilation failed: ERROR: <input>:1:16: Syntax error: "#),
        "{errs:?}"
    );
    assert!(
        errs[0].ends_with("\n | self.replicas >\n | ...............^"),
        "{errs:?}"
    );
    assert_eq!(
        crd_errors(object(json!({"spec": {"type": "object",
            "properties": {"replicas": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.replica > 0"}]}}))),
        [
            "P.properties[spec].x-kubernetes-validations[0].rule: Invalid value: {\"rule\":\"self.replica \\u003e 0\"}: compilation failed: ERROR: <input>:1:5: undefined field 'replica'\n | self.replica > 0\n | ....^"
        ]
    );
    assert_eq!(
        crd_errors(object(
            json!({"l": {"type": "array", "items": {"type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}})
        )),
        [
            r#"P.properties[l].items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within P.properties[l]"#
        ]
    );
}

#[test]
fn rule_fields_are_checked() {
    let rules = json!([
        {"rule": " "},
        {"rule": "true", "reason": "Bogus"},
        {"rule": "true", "fieldPath": ".nope"},
        {"rule": "true", "message": "two\nlines"},
        {"rule": "true", "optionalOldSelf": true},
    ]);
    assert_eq!(
        crd_errors(object(
            json!({"s": {"type": "object", "properties": {"a": {"type": "string"}},
            "x-kubernetes-validations": rules}})
        )),
        [
            "P.properties[s].x-kubernetes-validations[0].rule: Required value: rule is not specified",
            r#"P.properties[s].x-kubernetes-validations[1].reason: Unsupported value: "Bogus": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired""#,
            r#"P.properties[s].x-kubernetes-validations[2].fieldPath: Invalid value: ".nope": fieldPath must be a valid path"#,
            r#"P.properties[s].x-kubernetes-validations[3].message: Invalid value: "two\nlines": message must not contain line breaks"#,
        ]
    );
}

fn typed() -> Schema {
    with_spec(json!({
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^a+$"},
        "replicas": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 5},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "multipleOf": 0.5},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "when": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
        "labels": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}},
        "port": {"x-kubernetes-int-or-string": true},
        "opt": {"type": "string", "nullable": true},
    }))
}

#[test]
fn strings_are_checked_for_length_and_pattern() {
    let s = typed();
    let spec = |v: Value| json!({"spec": v});
    assert_eq!(
        errors(&s, spec(json!({"name": "a"}))),
        [r#"spec.name: Invalid value: "a": spec.name in body should be at least 2 chars long"#]
    );
    assert_eq!(
        errors(&s, spec(json!({"name": "aaaaaa"}))),
        ["spec.name: Too long: may not be more than 5 bytes"]
    );
    assert_eq!(
        errors(&s, spec(json!({"name": "abc"}))),
        ["spec.name: Invalid value: \"abc\": spec.name in body should match '^a+$'"]
    );
    assert!(errors(&s, spec(json!({"name": "aaa"}))).is_empty());
}

#[test]
fn types_are_checked_with_kube_openapi_wording() {
    let s = typed();
    let spec = |v: Value| json!({"spec": v});
    assert_eq!(
        errors(&s, spec(json!({"replicas": "3"}))),
        [
            r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
        ]
    );
    // An integral number is an integer; a fraction fails the int32 format first.
    assert!(errors(&s, spec(json!({"replicas": 2.0}))).is_empty());
    assert_eq!(
        errors(&s, spec(json!({"replicas": 2.5}))),
        [
            r#"spec.replicas: Invalid value: "float64": spec.replicas in body must be of type int32: "float64""#
        ]
    );
    assert_eq!(
        errors(&s, spec(json!({"port": true}))),
        [
            r#"spec.port: Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#
        ]
    );
    assert!(errors(&s, spec(json!({"port": 80}))).is_empty());
    assert!(errors(&s, spec(json!({"port": "http"}))).is_empty());
    assert!(errors(&s, spec(json!({"opt": null}))).is_empty());
    assert_eq!(
        errors(&s, spec(json!({"name": null}))),
        [r#"spec.name: Invalid value: "null": spec.name in body must be of type string: "null""#]
    );
    assert_eq!(
        errors(&s, json!({"spec": []})),
        [r#"spec: Invalid value: "array": spec in body must be of type object: "array""#]
    );
}

#[test]
fn numbers_are_checked_against_bounds_and_factors() {
    let s = typed();
    let spec = |v: Value| json!({"spec": v});
    assert_eq!(
        errors(&s, spec(json!({"replicas": 0}))),
        [
            "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
        ]
    );
    assert_eq!(
        errors(&s, spec(json!({"replicas": 9}))),
        [
            "spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 5"
        ]
    );
    assert_eq!(
        errors(&s, spec(json!({"ratio": 0}))),
        ["spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0"]
    );
    assert_eq!(
        errors(&s, spec(json!({"ratio": 0.7}))),
        ["spec.ratio: Invalid value: 0.7: spec.ratio in body should be a multiple of 0.5"]
    );
    assert!(errors(&s, spec(json!({"ratio": 1.5}))).is_empty());
}

#[test]
fn enums_formats_arrays_and_maps_are_checked() {
    let s = typed();
    let spec = |v: Value| json!({"spec": v});
    assert_eq!(
        errors(&s, spec(json!({"mode": "c"}))),
        [r#"spec.mode: Unsupported value: "c": supported values: "a", "b""#]
    );
    assert_eq!(
        errors(&s, spec(json!({"when": "2024-01-01"}))),
        [
            r#"spec.when: Invalid value: "2024-01-01": spec.when in body must be of type date-time: "2024-01-01""#
        ]
    );
    assert!(errors(&s, spec(json!({"when": "2024-01-01T10:00:00Z"}))).is_empty());
    assert_eq!(
        errors(&s, spec(json!({"tags": ["a", "b", "c"]}))),
        ["spec.tags: Too many: 3: must have at most 2 items"]
    );
    assert_eq!(
        errors(&s, spec(json!({"tags": [1]}))),
        [
            r#"spec.tags[0]: Invalid value: "integer": spec.tags[0] in body must be of type string: "integer""#
        ]
    );
    assert_eq!(
        errors(&s, spec(json!({"labels": {"a": "x", "b": "y"}}))),
        ["spec.labels: Too many: 2: must have at most 1 item"]
    );
    assert_eq!(
        errors(&s, spec(json!({"labels": {"a": 1}}))),
        [
            r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#
        ]
    );
}

#[test]
fn required_fields_and_forbidden_properties_are_reported() {
    let s = parsed(object(json!({
        "spec": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
        "closed": {"type": "object", "additionalProperties": false},
    })));
    assert_eq!(
        errors(&s, json!({"spec": {}})),
        ["spec.name: Required value"]
    );
    assert_eq!(
        errors(&s, json!({"closed": {"x": 1}})),
        [r#"closed: Invalid value: "x": closed.x in body is a forbidden property"#]
    );
}

#[test]
fn junctors_report_as_kube_openapi() {
    let s = parsed(object(json!({"spec": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}, "n": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
        "not": {"required": ["n"]},
    }})));
    assert_eq!(
        errors(&s, json!({"spec": {"a": "x", "b": "y"}})),
        [
            r#"<nil>: Invalid value: "": "spec" must validate one and only one schema (oneOf). Found 2 valid alternatives"#
        ]
    );
    assert_eq!(
        errors(&s, json!({"spec": {}})),
        [
            r#"<nil>: Invalid value: "": "spec" must validate one and only one schema (oneOf). Found none valid"#,
            "spec.a: Required value",
        ]
    );
    assert_eq!(
        errors(&s, json!({"spec": {"a": "x", "n": 1}})),
        [r#"<nil>: Invalid value: "": "spec" must not validate the schema (not)"#]
    );
    let all = with_spec(json!({"n": {"type": "integer", "allOf": [{"minimum": 3}]}}));
    assert_eq!(
        errors(&all, json!({"spec": {"n": 1}})),
        [
            "spec.n: Invalid value: 1: spec.n in body should be greater than or equal to 3",
            r#"<nil>: Invalid value: "": "spec.n" must validate all the schemas (allOf). None validated"#,
        ]
    );
}

#[test]
fn embedded_resources_need_type_meta_and_valid_metadata() {
    let s = with_spec(json!({"template": {"type": "object",
        "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}));
    assert_eq!(
        errors(
            &s,
            json!({"spec": {"template": {"metadata": {"name": "a/b"}}}})
        ),
        [
            "spec.template.apiVersion: Required value",
            "spec.template.kind: Required value",
            r#"spec.template.metadata.name: Invalid value: "a/b": may not contain '/'"#,
        ]
    );
    assert!(
        errors(
            &s,
            json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod"}}})
        )
        .is_empty()
    );
}

fn lists() -> Schema {
    with_spec(json!({
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
    }))
}

#[test]
fn set_and_map_lists_reject_duplicates() {
    let s = lists();
    assert_eq!(
        errors(&s, json!({"spec": {"set": ["a", "b", "a", "a"]}})),
        [r#"spec.set[2]: Duplicate value: "a""#]
    );
    assert_eq!(
        errors(
            &s,
            json!({"spec": {"ports": [{"name": "x", "port": 1}, {"name": "x", "port": 2}]}})
        ),
        [r#"spec.ports[1]: Duplicate value: {"name":"x"}"#]
    );
    // An update of an object that already had duplicates is not held to it.
    let dup = json!({"spec": {"set": ["a", "a"]}});
    assert!(update_errors(&s, dup.clone(), dup).is_empty());
}

fn ruled() -> Schema {
    parsed(json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('x')"}],
        "properties": {
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.min <= self.max", "message": "min must not exceed max"},
                    {"rule": "self.max <= 100", "messageExpression": "'max is ' + string(self.max)"},
                    {"rule": "self.min == oldSelf.min", "message": "min is immutable",
                     "reason": "FieldValueForbidden", "fieldPath": ".min"},
                ],
                "properties": {
                    "min": {"type": "integer"},
                    "max": {"type": "integer"},
                    "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('^a[0-9]+$')"}]},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"},
                        "x-kubernetes-validations": [{"rule": "self.foo == 'x'"}]},
                },
            },
        },
    }))
}

fn named(spec: Value) -> Value {
    json!({"metadata": {"name": "xy", "labels": {"a": "b"}}, "spec": spec})
}

#[test]
fn rules_report_their_messages() {
    let s = ruled();
    assert!(errors(&s, named(json!({"min": 1, "max": 2}))).is_empty());
    assert_eq!(
        errors(&s, named(json!({"min": 5, "max": 3}))),
        ["spec: Invalid value: \"object\": min must not exceed max"]
    );
    assert_eq!(
        errors(&s, named(json!({"min": 1, "max": 200}))),
        ["spec: Invalid value: \"object\": max is 200"]
    );
    assert_eq!(
        errors(&s, named(json!({"min": 1, "max": 2, "name": "b1"}))),
        [r#"spec.name: Invalid value: "string": failed rule: self.matches('^a[0-9]+$')"#]
    );
    assert_eq!(
        errors(
            &s,
            json!({"metadata": {"name": "ab"}, "spec": {"min": 1, "max": 2}})
        ),
        ["<nil>: Invalid value: \"object\": failed rule: self.metadata.name.startsWith('x')"]
    );
    assert_eq!(
        errors(
            &s,
            named(json!({"min": 1, "max": 2, "labels": {"bar": "x"}}))
        ),
        [
            r#"spec.labels: Invalid value: "object": no such key: foo evaluating rule: self.foo == 'x'"#
        ]
    );
}

#[test]
fn rules_report_reasons_and_field_paths() {
    let s = with_spec(json!({
        "a": {"type": "string"},
        "b": {"type": "string"},
        "n": {"type": "integer", "x-kubernetes-validations": [
            {"rule": "self != 3", "reason": "FieldValueDuplicate"},
            {"rule": "self != 4", "messageExpression": "42 == 42 ? 'ignored' : 1", "message": "not four"},
        ]},
        "rules": {"type": "object", "properties": {"x": {"type": "string"}, "metadata": {"type": "object",
            "properties": {"labels": {"type": "object"}}}},
            "x-kubernetes-validations": [
                {"rule": "has(self.x) || has(self.metadata.labels)", "message": "x or labels",
                 "reason": "FieldValueRequired", "fieldPath": ".x"}]},
    }));
    assert_eq!(
        errors(&s, json!({"spec": {"n": 3}})),
        ["spec.n: Duplicate value: \"integer\""]
    );
    assert_eq!(
        errors(&s, json!({"spec": {"n": 4}})),
        ["spec.n: Invalid value: \"integer\": ignored"]
    );
    // Not a resource: `metadata` here is an ordinary property, all of it visible.
    assert_eq!(
        errors(&s, json!({"spec": {"rules": {"metadata": {}}}})),
        ["spec.rules.x: Required value: x or labels"]
    );
    assert!(errors(&s, json!({"spec": {"rules": {"metadata": {"labels": {}}}}})).is_empty());
}

#[test]
fn optional_old_self_rules_run_on_create_too() {
    let s = with_spec(
        json!({"v": {"type": "integer", "x-kubernetes-validations": [
        {"rule": "!oldSelf.hasValue() || self >= oldSelf.value()", "optionalOldSelf": true,
         "message": "may not decrease"}]}}),
    );
    assert!(errors(&s, json!({"spec": {"v": 1}})).is_empty());
    assert_eq!(
        update_errors(&s, json!({"spec": {"v": 1}}), json!({"spec": {"v": 2}})),
        ["spec.v: Invalid value: \"integer\": may not decrease"]
    );
}

#[test]
fn transition_rules_run_only_on_update() {
    let s = ruled();
    let old = named(json!({"min": 1, "max": 5}));
    assert!(errors(&s, named(json!({"min": 2, "max": 5}))).is_empty());
    assert_eq!(
        update_errors(&s, named(json!({"min": 2, "max": 5})), old.clone()),
        ["spec.min: Forbidden: min is immutable"]
    );
    assert!(update_errors(&s, named(json!({"min": 1, "max": 4})), old).is_empty());
}

#[test]
fn rules_are_skipped_after_blocking_errors() {
    assert_eq!(
        errors(&ruled(), named(json!({"min": "1", "max": 2}))),
        [
            r#"spec.min: Invalid value: "string": spec.min in body must be of type integer: "string""#,
            "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ]
    );
}

#[test]
fn map_list_items_correlate_by_key() {
    let s = with_spec(
        json!({"ports": {"type": "array", "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {"type": "object", "required": ["name"],
            "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]}}}),
    );
    let old = json!({"spec": {"ports": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]}});
    // Reordered and with a new item: only items with the same key compare.
    let new = json!({"spec": {"ports": [{"name": "c", "port": 9}, {"name": "b", "port": 3}, {"name": "a", "port": 1}]}});
    assert_eq!(
        update_errors(&s, new, old),
        ["spec.ports[1]: Invalid value: \"object\": port is immutable"]
    );
}

#[test]
fn cost_beyond_the_per_call_limit_stops_evaluation() {
    let s = with_spec(json!({"xs": {"type": "array", "items": {"type": "integer"},
        "x-kubernetes-validations": [{"rule": "self.all(a, self.all(b, a != b || true))"}]}}));
    let small: Vec<i64> = (0..10).collect();
    assert!(errors(&s, json!({"spec": {"xs": small}})).is_empty());
    let big: Vec<i64> = (0..1500).collect();
    assert_eq!(
        errors(&s, json!({"spec": {"xs": big}})),
        [
            r#"spec.xs: Invalid value: "array": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: self.all(a, self.all(b, a != b || true))"#
        ]
    );
}

#[test]
fn defaults_fill_missing_fields_and_non_nullable_nulls() {
    let s = with_spec(json!({
        "replicas": {"type": "integer", "default": 1},
        "mode": {"type": "string", "default": "auto"},
        "opt": {"type": "string", "nullable": true, "default": "d"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer", "default": 7}}}},
        "m": {"type": "object", "additionalProperties": {"type": "object",
            "properties": {"y": {"type": "string", "default": "z"}}}},
        "plain": {"type": "string"},
    }));
    let mut obj =
        json!({"spec": {"mode": null, "opt": null, "plain": null, "items": [{}], "m": {"k": {}}}});
    s.apply_defaults(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {"replicas": 1, "mode": "auto", "opt": null, "items": [{"x": 7}], "m": {"k": {"y": "z"}}}})
    );
    // Absent objects are not created.
    let mut empty = json!({});
    s.apply_defaults(&mut empty);
    assert_eq!(empty, json!({}));
}

#[test]
fn pruning_drops_unknown_fields_and_reports_them() {
    let s = with_spec(json!({
        "a": {"type": "string"},
        "keep": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"inner": {"type": "object", "properties": {"b": {"type": "string"}}}}},
        "list": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "string"}}}},
        "tmpl": {"type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object"}}},
    }));
    let mut obj = json!({
        "apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "x": 1},
        "spec": {"a": "x", "zz": 1,
            "keep": {"anything": 1, "inner": {"b": "y", "bad": 2}},
            "list": [{"c": "1", "d": 2}],
            "tmpl": {"apiVersion": "v1", "kind": "P", "metadata": {"foo": 1}, "spec": {"q": 1}, "status": {}}},
        "status": {"x": 1},
    });
    assert_eq!(
        s.prune(&mut obj),
        [
            "spec.keep.inner.bad",
            "spec.list[0].d",
            "spec.tmpl.spec.q",
            "spec.tmpl.status",
            "spec.zz",
            "status"
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "v1", "kind": "K", "metadata": {"name": "n", "x": 1},
            "spec": {"a": "x", "keep": {"anything": 1, "inner": {"b": "y"}}, "list": [{"c": "1"}],
                "tmpl": {"apiVersion": "v1", "kind": "P", "metadata": {"foo": 1}, "spec": {}}},
        })
    );
}

#[test]
fn sub_schemas_are_found_by_json_path() {
    let s = typed();
    assert_eq!(
        s.at(".spec.replicas").map(Schema::type_name),
        Some("integer")
    );
    assert_eq!(s.at(".spec.replicas").map(Schema::format), Some("int32"));
    assert_eq!(s.at(".spec.tags[*]").map(Schema::type_name), Some("string"));
    assert_eq!(s.at(".spec").map(Schema::type_name), Some("object"));
    assert!(s.at(".spec.nope").is_none());
    assert_eq!(s.type_name(), "object");
}

#[test]
fn regular_expressions_match_as_go_does() {
    let cases = [
        ("^a+$", "aaa", true),
        ("^a+$", "ab", false),
        ("(?i)^AB$", "ab", true),
        ("[[:digit:]]{3}", "a123", true),
        (r"\bfoo\b", "a foo b", true),
        (r"\bfoo\b", "afoo", false),
        ("^[^a-c]+$", "xyz", true),
        ("^[^a-c]+$", "xaz", false),
        ("a|b|c", "zzc", true),
        ("^$", "", true),
        ("x{2,3}$", "axx", true),
        ("^x{2,3}$", "xxxx", false),
        (r"^\p{L}+$", "héllo", true),
        (r"\d+\.\d+", "v1.2", true),
        ("", "anything", true),
        ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "my-name", true),
        ("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "-bad", false),
        (r"^\Qa.b\E$", "a.b", true),
        (r"^\Qa.b\E$", "axb", false),
        ("(?s)^a.b$", "a\nb", true),
        ("^a.b$", "a\nb", false),
        ("(?m)^b$", "a\nb", true),
        ("^(ab|cd)+$", "abcdab", true),
        ("^(a|ab)(c|bcd)(d*)$", "abcd", true),
        ("^(?:a{2}){2}$", "aaaa", true),
        // Perl classes are ASCII, and brackets and braces are literal where Go reads them so.
        (r"^\d+$", "١٢", false),
        (r"^[\w]+$", "é", false),
        (r"^\W$", "é", true),
        ("^[a[]+$", "a[", true),
        ("^a{x}$", "a{x}", true),
        ("^(?:a{2}){2}$", "aaa", false),
        (r"^[\w.-]+@[\w-]+$", "a.b-c@d_e", true),
        ("^[]a]+$", "]a]", true),
        ("^a{2,}$", "aaaaa", true),
        ("^x{,2}$", "x{,2}", true),
    ];
    for (pattern, text, want) in cases {
        let re = Regex::new(pattern).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        assert_eq!(re.is_match(text), want, "{pattern} on {text:?}");
    }
}

#[test]
fn regular_expressions_that_do_not_compile_fail_with_gos_prefix() {
    let cases = [
        ("a(b", "unclosed group"),
        ("[a-", "unclosed character class"),
        (
            "[z-a]",
            "invalid character class range, the start must be <= the end",
        ),
        ("*a", "repetition operator missing expression"),
        (
            "(?=a)",
            "look-around, including look-ahead and look-behind, is not supported",
        ),
    ];
    for (pattern, want) in cases {
        assert_eq!(
            Regex::new(pattern).err(),
            Some(format!("error parsing regexp: {want}: `{pattern}`")),
            "{pattern}"
        );
    }
}

#[test]
fn string_formats_are_checked_as_strfmt_does() {
    let cases = [
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", true),
        ("uuid", "not-a-uuid", false),
        ("email", "a.b@example.com", true),
        ("email", "nope", false),
        ("hostname", "example.com", true),
        ("hostname", "-bad.com", false),
        ("ipv4", "10.0.0.1", true),
        ("ipv4", "::1", false),
        ("ipv6", "::1", true),
        ("cidr", "10.0.0.0/8", true),
        ("cidr", "10.0.0.0/33", false),
        ("mac", "00:00:5e:00:53:01", true),
        ("mac", "00:00:5e", false),
        ("uri", "https://example.com/a?b=c", true),
        ("uri", "relative/path", false),
        ("date", "2024-02-29", true),
        ("date", "2023-02-29", false),
        ("date-time", "2024-01-01T10:00:00.5+01:00", true),
        ("date-time", "2024-01-01 10:00:00", false),
        ("duration", "1h30m", true),
        ("duration", "3 days", true),
        ("duration", "soon", false),
        ("byte", "aGVsbG8=", true),
        ("byte", "not base64!", false),
        ("quantity", "500m", true),
        ("quantity", "five", false),
        ("isbn10", "0321751043", true),
        ("isbn13", "978-0321751041", true),
        ("creditcard", "4111 1111 1111 1111", true),
        ("hexcolor", "#fff", true),
        ("rgbcolor", "rgb(255, 0, 10)", true),
        ("ssn", "111-22-3333", true),
        ("bsonobjectid", "507f1f77bcf86cd799439011", true),
        ("k8s-short-name", "my-name", true),
        ("k8s-short-name", "My-Name", false),
    ];
    for (format, value, want) in cases {
        assert_eq!(formats::is_valid(format, value), want, "{format} {value:?}");
    }
    assert_eq!(
        formats::effective("string", false, "date-time"),
        "date-time"
    );
    assert_eq!(formats::effective("string", false, "made-up"), "");
    assert_eq!(formats::effective("integer", false, "int32"), "int32");
    assert_eq!(formats::effective("boolean", false, "date"), "");
}

#[test]
fn rules_see_the_fields_they_select_and_whole_self_when_they_use_it() {
    // `self.a`/`self.b` only are made CEL values for the first rule (and its message); the
    // second uses `self` whole, so all of it is there.
    let schema = parsed(object(json!({"spec": {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.a <= self.b", "messageExpression": "'a is ' + string(self.a)"},
            {"rule": "size(self) <= 3", "message": "at most three fields"},
        ],
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                       "c": {"type": "string"}, "d": {"type": "string"}},
    }})));
    assert_eq!(
        errors(&schema, json!({"spec": {"a": 1, "b": 2, "c": "x"}})),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(
            &schema,
            json!({"spec": {"a": 3, "b": 2, "c": "x", "d": "y"}})
        ),
        [
            "spec: Invalid value: \"object\": a is 3",
            "spec: Invalid value: \"object\": at most three fields",
        ]
    );
}
