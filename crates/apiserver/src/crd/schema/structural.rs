//! The "must be structural" checks, as upstream's `ValidateStructural`: every node says its
//! type, value validations under `allOf`/`anyOf`/`oneOf`/`not` add no structure (no types,
//! defaults, extensions…) and name only fields the spine specifies, embedded resources and
//! int-or-string are used consistently, and the root's `metadata` restricts at most `name` and
//! `generateName`. Errors are sorted by their text, as upstream sorts them.

use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Checks, Schema};

/// Where a node sits: the root, a list's items, or an object's field.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

/// The structural errors of `schema`, rooted at `path`.
pub(super) fn check(schema: &Schema, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = invariants(schema, Level::Root, path);
    errs.extend(value_completeness(&schema.checks, schema, path, path));
    errs.sort_by_cached_key(ToString::to_string);
    errs
}

fn invariants(s: &Schema, level: Level, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s.type_name == "array" && s.items.is_none() {
        errs.push(FieldError::required(
            &path.child("items"),
            "must be specified",
        ));
    }
    if let Some(items) = &s.items {
        errs.extend(invariants(items, Level::Item, &path.child("items")));
    }
    for (name, prop) in &s.properties {
        errs.extend(invariants(
            prop,
            Level::Field,
            &path.child("properties").key(name.as_str()),
        ));
    }
    if let Some(additional) = &s.additional_properties {
        let p = path.child("additionalProperties");
        if level == Level::Root {
            errs.push(FieldError::forbidden(&p, "must not be used at the root"));
        }
        if let Some(values) = additional.schema() {
            errs.extend(invariants(values, Level::Field, &p));
        }
    }
    if s.x.int_or_string && s.preserves_unknown_fields() {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if s.x.int_or_string && s.x.embedded_resource {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-embedded-resource"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    // The two spellings of int-or-string may give types under `anyOf`.
    let skip_any_of = is_int_or_string(&s.checks.any_of);
    let skip_first_all_of = s
        .checks
        .all_of
        .first()
        .is_some_and(|first| is_int_or_string(&first.checks.any_of));
    errs.extend(value_validation(
        &s.checks,
        skip_any_of,
        skip_first_all_of,
        level,
        path,
    ));

    let type_path = path.child("type");
    if s.x.embedded_resource && s.type_name != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        errs.push(if s.type_name.is_empty() {
            FieldError::required(&type_path, detail)
        } else {
            FieldError::invalid(&type_path, s.type_name.as_str(), detail)
        });
    } else if s.type_name.is_empty() && !s.x.int_or_string && !s.preserves_unknown_fields() {
        errs.push(FieldError::required(
            &type_path,
            match level {
                Level::Root => "must not be empty at the root",
                Level::Item => "must not be empty for specified array items",
                Level::Field => "must not be empty for specified object fields",
            },
        ));
    }
    if s.x.embedded_resource && s.additional_properties.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !s.type_name.is_empty() && s.type_name != "object" {
        errs.push(FieldError::invalid(
            &type_path,
            s.type_name.as_str(),
            "must be object at the root",
        ));
    }
    let check_metadata = level == Level::Root || s.x.embedded_resource;
    for name in ["kind", "apiVersion"] {
        if let Some(prop) = s
            .properties
            .get(name)
            .filter(|p| check_metadata && p.type_name != "string")
        {
            errs.push(FieldError::invalid(
                &path.child("properties").key(name).child("type"),
                prop.type_name.as_str(),
                "must be string",
            ));
        }
    }
    if let Some(metadata) = s.properties.get("metadata") {
        let p = path.child("properties").key("metadata");
        if check_metadata && metadata.type_name != "object" {
            errs.push(FieldError::invalid(
                &p.child("type"),
                metadata.type_name.as_str(),
                "must be object",
            ));
        }
        if level == Level::Root && !restricts_only_names(metadata) {
            errs.push(FieldError::forbidden(
                &p,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if s.x.embedded_resource && !s.preserves_unknown_fields() && s.properties.is_empty() {
        errs.push(FieldError::required(
            &path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    errs
}

/// Whether `anyOf` is `[{type: integer}, {type: string}]`, int-or-string's spelling.
fn is_int_or_string(any_of: &[Schema]) -> bool {
    matches!(any_of, [int, string]
        if int.only_type && int.type_name == "integer" && string.only_type && string.type_name == "string")
}

/// Whether the root `metadata` schema says nothing but its type and default and, at most,
/// properties `name` and `generateName`.
fn restricts_only_names(m: &Schema) -> bool {
    let names = m
        .properties
        .keys()
        .all(|k| k == "name" || k == "generateName");
    names
        && m.format.is_empty()
        && m.title.is_empty()
        && m.description.is_empty()
        && !m.nullable
        && m.additional_properties.is_none()
        && m.items.is_none()
        && checks_empty(&m.checks)
        && m.x.preserve_unknown_fields.is_none()
        && !m.x.embedded_resource
        && !m.x.int_or_string
        && m.x.list_type.is_none()
        && m.x.list_map_keys.is_empty()
        && m.x.map_type.is_none()
        && m.x.rules.is_empty()
}

fn checks_empty(c: &Checks) -> bool {
    c.maximum.is_none()
        && !c.exclusive_maximum
        && c.minimum.is_none()
        && !c.exclusive_minimum
        && c.max_length.is_none()
        && c.min_length.is_none()
        && c.pattern.is_none()
        && c.max_items.is_none()
        && c.min_items.is_none()
        && !c.unique_items
        && c.multiple_of.is_none()
        && c.enumeration.is_empty()
        && c.max_properties.is_none()
        && c.min_properties.is_none()
        && c.required.is_empty()
        && c.all_of.is_empty()
        && c.any_of.is_empty()
        && c.one_of.is_empty()
        && c.not.is_none()
}

/// The checks of a node's value validations: what is under its junctors, and its pattern.
fn value_validation(
    c: &Checks,
    skip_any_of: bool,
    skip_first_all_of: bool,
    level: Level,
    path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if !skip_any_of {
        for (i, n) in c.any_of.iter().enumerate() {
            errs.extend(nested(n, false, level, &path.child("anyOf").index(i)));
        }
    }
    for (i, n) in c.all_of.iter().enumerate() {
        errs.extend(nested(
            n,
            skip_first_all_of && i == 0,
            level,
            &path.child("allOf").index(i),
        ));
    }
    for (i, n) in c.one_of.iter().enumerate() {
        errs.extend(nested(n, false, level, &path.child("oneOf").index(i)));
    }
    if let Some(not) = &c.not {
        errs.extend(nested(not, false, level, &path.child("not")));
    }
    if let Some(Err(e)) = c.pattern.as_ref().map(|p| &p.compiled) {
        let source = c.pattern.as_ref().map_or("", |p| p.source.as_str());
        errs.push(FieldError::invalid(
            &path.child("pattern"),
            source,
            format!("must be a valid regular expression, but isn't: {e}"),
        ));
    }
    errs
}

/// A schema under a junctor: value validations only.
fn nested(n: &Schema, skip_any_of: bool, level: Level, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = value_validation(&n.checks, skip_any_of, false, level, path);
    if let Some(items) = &n.items {
        errs.extend(nested(items, false, level, &path.child("items")));
    }
    for (name, prop) in &n.properties {
        errs.extend(nested(
            prop,
            false,
            Level::Field,
            &path.child("properties").key(name.as_str()),
        ));
    }
    let forbidden = [
        (!n.type_name.is_empty(), "type", "must be empty"),
        (
            n.additional_properties.is_some(),
            "additionalProperties",
            "must be undefined",
        ),
        (n.default.is_some(), "default", "must be undefined"),
        (!n.title.is_empty(), "title", "must be empty"),
        (!n.description.is_empty(), "description", "must be empty"),
        (n.nullable, "nullable", "must be false"),
        (n.external_docs, "externalDocs", "must be undefined"),
        (
            n.preserves_unknown_fields(),
            "x-kubernetes-preserve-unknown-fields",
            "must be false",
        ),
        (
            n.x.embedded_resource,
            "x-kubernetes-embedded-resource",
            "must be false",
        ),
        (
            n.x.int_or_string,
            "x-kubernetes-int-or-string",
            "must be false",
        ),
        (
            !n.x.list_map_keys.is_empty(),
            "x-kubernetes-list-map-keys",
            "must be empty",
        ),
        (
            n.x.list_type.is_some(),
            "x-kubernetes-list-type",
            "must be undefined",
        ),
        (
            n.x.map_type.is_some(),
            "x-kubernetes-map-type",
            "must be undefined",
        ),
        (
            !n.x.rules.is_empty(),
            "x-kubernetes-validations",
            "must be empty",
        ),
    ];
    for (_, keyword, must) in forbidden.iter().filter(|(set, ..)| *set) {
        errs.push(FieldError::forbidden(
            &path.child(*keyword),
            format!("{must} to be structural"),
        ));
    }
    // Reasoning about metadata could restrict it in ways not wanted.
    if n.properties.contains_key("metadata") {
        errs.push(FieldError::forbidden(
            &path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
    errs
}

/// Upstream's completeness check: every property and `items` named under the root's
/// junctors (recursively through theirs) is also specified on the spine.
fn value_completeness(
    c: &Checks,
    s: &Schema,
    s_path: &FieldPath,
    v_path: &FieldPath,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(not) = &c.not {
        errs.extend(nested_completeness(
            not,
            Some(s),
            s_path,
            &v_path.child("not"),
        ));
    }
    for (key, list) in [
        ("allOf", &c.all_of),
        ("anyOf", &c.any_of),
        ("oneOf", &c.one_of),
    ] {
        for (i, n) in list.iter().enumerate() {
            errs.extend(nested_completeness(
                n,
                Some(s),
                s_path,
                &v_path.child(key).index(i),
            ));
        }
    }
    errs
}

fn nested_completeness(
    n: &Schema,
    s: Option<&Schema>,
    s_path: &FieldPath,
    v_path: &FieldPath,
) -> Vec<FieldError> {
    let Some(s) = s else {
        return vec![FieldError::required(
            s_path,
            format!("because it is defined in {v_path}"),
        )];
    };
    let mut errs = value_completeness(&n.checks, s, s_path, v_path);
    if let Some(items) = &n.items {
        errs.extend(nested_completeness(
            items,
            s.items.as_deref(),
            &s_path.child("items"),
            &v_path.child("items"),
        ));
    }
    for (name, prop) in &n.properties {
        let sp = s_path.child("properties").key(name.as_str());
        let vp = v_path.child("properties").key(name.as_str());
        errs.extend(match s.properties.get(name) {
            Some(spine) => nested_completeness(prop, Some(spine), &sp, &vp),
            None => vec![FieldError::required(
                &sp,
                format!("because it is defined in {vp}"),
            )],
        });
    }
    errs
}
