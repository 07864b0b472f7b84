//! The resource types the API serves: group, version, kind, plural and singular names, scope,
//! short names, categories, verbs and subresources, as upstream's discovery reports them.
//!
//! The built-in types are a static table ([`builtins`]); the set served at any moment is a
//! [`Catalog`], held by a [`Registry`] that changes while the server runs (custom resources are
//! installed and removed). Discovery, OpenAPI, the REST router and the watch cache all read the
//! registry, so a resource exists everywhere or nowhere.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

/// One subresource (`pods/status`, `deployments/scale`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subresource {
    /// The path segment after the object name (`status`, `scale`, `binding`, `log`).
    pub name: String,
    /// Group of the kind the subresource speaks (`""` for core, `autoscaling` for `scale`).
    pub group: String,
    /// Version of that kind.
    pub version: String,
    /// The kind sent and returned (`Pod` for `status`, `Scale`, `Binding`, `Eviction`).
    pub kind: String,
    pub verbs: Vec<String>,
}

impl Subresource {
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

/// One resource type of the API (`pods` in core/v1, `deployments` in apps/v1, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, `""` for the core (legacy) group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The URL segment and storage name (`pods`).
    pub plural: String,
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Categories (`all` makes `kubectl get all` include the resource).
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    pub subresources: Vec<Subresource>,
    /// Whether the type is one of Skiff's own ([`builtins`]) rather than installed at run time.
    pub builtin: bool,
    /// The version objects are stored as, when it is not `version` (a custom resource served in
    /// several versions).
    pub storage_version: Option<String>,
}

impl ResourceType {
    /// `v1` for core, `apps/v1` otherwise: the `apiVersion` of objects of this type.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects (`PodList`).
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    /// Whether the resource has a `status` subresource (writes to the object then ignore
    /// `.status`, and writes to `/status` ignore everything else).
    pub fn has_status(&self) -> bool {
        self.subresource("status").is_some()
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// Whether `name` is one of the type's short names.
    pub fn has_short_name(&self, name: &str) -> bool {
        self.short_names.iter().any(|s| s == name)
    }

    /// Whether the type is in `category` (`all`).
    pub fn in_category(&self, category: &str) -> bool {
        self.categories.iter().any(|c| c == category)
    }
}

/// One API group as discovery lists it: its served versions, the preferred one first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub versions: Vec<String>,
}

impl Group {
    pub fn preferred(&self) -> &str {
        &self.versions[0]
    }
}

/// The resource types served at one moment, in discovery order (core first, then groups as
/// upstream orders them, then installed groups in the order they arrived). Immutable: a change
/// makes a new catalog ([`Registry`]), so a request reads one consistent set.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    types: Vec<Arc<ResourceType>>,
    /// Positions in `types` by plural (a few groups share a plural: `events`).
    by_plural: HashMap<String, Vec<usize>>,
}

