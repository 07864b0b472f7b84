//! Property-based fuzzing of the decoders of user input (patches, selectors, field paths,
//! managed fields, quantities, durations): never a panic, a typed error for bad input, and a
//! round trip where there is a canonical form. Longer run: `PROPTEST_CASES=100000 cargo test -p
//! skiff-apimachinery --lib fuzz`. Failures shrink and are kept in `proptest-regressions/`.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::managedfields::fieldpath::{PathElement, Set};
use crate::managedfields::{self, Managed, Scope, Writer};
use crate::patch::{self, PatchType};
use crate::quantity::{Quantity, format_canonical};
use crate::{duration, fields, labels};

/// Cases per property unless `PROPTEST_CASES` says otherwise.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(cases),
        ..ProptestConfig::default()
    }
}

/// Strings glued from `tokens`, so parsers see their own syntax and not only noise.
fn glued(tokens: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(tokens), 0..max).prop_map(|t| t.concat())
}

/// Keys of Kubernetes objects and of patch directives.
const KEYS: &[&str] = &[
    "metadata",
    "name",
    "labels",
    "finalizers",
    "spec",
    "containers",
    "ports",
    "containerPort",
    "protocol",
    "env",
    "volumes",
    "status",
    "conditions",
    "type",
    "a",
    "$patch",
    "$retainKeys",
    "$setElementOrder/containers",
    "$setElementOrder/ports",
    "$deleteFromPrimitiveList/finalizers",
    "managedFields",
];

/// JSON values shaped like objects and patches: small scalars, the keys above, nesting.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-3i64..100).prop_map(|n| json!(n)),
        prop::sample::select(&["", "a", "b", "TCP", "delete", "replace", "merge", "x/y"][..])
            .prop_map(|s| json!(s)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// An object (what a handler patches) built from [`json_value`].
fn json_object() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(KEYS), json_value()), 0..6)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()))
}

/// JSON pointers over [`KEYS`] and small indexes, `-` and `~` escapes included.
fn pointer() -> impl Strategy<Value = String> {
    glued(
        &[
            "/metadata",
            "/spec",
            "/containers",
            "/0",
            "/1",
            "/-",
            "/name",
            "/labels",
            "/a~1b",
            "/~",
            "/",
            "/01",
            "/99999999999999999999",
        ],
        5,
    )
}

