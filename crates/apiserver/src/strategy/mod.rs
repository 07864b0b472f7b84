//! Per-type behaviour of the registry (upstream's `rest.RESTCreateStrategy` and friends):
//! defaulting, what a create or update may change, validation, and the fields a field selector
//! can name. One file per kind that needs more than the generic rules.
//!
//! # Layout
//! - [`generic`]: rules every kind follows (metadata, generation, status reset).
//! - [`common`]: shared checks (non-negative, int-or-percent, immutable, semantic equality) and
//!   pod templates of workloads.
//! - [`pod`]: Pod defaults, validation, initial status, field set.
//! - [`pod_seccomp`]: the deprecated seccomp annotations, checked against the fields.
//! - `pod_update`: what a pod update and a `resize` may change.
//! - [`namespace`]: Namespace phase and the `kubernetes` finalizer.
//! - [`node`]: Node pod CIDRs, taints, the `spec.unschedulable` field.
//! - [`service`]: Service defaults, kept and dropped allocations; ClusterIPs and IP families in
//!   `service_ips.rs`, the other checks in `service_validation.rs`.
//! - [`configmap`], [`secret`]: keys, the 1 MiB limit, `immutable`, Secret types.
//! - [`event`]: core Event field set and namespace check.
//! - [`replicaset`], [`deployment`], [`statefulset`], [`daemonset`]: `apps/v1` workloads.
//! - [`job`], [`cronjob`], [`cron`]: `batch/v1` Jobs, CronJobs and the cron schedule parser.
//! - [`limitrange`]: LimitRange item defaults and bounds.
//! - [`lease`], [`priorityclass`], [`pdb`], [`endpointslice`], [`rbac`]: the remaining groups.
//! - [`pvc`], [`pv`]: PersistentVolumeClaims and PersistentVolumes, over the access mode,
//!   quantity and class checks of [`volume`].
//! - [`storageclass`], [`csi`], [`volumeattachment`]: `storage.k8s.io/v1`.
//! - [`replicationcontroller`], [`podtemplate`]: the core/v1 workload kinds.
//! - [`webhookconfiguration`]: `admissionregistration.k8s.io/v1` webhook configurations.
//! - [`admissionpolicy`]: ValidatingAdmissionPolicies and their bindings.
//! - [`apiservice`]: `apiregistration.k8s.io/v1` APIServices (the aggregation layer's kind).
//! - [`certificatesigningrequest`]: `certificates.k8s.io/v1` requests, approval and status.
//! - [`hpa`], [`ingress`], [`networkpolicy`], [`runtimeclass`]: `autoscaling/v2`,
//!   `networking.k8s.io/v1` and `node.k8s.io/v1`.

pub mod admissionpolicy;
pub mod apiservice;
pub mod certificatesigningrequest;
pub mod common;
pub mod configmap;
pub mod cron;
pub mod cronjob;
pub mod csi;
pub mod daemonset;
pub mod deployment;
pub mod endpointslice;
pub mod event;
pub mod flowcontrol;
pub mod generic;
pub mod hpa;
pub mod ingress;
pub mod job;
pub mod lease;
pub mod limitrange;
pub mod namespace;
pub mod networkpolicy;
pub mod node;
pub mod pdb;
pub mod pod;
mod pod_ephemeral;
pub mod pod_seccomp;
mod pod_update;
pub mod podtemplate;
pub mod priorityclass;
pub mod pv;
pub mod pvc;
pub mod rbac;
pub mod replicaset;
pub mod replicationcontroller;
pub mod runtimeclass;
pub mod secret;
pub mod service;
pub mod statefulset;
pub mod storageclass;
pub mod volume;
pub mod volumeattachment;
pub mod webhookconfiguration;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, RwLock};

use serde_json::Value;
use skiff_apimachinery::catalog::ResourceType;
use skiff_apimachinery::validation::FieldError;

use crate::authn::UserInfo;

