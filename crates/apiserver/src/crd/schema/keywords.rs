//! The CRD schema checks besides structurality, as upstream's
//! `ValidateCustomResourceDefinitionOpenAPISchema`: valid types, unsupported keywords, defaults
//! where they are forbidden, `additionalProperties` with `properties`, map and list types and
//! their keys, and `x-kubernetes-validations` (their fields, then their compilation, reported
//! only where the schema below has no other error).

use serde_json::Value;
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Additional, Schema, cel};

/// The types a schema may declare, as upstream lists them (sorted).
const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];
/// The `reason`s a rule may give, as upstream lists them (sorted).
const REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];
/// The keywords upstream rejects outright, with its messages, in its order.
const REJECTED: &[(&str, &str)] = &[
    ("id", "id is not supported"),
    ("additionalItems", "additionalItems is not supported"),
    ("patternProperties", "patternProperties is not supported"),
    ("definitions", "definitions is not supported"),
    ("dependencies", "dependencies is not supported"),
    ("$ref", "$ref is not supported"),
];

/// Where in the schema a node sits, as far as the checks care.
#[derive(Clone, Default)]
struct Context {
    /// Why defaults are forbidden here, if they are.
    forbidden_defaults: Option<String>,
    /// Inside the schema of a resource's `apiVersion`, `kind` or `metadata`.
    inside_meta: bool,
    /// The nearest ancestor whose values cannot be correlated with the old object's, where
    /// transition rules are forbidden.
    uncorrelatable: Option<FieldPath>,
}

impl Context {
    fn forbid_old_self(&self, path: &FieldPath) -> Context {
        let mut ctx = self.clone();
        ctx.uncorrelatable.get_or_insert_with(|| path.clone());
        ctx
    }
}

/// The errors found in one subtree: schema errors first, then rule compilation errors.
#[derive(Default)]
struct Found {
    schema: Vec<FieldError>,
    rules: Vec<FieldError>,
}

impl Found {
    fn add(&mut self, other: Found) {
        self.schema.extend(other.schema);
        self.rules.extend(other.rules);
    }
}

/// Checks `schema` at `path`; `rules_checked`: the schema is structural with valid defaults,
/// so rule compilation errors are reported.
pub(super) fn check(schema: &Schema, path: &FieldPath, rules_checked: bool) -> Vec<FieldError> {
    let found = node(schema, path, &Context::default(), true, rules_checked);
    found.schema.into_iter().chain(found.rules).collect()
}

