//! Container lifecycle hooks as upstream's kubelet runs them: postStart right after the
//! container starts (a failure stops the container, to be restarted as restartPolicy says) and
//! preStop before SIGTERM, inside the pod's grace period. Handlers: exec (through CRI), httpGet,
//! tcpSocket and sleep, run by the probe handlers of [`crate::probe`].

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container as ApiContainer, LifecycleHandler, Probe};

use crate::cri::ContainerRuntime;

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    PostStart,
    PreStop,
}

impl Hook {
    pub fn of(self, container: &ApiContainer) -> Option<&LifecycleHandler> {
        let lifecycle = container.lifecycle.as_ref()?;
        match self {
            Hook::PostStart => lifecycle.post_start.as_ref(),
            Hook::PreStop => lifecycle.pre_stop.as_ref(),
        }
    }

    /// The event reason of a failure (upstream's).
    pub fn failed_reason(self) -> &'static str {
        match self {
            Hook::PostStart => "FailedPostStartHook",
            Hook::PreStop => "FailedPreStopHook",
        }
    }
}

/// Runs a hook's handler, bounded by `budget`; Err says why it failed.
pub async fn run(
    runtime: &dyn ContainerRuntime,
    handler: &LifecycleHandler,
    container: &ApiContainer,
    container_id: &str,
    pod_ip: &str,
    budget: Duration,
) -> Result<(), String> {
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64).min(budget)).await;
        return Ok(());
    }
    // exec, httpGet and tcpSocket are a probe's handlers, with the budget as its timeout
    let as_probe = Probe {
        exec: handler.exec.clone(),
        http_get: handler.http_get.clone(),
        tcp_socket: handler.tcp_socket.clone(),
        timeout_seconds: Some(budget.as_secs().clamp(1, i32::MAX as u64) as i32),
        ..Default::default()
    };
    crate::probe::run(runtime, &as_probe, container, container_id, pod_ip).await
}

/// The grace left for SIGTERM after a preStop hook that took `spent` of `grace` seconds (at
/// least upstream's minimum of 2 seconds).
pub fn grace_left(grace: i64, spent: Instant) -> i64 {
    (grace - spent.elapsed().as_secs() as i64).max(2)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn an_exec_hook_runs_in_the_container_and_reports_its_exit_code() {
        let runtime = crate::fake::FakeRuntime::new();
        runtime.add_image("busybox");
        let id = {
            let sandbox = runtime
                .run_pod_sandbox(Default::default(), "")
                .await
                .unwrap();
            let c = runtime
                .create_container(&sandbox, Default::default(), Default::default())
                .await
                .unwrap();
            runtime.start_container(&c).await.unwrap();
            c
        };
        let container: ApiContainer = serde_json::from_value(json!({"name": "c",
            "lifecycle": {"postStart": {"exec": {"command": ["touch", "/ready"]}}}}))
        .unwrap();
        let handler = Hook::PostStart.of(&container).unwrap();
        let budget = Duration::from_secs(30);
        assert_eq!(
            run(&runtime, handler, &container, &id, "", budget).await,
            Ok(())
        );
        assert!(
            runtime
                .calls()
                .contains(&format!("ExecSync {id} touch /ready"))
        );
        runtime.set_exec_exit_code(2);
        assert!(
            run(&runtime, handler, &container, &id, "", budget)
                .await
                .is_err()
        );
        assert!(Hook::PreStop.of(&container).is_none());
    }

    #[test]
    fn sigterm_keeps_at_least_two_seconds_of_grace() {
        assert_eq!(grace_left(30, Instant::now()), 30);
        assert_eq!(grace_left(1, Instant::now()), 2);
    }
}
