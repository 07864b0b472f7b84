//! Label selectors as upstream's `k8s.io/apimachinery/pkg/labels`: the string form
//! (`a=b,c!=d,e in (f,g),!h,i>3`) parsed with upstream's lexer and grammar and error texts, the
//! `metav1.LabelSelector` object form (`matchLabels` + `matchExpressions`), matching against a
//! label map, and the canonical string (`Display`) upstream prints.
//!
//! Requirements are kept sorted by key (stably), as upstream sorts them after parsing; the
//! canonical string sorts the values of `in`/`notin`.
//!
//! # Layout
//! - this file: [`Selector`], [`Requirement`], [`Operator`], the [`Labels`] trait and [`Error`].
//! - `parser`: upstream's lexer and recursive-descent parser of the string form.

mod parser;
#[cfg(test)]
mod tests;

use crate::validation::{
    FieldError, FieldPath, aggregate, gofmt, is_qualified_name, is_valid_label_value,
};
use parser::Parser;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasher;

/// Why a label selector could not be parsed or built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// The selector string is malformed: an unexpected token, with upstream's `found '…',
    /// expected: …` text.
    #[error("{0}")]
    Syntax(String),
    /// One requirement of the selector string failed to parse or validate.
    #[error("unable to parse requirement: {0}")]
    Requirement(Box<Error>),
    /// A requirement's key or values are invalid; the text is upstream's aggregated field errors.
    #[error("{}", aggregate(.0).unwrap_or_default())]
    Invalid(Vec<FieldError>),
    /// A `matchExpressions` operator is none of `In`, `NotIn`, `Exists`, `DoesNotExist`.
    #[error("{} is not a valid pod selector operator", gofmt::quote(.0))]
    UnknownOperator(String),
    /// A `metav1.LabelSelector` object has a field of the wrong JSON type.
    #[error("invalid label selector: {path} {problem}")]
    Malformed {
        /// The offending field, e.g. `selector.matchLabels[app]`.
        path: String,
        /// What it should have been, e.g. `must be a string`.
        problem: &'static str,
    },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A set of labels a selector can be matched against.
pub trait Labels {
    /// The value of label `key`, if the label is present.
    fn get(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

impl<S: BuildHasher> Labels for HashMap<String, String, S> {
    fn get(&self, key: &str) -> Option<&str> {
        HashMap::get(self, key).map(String::as_str)
    }
}

/// A JSON label map; a value that is not a string counts as absent.
impl Labels for serde_json::Map<String, Value> {
    fn get(&self, key: &str) -> Option<&str> {
        serde_json::Map::get(self, key).and_then(Value::as_str)
    }
}

/// A JSON value holding a label map (`metadata.labels`); anything but an object has no labels.
impl Labels for Value {
    fn get(&self, key: &str) -> Option<&str> {
        self.as_object().and_then(|m| Labels::get(m, key))
    }
}

impl<T: Labels + ?Sized> Labels for &T {
    fn get(&self, key: &str) -> Option<&str> {
        (**self).get(key)
    }
}

/// How a requirement relates a label's key to its values (upstream's `selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The label is present and its value is one of the values (`k in (a,b)`).
    In,
    /// The label is absent, or its value is none of the values (`k notin (a,b)`).
    NotIn,
    /// The label is present with this value (`k=a`).
    Equals,
    /// Same as [`Operator::Equals`], spelled `k==a`.
    DoubleEquals,
    /// The label is absent or has another value (`k!=a`).
    NotEquals,
    /// The label is present (`k`).
    Exists,
    /// The label is absent (`!k`).
    DoesNotExist,
    /// The label is present and, as an integer, greater than the value (`k>3`).
    GreaterThan,
    /// The label is present and, as an integer, less than the value (`k<3`).
    LessThan,
}

impl Operator {
    /// Upstream's name for the operator (`in`, `notin`, `=`, `==`, `!=`, `exists`, `!`, `gt`,
    /// `lt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::NotIn => "notin",
            Self::Equals => "=",
            Self::DoubleEquals => "==",
            Self::NotEquals => "!=",
            Self::Exists => "exists",
            Self::DoesNotExist => "!",
            Self::GreaterThan => "gt",
            Self::LessThan => "lt",
        }
    }
}