/// `spine`: the node is on the structural spine (not under `allOf` and the like), where rule
/// compilation is reported.
fn node(s: &Schema, path: &FieldPath, ctx: &Context, is_root: bool, spine: bool) -> Found {
    let mut found = Found::default();
    found.schema.extend(keywords(s, path, ctx));
    if s.checks.unique_items {
        found.schema.push(FieldError::forbidden(
            &path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(additional) = &s.additional_properties {
        if !s.properties.is_empty() && !matches!(additional, Additional::Bool(true)) {
            found.schema.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let Additional::Schema(values) = additional {
            let mut sub = ctx.clone();
            if ctx.inside_meta {
                // Pruning a default without a value to prune it by would be ambiguous.
                sub.forbidden_defaults =
                    Some("inside additionalProperties applying to object metadata".into());
            }
            let p = path.child("additionalProperties");
            found.add(node(values, &p, &sub, false, spine));
        }
    }
    let map_correlates = matches!(s.x.map_type.as_deref(), None | Some("granular" | "atomic"));
    for (name, prop) in &s.properties {
        let mut sub = if map_correlates {
            ctx.clone()
        } else {
            ctx.forbid_old_self(path)
        };
        if (is_root || s.x.embedded_resource)
            && matches!(name.as_str(), "metadata" | "kind" | "apiVersion")
        {
            sub.inside_meta = true;
            if is_root {
                sub.forbidden_defaults = Some(format!("in top-level {name}"));
            }
        }
        let p = path.child("properties").key(name.as_str());
        found.add(node(prop, &p, &sub, false, spine));
    }
    if let Some(not) = &s.checks.not {
        found.add(node(not, &path.child("not"), ctx, false, false));
    }
    for (key, list) in [
        ("allOf", &s.checks.all_of),
        ("oneOf", &s.checks.one_of),
        ("anyOf", &s.checks.any_of),
    ] {
        for (i, sub) in list.iter().enumerate() {
            found.add(node(sub, &path.child(key).index(i), ctx, false, false));
        }
    }
    if let Some(items) = &s.items {
        // Only map lists correlate their items with the old list's.
        let sub = if s.x.list_type.as_deref() == Some("map") {
            ctx.clone()
        } else {
            ctx.forbid_old_self(path)
        };
        found.add(node(items, &path.child("items"), &sub, false, spine));
    }
    found.schema.extend(extensions(s, path));
    found.schema.extend(rule_fields(s, path));
    if found.schema.is_empty() && spine {
        found.rules.extend(compiled_rules(s, path, ctx));
    }
    found
}

/// Upstream's `specStandardValidatorV3.validate`: types and keywords allowed in CRDs.
fn keywords(s: &Schema, path: &FieldPath, ctx: &Context) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !s.type_name.is_empty() && !TYPES.contains(&s.type_name.as_str()) {
        errs.push(FieldError::not_supported(
            &path.child("type"),
            s.type_name.as_str(),
            TYPES,
        ));
    }
    if let (Some(_), Some(reason)) = (&s.default, &ctx.forbidden_defaults) {
        errs.push(FieldError::forbidden(
            &path.child("default"),
            format!("must not be set {reason}"),
        ));
    }
    for (keyword, message) in REJECTED {
        if s.unsupported.contains(keyword) {
            errs.push(FieldError::forbidden(&path.child(*keyword), *message));
        }
    }
    if s.type_name == "null" {
        errs.push(FieldError::forbidden(
            &path.child("type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if s.unsupported.contains(&"items") {
        errs.push(FieldError::forbidden(
            &path.child("items"),
            "items must be a schema object and not an array",
        ));
    }
    if ctx.inside_meta && s.x.embedded_resource {
        errs.push(FieldError::forbidden(
            &path.child("x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
    errs
}

/// The checks of `x-kubernetes-preserve-unknown-fields`, the map type, the list type and the
/// list map keys.
fn extensions(s: &Schema, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.x.preserve_unknown_fields == Some(false) {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            false,
            "must be true or undefined",
        ));
    }
    if let Some(map_type) = &s.x.map_type {
        if s.type_name != "object" {
            errs.push(type_must_be(s, path, "object", "x-kubernetes-map-type"));
        }
        if map_type != "atomic" && map_type != "granular" {
            errs.push(FieldError::not_supported(
                &path.child("x-kubernetes-map-type"),
                map_type.as_str(),
                &["atomic", "granular"],
            ));
        }
    }
    let list_type = s.x.list_type.as_deref();
    let items = s.items.as_deref();
    if list_type.is_some() && s.type_name != "array" {
        errs.push(type_must_be(s, path, "array", "x-kubernetes-list-type"));
    } else if let (Some("set"), Some(items)) = (list_type, items) {
        // Set items must be atomic: lists atomic (the default), objects explicitly atomic.
        let list_value = || items.x.list_type.clone().map_or(Value::Null, Value::from);
        let detail = "must be atomic as item of a list with x-kubernetes-list-type=set";
        match items.type_name.as_str() {
            "array" if items.x.list_type.as_deref().is_some_and(|t| t != "atomic") => {
                let p = path.child("items").child("x-kubernetes-list-type");
                errs.push(FieldError::invalid(&p, list_value(), detail));
            }
            "object" if items.x.map_type.as_deref() != Some("atomic") => {
                // Upstream reports the items' list type here.
                let p = path.child("items").child("x-kubernetes-map-type");
                errs.push(FieldError::invalid(&p, list_value(), detail));
            }
            _ => {}
        }
    }
    if let Some(t) = list_type.filter(|t| !matches!(*t, "atomic" | "set" | "map")) {
        errs.push(FieldError::not_supported(
            &path.child("x-kubernetes-list-type"),
            t,
            &["atomic", "set", "map"],
        ));
    }
    let keys = &s.x.list_map_keys;
    let keys_value = || Value::from(keys.clone());
    if !keys.is_empty() {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        let p = path.child("x-kubernetes-list-type");
        match list_type {
            None => errs.push(FieldError::required(&p, detail)),
            Some("map") => {}
            Some(t) => errs.push(FieldError::invalid(&p, t, detail)),
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            errs.push(FieldError::required(
                &path.child("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match items {
            None if s.unsupported.contains(&"items") => errs.push(FieldError::invalid(
                &path.child("items"),
                Value::Array(Vec::new()),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            None => errs.push(FieldError::required(
                &path.child("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(items) if items.type_name != "object" => errs.push(FieldError::invalid(
                &path.child("items").child("type"),
                items.type_name.as_str(),
                "must be object if parent array's x-kubernetes-list-type is map",
            )),
            Some(items) => {
                for (i, key) in keys.iter().enumerate() {
                    match items.properties.get(key) {
                        Some(p) if matches!(p.type_name.as_str(), "array" | "object") => {
                            errs.push(FieldError::invalid(
                                &path.child("items").child("properties").key(key.as_str()).child("type"),
                                items.type_name.as_str(),
                                "must be a scalar type if parent array's x-kubernetes-list-type is map",
                            ));
                        }
                        Some(_) => {}
                        None => errs.push(FieldError::invalid(
                            &path.child("x-kubernetes-list-map-keys"),
                            keys_value(),
                            "entries must all be names of item properties",
                        )),
                    }
                    if keys[..i].contains(key) {
                        errs.push(FieldError::invalid(
                            &path.child("x-kubernetes-list-map-keys"),
                            keys_value(),
                            "must not contain duplicate entries",
                        ));
                    }
                }
            }
        }
    }
    errs.extend(map_list_items(s, path));
    errs
}

/// The error for a node whose `extension` needs type `wanted`.
fn type_must_be(s: &Schema, path: &FieldPath, wanted: &str, extension: &str) -> FieldError {
    let detail = format!("must be {wanted} if {extension} is specified");
    if s.type_name.is_empty() {
        FieldError::required(&path.child("type"), detail)
    } else {
        FieldError::invalid(&path.child("type"), s.type_name.as_str(), detail)
    }
}

/// Upstream's `validateMapListKeysMapSet`: set and map list items are not nullable, and map
/// keys are required or defaulted and not nullable.
fn map_list_items(s: &Schema, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let (Some(items), Some(list_type @ ("set" | "map"))) =
        (s.items.as_deref(), s.x.list_type.as_deref())
    else {
        return errs;
    };
    let items_path = path.child("items");
    if items.nullable {
        errs.push(FieldError::forbidden(
            &items_path.child("nullable"),
            format!("cannot be nullable when x-kubernetes-list-type is {list_type}"),
        ));
    }
    if list_type == "map" {
        for key in &s.x.list_map_keys {
            let Some(prop) = items.properties.get(key) else {
                continue;
            };
            let prop_path = items_path.child("properties").key(key.as_str());
            if !items.checks.required.contains(key) && prop.default.is_none() {
                errs.push(FieldError::required(
                    &prop_path.child("default"),
                    "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                ));
            }
            if prop.nullable {
                errs.push(FieldError::forbidden(
                    &prop_path.child("nullable"),
                    "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                ));
            }
        }
    }
    errs
}

/// The checks of each rule's fields (before compilation).
fn rule_fields(s: &Schema, path: &FieldPath) -> Vec<FieldError> {
    let has_newlines = |s: &str| s.contains(['\n', '\r']);
    let mut errs = Vec::new();
    for (i, rule) in s.x.rules.iter().enumerate() {
        let f = &rule.fields;
        let p = path.child("x-kubernetes-validations").index(i);
        let (text, message) = (f.rule.trim(), f.message.trim());
        if text.is_empty() {
            errs.push(FieldError::required(
                &p.child("rule"),
                "rule is not specified",
            ));
        } else if !f.message.is_empty() && message.is_empty() {
            errs.push(FieldError::invalid(
                &p.child("message"),
                f.message.as_str(),
                "message must be non-empty if specified",
            ));
        } else if has_newlines(message) {
            errs.push(FieldError::invalid(
                &p.child("message"),
                f.message.as_str(),
                "message must not contain line breaks",
            ));
        } else if has_newlines(text) && message.is_empty() {
            errs.push(FieldError::required(
                &p.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !f.message_expression.is_empty() && f.message_expression.trim().is_empty() {
            errs.push(FieldError::required(
                &p.child("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = f.reason.as_deref().filter(|r| !REASONS.contains(r)) {
            errs.push(FieldError::not_supported(
                &p.child("reason"),
                reason,
                REASONS,
            ));
        }
        let field_path = f.field_path.as_str();
        let fp = p.child("fieldPath");
        if !field_path.is_empty() && field_path.trim().is_empty() {
            errs.push(FieldError::invalid(
                &fp,
                field_path,
                "fieldPath must be non-empty if specified",
            ));
        }
        if has_newlines(field_path) {
            errs.push(FieldError::invalid(
                &fp,
                field_path,
                "fieldPath must not contain line breaks",
            ));
        }
        // Upstream checks the path only against a schema it can convert.
        if !field_path.is_empty()
            && s.conversion_error().is_none()
            && cel::valid_field_path(field_path, s).is_none()
        {
            errs.push(FieldError::invalid(
                &fp,
                field_path,
                "fieldPath must be a valid path",
            ));
        }
    }
    errs
}

/// What compiling each rule gave: compile errors of rules and message expressions,
/// transition rules where old values do not correlate, and `optionalOldSelf` without `oldSelf`.
fn compiled_rules(s: &Schema, path: &FieldPath, ctx: &Context) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (i, rule) in s.x.rules.iter().enumerate() {
        let p = path.child("x-kubernetes-validations").index(i);
        if let Some(detail) = rule.compile_error() {
            errs.push(FieldError::invalid(
                &p.child("rule"),
                rule.json.clone(),
                detail,
            ));
        }
        if let Some(detail) = rule.message_error() {
            let at = p.child("messageExpression");
            errs.push(FieldError::invalid(&at, rule.json.clone(), detail));
        }
        if rule.uses_old_self {
            if let Some(within) = &ctx.uncorrelatable {
                errs.push(FieldError::invalid(
                    &p.child("rule"),
                    rule.fields.rule.as_str(),
                    format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"),
                ));
            }
        } else if let Some(optional) = rule.fields.optional_old_self {
            errs.push(FieldError::invalid(
                &p.child("optionalOldSelf"),
                optional,
                "may not be set if oldSelf is not used in rule",
            ));
        }
    }
    errs
}
