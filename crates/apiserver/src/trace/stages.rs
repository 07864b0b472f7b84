//! The startup breakdown of a pod, derived only from what the API server recorded (times are the
//! API server's: when a write's transaction was sent to the store, when a delivery's frame was
//! handed to the connection).
//!
//! | stage | from | to |
//! |---|---|---|
//! | `queue_wait` | the pod enters the scheduler's queue | the scheduler pops it for the attempt that binds it (as the scheduler measured it: see below) |
//! | `scheduling` | the scheduler's watch is delivered the pod (ADDED) | the Binding request reaches the API server, less `queue_wait` when the scheduler reported it |
//! | `binding` | the Binding request reaches the API server | the write setting `spec.nodeName` commits |
//! | `kubelet_pickup` | the binding commits | the node's kubelet watch (`fieldSelector=spec.nodeName=<node>`) is delivered the pod |
//! | `sandbox` | kubelet pickup | the earlier of the write turning `PodReadyToStartContainers` True and the first `Pulling`/`Pulled` Event (image work starts once the sandbox is up) |
//! | `image` | sandbox end | the last `Pulled` Event |
//! | `container_start` | image end | the earlier of the `Started` Event and the first write showing a container running (`containerStatuses[].state.running`) |
//! | `readiness` | container start | the write turning the `Ready` condition True |
//!
//! The scheduler's queue lives in its memory: `queue_wait` is the scheduler's own measure (time
//! held by scheduling gates and backoff after earlier failed attempts included), which Skiff's
//! scheduler writes on its Binding as the `scheduler.skiff.io/queue-wait-seconds` annotation and
//! the binding write copies onto the pod.
//! Without it (another scheduler) `queue_wait` is not reported and stays part of `scheduling`.
//!
//! Event times are when the kubelet's Event reached the API server (its recorder may send them
//! late); a stage whose end was recorded before its start counts as 0 (so does `scheduling` when
//! the reported `queue_wait` exceeds it). A stage with a missing end or start is reported with
//! `seconds: null` and a note saying what was not recorded.

use serde::Serialize;

use super::{Entry, What};

/// One stage of a pod's startup.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    pub name: &'static str,
    pub seconds: Option<f64>,
    /// Why there is no number, or what the end was taken from.
    pub note: String,
}

/// The names of the stages, in order.
pub const NAMES: [&str; 8] = [
    "queue_wait",
    "scheduling",
    "binding",
    "kubelet_pickup",
    "sandbox",
    "image",
    "container_start",
    "readiness",
];

