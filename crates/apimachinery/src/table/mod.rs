//! `kubectl get` tables (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): the column
//! definitions and row cells upstream's printers (`pkg/printers/internalversion`) produce for each
//! built-in resource, computed from the object's JSON.
//!
//! The API server always prints with `Wide` set (upstream's `printerstorage.TableConvertor`), so
//! a row carries a cell for every column, priority-1 columns included; kubectl hides those unless
//! `-o wide`. A resource without a printer gets upstream's default table (`Name`, `Created At`).
//!
//! Objects are read as the API server stores them, but nothing is trusted: a missing, null or
//! mistyped field reads as Go's zero value, or as the default upstream's decoder would have filled
//! in where a cell shows it (`replicas` 1, service `type` `ClusterIP`, port `protocol` `TCP`, …).
//! No input panics.
//!
//! # Layout
//! - `pod`: pods (the status reason logic of `printPod`).
//! - `core`: nodes, namespaces, services, endpoints, config maps, secrets, service accounts,
//!   resource quotas.
//! - `events`: core/v1 and events.k8s.io/v1 events (one printer, two field layouts).
//! - `apps`: deployments, replica sets, stateful sets, daemon sets, controller revisions.
//! - `batch`: jobs and cron jobs.
//! - `other`: leases, endpoint slices, pod disruption budgets, role bindings, priority classes,
//!   API services.
//! - `replication`: replication controllers and pod templates.
//! - `networking`: horizontal pod autoscalers, ingresses, ingress classes, network policies,
//!   runtime classes.
//! - `storage`: persistent volumes and claims, storage classes, volume attachments, CSI drivers,
//!   CSI nodes and CSI storage capacities.
//! - `format`: label maps, label selectors, container lists, `host:port`, `a,b,c + 2 more...`.
//! - `value`: reading fields out of JSON without panicking.
//! - `duration`: [`human_duration`], upstream's `duration.HumanDuration` (the AGE cells).

mod apps;
mod batch;
mod core;
mod duration;
mod events;
mod format;
mod networking;
mod other;
mod pod;
mod replication;
mod storage;
mod value;

pub use duration::human_duration;

use jiff::Timestamp;
use serde_json::Value;

/// One column of a table (`metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The header kubectl prints, upper-cased (`Name` prints as `NAME`).
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, `boolean`, `date`, …
    pub type_: &'static str,
    /// `name` for the column holding the object's name, empty otherwise.
    pub format: &'static str,
    pub description: &'static str,
    /// 0 for columns kubectl always prints, 1 for columns printed only with `-o wide`.
    pub priority: i32,
}

impl Column {
    /// A column with an empty `format`.
    pub(crate) const fn new(
        name: &'static str,
        type_: &'static str,
        priority: i32,
        description: &'static str,
    ) -> Self {
        Self {
            name,
            type_,
            format: "",
            description,
            priority,
        }
    }
}

/// The object's name, first column of every table but events'.
pub(crate) const NAME: Column = Column {
    name: "Name",
    type_: "string",
    format: "name",
    description: "Name of the object, unique within its namespace and resource (metadata.name).",
    priority: 0,
};

/// Time since `metadata.creationTimestamp`, as [`human_duration`] writes it.
pub(crate) const AGE: Column = Column::new(
    "Age",
    "string",
    0,
    "Time since the object was created (metadata.creationTimestamp).",
);

/// Upstream's default table (`rest.NewDefaultTableConvertor`), for resources without a printer.
static DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Created At",
        "date",
        0,
        "When the object was created (metadata.creationTimestamp), RFC 3339 in UTC.",
    ),
];

/// A resource's columns and the function computing one row's cells, in column order.
struct Printer {
    columns: &'static [Column],
    cells: fn(&Value, Timestamp) -> Vec<Value>,
}