impl Catalog {
    fn new(types: Vec<Arc<ResourceType>>) -> Self {
        let mut by_plural: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, t) in types.iter().enumerate() {
            by_plural.entry(t.plural.clone()).or_default().push(i);
        }
        Self { types, by_plural }
    }

    /// Every type, in discovery order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.iter()
    }

    /// The type at `group/version/plural`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<ResourceType>> {
        self.by_plural
            .get(plural)?
            .iter()
            .map(|&i| &self.types[i])
            .find(|r| r.group == group && r.version == version)
    }

    /// The type of `apiVersion`/`kind` (`apps/v1`, `Deployment`).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&Arc<ResourceType>> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.types
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
    }

    /// The named groups (not core) in discovery order, each with its served versions.
    pub fn groups(&self) -> Vec<Group> {
        let mut out: Vec<Group> = Vec::new();
        for r in self.types.iter().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|g| g.name == r.group) {
                Some(g) if !g.versions.contains(&r.version) => g.versions.push(r.version.clone()),
                Some(_) => {}
                None => out.push(Group {
                    name: r.group.clone(),
                    versions: vec![r.version.clone()],
                }),
            }
        }
        out
    }

    /// Whether `group/version` is served.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.types
            .iter()
            .any(|r| r.group == group && r.version == version)
    }

    /// This catalog with `types` added, replacing any served at the same group, version and
    /// plural. New types go after the others of their group (or at the end).
    pub fn with(&self, types: impl IntoIterator<Item = ResourceType>) -> Catalog {
        let mut all = self.types.clone();
        for t in types {
            match all
                .iter()
                .position(|r| r.group == t.group && r.version == t.version && r.plural == t.plural)
            {
                Some(i) => all[i] = Arc::new(t),
                None => {
                    let at = all
                        .iter()
                        .rposition(|r| r.group == t.group)
                        .map_or(all.len(), |i| i + 1);
                    all.insert(at, Arc::new(t));
                }
            }
        }
        Catalog::new(all)
    }

    /// This catalog without the types of `group` and `plural` that `keep` refuses (every version
    /// of a custom resource when `keep` is always false).
    pub fn without(
        &self,
        group: &str,
        plural: &str,
        keep: impl Fn(&ResourceType) -> bool,
    ) -> Catalog {
        let all = self
            .types
            .iter()
            .filter(|r| r.builtin || r.group != group || r.plural != plural || keep(r))
            .cloned()
            .collect();
        Catalog::new(all)
    }
}

/// The catalog currently served, replaced whole on every change. Readers take a snapshot (an
/// `Arc` clone under a read lock held for no longer than that); writers are rare (a CRD
/// established or removed). A std `RwLock` because it is never held across an await.
#[derive(Debug)]
pub struct Registry {
    current: RwLock<Arc<Catalog>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A registry serving the built-in types.
    pub fn new() -> Self {
        Self {
            current: RwLock::new(Arc::new(Catalog::new(builtins().to_vec()))),
        }
    }

    /// The catalog as it is now.
    pub fn snapshot(&self) -> Arc<Catalog> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The type at `group/version/plural`, if served now.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.snapshot().lookup(group, version, plural).cloned()
    }

    /// Replaces the catalog with `change(current)`.
    pub fn update(&self, change: impl FnOnce(&Catalog) -> Catalog) {
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        *current = Arc::new(change(&current));
    }
}

