//! Round trips: objects built with k8s-pb's prost types, encoded by prost, wrapped in the k8s
//! envelope and decoded, compared with the JSON upstream's encoding gives for them.

use std::collections::BTreeMap;

use prost::Message;
use serde_json::json;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::storage::v1 as storage;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::RawExtension;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;

use super::{decode, decoded, envelope, named, s};

/// 2026-01-02T03:04:05Z
const SECONDS: i64 = 1_767_323_045;

fn map<V>(entries: &[(&str, V)]) -> BTreeMap<String, V>
where
    V: Clone,
{
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

fn quantity(v: &str) -> Quantity {
    Quantity { string: s(v) }
}

fn int(v: i32) -> Option<IntOrString> {
    Some(IntOrString {
        r#type: Some(0),
        int_val: Some(v),
        str_val: s(""),
    })
}

fn string(v: &str) -> Option<IntOrString> {
    Some(IntOrString {
        r#type: Some(1),
        int_val: Some(0),
        str_val: s(v),
    })
}

fn time(seconds: i64, nanos: i32) -> Option<meta::Time> {
    Some(meta::Time {
        seconds: Some(seconds),
        nanos: Some(nanos),
    })
}

#[test]
fn a_config_map_decodes_with_its_metadata_data_and_binary_data() {
    let cm = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: s("c1"),
            namespace: s("default"),
            generate_name: s(""),
            generation: Some(0),
            labels: map(&[("app", "web".to_string())]),
            creation_timestamp: time(SECONDS, 0),
            ..Default::default()
        }),
        data: map(&[("a", "b".to_string()), ("empty", String::new())]),
        binary_data: map(&[("bin", vec![0u8, 1, 2, 254, 255])]),
        immutable: Some(false),
    };
    assert_eq!(
        decoded("v1", "ConfigMap", &cm),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "c1", "namespace": "default", "labels": {"app": "web"},
                "creationTimestamp": "2026-01-02T03:04:05Z",
            },
            "data": {"a": "b", "empty": ""},
            "binaryData": {"bin": "AAEC/v8="},
            "immutable": false,
        })
    );
}

#[test]
fn a_secret_keeps_its_binary_data_as_base64() {
    let secret = core::Secret {
        metadata: named("s"),
        data: map(&[("x", b"y".to_vec()), ("bin", vec![0xff, 0x00])]),
        string_data: map(&[("plain", "text".to_string())]),
        r#type: s("Opaque"),
        immutable: None,
    };
    assert_eq!(
        decoded("v1", "Secret", &secret),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "creationTimestamp": null},
            "data": {"x": "eQ==", "bin": "/wA="},
            "stringData": {"plain": "text"},
            "type": "Opaque",
        })
    );
}

#[test]
fn a_deployment_keeps_pointer_zeros_and_drops_value_zeros_like_go() {
    let labels = map(&[("app", "d1".to_string())]);
    let container = core::Container {
        name: s("web"),
        image: s("nginx:1.27"),
        ports: vec![core::ContainerPort {
            container_port: Some(8080),
            protocol: s("TCP"),
            host_port: Some(0),
            host_ip: s(""),
            name: s(""),
        }],
        env: vec![
            core::EnvVar {
                name: s("MODE"),
                value: s("prod"),
                value_from: None,
            },
            core::EnvVar {
                name: s("POD_IP"),
                value: s(""),
                value_from: Some(core::EnvVarSource {
                    field_ref: Some(core::ObjectFieldSelector {
                        api_version: s(""),
                        field_path: s("status.podIP"),
                    }),
                    ..Default::default()
                }),
            },
        ],
        resources: Some(core::ResourceRequirements {
            limits: map(&[("cpu", quantity("500m")), ("memory", quantity("128Mi"))]),
            requests: map(&[("cpu", quantity("250m"))]),
            claims: vec![],
        }),
        termination_message_path: s(""),
        stdin: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    let deployment = apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: s("d1"),
            labels: labels.clone(),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(3),
            revision_history_limit: Some(0),
            min_ready_seconds: Some(0),
            paused: Some(false),
            selector: Some(meta::LabelSelector {
                match_labels: labels.clone(),
                match_expressions: vec![],
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: labels.clone(),
                    creation_timestamp: Some(meta::Time::default()),
                    ..Default::default()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![container],
                    restart_policy: s("Always"),
                    termination_grace_period_seconds: Some(0),
                    host_network: Some(false),
                    dns_policy: s(""),
                    priority: Some(-5),
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: s("RollingUpdate"),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_surge: string("25%"),
                    max_unavailable: int(1),
                }),
            }),
            progress_deadline_seconds: None,
        }),
        status: Some(apps::DeploymentStatus {
            replicas: Some(0),
            observed_generation: Some(0),
            ..Default::default()
        }),
    };
    assert_eq!(
        decoded("apps/v1", "Deployment", &deployment),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "labels": {"app": "d1"}, "creationTimestamp": null},
            "spec": {
                "replicas": 3,
                "revisionHistoryLimit": 0,
                "selector": {"matchLabels": {"app": "d1"}},
                "template": {
                    "metadata": {"labels": {"app": "d1"}, "creationTimestamp": null},
                    "spec": {
                        "containers": [{
                            "name": "web",
                            "image": "nginx:1.27",
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                            "env": [
                                {"name": "MODE", "value": "prod"},
                                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                            ],
                            "resources": {
                                "limits": {"cpu": "500m", "memory": "128Mi"},
                                "requests": {"cpu": "250m"},
                            },
                        }],
                        "restartPolicy": "Always",
                        "terminationGracePeriodSeconds": 0,
                        "priority": -5,
                    },
                },
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1},
                },
            },
            "status": {},
        })
    );
}

