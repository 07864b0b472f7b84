//! Field selectors as upstream's `k8s.io/apimachinery/pkg/fields`: comma-separated terms
//! `field=value`, `field==value` and `field!=value`, with `\` escaping `\`, `,` and `=` in values;
//! matching against an object's field values (a missing field reads as the empty string); and the
//! canonical string upstream prints.
//!
//! As upstream, the terms are sorted as raw strings before they are parsed, so the requirement
//! order (and the printed string) does not depend on the order the client wrote them in.

use std::fmt;

/// Why a field selector could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A term has no `=`, `==` or `!=`.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    Unparseable {
        /// The whole selector string.
        selector: String,
        /// The term that has no operator.
        term: String,
    },
    /// A value contains `\` followed by something other than `\`, `,` or `=`, or ends in `\`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscape(String),
    /// A value contains an unescaped `,` or `=`; upstream prints the character's code point.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    UnescapedRune(char),
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a requirement compares the field with the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// The field equals the value (`=` or `==`).
    Equals,
    /// The field differs from the value (`!=`).
    NotEquals,
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// The field path, as written (`spec.nodeName`, `metadata.name`).
    pub field: String,
    /// The comparison.
    pub op: Op,
    /// The literal value, unescaped.
    pub value: String,
}

impl Requirement {
    /// Whether an object whose `field` has `actual` (empty if the object lacks it) satisfies this
    /// term.
    pub fn matches(&self, actual: &str) -> bool {
        match self.op {
            Op::Equals => actual == self.value,
            Op::NotEquals => actual != self.value,
        }
    }
}

/// `field=value` or `field!=value`, the value escaped.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Op::Equals => "=",
            Op::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// A field selector: the AND of its requirements. The default selector is empty and matches
/// everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector of exactly these requirements, in this order.
    pub fn from_requirements(requirements: Vec<Requirement>) -> Self {
        Self { requirements }
    }

    /// The selector requiring `field=value` (upstream's `OneTermEqualSelector`).
    pub fn one_term_equal(field: impl Into<String>, value: impl Into<String>) -> Self {
        Self::from_requirements(vec![Requirement {
            field: field.into(),
            op: Op::Equals,
            value: value.into(),
        }])
    }

    /// Parses the string form, as upstream's `fields.ParseSelector`: terms split on unescaped
    /// commas and sorted, empty terms skipped, each split at its first `!=`, `==` or `=`, and the
    /// value unescaped.
    pub fn parse(selector: &str) -> Result<Self> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::with_capacity(terms.len());
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, op, raw)) = split_term(term) else {
                return Err(Error::Unparseable {
                    selector: selector.to_string(),
                    term: term.to_string(),
                });
            };
            requirements.push(Requirement {
                field: field.to_string(),
                op,
                value: unescape_value(raw)?,
            });
        }
        Ok(Self { requirements })
    }

    /// The requirements, in parse order.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether an object satisfies every requirement; `get` returns a field's value, and a field
    /// the object lacks compares as the empty string (as upstream's `fields.Set`).
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(get(&r.field).unwrap_or("")))
    }

    /// Whether this selector restricts nothing.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value `field` must equal, if some term is `field=value` (the first such term, as
    /// upstream's `RequiresExactMatch`). Lets a watch on `spec.nodeName=n1` be served from an
    /// index rather than by filtering every event.
    pub fn single_equality(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.op == Op::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }
}

/// Upstream's canonical string: terms joined by `,`, values escaped.
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

