//! Value validation of custom resources as kube-openapi's `SchemaValidator` does it — type,
//! `allOf`/`anyOf`/`oneOf`/`not`, strings, formats, numbers, arrays, `enum`, objects, in that
//! order — and its errors turned into field errors as upstream's
//! `kubeOpenAPIResultToFieldErrors` turns them: `Required value`, `Unsupported value`,
//! `Too long`, `Too many`, and otherwise `Invalid value` with kube-openapi's message
//! (`spec.replicas in body should be greater than or equal to 1`).
//!
//! kube-openapi names values with dotted paths (`spec.items[0].name`, map values as
//! `spec.labels.app`); upstream makes each name one element of the field path, so the path
//! reads the same. Composite errors (`must validate one and only one schema (oneOf)`) are not
//! field-specific: they sit at the root, which upstream renders `<nil>` for custom resources.

use serde_json::{Map, Value};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Additional, Schema, formats};
use skiff_apimachinery::validation::gofmt;

/// Validates `value` against `schema`; paths are under `base` (`None`: a custom resource, whose
/// root upstream renders `<nil>`).
pub(super) fn validate(
    schema: &Schema,
    value: &Value,
    base: Option<&FieldPath>,
) -> Vec<FieldError> {
    Validator { base }.value(schema, value, "").errors
}

/// The result of validating one value: its errors, and how many checks passed (kube-openapi's
/// `MatchCount`, approximated, which picks the closest `anyOf`/`oneOf` alternative to report).
#[derive(Default)]
struct Outcome {
    errors: Vec<FieldError>,
    matches: usize,
}

impl Outcome {
    fn merge(&mut self, other: Outcome) {
        self.errors.extend(other.errors);
        self.matches += other.matches;
    }

    /// Merges the outcome of one check, counting it as a match if it passed.
    fn check(&mut self, other: Outcome) {
        if other.errors.is_empty() {
            self.matches += 1;
        }
        self.merge(other);
    }

    fn fail(e: FieldError) -> Outcome {
        Outcome {
            errors: vec![e],
            matches: 0,
        }
    }
}

/// A JSON value's type as kube-openapi sees the decoded Go value.
#[derive(Clone, Copy)]
enum Kind {
    Null,
    Bool,
    Int(i64),
    Float(f64),
    String,
    Array,
    Object,
}

impl Kind {
    fn of(v: &Value) -> Kind {
        match v {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(n) => match n.as_i64() {
                Some(i) => Kind::Int(i),
                None => Kind::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(_) => Kind::String,
            Value::Array(_) => Kind::Array,
            Value::Object(_) => Kind::Object,
        }
    }

    /// The JSON type and format kube-openapi infers for the value.
    fn type_and_format(self) -> (&'static str, &'static str) {
        match self {
            Kind::Null => ("null", ""),
            Kind::Bool => ("boolean", ""),
            Kind::Int(_) => ("integer", "int64"),
            Kind::Float(_) => ("number", "float64"),
            Kind::String => ("string", ""),
            Kind::Array => ("array", ""),
            Kind::Object => ("object", ""),
        }
    }
}

struct Validator<'a> {
    base: Option<&'a FieldPath>,
}

