//! Malformed input: truncated, garbled and hostile bodies give 400 (or 415 when no kind is
//! left to read), never a panic or unbounded recursion. Random and mutated bodies are
//! `crate::fuzz_tests`' (proptest).

use prost::Message;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::RawExtension;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;

use super::{decode, envelope, named, s};

/// A Deployment with a label, a container, a port and an IntOrString: the seed the fuzz
/// tests (`crate::fuzz_tests`) mutate.
pub fn deployment() -> Vec<u8> {
    apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: s("d1"),
            labels: [("app".to_string(), "d1".to_string())].into(),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(1),
            template: Some(core::PodTemplateSpec {
                metadata: None,
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("busybox"),
                        image: s("busybox"),
                        ports: vec![core::ContainerPort {
                            container_port: Some(80),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_surge: Some(IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: s("25%"),
                    }),
                    max_unavailable: None,
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
    .encode_to_vec()
}

/// Decoding must end in success or one of `codes`, never a panic.
fn decodes_or_refuses(body: &[u8], codes: &[u16]) {
    if let Err(e) = decode(body) {
        assert!(codes.contains(&e.code), "{}: {}", e.code, e.message);
    }
}

#[test]
fn every_prefix_of_a_body_is_refused_cleanly() {
    let body = envelope("apps/v1", "Deployment", deployment());
    for n in 0..body.len() {
        decodes_or_refuses(&body[..n], &[400, 415]);
    }
}

#[test]
fn every_prefix_of_a_message_in_a_sound_envelope_is_decoded_or_refused_with_400() {
    let raw = deployment();
    for n in 0..raw.len() {
        decodes_or_refuses(
            &envelope("apps/v1", "Deployment", raw[..n].to_vec()),
            &[400],
        );
    }
}

#[test]
fn a_field_with_the_wrong_wire_type_is_refused_with_its_path() {
    // Deployment.spec (2) holding replicas (1) as a length-delimited value
    let raw = vec![2 << 3 | 2, 3, 1 << 3 | 2, 1, 0];
    let err = decode(&envelope("apps/v1", "Deployment", raw)).unwrap_err();
    assert_eq!(err.code, 400);
    assert!(err.message.contains("spec.replicas"), "{}", err.message);
}

#[test]
fn objects_nested_past_the_depth_cap_are_refused() {
    // ControllerRevisions whose RawExtension holds another enveloped ControllerRevision
    let nest = |levels: usize| {
        let mut body = envelope("v1", "ConfigMap", Vec::new());
        for _ in 0..levels {
            let revision = apps::ControllerRevision {
                metadata: named("r"),
                data: Some(RawExtension { raw: Some(body) }),
                revision: Some(1),
            };
            body = envelope("apps/v1", "ControllerRevision", revision.encode_to_vec());
        }
        body
    };
    assert!(decode(&nest(10)).is_ok());
    let err = decode(&nest(200)).unwrap_err();
    assert_eq!(err.code, 400);
    assert!(err.message.contains("nested deeper"), "{}", err.message);
}

#[test]
fn values_upstream_cannot_format_are_refused() {
    let with_meta = |metadata: meta::ObjectMeta| {
        let cm = core::ConfigMap {
            metadata: Some(metadata),
            ..Default::default()
        };
        decode(&envelope("v1", "ConfigMap", cm.encode_to_vec())).unwrap_err()
    };
    // year 10000
    let err = with_meta(meta::ObjectMeta {
        creation_timestamp: Some(meta::Time {
            seconds: Some(253_402_300_800),
            nanos: None,
        }),
        ..Default::default()
    });
    assert!(err.message.contains("creationTimestamp"), "{}", err.message);
    let err = with_meta(meta::ObjectMeta {
        managed_fields: vec![meta::ManagedFieldsEntry {
            fields_v1: Some(meta::FieldsV1 {
                raw: Some(b"{not json".to_vec()),
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    assert!(
        err.message.contains("managedFields[0].fieldsV1"),
        "{}",
        err.message
    );
    let service = core::Service {
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                target_port: Some(IntOrString {
                    r#type: Some(7),
                    int_val: None,
                    str_val: None,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let err = decode(&envelope("v1", "Service", service.encode_to_vec())).unwrap_err();
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("spec.ports[0].targetPort"),
        "{}",
        err.message
    );
}
