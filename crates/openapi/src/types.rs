//! The k8s-openapi types whose JSON schemas make up the documents: every kind Skiff serves or may
//! soon serve, the kinds its subresources speak, and the meta types its operations return.
//!
//! Kinds come with their group, version and kind from `k8s_openapi::Resource`, so the
//! `x-kubernetes-group-version-kind` extension is never typed by hand.

use k8s_openapi::api::{
    admissionregistration::v1 as admissionregistration_v1, apps::v1 as apps_v1,
    authentication::v1 as authentication_v1, authorization::v1 as authorization_v1,
    autoscaling::v1 as autoscaling_v1, autoscaling::v2 as autoscaling_v2, batch::v1 as batch_v1,
    certificates::v1 as certificates_v1, coordination::v1 as coordination_v1, core::v1 as core_v1,
    discovery::v1 as discovery_v1, events::v1 as events_v1, flowcontrol::v1 as flowcontrol_v1,
    networking::v1 as networking_v1, node::v1 as node_v1, policy::v1 as policy_v1,
    rbac::v1 as rbac_v1, scheduling::v1 as scheduling_v1, storage::v1 as storage_v1,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions_v1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta_v1;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration_v1;
use schemars::{JsonSchema, SchemaGenerator};

/// Group, version and kind of a top-level type (`("apps", "v1", "Deployment")`).
pub type Gvk = (&'static str, &'static str, &'static str);

/// One type whose schema (and everything it references) goes into the registry.
pub(crate) struct Root {
    /// The upstream definition name (`io.k8s.api.core.v1.Pod`).
    pub name: String,
    /// The kind it is, for kinds; `None` for meta types shared by every group.
    pub gvk: Option<Gvk>,
}

fn kind<T: JsonSchema + k8s_openapi::Resource>(generator: &mut SchemaGenerator) -> Root {
    generator.subschema_for::<T>();
    Root {
        name: T::schema_name().into_owned(),
        gvk: Some((T::GROUP, T::VERSION, T::KIND)),
    }
}

fn meta<T: JsonSchema>(generator: &mut SchemaGenerator) -> Root {
    generator.subschema_for::<T>();
    Root {
        name: T::schema_name().into_owned(),
        gvk: None,
    }
}

/// Generates the schema of every root type into `generator` and returns the roots.
pub(crate) fn generate(generator: &mut SchemaGenerator) -> Vec<Root> {
    let g = generator;
    vec![
        // core/v1
        kind::<core_v1::Binding>(g),
        kind::<core_v1::ComponentStatus>(g),
        kind::<core_v1::ConfigMap>(g),
        kind::<core_v1::Endpoints>(g),
        kind::<core_v1::Event>(g),
        kind::<core_v1::LimitRange>(g),
        kind::<core_v1::Namespace>(g),
        kind::<core_v1::Node>(g),
        kind::<core_v1::PersistentVolume>(g),
        kind::<core_v1::PersistentVolumeClaim>(g),
        kind::<core_v1::Pod>(g),
        kind::<core_v1::PodTemplate>(g),
        kind::<core_v1::ReplicationController>(g),
        kind::<core_v1::ResourceQuota>(g),
        kind::<core_v1::Secret>(g),
        kind::<core_v1::Service>(g),
        kind::<core_v1::ServiceAccount>(g),
        // apps/v1
        kind::<apps_v1::ControllerRevision>(g),
        kind::<apps_v1::DaemonSet>(g),
        kind::<apps_v1::Deployment>(g),
        kind::<apps_v1::ReplicaSet>(g),
        kind::<apps_v1::StatefulSet>(g),
        // autoscaling
        kind::<autoscaling_v1::Scale>(g),
        kind::<autoscaling_v1::HorizontalPodAutoscaler>(g),
        kind::<autoscaling_v2::HorizontalPodAutoscaler>(g),
        // batch/v1
        kind::<batch_v1::CronJob>(g),
        kind::<batch_v1::Job>(g),
        // coordination, discovery, events
        kind::<coordination_v1::Lease>(g),
        kind::<discovery_v1::EndpointSlice>(g),
        kind::<events_v1::Event>(g),
        // policy/v1
        kind::<policy_v1::Eviction>(g),
        kind::<policy_v1::PodDisruptionBudget>(g),
        // rbac.authorization.k8s.io/v1
        kind::<rbac_v1::ClusterRole>(g),
        kind::<rbac_v1::ClusterRoleBinding>(g),
        kind::<rbac_v1::Role>(g),
        kind::<rbac_v1::RoleBinding>(g),
        // scheduling, networking, storage, node
        kind::<scheduling_v1::PriorityClass>(g),
        kind::<networking_v1::Ingress>(g),
        kind::<networking_v1::IngressClass>(g),
        kind::<networking_v1::NetworkPolicy>(g),
        kind::<storage_v1::CSIDriver>(g),
        kind::<storage_v1::CSINode>(g),
        kind::<storage_v1::CSIStorageCapacity>(g),
        kind::<storage_v1::StorageClass>(g),
        kind::<storage_v1::VolumeAttachment>(g),
        kind::<node_v1::RuntimeClass>(g),
        // authentication, authorization, certificates, admission, flow control, CRDs, APIServices
        kind::<authentication_v1::TokenRequest>(g),
        kind::<authentication_v1::TokenReview>(g),
        kind::<authentication_v1::SelfSubjectReview>(g),
        kind::<authorization_v1::LocalSubjectAccessReview>(g),
        kind::<authorization_v1::SelfSubjectAccessReview>(g),
        kind::<authorization_v1::SelfSubjectRulesReview>(g),
        kind::<authorization_v1::SubjectAccessReview>(g),
        kind::<certificates_v1::CertificateSigningRequest>(g),
        kind::<admissionregistration_v1::MutatingWebhookConfiguration>(g),
        kind::<admissionregistration_v1::ValidatingWebhookConfiguration>(g),
        kind::<admissionregistration_v1::ValidatingAdmissionPolicy>(g),
        kind::<admissionregistration_v1::ValidatingAdmissionPolicyBinding>(g),
        kind::<flowcontrol_v1::FlowSchema>(g),
        kind::<flowcontrol_v1::PriorityLevelConfiguration>(g),
        kind::<apiextensions_v1::CustomResourceDefinition>(g),
        kind::<apiregistration_v1::APIService>(g),
        // meta types that operations take and return
        kind::<meta_v1::Status>(g),
        meta::<meta_v1::DeleteOptions>(g),
        meta::<meta_v1::WatchEvent<core_v1::Pod>>(g),
        meta::<meta_v1::Patch>(g),
        kind::<meta_v1::APIResourceList>(g),
        kind::<meta_v1::APIGroup>(g),
        kind::<meta_v1::APIGroupList>(g),
        kind::<meta_v1::APIVersions>(g),
    ]
}