/// Escapes a literal value for a field selector: `\` becomes `\\`, `,` becomes `\,` and `=`
/// becomes `\=` (upstream's `EscapeValue`).
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Undoes [`escape_value`]; an unknown escape, a trailing `\`, or an unescaped `,` or `=` is an
/// error (upstream's `UnescapeValue`).
pub fn unescape_value(value: &str) -> Result<String> {
    if !value.contains(['\\', ',', '=']) {
        return Ok(value.to_string());
    }
    let mut out = String::with_capacity(value.len());
    let mut in_slash = false;
    for c in value.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(Error::InvalidEscape(format!("\\{c}")));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(Error::UnescapedRune(c)),
            c => out.push(c),
        }
    }
    if in_slash {
        return Err(Error::InvalidEscape("\\".to_string()));
    }
    Ok(out)
}

/// The comma-separated terms; an escaped comma stays in its term, backslash included.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits a term at its first operator; `!=` and `==` are tried before `=` at each position. The
/// field is not unescaped (upstream supports no escaping on the left).
fn split_term(term: &str) -> Option<(&str, Op, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (token, op) in [("!=", Op::NotEquals), ("==", Op::Equals), ("=", Op::Equals)] {
            if let Some(value) = rest.strip_prefix(token) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(pairs: &'a [(&str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        |f: &str| pairs.iter().find(|(k, _)| *k == f).map(|(_, v)| *v)
    }

    fn eq(field: &str, value: &str) -> Requirement {
        Requirement {
            field: field.into(),
            op: Op::Equals,
            value: value.into(),
        }
    }

    fn ne(field: &str, value: &str) -> Requirement {
        Requirement {
            field: field.into(),
            op: Op::NotEquals,
            value: value.into(),
        }
    }

    #[test]
    fn good_selectors_parse_and_print_canonically() {
        let cases = [
            ("", ""),
            ("a=b", "a=b"),
            ("a==b", "a=b"),
            ("a!=b", "a!=b"),
            ("x=a,y=b,z=c", "x=a,y=b,z=c"),
            ("z=c,y=b,x=a", "x=a,y=b,z=c"),
            ("x!=a,y=b", "x!=a,y=b"),
            ("x=", "x="),
            ("x=,z=", "x=,z="),
            (",a=b,,", "a=b"),
            ("spec.nodeName=n1", "spec.nodeName=n1"),
            ("metadata.name=a\\,b", "metadata.name=a\\,b"),
            ("a=\\=\\\\", "a=\\=\\\\"),
            ("a=b c", "a=b c"),
            ("=b", "=b"),
        ];
        for (input, want) in cases {
            let sel = Selector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.to_string(), want, "{input:?}");
        }
    }

    #[test]
    fn selectors_parse_into_upstreams_requirements() {
        let cases = [
            ("x=a", vec![eq("x", "a")]),
            ("x==a", vec![eq("x", "a")]),
            ("x!=a", vec![ne("x", "a")]),
            ("x=a!b", vec![eq("x", "a!b")]),
            ("x=!a", vec![eq("x", "!a")]),
            ("x=\\,y,a=b", vec![eq("a", "b"), eq("x", ",y")]),
            ("x==\\=", vec![eq("x", "=")]),
            ("a=1,a=1", vec![eq("a", "1"), eq("a", "1")]),
        ];
        for (input, want) in cases {
            let sel = Selector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.requirements(), want.as_slice(), "{input:?}");
        }
    }

    #[test]
    fn bad_selectors_get_upstreams_messages() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a=b\\,c,d=e,f",
                "invalid selector: 'a=b\\,c,d=e,f'; can't understand 'f'",
            ),
            (
                "x!=a==b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a=b\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
            (
                "a=b\\n",
                "invalid field selector: invalid escape sequence: \\n",
            ),
            (
                "x\\=y=z",
                "invalid field selector: unescaped character in value: 61",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                Selector::parse(input).unwrap_err().to_string(),
                want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn escaping_round_trips_upstreams_examples() {
        let cases = [
            ("", ""),
            ("a", "a"),
            ("=", "\\="),
            (",", "\\,"),
            ("\\", "\\\\"),
            ("\\=\\,\\", "\\\\\\=\\\\\\,\\\\"),
        ];
        for (raw, escaped) in cases {
            assert_eq!(escape_value(raw), escaped);
            assert_eq!(unescape_value(escaped).unwrap(), raw);
        }
        let bad = [
            ("\\", Error::InvalidEscape("\\".into())),
            ("\\\\\\", Error::InvalidEscape("\\".into())),
            ("\\a", Error::InvalidEscape("\\a".into())),
            ("=", Error::UnescapedRune('=')),
            (",", Error::UnescapedRune(',')),
            ("a\\,=", Error::UnescapedRune('=')),
        ];
        for (input, want) in bad {
            assert_eq!(unescape_value(input).unwrap_err(), want, "{input:?}");
        }
    }

    #[test]
    fn a_missing_field_compares_as_the_empty_string() {
        let obj = fields(&[("spec.nodeName", "n1"), ("status.phase", "Running")]);
        let cases = [
            ("", true),
            ("spec.nodeName=n1", true),
            ("spec.nodeName==n1", true),
            ("spec.nodeName=n2", false),
            ("spec.nodeName!=n2", true),
            ("spec.nodeName=n1,status.phase!=Running", false),
            ("spec.nodeName=n1,status.phase!=Pending", true),
            ("metadata.namespace=", true),
            ("metadata.namespace!=", false),
            ("metadata.namespace=x", false),
            ("metadata.namespace!=x", true),
        ];
        for (input, want) in cases {
            assert_eq!(
                Selector::parse(input).unwrap().matches(&obj),
                want,
                "{input:?}"
            );
        }
    }

    #[test]
    fn single_equality_finds_the_pinned_value_of_a_field() {
        let sel = Selector::parse("spec.nodeName=n1,status.phase!=Running").unwrap();
        assert_eq!(sel.single_equality("spec.nodeName"), Some("n1"));
        assert_eq!(sel.single_equality("status.phase"), None);
        assert_eq!(sel.single_equality("metadata.name"), None);
        assert_eq!(
            Selector::parse("spec.nodeName==")
                .unwrap()
                .single_equality("spec.nodeName"),
            Some("")
        );
        assert_eq!(
            Selector::one_term_equal("metadata.name", "a,b").to_string(),
            "metadata.name=a\\,b"
        );
        assert!(Selector::everything().is_empty());
        assert!(!Selector::parse("a=b").unwrap().is_empty());
        assert!(Selector::parse(",,").unwrap().is_empty());
    }

    /// xorshift64*: a deterministic generator, so the property test needs no dependency.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
        }
    }

    #[test]
    fn parsing_the_canonical_string_gives_back_the_same_selector() {
        let fields = [
            "a",
            "spec.nodeName",
            "metadata.name",
            "status.phase",
            "x.y.z",
        ];
        let alphabet = ['a', 'b', '1', ' ', ',', '=', '\\', '!', 'é', '.', '-'];
        let mut rng = Rng(0x5eed_f1e1_d500_0001);
        for _ in 0..2000 {
            let mut reqs: Vec<Requirement> = (0..rng.below(5))
                .map(|_| Requirement {
                    field: fields[rng.below(fields.len())].to_string(),
                    op: if rng.below(2) == 0 {
                        Op::Equals
                    } else {
                        Op::NotEquals
                    },
                    value: (0..rng.below(6))
                        .map(|_| alphabet[rng.below(alphabet.len())])
                        .collect(),
                })
                .collect();
            // Parsing sorts the raw terms, so a canonical selector has them in that order.
            reqs.sort_by_key(|r| r.to_string());
            let sel = Selector::from_requirements(reqs);
            let text = sel.to_string();
            let reparsed = Selector::parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(reparsed, sel, "{text:?}");
            assert_eq!(reparsed.to_string(), text);
        }
    }
}
