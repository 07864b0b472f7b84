//! Tables of apps/v1 resources: deployments, replica sets, stateful sets, daemon sets and
//! controller revisions (upstream's `printDeployment`, `printReplicaSet`, …).

use super::format::{containers, label_selector, labels, selector};
use super::value::{age, int, list, name, object, opt_int, text};
use super::{AGE, Column, NAME, Printer};
use jiff::Timestamp;
use serde_json::Value;

pub(super) const CONTAINERS: Column = Column::new(
    "Containers",
    "string",
    1,
    "Names of the containers in the pod template.",
);
pub(super) const IMAGES: Column = Column::new(
    "Images",
    "string",
    1,
    "Images of the containers in the pod template.",
);
pub(super) const SELECTOR: Column = Column::new(
    "Selector",
    "string",
    1,
    "Label selector of the pods the object manages.",
);

/// `spec.replicas`, which the decoder defaults to 1.
fn desired(v: &Value) -> i64 {
    opt_int(v, "/spec/replicas").unwrap_or(1)
}

/// Names and images of `spec.template.spec.containers`.
pub(super) fn template_containers(v: &Value) -> (Value, Value) {
    let (names, images) = containers(list(v, "/spec/template/spec/containers"));
    (names.into(), images.into())
}

pub(super) static DEPLOYMENTS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Ready",
            "string",
            0,
            "Ready replicas out of desired replicas.",
        ),
        Column::new(
            "Up-to-date",
            "string",
            0,
            "Replicas running the latest pod template.",
        ),
        Column::new(
            "Available",
            "string",
            0,
            "Replicas available to serve for at least minReadySeconds.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ],
    cells: |d, now| {
        let ready = format!("{}/{}", int(d, "/status/readyReplicas"), desired(d));
        let (names, images) = template_containers(d);
        let selector =
            selector(d.pointer("/spec/selector")).unwrap_or_else(|_| "<invalid>".to_string());
        vec![
            name(d).into(),
            ready.into(),
            int(d, "/status/updatedReplicas").into(),
            int(d, "/status/availableReplicas").into(),
            age(d, now),
            names,
            images,
            selector.into(),
        ]
    },
};

pub(super) static REPLICA_SETS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Desired", "integer", 0, "Replicas wanted (spec.replicas)."),
        Column::new(
            "Current",
            "integer",
            0,
            "Replicas that exist (status.replicas).",
        ),
        Column::new("Ready", "integer", 0, "Replicas that are ready."),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ],
    cells: |rs, now| {
        let (names, images) = template_containers(rs);
        vec![
            name(rs).into(),
            desired(rs).into(),
            int(rs, "/status/replicas").into(),
            int(rs, "/status/readyReplicas").into(),
            age(rs, now),
            names,
            images,
            label_selector(rs.pointer("/spec/selector")).into(),
        ]
    },
};

pub(super) static STATEFUL_SETS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Ready",
            "string",
            0,
            "Ready replicas out of desired replicas.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
    ],
    cells: |sts, now| {
        let ready = format!("{}/{}", int(sts, "/status/readyReplicas"), desired(sts));
        let (names, images) = template_containers(sts);
        vec![name(sts).into(), ready.into(), age(sts, now), names, images]
    },
};

pub(super) static DAEMON_SETS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Desired",
            "integer",
            0,
            "Nodes that should run the daemon pod.",
        ),
        Column::new(
            "Current",
            "integer",
            0,
            "Nodes running at least one daemon pod.",
        ),
        Column::new("Ready", "integer", 0, "Nodes whose daemon pod is ready."),
        Column::new(
            "Up-to-date",
            "integer",
            0,
            "Nodes running the latest daemon pod template.",
        ),
        Column::new(
            "Available",
            "integer",
            0,
            "Nodes whose daemon pod is available.",
        ),
        Column::new(
            "Node Selector",
            "string",
            0,
            "Node labels the daemon pods are restricted to.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ],
    cells: |ds, now| {
        let (names, images) = template_containers(ds);
        let status = |field: &str| Value::from(int(ds, &format!("/status/{field}")));
        vec![
            name(ds).into(),
            status("desiredNumberScheduled"),
            status("currentNumberScheduled"),
            status("numberReady"),
            status("updatedNumberScheduled"),
            status("numberAvailable"),
            labels(object(ds, "/spec/template/spec/nodeSelector")).into(),
            age(ds, now),
            names,
            images,
            label_selector(ds.pointer("/spec/selector")).into(),
        ]
    },
};

pub(super) static CONTROLLER_REVISIONS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Controller",
            "string",
            0,
            "The object that owns the revision, as kind.group/name.",
        ),
        Column::new("Revision", "string", 0, "The revision number."),
        AGE,
    ],
    cells: controller_revision_cells,
};

fn controller_revision_cells(cr: &Value, now: Timestamp) -> Vec<Value> {
    let controller = list(cr, "/metadata/ownerReferences")
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .map_or_else(|| "<none>".to_string(), owner_name);
    vec![
        name(cr).into(),
        controller.into(),
        int(cr, "/revision").into(),
        age(cr, now),
    ]
}

