//! Go-compatible rendering of values inside error messages: `%q` string quoting, `%v` of numbers,
//! and `encoding/json` output, so that messages read byte for byte as the Kubernetes API server's.

use serde_json::Value;
use std::fmt::Write as _;

/// Quotes `s` as Go's `strconv.Quote` (and so `fmt`'s `%q`) does: double quotes, backslash
/// escapes for `"` and `\`, C escapes for control characters, `\u`/`\U` for other
/// non-printable characters.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0b}' => out.push_str("\\v"),
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols
/// and the ASCII space. Control, format, private-use and non-ASCII space characters are not.
pub(crate) fn is_go_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let u = c as u32;
    let format = matches!(
        u,
        0xad | 0x600..=0x605
            | 0x61c
            | 0x6dd
            | 0x70f
            | 0x180e
            | 0x200b..=0x200f
            | 0x202a..=0x202e
            | 0x2060..=0x2064
            | 0x2066..=0x206f
            | 0xfeff
            | 0xfff9..=0xfffb
    );
    let private_or_non_char = matches!(u, 0xe000..=0xf8ff | 0xf0000.. ) || (u & 0xfffe) == 0xfffe;
    !format && !private_or_non_char
}

/// Renders a number as Go's `%v` does for the `int64` or `float64` it would decode into.
pub fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or_default();
    float(f, Exp::Fmt)
}

/// Renders a `float64` as Go's `%v` does.
pub fn float64(f: f64) -> String {
    float(f, Exp::Fmt)
}

/// Which Go formatter's rule decides between plain and exponent notation.
#[derive(Clone, Copy)]
enum Exp {
    /// `fmt`'s `%v` (`%g`, shortest): exponent when the decimal exponent is below -4 or at least 6.
    Fmt,
    /// `encoding/json`: exponent when the magnitude is below 1e-6 or at least 1e21.
    Json,
}

fn float(f: f64, rule: Exp) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, like Go's precision -1.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let use_exp = match rule {
        Exp::Fmt => !(-4..6).contains(&exp),
        Exp::Json => {
            let abs = f.abs();
            !(1e-6..1e21).contains(&abs)
        }
    };
    if !use_exp {
        return format!("{f}");
    }
    let sign = if exp < 0 { '-' } else { '+' };
    match rule {
        Exp::Fmt => format!("{mantissa}e{sign}{:02}", exp.abs()),
        Exp::Json => format!("{mantissa}e{sign}{}", exp.abs()),
    }
}

/// Serializes `v` as Go's `json.Marshal` would: compact, object keys sorted, `<`, `>`, `&`,
/// U+2028 and U+2029 escaped.
pub(crate) fn json(v: &Value) -> String {
    let mut out = String::new();
    write_json(&mut out, v);
    out
}

fn write_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else {
                out.push_str(&float(n.as_f64().unwrap_or_default(), Exp::Json));
            }
        }
        Value::String(s) => write_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, k);
                out.push(':');
                write_json(out, &map[k]);
            }
            out.push('}');
        }
    }
}

fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quoting_escapes_as_go_strconv_quote_does() {
        let cases = [
            ("Foo", r#""Foo""#),
            ("a\"b", r#""a\"b""#),
            ("back\\slash", r#""back\\slash""#),
            ("tab\there", r#""tab\there""#),
            ("nul\u{0}", r#""nul\x00""#),
            ("del\u{7f}", r#""del\x7f""#),
            ("héllo", "\"héllo\""),
            ("zw\u{200b}sp", r#""zw\u200bsp""#),
            ("nbsp\u{a0}", r#""nbsp\u00a0""#),
        ];
        for (input, want) in cases {
            assert_eq!(quote(input), want, "quote({input:?})");
        }
    }

    #[test]
    fn numbers_render_as_go_percent_v() {
        let cases = [
            (json!(5), "5"),
            (json!(-3), "-3"),
            (json!(1.5), "1.5"),
            (json!(100000.0), "100000"),
            (json!(1e6), "1e+06"),
            (json!(1234567.0), "1.234567e+06"),
            (json!(0.0001), "0.0001"),
            (json!(0.00001), "1e-05"),
            (json!(1e20), "1e+20"),
        ];
        for (v, want) in cases {
            let Value::Number(n) = &v else { unreachable!() };
            assert_eq!(number(n), want, "number({v})");
        }
    }

    #[test]
    fn json_marshals_as_go_encoding_json_does() {
        assert_eq!(json(&json!(["a", "b"])), r#"["a","b"]"#);
        assert_eq!(json(&json!(null)), "null");
        assert_eq!(
            json(&json!({"b": 1, "a": "<x&y>"})),
            r#"{"a":"\u003cx\u0026y\u003e","b":1}"#
        );
        assert_eq!(json(&json!(1e21)), "1e+21");
        assert_eq!(json(&json!(1e-7)), "1e-7");
        assert_eq!(json(&json!(0.5)), "0.5");
    }
}
