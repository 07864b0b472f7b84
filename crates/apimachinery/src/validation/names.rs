//! Upstream's string format checks (`k8s.io/apimachinery/pkg/util/validation`): DNS names, label
//! keys and values, C identifiers, environment variable names, ports and IPs. Each returns the
//! list of problems, worded as upstream words them; an empty list means valid.
//!
//! The formats are matched by hand rather than with a regex engine; the regex each message quotes
//! is the one upstream validates with, and the checks here accept exactly the same strings.

/// Longest DNS-1123 label (RFC 1123): 63 bytes.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain (RFC 1123): 253 bytes.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest DNS-1035 label: 63 bytes.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;
/// Longest label value, and longest name part of a qualified name: 63 bytes.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
const QUALIFIED_NAME_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const C_IDENTIFIER_FMT: &str = "[A-Za-z_][A-Za-z0-9_]*";
const C_IDENTIFIER_ERR: &str = "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'";
const ENV_VAR_NAME_FMT: &str = "[-._a-zA-Z][-._a-zA-Z0-9]*";
const ENV_VAR_NAME_ERR: &str = "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_ERR: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// Upstream's `MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// Upstream's `RegexError`: the message, the examples, then the regex used for validation.
pub fn regex_error(msg: &str, regex: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{regex}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(example);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(regex);
    out.push_str("')");
    out
}

/// Upstream's `EmptyError`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

/// Upstream's `InclusiveRangeError`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// `[A-Za-z0-9]` at both ends, `[-A-Za-z0-9_.]` between.
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Tests for a DNS label as RFC 1123 defines it (a namespace name, for example).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain that is not a label can only be wrong for its dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Tests for a DNS subdomain as RFC 1123 defines it (most object names).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Tests for a DNS label as RFC 1035 defines it (a service name, for example).
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    let b = value.as_bytes();
    let ok = matches_dns1123_label(value) && b[0].is_ascii_lowercase();
    if !ok {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Tests for what Kubernetes calls a qualified name: a label or annotation key, an optional DNS
/// subdomain prefix and `/`, then a name of up to 63 characters.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Tests for a valid label value: empty, or up to 63 characters of the qualified-name alphabet.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Tests for an identifier as C defines it (format only, not length).
pub fn is_c_identifier(value: &str) -> Vec<String> {
    let b = value.as_bytes();
    let ok = b
        .first()
        .is_some_and(|&c| c.is_ascii_alphabetic() || c == b'_')
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_');
    if ok {
        Vec::new()
    } else {
        vec![regex_error(
            C_IDENTIFIER_ERR,
            C_IDENTIFIER_FMT,
            &["my_name", "MY_NAME", "MyName"],
        )]
    }
}

fn has_chdir_prefix(value: &str) -> Option<String> {
    match value {
        "." => Some("must not be '.'".into()),
        ".." => Some("must not be '..'".into()),
        v if v.starts_with("..") => Some("must not start with '..'".into()),
        _ => None,
    }
}

/// Tests for a valid environment variable name (the strict rule, without the
/// `RelaxedEnvironmentVariableValidation` feature).
pub fn is_env_var_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let is_name_char = |c: u8| c.is_ascii_alphabetic() || matches!(c, b'-' | b'.' | b'_');
    let b = value.as_bytes();
    let ok = b.first().is_some_and(|&c| is_name_char(c))
        && b.iter().all(|&c| is_name_char(c) || c.is_ascii_digit());
    if !ok {
        errs.push(regex_error(
            ENV_VAR_NAME_ERR,
            ENV_VAR_NAME_FMT,
            &["my.env-name", "MY_ENV.NAME", "MyEnvName1"],
        ));
    }
    errs.extend(has_chdir_prefix(value));
    errs
}