/// A point of the startup, as recorded.
type Point = Option<(jiff::Timestamp, &'static str)>;

fn pod_write(e: &Entry) -> Option<&super::summary::Facts> {
    match &e.what {
        What::Write {
            resource, facts, ..
        } if resource == "pods" => Some(facts),
        _ => None,
    }
}

fn event_reason(e: &Entry) -> Option<&str> {
    match &e.what {
        What::Write {
            resource, facts, ..
        } if resource == "events" || resource == "events.events.k8s.io" => facts.reason.as_deref(),
        _ => None,
    }
}

/// The earlier of two points (either may be missing).
fn earlier(a: Point, b: Point) -> Point {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

fn first(entries: &[Entry], pred: impl Fn(&Entry) -> bool, how: &'static str) -> Point {
    entries.iter().find(|e| pred(e)).map(|e| (e.time, how))
}

/// The stages of `entries` (one pod's timeline, oldest first).
pub fn derive(entries: &[Entry]) -> Vec<Stage> {
    let scheduler_inbox = first(
        entries,
        |e| matches!(&e.what, What::Delivery { watch, .. } if watch.client.component == "scheduler"),
        "the scheduler's watch delivery",
    );
    let binding = entries.iter().find_map(|e| match &e.what {
        What::Write {
            facts, received, ..
        } if facts.node_name.is_some() => Some((
            *received,
            e.time,
            facts.node_name.clone()?,
            facts.queue_wait,
        )),
        _ => None,
    });
    let queue_wait = binding.as_ref().and_then(|b| b.3);
    let bind_received: Point = binding.as_ref().map(|b| (b.0, "the Binding request"));
    let bind_committed: Point = binding.as_ref().map(|b| (b.1, "the binding write"));
    let node_selector = binding
        .as_ref()
        .map(|b| format!("spec.nodeName={}", b.2))
        .unwrap_or_default();
    let bound_at = bind_committed.map(|p| p.0);
    let kubelet_inbox = first(
        entries,
        |e| {
            matches!(&e.what, What::Delivery { watch, .. }
                if bound_at.is_some_and(|t| e.time >= t)
                    && watch.field_selector.split(',').any(|s| s == node_selector))
        },
        "the kubelet's watch delivery",
    );
    let sandbox_condition = first(
        entries,
        |e| {
            pod_write(e).is_some_and(|f| {
                f.became_true
                    .iter()
                    .any(|c| c == "PodReadyToStartContainers")
            })
        },
        "PodReadyToStartContainers",
    );
    let image_start = first(
        entries,
        |e| matches!(event_reason(e), Some("Pulling" | "Pulled")),
        "the first Pulling/Pulled Event",
    );
    // whichever was recorded first: a kubelet may report the condition in a later status write
    let sandbox_end = earlier(sandbox_condition, image_start);
    let image_end = entries
        .iter()
        .rev()
        .find(|e| event_reason(e) == Some("Pulled"))
        .map(|e| (e.time, "the last Pulled Event"));
    let started = earlier(
        first(
            entries,
            |e| pod_write(e).is_some_and(|f| !f.started.is_empty()),
            "a container running",
        ),
        first(
            entries,
            |e| event_reason(e) == Some("Started"),
            "the Started Event",
        ),
    );
    let ready = first(
        entries,
        |e| pod_write(e).is_some_and(|f| f.became_true.iter().any(|c| c == "Ready")),
        "Ready=True",
    );
    let between = |name: &'static str, from: Point, to: Point| -> Stage {
        match (from, to) {
            (Some((a, _)), Some((b, how))) => Stage {
                name,
                seconds: Some((b.duration_since(a).as_secs_f64()).max(0.0)),
                note: format!("until {how}"),
            },
            (None, _) => Stage {
                name,
                seconds: None,
                note: "its start was not recorded".into(),
            },
            (_, None) => Stage {
                name,
                seconds: None,
                note: "its end was not recorded".into(),
            },
        }
    };
    let queue_stage = match &binding {
        Some((.., Some(seconds))) => Stage {
            name: "queue_wait",
            seconds: Some(*seconds),
            note: "as the scheduler measured it: queue entry to the attempt that bound the pod"
                .into(),
        },
        Some(_) => Stage {
            name: "queue_wait",
            seconds: None,
            note: "not reported by the scheduler that bound the pod (no \
                   scheduler.skiff.io/queue-wait-seconds on its Binding): part of scheduling"
                .into(),
        },
        None => Stage {
            name: "queue_wait",
            seconds: None,
            note: "its end was not recorded".into(),
        },
    };
    let mut scheduling = between("scheduling", scheduler_inbox, bind_received);
    match (scheduling.seconds, queue_wait) {
        (Some(total), Some(queued)) => {
            scheduling.seconds = Some((total - queued).max(0.0));
            scheduling.note = "until the Binding request, less queue_wait".into();
        }
        (Some(_), None) => {
            scheduling.note =
                "until the Binding request (queue wait included: not reported)".into();
        }
        (None, _) => {}
    }
    vec![
        queue_stage,
        scheduling,
        between("binding", bind_received, bind_committed),
        between("kubelet_pickup", bind_committed, kubelet_inbox),
        between("sandbox", kubelet_inbox, sandbox_end),
        between("image", sandbox_end, image_end),
        between("container_start", image_end.or(sandbox_end), started),
        between("readiness", started, ready),
    ]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::trace::summary::Facts;
    use crate::trace::{Client, Watcher};

    fn at(ms: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn write(ms: i64, resource: &str, received: i64, facts: Facts) -> Entry {
        Entry {
            seq: 0,
            time: at(ms),
            what: What::Write {
                client: Arc::new(Client::new(&Default::default(), "")),
                verb: "update".into(),
                resource: resource.into(),
                name: "p".into(),
                subresource: String::new(),
                resource_version: 1,
                received: at(received),
                summary: vec![],
                facts: Box::new(facts),
            },
        }
    }

    fn delivery(ms: i64, user: &str, field_selector: &str) -> Entry {
        let user = crate::authn::UserInfo {
            name: user.into(),
            ..Default::default()
        };
        Entry {
            seq: 0,
            time: at(ms),
            what: What::Delivery {
                watch: Arc::new(Watcher {
                    id: 1,
                    client: Client::new(&user, ""),
                    namespace: String::new(),
                    label_selector: String::new(),
                    field_selector: field_selector.into(),
                }),
                event: "ADDED",
                resource_version: 1,
            },
        }
    }

    /// An Event as the components write it (`events.k8s.io`; core `events` count the same).
    fn event(ms: i64, reason: &str) -> Entry {
        write(
            ms,
            if ms % 2 == 0 {
                "events.events.k8s.io"
            } else {
                "events"
            },
            ms,
            Facts {
                reason: Some(reason.into()),
                ..Default::default()
            },
        )
    }

    fn became(ms: i64, conditions: &[&str], started: &[&str]) -> Entry {
        write(
            ms,
            "pods",
            ms,
            Facts {
                became_true: conditions.iter().map(|s| s.to_string()).collect(),
                started: started.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        )
    }

    fn seconds(stages: &[Stage]) -> Vec<(&str, Option<i64>)> {
        stages
            .iter()
            .map(|s| (s.name, s.seconds.map(|x| (x * 1000.0).round() as i64)))
            .collect()
    }

    #[test]
    fn every_stage_is_derived_from_the_recorded_writes_deliveries_and_events() {
        let entries = vec![
            write(0, "pods", 0, Facts::default()),
            delivery(2, "system:kube-scheduler", ""),
            delivery(3, "admin", "spec.nodeName=n2"),
            write(
                15,
                "pods",
                10,
                Facts {
                    node_name: Some("n1".into()),
                    ..Default::default()
                },
            ),
            delivery(17, "system:node:n1", "spec.nodeName=n1"),
            became(40, &["PodReadyToStartContainers"], &[]),
            event(45, "Pulling"),
            event(140, "Pulled"),
            event(150, "Started"),
            became(155, &["Initialized"], &["app"]),
            became(175, &["Ready", "ContainersReady"], &[]),
        ];
        let stages = derive(&entries);
        assert_eq!(
            seconds(&stages),
            [
                ("queue_wait", None),
                ("scheduling", Some(8)),
                ("binding", Some(5)),
                ("kubelet_pickup", Some(2)),
                ("sandbox", Some(23)),
                ("image", Some(100)),
                ("container_start", Some(10)),
                ("readiness", Some(25)),
            ]
        );
        assert!(stages[0].note.contains("not reported"), "{:?}", stages[0]);
        assert!(
            stages[1].note.contains("queue wait included"),
            "{:?}",
            stages[1]
        );
    }

    /// A scheduler watch delivery at 2 ms, and a Binding received at 10 ms reporting `queue_wait`.
    fn bound_after_queueing(queue_wait: f64) -> Vec<Entry> {
        vec![
            write(0, "pods", 0, Facts::default()),
            delivery(2, "system:kube-scheduler", ""),
            write(
                15,
                "pods",
                10,
                Facts {
                    node_name: Some("n1".into()),
                    queue_wait: Some(queue_wait),
                    ..Default::default()
                },
            ),
        ]
    }

    #[test]
    fn the_queue_wait_the_scheduler_reported_is_taken_out_of_scheduling() {
        let stages = derive(&bound_after_queueing(0.003));
        assert_eq!(
            seconds(&stages)[..3],
            [
                ("queue_wait", Some(3)),
                ("scheduling", Some(5)),
                ("binding", Some(5))
            ]
        );
        assert!(stages[0].note.contains("as the scheduler measured it"));
        assert!(
            stages[1].note.contains("less queue_wait"),
            "{:?}",
            stages[1]
        );
    }

    #[test]
    fn a_queue_wait_longer_than_the_api_server_saw_leaves_scheduling_at_zero() {
        // the scheduler may have queued the pod before the first delivery the timeline kept
        // (older entries dropped, so that delivery is a later MODIFIED one)
        let stages = derive(&bound_after_queueing(0.020));
        assert_eq!(
            seconds(&stages)[..2],
            [("queue_wait", Some(20)), ("scheduling", Some(0))]
        );
    }

    #[test]
    fn without_the_sandbox_condition_the_first_image_event_ends_the_sandbox() {
        let entries = vec![
            write(
                5,
                "pods",
                4,
                Facts {
                    node_name: Some("n1".into()),
                    ..Default::default()
                },
            ),
            delivery(6, "admin", "spec.nodeName=n1"),
            event(30, "Pulled"),
            event(31, "Started"),
        ];
        let stages = derive(&entries);
        let sandbox = stages.iter().find(|s| s.name == "sandbox").unwrap();
        assert_eq!(
            sandbox.seconds.map(|s| (s * 1000.0).round() as i64),
            Some(24)
        );
        assert!(sandbox.note.contains("Pulling/Pulled"));
        let start = stages.iter().find(|s| s.name == "container_start").unwrap();
        assert!(start.note.contains("Started Event"), "{start:?}");
        let readiness = stages.iter().find(|s| s.name == "readiness").unwrap();
        assert_eq!(readiness.seconds, None);
        assert_eq!(readiness.note, "its end was not recorded");
    }

    #[test]
    fn a_sandbox_condition_reported_after_the_image_events_does_not_end_the_sandbox_late() {
        let entries = vec![
            write(
                5,
                "pods",
                4,
                Facts {
                    node_name: Some("n1".into()),
                    ..Default::default()
                },
            ),
            delivery(6, "system:node:n1", "spec.nodeName=n1"),
            event(20, "Pulled"),
            became(25, &["PodReadyToStartContainers", "Ready"], &["app"]),
        ];
        let derived = derive(&entries);
        let stages = seconds(&derived);
        assert_eq!(stages[4], ("sandbox", Some(14)));
        assert_eq!(stages[5], ("image", Some(0)));
        assert_eq!(stages[6], ("container_start", Some(5)));
        assert_eq!(stages[7], ("readiness", Some(0)));
    }

    #[test]
    fn stages_name_what_was_not_recorded_instead_of_inventing_it() {
        let stages = derive(&[write(0, "pods", 0, Facts::default())]);
        assert_eq!(stages.len(), NAMES.len());
        assert!(stages.iter().all(|s| s.seconds.is_none()));
        assert_eq!(stages[0].note, "its end was not recorded");
        assert_eq!(stages[1].note, "its start was not recorded");
    }
}
