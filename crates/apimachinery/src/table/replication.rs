//! Tables of the core/v1 workload kinds: replication controllers (upstream's
//! `printReplicationController`, the ReplicaSet columns over a label-map selector) and pod
//! templates (`printPodTemplate`).

use super::apps::{CONTAINERS, IMAGES, SELECTOR, template_containers};
use super::format::{containers, labels};
use super::value::{age, int, list, name, object, opt_int};
use super::{AGE, Column, NAME, Printer};

pub(super) static REPLICATION_CONTROLLERS: Printer = Printer {
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
    cells: |rc, now| {
        let (names, images) = template_containers(rc);
        vec![
            name(rc).into(),
            opt_int(rc, "/spec/replicas").unwrap_or(1).into(),
            int(rc, "/status/replicas").into(),
            int(rc, "/status/readyReplicas").into(),
            age(rc, now),
            names,
            images,
            labels(object(rc, "/spec/selector")).into(),
        ]
    },
};

pub(super) static POD_TEMPLATES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Containers",
            "string",
            0,
            "Names of each container in the template.",
        ),
        Column::new(
            "Images",
            "string",
            0,
            "Images referenced by each container in the template.",
        ),
        Column::new(
            "Pod Labels",
            "string",
            0,
            "The labels for the pod template.",
        ),
    ],
    cells: |template, _now| {
        let (names, images) = containers(list(template, "/template/spec/containers"));
        vec![
            name(template).into(),
            names.into(),
            images.into(),
            labels(object(template, "/template/metadata/labels")).into(),
        ]
    },
};

#[cfg(test)]
mod tests {
    use super::super::row;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn replication_controllers_print_like_replica_sets_with_a_map_selector() {
        let rc = json!({"metadata": {"name": "web", "creationTimestamp": "2024-05-01T11:58:00Z"},
            "spec": {"replicas": 3, "selector": {"app": "web", "tier": "front"},
                     "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        assert_eq!(
            row("", "replicationcontrollers", &rc, now()),
            [
                json!("web"),
                json!(3),
                json!(2),
                json!(1),
                json!("2m"),
                json!("c"),
                json!("nginx"),
                json!("app=web,tier=front")
            ]
        );
    }

    #[test]
    fn pod_templates_show_containers_images_and_labels() {
        let t = json!({"metadata": {"name": "t"},
            "template": {"metadata": {"labels": {"b": "2", "a": "1"}},
                         "spec": {"containers": [{"name": "x", "image": "busybox"},
                                                 {"name": "y", "image": "redis"}]}}});
        assert_eq!(
            row("", "podtemplates", &t, now()),
            [
                json!("t"),
                json!("x,y"),
                json!("busybox,redis"),
                json!("a=1,b=2")
            ]
        );
    }
}