/// Tests for a valid key of a ConfigMap or Secret.
pub fn is_config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !ok {
        errs.push(regex_error(
            CONFIG_MAP_KEY_ERR,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    errs.extend(has_chdir_prefix(value));
    errs
}

/// Tests for a valid, non-zero port number.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

/// Tests for a valid port name (IANA_SVC_NAME): at most 15 characters of `[-a-z0-9]`, at least
/// one letter, no leading, trailing or doubled hyphen.
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if port.is_empty()
        || !port
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// Tests for a valid IP address, accepting what upstream's `ParseIPSloppy` accepts: IPv4 octets
/// may carry leading zeros (read as decimal), IPv6 may embed a dotted IPv4 tail.
pub fn is_valid_ip(value: &str) -> Vec<String> {
    if parse_ip_sloppy(value).is_some() {
        Vec::new()
    } else {
        vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".to_string()]
    }
}

/// Parses an IP address as `k8s.io/utils/net.ParseIPSloppy` does.
pub fn parse_ip_sloppy(value: &str) -> Option<std::net::IpAddr> {
    if let Some(v4) = parse_ipv4_sloppy(value) {
        return Some(v4.into());
    }
    if value.contains(':') {
        if let Ok(v6) = value.parse::<std::net::Ipv6Addr>() {
            return Some(v6.into());
        }
        // An embedded IPv4 tail with leading zeros: normalize the tail and retry.
        let (head, tail) = value.rsplit_once(':')?;
        let v4 = parse_ipv4_sloppy(tail)?;
        return format!("{head}:{v4}")
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(Into::into);
    }
    None
}

fn parse_ipv4_sloppy(value: &str) -> Option<std::net::Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut parts = value.split('.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let trimmed = part.trim_start_matches('0');
        if trimmed.len() > 3 {
            return None;
        }
        let n: u32 = if trimmed.is_empty() {
            0
        } else {
            trimmed.parse().ok()?
        };
        *octet = u8::try_from(n).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(std::net::Ipv4Addr::from(octets))
}

/// Upstream's `ValidatePathSegmentName`: any name that can be one URL path segment (RBAC
/// names such as `system:controller:…`).
pub fn is_path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    #[test]
    fn dns1123_labels_accept_upstream_good_examples_and_reject_bad_ones() {
        let good = [
            "a",
            "ab",
            "abc",
            "a1",
            "a-1",
            "a--1--2--b",
            "0",
            "01",
            "012",
            "1a",
            "1-a",
            "1--a--b--2",
            &"a".repeat(63),
        ];
        for v in good {
            assert!(is_dns1123_label(v).is_empty(), "{v} should be a label");
        }
        let bad = [
            "",
            "A",
            "ABC",
            "aBc",
            "A1",
            "A-1",
            "1-A",
            "-",
            "a-",
            "-a",
            "1-",
            "-1",
            "_",
            "a_",
            "_a",
            "a_b",
            "1_",
            "_1",
            "1_2",
            ".",
            "a.",
            ".a",
            "a.b",
            "1.",
            ".1",
            "1.2",
            " ",
            "a ",
            " a",
            "a b",
            "1 ",
            " 1",
            "1 2",
            &"a".repeat(64),
        ];
        for v in bad {
            assert!(
                !is_dns1123_label(v).is_empty(),
                "{v:?} should not be a label"
            );
        }
    }

    #[test]
    fn a_dns1123_label_with_dots_is_told_only_about_the_dots() {
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(is_dns1123_label("Foo"), vec![LABEL_MSG]);
        assert_eq!(
            is_dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn dns1123_subdomains_accept_upstream_good_examples_and_reject_bad_ones() {
        let good = [
            "a",
            "ab",
            "a1",
            "a-1",
            "a--1--2--b",
            "0",
            "1a",
            "a.a",
            "ab.a",
            "a1.a",
            "a-1.a",
            "0.a",
            "a.0",
            "1-a.a",
            "a.b.c.d.e",
            "aa.bb.cc.dd.ee",
            "1.2.3.4.5",
            "11.22.33.44.55",
            &"a".repeat(253),
        ];
        for v in good {
            assert!(
                is_dns1123_subdomain(v).is_empty(),
                "{v} should be a subdomain"
            );
        }
        let bad = [
            "",
            "A",
            "aBc",
            "-",
            "a-",
            "-a",
            "_",
            "a_b",
            ".",
            "a.",
            ".a",
            "a..b",
            "a.-a",
            "a-.a",
            " ",
            "a b",
            "1 2",
            &"a".repeat(254),
        ];
        for v in bad {
            assert!(
                !is_dns1123_subdomain(v).is_empty(),
                "{v:?} should not be a subdomain"
            );
        }
    }

    #[test]
    fn an_uppercase_name_gets_upstreams_subdomain_message() {
        assert_eq!(is_dns1123_subdomain("Foo"), vec![SUBDOMAIN_MSG]);
        let long = "a".repeat(254);
        assert_eq!(
            is_dns1123_subdomain(&long),
            vec!["must be no more than 253 characters".to_string()]
        );
    }

    #[test]
    fn dns1035_labels_must_start_with_a_letter() {
        for v in ["a", "ab", "a-1", "a--1--2--b", &"a".repeat(63)] {
            assert!(is_dns1035_label(v).is_empty(), "{v}");
        }
        for v in [
            "",
            "0",
            "1a",
            "A",
            "a-",
            "-a",
            "a.b",
            "a_b",
            &"a".repeat(64),
        ] {
            assert!(!is_dns1035_label(v).is_empty(), "{v:?}");
        }
        assert_eq!(
            is_dns1035_label("1a"),
            vec![
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
    }

    #[test]
    fn qualified_names_accept_upstream_good_examples() {
        let good = [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "1234",
            "simple/simple",
            "now-with-dashes/simple",
            "now-with-dashes/now-with-dashes",
            "now.with.dots/simple",
            "now-with.dashes-and.dots/simple",
            "1-num.2-num/3-num",
            "1234/5678",
            "1.2.3.4/5678",
            "Uppercase_Is_OK_123",
            "example.com/Uppercase_Is_OK_123",
            "requests.storage-foo",
            &"a".repeat(63),
            &format!("{}/b", "a".repeat(253)),
        ];
        for v in good {
            assert!(
                is_qualified_name(v).is_empty(),
                "{v} should be qualified: {:?}",
                is_qualified_name(v)
            );
        }
    }

    #[test]
    fn qualified_names_reject_upstream_bad_examples() {
        let bad = [
            "nospecialchars%^=@",
            "cantendwithadash-",
            "-cantstartwithadash-",
            "only/one/slash",
            "Example.com/abc",
            "example_com/abc",
            "example.com/",
            "/simple",
            &"a".repeat(64),
            &format!("{}/b", "a".repeat(254)),
        ];
        for v in bad {
            assert!(
                !is_qualified_name(v).is_empty(),
                "{v} should not be qualified"
            );
        }
    }

    #[test]
    fn qualified_name_messages_name_the_part_that_is_wrong() {
        assert_eq!(is_qualified_name("a b"), vec![NAME_PART_MSG]);
        assert_eq!(
            is_qualified_name("/a"),
            vec!["prefix part must be non-empty"]
        );
        assert_eq!(
            is_qualified_name("a/"),
            vec![
                "name part must be non-empty".to_string(),
                NAME_PART_MSG.to_string()
            ]
        );
        assert_eq!(
            is_qualified_name("Example.com/a"),
            vec![format!("prefix part {SUBDOMAIN_MSG}")]
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
        assert_eq!(
            is_qualified_name("a/b/c"),
            vec![
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ]
        );
    }

    #[test]
    fn label_values_may_be_empty_but_not_malformed() {
        for v in [
            "",
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "end-with-num-1",
            "1234",
            "A.B_C-d",
            &"a".repeat(63),
        ] {
            assert!(is_valid_label_value(v).is_empty(), "{v}");
        }
        for v in [
            "nospecialchars%^=@",
            "Tama-nui-te-rā.is.Māori.sun",
            "\\backslashes\\are\\bad",
            "-starts-with-dash",
            "ends-with-dash-",
            ".starts.with.dot",
            "ends.with.dot.",
            &"a".repeat(64),
        ] {
            assert!(!is_valid_label_value(v).is_empty(), "{v}");
        }
        assert_eq!(is_valid_label_value("b c"), vec![VALUE_MSG]);
        assert_eq!(
            is_valid_label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn c_identifiers_and_env_var_names_follow_upstream_rules() {
        for v in [
            "A",
            "AB",
            "AbC",
            "A1",
            "_A",
            "A_",
            "A_B",
            "A_1",
            "A__1__2__B",
            "__123_ABC",
        ] {
            assert!(is_c_identifier(v).is_empty(), "{v}");
        }
        for v in [
            "", "1", "123", "1A", "A ", " A", "A 1", "A-1", "A.1", "?", "?A",
        ] {
            assert!(!is_c_identifier(v).is_empty(), "{v:?}");
        }
        for v in [
            "A",
            "AB",
            "a.b",
            "my.env-name",
            "MY_ENV.NAME",
            "MyEnvName1",
            "-a",
            ".a",
            "_a",
        ] {
            assert!(is_env_var_name(v).is_empty(), "{v}");
        }
        assert!(!is_env_var_name("1A").is_empty());
        assert_eq!(is_env_var_name("."), vec!["must not be '.'"]);
        assert_eq!(is_env_var_name("..a"), vec!["must not start with '..'"]);
        assert!(is_config_map_key("key.name").is_empty());
        assert_eq!(is_config_map_key(".."), vec!["must not be '..'"]);
    }

    #[test]
    fn ports_must_be_in_range_and_port_names_well_formed() {
        for p in [1, 2, 1000, 16384, 32768, 65535] {
            assert!(is_valid_port_num(p).is_empty(), "{p}");
        }
        for p in [0, -1, 65536, 100000] {
            assert_eq!(
                is_valid_port_num(p),
                vec!["must be between 1 and 65535, inclusive"]
            );
        }
        for n in [
            "telnet",
            "re-mail-ck",
            "pop3",
            "a",
            "a-1",
            "1-a",
            "a-1-b-2-c",
            "1-a-2-b-3",
        ] {
            assert!(is_valid_port_name(n).is_empty(), "{n}");
        }
        assert_eq!(
            is_valid_port_name("12345"),
            vec!["must contain at least one letter (a-z)"]
        );
        assert_eq!(
            is_valid_port_name("a--b"),
            vec!["must not contain consecutive hyphens"]
        );
        assert_eq!(
            is_valid_port_name("-a"),
            vec!["must not begin or end with a hyphen"]
        );
        assert_eq!(
            is_valid_port_name("abcdefghijklmnop"),
            vec!["must be no more than 15 characters"]
        );
    }

    #[test]
    fn ips_are_parsed_as_sloppily_as_upstream_parses_them() {
        for ip in [
            "1.2.3.4",
            "255.255.255.255",
            "0.0.0.0",
            "010.001.002.003",
            "::",
            "::1",
            "2001:db8::ffff",
            "::ffff:1.2.3.4",
            "::ffff:010.2.3.4",
            "1:2:3:4:5:6:7:8",
        ] {
            assert!(is_valid_ip(ip).is_empty(), "{ip}");
        }
        for ip in [
            "",
            "1.2.3",
            "1.2.3.4.5",
            "256.1.1.1",
            "1.2.3.-4",
            "a.b.c.d",
            "1.2.3.4/24",
            "::1%eth0",
            ":::",
            "1:2:3:4:5:6:7:8:9",
            " 1.2.3.4",
        ] {
            assert_eq!(
                is_valid_ip(ip),
                vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"],
                "{ip:?}"
            );
        }
        assert_eq!(
            parse_ip_sloppy("010.001.002.003"),
            Some("10.1.2.3".parse().unwrap())
        );
    }
}