fn printer(group: &str, plural: &str) -> Option<&'static Printer> {
    Some(match (group, plural) {
        ("", "pods") => &pod::PODS,
        ("", "nodes") => &core::NODES,
        ("", "namespaces") => &core::NAMESPACES,
        ("", "services") => &core::SERVICES,
        ("", "endpoints") => &core::ENDPOINTS,
        ("", "configmaps") => &core::CONFIG_MAPS,
        ("", "secrets") => &core::SECRETS,
        ("", "serviceaccounts") => &core::SERVICE_ACCOUNTS,
        ("", "resourcequotas") => &core::RESOURCE_QUOTAS,
        ("", "events") => &events::CORE_EVENTS,
        ("", "persistentvolumeclaims") => &storage::PERSISTENT_VOLUME_CLAIMS,
        ("", "persistentvolumes") => &storage::PERSISTENT_VOLUMES,
        ("", "replicationcontrollers") => &replication::REPLICATION_CONTROLLERS,
        ("", "podtemplates") => &replication::POD_TEMPLATES,
        ("events.k8s.io", "events") => &events::EVENTS_V1,
        ("apps", "deployments") => &apps::DEPLOYMENTS,
        ("apps", "replicasets") => &apps::REPLICA_SETS,
        ("apps", "statefulsets") => &apps::STATEFUL_SETS,
        ("apps", "daemonsets") => &apps::DAEMON_SETS,
        ("apps", "controllerrevisions") => &apps::CONTROLLER_REVISIONS,
        ("batch", "jobs") => &batch::JOBS,
        ("batch", "cronjobs") => &batch::CRON_JOBS,
        ("certificates.k8s.io", "certificatesigningrequests") => {
            &other::CERTIFICATE_SIGNING_REQUESTS
        }
        ("coordination.k8s.io", "leases") => &other::LEASES,
        ("discovery.k8s.io", "endpointslices") => &other::ENDPOINT_SLICES,
        ("policy", "poddisruptionbudgets") => &other::POD_DISRUPTION_BUDGETS,
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            &other::ROLE_BINDINGS
        }
        ("scheduling.k8s.io", "priorityclasses") => &other::PRIORITY_CLASSES,
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations" | "validatingwebhookconfigurations",
        ) => &other::WEBHOOK_CONFIGURATIONS,
        ("admissionregistration.k8s.io", "validatingadmissionpolicies") => {
            &other::VALIDATING_ADMISSION_POLICIES
        }
        ("admissionregistration.k8s.io", "validatingadmissionpolicybindings") => {
            &other::VALIDATING_ADMISSION_POLICY_BINDINGS
        }
        ("apiregistration.k8s.io", "apiservices") => &other::API_SERVICES,
        ("flowcontrol.apiserver.k8s.io", "flowschemas") => &other::FLOW_SCHEMAS,
        ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations") => {
            &other::PRIORITY_LEVEL_CONFIGURATIONS
        }
        ("autoscaling", "horizontalpodautoscalers") => &networking::HORIZONTAL_POD_AUTOSCALERS,
        ("networking.k8s.io", "ingresses") => &networking::INGRESSES,
        ("networking.k8s.io", "ingressclasses") => &networking::INGRESS_CLASSES,
        ("networking.k8s.io", "networkpolicies") => &networking::NETWORK_POLICIES,
        ("node.k8s.io", "runtimeclasses") => &networking::RUNTIME_CLASSES,
        ("storage.k8s.io", "storageclasses") => &storage::STORAGE_CLASSES,
        ("storage.k8s.io", "volumeattachments") => &storage::VOLUME_ATTACHMENTS,
        ("storage.k8s.io", "csidrivers") => &storage::CSI_DRIVERS,
        ("storage.k8s.io", "csinodes") => &storage::CSI_NODES,
        ("storage.k8s.io", "csistoragecapacities") => &storage::CSI_STORAGE_CAPACITIES,
        // limitranges, roles, clusterroles, bindings: upstream has no printer either.
        _ => return None,
    })
}

/// The columns upstream's API server returns for `group`/`plural` (`""` for the core group):
/// the resource's printer columns, or the default `Name`, `Created At`.
pub fn columns(group: &str, plural: &str) -> &'static [Column] {
    printer(group, plural).map_or(DEFAULT_COLUMNS, |p| p.columns)
}

/// The cells of `object`'s row, one per entry of [`columns`]`(group, plural)`, as upstream
/// computes them; ages are measured against `now`.
pub fn row(group: &str, plural: &str, object: &Value, now: Timestamp) -> Vec<Value> {
    match printer(group, plural) {
        Some(p) => (p.cells)(object, now),
        None => default_cells(object),
    }
}

