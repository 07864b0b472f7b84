//! Structural schemas of CustomResourceDefinitions, as upstream's apiextensions-apiserver
//! (`pkg/apiserver/schema`, the CRD schema checks of `pkg/apis/apiextensions/validation`) and
//! the kube-openapi validator it drives: a version's `openAPIV3Schema` checked and parsed once,
//! then custom resources validated, defaulted and pruned against it, `x-kubernetes-validations`
//! CEL rules included, with upstream's error messages.
//!
//! Written by hand rather than with a JSON-schema crate: the structural rules, pruning,
//! defaulting and the exact wording of every error are Kubernetes' own.
//!
//! # Layout
//! - [`Schema`] (here): the parsed node and the public operations.
//! - `parse`: JSON to [`Schema`], rejecting keywords of the wrong JSON type.
//! - `structural`: the "must be structural" checks (`ValidateStructural`).
//! - `keywords`: the rest of the CRD schema checks (unsupported keywords, list and map types,
//!   `x-kubernetes-validations` fields and compilation).
//! - `validate`: kube-openapi's value validation, as the Status causes upstream returns.
//! - `formats`, `regex`: the string formats, and Go's regular expressions for `pattern`.
//! - `meta`: embedded resources' `apiVersion`/`kind`/`metadata`, and list-type set and map
//!   uniqueness.
//! - `defaults`: defaulting, and the CRD check that defaults validate and are pruned.
//! - `prune`: dropping unknown fields.
//! - `cel`: the CEL rules, compiled and evaluated.
//! - `tests`: the tests of all of the above.

mod cel;
mod defaults;
mod formats;
mod keywords;
mod meta;
mod parse;
mod prune;
mod regex;
mod structural;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;
use skiff_apimachinery::managedfields::schema::{Custom, CustomList};
use skiff_apimachinery::validation::{ErrorType, FieldError, FieldPath};

/// Upstream's `x-kubernetes-validations` error when any other error would make rules
/// meaningless (`hasBlockingErr` in the custom resource strategy).
const RULES_NOT_CHECKED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

/// A parsed structural schema: one node, with its children by property, `items` and
/// `additionalProperties`, and the value validations of its `allOf`/`anyOf`/`oneOf`/`not`.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    type_name: String,
    format: String,
    title: String,
    description: String,
    external_docs: bool,
    nullable: bool,
    default: Option<Value>,
    properties: BTreeMap<String, Schema>,
    additional_properties: Option<Additional>,
    items: Option<Box<Schema>>,
    checks: Checks,
    x: Extensions,
    /// Keywords upstream rejects (`$ref`, `definitions`, an `items` array, …), by JSON name.
    unsupported: Vec<&'static str>,
    /// Whether the node says nothing but its `type` (how the int-or-string `anyOf` is spelled).
    only_type: bool,
    /// Whether this node or one below it on the structural spine has rules.
    has_rules: bool,
    /// The fields of `self` its rules select, when that is all they use (see
    /// [`cel::selected`]): only those are made CEL values.
    rule_fields: Option<Vec<String>>,
    /// Whether this node or one below it is an embedded resource (`meta` checks those).
    has_embedded: bool,
    /// Whether this node or one below it is a `set` or `map` list (`meta` checks those).
    has_keyed_lists: bool,
}

/// `additionalProperties`: a boolean, or a schema for the values.
#[derive(Debug, Clone)]
enum Additional {
    Bool(bool),
    Schema(Box<Schema>),
}

impl Additional {
    /// The schema for values, if one is given (`true` and `false` give none).
    fn schema(&self) -> Option<&Schema> {
        match self {
            Additional::Schema(s) => Some(s),
            Additional::Bool(_) => None,
        }
    }
}

/// The value validations of a node (upstream's `ValueValidation`).
#[derive(Debug, Clone, Default)]
struct Checks {
    maximum: Option<f64>,
    exclusive_maximum: bool,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    max_length: Option<i64>,
    min_length: Option<i64>,
    pattern: Option<Pattern>,
    max_items: Option<i64>,
    min_items: Option<i64>,
    unique_items: bool,
    multiple_of: Option<f64>,
    enumeration: Vec<Value>,
    max_properties: Option<i64>,
    min_properties: Option<i64>,
    required: Vec<String>,
    all_of: Vec<Schema>,
    any_of: Vec<Schema>,
    one_of: Vec<Schema>,
    not: Option<Box<Schema>>,
}

/// A `pattern` and what compiling it as a Go regular expression gave.
#[derive(Debug, Clone)]
struct Pattern {
    source: String,
    compiled: Result<regex::Regex, String>,
}

