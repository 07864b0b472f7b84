//! `events`: what controllers record about their objects, published by one background task per
//! controller through kube-runtime's events.k8s.io `Recorder`, so that reconciles never wait on
//! event writes. Like upstream's event correlator it drops spam: each object and reason gets a
//! burst of 25 events, then one more per 5 minutes.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::time::Instant;

/// Upstream's `defaultSpamBurst` and `defaultSpamQPS` (1/300).
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// One event to record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub regarding: ObjectReference,
    pub type_: EventType,
    pub reason: String,
    pub note: String,
}

/// An event a controller records about one of its objects and publishes itself (the job and
/// cronjob controllers; the others go through an [`EventSink`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

impl Note {
    pub fn normal(reason: &str, note: String) -> Note {
        Note {
            warning: false,
            reason: reason.into(),
            note,
        }
    }

    pub fn warning(reason: &str, note: String) -> Note {
        Note {
            warning: true,
            reason: reason.into(),
            note,
        }
    }

    /// Publishes the event about `regarding`; a failure is only logged (events are best
    /// effort), naming `controller`.
    pub async fn publish(self, recorder: &Recorder, regarding: &ObjectReference, controller: &str) {
        let event = Event {
            type_: if self.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: self.reason.clone(),
            note: Some(self.note),
            action: self.reason,
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, regarding).await {
            let object = regarding.name.as_deref().unwrap_or_default();
            tracing::debug!(object, %error, "{controller}: event not recorded");
        }
    }
}

/// Where controllers send events; cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<Record>,
}

impl EventSink {
    /// Starts the publishing task for `recorder`.
    pub fn spawn(recorder: Recorder) -> EventSink {
        let (tx, mut rx) = mpsc::unbounded::<Record>();
        tokio::spawn(async move {
            let mut filter = SpamFilter::default();
            while let Some(r) = rx.next().await {
                if !filter.allow(&r, Instant::now()) {
                    continue;
                }
                let event = Event {
                    type_: r.type_,
                    reason: r.reason.clone(),
                    note: Some(r.note.clone()),
                    action: r.reason.clone(),
                    secondary: None,
                };
                if let Err(error) = recorder.publish(&event, &r.regarding).await {
                    tracing::debug!(reason = %r.reason, %error, "could not record an event");
                }
            }
        });
        EventSink { tx }
    }

    /// Queues one event (never blocks; dropped if the publisher has stopped).
    pub fn record(&self, record: Record) {
        let _ = self.tx.unbounded_send(record);
    }
}

/// Token buckets per regarded object and reason.
#[derive(Default)]
struct SpamFilter {
    buckets: HashMap<(String, String), (f64, Instant)>,
}

impl SpamFilter {
    fn allow(&mut self, r: &Record, now: Instant) -> bool {
        let object = r
            .regarding
            .uid
            .clone()
            .unwrap_or_else(|| format!("{:?}/{:?}", r.regarding.namespace, r.regarding.name));
        let (tokens, at) = self
            .buckets
            .entry((object, r.reason.clone()))
            .or_insert((SPAM_BURST, now));
        let refill = now.saturating_duration_since(*at).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        *tokens = (*tokens + refill).min(SPAM_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(uid: &str, reason: &str) -> Record {
        Record {
            regarding: ObjectReference {
                uid: Some(uid.into()),
                ..Default::default()
            },
            type_: EventType::Normal,
            reason: reason.into(),
            note: String::new(),
        }
    }

    #[test]
    fn spam_filter_allows_a_burst_of_25_per_object_and_reason_then_one_per_5_minutes() {
        let mut f = SpamFilter::default();
        let now = Instant::now();
        let allowed = (0..30).filter(|_| f.allow(&record("a", "R"), now)).count();
        assert_eq!(allowed, 25);
        assert!(f.allow(&record("b", "R"), now), "another object");
        assert!(f.allow(&record("a", "Other"), now), "another reason");
        assert!(!f.allow(&record("a", "R"), now + Duration::from_secs(299)));
        assert!(f.allow(&record("a", "R"), now + Duration::from_secs(301)));
    }
}