/// Name and creation time as Go's `time.RFC3339` writes it in UTC (whole seconds; the zero time
/// `0001-01-01T00:00:00Z` when absent).
fn default_cells(object: &Value) -> Vec<Value> {
    let created = value::time(object, "/metadata/creationTimestamp")
        .map(|t| {
            let mut second = t.as_second();
            if t.subsec_nanosecond() < 0 {
                second -= 1; // Go floors, jiff truncates toward the epoch
            }
            Timestamp::from_second(second).map_or_else(|_| t.to_string(), |t| t.to_string())
        })
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".to_string());
    vec![value::name(object).into(), created.into()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::builtins;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn every_catalog_resource_has_a_name_column() {
        for r in builtins() {
            let cols = columns(&r.group, &r.plural);
            assert!(
                cols.iter().any(|c| c.format == "name"),
                "{}/{}",
                r.group,
                r.plural
            );
            assert!(cols.iter().all(|c| c.priority == 0 || c.priority == 1));
        }
    }

    #[test]
    fn rows_have_one_cell_per_column_for_every_catalog_resource() {
        let object =
            json!({"metadata": {"name": "x", "creationTimestamp": "2024-05-01T11:00:00Z"}});
        for r in builtins() {
            let cells = row(&r.group, &r.plural, &object, now());
            assert_eq!(
                cells.len(),
                columns(&r.group, &r.plural).len(),
                "{}",
                r.plural
            );
        }
    }

    #[test]
    fn malformed_objects_never_panic_and_keep_the_row_shape() {
        let odd = [
            json!(null),
            json!(7),
            json!("pod"),
            json!([]),
            json!({}),
            json!({"metadata": null, "spec": null, "status": null}),
            json!({"metadata": 1, "spec": "x", "status": [1, 2]}),
            json!({"metadata": {"name": 5, "creationTimestamp": "yesterday",
                "labels": {"node-role.kubernetes.io/": 1, "kubernetes.io/role": null},
                "deletionTimestamp": 3, "ownerReferences": [null, {"controller": true}]}}),
            json!({"spec": {"containers": [null, 1, {"name": 2}], "initContainers": 3,
                "replicas": "two", "selector": {"matchExpressions": [{"operator": "Bogus"}, 1]},
                "ports": [{"port": "80", "nodePort": -1}, null], "type": "LoadBalancer",
                "template": {"spec": {"containers": {"a": 1}}}, "completions": null,
                "jobTemplate": 4, "readinessGates": [{}], "minAvailable": [], "subjects": 9},
              "status": {"containerStatuses": [{"state": {"terminated": 1}}, null, {"state": null,
                "lastState": {"terminated": {"finishedAt": 12}}, "restartCount": "3"}],
                "initContainerStatuses": [{"state": {"waiting": {"reason": 7}}}],
                "conditions": [null, {"type": "Ready"}], "loadBalancer": {"ingress": [{}]},
                "hard": {"pods": null}, "used": 4, "addresses": [{"type": "InternalIP"}],
                "startTime": "2030-01-01T00:00:00Z", "completionTime": "bad"},
              "subsets": [{"addresses": [{"ip": null}], "ports": [{}]}, 2],
              "endpoints": [{"addresses": [1, "10.0.0.1"]}], "ports": [{"port": null}],
              "data": "x", "secrets": {}, "roleRef": [], "series": {"count": "x"},
              "involvedObject": 1, "regarding": {"kind": 2}, "value": 1.5, "globalDefault": "yes"}),
        ];
        for r in builtins() {
            for object in &odd {
                let cells = row(&r.group, &r.plural, object, now());
                assert_eq!(
                    cells.len(),
                    columns(&r.group, &r.plural).len(),
                    "{}",
                    r.plural
                );
            }
        }
        for object in &odd {
            assert_eq!(row("example.com", "widgets", object, now()).len(), 2);
        }
    }

    #[test]
    fn unknown_resources_get_the_default_name_and_created_at_table() {
        let cols = columns("example.com", "widgets");
        let names: Vec<_> = cols.iter().map(|c| (c.name, c.type_, c.format)).collect();
        assert_eq!(
            names,
            [("Name", "string", "name"), ("Created At", "date", "")]
        );
        let object =
            json!({"metadata": {"name": "w", "creationTimestamp": "2024-04-30T10:00:00.5+02:00"}});
        assert_eq!(
            row("example.com", "widgets", &object, now()),
            [json!("w"), json!("2024-04-30T08:00:00Z")]
        );
        assert_eq!(
            row("", "limitranges", &json!({}), now()),
            [json!(""), json!("0001-01-01T00:00:00Z")]
        );
    }

    #[test]
    fn roles_cluster_roles_and_limit_ranges_use_the_default_table_as_upstream() {
        for (g, p) in [
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("", "limitranges"),
        ] {
            assert_eq!(columns(g, p), DEFAULT_COLUMNS);
        }
    }

    #[test]
    fn both_event_groups_share_upstreams_event_columns() {
        assert_eq!(columns("", "events"), columns("events.k8s.io", "events"));
        assert_eq!(columns("", "events")[0].name, "Last Seen");
    }
}