/// RFC 6902 operations, valid and not.
fn json_patch_body() -> impl Strategy<Value = Vec<u8>> {
    let op = (
        prop::sample::select(&["add", "remove", "replace", "move", "copy", "test", "nope"][..]),
        pointer(),
        prop::option::of(pointer()),
        prop::option::of(json_value()),
    )
        .prop_map(|(op, path, from, value)| {
            let mut m = Map::new();
            m.insert("op".into(), json!(op));
            m.insert("path".into(), json!(path));
            if let Some(from) = from {
                m.insert("from".into(), json!(from));
            }
            if let Some(value) = value {
                m.insert("value".into(), value);
            }
            Value::Object(m)
        });
    prop_oneof![
        4 => prop::collection::vec(op, 0..6).prop_map(|ops| serde_json::to_vec(&ops).unwrap()),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Merge and strategic merge patch bodies: objects mostly, any JSON or bytes sometimes.
fn merge_patch_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => json_object().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Kinds with strategic merge metadata, and one without.
const KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("apps", "Deployment"),
    ("", "Service"),
    ("", "ConfigMap"),
    ("example.com", "Widget"),
];

/// A patch error is a 4xx (never upstream's 500 for a plain Go error from strategic merge
/// patch, as `Error::status_code` documents).
fn check_patch(result: patch::Result<Value>, patch_type: PatchType) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        let code = e.status_code();
        let allowed: &[u16] = match patch_type {
            PatchType::StrategicMerge => &[400, 413, 415, 422],
            _ => &[400, 413, 422],
        };
        prop_assert!(allowed.contains(&code), "{code} for {e}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn json_patches_apply_or_fail_with_4xx(doc in json_object(), body in json_patch_body()) {
        check_patch(patch::apply("", "Pod", &doc, PatchType::Json, &body), PatchType::Json)?;
    }

    #[test]
    fn merge_patches_apply_or_fail_with_4xx(doc in json_object(), body in merge_patch_body()) {
        check_patch(patch::apply("", "Pod", &doc, PatchType::Merge, &body), PatchType::Merge)?;
    }

    #[test]
    fn strategic_merge_patches_apply_or_fail_with_upstreams_code(
        doc in json_value(),
        body in merge_patch_body(),
        kind in prop::sample::select(KINDS),
    ) {
        let (group, kind) = kind;
        let result = patch::apply(group, kind, &doc, PatchType::StrategicMerge, &body);
        check_patch(result, PatchType::StrategicMerge)?;
    }

    #[test]
    fn server_side_apply_and_update_recording_never_panic(
        live in json_object(),
        config in json_object(),
        force in any::<bool>(),
        kind in prop::sample::select(KINDS),
        scope in prop::sample::select(&[Scope::Everything, Scope::NotStatus, Scope::OnlyStatus][..]),
    ) {
        let writer = Writer {
            manager: "fuzz",
            api_version: "v1",
            subresource: "",
            scope,
            now: "2026-01-01T00:00:00Z",
            group: kind.0,
            kind: kind.1,
            custom: None,
        };
        let _ = managedfields::apply(&live, &config, &writer, force);
        let mut new = config.clone();
        managedfields::update(&live, &mut new, &writer);
    }

    #[test]
    fn managed_fields_decode_or_fail_and_encode_to_a_fixed_point(v in json_value()) {
        if let Ok(m) = Managed::decode(Some(&v)) {
            let encoded = m.encode();
            let again = Managed::decode(Some(&encoded)).expect("encoded entries decode");
            prop_assert_eq!(again.encode(), encoded);
        }
    }
}

/// `FieldsV1` keys: the four prefixes, JSON after them, and noise.
fn fields_v1_key() -> impl Strategy<Value = String> {
    prop_oneof![
        glued(
            &[
                "f:", "k:", "v:", "i:", "x:", ":", "{", "}", "\"a\"", ":1", ",", "[", "]", "-",
                "+", "0", "9", "name", "."
            ],
            8
        ),
        (
            prop::sample::select(&["f:", "k:", "v:", "i:"][..]),
            json_value()
        )
            .prop_map(|(p, v)| format!("{p}{v}")),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn path_elements_decode_or_fail_and_round_trip(s in fields_v1_key()) {
        if let Ok(pe) = PathElement::decode(&s) {
            prop_assert_eq!(PathElement::decode(&pe.encode()), Ok(pe.clone()));
            let _ = pe.to_string();
        }
    }

    #[test]
    fn fields_v1_sets_decode_or_fail_and_round_trip(v in json_value()) {
        if let Ok(set) = Set::from_fields_v1(&v) {
            prop_assert_eq!(Set::from_fields_v1(&set.to_fields_v1()), Ok(set));
        }
    }
}

/// Label selector syntax, keys and values, and characters it must refuse.
const LABEL_TOKENS: &[&str] = &[
    "a",
    "b",
    "x.io/k",
    "k8s.io/",
    "-",
    "_",
    ".",
    "/",
    "1",
    "99",
    "=",
    "==",
    "!=",
    "!",
    ">",
    "<",
    " in ",
    " notin ",
    "in",
    "notin",
    "(",
    ")",
    ",",
    " ",
    "\t",
    "é",
    "\0",
    "a=b",
    "c!=d",
    "e in (f,g)",
    "!h",
];

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn label_selectors_parse_or_fail_and_print_canonically(
        s in prop_oneof![glued(LABEL_TOKENS, 12), any::<String>()],
    ) {
        if let Ok(selector) = labels::Selector::parse(&s) {
            let printed = selector.to_string();
            let again = labels::Selector::parse(&printed)
                .unwrap_or_else(|e| panic!("{printed:?} (from {s:?}) does not parse: {e}"));
            prop_assert_eq!(again.to_string(), printed);
            prop_assert_eq!(again.requirements().len(), selector.requirements().len());
        }
    }

    #[test]
    fn field_selectors_parse_or_fail_and_print_canonically(
        s in prop_oneof![
            glued(&["a", "spec.nodeName", "=", "==", "!=", "!", ",", "\\", "\\,", "\\=", "\\\\", "x", " ", "é"], 12),
            any::<String>(),
        ],
    ) {
        if let Ok(selector) = fields::Selector::parse(&s) {
            let printed = selector.to_string();
            let again = fields::Selector::parse(&printed)
                .unwrap_or_else(|e| panic!("{printed:?} (from {s:?}) does not parse: {e}"));
            let sorted = |sel: &fields::Selector| {
                let mut terms: Vec<String> =
                    sel.requirements().iter().map(ToString::to_string).collect();
                terms.sort();
                terms
            };
            prop_assert_eq!(sorted(&again), sorted(&selector));
        }
    }

    #[test]
    fn field_selector_values_unescape_what_they_escape(s in any::<String>()) {
        prop_assert_eq!(fields::unescape_value(&fields::escape_value(&s)), Ok(s));
    }
}

