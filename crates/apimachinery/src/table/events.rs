//! The events table, for core/v1 events and events.k8s.io/v1 events alike: upstream serves both
//! from one storage and prints both with `printEvent`, after converting the newer layout
//! (`regarding`, `note`, `deprecated*`) to the core one.

use super::value::{int, name, present, since, text, time};
use super::{Column, Printer};
use jiff::Timestamp;
use serde_json::Value;

/// Upstream's event columns: no leading Name, which comes last and only with `-o wide`.
static COLUMNS: &[Column] = &[
    Column::new(
        "Last Seen",
        "string",
        0,
        "Time since the event last occurred.",
    ),
    Column::new("Type", "string", 0, "Normal or Warning."),
    Column::new(
        "Reason",
        "string",
        0,
        "Short machine-readable reason for the event.",
    ),
    Column::new(
        "Object",
        "string",
        0,
        "The object the event is about, as kind/name.",
    ),
    Column::new(
        "Subobject",
        "string",
        1,
        "Field path of the part of the object the event is about.",
    ),
    Column::new(
        "Source",
        "string",
        1,
        "Component and host that reported the event.",
    ),
    Column::new("Message", "string", 0, "Human-readable description."),
    Column::new(
        "First Seen",
        "string",
        1,
        "Time since the event first occurred.",
    ),
    Column::new("Count", "string", 1, "How many times the event occurred."),
    Column {
        name: "Name",
        type_: "string",
        format: "name",
        description: "Name of the event object (metadata.name).",
        priority: 1,
    },
];

/// Where each field `printEvent` reads sits in one of the two event layouts.
struct Layout {
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    object: &'static str,
    source: &'static str,
    reporting_controller: &'static str,
    message: &'static str,
}

const CORE: Layout = Layout {
    first_timestamp: "/firstTimestamp",
    last_timestamp: "/lastTimestamp",
    count: "/count",
    object: "/involvedObject",
    source: "/source",
    reporting_controller: "/reportingComponent",
    message: "/message",
};

const V1: Layout = Layout {
    first_timestamp: "/deprecatedFirstTimestamp",
    last_timestamp: "/deprecatedLastTimestamp",
    count: "/deprecatedCount",
    object: "/regarding",
    source: "/deprecatedSource",
    reporting_controller: "/reportingController",
    message: "/note",
};

pub(super) static CORE_EVENTS: Printer = Printer {
    columns: COLUMNS,
    cells: |event, now| cells(event, now, &CORE),
};

pub(super) static EVENTS_V1: Printer = Printer {
    columns: COLUMNS,
    cells: |event, now| cells(event, now, &V1),
};

fn cells(event: &Value, now: Timestamp, layout: &Layout) -> Vec<Value> {
    let field = |ptr: &str, sub: &str| text(event, &format!("{ptr}{sub}"));
    let event_time = since(time(event, "/eventTime"), now);
    let first = match time(event, layout.first_timestamp) {
        Some(t) => since(Some(t), now),
        None => event_time, // events of the new API have only eventTime
    };
    let mut last = match time(event, layout.last_timestamp) {
        Some(t) => since(Some(t), now),
        None => first.clone(),
    };
    let mut count = int(event, layout.count);
    if present(event, "/series") {
        last = since(time(event, "/series/lastObservedTime"), now);
        count = int(event, "/series/count");
    } else if count == 0 {
        count = 1; // singleton events of the new API carry no count
    }

    let kind = field(layout.object, "/kind").to_lowercase();
    let target = match field(layout.object, "/name") {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let component = first_non_empty(
        field(layout.source, "/component"),
        text(event, layout.reporting_controller),
    );
    let instance = first_non_empty(
        field(layout.source, "/host"),
        text(event, "/reportingInstance"),
    );
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        last.into(),
        text(event, "/type").into(),
        text(event, "/reason").into(),
        target.into(),
        field(layout.object, "/fieldPath").into(),
        source.into(),
        text(event, layout.message).trim().into(),
        first.into(),
        count.into(),
        name(event).into(),
    ]
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_core_event_shows_times_object_source_and_count() {
        let event = json!({
            "metadata": {"name": "web-1.17c", "creationTimestamp": "2024-05-01T11:00:00Z"},
            "involvedObject": {"kind": "Pod", "name": "web-1", "fieldPath": "spec.containers{app}"},
            "reason": "BackOff", "type": "Warning",
            "message": "  Back-off restarting failed container\n",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2024-05-01T11:00:00Z", "lastTimestamp": "2024-05-01T11:58:00Z",
            "count": 12
        });
        assert_eq!(
            (CORE_EVENTS.cells)(&event, now()),
            [
                json!("2m"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/web-1"),
                json!("spec.containers{app}"),
                json!("kubelet, n1"),
                json!("Back-off restarting failed container"),
                json!("60m"),
                json!(12),
                json!("web-1.17c")
            ]
        );
    }

    #[test]
    fn a_new_api_event_uses_event_time_series_and_reporting_controller() {
        let event = json!({
            "metadata": {"name": "e"},
            "regarding": {"kind": "Node", "name": "n1"},
            "reason": "Starting", "type": "Normal", "note": "Starting kubelet.",
            "reportingController": "kubelet", "reportingInstance": "n1",
            "eventTime": "2024-05-01T11:59:30.123456Z",
            "series": {"count": 4, "lastObservedTime": "2024-05-01T11:59:50.000001Z"}
        });
        assert_eq!(
            (EVENTS_V1.cells)(&event, now()),
            [
                json!("9s"),
                json!("Normal"),
                json!("Starting"),
                json!("node/n1"),
                json!(""),
                json!("kubelet, n1"),
                json!("Starting kubelet."),
                json!("29s"),
                json!(4),
                json!("e")
            ]
        );
    }

    #[test]
    fn an_event_without_times_or_count_is_unknown_and_counted_once() {
        let event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Namespace"},
            "reportingComponent": "ctrl"});
        let cells = (CORE_EVENTS.cells)(&event, now());
        assert_eq!(cells[0], json!("<unknown>"));
        assert_eq!(cells[3], json!("namespace"));
        assert_eq!(cells[5], json!("ctrl"));
        assert_eq!(cells[7], json!("<unknown>"));
        assert_eq!(cells[8], json!(1));
    }

    #[test]
    fn the_last_seen_falls_back_to_the_first_seen() {
        let event = json!({"firstTimestamp": "2024-05-01T11:00:00Z"});
        let cells = (CORE_EVENTS.cells)(&event, now());
        assert_eq!((&cells[0], &cells[7]), (&json!("60m"), &json!("60m")));
    }
}
