//! The correlator on its own, then the writer against a scripted API server.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;

fn reporter() -> Reporter {
    Reporter {
        controller: "kubelet".into(),
        instance: "n1".into(),
    }
}

fn pod(name: &str, resource_version: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some("ns".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        resource_version: Some(resource_version.into()),
        ..Default::default()
    }
}

fn back_off(rv: &str) -> Event {
    Event::warning(
        pod("p", rv),
        "BackOff",
        "Back-off restarting failed container c in pod p".into(),
    )
}

/// Correlates `event` at `at`; `None` when filtered.
fn correlate(c: &mut Correlator, event: Event, at: Instant) -> Option<Write> {
    c.correlate(&reporter(), event, at).map(|(write, _)| write)
}

#[tokio::test]
async fn a_repeated_event_is_created_once_then_counted_in_its_series() {
    let mut c = Correlator::default();
    let now = Instant::now();
    let Some(Write::Create(first)) = correlate(&mut c, back_off("1"), now) else {
        panic!("the first occurrence is created");
    };
    assert_eq!(first.metadata.namespace.as_deref(), Some("ns"));
    assert!(first.metadata.name.as_deref().unwrap().starts_with("p."));
    assert_eq!(first.reporting_controller.as_deref(), Some("kubelet"));
    assert_eq!(first.reporting_instance.as_deref(), Some("n1"));
    assert!(
        first.deprecated_source.is_none(),
        "refused by events.k8s.io/v1"
    );
    assert_eq!(first.type_.as_deref(), Some("Warning"));
    assert!(first.series.is_none());
    // the pod changed in between: its resourceVersion is not part of the series
    for (count, rv) in [(2, "2"), (3, "3")] {
        match correlate(&mut c, back_off(rv), now) {
            Some(Write::Series { series, object }) => {
                assert_eq!(series.count, count);
                assert_eq!(object.metadata.name, first.metadata.name);
            }
            other => panic!("expected a series update, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn events_differing_in_note_field_path_or_related_object_are_separate() {
    let mut c = Correlator::default();
    let now = Instant::now();
    let base = back_off("1");
    let mut other_container = base.clone();
    other_container.regarding.field_path = Some("spec.containers{d}".into());
    let other_note = Event {
        note: "Back-off restarting failed container d in pod p".into(),
        ..base.clone()
    };
    let related = base.clone().with_related(Some(pod("q", "1")));
    for event in [base, other_container, other_note, related] {
        assert!(matches!(
            correlate(&mut c, event, now),
            Some(Write::Create(_))
        ));
    }
}

#[tokio::test]
async fn more_than_ten_similar_notes_in_ten_minutes_become_one_combined_series() {
    let mut c = Correlator::default();
    let now = Instant::now();
    let created = |i: usize| {
        Event::normal(
            pod("rs", "1"),
            "SuccessfulCreate",
            format!("Created pod: p{i}"),
        )
    };
    for i in 0..9 {
        let Some(Write::Create(e)) = correlate(&mut c, created(i), now) else {
            panic!("distinct notes are written as they are");
        };
        assert_eq!(
            e.note.as_deref(),
            Some(format!("Created pod: p{i}").as_str())
        );
    }
    let Some(Write::Create(combined)) = correlate(&mut c, created(9), now) else {
        panic!("the tenth distinct note starts the combined event");
    };
    assert_eq!(
        combined.note.as_deref(),
        Some("(combined from similar events): Created pod: p9")
    );
    let Some(Write::Series { series, object }) = correlate(&mut c, created(10), now) else {
        panic!("later similar events count in the combined one");
    };
    assert_eq!(series.count, 2);
    assert_eq!(object.metadata.name, combined.metadata.name);
    // after the interval, notes are written as they are again
    let later = now + AGGREGATE_INTERVAL + Duration::from_secs(1);
    let Some(Write::Create(e)) = correlate(&mut c, created(11), later) else {
        panic!("a new interval");
    };
    assert_eq!(e.note.as_deref(), Some("Created pod: p11"));
}

#[tokio::test]
async fn each_object_gets_a_burst_of_25_writes_then_one_per_5_minutes() {
    let mut c = Correlator::default();
    let now = Instant::now();
    // distinct reasons: neither aggregated nor a series
    let event = |name: &str, i: usize| Event::normal(pod(name, "1"), &format!("R{i}"), "n".into());
    let written = (0..30)
        .filter(|&i| correlate(&mut c, event("p", i), now).is_some())
        .count();
    assert_eq!(written, 25);
    assert!(
        correlate(&mut c, event("q", 0), now).is_some(),
        "another object"
    );
    let soon = now + Duration::from_secs(299);
    assert!(correlate(&mut c, event("p", 30), soon).is_none());
    let later = now + Duration::from_secs(301);
    assert!(correlate(&mut c, event("p", 31), later).is_some());
}

#[test]
fn the_caches_forget_the_least_recently_used_entry() {
    let mut b: Bounded<u32, u32> = Bounded {
        capacity: 2,
        ..Default::default()
    };
    b.insert(1, 1);
    b.insert(2, 2);
    assert!(b.get_mut(&1).is_some());
    b.insert(3, 3);
    assert!(b.get_mut(&2).is_none(), "2 was used least recently");
    assert!(b.get_mut(&1).is_some() && b.get_mut(&3).is_some());
}

/// Requests the scripted API server received (method, path, body) and how it answers patches.
#[derive(Default)]
struct Server {
    requests: Vec<(String, String, Value)>,
    patch_status: u16,
}

fn fake(server: Arc<Mutex<Server>>) -> kube::Client {
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let server = server.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = http_body_util::BodyExt::collect(body)
                .await
                .unwrap()
                .to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let mut server = server.lock();
            let path = parts.uri.path().to_string();
            server
                .requests
                .push((parts.method.to_string(), path, body.clone()));
            let status = match parts.method.as_str() {
                "PATCH" if server.patch_status != 0 => server.patch_status,
                _ => 200,
            };
            let answer = if status == 200 {
                body
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "NotFound", "code": status, "message": "gone"})
            };
            let response = http::Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    kube::Client::new(service, "default")
}

async fn wait_for_requests(server: &Mutex<Server>, n: usize) -> Vec<(String, String, Value)> {
    for _ in 0..200 {
        if server.lock().requests.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.lock().requests.clone()
}

#[tokio::test]
async fn the_writer_creates_then_patches_the_series_and_recreates_an_expired_event() {
    let server = Arc::new(Mutex::new(Server::default()));
    let recorder = Recorder::new(fake(server.clone()), reporter());
    recorder.record(back_off("1"));
    recorder.record(back_off("2"));
    let requests = wait_for_requests(&server, 2).await;
    assert_eq!(requests.len(), 2, "{requests:?}");
    let (method, path, body) = &requests[0];
    assert_eq!(method, "POST");
    assert_eq!(path, "/apis/events.k8s.io/v1/namespaces/ns/events");
    assert_eq!(body["reason"], "BackOff");
    let name = body["metadata"]["name"].as_str().unwrap().to_string();
    let (method, path, body) = &requests[1];
    assert_eq!(method, "PATCH");
    assert_eq!(
        path,
        &format!("/apis/events.k8s.io/v1/namespaces/ns/events/{name}")
    );
    assert_eq!(body["series"]["count"], 2);
    assert!(body["series"]["lastObservedTime"].is_string());

    // the written event expired: the series is written anew under the same name
    server.lock().patch_status = 404;
    recorder.record(back_off("3"));
    let requests = wait_for_requests(&server, 4).await;
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert_eq!(requests[2].0, "PATCH");
    let (method, _, body) = &requests[3];
    assert_eq!(method, "POST");
    assert_eq!(body["metadata"]["name"], name.as_str());
    assert_eq!(body["series"]["count"], 3);
}