impl Validator<'_> {
    /// The field path of the value kube-openapi names `name` (a leading `.` dropped).
    fn path(&self, name: &str) -> FieldPath {
        let name = name.strip_prefix('.').unwrap_or(name);
        match (self.base, name) {
            (None, "") => FieldPath::new("<nil>"),
            (None, n) => FieldPath::new(n),
            (Some(base), "") => base.clone(),
            (Some(base), n) => base.child(n),
        }
    }

    /// An `Invalid value` error with kube-openapi's message `<name> in body <text>`.
    fn invalid(
        &self,
        name: &str,
        value: impl Into<Value>,
        text: impl std::fmt::Display,
    ) -> Outcome {
        Outcome::fail(FieldError::invalid(
            &self.path(name),
            value,
            format!("{name} in body {text}"),
        ))
    }

    /// kube-openapi's type error (`<name> in body must be of type <expected>: "<actual>"`).
    fn type_invalid(&self, name: &str, expected: &str, actual: &str) -> Outcome {
        Outcome::fail(FieldError::type_invalid(
            &self.path(name),
            actual,
            format!(
                "{name} in body must be of type {expected}: {}",
                gofmt::quote(actual)
            ),
        ))
    }

    /// An error of a whole `allOf`/`anyOf`/`oneOf`/`not`, at the root.
    fn composite(&self, message: String) -> FieldError {
        let root = self
            .base
            .cloned()
            .unwrap_or_else(|| FieldPath::new("<nil>"));
        FieldError::invalid(&root, "", message)
    }

    fn value(&self, s: &Schema, v: &Value, name: &str) -> Outcome {
        let types: Vec<&str> = if s.x.int_or_string {
            vec!["integer", "string"]
        } else if s.type_name.is_empty() {
            Vec::new()
        } else {
            vec![s.type_name.as_str()]
        };
        let format = formats::effective(&s.type_name, s.x.int_or_string, &s.format);
        let kind = Kind::of(v);
        let mut out = Outcome::default();
        if !types.is_empty() || !format.is_empty() {
            out.check(self.type_check(&types, format, s.nullable, kind, name));
        }
        if let Kind::Null = kind {
            out.check(self.enumeration(s, v, name));
            return out;
        }
        out.check(self.junctors(s, v, name));
        if let Value::String(text) = v {
            out.check(self.string(s, text, name));
            if !format.is_empty()
                && formats::checks_strings(format)
                && !formats::is_valid(format, text)
            {
                out.merge(self.type_invalid(name, format, text));
            }
        }
        if let Kind::Int(_) | Kind::Float(_) = kind {
            out.check(self.number(s, kind, name));
        }
        if let Value::Array(items) = v {
            out.check(self.slice(s, items, name));
        }
        out.check(self.enumeration(s, v, name));
        if let Value::Object(fields) = v {
            out.check(self.object(s, fields, name));
        }
        out
    }

    /// kube-openapi's `typeValidator`, quirks included: numbers of integral value are
    /// integers, integers are numbers, and a string or array passes any non-numeric type that
    /// has a format.
    fn type_check(
        &self,
        types: &[&str],
        format: &str,
        nullable: bool,
        kind: Kind,
        name: &str,
    ) -> Outcome {
        let expected = types.join(",");
        if let Kind::Null = kind {
            return if types.is_empty() || nullable {
                Outcome::default()
            } else {
                self.type_invalid(name, &expected, "null")
            };
        }
        let (actual, actual_format) = kind.type_and_format();
        let float_int =
            matches!(kind, Kind::Float(f) if is_json_integer(f)) && types.contains(&"integer");
        let int_float = matches!(kind, Kind::Int(_)) && types.contains(&"number");
        let compatible = types.contains(&actual) || float_int || int_float;
        let text_like = matches!(kind, Kind::String | Kind::Array);
        if !(text_like || format.is_empty() || compatible || format == actual_format) {
            return self.type_invalid(name, format, actual_format);
        }
        let numeric = types.contains(&"integer") || types.contains(&"number");
        if !numeric && !format.is_empty() && text_like {
            return Outcome::default();
        }
        if compatible {
            Outcome::default()
        } else {
            self.type_invalid(name, &expected, actual)
        }
    }

    /// kube-openapi's `schemaPropsValidator`: `anyOf`, `oneOf`, `allOf`, `not`.
    fn junctors(&self, s: &Schema, v: &Value, name: &str) -> Outcome {
        let c = &s.checks;
        let quoted = gofmt::quote(name);
        let mut out = Outcome::default();
        if !c.any_of.is_empty() {
            let mut best: Option<Outcome> = None;
            let mut success = None;
            for alternative in &c.any_of {
                let r = self.value(alternative, v, name);
                if r.errors.is_empty() {
                    best = None;
                    success = Some(r);
                    break;
                }
                if best.as_ref().is_none_or(|b| r.matches > b.matches) {
                    best = Some(r);
                }
            }
            if success.is_none() {
                let message = format!("{quoted} must validate at least one schema (anyOf)");
                out.errors.push(self.composite(message));
            }
            if let Some(r) = best.or(success) {
                out.merge(r);
            }
        }
        if !c.one_of.is_empty() {
            let mut best: Option<Outcome> = None;
            let mut success = None;
            let mut valid = 0;
            for alternative in &c.one_of {
                let r = self.value(alternative, v, name);
                if r.errors.is_empty() {
                    valid += 1;
                    best = None;
                    success.get_or_insert(r);
                } else if valid == 0 && best.as_ref().is_none_or(|b| r.matches > b.matches) {
                    best = Some(r);
                }
            }
            if valid == 1 {
                out.merge(success.unwrap_or_default());
            } else {
                let found = match valid {
                    0 => "Found none valid".to_string(),
                    n => format!("Found {n} valid alternatives"),
                };
                let message =
                    format!("{quoted} must validate one and only one schema (oneOf). {found}");
                out.errors.push(self.composite(message));
                out.merge(best.unwrap_or_default());
            }
        }
        if !c.all_of.is_empty() {
            let mut valid = 0;
            for part in &c.all_of {
                let r = self.value(part, v, name);
                if r.errors.is_empty() {
                    valid += 1;
                }
                out.merge(r);
            }
            if valid != c.all_of.len() {
                let none = if valid == 0 { ". None validated" } else { "" };
                let message = format!("{quoted} must validate all the schemas (allOf){none}");
                out.errors.push(self.composite(message));
            }
        }
        if let Some(not) = &c.not
            && self.value(not, v, name).errors.is_empty()
        {
            let message = format!("{quoted} must not validate the schema (not)");
            out.errors.push(self.composite(message));
        }
        out
    }

    /// `maxLength`, `minLength` (in characters), `pattern`: the first that fails.
    fn string(&self, s: &Schema, text: &str, name: &str) -> Outcome {
        let c = &s.checks;
        let len = text.chars().count() as i64;
        if let Some(max) = c.max_length.filter(|max| len > *max) {
            let max = usize::try_from(max).unwrap_or_default();
            return Outcome::fail(FieldError::too_long(&self.path(name), max));
        }
        if let Some(min) = c.min_length.filter(|min| len < *min) {
            return self.invalid(
                name,
                text,
                format_args!("should be at least {min} chars long"),
            );
        }
        if let Some(pattern) = &c.pattern
            && let Ok(re) = &pattern.compiled
            && !re.is_match(text)
        {
            return self.invalid(
                name,
                text,
                format_args!("should match '{}'", pattern.source),
            );
        }
        Outcome::default()
    }

    /// `multipleOf`, `minimum`, `maximum`; integers are checked against bounds truncated to
    /// integers, as kube-openapi does.
    fn number(&self, s: &Schema, kind: Kind, name: &str) -> Outcome {
        let c = &s.checks;
        let mut out = Outcome::default();
        let (value, shown) = match kind {
            Kind::Int(i) => (Value::from(i), None),
            Kind::Float(f) => (Value::from(f), Some(f)),
            _ => return out,
        };
        // The bound as kube-openapi prints it: an integer for integer values, else Go's `%v`.
        let bound = |b: f64| match kind {
            Kind::Int(_) => (b as i64).to_string(),
            _ => gofmt::float64(b),
        };
        if let Some(factor) = c.multiple_of {
            let multiple = match kind {
                Kind::Int(i) if factor as i64 != 0 => i % (factor as i64) == 0,
                Kind::Int(i) => is_multiple(i as f64, factor),
                _ => shown.is_some_and(|f| is_multiple(f, factor)),
            };
            if factor < 0.0 {
                let shown = bound(factor);
                out.merge(Outcome::fail(FieldError::invalid(
                    &self.path(name),
                    Value::from(factor),
                    format!("factor MultipleOf declared for {name} must be positive: {shown}"),
                )));
            } else if !multiple {
                out.merge(self.invalid(
                    name,
                    value.clone(),
                    format_args!("should be a multiple of {}", bound(factor)),
                ));
            }
        }
        let below = |b: f64, exclusive: bool| match kind {
            Kind::Int(i) => {
                let b = b as i64;
                i < b || (exclusive && i == b)
            }
            _ => shown.is_some_and(|f| f < b || (exclusive && f == b)),
        };
        if let Some(min) = c.minimum
            && below(min, c.exclusive_minimum)
        {
            let than = if c.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.merge(self.invalid(
                name,
                value.clone(),
                format_args!("should be {than} {}", bound(min)),
            ));
        }
        let above = |b: f64, exclusive: bool| match kind {
            Kind::Int(i) => {
                let b = b as i64;
                i > b || (exclusive && i == b)
            }
            _ => shown.is_some_and(|f| f > b || (exclusive && f == b)),
        };
        if let Some(max) = c.maximum
            && above(max, c.exclusive_maximum)
        {
            let than = if c.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            out.merge(self.invalid(name, value, format_args!("should be {than} {}", bound(max))));
        }
        out
    }

    /// `items`, `minItems`, `maxItems`.
    fn slice(&self, s: &Schema, items: &[Value], name: &str) -> Outcome {
        let c = &s.checks;
        let mut out = Outcome::default();
        if let Some(item_schema) = &s.items {
            for (i, item) in items.iter().enumerate() {
                out.merge(self.value(item_schema, item, &format!("{name}[{i}]")));
            }
        }
        let len = items.len();
        if let Some(min) = c.min_items.filter(|min| (len as i64) < *min) {
            out.merge(self.invalid(name, len, format_args!("should have at least {min} items")));
        }
        if let Some(max) = c.max_items.filter(|max| (len as i64) > *max) {
            let max = usize::try_from(max).unwrap_or_default();
            out.merge(Outcome::fail(FieldError::too_many(
                &self.path(name),
                Some(len),
                max,
            )));
        }
        out
    }

    /// `enum`: the value must equal one of the values (numbers by value); `null` never does.
    fn enumeration(&self, s: &Schema, v: &Value, name: &str) -> Outcome {
        let allowed = &s.checks.enumeration;
        if allowed.is_empty() || (!v.is_null() && allowed.iter().any(|a| same(a, v))) {
            return Outcome::default();
        }
        let values: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        Outcome::fail(FieldError::not_supported(
            &self.path(name),
            v.clone(),
            &values,
        ))
    }

    /// `minProperties`, `maxProperties` (either failing stops the rest), unknown fields under
    /// `additionalProperties: false`, `additionalProperties` schemas, properties, `required`.
    fn object(&self, s: &Schema, fields: &Map<String, Value>, name: &str) -> Outcome {
        let c = &s.checks;
        let count = fields.len();
        if let Some(min) = c.min_properties.filter(|min| (count as i64) < *min) {
            return self.invalid(
                name,
                count,
                format_args!("should have at least {min} properties"),
            );
        }
        if let Some(max) = c.max_properties.filter(|max| (count as i64) > *max) {
            let max = usize::try_from(max).unwrap_or_default();
            return Outcome::fail(FieldError::too_many(&self.path(name), Some(count), max));
        }
        let mut out = Outcome::default();
        let unknown = fields
            .iter()
            .filter(|(k, _)| !s.properties.contains_key(*k));
        match &s.additional_properties {
            Some(Additional::Bool(false)) => {
                for (key, _) in unknown {
                    out.merge(Outcome::fail(FieldError::invalid(
                        &self.path(name),
                        key.as_str(),
                        format!("{name}.{key} in body is a forbidden property"),
                    )));
                }
            }
            Some(Additional::Schema(values)) => {
                for (key, value) in unknown {
                    out.merge(self.value(values, value, &format!("{name}.{key}")));
                }
            }
            _ => {}
        }
        for (prop, schema) in &s.properties {
            if let Some(value) = fields.get(prop) {
                let child = if name.is_empty() {
                    prop.clone()
                } else {
                    format!("{name}.{prop}")
                };
                out.merge(self.value(schema, value, &child));
            }
        }
        for key in c.required.iter().filter(|k| !fields.contains_key(*k)) {
            out.merge(Outcome::fail(FieldError::required(
                &self.path(&format!("{name}.{key}")),
                "",
            )));
        }
        out
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as Go compares an
/// `int64` converted to the enum value's `float64`.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
        }
        _ => a == b,
    }
}

/// go-openapi's `IsFloat64AJSONInteger`: finite, within ±2^53, integral up to a relative
/// 1e-9.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_992.0;
    if !f.is_finite() || f.abs() > MAX {
        return false;
    }
    f == f.trunc() || (f - f.round()).abs() / f.abs() < 1e-9
}

/// kube-openapi's float `MultipleOf`: the quotient is an integer (by the reciprocal for
/// factors below one).
fn is_multiple(value: f64, factor: f64) -> bool {
    let quotient = if factor < 1.0 {
        1.0 / factor * value
    } else {
        value / factor
    };
    is_json_integer(quotient)
}
