//! Strategic merge patch metadata of the built-in types: for each kind in the catalog, a graph
//! of [`Type`]s from the object root down to every field whose `patchStrategy` /
//! `patchMergeKey` struct tag (k8s.io/api) changes how a patch merges.
//!
//! Only the path to such fields is written down; any field not listed behaves as an untagged
//! field upstream does (objects merge key by key, lists are replaced whole). Upstream's API
//! server reads these struct tags, not `x-kubernetes-list-type` / `listMapKeys`: those drive
//! server-side apply only, and they differ (a container port's list-map keys are
//! `containerPort` and `protocol`, its patch merge key is `containerPort` alone).

/// A field's `patchStrategy`, less `retainKeys` (see [`Field::retain_keys`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// No tag: an object merges key by key, a list is replaced whole.
    Default,
    /// `merge`: a list merges with the live list, by [`Field::merge_key`] for objects and as a
    /// set for primitives.
    Merge,
    /// `replace`: the patch value replaces the live value whole, even an object.
    Replace,
}

/// One field of a [`Type`] with patch metadata.
#[derive(Debug)]
pub struct Field {
    /// The JSON name.
    pub name: &'static str,
    pub strategy: Strategy,
    /// The tag also lists `retainKeys`: kubectl sends a `$retainKeys` directive for it. The
    /// server honours `$retainKeys` wherever it appears, so this is informative.
    pub retain_keys: bool,
    /// `patchMergeKey`: the key naming an element of a list of objects merged by key.
    pub merge_key: Option<&'static str>,
    /// The type of the object, or of each element of the list; `None` when nothing below the
    /// field has patch metadata.
    pub ty: Option<&'static Type>,
}

/// A struct type with the fields below it that carry patch metadata.
#[derive(Debug)]
pub struct Type {
    /// Upstream's Go type name.
    pub name: &'static str,
    pub fields: &'static [Field],
}

impl Type {
    const fn new(name: &'static str, fields: &'static [Field]) -> Type {
        Type { name, fields }
    }

