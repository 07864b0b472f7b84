//! The built-in resource types Skiff serves: group, version, kind, plural and singular names,
//! scope, short names, categories, verbs and subresources, as upstream's discovery reports them.
//!
//! Discovery, OpenAPI, the REST router and storage all read this one table, so a resource exists
//! everywhere or nowhere.

/// Verbs of a read-write collection (upstream's `get list watch create update patch delete
/// deletecollection`).
const CRUD: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
/// Namespaces cannot be deleted as a collection (upstream).
const CRUD_NO_COLLECTION: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
const CREATE: &[&str] = &["create"];
const GET: &[&str] = &["get"];

/// One subresource (`pods/status`, `deployments/scale`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subresource {
    /// The path segment after the object name (`status`, `scale`, `binding`, `log`).
    pub name: &'static str,
    /// Group of the kind the subresource speaks (`""` for core, `autoscaling` for `scale`).
    pub group: &'static str,
    /// Version of that kind.
    pub version: &'static str,
    /// The kind sent and returned (`Pod` for `status`, `Scale`, `Binding`, `Eviction`).
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

impl Subresource {
    const fn new(
        name: &'static str,
        (group, version, kind): (&'static str, &'static str, &'static str),
        verbs: &'static [&'static str],
    ) -> Self {
        Self {
            name,
            group,
            version,
            kind,
            verbs,
        }
    }
}

/// One resource type of the API (`pods` in core/v1, `deployments` in apps/v1, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, `""` for the core (legacy) group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The URL segment and storage name (`pods`).
    pub plural: &'static str,
    pub singular: &'static str,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Categories (`all` makes `kubectl get all` include the resource).
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub subresources: &'static [Subresource],
}

impl ResourceType {
    /// `v1` for core, `apps/v1` otherwise: the `apiVersion` of objects of this type.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects (`PodList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// Whether the resource has a `status` subresource (writes to the object then ignore
    /// `.status`, and writes to `/status` ignore everything else).
    pub fn has_status(&self) -> bool {
        self.subresource("status").is_some()
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }
}

const fn status_of(kind: (&'static str, &'static str, &'static str)) -> Subresource {
    Subresource::new("status", kind, GET_PATCH_UPDATE)
}

const SCALE: (&str, &str, &str) = ("autoscaling", "v1", "Scale");

#[allow(clippy::too_many_arguments)]
const fn rt(
    (group, version, kind): (&'static str, &'static str, &'static str),
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    verbs: &'static [&'static str],
    subresources: &'static [Subresource],
) -> ResourceType {
    ResourceType {
        group,
        version,
        kind,
        plural,
        singular,
        namespaced,
        short_names,
        categories,
        verbs,
        subresources,
    }
}

const NS: bool = true;
const CLUSTER: bool = false;
const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];
const NO_SUB: &[Subresource] = &[];

