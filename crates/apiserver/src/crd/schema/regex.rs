//! Go's regular expressions for `pattern`, CEL's `matches()` and the string formats, on the
//! `regex` crate, whose syntax is RE2's as Go's `regexp` is. Two Go rules are kept on top:
//! the Perl classes (`\d`, `\w`, `\s`, `\b` and their negations) are ASCII, and a pattern that
//! does not compile fails with Go's `error parsing regexp: ` before the crate's reason.

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct Regex(regex::Regex);

impl Regex {
    /// Compiles `pattern`; `Err` is `error parsing regexp: <reason>: `<pattern>``.
    pub fn new(pattern: &str) -> Result<Regex, String> {
        regex::Regex::new(&translate(pattern))
            .map(Regex)
            .map_err(|e| {
                let reason = match &e {
                    // The crate's syntax errors draw the pattern with a caret; the reason is
                    // the line after `error: `.
                    regex::Error::Syntax(text) => text
                        .lines()
                        .find_map(|l| l.strip_prefix("error: "))
                        .unwrap_or(text)
                        .to_string(),
                    regex::Error::CompiledTooBig(_) => "expression too large".to_string(),
                    other => other.to_string(),
                };
                format!("error parsing regexp: {reason}: `{pattern}`")
            })
    }

    /// Whether `text` contains a match (Go's `MatchString`).
    pub fn is_match(&self, text: &str) -> bool {
        self.0.is_match(text)
    }
}

/// `pattern` in the crate's dialect: Perl classes made ASCII, as Go's are (the crate's are
/// Unicode): outside a bracket class `\d` becomes `[0-9]` and `\D` `[^0-9]`, inside one `\d`
/// becomes `0-9`; `\b` and `\B` take the crate's ASCII word boundary; `\Q…\E` (which the crate
/// lacks) becomes escaped literals; `[`, `&` and `~` in a class, and a `{` that is no repeat
/// count, are literals, as in Go.
fn translate(pattern: &str) -> String {
    const CLASSES: &[(char, &str)] = &[('d', "0-9"), ('w', "0-9A-Za-z_"), ('s', "\\t\\n\\f\\r ")];
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '\\' && chars.peek() == Some(&'E') {
                chars.next();
                quoted = false;
            } else {
                out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
            }
            continue;
        }
        match c {
            '\\' => {
                let Some(next) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let lower = next.to_ascii_lowercase();
                match CLASSES.iter().find(|(k, _)| *k == lower) {
                    Some((_, set)) if in_class && next == lower => out.push_str(set),
                    Some((_, set)) if !in_class => {
                        let negate = if next == lower { "" } else { "^" };
                        out.push_str(&format!("[{negate}{set}]"));
                    }
                    _ if !in_class && lower == 'b' => out.push_str(&format!("(?-u:\\{next})")),
                    _ if next == 'Q' => quoted = true,
                    _ => {
                        out.push('\\');
                        out.push(next);
                        // `\p{Greek}`, `\x{263a}`: the braces belong to the escape.
                        if matches!(next, 'p' | 'P' | 'x') && chars.peek() == Some(&'{') {
                            for c in chars.by_ref() {
                                out.push(c);
                                if c == '}' {
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A `]` (after an optional `^`) right after `[` is a literal.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            '[' if in_class && chars.peek() == Some(&':') => {
                // `[:alpha:]` inside a class.
                out.push('[');
                for c in chars.by_ref() {
                    out.push(c);
                    if c == ']' {
                        break;
                    }
                }
            }
            // Go reads these literally in a class; the crate nests classes and has set
            // operators (`&&`, `~~`).
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            // A `{` that does not open `{n}`, `{n,}` or `{n,m}` is a literal in Go.
            '{' if !in_class && !opens_repeat(chars.clone()) => out.push_str("\\{"),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether the text after a `{` is a repeat count and its `}`.
fn opens_repeat(after: impl Iterator<Item = char>) -> bool {
    let body: String = after.take_while(|c| *c != '}').collect();
    let (min, max) = body.split_once(',').unwrap_or((&body, "0"));
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    !min.is_empty() && digits(min) && digits(max) && body.len() < 32
}
