//! Property-based fuzzing of the request decoders (JSON, YAML and protobuf bodies, continue
//! tokens, request paths and queries, printer-column JSONPaths, cron schedules): never a panic,
//! and bad input is a 4xx `Status`. Longer run: `PROPTEST_CASES=100000 cargo test -p
//! skiff-apiserver --lib fuzz`. Failures shrink and are kept in `proptest-regressions/`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::Method;
use proptest::prelude::*;
use prost::Message;
use serde_json::json;

use crate::crd::printer::JsonPath;
use crate::encoding::{self, BodyFormat, MAX_BODY_BYTES};
use crate::error::ApiError;
use crate::handlers::read::{decode_continue, encode_continue};
use crate::protobuf::tests::{envelope, malformed::deployment};
use crate::protobuf::{self, MAGIC};
use crate::request::{RequestInfo, parse_query, percent_decode};
use crate::strategy::cron::parse_standard;

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

/// `seed` with up to eight bytes overwritten, removed or inserted (from `alphabet` half the
/// time, so structure characters come up often).
fn mutated(seed: Vec<u8>, alphabet: &'static [u8]) -> impl Strategy<Value = Vec<u8>> {
    let edit = (
        0u8..3,
        any::<prop::sample::Index>(),
        any::<u8>(),
        prop::sample::select(alphabet),
    );
    prop::collection::vec(edit, 1..8).prop_map(move |edits| {
        let mut body = seed.clone();
        for (op, at, byte, structural) in edits {
            let b = if byte % 2 == 0 { byte } else { structural };
            let len = body.len();
            match op {
                0 if len > 0 => body[at.index(len)] = b,
                1 if len > 0 => {
                    body.remove(at.index(len));
                }
                _ => body.insert(at.index(len + 1), b),
            }
        }
        body
    })
}

/// An error a client may be answered with for a bad request.
fn is_client_error(e: &ApiError) -> Result<(), TestCaseError> {
    prop_assert!((400..500).contains(&e.code), "{} {}", e.code, e.message);
    Ok(())
}

const JSON_SEED: &[u8] = br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}]}]},"n":-1.5e3,"s":"\u00e9\ud83d\ude00"}"#;
const YAML_SEEDS: &[&[u8]] = &[
    b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: |\n    line\n  n: 1\n",
    b"- a: &x [1, 2]\n  b: *x\n  c: {d: !!str 5}\n",
    b"a: &a [*a]\n---\nb: !!binary aGk=\n? [k]\n: v\n",
];

/// JSON and YAML bodies: mutated seeds, raw bytes (invalid UTF-8 included), deep nesting.
fn text_body() -> impl Strategy<Value = Vec<u8>> {
    let yaml = prop::sample::select(YAML_SEEDS)
        .prop_flat_map(|seed| mutated(seed.to_vec(), b"{}[]:,\"'-&*!?|>#\n \t"));
    let nested = (
        prop::sample::select(&["[", "{\"a\":", "a:\n ", " [", "- ", "{a: "][..]),
        0..3000usize,
    )
        .prop_map(|(open, depth)| open.repeat(depth).into_bytes());
    prop_oneof![
        3 => mutated(JSON_SEED.to_vec(), b"{}[]:,\"\\-.eE0u\xff"),
        3 => yaml,
        1 => prop::collection::vec(any::<u8>(), 0..256),
        1 => nested,
    ]
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn json_and_yaml_bodies_decode_or_fail_with_4xx(body in text_body()) {
        for format in [BodyFormat::Json, BodyFormat::Yaml] {
            if let Err(e) = encoding::decode(format, &body).and_then(encoding::expect_object) {
                is_client_error(&e)?;
            }
        }
    }
}

#[test]
fn fuzz_bodies_over_the_limit_are_too_large_in_every_format() {
    let body = vec![b'{'; MAX_BODY_BYTES + 1];
    for format in [BodyFormat::Json, BodyFormat::Yaml, BodyFormat::Protobuf] {
        assert_eq!(encoding::decode(format, &body).unwrap_err().code, 413);
    }
}

/// Valid protobuf messages of served kinds, to mutate inside a sound envelope.
fn protobuf_seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    let config_map = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: Some("c".into()),
            creation_timestamp: Some(meta::Time {
                seconds: Some(1_700_000_000),
                nanos: None,
            }),
            ..Default::default()
        }),
        data: [("k".to_string(), "v".to_string())].into(),
        binary_data: [("b".to_string(), vec![0, 255])].into(),
        immutable: Some(true),
    };
    vec![
        ("apps/v1", "Deployment", deployment()),
        ("v1", "ConfigMap", config_map.encode_to_vec()),
    ]
}

/// Protobuf bodies: raw bytes, the magic and raw bytes, mutated envelopes, and sound envelopes
/// around mutated messages.
fn protobuf_body() -> impl Strategy<Value = Vec<u8>> {
    let seeds = prop::sample::select(protobuf_seeds());
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..128),
        1 => prop::collection::vec(any::<u8>(), 0..128).prop_map(|b| [MAGIC, &b].concat()),
        2 => seeds.clone().prop_flat_map(|(v, k, raw)| mutated(envelope(v, k, raw), b"\x00\x08\x0a\x12\x1a\x22\x80\xff")),
        4 => seeds.prop_flat_map(|(v, k, raw)| {
            mutated(raw, b"\x00\x08\x0a\x12\x1a\x22\x80\xff").prop_map(move |raw| envelope(v, k, raw))
        }),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn protobuf_bodies_decode_or_fail_with_4xx(body in protobuf_body()) {
        if let Err(e) = protobuf::decode(&body) {
            is_client_error(&e)?;
        }
    }
}