    /// The metadata of field `name`, `None` when the field has none.
    pub fn field(&'static self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Follows a dotted path of field names (`spec.template.spec`); list fields lead to their
    /// element type.
    pub fn at(&'static self, path: &str) -> Option<&'static Type> {
        path.split('.')
            .try_fold(self, |ty, name| ty.field(name).and_then(|f| f.ty))
    }
}

const fn field(
    name: &'static str,
    strategy: Strategy,
    merge_key: Option<&'static str>,
    ty: Option<&'static Type>,
) -> Field {
    Field {
        name,
        strategy,
        retain_keys: false,
        merge_key,
        ty,
    }
}

/// A nested object without a strategy of its own.
const fn object(name: &'static str, ty: &'static Type) -> Field {
    field(name, Strategy::Default, None, Some(ty))
}

/// A list of objects merged by `key` (`patchStrategy:"merge" patchMergeKey:"<key>"`).
const fn merge_by(name: &'static str, key: &'static str, ty: Option<&'static Type>) -> Field {
    field(name, Strategy::Merge, Some(key), ty)
}

/// A list of primitives merged as a set (`patchStrategy:"merge"`, no merge key).
const fn merge_set(name: &'static str) -> Field {
    field(name, Strategy::Merge, None, None)
}

/// A list without strategy, written down because it is commonly mistaken for a merged one
/// or because its elements hold merged lists.
const fn atomic(name: &'static str, ty: Option<&'static Type>) -> Field {
    field(name, Strategy::Default, None, ty)
}

/// `patchStrategy:"replace"`.
const fn replace(name: &'static str) -> Field {
    field(name, Strategy::Replace, None, None)
}

/// Adds `retainKeys` to a field's strategy.
const fn retain_keys(f: Field) -> Field {
    Field {
        retain_keys: true,
        ..f
    }
}

// meta/v1

pub static OBJECT_META: Type = Type::new(
    "ObjectMeta",
    &[
        merge_by("ownerReferences", "uid", None),
        merge_set("finalizers"),
    ],
);

const METADATA: Field = object("metadata", &OBJECT_META);
/// The fields of a kind whose only patch metadata is in `metadata`.
static METADATA_ONLY: &[Field] = &[METADATA];
/// The fields of a status whose only patch metadata is `conditions[type]`.
static CONDITIONS: &[Field] = &[merge_by("conditions", "type", None)];

// core/v1

static CONTAINER_FIELDS: &[Field] = &[
    merge_by("ports", "containerPort", None),
    merge_by("env", "name", None),
    merge_by("volumeMounts", "mountPath", None),
    merge_by("volumeDevices", "devicePath", None),
];
pub static CONTAINER: Type = Type::new("Container", CONTAINER_FIELDS);
/// `EphemeralContainerCommon` carries the same tags as `Container`.
pub static EPHEMERAL_CONTAINER: Type = Type::new("EphemeralContainer", CONTAINER_FIELDS);

pub static POD_SPEC: Type = Type::new(
    "PodSpec",
    &[
        retain_keys(merge_by("volumes", "name", None)),
        merge_by("initContainers", "name", Some(&CONTAINER)),
        merge_by("containers", "name", Some(&CONTAINER)),
        merge_by("ephemeralContainers", "name", Some(&EPHEMERAL_CONTAINER)),
        merge_by("imagePullSecrets", "name", None),
        merge_by("hostAliases", "ip", None),
        merge_by("topologySpreadConstraints", "topologyKey", None),
        merge_by("schedulingGates", "name", None),
        retain_keys(merge_by("resourceClaims", "name", None)),
        atomic("tolerations", None),
        atomic("readinessGates", None),
    ],
);

static CONTAINER_STATUS: Type = Type::new(
    "ContainerStatus",
    &[
        merge_by("volumeMounts", "mountPath", None),
        merge_by("allocatedResourcesStatus", "name", None),
    ],
);

static POD_STATUS: Type = Type::new(
    "PodStatus",
    &[
        merge_by("conditions", "type", None),
        merge_by("podIPs", "ip", None),
        merge_by("hostIPs", "ip", None),
        retain_keys(merge_by("resourceClaimStatuses", "name", None)),
        atomic("initContainerStatuses", Some(&CONTAINER_STATUS)),
        atomic("containerStatuses", Some(&CONTAINER_STATUS)),
        atomic("ephemeralContainerStatuses", Some(&CONTAINER_STATUS)),
    ],
);

pub static POD: Type = Type::new(
    "Pod",
    &[
        METADATA,
        object("spec", &POD_SPEC),
        object("status", &POD_STATUS),
    ],
);

pub static POD_TEMPLATE_SPEC: Type =
    Type::new("PodTemplateSpec", &[METADATA, object("spec", &POD_SPEC)]);

static PERSISTENT_VOLUME_CLAIM_STATUS: Type = Type::new("PersistentVolumeClaimStatus", CONDITIONS);
static PERSISTENT_VOLUME_CLAIM: Type = Type::new(
    "PersistentVolumeClaim",
    &[METADATA, object("status", &PERSISTENT_VOLUME_CLAIM_STATUS)],
);

static PERSISTENT_VOLUME: Type = Type::new("PersistentVolume", METADATA_ONLY);

static POD_TEMPLATE: Type = Type::new(
    "PodTemplate",
    &[METADATA, object("template", &POD_TEMPLATE_SPEC)],
);
static REPLICATION_CONTROLLER_SPEC: Type = Type::new(
    "ReplicationControllerSpec",
    &[object("template", &POD_TEMPLATE_SPEC)],
);
static REPLICATION_CONTROLLER_STATUS: Type = Type::new("ReplicationControllerStatus", CONDITIONS);
static REPLICATION_CONTROLLER: Type = Type::new(
    "ReplicationController",
    &[
        METADATA,
        object("spec", &REPLICATION_CONTROLLER_SPEC),
        object("status", &REPLICATION_CONTROLLER_STATUS),
    ],
);

static SERVICE_SPEC: Type = Type::new(
    "ServiceSpec",
    &[merge_by("ports", "port", None), atomic("externalIPs", None)],
);
static SERVICE_STATUS: Type = Type::new("ServiceStatus", CONDITIONS);
pub static SERVICE: Type = Type::new(
    "Service",
    &[
        METADATA,
        object("spec", &SERVICE_SPEC),
        object("status", &SERVICE_STATUS),
    ],
);

static NODE_SPEC: Type = Type::new("NodeSpec", &[merge_set("podCIDRs"), atomic("taints", None)]);
static NODE_STATUS: Type = Type::new(
    "NodeStatus",
    &[
        merge_by("conditions", "type", None),
        merge_by("addresses", "type", None),
        atomic("images", None),
        atomic("volumesAttached", None),
    ],
);
pub static NODE: Type = Type::new(
    "Node",
    &[
        METADATA,
        object("spec", &NODE_SPEC),
        object("status", &NODE_STATUS),
    ],
);

static NAMESPACE_SPEC: Type = Type::new("NamespaceSpec", &[atomic("finalizers", None)]);
static NAMESPACE_STATUS: Type = Type::new("NamespaceStatus", CONDITIONS);
static NAMESPACE: Type = Type::new(
    "Namespace",
    &[
        METADATA,
        object("spec", &NAMESPACE_SPEC),
        object("status", &NAMESPACE_STATUS),
    ],
);

static SERVICE_ACCOUNT: Type = Type::new(
    "ServiceAccount",
    &[
        METADATA,
        merge_by("secrets", "name", None),
        atomic("imagePullSecrets", None),
    ],
);

static ENDPOINTS: Type = Type::new("Endpoints", &[METADATA, atomic("subsets", None)]);

static BINDING: Type = Type::new("Binding", METADATA_ONLY);
static CONFIG_MAP: Type = Type::new("ConfigMap", METADATA_ONLY);
static EVENT: Type = Type::new("Event", METADATA_ONLY);
static LIMIT_RANGE: Type = Type::new("LimitRange", METADATA_ONLY);
static RESOURCE_QUOTA: Type = Type::new("ResourceQuota", METADATA_ONLY);
static SECRET: Type = Type::new("Secret", METADATA_ONLY);

// apps/v1

static DEPLOYMENT_SPEC: Type = Type::new(
    "DeploymentSpec",
    &[
        object("template", &POD_TEMPLATE_SPEC),
        retain_keys(field("strategy", Strategy::Default, None, None)),
    ],
);
static DEPLOYMENT_STATUS: Type = Type::new("DeploymentStatus", CONDITIONS);
pub static DEPLOYMENT: Type = Type::new(
    "Deployment",
    &[
        METADATA,
        object("spec", &DEPLOYMENT_SPEC),
        object("status", &DEPLOYMENT_STATUS),
    ],
);

/// The spec of the workloads whose only tagged field is the pod template.
static TEMPLATE_ONLY: &[Field] = &[object("template", &POD_TEMPLATE_SPEC)];

static REPLICA_SET_SPEC: Type = Type::new("ReplicaSetSpec", TEMPLATE_ONLY);
static REPLICA_SET_STATUS: Type = Type::new("ReplicaSetStatus", CONDITIONS);
static REPLICA_SET: Type = Type::new(
    "ReplicaSet",
    &[
        METADATA,
        object("spec", &REPLICA_SET_SPEC),
        object("status", &REPLICA_SET_STATUS),
    ],
);

static STATEFUL_SET_SPEC: Type = Type::new(
    "StatefulSetSpec",
    &[
        object("template", &POD_TEMPLATE_SPEC),
        atomic("volumeClaimTemplates", Some(&PERSISTENT_VOLUME_CLAIM)),
    ],
);
static STATEFUL_SET_STATUS: Type = Type::new("StatefulSetStatus", CONDITIONS);
static STATEFUL_SET: Type = Type::new(
    "StatefulSet",
    &[
        METADATA,
        object("spec", &STATEFUL_SET_SPEC),
        object("status", &STATEFUL_SET_STATUS),
    ],
);

static DAEMON_SET_SPEC: Type = Type::new("DaemonSetSpec", TEMPLATE_ONLY);
static DAEMON_SET_STATUS: Type = Type::new("DaemonSetStatus", CONDITIONS);
static DAEMON_SET: Type = Type::new(
    "DaemonSet",
    &[
        METADATA,
        object("spec", &DAEMON_SET_SPEC),
        object("status", &DAEMON_SET_STATUS),
    ],
);

static CONTROLLER_REVISION: Type = Type::new("ControllerRevision", METADATA_ONLY);

// batch/v1

static JOB_SPEC: Type = Type::new("JobSpec", TEMPLATE_ONLY);
static JOB_STATUS: Type = Type::new("JobStatus", CONDITIONS);
pub static JOB: Type = Type::new(
    "Job",
    &[
        METADATA,
        object("spec", &JOB_SPEC),
        object("status", &JOB_STATUS),
    ],
);

static JOB_TEMPLATE_SPEC: Type =
    Type::new("JobTemplateSpec", &[METADATA, object("spec", &JOB_SPEC)]);
static CRON_JOB_SPEC: Type = Type::new("CronJobSpec", &[object("jobTemplate", &JOB_TEMPLATE_SPEC)]);
static CRON_JOB_STATUS: Type = Type::new("CronJobStatus", &[atomic("active", None)]);
pub static CRON_JOB: Type = Type::new(
    "CronJob",
    &[
        METADATA,
        object("spec", &CRON_JOB_SPEC),
        object("status", &CRON_JOB_STATUS),
    ],
);

// policy/v1

static POD_DISRUPTION_BUDGET_SPEC: Type =
    Type::new("PodDisruptionBudgetSpec", &[replace("selector")]);
static POD_DISRUPTION_BUDGET_STATUS: Type = Type::new("PodDisruptionBudgetStatus", CONDITIONS);
static POD_DISRUPTION_BUDGET: Type = Type::new(
    "PodDisruptionBudget",
    &[
        METADATA,
        object("spec", &POD_DISRUPTION_BUDGET_SPEC),
        object("status", &POD_DISRUPTION_BUDGET_STATUS),
    ],
);
static EVICTION: Type = Type::new("Eviction", METADATA_ONLY);
// certificates.k8s.io/v1: conditions are a list map without a patch strategy (replaced).
static CERTIFICATE_SIGNING_REQUEST: Type = Type::new("CertificateSigningRequest", METADATA_ONLY);

// rbac.authorization.k8s.io/v1: rules and subjects have no strategy.

static CLUSTER_ROLE: Type = Type::new("ClusterRole", &[METADATA, atomic("rules", None)]);
static ROLE: Type = Type::new("Role", &[METADATA, atomic("rules", None)]);
static CLUSTER_ROLE_BINDING: Type =
    Type::new("ClusterRoleBinding", &[METADATA, atomic("subjects", None)]);
static ROLE_BINDING: Type = Type::new("RoleBinding", &[METADATA, atomic("subjects", None)]);

// The other groups: nothing tagged below metadata.

static LEASE: Type = Type::new("Lease", METADATA_ONLY);
static ENDPOINT_SLICE: Type = Type::new("EndpointSlice", METADATA_ONLY);
static EVENTS_EVENT: Type = Type::new("Event", METADATA_ONLY);
static PRIORITY_CLASS: Type = Type::new("PriorityClass", METADATA_ONLY);
static SCALE: Type = Type::new("Scale", METADATA_ONLY);

// autoscaling/v2, networking.k8s.io/v1, node.k8s.io/v1: only an autoscaler's conditions merge.

static HPA_STATUS: Type = Type::new("HorizontalPodAutoscalerStatus", CONDITIONS);
static HORIZONTAL_POD_AUTOSCALER: Type = Type::new(
    "HorizontalPodAutoscaler",
    &[METADATA, object("status", &HPA_STATUS)],
);
static INGRESS: Type = Type::new("Ingress", METADATA_ONLY);
static INGRESS_CLASS: Type = Type::new("IngressClass", METADATA_ONLY);
static NETWORK_POLICY: Type = Type::new("NetworkPolicy", METADATA_ONLY);
static RUNTIME_CLASS: Type = Type::new("RuntimeClass", METADATA_ONLY);

// storage.k8s.io/v1: only a CSINode's drivers merge (by name).

static CSI_DRIVER: Type = Type::new("CSIDriver", METADATA_ONLY);
static CSI_NODE_SPEC: Type = Type::new("CSINodeSpec", &[merge_by("drivers", "name", None)]);
static CSI_NODE: Type = Type::new("CSINode", &[METADATA, object("spec", &CSI_NODE_SPEC)]);
static CSI_STORAGE_CAPACITY: Type = Type::new("CSIStorageCapacity", METADATA_ONLY);
static STORAGE_CLASS: Type = Type::new("StorageClass", METADATA_ONLY);
static VOLUME_ATTACHMENT: Type = Type::new("VolumeAttachment", METADATA_ONLY);

// admissionregistration.k8s.io/v1: webhooks merge by name, as do a policy's matchConditions.

static WEBHOOKS: &[Field] = &[METADATA, merge_by("webhooks", "name", None)];
static MUTATING_WEBHOOK_CONFIGURATION: Type = Type::new("MutatingWebhookConfiguration", WEBHOOKS);
static VALIDATING_WEBHOOK_CONFIGURATION: Type =
    Type::new("ValidatingWebhookConfiguration", WEBHOOKS);

static POLICY_SPEC: Type = Type::new(
    "ValidatingAdmissionPolicySpec",
    &[merge_by("matchConditions", "name", None)],
);
static VALIDATING_ADMISSION_POLICY: Type = Type::new(
    "ValidatingAdmissionPolicy",
    &[METADATA, object("spec", &POLICY_SPEC)],
);
static VALIDATING_ADMISSION_POLICY_BINDING: Type =
    Type::new("ValidatingAdmissionPolicyBinding", METADATA_ONLY);

// apiextensions.k8s.io/v1: a CRD's lists carry no patch strategy (they replace).
static CUSTOM_RESOURCE_DEFINITION: Type = Type::new("CustomResourceDefinition", METADATA_ONLY);

static API_SERVICE_STATUS: Type = Type::new("APIServiceStatus", CONDITIONS);
static API_SERVICE: Type = Type::new(
    "APIService",
    &[METADATA, object("status", &API_SERVICE_STATUS)],
);

// flowcontrol.apiserver.k8s.io: the specs' lists are atomic; the conditions merge by type
static FLOW_SCHEMA_STATUS: Type = Type::new("FlowSchemaStatus", CONDITIONS);
static FLOW_SCHEMA: Type = Type::new(
    "FlowSchema",
    &[METADATA, object("status", &FLOW_SCHEMA_STATUS)],
);
static PRIORITY_LEVEL_STATUS: Type = Type::new("PriorityLevelConfigurationStatus", CONDITIONS);
static PRIORITY_LEVEL: Type = Type::new(
    "PriorityLevelConfiguration",
    &[METADATA, object("status", &PRIORITY_LEVEL_STATUS)],
);

/// The patch metadata of the root of an object of `kind` in API group `group` (`""` for core),
/// `None` for kinds Skiff does not serve as built-ins.
pub fn for_kind(group: &str, kind: &str) -> Option<&'static Type> {
    let ty = match (group, kind) {
        ("", "Binding") => &BINDING,
        ("", "ConfigMap") => &CONFIG_MAP,
        ("", "Endpoints") => &ENDPOINTS,
        ("", "Event") => &EVENT,
        ("", "LimitRange") => &LIMIT_RANGE,
        ("", "Namespace") => &NAMESPACE,
        ("", "Node") => &NODE,
        ("", "PersistentVolume") => &PERSISTENT_VOLUME,
        ("", "PersistentVolumeClaim") => &PERSISTENT_VOLUME_CLAIM,
        ("", "Pod") => &POD,
        ("", "PodTemplate") => &POD_TEMPLATE,
        ("", "ReplicationController") => &REPLICATION_CONTROLLER,
        ("", "ResourceQuota") => &RESOURCE_QUOTA,
        ("", "Secret") => &SECRET,
        ("", "Service") => &SERVICE,
        ("", "ServiceAccount") => &SERVICE_ACCOUNT,
        ("apps", "ControllerRevision") => &CONTROLLER_REVISION,
        ("apps", "DaemonSet") => &DAEMON_SET,
        ("apps", "Deployment") => &DEPLOYMENT,
        ("apps", "ReplicaSet") => &REPLICA_SET,
        ("apps", "StatefulSet") => &STATEFUL_SET,
        ("autoscaling", "Scale") => &SCALE,
        ("autoscaling", "HorizontalPodAutoscaler") => &HORIZONTAL_POD_AUTOSCALER,
        ("networking.k8s.io", "Ingress") => &INGRESS,
        ("networking.k8s.io", "IngressClass") => &INGRESS_CLASS,
        ("networking.k8s.io", "NetworkPolicy") => &NETWORK_POLICY,
        ("node.k8s.io", "RuntimeClass") => &RUNTIME_CLASS,
        ("batch", "CronJob") => &CRON_JOB,
        ("batch", "Job") => &JOB,
        ("certificates.k8s.io", "CertificateSigningRequest") => &CERTIFICATE_SIGNING_REQUEST,
        ("coordination.k8s.io", "Lease") => &LEASE,
        ("discovery.k8s.io", "EndpointSlice") => &ENDPOINT_SLICE,
        ("events.k8s.io", "Event") => &EVENTS_EVENT,
        ("policy", "Eviction") => &EVICTION,
        ("policy", "PodDisruptionBudget") => &POD_DISRUPTION_BUDGET,
        ("rbac.authorization.k8s.io", "ClusterRole") => &CLUSTER_ROLE,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => &CLUSTER_ROLE_BINDING,
        ("rbac.authorization.k8s.io", "Role") => &ROLE,
        ("rbac.authorization.k8s.io", "RoleBinding") => &ROLE_BINDING,
        ("scheduling.k8s.io", "PriorityClass") => &PRIORITY_CLASS,
        ("storage.k8s.io", "CSIDriver") => &CSI_DRIVER,
        ("storage.k8s.io", "CSINode") => &CSI_NODE,
        ("storage.k8s.io", "CSIStorageCapacity") => &CSI_STORAGE_CAPACITY,
        ("storage.k8s.io", "StorageClass") => &STORAGE_CLASS,
        ("storage.k8s.io", "VolumeAttachment") => &VOLUME_ATTACHMENT,
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            &MUTATING_WEBHOOK_CONFIGURATION
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            &VALIDATING_WEBHOOK_CONFIGURATION
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            &VALIDATING_ADMISSION_POLICY
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            &VALIDATING_ADMISSION_POLICY_BINDING
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => &CUSTOM_RESOURCE_DEFINITION,
        ("apiregistration.k8s.io", "APIService") => &API_SERVICE,
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => &FLOW_SCHEMA,
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => &PRIORITY_LEVEL,
        _ => return None,
    };
    Some(ty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::builtins;

    #[test]
    fn every_catalog_kind_and_patchable_subresource_has_metadata() {
        // create-only kinds (TokenReview) are never patched
        for resource in builtins().iter().filter(|r| r.supports("patch")) {
            assert!(
                for_kind(&resource.group, &resource.kind).is_some(),
                "{}/{}",
                resource.group,
                resource.kind
            );
            // a proxy subresource passes PATCH on to its backend: no object is patched
            let patched =
                |s: &&crate::catalog::Subresource| s.supports("patch") && s.name != "proxy";
            for sub in resource.subresources.iter().filter(patched) {
                assert!(
                    for_kind(&sub.group, &sub.kind).is_some(),
                    "{}/{} of {}",
                    sub.group,
                    sub.kind,
                    resource.plural
                );
            }
        }
    }

    #[test]
    fn pod_containers_merge_by_name_and_their_ports_by_container_port() {
        let containers = POD.at("spec").unwrap().field("containers").unwrap();
        assert_eq!(containers.strategy, Strategy::Merge);
        assert_eq!(containers.merge_key, Some("name"));
        let ports = POD.at("spec.containers").unwrap().field("ports").unwrap();
        assert_eq!(ports.merge_key, Some("containerPort"));
        let env = POD
            .at("spec.ephemeralContainers")
            .unwrap()
            .field("env")
            .unwrap();
        assert_eq!(env.merge_key, Some("name"));
    }

    #[test]
    fn workloads_reach_the_pod_spec_through_their_templates() {
        for (group, kind, path) in [
            ("apps", "Deployment", "spec.template.spec"),
            ("apps", "ReplicaSet", "spec.template.spec"),
            ("apps", "StatefulSet", "spec.template.spec"),
            ("apps", "DaemonSet", "spec.template.spec"),
            ("batch", "Job", "spec.template.spec"),
            ("batch", "CronJob", "spec.jobTemplate.spec.template.spec"),
        ] {
            let spec = for_kind(group, kind).unwrap().at(path);
            assert!(
                spec.is_some_and(|t| std::ptr::eq(t, &POD_SPEC)),
                "{kind} {path}"
            );
        }
    }

    #[test]
    fn tolerations_and_rbac_rules_have_no_strategy() {
        let tolerations = POD_SPEC.field("tolerations").unwrap();
        assert_eq!(tolerations.strategy, Strategy::Default);
        let rules = for_kind("rbac.authorization.k8s.io", "ClusterRole")
            .unwrap()
            .field("rules")
            .unwrap();
        assert_eq!(rules.strategy, Strategy::Default);
        assert!(SERVICE.at("spec").unwrap().field("clusterIPs").is_none());
    }

    #[test]
    fn finalizers_merge_as_a_set_and_owner_references_by_uid() {
        let finalizers = OBJECT_META.field("finalizers").unwrap();
        assert_eq!(
            (finalizers.strategy, finalizers.merge_key),
            (Strategy::Merge, None)
        );
        assert_eq!(
            OBJECT_META.field("ownerReferences").unwrap().merge_key,
            Some("uid")
        );
    }

    #[test]
    fn volumes_and_deployment_strategy_carry_retain_keys() {
        assert!(POD_SPEC.field("volumes").unwrap().retain_keys);
        assert!(
            DEPLOYMENT
                .at("spec")
                .unwrap()
                .field("strategy")
                .unwrap()
                .retain_keys
        );
    }

    #[test]
    fn unknown_kinds_have_no_metadata() {
        assert!(for_kind("example.com", "Widget").is_none());
        assert!(for_kind("apps", "Pod").is_none());
    }
}
