//! Tests of the protobuf decoder and encoder: round trips through k8s-pb's own prost types and
//! back through the encoder (`objects`), envelopes and the table (here), and malformed input
//! (`malformed`).

pub mod malformed;
mod objects;

use prost::Message;
use serde_json::{Value, json};

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};

use super::schema::{Schema, schema};
use super::wellknown::go_duration;
use super::{MAGIC, decode};

/// A body as kubectl sends it: the magic, then the envelope around `raw`.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC, &unknown.encode_to_vec()].concat()
}

/// The JSON of `message` sent as `api_version`/`kind`; the response encoder writes that JSON
/// back to bytes that decode to the same JSON.
pub fn decoded(api_version: &str, kind: &str, message: &impl Message) -> Value {
    let body = envelope(api_version, kind, message.encode_to_vec());
    let json = decode(&body).unwrap_or_else(|e| panic!("{kind} decodes: {}", e.message));
    let again = super::encode::object(&json).unwrap_or_else(|e| panic!("{kind} encodes: {e}"));
    assert_eq!(
        without_nulls(decode(&again).unwrap()),
        without_nulls(json.clone()),
        "{kind} round trips through the encoder"
    );
    json
}

/// `v` without `null` members: a zero time present on the wire decodes to `null`, which the
/// encoder (as Go's for a nil pointer) leaves off the wire.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        v => v,
    }
}

pub fn s(v: &str) -> Option<String> {
    Some(v.to_string())
}

pub fn named(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: s(name),
        ..Default::default()
    })
}

#[test]
fn the_embedded_table_parses_and_names_the_served_kinds() {
    let table = schema();
    for (api_version, kind) in [
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Pod"),
        ("v1", "Namespace"),
        ("v1", "ServiceAccount"),
        ("v1", "Binding"),
        ("v1", "PersistentVolumeClaim"),
        ("v1", "PersistentVolume"),
        ("v1", "ReplicationController"),
        ("v1", "PodTemplate"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ("networking.k8s.io/v1", "Ingress"),
        ("networking.k8s.io/v1", "IngressClass"),
        ("networking.k8s.io/v1", "NetworkPolicy"),
        ("node.k8s.io/v1", "RuntimeClass"),
        ("certificates.k8s.io/v1", "CertificateSigningRequest"),
        ("storage.k8s.io/v1", "CSIDriver"),
        ("storage.k8s.io/v1", "CSINode"),
        ("storage.k8s.io/v1", "CSIStorageCapacity"),
        ("storage.k8s.io/v1", "VolumeAttachment"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("batch/v1", "Job"),
        ("batch/v1", "CronJob"),
        ("coordination.k8s.io/v1", "Lease"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("events.k8s.io/v1", "Event"),
        ("policy/v1", "Eviction"),
        ("policy/v1", "PodDisruptionBudget"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("scheduling.k8s.io/v1", "PriorityClass"),
        ("autoscaling/v1", "Scale"),
        ("autoscaling/v1", "HorizontalPodAutoscaler"),
        ("authentication.k8s.io/v1", "TokenRequest"),
        ("authentication.k8s.io/v1", "SelfSubjectReview"),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
        ("apps/v1", "DeleteOptions"),
        ("v1", "Status"),
        ("meta.k8s.io/v1", "DeleteOptions"),
    ] {
        assert!(
            table.kind(api_version, kind).is_some(),
            "{api_version} {kind}"
        );
    }
    assert!(table.kind("v1", "PodSpec").is_none(), "not a kind");
    assert!(table.kind("v1", "Deployment").is_none(), "wrong group");
    assert!(table.kind("example.com/v1", "Widget").is_none());
}

#[test]
fn a_table_with_a_dangling_message_reference_is_refused() {
    let err = Schema::parse("@core v1\n=A K\n1 b Missing\n").unwrap_err();
    assert!(err.contains("line 3") && err.contains("Missing"), "{err}");
    assert!(Schema::parse("@core v1\n=A !nonsense\n").is_err());
    assert!(Schema::parse("1 a s\n").is_err());
}

#[test]
fn go_durations_print_as_go_does() {
    for (ns, want) in [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (1_500_000, "1.5ms"),
        (1_000_000_000, "1s"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-1_500_000_000, "-1.5s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ] {
        assert_eq!(go_duration(ns), want, "{ns}");
    }
}

#[test]
fn delete_options_are_accepted_under_any_served_group_version() {
    let options = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        propagation_policy: s("Foreground"),
        orphan_dependents: Some(false),
        dry_run: vec!["All".into()],
        ..Default::default()
    };
    assert_eq!(
        decoded("apps/v1", "DeleteOptions", &options),
        json!({
            "apiVersion": "apps/v1", "kind": "DeleteOptions",
            "gracePeriodSeconds": 0, "propagationPolicy": "Foreground",
            "orphanDependents": false, "dryRun": ["All"],
        })
    );
}

#[test]
fn an_unknown_kind_is_an_unsupported_media_type() {
    let raw = core::ConfigMap::default().encode_to_vec();
    for (api_version, kind) in [
        ("v1", "Frobnicator"),
        ("example.com/v1", "ConfigMap"),
        ("", ""),
    ] {
        let err = decode(&envelope(api_version, kind, raw.clone())).unwrap_err();
        assert_eq!(err.code, 415, "{api_version} {kind}: {}", err.message);
    }
}

#[test]
fn an_envelope_with_a_content_encoding_is_an_unsupported_media_type() {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s("v1"),
            kind: s("ConfigMap"),
        }),
        raw: Some(vec![]),
        content_encoding: s("gzip"),
        content_type: None,
    };
    let err = decode(&[MAGIC, &unknown.encode_to_vec()].concat()).unwrap_err();
    assert_eq!(err.code, 415, "{}", err.message);
}

#[test]
fn an_envelope_holding_json_is_read_as_json() {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s("v1"),
            kind: s("ConfigMap"),
        }),
        raw: Some(br#"{"kind":"ConfigMap","apiVersion":"v1"}"#.to_vec()),
        content_encoding: None,
        content_type: s("application/json"),
    };
    let value = decode(&[MAGIC, &unknown.encode_to_vec()].concat()).unwrap();
    assert_eq!(value, json!({"kind": "ConfigMap", "apiVersion": "v1"}));
}