/// Paths below a resource prefix, clean and not.
fn token_start() -> impl Strategy<Value = String> {
    glued(
        &["ns", "other", "/", "a", "..", ".", "%2e", "\0", "é", "-"],
        6,
    )
}

/// Continue tokens: noise, base64 of noise, and base64 of JSON shaped like a token.
fn continue_token() -> impl Strategy<Value = String> {
    let shaped = (
        prop_oneof![
            Just(json!(0)),
            any::<i64>().prop_map(|n| json!(n)),
            Just(json!("1")),
            Just(json!(null))
        ],
        token_start(),
    )
        .prop_map(|(rv, start)| {
            URL_SAFE_NO_PAD.encode(json!({"rv": rv, "start": start}).to_string())
        });
    prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..64).prop_map(|b| URL_SAFE_NO_PAD.encode(b)),
        shaped,
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn continue_tokens_stay_inside_the_list_or_fail_with_400(
        token in continue_token(),
        within in prop::sample::select(&["", "ns/"][..]),
    ) {
        match decode_continue(&token, within) {
            Ok(t) => {
                prop_assert!(t.rv != 0, "{:?}", t);
                prop_assert!(t.start.starts_with(within), "{:?} outside {:?}", t, within);
                prop_assert!(
                    t.start.split('/').all(|s| !matches!(s, "" | "." | "..")),
                    "{:?} is not a clean path", t
                );
            }
            Err(e) => prop_assert_eq!(e.code, 400, "{}", e.message),
        }
    }

    #[test]
    fn continue_tokens_the_server_writes_read_back(rv in 1i64.., name in "[a-z0-9.-]{1,20}") {
        let start = format!("ns/{name}");
        let t = decode_continue(&encode_continue(rv, &start), "ns/").map_err(|e| {
            TestCaseError::fail(e.message)
        });
        if name != "." && name != ".." {
            let t = t?;
            prop_assert_eq!((t.rv, t.start), (rv, start));
        }
    }
}

/// Request paths: API prefixes, dot segments raw and escaped, doubled slashes, broken escapes.
fn request_path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => glued(
            &["/api", "/apis", "/v1", "/apps", "/namespaces", "/ns", "/pods", "/p", "/status",
              "/finalize", "/watch", "/..", "/.", "/%2e%2e", "/%2F", "//", "/%", "/%zz", "/%f",
              "/%+1", "/%C3%A9", "/%ff", "?", "/é"],
            10,
        ),
        1 => any::<String>(),
        1 => (0..5000usize).prop_map(|n| format!("/api/v1/namespaces/{}/pods", "a".repeat(n))),
    ]
}

/// `%XX` escapes a reference decoder reads: two hex digits, nothing else.
fn reference_percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| char::from(c).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn request_paths_and_queries_parse_without_panicking(
        path in request_path(),
        query in prop_oneof![
            glued(&["watch", "=", "&", "true", "0", "labelSelector", "fieldSelector", "%", "%3D", "+", "%zz", "é"], 10),
            any::<String>(),
        ],
        method in prop::sample::select(&[Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::HEAD, Method::OPTIONS][..]),
    ) {
        let query = parse_query(Some(&query));
        let info = RequestInfo::parse(&method, &path, &query);
        if info.is_resource_request {
            let verbs = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "options"];
            prop_assert!(verbs.contains(&info.verb.as_str()), "{:?}", info);
        }
    }

    #[test]
    fn percent_escapes_are_two_hex_digits(
        s in prop_oneof![glued(&["%", "4", "1", "+", "-", "e", "E", "g", " ", "é", "%%"], 8), any::<String>()],
    ) {
        prop_assert_eq!(
            percent_decode(&s),
            String::from_utf8_lossy(&reference_percent_decode(&s)).into_owned()
        );
    }
}

/// Printer-column JSONPaths: steps of the grammar with the whitespace `trim` removes around
/// bracket contents (some of it multi-byte), and noise.
fn json_path() -> impl Strategy<Value = String> {
    let space = prop::sample::select(&["", " ", "\u{a0}", "\u{2003}", "\u{3000}"][..]);
    let inner = prop::sample::select(
        &[
            "0",
            "*",
            "'a'",
            "?(@.type==\"Ready\")",
            "?(@.a==1)",
            "?(@.a)",
            "-1",
            "",
            "a]",
        ][..],
    );
    let bracket = (space.clone(), inner, space).prop_map(|(a, i, b)| format!("[{a}{i}{b}]"));
    let step = prop_oneof![
        prop::sample::select(&[".spec", ".a", ".", "..", "$", "{", "}", " "][..])
            .prop_map(String::from),
        bracket,
    ];
    prop_oneof![
        3 => prop::collection::vec(step, 0..5).prop_map(|s| s.concat()),
        1 => glued(&[".", "spec", "[", "]", "0", "*", "?(", "@.a", "==", ")", "\u{3000}", "é"], 12),
        1 => any::<String>(),
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn printer_json_paths_parse_or_fail(text in json_path()) {
        if let Ok(path) = JsonPath::parse(&text) {
            let object = json!({"spec": {"a": [1, {"type": "Ready"}]}, "status": {}});
            let _ = (path.find(&object), path.pointer());
        }
    }

    #[test]
    fn cron_schedules_parse_or_fail_with_a_message(
        spec in prop_oneof![
            glued(
                &["*", "?", "/", "-", ",", " ", "0", "5", "59", "60", "99999999999999999999", "jan",
                  "MON", "@every ", "@daily", "@", "1h", "TZ=", "CRON_TZ=", "UTC", "Europe/Paris",
                  "../", "\t", "é"],
                12,
            ),
            any::<String>(),
        ],
    ) {
        if let Err(e) = parse_standard(&spec) {
            prop_assert!(!e.is_empty());
        }
    }
}
