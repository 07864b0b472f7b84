//! Running a pod's probes during [`SyncContext::sync_pod`]: startup, liveness and readiness
//! probes that are due for its running app containers and sidecars, with upstream's
//! `Unhealthy` events; a failed startup or liveness probe stops the container (after its
//! preStop hook) so that the next sync restarts it as `restartPolicy` says.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::actions;
use crate::api::PodEvent;
use crate::cri::{ContainerState, ContainerStatus};
use crate::pod_sync::{SyncContext, pod_key};
use crate::probe::{self, Kind, Probes, Transition};

/// What running a pod's due probes found.
pub(crate) struct Probed {
    /// Each probed container's (started, ready), by name.
    pub results: HashMap<String, (bool, bool)>,
    /// A failed startup or liveness probe had a container stopped (it is restarted by the next
    /// sync, as restartPolicy says).
    pub killed: bool,
    /// How long until the next probe is due, if the pod has one to run.
    pub next: Option<Duration>,
}

impl SyncContext {
    /// Runs the probes that are due for the pod's running app containers and sidecars.
    pub(crate) async fn probe(
        &self,
        pod: &Pod,
        runs: &HashMap<String, Vec<ContainerStatus>>,
        pod_ip: &str,
        now: Timestamp,
        probes: &mut Probes,
    ) -> Probed {
        let spec = pod.spec.clone().unwrap_or_default();
        let mut results = HashMap::new();
        let mut running = Vec::new();
        let mut killed = false;
        let mut next: Option<Duration> = None;
        let mut due_in = |wait: Duration| next = Some(next.map_or(wait, |n| n.min(wait)));
        let sidecars = spec.init_containers.iter().flatten();
        for c in sidecars
            .filter(|c| actions::is_sidecar(c))
            .chain(&spec.containers)
        {
            let Some(run) = runs.get(&c.name).and_then(|h| h.first()) else {
                continue;
            };
            if run.state != ContainerState::ContainerRunning as i32 {
                continue;
            }
            running.push(run.id.clone());
            let started_at = Timestamp::from_nanosecond(i128::from(run.started_at)).unwrap_or(now);
            let mut started = true;
            for kind in [Kind::Startup, Kind::Liveness, Kind::Readiness] {
                let Some(p) = kind.of(c) else { continue };
                if kind == Kind::Startup && probes.result(&run.id, kind) {
                    continue;
                }
                // liveness and readiness wait for the startup probe
                if !started {
                    continue;
                }
                if !probes.due(&run.id, kind, p, started_at, now) {
                    if kind == Kind::Startup {
                        started = false;
                    }
                    due_in(probes.until_due(&run.id, kind, p, started_at, now));
                    continue;
                }
                let outcome = probe::run(self.runtime.as_ref(), p, c, &run.id, pod_ip).await;
                if let Err(why) = &outcome {
                    let message = format!("{} probe failed: {why}", kind.name());
                    self.api
                        .event(pod, PodEvent::warning("Unhealthy", &c.name, message))
                        .await;
                }
                let transition = probes.record(&run.id, kind, p, outcome.is_ok(), now);
                due_in(probes.until_due(&run.id, kind, p, started_at, now));
                if kind == Kind::Startup {
                    started = probes.result(&run.id, kind);
                }
                if transition == Transition::Now(false) && kind != Kind::Readiness {
                    let message = format!(
                        "Container {} failed {} probe, will be restarted",
                        c.name,
                        kind.name().to_lowercase()
                    );
                    self.api
                        .event(pod, PodEvent::normal("Killing", &c.name, message))
                        .await;
                    let grace = p
                        .termination_grace_period_seconds
                        .or(spec.termination_grace_period_seconds)
                        .unwrap_or(30);
                    let stopped = self
                        .kill_container(pod, Some(c), &run.id, pod_ip, grace, async {})
                        .await;
                    if let Err(e) = stopped {
                        tracing::warn!(pod = %pod_key(pod), error = %e, "stopping an unhealthy container");
                    }
                    killed = true;
                    break;
                }
            }
            let ready =
                started && (c.readiness_probe.is_none() || probes.result(&run.id, Kind::Readiness));
            results.insert(c.name.clone(), (started, ready));
        }
        probes.retain(&running);
        Probed {
            results,
            killed,
            next,
        }
    }
}