/// The type-specific half of create/update handling. Every method has the generic default.
pub trait Strategy: Send + Sync {
    /// Fills defaults and resets what a create may not set (e.g. status), before validation.
    fn prepare_for_create(&self, _object: &mut Value) {}

    /// Records on a new object who creates it (a CertificateSigningRequest's requester), after
    /// `prepare_for_create`.
    fn prepare_for_create_by(&self, _object: &mut Value, _user: &UserInfo) {}

    /// Completes a new object after mutating admission changed it, for what depends on those
    /// changes (a pod's QoS class, from the resources LimitRanger may have defaulted).
    fn prepare_admitted(&self, _object: &mut Value) {}

    /// Fills defaults on the new object of an update; `old` is the stored object.
    fn prepare_for_update(&self, _object: &mut Value, _old: &Value) {}

    /// Prepares a write to `subresource` (`""` for the object itself), as upstream's
    /// per-subresource strategies: what it may change of `old`. Returns `true` when this
    /// replaces `prepare_for_update` (a subresource that writes only its own fields), `false`
    /// when `prepare_for_update` follows.
    fn prepare_for_subresource_update(
        &self,
        _subresource: &str,
        _object: &mut Value,
        _old: &Value,
    ) -> bool {
        false
    }

    /// How `metadata.name` is validated: a DNS-1123 subdomain unless the kind says otherwise.
    fn name_validation(&self) -> fn(&str) -> Vec<String> {
        skiff_apimachinery::validation::is_dns1123_subdomain
    }

    /// Whether a finished delete answers with the deleted object rather than a Success Status
    /// (upstream's `ReturnDeletedObject`).
    fn returns_deleted_object(&self) -> bool {
        false
    }

    /// Field errors of a new object (metadata is validated generically).
    fn validate(&self, _object: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Field errors of an update, e.g. changes to immutable fields.
    fn validate_update(&self, object: &Value, _old: &Value) -> Vec<FieldError> {
        self.validate(object)
    }

    /// Field errors of a write to `subresource` (`""` for the object itself), as upstream's
    /// per-subresource strategies validate (a pod's `resize`, `binding`); the default is
    /// `validate_update`.
    fn validate_subresource_update(
        &self,
        _subresource: &str,
        object: &Value,
        old: &Value,
    ) -> Vec<FieldError> {
        self.validate_update(object, old)
    }

    /// Field-selector values beyond `metadata.name` and `metadata.namespace`.
    fn fields(&self, _object: &Value) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// The field (one of [`Strategy::fields`]) the watch cache indexes watches by, upstream's
    /// trigger function: a watch selecting one value of it is offered only the changes of
    /// objects with that value (see [`crate::cache::ResourceCache::watch`]).
    fn watch_index(&self) -> Option<&'static str> {
        None
    }

    /// Whether deleting needs a grace period (pods bound to a node).
    fn graceful_delete_seconds(&self, _object: &Value, _requested: Option<i64>) -> Option<i64> {
        None
    }

    /// Fills what a stored object lacks before it is served (a custom resource's schema
    /// defaults, as upstream defaults on reading from storage); whether anything changed.
    fn default_on_read(&self, _object: &mut Value) -> bool {
        false
    }

    /// Refuses every create of the type, when it must (a custom resource whose CRD is being
    /// deleted).
    fn check_create(&self) -> crate::Result<()> {
        Ok(())
    }

