//! The string formats custom resources are checked against: kube-openapi's `strfmt` default
//! registry as apiextensions keeps it (`StripUnsupportedFormatsPostProcess`), by upstream's
//! normalized names (dashes dropped, so `date-time` is `datetime`). Other formats are not
//! checked; `integer` and `number` formats (`int32`, `double`, …) only matter to the type check.

use std::sync::LazyLock;

use skiff_apimachinery::quantity::Quantity;
use skiff_apimachinery::validation::{is_dns1123_label, is_dns1123_subdomain, parse_ip_sloppy};

use super::regex::Regex;

/// The string formats upstream validates, normalized.
const STRING_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "quantity",
    "k8sshortname",
    "k8slongname",
];

/// The format kube-openapi checks for a schema of `type_name` declaring `format`: the format
/// itself when upstream keeps it, `""` when it strips it.
pub(super) fn effective<'a>(type_name: &str, int_or_string: bool, format: &'a str) -> &'a str {
    let kept = match (type_name, int_or_string) {
        (_, true) | ("" | "string", false) => STRING_FORMATS.contains(&normalize(format).as_str()),
        ("integer", false) => matches!(format, "int32" | "int64"),
        ("number", false) => matches!(format, "float" | "double"),
        _ => false,
    };
    if kept { format } else { "" }
}

/// Whether a string `format` (one [`effective`] kept) applies to strings at all: the numeric
/// formats kept for integers and numbers do not.
pub(super) fn checks_strings(format: &str) -> bool {
    STRING_FORMATS.contains(&normalize(format).as_str())
}

fn normalize(format: &str) -> String {
    format.replace('-', "")
}

/// Whether `value` is valid for the string `format`.
pub(super) fn is_valid(format: &str, value: &str) -> bool {
    match normalize(format).as_str() {
        "bsonobjectid" => value.len() == 24 && value.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(value),
        "email" => is_email(value),
        "hostname" => is_hostname(value),
        "ipv4" => parse_ip_sloppy(value).is_some() && value.contains('.'),
        "ipv6" => parse_ip_sloppy(value).is_some() && value.contains(':'),
        "cidr" => is_cidr(value),
        "mac" => is_mac(value),
        "uuid" => UUID.is_match(value),
        "uuid3" => UUID3.is_match(value),
        "uuid4" => UUID4.is_match(value),
        "uuid5" => UUID5.is_match(value),
        "isbn" => is_isbn10(value) || is_isbn13(value),
        "isbn10" => is_isbn10(value),
        "isbn13" => is_isbn13(value),
        "creditcard" => is_credit_card(value),
        "ssn" => value.len() == 11 && SSN.is_match(value),
        "hexcolor" => HEX_COLOR.is_match(value),
        "rgbcolor" => RGB_COLOR.is_match(value),
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(value)
                .is_ok()
        }
        "date" => is_date(value),
        "duration" => is_duration(value),
        "datetime" => is_date_time(value),
        "quantity" => Quantity::parse(value).is_ok(),
        "k8sshortname" => is_dns1123_label(value).is_empty(),
        "k8slongname" => is_dns1123_subdomain(value).is_empty(),
        _ => true,
    }
}

/// Compiles one of the fixed patterns below (all valid Go regular expressions).
fn pattern(source: &str) -> Regex {
    Regex::new(source).unwrap_or_else(|e| panic!("built-in pattern {source}: {e}"))
}