/// Quantities as written: sign, digits, a fraction, a suffix or an exponent.
fn quantity_text() -> impl Strategy<Value = String> {
    (
        prop::sample::select(&["", "+", "-", " "][..]),
        "[0-9]{0,42}",
        prop::option::of("[0-9]{0,42}"),
        prop::sample::select(
            &[
                "", "m", "n", "u", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi",
                "Ei", "e3", "E-9", "e30", "e-31", "e+5", "e", "i", "Xi", "mi", " ",
            ][..],
        ),
    )
        .prop_map(|(sign, int, frac, suffix)| match frac {
            Some(frac) => format!("{sign}{int}.{frac}{suffix}"),
            None => format!("{sign}{int}{suffix}"),
        })
}

proptest! {
    #![proptest_config(config(2048))]

    #[test]
    fn quantities_parse_or_fail_and_their_canonical_form_parses_to_the_same_value(
        s in prop_oneof![3 => quantity_text(), 1 => any::<String>()],
    ) {
        if let Ok(q) = Quantity::parse(&s) {
            let (_, _) = (q.milli_value(), q.value());
            let canonical = format_canonical(q.nano_value(), q.format());
            let again = Quantity::parse(&canonical)
                .unwrap_or_else(|e| panic!("{canonical:?} (from {s:?}): {e}"));
            prop_assert_eq!(again.nano_value(), q.nano_value(), "{} from {:?}", canonical, s);
        }
    }

    #[test]
    fn durations_parse_or_fail_with_gos_message(
        s in prop_oneof![
            glued(&["0", "1", "9", "12", ".", "-", "+", "ns", "us", "µs", "ms", "s", "m", "h", "d", " ", "99999999999"], 10),
            any::<String>(),
        ],
    ) {
        if let Err(e) = duration::parse(&s) {
            prop_assert!(e.starts_with("time: "), "{}", e);
        }
    }

    #[test]
    fn durations_read_back_what_go_writes(n in any::<i64>()) {
        prop_assert_eq!(duration::parse(&format!("{n}ns")), Ok(n));
        let (secs, nanos) = (n.unsigned_abs() / 1_000_000_000, n.unsigned_abs() % 1_000_000_000);
        let sign = if n < 0 { "-" } else { "" };
        prop_assert_eq!(duration::parse(&format!("{sign}{secs}.{nanos:09}s")), Ok(n));
    }
}