/// Verbs of a read-write collection (upstream's `get list watch create update patch delete
/// deletecollection`).
pub const CRUD: &[&str] = &[
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
/// The proxy subresources' verbs (the HTTP methods they pass on).
const PROXY: &[&str] = &["create", "delete", "get", "patch", "update"];

/// A subresource of the static table.
struct SubSpec {
    name: &'static str,
    kind: (&'static str, &'static str, &'static str),
    verbs: &'static [&'static str],
}

impl SubSpec {
    const fn new(
        name: &'static str,
        kind: (&'static str, &'static str, &'static str),
        verbs: &'static [&'static str],
    ) -> Self {
        Self { name, kind, verbs }
    }
}

/// A built-in type of the static table.
struct Spec {
    kind: (&'static str, &'static str, &'static str),
    plural: &'static str,
    singular: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    verbs: &'static [&'static str],
    subresources: &'static [SubSpec],
    /// The version objects are stored and handled in, when not `kind`'s (an older version
    /// served as a view of a newer one).
    storage_version: Option<&'static str>,
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

impl Spec {
    fn build(&self) -> ResourceType {
        let (group, version, kind) = self.kind;
        ResourceType {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: self.plural.into(),
            singular: self.singular.into(),
            namespaced: self.namespaced,
            short_names: strings(self.short_names),
            categories: strings(self.categories),
            verbs: strings(self.verbs),
            subresources: self
                .subresources
                .iter()
                .map(|s| Subresource {
                    name: s.name.into(),
                    group: s.kind.0.into(),
                    version: s.kind.1.into(),
                    kind: s.kind.2.into(),
                    verbs: strings(s.verbs),
                })
                .collect(),
            builtin: true,
            storage_version: self.storage_version.map(str::to_string),
        }
    }

    /// This type, its objects stored and handled as `version`.
    const fn stored_as(self, version: &'static str) -> Spec {
        Spec {
            storage_version: Some(version),
            ..self
        }
    }
}

const fn status_of(kind: (&'static str, &'static str, &'static str)) -> SubSpec {
    SubSpec::new("status", kind, GET_PATCH_UPDATE)
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
    subresources: &'static [SubSpec],
) -> Spec {
    Spec {
        kind: (group, version, kind),
        plural,
        singular,
        namespaced,
        short_names,
        categories,
        verbs,
        subresources,
        storage_version: None,
    }
}

const NS: bool = true;
const CLUSTER: bool = false;
const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];
const NO_SUB: &[SubSpec] = &[];

/// Every built-in resource type, in discovery order (core first, then groups as upstream
/// orders them).
static SPECS: &[Spec] = &[
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
            SubSpec::new("finalize", ("", "v1", "Namespace"), &["update"]),
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
        &[
            SubSpec::new("proxy", ("", "v1", "NodeProxyOptions"), PROXY),
            status_of(("", "v1", "Node")),
        ],
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
            SubSpec::new("attach", ("", "v1", "PodAttachOptions"), &["create", "get"]),
            SubSpec::new("binding", ("", "v1", "Binding"), CREATE),
            SubSpec::new("ephemeralcontainers", ("", "v1", "Pod"), GET_PATCH_UPDATE),
            SubSpec::new("eviction", ("policy", "v1", "Eviction"), CREATE),
            SubSpec::new("exec", ("", "v1", "PodExecOptions"), &["create", "get"]),
            SubSpec::new("log", ("", "v1", "Pod"), GET),
            SubSpec::new(
                "portforward",
                ("", "v1", "PodPortForwardOptions"),
                &["create", "get"],
            ),
            SubSpec::new("proxy", ("", "v1", "PodProxyOptions"), PROXY),
            SubSpec::new("resize", ("", "v1", "Pod"), GET_PATCH_UPDATE),
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
            SubSpec::new("scale", SCALE, GET_PATCH_UPDATE),
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
        &[SubSpec::new(
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
        &[
            SubSpec::new("proxy", ("", "v1", "ServiceProxyOptions"), PROXY),
            status_of(("", "v1", "Service")),
        ],
    ),
    // apiregistration.k8s.io/v1 (first of the named groups, as upstream's discovery orders it)
    rt(
        ("apiregistration.k8s.io", "v1", "APIService"),
        "apiservices",
        "apiservice",
        CLUSTER,
        NONE,
        &["api-extensions"],
        CRUD,
        &[status_of(("apiregistration.k8s.io", "v1", "APIService"))],
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
            SubSpec::new("scale", SCALE, GET_PATCH_UPDATE),
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
            SubSpec::new("scale", SCALE, GET_PATCH_UPDATE),
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
            SubSpec::new("scale", SCALE, GET_PATCH_UPDATE),
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
    // autoscaling/v1: a view of v2 (crate::autoscaling)
    rt(
        ("autoscaling", "v1", "HorizontalPodAutoscaler"),
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        NS,
        &["hpa"],
        ALL,
        CRUD,
        &[status_of(("autoscaling", "v1", "HorizontalPodAutoscaler"))],
    )
    .stored_as("v2"),
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
            SubSpec::new(
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
    // flowcontrol.apiserver.k8s.io/v1: API Priority and Fairness's configuration
    rt(
        ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema"),
        "flowschemas",
        "flowschema",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        &[status_of((
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "FlowSchema",
        ))],
    ),
    rt(
        (
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
        ),
        "prioritylevelconfigurations",
        "prioritylevelconfiguration",
        CLUSTER,
        NONE,
        NONE,
        CRUD,
        &[status_of((
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "PriorityLevelConfiguration",
        ))],
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
    // apiextensions.k8s.io/v1
    rt(
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
        "customresourcedefinition",
        CLUSTER,
        &["crd", "crds"],
        &["api-extensions"],
        CRUD,
        &[status_of((
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        ))],
    ),
];

static BUILTINS: LazyLock<Vec<Arc<ResourceType>>> =
    LazyLock::new(|| SPECS.iter().map(|s| Arc::new(s.build())).collect());

/// Every built-in resource type, in discovery order.
pub fn builtins() -> &'static [Arc<ResourceType>] {
    &BUILTINS
}

/// The built-in type at `group/version/plural` (what code that names a built-in kind uses;
/// requests look types up in the [`Registry`]).
pub fn lookup(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    builtins()
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
        .map(|r| &**r)
}

/// The built-in type of `apiVersion`/`kind` (`apps/v1`, `Deployment`).
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    builtins()
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
        .map(|r| &**r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_plural_is_unique_within_its_group_version() {
        let all = builtins();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(
                    !(a.group == b.group && a.version == b.version && a.plural == b.plural),
                    "{}/{}/{} twice",
                    a.group,
                    a.version,
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
        let groups = Registry::new().snapshot().groups();
        assert_eq!(groups[0].name, "apiregistration.k8s.io");
        assert_eq!(groups[1].name, "apps");
        assert_eq!(groups[1].versions, ["v1"]);
        assert_eq!(groups.len(), 19);
    }

    fn widget(version: &str) -> ResourceType {
        ResourceType {
            group: "example.com".into(),
            version: version.into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            namespaced: true,
            short_names: vec!["wd".into()],
            categories: vec![],
            verbs: strings(CRUD),
            subresources: vec![],
            builtin: false,
            storage_version: None,
        }
    }

    #[test]
    fn an_installed_type_is_served_until_removed() {
        let registry = Registry::new();
        let before = registry.snapshot();
        registry.update(|c| c.with([widget("v1"), widget("v1beta1")]));
        let now = registry.snapshot();
        assert_eq!(
            now.lookup("example.com", "v1", "widgets").unwrap().kind,
            "Widget"
        );
        assert!(now.serves("example.com", "v1beta1"));
        let group = now.groups().pop().unwrap();
        assert_eq!(
            (group.name.as_str(), group.versions.len()),
            ("example.com", 2)
        );
        // A snapshot taken before is unchanged: a request reads one consistent set.
        assert!(before.lookup("example.com", "v1", "widgets").is_none());

        registry.update(|c| c.without("example.com", "widgets", |r| r.version == "v1"));
        assert!(
            registry
                .lookup("example.com", "v1beta1", "widgets")
                .is_none()
        );
        assert!(registry.lookup("example.com", "v1", "widgets").is_some());
        registry.update(|c| c.without("example.com", "widgets", |_| false));
        assert!(!registry.snapshot().serves("example.com", "v1"));
        assert_eq!(registry.snapshot().iter().count(), builtins().len());
    }

    #[test]
    fn installing_again_replaces_the_type_in_place() {
        let registry = Registry::new();
        registry.update(|c| c.with([widget("v1")]));
        let mut changed = widget("v1");
        changed.short_names = vec!["wdg".into()];
        registry.update(|c| c.with([changed]));
        let snapshot = registry.snapshot();
        let found: Vec<_> = snapshot.iter().filter(|r| r.plural == "widgets").collect();
        assert_eq!(found.len(), 1);
        assert!(found[0].has_short_name("wdg"));
    }

    #[test]
    fn built_in_types_are_never_removed() {
        let registry = Registry::new();
        registry.update(|c| c.without("", "pods", |_| false));
        assert!(registry.lookup("", "v1", "pods").is_some());
    }
}