#[test]
fn a_service_keeps_numeric_and_named_target_ports() {
    let service = core::Service {
        metadata: named("s1"),
        spec: Some(core::ServiceSpec {
            ports: vec![
                core::ServicePort {
                    name: s("http"),
                    protocol: s("TCP"),
                    port: Some(80),
                    target_port: int(8080),
                    node_port: Some(0),
                    app_protocol: None,
                },
                core::ServicePort {
                    name: s("metrics"),
                    port: Some(9090),
                    target_port: string("metrics"),
                    app_protocol: s(""),
                    ..Default::default()
                },
            ],
            selector: map(&[("app", "web".to_string())]),
            cluster_ip: s(""),
            r#type: s("ClusterIP"),
            session_affinity: s("None"),
            publish_not_ready_addresses: Some(false),
            allocate_load_balancer_node_ports: Some(false),
            ..Default::default()
        }),
        status: Some(core::ServiceStatus::default()),
    };
    assert_eq!(
        decoded("v1", "Service", &service),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s1", "creationTimestamp": null},
            "spec": {
                "ports": [
                    {"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080},
                    {"name": "metrics", "appProtocol": "", "port": 9090, "targetPort": "metrics"},
                ],
                "selector": {"app": "web"},
                "type": "ClusterIP",
                "sessionAffinity": "None",
                "allocateLoadBalancerNodePorts": false,
            },
            "status": {"loadBalancer": {}},
        })
    );
}

#[test]
fn a_job_keeps_int64_fields_as_json_numbers() {
    let job = batch::Job {
        metadata: named("j"),
        spec: Some(batch::JobSpec {
            parallelism: Some(1),
            active_deadline_seconds: Some(9_000_000_000),
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(3600),
            completion_mode: s("NonIndexed"),
            suspend: Some(false),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta::default()),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: s("j"),
                        image: s("busybox"),
                        command: vec!["sh".into(), "-c".into(), "exit 0".into()],
                        ..Default::default()
                    }],
                    restart_policy: s("Never"),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decoded("batch/v1", "Job", &job),
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "creationTimestamp": null},
            "spec": {
                "parallelism": 1,
                "activeDeadlineSeconds": 9_000_000_000i64,
                "backoffLimit": 0,
                "ttlSecondsAfterFinished": 3600,
                "completionMode": "NonIndexed",
                "suspend": false,
                "template": {
                    "metadata": {"creationTimestamp": null},
                    "spec": {
                        "containers": [{
                            "name": "j", "image": "busybox", "command": ["sh", "-c", "exit 0"],
                            "resources": {},
                        }],
                        "restartPolicy": "Never",
                    },
                },
            },
            "status": {},
        })
    );
}

#[test]
fn times_print_in_seconds_and_micro_times_in_microseconds() {
    let lease = coordination::Lease {
        metadata: Some(meta::ObjectMeta {
            name: s("node-1"),
            // Time drops the nanoseconds; Go's zero time is null
            creation_timestamp: time(SECONDS, 999_999_999),
            deletion_timestamp: time(-62_135_596_800, 0),
            ..Default::default()
        }),
        spec: Some(coordination::LeaseSpec {
            holder_identity: s("node-1"),
            lease_duration_seconds: Some(40),
            acquire_time: Some(meta::MicroTime {
                seconds: Some(SECONDS),
                nanos: Some(123_456_789),
            }),
            renew_time: Some(meta::MicroTime {
                seconds: Some(0),
                nanos: None,
            }),
            lease_transitions: Some(0),
            ..Default::default()
        }),
    };
    assert_eq!(
        decoded("coordination.k8s.io/v1", "Lease", &lease),
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": "node-1",
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "deletionTimestamp": null,
            },
            "spec": {
                "holderIdentity": "node-1",
                "leaseDurationSeconds": 40,
                "acquireTime": "2026-01-02T03:04:05.123456Z",
                "renewTime": "1970-01-01T00:00:00.000000Z",
                "leaseTransitions": 0,
            },
        })
    );
}

