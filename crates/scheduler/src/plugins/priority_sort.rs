//! `PrioritySort`: activeQ's order, the only QueueSort plugin upstream has: higher
//! `spec.priority` first, then the pod that entered the queue first.

use crate::framework::{Plugin, QueueSortPlugin, QueuedPodInfo};

pub const NAME: &str = "PrioritySort";

pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod.priority(), b.pod.priority());
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::framework::testing::PodBuilder;

    #[test]
    fn higher_priority_first_then_the_earlier_arrival() {
        let (early, late) = (Instant::now(), Instant::now() + Duration::from_secs(1));
        let high = PodBuilder::new("high").priority(10).info();
        let low = PodBuilder::new("low").priority(0).info();
        let view = |pod, timestamp| QueuedPodInfo { pod, timestamp };
        assert!(PrioritySort.less(&view(&high, late), &view(&low, early)));
        assert!(!PrioritySort.less(&view(&low, early), &view(&high, late)));
        assert!(PrioritySort.less(&view(&low, early), &view(&low, late)));
        assert!(!PrioritySort.less(&view(&low, early), &view(&low, early)));
    }
}