/// Every resource type Skiff serves, in discovery order (core first, then groups as upstream
/// orders them).
pub static RESOURCES: &[ResourceType] = &[
    // core/v1
    rt(
        ("", "v1", "Binding"),
        "bindings",
        "binding",
        NS,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    rt(
        ("", "v1", "ConfigMap"),
        "configmaps",
        "configmap",
        NS,
        &["cm"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("", "v1", "Endpoints"),
        "endpoints",
        "endpoints",
        NS,
        &["ep"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("", "v1", "Event"),
        "events",
        "event",
        NS,
        &["ev"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("", "v1", "LimitRange"),
        "limitranges",
        "limitrange",
        NS,
        &["limits"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("", "v1", "Namespace"),
        "namespaces",
        "namespace",
        CLUSTER,
        &["ns"],
        NONE,
        CRUD_NO_COLLECTION,
        &[
            Subresource::new("finalize", ("", "v1", "Namespace"), &["update"]),
            status_of(("", "v1", "Namespace")),
        ],
    ),
    rt(
        ("", "v1", "Node"),
        "nodes",
        "node",
        CLUSTER,
        &["no"],
        NONE,
        CRUD,
        &[status_of(("", "v1", "Node"))],
    ),
    rt(
        ("", "v1", "PersistentVolumeClaim"),
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        NS,
        &["pvc"],
        NONE,
        CRUD,
        &[status_of(("", "v1", "PersistentVolumeClaim"))],
    ),
    rt(
        ("", "v1", "PersistentVolume"),
        "persistentvolumes",
        "persistentvolume",
        CLUSTER,
        &["pv"],
        NONE,
        CRUD,
        &[status_of(("", "v1", "PersistentVolume"))],
    ),
    rt(
        ("", "v1", "Pod"),
        "pods",
        "pod",
        NS,
        &["po"],
        ALL,
        CRUD,
        &[
            Subresource::new("attach", ("", "v1", "PodAttachOptions"), &["create", "get"]),
            Subresource::new("binding", ("", "v1", "Binding"), CREATE),
            Subresource::new("eviction", ("policy", "v1", "Eviction"), CREATE),
            Subresource::new("exec", ("", "v1", "PodExecOptions"), &["create", "get"]),
            Subresource::new("log", ("", "v1", "Pod"), GET),
            Subresource::new(
                "portforward",
                ("", "v1", "PodPortForwardOptions"),
                &["create", "get"],
            ),
            status_of(("", "v1", "Pod")),
        ],
    ),
    rt(
        ("", "v1", "PodTemplate"),
        "podtemplates",
        "podtemplate",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("", "v1", "ReplicationController"),
        "replicationcontrollers",
        "replicationcontroller",
        NS,
        &["rc"],
        ALL,
        CRUD,
        &[
            Subresource::new("scale", SCALE, GET_PATCH_UPDATE),
            status_of(("", "v1", "ReplicationController")),
        ],
    ),
    rt(
        ("", "v1", "ResourceQuota"),
        "resourcequotas",
        "resourcequota",
        NS,
        &["quota"],
        NONE,
        CRUD,
        &[status_of(("", "v1", "ResourceQuota"))],
    ),
    rt(
        ("", "v1", "Secret"),
        "secrets",
        "secret",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("", "v1", "ServiceAccount"),
        "serviceaccounts",
        "serviceaccount",
        NS,
        &["sa"],
        NONE,
        CRUD,
        &[Subresource::new(
            "token",
            ("authentication.k8s.io", "v1", "TokenRequest"),
            CREATE,
        )],
    ),
    rt(
        ("", "v1", "Service"),
        "services",
        "service",
        NS,
        &["svc"],
        ALL,
        CRUD,
        &[status_of(("", "v1", "Service"))],
    ),
    // apps/v1
    rt(
        ("apps", "v1", "ControllerRevision"),
        "controllerrevisions",
        "controllerrevision",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("apps", "v1", "DaemonSet"),
        "daemonsets",
        "daemonset",
        NS,
        &["ds"],
        ALL,
        CRUD,
        &[status_of(("apps", "v1", "DaemonSet"))],
    ),
    rt(
        ("apps", "v1", "Deployment"),
        "deployments",
        "deployment",
        NS,
        &["deploy"],
        ALL,
        CRUD,
        &[
            Subresource::new("scale", SCALE, GET_PATCH_UPDATE),
            status_of(("apps", "v1", "Deployment")),
        ],
    ),
    rt(
        ("apps", "v1", "ReplicaSet"),
        "replicasets",
        "replicaset",
        NS,
        &["rs"],
        ALL,
        CRUD,
        &[
            Subresource::new("scale", SCALE, GET_PATCH_UPDATE),
            status_of(("apps", "v1", "ReplicaSet")),
        ],
    ),
    rt(
        ("apps", "v1", "StatefulSet"),
        "statefulsets",
        "statefulset",
        NS,
        &["sts"],
        ALL,
        CRUD,
        &[
            Subresource::new("scale", SCALE, GET_PATCH_UPDATE),
            status_of(("apps", "v1", "StatefulSet")),
        ],
    ),
    // authentication.k8s.io/v1 and authorization.k8s.io/v1: the reviews, create-only and never
    // stored (the API server answers them)
    rt(
        ("authentication.k8s.io", "v1", "SelfSubjectReview"),
        "selfsubjectreviews",
        "selfsubjectreview",
        CLUSTER,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    rt(
        ("authentication.k8s.io", "v1", "TokenReview"),
        "tokenreviews",
        "tokenreview",
        CLUSTER,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    rt(
        ("authorization.k8s.io", "v1", "LocalSubjectAccessReview"),
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
        NS,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    rt(
        ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"),
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
        CLUSTER,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    rt(
        ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"),
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
        CLUSTER,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    rt(
        ("authorization.k8s.io", "v1", "SubjectAccessReview"),
        "subjectaccessreviews",
        "subjectaccessreview",
        CLUSTER,
        NONE,
        NONE,
        CREATE,
        NO_SUB,
    ),
    // autoscaling/v2
    rt(
        ("autoscaling", "v2", "HorizontalPodAutoscaler"),
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        NS,
        &["hpa"],
        ALL,
        CRUD,
        &[status_of(("autoscaling", "v2", "HorizontalPodAutoscaler"))],
    ),
    // batch/v1
    rt(
        ("batch", "v1", "CronJob"),
        "cronjobs",
        "cronjob",
        NS,
        &["cj"],
        ALL,
        CRUD,
        &[status_of(("batch", "v1", "CronJob"))],
    ),
    rt(
        ("batch", "v1", "Job"),
        "jobs",
        "job",
        NS,
        NONE,
        ALL,
        CRUD,
        &[status_of(("batch", "v1", "Job"))],
    ),
    // certificates.k8s.io/v1
    rt(
        ("certificates.k8s.io", "v1", "CertificateSigningRequest"),
        "certificatesigningrequests",
        "certificatesigningrequest",
        CLUSTER,
        &["csr"],
        NONE,
        CRUD,
        &[
            Subresource::new(
                "approval",
                ("certificates.k8s.io", "v1", "CertificateSigningRequest"),
                GET_PATCH_UPDATE,
            ),
            status_of(("certificates.k8s.io", "v1", "CertificateSigningRequest")),
        ],
    ),
    // coordination.k8s.io/v1
    rt(
        ("coordination.k8s.io", "v1", "Lease"),
        "leases",
        "lease",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    // discovery.k8s.io/v1
    rt(
        ("discovery.k8s.io", "v1", "EndpointSlice"),
        "endpointslices",
        "endpointslice",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    // events.k8s.io/v1
    rt(
        ("events.k8s.io", "v1", "Event"),
        "events",
        "event",
        NS,
        &["ev"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    // networking.k8s.io/v1
    rt(
        ("networking.k8s.io", "v1", "IngressClass"),
        "ingressclasses",
        "ingressclass",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("networking.k8s.io", "v1", "Ingress"),
        "ingresses",
        "ingress",
        NS,
        &["ing"],
        NONE,
        CRUD,
        &[status_of(("networking.k8s.io", "v1", "Ingress"))],
    ),
    rt(
        ("networking.k8s.io", "v1", "NetworkPolicy"),
        "networkpolicies",
        "networkpolicy",
        NS,
        &["netpol"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    // node.k8s.io/v1
    rt(
        ("node.k8s.io", "v1", "RuntimeClass"),
        "runtimeclasses",
        "runtimeclass",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    // policy/v1
    rt(
        ("policy", "v1", "PodDisruptionBudget"),
        "poddisruptionbudgets",
        "poddisruptionbudget",
        NS,
        &["pdb"],
        NONE,
        CRUD,
        &[status_of(("policy", "v1", "PodDisruptionBudget"))],
    ),
    // rbac.authorization.k8s.io/v1
    rt(
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
        "clusterrolebindings",
        "clusterrolebinding",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        "clusterroles",
        "clusterrole",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        "rolebindings",
        "rolebinding",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("rbac.authorization.k8s.io", "v1", "Role"),
        "roles",
        "role",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    // scheduling.k8s.io/v1
    rt(
        ("scheduling.k8s.io", "v1", "PriorityClass"),
        "priorityclasses",
        "priorityclass",
        CLUSTER,
        &["pc"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    // storage.k8s.io/v1
    rt(
        ("storage.k8s.io", "v1", "CSIDriver"),
        "csidrivers",
        "csidriver",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("storage.k8s.io", "v1", "CSINode"),
        "csinodes",
        "csinode",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("storage.k8s.io", "v1", "CSIStorageCapacity"),
        "csistoragecapacities",
        "csistoragecapacity",
        NS,
        NONE,
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("storage.k8s.io", "v1", "StorageClass"),
        "storageclasses",
        "storageclass",
        CLUSTER,
        &["sc"],
        NONE,
        CRUD,
        NO_SUB,
    ),
    rt(
        ("storage.k8s.io", "v1", "VolumeAttachment"),
        "volumeattachments",
        "volumeattachment",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        &[status_of(("storage.k8s.io", "v1", "VolumeAttachment"))],
    ),
    // admissionregistration.k8s.io/v1 (after storage, as upstream's discovery orders it)
    rt(
        (
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
        ),
        "mutatingwebhookconfigurations",
        "mutatingwebhookconfiguration",
        CLUSTER,
        NONE,
        &["api-extensions"],
        CRUD,
        NO_SUB,
    ),
    rt(
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        ),
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        CLUSTER,
        NONE,
        &["api-extensions"],
        CRUD,
        &[status_of((
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicy",
        ))],
    ),
    rt(
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingAdmissionPolicyBinding",
        ),
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        CLUSTER,
        NONE,
        &["api-extensions"],
        CRUD,
        NO_SUB,
    ),
    rt(
        (
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ),
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        CLUSTER,
        NONE,
        &["api-extensions"],
        CRUD,
        NO_SUB,
    ),
];

/// The API groups in discovery order, each with its one served version.
pub fn groups() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !out.iter().any(|(g, _)| *g == r.group) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// The resource type at `group/version/plural`.
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource type of `apiVersion`/`kind` (`apps/v1`, `Deployment`).
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plural_is_unique_within_its_group() {
        for (i, a) in RESOURCES.iter().enumerate() {
            for b in &RESOURCES[i + 1..] {
                assert!(
                    !(a.group == b.group && a.plural == b.plural),
                    "{}/{} twice",
                    a.group,
                    a.plural
                );
            }
        }
    }

    #[test]
    fn lookups_find_core_and_group_resources() {
        assert_eq!(lookup("", "v1", "pods").unwrap().kind, "Pod");
        assert_eq!(
            by_kind("apps/v1", "Deployment").unwrap().plural,
            "deployments"
        );
        assert!(!by_kind("v1", "Namespace").unwrap().namespaced);
        assert!(lookup("apps", "v1", "pods").is_none());
    }

    #[test]
    fn groups_are_listed_once_in_order() {
        let groups = groups();
        assert_eq!(groups[0], ("apps", "v1"));
        assert_eq!(groups.len(), 16);
    }
}
