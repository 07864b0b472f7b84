//! Upstream's lexer and recursive-descent parser for the string form of a label selector, with
//! its exact error texts (`found ',', expected: identifier after ','`). Whitespace separates
//! tokens; `in` and `notin` are operators after a key and plain values inside a value list.

use super::{Error, Operator, Requirement, Result};
use crate::validation::{ErrorType, FieldError, is_qualified_name};
use serde_json::Value;
use std::collections::BTreeSet;

/// A token of the selector string (upstream's `Token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &[u8]) -> Option<Tok> {
    Some(match s {
        b")" => Tok::ClosedPar,
        b"," => Tok::Comma,
        b"!" => Tok::DoesNotExist,
        b"==" => Tok::DoubleEquals,
        b"=" => Tok::Equals,
        b">" => Tok::GreaterThan,
        b"in" => Tok::In,
        b"<" => Tok::LessThan,
        b"!=" => Tok::NotEquals,
        b"notin" => Tok::NotIn,
        b"(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Upstream's lexer over the bytes of the selector. A NUL byte reads like the end of input, as
/// upstream's `read` returns 0 for both.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos -= 1;
    }

    fn lex(&mut self) -> (Tok, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Tok::EndOfString, String::new());
        }
        self.unread();
        if is_special(ch) {
            self.scan_special()
        } else {
            self.scan_identifier_or_keyword()
        }
    }

    fn scan_identifier_or_keyword(&mut self) -> (Tok, String) {
        let mut buf = Vec::new();
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
        }
        let tok = keyword(&buf).unwrap_or(Tok::Identifier);
        (tok, String::from_utf8_lossy(&buf).into_owned())
    }

    /// The longest operator made of special symbols (`!=` over `!`, `==` over `=`).
    fn scan_special(&mut self) -> (Tok, String) {
        let mut buf = Vec::new();
        let mut last: Option<(Tok, usize)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special(ch) {
                self.unread();
                break;
            }
            buf.push(ch);
            if let Some(tok) = keyword(&buf) {
                last = Some((tok, buf.len()));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((tok, len)) => (tok, String::from_utf8_lossy(&buf[..len]).into_owned()),
            None => (
                Tok::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buf)
                ),
            ),
        }
    }
}

/// Whether `in`/`notin` are operators here or plain values (`value in (in)`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

/// Upstream's recursive-descent parser over the scanned tokens.
pub(super) struct Parser {
    items: Vec<(Tok, String)>,
    position: usize,
}

impl Parser {
    pub(super) fn new(selector: &str) -> Self {
        let mut lexer = Lexer {
            s: selector.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Tok::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Self { items, position: 0 }
    }

    fn item(&self, at: usize, context: Context) -> (Tok, String) {
        let (tok, lit) = self
            .items
            .get(at)
            .cloned()
            .unwrap_or((Tok::EndOfString, String::new()));
        match (context, tok) {
            (Context::Values, Tok::In | Tok::NotIn) => (Tok::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn lookahead(&self, context: Context) -> (Tok, String) {
        self.item(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Tok, String) {
        self.position += 1;
        self.item(self.position - 1, context)
    }

    pub(super) fn parse(&mut self) -> Result<Vec<Requirement>> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| Error::Requirement(Box::new(e)))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Tok::EndOfString => return Ok(requirements),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(syntax(format!(
                                    "found '{l2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(syntax(format!(
                                "found '{l}', expected: ',' or 'end of string'"
                            )));
                        }
                    }
                }
                Tok::EndOfString => return Ok(requirements),
                _ => {
                    return Err(syntax(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = inferred {
            return Requirement::new(key, op, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(key, operator, values.into_iter().collect())
    }

    /// The key, and `Exists`/`DoesNotExist` when no binary operator follows it.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>)> {
        let mut operator = None;
        let (mut tok, mut lit) = self.consume(Context::Values);
        if tok == Tok::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Context::Values);
        }
        if tok != Tok::Identifier {
            return Err(syntax(format!("found '{lit}', expected: identifier")));
        }
        let key_errs = is_qualified_name(&lit);
        if !key_errs.is_empty() {
            // Upstream parses without a field path, and a nil path prints as `<nil>`.
            return Err(Error::Invalid(vec![FieldError {
                kind: ErrorType::Invalid,
                field: "<nil>".to_string(),
                bad_value: Some(Value::from(lit.as_str())),
                detail: key_errs.join("; "),
            }]));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Tok::EndOfString | Tok::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((lit, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(syntax(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                )));
            }
        })
    }

    /// `( v1, v2, … )`; `()` is the one empty value.
    fn parse_values(&mut self) -> Result<BTreeSet<String>> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Tok::OpenPar {
            return Err(syntax(format!("found '{lit}' expected: '('")));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let values = self.parse_identifiers_list()?;
                let (close, _) = self.consume(Context::Values);
                if close != Tok::ClosedPar {
                    return Err(syntax(format!("found '{lit}', expected: ')'")));
                }
                Ok(values)
            }
            Tok::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(syntax(format!(
                "found '{lit}', expected: ',', ')' or identifier"
            ))),
        }
    }

    /// A comma-separated list in which any value may be empty (`(,a)`, `(a,)`, `(a,,b)`).
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>> {
        let mut values = BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Tok::Identifier => {
                    values.insert(lit);
                    let (next, next_lit) = self.lookahead(Context::Values);
                    match next {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(values),
                        _ => {
                            return Err(syntax(format!(
                                "found '{next_lit}', expected: ',' or ')'"
                            )));
                        }
                    }
                }
                Tok::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Tok::ClosedPar {
                        values.insert(String::new());
                        return Ok(values);
                    }
                    if next == Tok::Comma {
                        self.consume(Context::Values);
                        values.insert(String::new());
                    }
                }
                _ => {
                    return Err(syntax(format!(
                        "found '{lit}', expected: ',', or identifier"
                    )));
                }
            }
        }
    }

    /// The single value after `=`, `==`, `!=`, `>` or `<`; nothing means the empty value.
    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>> {
        let (tok, _) = self.lookahead(Context::Values);
        if matches!(tok, Tok::EndOfString | Tok::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Tok::Identifier {
            Ok(BTreeSet::from([lit]))
        } else {
            Err(syntax(format!("found '{lit}', expected: identifier")))
        }
    }
}

fn syntax(message: String) -> Error {
    Error::Syntax(message)
}