static UUID: LazyLock<Regex> = LazyLock::new(|| {
    pattern("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID3: LazyLock<Regex> = LazyLock::new(|| {
    pattern("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
});
static UUID4: LazyLock<Regex> = LazyLock::new(|| {
    pattern("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static UUID5: LazyLock<Regex> = LazyLock::new(|| {
    pattern("(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
});
static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    pattern(concat!(
        r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|",
        r"([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}",
        r"([a-zA-Z\p{L}]){2,63})$"
    ))
});
static SSN: LazyLock<Regex> = LazyLock::new(|| pattern(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
static HEX_COLOR: LazyLock<Regex> =
    LazyLock::new(|| pattern("^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
static RGB_COLOR: LazyLock<Regex> = LazyLock::new(|| {
    let byte = r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*";
    pattern(&format!(r"^rgb\({byte},{byte},{byte}\)$"))
});
static CREDIT_CARD: LazyLock<Regex> = LazyLock::new(|| {
    pattern(concat!(
        "^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|(222[1-9]|22[3-9][0-9]|2[3-6][0-9]{2}|",
        "27[01][0-9]|2720)[0-9]{12}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|",
        r"3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11}|6[27][0-9]{14})$"
    ))
});
static DATE_TIME_CLOCK: LazyLock<Regex> = LazyLock::new(|| {
    pattern("^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
});

/// strfmt's `IsHostname`: the pattern, at most 255 bytes, labels at most 63.
fn is_hostname(value: &str) -> bool {
    HOSTNAME.is_match(value) && value.len() <= 255 && value.split('.').all(|l| l.len() <= 63)
}

/// Go's `time.Parse("2006-01-02", …)`: four-digit year, a month, a day that month has.
fn is_date(value: &str) -> bool {
    let b = value.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |s: &str| {
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse::<u32>().ok()
        } else {
            None
        }
    };
    let (Some(year), Some(month), Some(day)) =
        (num(&value[..4]), num(&value[5..7]), num(&value[8..]))
    else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

/// strfmt's `IsDateTime`: a date, `T` (any case), a clock time with optional fraction and a
/// `Z` or `±hh:mm` offset.
fn is_date_time(value: &str) -> bool {
    let lower = value.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(clock)) = (parts.next(), parts.next()) else {
        return false;
    };
    if value.len() < 4 || !is_date(date) || !DATE_TIME_CLOCK.is_match(clock) {
        return false;
    }
    let field = |i: usize| &clock[i..i + 2];
    field(0) <= "23" && field(3) <= "59" && field(6) <= "59"
}

/// strfmt's `ParseDuration`: Go's `time.ParseDuration`, or a sum of `<n> <unit>` terms with the
/// Scala-style units (`3 days`, `1h 30min`).
fn is_duration(value: &str) -> bool {
    is_go_duration(value) || is_unit_duration(value)
}

fn is_go_duration(value: &str) -> bool {
    let s = value.strip_prefix(['+', '-']).unwrap_or(value);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return false;
        }
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        if !matches!(
            &rest[..unit_len],
            "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h"
        ) {
            return false;
        }
        rest = &rest[unit_len..];
    }
    true
}

fn is_unit_duration(value: &str) -> bool {
    const UNITS: &[&[&str]] = &[
        &["ns", "nano"],
        &["us", "µs", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let mut rest = value.trim_start();
    let mut known = false;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = rest[digits..].trim_start();
        let letters = rest
            .find(|c: char| !c.is_ascii_alphabetic() && c != 'µ')
            .unwrap_or(rest.len());
        if letters == 0 {
            return false;
        }
        let unit = rest[..letters].to_lowercase();
        known |= UNITS.iter().any(|variants| {
            let last = variants.len() - 1;
            variants
                .iter()
                .enumerate()
                .any(|(i, v)| unit == *v || (i == last && unit.starts_with(v)))
        });
        rest = rest[letters..].trim_start();
    }
    known
}

/// Go's `net.ParseCIDR`, tolerating leading zeros as upstream's `ParseCIDRSloppy`.
fn is_cidr(value: &str) -> bool {
    let Some((ip, bits)) = value.split_once('/') else {
        return false;
    };
    let Some(addr) = parse_ip_sloppy(ip) else {
        return false;
    };
    let max = if addr.is_ipv4() && !ip.contains(':') {
        32
    } else {
        128
    };
    !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|b| b.is_ascii_digit())
        && bits.parse::<u32>().is_ok_and(|b| b <= max)
}

/// Go's `net.ParseMAC`: 6, 8 or 20 bytes as `aa:bb:…`, `aa-bb-…` or `aabb.ccdd.…`.
fn is_mac(value: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    let groups = |sep: char, width: usize| -> Option<usize> {
        let parts: Vec<&str> = value.split(sep).collect();
        parts.iter().all(|p| hex(p, width)).then_some(parts.len())
    };
    let valid_bytes = |n: usize| matches!(n, 6 | 8 | 20);
    if value.len() < 14 {
        return false;
    }
    match value.as_bytes()[2] {
        b':' | b'-' => {
            let sep = value.as_bytes()[2] as char;
            groups(sep, 2).is_some_and(valid_bytes)
        }
        _ if value.as_bytes()[4] == b'.' => groups('.', 4).is_some_and(|n| valid_bytes(n * 2)),
        _ => false,
    }
}

/// govalidator's ISBN-10: nine digits and a digit or `X`, with the weighted checksum.
fn is_isbn10(value: &str) -> bool {
    let s: Vec<char> = value.chars().filter(|c| *c != ' ' && *c != '-').collect();
    if s.len() != 10 || !s[..9].iter().all(char::is_ascii_digit) {
        return false;
    }
    let last = match s[9] {
        'X' => 10,
        c => match c.to_digit(10) {
            Some(d) => d,
            None => return false,
        },
    };
    let sum: u32 = s[..9]
        .iter()
        .enumerate()
        .map(|(i, c)| (i as u32 + 1) * c.to_digit(10).unwrap_or(0))
        .sum::<u32>()
        + 10 * last;
    sum.is_multiple_of(11)
}

/// govalidator's ISBN-13: thirteen digits with the alternating 1-3 checksum.
fn is_isbn13(value: &str) -> bool {
    let digits: Vec<u32> = value
        .chars()
        .filter(|c| *c != ' ' && *c != '-')
        .map(|c| c.to_digit(10))
        .collect::<Option<_>>()
        .unwrap_or_default();
    if digits.len() != 13 {
        return false;
    }
    let sum: u32 = digits[..12]
        .iter()
        .enumerate()
        .map(|(i, d)| if i % 2 == 0 { *d } else { 3 * d })
        .sum();
    (10 - sum % 10) % 10 == digits[12]
}

/// govalidator's credit card check: the known issuer patterns over the digits, and Luhn.
fn is_credit_card(value: &str) -> bool {
    let digits: String = value.chars().filter(char::is_ascii_digit).collect();
    if !CREDIT_CARD.is_match(&digits) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let dd = d * 2;
                if dd > 9 { dd - 9 } else { dd }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Go's `mail.ParseAddress` for the common shapes: `local@domain` or `Name <local@domain>`,
/// with a dot-atom or quoted local part and a dot-atom or bracketed domain.
fn is_email(value: &str) -> bool {
    let trimmed = value.trim();
    let addr = match (trimmed.rfind('<'), trimmed.strip_suffix('>')) {
        (Some(open), Some(inner)) => &inner[open + 1..],
        (None, None) => trimmed,
        _ => return false,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii();
    let dot_atom =
        |s: &str| !s.is_empty() && s.split('.').all(|p| !p.is_empty() && p.chars().all(atext));
    let local_ok =
        dot_atom(local) || (local.len() >= 2 && local.starts_with('"') && local.ends_with('"'));
    let domain_ok = dot_atom(domain) || (domain.starts_with('[') && domain.ends_with(']'));
    local_ok && domain_ok
}

/// Go's `url.ParseRequestURI`: an absolute URI or an absolute path, without control
/// characters, with a valid authority and valid `%` escapes.
fn is_request_uri(value: &str) -> bool {
    if value.is_empty() || value.chars().any(|c| c < ' ' || c == '\x7f') {
        return false;
    }
    if value == "*" {
        return true;
    }
    let (scheme, rest) =
        match value.find(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c))) {
            Some(i) if value.as_bytes()[i] == b':' => {
                if i == 0 || !value.as_bytes()[0].is_ascii_alphabetic() {
                    return false;
                }
                (&value[..i], &value[i + 1..])
            }
            _ => ("", value),
        };
    let rest = rest.split_once('?').map_or(rest, |(path, _)| path);
    if !rest.starts_with('/') {
        return !scheme.is_empty();
    }
    let path = match rest.strip_prefix("//").filter(|_| !scheme.is_empty()) {
        Some(after) => {
            let end = after.find('/').unwrap_or(after.len());
            if !valid_authority(&after[..end]) {
                return false;
            }
            &after[end..]
        }
        None => rest,
    };
    valid_escapes(path)
}

fn valid_authority(authority: &str) -> bool {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(inner) = host_port.strip_prefix('[') {
        match inner.split_once(']') {
            Some((_, after)) => ("", after),
            None => return false,
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => (host_port, ""),
        }
    };
    let port = port.strip_prefix(':').unwrap_or(port);
    port.bytes().all(|b| b.is_ascii_digit())
        && valid_escapes(host)
        && host.chars().all(|c| {
            !c.is_ascii() || c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:[]<>\"%".contains(c)
        })
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        if !(i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit()) {
            return false;
        }
        i += 3;
    }
    true
}