#[test]
fn a_body_without_the_magic_is_a_bad_request() {
    let err = decode(b"{\"kind\":\"ConfigMap\"}").unwrap_err();
    assert_eq!(err.code, 400);
    assert!(err.message.contains("magic"), "{}", err.message);
}

#[test]
fn unknown_fields_are_skipped() {
    let mut raw = core::ConfigMap {
        metadata: named("c1"),
        ..Default::default()
    }
    .encode_to_vec();
    // field 900 of each wire type: varint, fixed64, length-delimited, fixed32
    for (wire, value) in [
        (0u64, vec![0x96, 0x01]),
        (1, vec![7; 8]),
        (2, vec![3, 1, 2, 3]),
        (5, vec![9; 4]),
    ] {
        prost::encoding::encode_varint(900 << 3 | wire, &mut raw);
        raw.extend(value);
    }
    let value = decode(&envelope("v1", "ConfigMap", raw)).unwrap();
    assert_eq!(
        value,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c1", "creationTimestamp": null},
        })
    );
}

#[test]
fn packed_and_unpacked_repeated_integers_read_the_same() {
    // PodSecurityContext.supplementalGroups = 4 (repeated int64); prost writes it unpacked
    let unpacked = core::PodSecurityContext {
        supplemental_groups: vec![1, 2, 300],
        ..Default::default()
    }
    .encode_to_vec();
    let mut packed = vec![4 << 3 | 2, 4, 1, 2];
    packed.extend([0xac, 0x02]); // 300
    let spec = |security_context: Vec<u8>| {
        let mut raw = vec![14 << 3 | 2];
        prost::encoding::encode_varint(security_context.len() as u64, &mut raw);
        raw.extend(security_context);
        // Pod.spec = 2
        let mut pod = vec![2 << 3 | 2];
        prost::encoding::encode_varint(raw.len() as u64, &mut pod);
        pod.extend(raw);
        decode(&envelope("v1", "Pod", pod)).unwrap()
    };
    let want = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"creationTimestamp": null},
        "spec": {"securityContext": {"supplementalGroups": [1, 2, 300]}, "containers": null},
        "status": {}});
    assert_eq!(spec(unpacked), want);
    assert_eq!(spec(packed), want);
}

#[test]
fn bodies_from_real_kubectl_decode_to_the_json_older_kubectl_sends() {
    let fixtures = include_str!("kubectl.txt");
    let mut checked = 0;
    for case in fixtures.split("\n$ ").skip(1) {
        let mut lines = case.lines();
        let command = lines.next().unwrap_or_default();
        let field = |prefix: &str| {
            case.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("{command}: no {prefix:?} line"))
        };
        let hex = field("pb ");
        let body: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        let want: Value = serde_json::from_str(field("json ")).expect("fixture JSON");
        let got = decode(&body).unwrap_or_else(|e| panic!("{command}: {}", e.message));
        assert_eq!(got, want, "{command}");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} fixtures");
}
