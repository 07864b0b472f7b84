//! `events`: an event a controller decides on in its sync (the job and cronjob controllers
//! hand these to their API trait, so tests can see them), recorded through
//! [`skiff_runtime::events::Recorder`], which aggregates, counts series and filters spam.

use k8s_openapi::api::core::v1::ObjectReference;
use skiff_runtime::events::{Event, EventType, Recorder};

/// One event about the object a controller syncs.
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

    /// Records the event about `regarding`.
    pub fn record(self, recorder: &Recorder, regarding: ObjectReference) {
        let type_ = if self.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        recorder.record(Event::new(type_, regarding, &self.reason, self.note));
    }
}