/// `statefulset.apps/web`: lower-cased `Kind.group`, then the name; just the name when the
/// reference has neither kind nor group.
fn owner_name(owner: &Value) -> String {
    let kind = text(owner, "/kind");
    // schema.ParseGroupVersion: "v1" is the core group, "apps/v1" the apps group. (Upstream
    // fails the whole request on an apiVersion with two slashes; here it counts as no group.)
    let group = match text(owner, "/apiVersion").split_once('/') {
        Some((group, version)) if !version.contains('/') => group,
        _ => "",
    };
    let owner_name = text(owner, "/name");
    match (kind, group) {
        ("", "") => owner_name.to_string(),
        (kind, "") => format!("{}/{owner_name}", kind.to_lowercase()),
        (kind, group) => format!("{}/{owner_name}", format!("{kind}.{group}").to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn template() -> Value {
        json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.27"},
                                        {"name": "log", "image": "busybox"}]}})
    }

    fn meta() -> Value {
        json!({"name": "web", "creationTimestamp": "2024-05-01T11:50:00Z"})
    }

    #[test]
    fn deployments_show_ready_of_desired_up_to_date_and_available() {
        let d = json!({"metadata": meta(), "spec": {"replicas": 3, "template": template(),
                "selector": {"matchLabels": {"app": "web"}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        assert_eq!(
            (DEPLOYMENTS.cells)(&d, now()),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("10m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web")
            ]
        );
    }

    #[test]
    fn a_fresh_deployment_defaults_to_one_replica_and_flags_a_bad_selector() {
        let d = json!({"metadata": meta(), "spec": {"selector": {"matchExpressions": [
            {"key": "app", "operator": "Near", "values": ["x"]}]}}});
        let cells = (DEPLOYMENTS.cells)(&d, now());
        assert_eq!(cells[1..4], [json!("0/1"), json!(0), json!(0)]);
        assert_eq!(cells[5..], [json!(""), json!(""), json!("<invalid>")]);
    }

    #[test]
    fn replica_sets_show_desired_current_and_ready_counts() {
        let rs = json!({"metadata": meta(), "spec": {"replicas": 2, "template": template(),
                "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f"}}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(
            (REPLICA_SETS.cells)(&rs, now()),
            [
                json!("web"),
                json!(2),
                json!(2),
                json!(1),
                json!("10m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=web,pod-template-hash=5d8f")
            ]
        );
        let scaled_to_zero = json!({"spec": {"replicas": 0}});
        assert_eq!((REPLICA_SETS.cells)(&scaled_to_zero, now())[1], json!(0));
        assert_eq!(
            (REPLICA_SETS.cells)(&scaled_to_zero, now())[7],
            json!("<none>")
        );
    }

    #[test]
    fn stateful_sets_show_ready_of_desired() {
        let sts = json!({"metadata": meta(), "spec": {"replicas": 3, "template": template()},
            "status": {"readyReplicas": 3}});
        assert_eq!(
            (STATEFUL_SETS.cells)(&sts, now()),
            [
                json!("web"),
                json!("3/3"),
                json!("10m"),
                json!("app,log"),
                json!("nginx:1.27,busybox")
            ]
        );
    }

    #[test]
    fn daemon_sets_show_scheduling_counts_and_node_selector() {
        let mut tpl = template();
        tpl["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        let ds = json!({"metadata": meta(), "spec": {"template": tpl,
                "selector": {"matchLabels": {"app": "agent"}}},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                       "updatedNumberScheduled": 3, "numberAvailable": 2}});
        assert_eq!(
            (DAEMON_SETS.cells)(&ds, now()),
            [
                json!("web"),
                json!(3),
                json!(3),
                json!(2),
                json!(3),
                json!(2),
                json!("kubernetes.io/os=linux"),
                json!("10m"),
                json!("app,log"),
                json!("nginx:1.27,busybox"),
                json!("app=agent")
            ]
        );
        let bare = (DAEMON_SETS.cells)(&json!({}), now());
        assert_eq!(bare[6], json!("<none>"));
    }

    #[test]
    fn controller_revisions_name_their_controller_with_kind_and_group() {
        let cr = |owners: Value| {
            json!({"metadata": {"name": "web-7c9", "creationTimestamp": "2024-05-01T11:50:00Z",
                "ownerReferences": owners}, "revision": 4})
        };
        let cases = [
            (
                json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]),
                "statefulset.apps/web",
            ),
            (
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "controller": false},
                       {"apiVersion": "v1", "kind": "Pod", "name": "q", "controller": true}]),
                "pod/q",
            ),
            (json!([{"name": "bare", "controller": true}]), "bare"),
            (
                json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "x"}]),
                "<none>",
            ),
            (json!([]), "<none>"),
        ];
        for (owners, want) in cases {
            assert_eq!(
                (CONTROLLER_REVISIONS.cells)(&cr(owners), now()),
                [json!("web-7c9"), json!(want), json!(4), json!("10m")]
            );
        }
    }
}
