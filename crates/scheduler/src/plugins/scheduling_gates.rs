//! `SchedulingGates`: a pod with `spec.schedulingGates` does not enter activeQ. It waits among
//! the unschedulable pods, never attempted and with no `FailedScheduling` event, until an
//! update removes its last gate (the API server allows gates only to be removed).

use crate::framework::{ClusterEvent, Plugin, PodInfo, PreEnqueuePlugin, Status};

pub const NAME: &str = "SchedulingGates";

pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
    /// No cluster event lifts a gate: only an update of the pod itself, which the queue
    /// re-checks (upstream registers no event without queueing hints).
    fn events(&self) -> ClusterEvent {
        ClusterEvent::NONE
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or_default();
        if gates.is_empty() {
            return Status::success();
        }
        // upstream formats the names as a Go slice: `[a b]`
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::framework::testing::PodBuilder;

    #[test]
    fn a_pod_without_gates_may_enter_the_queue() {
        assert!(
            SchedulingGates
                .pre_enqueue(&PodBuilder::new("p").info())
                .is_success()
        );
        let empty = PodBuilder::new("p").scheduling_gates(&[]).info();
        assert!(SchedulingGates.pre_enqueue(&empty).is_success());
    }

    #[test]
    fn a_gated_pod_is_kept_out_naming_its_gates_as_upstream() {
        let s = SchedulingGates.pre_enqueue(
            &PodBuilder::new("p")
                .scheduling_gates(&["foo", "example.com/bar"])
                .info(),
        );
        assert_eq!(s.code(), Code::UnschedulableAndUnresolvable);
        assert_eq!(
            s.message(),
            "waiting for scheduling gates: [foo example.com/bar]"
        );
    }
}