    /// Finalizers the first delete adds before the object goes (a CRD's
    /// `customresourcecleanup`, which removes its custom resources first).
    fn delete_finalizers(&self) -> &'static [&'static str] {
        &[]
    }

    /// What starting a delete that waits (for finalizers or a grace period) changes besides
    /// the deletion fields (a namespace turns `Terminating`).
    fn prepare_for_delete(&self, _object: &mut Value) {}

    /// Removes the fields of a received object (in its served form) that its schema does not
    /// define and returns them as `fieldValidation` reports them (`spec.foo`). Built-in kinds
    /// are checked against their OpenAPI schema.
    fn unknown_fields(&self, object: &mut Value) -> Vec<String> {
        let text = |k: &str| {
            object
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let (kind, api_version) = (text("kind"), text("apiVersion"));
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        skiff_openapi::unknown_fields(group, version, &kind, object)
    }

    /// The columns of the kind's Table when it has its own (custom resources'
    /// `additionalPrinterColumns`); `None` for the kinds the built-in printers know.
    fn table_columns(&self) -> Option<Vec<Value>> {
        None
    }

    /// One object's cells under [`Strategy::table_columns`].
    fn table_row(&self, _object: &Value, _now: jiff::Timestamp) -> Vec<Value> {
        Vec::new()
    }

    /// Where the `scale` subresource finds replicas and the selector, when not where the
    /// built-in workloads keep them.
    fn scale_paths(&self) -> Option<&ScalePaths> {
        None
    }

    /// How server-side apply sees the kind's lists and maps, when its schema says so rather
    /// than the built-in patch metadata (a custom resource's `x-kubernetes-list-type`, …).
    fn apply_schema(&self) -> Option<&skiff_apimachinery::managedfields::schema::Custom> {
        None
    }
}

/// The fields behind a custom resource's `scale` subresource, as JSON pointers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    /// Where the status holds the selector, as a string in label selector syntax.
    pub label_selector: Option<String>,
}

/// The strategy of a served type: a built-in kind's, or the one a custom resource was
/// installed with.
#[derive(Clone)]
pub enum StrategyRef {
    Builtin(&'static dyn Strategy),
    Installed(Arc<dyn Strategy>),
}

impl Deref for StrategyRef {
    type Target = dyn Strategy;

    fn deref(&self) -> &(dyn Strategy + 'static) {
        match self {
            StrategyRef::Builtin(s) => *s,
            StrategyRef::Installed(s) => &**s,
        }
    }
}

/// The strategies of the types installed at run time, by group, version and plural; built-in
/// kinds resolve to their own without a lookup.
#[derive(Default)]
pub struct Strategies(RwLock<HashMap<String, Arc<dyn Strategy>>>);

fn installed_key(rt: &ResourceType) -> String {
    format!("{}/{}/{}", rt.group, rt.version, rt.plural)
}

impl Strategies {
    /// The strategy of `rt` (`Plain` for an installed type without one).
    pub fn resolve(&self, rt: &ResourceType) -> StrategyRef {
        if rt.builtin {
            return StrategyRef::Builtin(for_resource(rt));
        }
        let installed = self.0.read().unwrap_or_else(|e| e.into_inner());
        match installed.get(&installed_key(rt)) {
            Some(s) => StrategyRef::Installed(s.clone()),
            None => StrategyRef::Builtin(&Plain),
        }
    }

    pub fn insert(&self, rt: &ResourceType, strategy: Arc<dyn Strategy>) {
        let mut installed = self.0.write().unwrap_or_else(|e| e.into_inner());
        installed.insert(installed_key(rt), strategy);
    }

    pub fn remove(&self, rt: &ResourceType) {
        let mut installed = self.0.write().unwrap_or_else(|e| e.into_inner());
        installed.remove(&installed_key(rt));
    }
}

impl std::fmt::Debug for StrategyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StrategyRef::Builtin(_) => "StrategyRef::Builtin",
            StrategyRef::Installed(_) => "StrategyRef::Installed",
        })
    }
}

/// Kinds with no rules of their own.
#[derive(Debug)]
pub struct Plain;

impl Strategy for Plain {}

/// ServiceAccounts: the generic rules; a delete answers with the account, as upstream.
struct ServiceAccountStrategy;

impl Strategy for ServiceAccountStrategy {
    fn returns_deleted_object(&self) -> bool {
        true
    }
}