/// One condition of a selector: a key, an operator and the values it relates them to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement, validating as upstream's `NewRequirement`: the key is a qualified
    /// name; `in`/`notin` have values; `=`, `==`, `!=` exactly one; `exists`/`!` none; `gt`/`lt`
    /// exactly one integer; every value is a valid label value.
    pub fn new(key: impl Into<String>, operator: Operator, values: Vec<String>) -> Result<Self> {
        let key = key.into();
        let mut errs = Vec::new();
        let key_errs = is_qualified_name(&key);
        if !key_errs.is_empty() {
            errs.push(FieldError::invalid(
                &FieldPath::new("key"),
                key.as_str(),
                key_errs.join("; "),
            ));
        }
        let values_path = FieldPath::new("values");
        let values_json = || {
            if values.is_empty() {
                Value::Null
            } else {
                Value::from(values.clone())
            }
        };
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(FieldError::invalid(
                &values_path,
                values_json(),
                "for 'in', 'notin' operators, values set can't be empty",
            )),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                errs.push(FieldError::invalid(
                    &values_path,
                    values_json(),
                    "exact-match compatibility requires one single value",
                ));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                errs.push(FieldError::invalid(
                    &values_path,
                    values_json(),
                    "values set must be empty for exists and does not exist",
                ));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(FieldError::invalid(
                        &values_path,
                        values_json(),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(FieldError::invalid(
                            &values_path.index(i),
                            v.as_str(),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = is_valid_label_value(v);
            if !value_errs.is_empty() {
                errs.push(FieldError::invalid(
                    &values_path.index(i).key(key.as_str()),
                    v.as_str(),
                    value_errs.join("; "),
                ));
            }
        }
        if !errs.is_empty() {
            return Err(Error::Invalid(errs));
        }
        Ok(Self {
            key,
            operator,
            values,
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, in the order given (parsing yields them sorted and deduplicated).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                value.is_some_and(|v| self.has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !self.has_value(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(have) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

/// The canonical string upstream prints (`x in (a,b)`, `!y`, `z>3`); values of `in`/`notin` are
/// sorted in the output.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (open, close) = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", ""),
            Operator::DoubleEquals => ("==", ""),
            Operator::NotEquals => ("!=", ""),
            Operator::GreaterThan => (">", ""),
            Operator::LessThan => ("<", ""),
            Operator::In => (" in (", ")"),
            Operator::NotIn => (" notin (", ")"),
        };
        f.write_str(open)?;
        if let [only] = self.values.as_slice() {
            f.write_str(only)?;
        } else {
            let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            f.write_str(&sorted.join(","))?;
        }
        f.write_str(close)
    }
}

/// A label selector: the AND of its requirements, or the selector that matches nothing.
///
/// The default selector is empty and matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// The selector that matches every label set (upstream's `Everything()`).
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no label set (upstream's `Nothing()`), which a null
    /// `metav1.LabelSelector` means.
    pub fn nothing() -> Self {
        Self {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses the string form, as upstream's `labels.Parse`.
    pub fn parse(selector: &str) -> Result<Self> {
        let mut parser = Parser::new(selector);
        let requirements = parser.parse()?;
        Ok(Self::from_requirements(requirements))
    }

    /// A selector of the given requirements, sorted stably by key.
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self {
            requirements,
            nothing: false,
        }
    }

    /// A selector requiring exactly the given labels, without validating them (upstream's
    /// `SelectorFromValidatedSet`); an empty set gives the empty selector.
    pub fn from_set<K, V>(labels: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<String>,
        V: Into<String>,
    {
        let requirements = labels
            .into_iter()
            .map(|(k, v)| Requirement {
                key: k.into(),
                operator: Operator::Equals,
                values: vec![v.into()],
            })
            .collect();
        Self::from_requirements(requirements)
    }

    /// Builds a selector from a `metav1.LabelSelector` JSON object, as upstream's
    /// `LabelSelectorAsSelector`: null matches nothing, an object without requirements matches
    /// everything, `matchLabels` entries become `=` requirements and `matchExpressions` use
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub fn from_label_selector(selector: &Value) -> Result<Self> {
        let obj = match selector {
            Value::Null => return Ok(Self::nothing()),
            Value::Object(obj) => obj,
            _ => return Err(malformed("selector".into(), "must be an object")),
        };
        let empty = serde_json::Map::new();
        let match_labels = match obj.get("matchLabels") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(_) => {
                return Err(malformed(
                    "selector.matchLabels".into(),
                    "must be an object",
                ));
            }
        };
        let expressions: &[Value] = match obj.get("matchExpressions") {
            None | Some(Value::Null) => &[],
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(malformed(
                    "selector.matchExpressions".into(),
                    "must be an array",
                ));
            }
        };
        if match_labels.is_empty() && expressions.is_empty() {
            return Ok(Self::everything());
        }
        let mut requirements = Vec::with_capacity(match_labels.len() + expressions.len());
        for (k, v) in match_labels {
            let Some(v) = v.as_str() else {
                return Err(malformed(
                    format!("selector.matchLabels[{k}]"),
                    "must be a string",
                ));
            };
            requirements.push(Requirement::new(
                k.as_str(),
                Operator::Equals,
                vec![v.to_string()],
            )?);
        }
        for (i, expr) in expressions.iter().enumerate() {
            let path = format!("selector.matchExpressions[{i}]");
            let Some(expr) = expr.as_object() else {
                return Err(malformed(path, "must be an object"));
            };
            let text = |field: &str| match expr.get(field) {
                None | Some(Value::Null) => Ok(""),
                Some(Value::String(s)) => Ok(s.as_str()),
                Some(_) => Err(malformed(format!("{path}.{field}"), "must be a string")),
            };
            let key = text("key")?;
            let operator = match text("operator")? {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(Error::UnknownOperator(other.to_string())),
            };
            let values = match expr.get("values") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or_else(|| {
                            malformed(format!("{path}.values"), "must be an array of strings")
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
                Some(_) => return Err(malformed(format!("{path}.values"), "must be an array")),
            };
            requirements.push(Requirement::new(key, operator, values)?);
        }
        Ok(Self::from_requirements(requirements))
    }

    /// This selector with one more requirement (upstream's `Add`).
    #[must_use]
    pub fn with_requirement(self, requirement: Requirement) -> Self {
        if self.nothing {
            return self;
        }
        let mut requirements = self.requirements;
        requirements.push(requirement);
        Self::from_requirements(requirements)
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &(impl Labels + ?Sized)) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector restricts nothing (and so matches everything).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this is the selector that matches nothing.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key; empty for the selector that matches nothing.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// The value label `key` must have, if the first requirement on `key` pins exactly one value
    /// (`key=v`, `key==v` or `key in (v)`), as upstream's `RequiresExactMatch`.
    pub fn requires_exact_match(&self, key: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == key)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [only]) => Some(only),
            _ => None,
        }
    }
}

/// Upstream's canonical string: requirements joined by `,`; empty for both the selector that
/// matches everything and the one that matches nothing.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

fn malformed(path: String, problem: &'static str) -> Error {
    Error::Malformed { path, problem }
}