/// The Kubernetes vendor extensions of a node.
#[derive(Debug, Clone, Default)]
struct Extensions {
    /// `x-kubernetes-preserve-unknown-fields` as written (`false` is an error).
    preserve_unknown_fields: Option<bool>,
    embedded_resource: bool,
    int_or_string: bool,
    list_type: Option<String>,
    list_map_keys: Vec<String>,
    map_type: Option<String>,
    rules: Vec<cel::Rule>,
}

impl Schema {
    /// Parses a version's `openAPIV3Schema` (JSON, as in the CRD). Errors are upstream's CRD
    /// validation errors for the schema, rooted at `path` (e.g.
    /// `spec.versions[0].schema.openAPIV3Schema`): non-structural schemas, unsupported
    /// keywords, bad list and map types, invalid CEL rules and bad defaults. A keyword of the
    /// wrong JSON type (upstream fails decoding the CRD) is an error at that keyword.
    pub fn new(json: &Value, path: &FieldPath) -> Result<Schema, Vec<FieldError>> {
        let mut decoding = Vec::new();
        let schema = parse::parse(json, path, &mut decoding, true);
        if !decoding.is_empty() {
            return Err(decoding);
        }
        let mut errs = Vec::new();
        if schema.nullable {
            errs.push(FieldError::forbidden(
                &path.child("nullable"),
                "nullable cannot be true at the root",
            ));
        }
        // Upstream checks structure and defaults only on schemas it can convert, and compiles
        // rules only once both pass.
        let conversion = schema.conversion_error();
        let mut rules_checked = false;
        if conversion.is_none() {
            let structural = structural::check(&schema, path);
            if structural.is_empty() {
                let defaults = defaults::check(&schema, path);
                rules_checked = defaults.is_empty();
                errs.extend(defaults);
            } else {
                errs.extend(structural);
            }
        }
        errs.extend(keywords::check(&schema, path, rules_checked));
        if let Some(detail) = conversion.filter(|_| errs.is_empty()) {
            errs.push(FieldError::invalid(path, "", detail));
        }
        if errs.is_empty() {
            Ok(schema)
        } else {
            Err(errs)
        }
    }