#[test]
fn a_self_subject_access_review_decodes_as_kubectl_auth_can_i_sends_it() {
    let review = authz::SelfSubjectAccessReview {
        metadata: Some(meta::ObjectMeta::default()),
        spec: Some(authz::SelfSubjectAccessReviewSpec {
            resource_attributes: Some(authz::ResourceAttributes {
                namespace: s("default"),
                verb: s("create"),
                group: s(""),
                version: s(""),
                resource: s("pods"),
                subresource: s(""),
                name: s(""),
                ..Default::default()
            }),
            non_resource_attributes: None,
        }),
        status: Some(authz::SubjectAccessReviewStatus {
            allowed: Some(false),
            denied: Some(false),
            reason: s(""),
            evaluation_error: s(""),
        }),
    };
    assert_eq!(
        decoded(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            &review
        ),
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"resourceAttributes": {"namespace": "default", "verb": "create", "resource": "pods"}},
            "status": {"allowed": false},
        })
    );
}

#[test]
fn subject_access_review_extra_values_are_json_arrays() {
    let review = authz::SubjectAccessReview {
        metadata: None,
        spec: Some(authz::SubjectAccessReviewSpec {
            user: s("alice"),
            groups: vec!["dev".into()],
            extra: map(&[(
                "scopes",
                authz::ExtraValue {
                    items: vec!["a".into(), "b".into()],
                },
            )]),
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decoded("authorization.k8s.io/v1", "SubjectAccessReview", &review),
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": null},
            "spec": {"user": "alice", "groups": ["dev"], "extra": {"scopes": ["a", "b"]}},
            "status": {"allowed": false},
        })
    );
}