/// The strategy of a resource type.
pub fn for_resource(rt: &ResourceType) -> &'static dyn Strategy {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => &pod::PodStrategy,
        ("", "namespaces") => &namespace::NamespaceStrategy,
        ("", "nodes") => &node::NodeStrategy,
        ("", "services") => &service::ServiceStrategy,
        ("", "configmaps") => &configmap::ConfigMapStrategy,
        ("", "serviceaccounts") => &ServiceAccountStrategy,
        ("", "secrets") => &secret::SecretStrategy,
        ("", "events") => &event::EventStrategy,
        ("", "persistentvolumeclaims") => &pvc::PersistentVolumeClaimStrategy,
        ("", "persistentvolumes") => &pv::PersistentVolumeStrategy,
        ("", "replicationcontrollers") => &replicationcontroller::ReplicationControllerStrategy,
        ("", "podtemplates") => &podtemplate::PodTemplateStrategy,
        ("", "limitranges") => &limitrange::LimitRangeStrategy,
        ("apps", "deployments") => &deployment::DeploymentStrategy,
        ("apps", "replicasets") => &replicaset::ReplicaSetStrategy,
        ("apps", "statefulsets") => &statefulset::StatefulSetStrategy,
        ("apps", "daemonsets") => &daemonset::DaemonSetStrategy,
        ("batch", "jobs") => &job::JobStrategy,
        ("batch", "cronjobs") => &cronjob::CronJobStrategy,
        ("coordination.k8s.io", "leases") => &lease::LeaseStrategy,
        ("scheduling.k8s.io", "priorityclasses") => &priorityclass::PriorityClassStrategy,
        ("policy", "poddisruptionbudgets") => &pdb::PodDisruptionBudgetStrategy,
        ("discovery.k8s.io", "endpointslices") => &endpointslice::EndpointSliceStrategy,
        ("rbac.authorization.k8s.io", "roles") => &rbac::RoleStrategy { namespaced: true },
        ("rbac.authorization.k8s.io", "clusterroles") => &rbac::RoleStrategy { namespaced: false },
        ("rbac.authorization.k8s.io", "rolebindings") => {
            &rbac::BindingStrategy { namespaced: true }
        }
        ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            &rbac::BindingStrategy { namespaced: false }
        }
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => &flowcontrol::FlowSchemaStrategy,
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => {
            &flowcontrol::PriorityLevelStrategy
        }
        ("storage.k8s.io", "storageclasses") => &storageclass::StorageClassStrategy,
        ("storage.k8s.io", "csidrivers") => &csi::CsiDriverStrategy,
        ("storage.k8s.io", "csinodes") => &csi::CsiNodeStrategy,
        ("storage.k8s.io", "csistoragecapacities") => &csi::CsiStorageCapacityStrategy,
        ("storage.k8s.io", "volumeattachments") => &volumeattachment::VolumeAttachmentStrategy,
        ("autoscaling", "horizontalpodautoscalers") => &hpa::HorizontalPodAutoscalerStrategy,
        ("networking.k8s.io", "ingresses") => &ingress::IngressStrategy,
        ("networking.k8s.io", "ingressclasses") => &ingress::IngressClassStrategy,
        ("networking.k8s.io", "networkpolicies") => &networkpolicy::NetworkPolicyStrategy,
        ("node.k8s.io", "runtimeclasses") => &runtimeclass::RuntimeClassStrategy,
        ("certificates.k8s.io", "certificatesigningrequests") => {
            &certificatesigningrequest::CertificateSigningRequestStrategy
        }
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            &webhookconfiguration::WebhookConfigurationStrategy { mutating: true }
        }
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations") => {
            &webhookconfiguration::WebhookConfigurationStrategy { mutating: false }
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            &admissionpolicy::PolicyStrategy
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            &admissionpolicy::BindingStrategy
        }
        ("apiregistration.k8s.io", "apiservices") => &apiservice::ApiServiceStrategy,
        (crate::crd::GROUP, crate::crd::PLURAL) => {
            &crate::crd::definition::CustomResourceDefinitionStrategy
        }
        _ => &Plain,
    }
}

/// Reads a string at a dotted path (`spec.nodeName`), empty when absent.
pub fn string_at(object: &Value, path: &str) -> String {
    let mut v = object;
    for part in path.split('.') {
        match v.get(part) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