    /// Every validation error of a custom resource against this schema, with object paths
    /// (`spec.replicas`), as upstream's custom resource strategy reports them: the OpenAPI
    /// validation, embedded resources' type and object metadata, list-type `set` and `map`
    /// uniqueness, then the `x-kubernetes-validations` rules (skipped, with upstream's message,
    /// when an earlier error is one that makes rules meaningless).
    ///
    /// The whole object is checked against the schema, as upstream does; the root's
    /// `apiVersion`, `kind` and `metadata` are constrained only as far as the schema says (at
    /// most `metadata.name` and `metadata.generateName`): ObjectMeta itself is the caller's.
    ///
    /// `old` is the stored object on update: transition rules (those using `oldSelf`) run
    /// where the old value correlates (object properties, map values, `map` list items by key),
    /// and list uniqueness is only enforced when the old object already satisfied it. Other
    /// errors are not ratcheted (upstream's `CRDValidationRatcheting` is not implemented).
    ///
    /// CEL cost: the `cel` crate does not meter evaluation, so cost is estimated per
    /// evaluation as the size of `self` raised to the rule's comprehension nesting depth, held
    /// against upstream's per-call limit (1,000,000) and per-request budget (10,000,000) with
    /// upstream's messages.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = validate::validate(self, obj, None);
        errs.extend(meta::validate_embedded(self, obj, None, false));
        if old.is_none_or(|old| meta::list_sets_and_maps(self, old).is_empty()) {
            errs.extend(meta::list_sets_and_maps(self, obj));
        }
        if self.has_rules {
            if errs.iter().any(blocks_rules) {
                errs.push(FieldError::invalid(
                    &FieldPath::new("<nil>"),
                    Value::Null,
                    RULES_NOT_CHECKED,
                ));
            } else {
                errs.extend(cel::validate(self, obj, old, None, true));
            }
        }
        errs
    }

    /// Applies `default`s in place as upstream's structural defaulting: nulls the schema does
    /// not allow are dropped unless a default replaces them, then defaults fill properties
    /// missing from objects that are present, recursing through items and
    /// `additionalProperties`. Used on write and on read from storage. Whether anything
    /// changed.
    pub fn apply_defaults(&self, obj: &mut Value) -> bool {
        let pruned = defaults::prune_nulls(obj, Some(self));
        defaults::apply(obj, self) || pruned
    }

    /// Server-side apply's view of this schema: objects, maps and lists with their
    /// `x-kubernetes-map-type`, `x-kubernetes-list-type` and `x-kubernetes-list-map-keys`.
    pub fn apply_schema(&self) -> Custom {
        Custom {
            properties: self
                .properties
                .iter()
                .map(|(name, s)| (name.clone(), s.apply_schema()))
                .collect(),
            values: self
                .additional_properties
                .as_ref()
                .and_then(Additional::schema)
                .map(|s| Box::new(s.apply_schema())),
            items: self.items.as_ref().map(|s| Box::new(s.apply_schema())),
            list: match self.x.list_type.as_deref() {
                Some("set") => CustomList::Set,
                Some("map") => CustomList::Map(self.x.list_map_keys.clone()),
                _ => CustomList::Atomic,
            },
            atomic: self.x.map_type.as_deref() == Some("atomic"),
        }
    }

    /// Removes fields the schema does not specify, as upstream's pruning:
    /// `x-kubernetes-preserve-unknown-fields` keeps unknown fields below it, embedded resources
    /// and the root keep `apiVersion`, `kind` and `metadata`. Returns the removed fields' paths
    /// as upstream words them in `unknown field "…"` warnings (`spec.foo`, `spec.list[0].bar`),
    /// sorted.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        prune::prune(obj, self, true)
    }

    /// The sub-schema at a simple JSON path like `.spec.replicas` (`[n]` or `[*]` steps into
    /// items), if the schema defines it.
    pub fn at(&self, json_path: &str) -> Option<&Schema> {
        let mut node = self;
        for step in json_path.split('.').skip_while(|s| s.is_empty()) {
            let (name, subscripts) = step.split_once('[').unwrap_or((step, ""));
            if !name.is_empty() {
                node = node.properties.get(name)?;
            }
            for _ in subscripts.split('[').filter(|s| !s.is_empty()) {
                node = node.items.as_deref()?;
            }
        }
        Some(node)
    }

    /// The node's `type` (`""` when absent).
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The node's `format` as written (`""` when absent).
    pub fn format(&self) -> &str {
        &self.format
    }

    /// `x-kubernetes-preserve-unknown-fields: true`.
    fn preserves_unknown_fields(&self) -> bool {
        self.x.preserve_unknown_fields == Some(true)
    }

    /// `additionalProperties`, if given: `Some(Some(schema))` with a schema for the values,
    /// `Some(None)` as a boolean.
    /// Whether a `default` is set anywhere in the schema (defaulting a stored object can only
    /// change it then).
    pub fn has_defaults(&self) -> bool {
        self.default.is_some()
            || self.properties.values().any(Schema::has_defaults)
            || self.items.as_deref().is_some_and(Schema::has_defaults)
            || self
                .additional_schema()
                .flatten()
                .is_some_and(Schema::has_defaults)
    }

    fn additional_schema(&self) -> Option<Option<&Schema>> {
        self.additional_properties.as_ref().map(Additional::schema)
    }

    /// Upstream's `NewStructural` failure for this schema, if it cannot be converted (an
    /// unsupported keyword anywhere, `x-kubernetes-preserve-unknown-fields: false`).
    fn conversion_error(&self) -> Option<String> {
        if let Some(keyword) = self.unsupported.first() {
            return Some(match *keyword {
                "items" => "OpenAPIV3Schema 'items' must be a schema, but is an array".into(),
                "$schema" => "OpenAPIV3Schema 'schema' is not supported".into(),
                k => format!("OpenAPIV3Schema '{k}' is not supported"),
            });
        }
        if self.x.preserve_unknown_fields == Some(false) {
            return Some(
                "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined"
                    .into(),
            );
        }
        let children = self
            .items
            .iter()
            .map(|s| s.as_ref())
            .chain(self.properties.values())
            .chain(self.additional_schema().flatten())
            .chain(self.checks.all_of.iter())
            .chain(self.checks.any_of.iter())
            .chain(self.checks.one_of.iter())
            .chain(self.checks.not.as_deref());
        children.filter_map(Schema::conversion_error).next()
    }
}

/// Upstream's `hasBlockingErr`: errors after which CEL rules are not evaluated.
fn blocks_rules(e: &FieldError) -> bool {
    matches!(
        e.kind,
        ErrorType::NotSupported
            | ErrorType::Required
            | ErrorType::TooLong
            | ErrorType::TooMany
            | ErrorType::TypeInvalid
    )
}