#[test]
fn inlined_messages_put_their_fields_in_the_parent_object() {
    let cm_ref = || Some(core::LocalObjectReference { name: s("cm") });
    let pod = core::Pod {
        metadata: named("p"),
        spec: Some(core::PodSpec {
            volumes: vec![core::Volume {
                name: s("cfg"),
                volume_source: Some(core::VolumeSource {
                    config_map: Some(core::ConfigMapVolumeSource {
                        local_object_reference: cm_ref(),
                        default_mode: Some(420),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }],
            containers: vec![core::Container {
                name: s("c"),
                image: s("busybox"),
                env_from: vec![core::EnvFromSource {
                    prefix: s(""),
                    config_map_ref: Some(core::ConfigMapEnvSource {
                        local_object_reference: cm_ref(),
                        optional: Some(true),
                    }),
                    secret_ref: None,
                }],
                liveness_probe: Some(core::Probe {
                    handler: Some(core::ProbeHandler {
                        http_get: Some(core::HttpGetAction {
                            path: s("/healthz"),
                            port: string("http"),
                            host: s(""),
                            scheme: s("HTTP"),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    timeout_seconds: Some(5),
                    period_seconds: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    assert_eq!(
        decoded("v1", "Pod", &pod),
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "creationTimestamp": null},
            "spec": {
                "volumes": [{"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420}}],
                "containers": [{
                    "name": "c",
                    "image": "busybox",
                    "envFrom": [{"configMapRef": {"name": "cm", "optional": true}}],
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                        "timeoutSeconds": 5,
                    },
                    "resources": {},
                }],
            },
            "status": {},
        })
    );
}

#[test]
fn raw_extensions_hold_json_or_an_embedded_protobuf_object() {
    let revision = |raw: Vec<u8>| apps::ControllerRevision {
        metadata: named("rev"),
        data: Some(RawExtension { raw: Some(raw) }),
        revision: Some(3),
    };
    let json_data = revision(br#"{"spec":{"x":[1,2]}}"#.to_vec());
    assert_eq!(
        decoded("apps/v1", "ControllerRevision", &json_data),
        json!({
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": "rev", "creationTimestamp": null},
            "data": {"spec": {"x": [1, 2]}}, "revision": 3,
        })
    );
    let inner = core::ConfigMap {
        metadata: named("inner"),
        ..Default::default()
    };
    let embedded = revision(envelope("v1", "ConfigMap", inner.encode_to_vec()));
    assert_eq!(
        decoded("apps/v1", "ControllerRevision", &embedded)["data"],
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "inner", "creationTimestamp": null},
        })
    );
}

#[test]
fn managed_fields_carry_their_fields_v1_as_json() {
    let cm = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            name: s("c"),
            managed_fields: vec![meta::ManagedFieldsEntry {
                manager: s("kubectl-create"),
                operation: s("Update"),
                api_version: s("v1"),
                time: time(SECONDS, 0),
                fields_type: s("FieldsV1"),
                fields_v1: Some(meta::FieldsV1 {
                    raw: Some(br#"{"f:data":{".":{},"f:a":{}}}"#.to_vec()),
                }),
                subresource: s(""),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        decoded("v1", "ConfigMap", &cm)["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
            "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {".": {}, "f:a": {}}},
        }])
    );
}

#[test]
fn an_eviction_carries_its_delete_options() {
    let eviction = policy::Eviction {
        metadata: Some(meta::ObjectMeta {
            name: s("p1"),
            namespace: s("default"),
            ..Default::default()
        }),
        delete_options: Some(meta::DeleteOptions {
            grace_period_seconds: Some(30),
            preconditions: Some(meta::Preconditions {
                uid: s("u-1"),
                resource_version: None,
            }),
            ..Default::default()
        }),
    };
    assert_eq!(
        decoded("policy/v1", "Eviction", &eviction),
        json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "p1", "namespace": "default", "creationTimestamp": null},
            "deleteOptions": {"gracePeriodSeconds": 30, "preconditions": {"uid": "u-1"}},
        })
    );
}

#[test]
fn a_token_request_keeps_required_fields_even_when_empty() {
    let request = authn::TokenRequest {
        metadata: Some(meta::ObjectMeta::default()),
        spec: Some(authn::TokenRequestSpec {
            audiences: vec!["https://kubernetes.default.svc".into()],
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        }),
        status: Some(authn::TokenRequestStatus {
            token: s(""),
            expiration_timestamp: Some(meta::Time::default()),
        }),
    };
    assert_eq!(
        decoded("authentication.k8s.io/v1", "TokenRequest", &request),
        json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "metadata": {"creationTimestamp": null},
            "spec": {
                "audiences": ["https://kubernetes.default.svc"],
                "expirationSeconds": 3600,
                "boundObjectRef": null,
            },
            "status": {"token": "", "expirationTimestamp": null},
        })
    );
}

#[test]
fn map_entries_without_a_value_get_go_zero_values() {
    // ConfigMap.data = 2: an entry with only its key
    let mut raw = vec![2 << 3 | 2, 3, 1 << 3 | 2, 1, b'k'];
    // ConfigMap.metadata = 1 holding labels = 11 with an entry with only a value
    raw.extend([1 << 3 | 2, 5, 11 << 3 | 2, 3, 2 << 3 | 2, 1, b'v']);
    let value = decode(&envelope("v1", "ConfigMap", raw)).unwrap();
    assert_eq!(value["data"], json!({"k": ""}));
    assert_eq!(
        value["metadata"],
        json!({"labels": {"": "v"}, "creationTimestamp": null})
    );
}

#[test]
fn a_persistent_volume_claim_keeps_its_modes_request_and_class() {
    let pvc = core::PersistentVolumeClaim {
        metadata: named("data"),
        spec: Some(core::PersistentVolumeClaimSpec {
            access_modes: vec!["ReadWriteOnce".into()],
            resources: Some(core::VolumeResourceRequirements {
                requests: map(&[("storage", quantity("1Gi"))]),
                ..Default::default()
            }),
            storage_class_name: s("fast"),
            ..Default::default()
        }),
        status: None,
    };
    let value = decoded("v1", "PersistentVolumeClaim", &pvc);
    assert_eq!(value["metadata"]["name"], "data");
    assert_eq!(value["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(
        value["spec"]["resources"],
        json!({"requests": {"storage": "1Gi"}})
    );
    assert_eq!(value["spec"]["storageClassName"], "fast");
    assert!(value["spec"].get("volumeMode").is_none());
}

#[test]
fn a_storage_class_keeps_its_parameters_and_a_false_expansion_flag() {
    let sc = storage::StorageClass {
        metadata: named("fast"),
        provisioner: s("example.com/ssd"),
        parameters: map(&[("type", "ssd".to_string())]),
        reclaim_policy: s("Retain"),
        allow_volume_expansion: Some(false),
        volume_binding_mode: s("WaitForFirstConsumer"),
        ..Default::default()
    };
    let value = decoded("storage.k8s.io/v1", "StorageClass", &sc);
    assert_eq!(value["apiVersion"], "storage.k8s.io/v1");
    assert_eq!(value["kind"], "StorageClass");
    assert_eq!(value["provisioner"], "example.com/ssd");
    assert_eq!(value["parameters"], json!({"type": "ssd"}));
    assert_eq!(value["reclaimPolicy"], "Retain");
    assert_eq!(value["allowVolumeExpansion"], false);
    assert_eq!(value["volumeBindingMode"], "WaitForFirstConsumer");
}
