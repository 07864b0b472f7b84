//! What a sync should do, without I/O (upstream's `computePodActions`): from the pod's spec and
//! the containers the runtime has, which container to start (and as which attempt), which to
//! leave waiting and why, and whether the pod is initialized, still running or finished. Init
//! containers run one at a time, in order, each to a successful exit, before any app container,
//! and again from the first in a new sandbox; sidecars (init containers with `restartPolicy:
//! Always`) start in that order, the next init container waiting for the sidecar to run and
//! pass its startup probe, and keep running. Ephemeral containers start once each, whether or
//! not the pod is initialized, and never again ([`crate::ephemeral`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::{ContainerState, ContainerStatus};
use crate::status::Waiting;

/// CrashLoopBackOff: the first restart is immediate, then 10 s doubling up to 5 min.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// CrashLoopBackOff's delay before restart number `restarts + 1`.
pub fn backoff(restarts: u32) -> Duration {
    if restarts == 0 {
        return Duration::ZERO;
    }
    let factor = 1u32.checked_shl(restarts - 1).unwrap_or(u32::MAX);
    BACKOFF_INITIAL.saturating_mul(factor).min(BACKOFF_MAX)
}

/// Whether a container that exited with `exit_code` is restarted under `policy`.
pub fn should_restart(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

/// What to do with one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Running, or exited for good: nothing to do.
    Keep,
    /// Create and start it as this attempt (0 for the first run).
    Start { attempt: u32 },
    /// It was created but never started (a failed start): start it again.
    StartCreated { id: String },
    /// Exited and due for a restart, but in back-off for this long yet.
    BackOff { delay: Duration, left: Duration },
}

/// Where the pod's init containers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Init {
    /// All init containers exited 0 (or there are none): app containers run.
    #[default]
    Done,
    /// One is running, starting or backing off: app containers wait.
    InProgress,
    /// One failed under restartPolicy Never: the pod has failed.
    Failed,
}

/// The plan of one sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub init: Init,
    /// Steps by container name, in the order to take them (at most one init container).
    pub steps: Vec<(String, Step)>,
    /// Every container ran and none will run again: the pod is done with its sandbox.
    pub finished: bool,
}

fn is(c: &ContainerStatus, state: ContainerState) -> bool {
    c.state == state as i32
}

/// The step for one container whose newest run is `latest`.
pub fn step(latest: Option<&ContainerStatus>, policy: &str, now: Timestamp) -> Step {
    let Some(c) = latest else {
        return Step::Start { attempt: 0 };
    };
    if is(c, ContainerState::ContainerCreated) {
        return Step::StartCreated { id: c.id.clone() };
    }
    if is(c, ContainerState::ContainerRunning) || !should_restart(policy, c.exit_code) {
        return Step::Keep;
    }
    let restarts = c.metadata.as_ref().map(|m| m.attempt).unwrap_or(0);
    let delay = backoff(restarts);
    let finished_at =
        Timestamp::from_nanosecond(i128::from(c.finished_at)).unwrap_or(Timestamp::UNIX_EPOCH);
    let elapsed: Duration = now
        .duration_since(finished_at)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if elapsed >= delay {
        Step::Start {
            attempt: restarts + 1,
        }
    } else {
        Step::BackOff {
            delay,
            left: delay - elapsed,
        }
    }
}

/// What the runtime and the prober tell a [`plan`] about a pod's containers.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// Each container's runs, by name, newest first.
    pub runs: &'a HashMap<String, Vec<ContainerStatus>>,
    /// The ids of the runs in the pod's current sandbox. An init container that completed (or
    /// a sidecar that ran) in an earlier sandbox runs again in a new one, from the first, as
    /// upstream's kubelet does when it recreates a pod's sandbox.
    pub in_sandbox: &'a HashSet<String>,
    /// The ids of running containers whose startup probe has passed.
    pub startup_passed: &'a HashSet<String>,
}

/// The first run of a container in a new sandbox: the attempt after its newest one.
fn fresh_start(last: Option<&ContainerStatus>) -> Step {
    Step::Start {
        attempt: last
            .and_then(|s| s.metadata.as_ref())
            .map_or(0, |m| m.attempt + 1),
    }
}

/// The plan for a pod whose containers are as `observed` says.
pub fn plan(pod: &Pod, observed: Observed<'_>, now: Timestamp) -> Plan {
    let spec = pod.spec.clone().unwrap_or_default();
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let latest = |name: &str| observed.runs.get(name).and_then(|h| h.first());
    let here = |s: &ContainerStatus| observed.in_sandbox.contains(&s.id);
    // a failed init container is retried unless the pod never restarts anything
    let init_policy = if policy == "Never" {
        "Never"
    } else {
        "OnFailure"
    };
    let mut steps = Vec::new();
    let mut init = Init::Done;
    // once an app container has run in this sandbox, the pod was initialized, and a sidecar
    // that stopped since is only restarted: it does not hold the pod back again
    let initialized = spec
        .containers
        .iter()
        .any(|c| latest(&c.name).is_some_and(here));
    for c in spec.init_containers.iter().flatten() {
        let last = latest(&c.name);
        let stale = last.is_some_and(|s| !here(s));
        if is_sidecar(c) {
            let step = match stale {
                true => fresh_start(last),
                false => step(last, "Always", now),
            };
            // started: running, and past its startup probe if it has one
            let started = last.is_some_and(|s| {
                here(s)
                    && is(s, ContainerState::ContainerRunning)
                    && (c.startup_probe.is_none() || observed.startup_passed.contains(&s.id))
            });
            if step != Step::Keep {
                steps.push((c.name.clone(), step));
            }
            if started || initialized {
                continue;
            }
            init = Init::InProgress;
            break;
        }
        if stale {
            steps.push((c.name.clone(), fresh_start(last)));
            init = Init::InProgress;
            break;
        }
        if last.is_some_and(|s| is(s, ContainerState::ContainerExited) && s.exit_code == 0) {
            continue;
        }
        let step = step(last, init_policy, now);
        init = if step == Step::Keep
            && last.is_some_and(|s| !is(s, ContainerState::ContainerRunning))
        {
            Init::Failed
        } else {
            Init::InProgress
        };
        if step != Step::Keep {
            steps.push((c.name.clone(), step));
        }
        break;
    }
    let mut finished = init == Init::Failed;
    if init == Init::Done {
        finished = true;
        for c in &spec.containers {
            let last = latest(&c.name);
            let step = step(last, policy, now);
            let done = step == Step::Keep
                && last.is_some_and(|s| !is(s, ContainerState::ContainerRunning));
            finished &= done;
            if step != Step::Keep {
                steps.push((c.name.clone(), step));
            }
        }
    }
    // upstream's computePodActions: ephemeral containers may start before initialization is
    // complete, and are never restarted (a new sandbox does not run them again either)
    for c in spec.ephemeral_containers.iter().flatten() {
        if crate::ephemeral::due(latest(&c.name)) {
            steps.push((c.name.clone(), Step::Start { attempt: 0 }));
        }
    }
    Plan {
        init,
        steps,
        finished,
    }
}

/// A sidecar: an init container with `restartPolicy: Always`. It starts in init order, the next
/// init container waits only for it to be running (and past its startup probe), and it keeps
/// running (restarted whatever
/// its exit) beside the app containers, which alone decide when the pod is finished.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The waiting reason a step gives its container's status, if any.
pub fn waiting(step: &Step, container: &str, pod: &Pod) -> Option<Waiting> {
    match step {
        Step::BackOff { delay, .. } => {
            let m = &pod.metadata;
            Some(Waiting {
                reason: "CrashLoopBackOff".into(),
                message: format!(
                    "back-off {}s restarting failed container={container} pod={}_{}({})",
                    delay.as_secs(),
                    m.name.as_deref().unwrap_or_default(),
                    m.namespace.as_deref().unwrap_or("default"),
                    m.uid.as_deref().unwrap_or_default(),
                ),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use k8s_cri::v1::ContainerMetadata;
    use serde_json::json;

    use super::*;

    fn pod(policy: &str, init: &[&str]) -> Pod {
        // a name starting with "side" is a sidecar
        let inits: Vec<_> = init
            .iter()
            .map(|n| match n.starts_with("side") {
                true => json!({"name": n, "image": "busybox", "restartPolicy": "Always"}),
                false => json!({"name": n, "image": "busybox"}),
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy, "initContainers": inits,
                     "containers": [{"name": "app", "image": "busybox"}]},
        }))
        .unwrap()
    }

    fn run(name: &str, state: ContainerState, attempt: u32, exit_code: i32) -> ContainerStatus {
        ContainerStatus {
            id: format!("{name}-{attempt}"),
            metadata: Some(ContainerMetadata {
                name: name.into(),
                attempt,
            }),
            state: state as i32,
            exit_code,
            finished_at: 1_000_000_000,
            ..Default::default()
        }
    }

    fn runs(list: Vec<ContainerStatus>) -> HashMap<String, Vec<ContainerStatus>> {
        let mut m: HashMap<String, Vec<ContainerStatus>> = HashMap::new();
        for r in list {
            m.entry(r.metadata.clone().unwrap().name)
                .or_default()
                .push(r);
        }
        m
    }

    /// The plan with every run in the current sandbox and no startup probe passed.
    fn plan_all(pod: &Pod, runs: &HashMap<String, Vec<ContainerStatus>>, now: Timestamp) -> Plan {
        let in_sandbox = runs.values().flatten().map(|s| s.id.clone()).collect();
        let observed = Observed {
            runs,
            in_sandbox: &in_sandbox,
            startup_passed: &HashSet::new(),
        };
        plan(pod, observed, now)
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn backoff_doubles_from_ten_seconds_to_five_minutes() {
        let secs: Vec<u64> = (0..8).map(|r| backoff(r).as_secs()).collect();
        assert_eq!(secs, [0, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff(100), BACKOFF_MAX);
    }

    #[test]
    fn init_containers_run_one_at_a_time_before_the_app() {
        let p = pod("Always", &["a", "b"]);
        let plan1 = plan_all(&p, &HashMap::new(), at(5));
        assert_eq!(plan1.init, Init::InProgress);
        assert_eq!(plan1.steps, [("a".to_string(), Step::Start { attempt: 0 })]);

        let a_running = runs(vec![run("a", ContainerState::ContainerRunning, 0, 0)]);
        let plan2 = plan_all(&p, &a_running, at(5));
        assert_eq!((plan2.init, plan2.steps.len()), (Init::InProgress, 0));

        let a_done = runs(vec![run("a", ContainerState::ContainerExited, 0, 0)]);
        assert_eq!(
            plan_all(&p, &a_done, at(5)).steps,
            [("b".to_string(), Step::Start { attempt: 0 })]
        );

        let both_done = runs(vec![
            run("a", ContainerState::ContainerExited, 0, 0),
            run("b", ContainerState::ContainerExited, 0, 0),
        ]);
        let plan4 = plan_all(&p, &both_done, at(5));
        assert_eq!(plan4.init, Init::Done);
        assert_eq!(
            plan4.steps,
            [("app".to_string(), Step::Start { attempt: 0 })]
        );
    }

    #[test]
    fn a_failed_init_container_fails_a_never_pod_and_is_retried_otherwise() {
        let failed = runs(vec![run("a", ContainerState::ContainerExited, 0, 1)]);
        let never = plan_all(&pod("Never", &["a"]), &failed, at(5));
        assert_eq!(never.init, Init::Failed);
        assert!(never.finished);
        assert!(never.steps.is_empty());

        let always = plan_all(&pod("Always", &["a"]), &failed, at(5));
        assert_eq!(always.init, Init::InProgress);
        assert_eq!(
            always.steps,
            [("a".to_string(), Step::Start { attempt: 1 })]
        );
        assert!(!always.finished);
    }

    #[test]
    fn an_exited_app_container_backs_off_from_its_second_restart() {
        let p = pod("Always", &[]);
        let second = runs(vec![run("app", ContainerState::ContainerExited, 1, 1)]);
        // finished at 1 s; back-off of 10 s
        let plan1 = plan_all(&p, &second, at(5));
        assert_eq!(
            plan1.steps,
            [(
                "app".to_string(),
                Step::BackOff {
                    delay: Duration::from_secs(10),
                    left: Duration::from_secs(6)
                }
            )]
        );
        let w = waiting(&plan1.steps[0].1, "app", &p).unwrap();
        assert_eq!(w.reason, "CrashLoopBackOff");
        assert_eq!(
            plan_all(&p, &second, at(11)).steps,
            [("app".to_string(), Step::Start { attempt: 2 })]
        );
    }

    #[test]
    fn a_pod_is_finished_when_no_container_will_run_again() {
        let ok = runs(vec![run("app", ContainerState::ContainerExited, 0, 0)]);
        assert!(plan_all(&pod("Never", &[]), &ok, at(5)).finished);
        assert!(plan_all(&pod("OnFailure", &[]), &ok, at(5)).finished);
        assert!(!plan_all(&pod("Always", &[]), &ok, at(5)).finished);
        let running = runs(vec![run("app", ContainerState::ContainerRunning, 0, 0)]);
        assert!(!plan_all(&pod("Never", &[]), &running, at(5)).finished);
    }

    #[test]
    fn a_created_but_unstarted_container_is_started_again() {
        let created = runs(vec![run("app", ContainerState::ContainerCreated, 0, 0)]);
        assert_eq!(
            plan_all(&pod("Always", &[]), &created, at(5)).steps,
            [("app".to_string(), Step::StartCreated { id: "app-0".into() })]
        );
    }

    #[test]
    fn a_sidecar_starts_in_init_order_and_the_next_init_container_waits_for_it_to_run() {
        let p = pod("Never", &["side", "b"]);
        assert_eq!(
            plan_all(&p, &HashMap::new(), at(5)).steps,
            [("side".to_string(), Step::Start { attempt: 0 })]
        );
        let side_running = runs(vec![run("side", ContainerState::ContainerRunning, 0, 0)]);
        let next = plan_all(&p, &side_running, at(5));
        assert_eq!(next.init, Init::InProgress);
        assert_eq!(next.steps, [("b".to_string(), Step::Start { attempt: 0 })]);

        let b_done = runs(vec![
            run("side", ContainerState::ContainerRunning, 0, 0),
            run("b", ContainerState::ContainerExited, 0, 0),
        ]);
        let app = plan_all(&p, &b_done, at(5));
        assert_eq!(app.init, Init::Done);
        assert_eq!(app.steps, [("app".to_string(), Step::Start { attempt: 0 })]);
    }

    #[test]
    fn a_sidecar_is_restarted_whatever_the_pods_policy_and_does_not_keep_the_pod_alive() {
        let p = pod("Never", &["side"]);
        // it exited 0 under a Never pod, after the app started: restarted, pod still initialized
        let side_exited = runs(vec![
            run("side", ContainerState::ContainerExited, 0, 0),
            run("app", ContainerState::ContainerRunning, 0, 0),
        ]);
        let restart = plan_all(&p, &side_exited, at(5));
        assert_eq!(restart.init, Init::Done);
        assert_eq!(
            restart.steps,
            [("side".to_string(), Step::Start { attempt: 1 })]
        );
        assert!(!restart.finished);

        // the app is done: the pod is finished while its sidecar still runs
        let app_done = runs(vec![
            run("side", ContainerState::ContainerRunning, 0, 0),
            run("app", ContainerState::ContainerExited, 0, 0),
        ]);
        assert!(plan_all(&p, &app_done, at(5)).finished);
    }

    #[test]
    fn init_containers_run_again_from_the_first_in_a_new_sandbox() {
        let p = pod("Always", &["a", "side", "b"]);
        let old = runs(vec![
            run("a", ContainerState::ContainerExited, 0, 0),
            run("side", ContainerState::ContainerExited, 0, 137),
            run("b", ContainerState::ContainerExited, 0, 0),
            run("app", ContainerState::ContainerExited, 0, 137),
        ]);
        let none = HashSet::new();
        let observed = |in_sandbox| Observed {
            runs: &old,
            in_sandbox,
            startup_passed: &none,
        };
        // the new sandbox has nothing yet: the first init container again, as its next attempt
        let fresh = plan(&p, observed(&none), at(5));
        assert_eq!(fresh.init, Init::InProgress);
        assert_eq!(fresh.steps, [("a".to_string(), Step::Start { attempt: 1 })]);
        assert!(!fresh.finished);

        // `a` done again in the new sandbox: the sidecar starts again at once (it exited in
        // the old one), then `b` will
        let mut new = old.clone();
        new.get_mut("a")
            .unwrap()
            .insert(0, run("a", ContainerState::ContainerExited, 1, 0));
        let a_again = HashSet::from(["a-1".to_string()]);
        let observed = Observed {
            runs: &new,
            in_sandbox: &a_again,
            startup_passed: &none,
        };
        assert_eq!(
            plan(&p, observed, at(5)).steps,
            [("side".to_string(), Step::Start { attempt: 1 })]
        );
    }

    #[test]
    fn an_ephemeral_container_starts_once_even_during_init_and_is_never_restarted() {
        let mut p = pod("Always", &["a"]);
        p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![
            serde_json::from_value(json!({"name": "debugger", "image": "busybox"})).unwrap(),
        ]);
        let a_running = runs(vec![run("a", ContainerState::ContainerRunning, 0, 0)]);
        let during_init = plan_all(&p, &a_running, at(5));
        assert_eq!(during_init.init, Init::InProgress);
        assert_eq!(
            during_init.steps,
            [("debugger".to_string(), Step::Start { attempt: 0 })]
        );
        // it exited (with a failure, under restartPolicy Always): it stays so
        let exited = runs(vec![
            run("a", ContainerState::ContainerExited, 0, 0),
            run("app", ContainerState::ContainerRunning, 0, 0),
            run("debugger", ContainerState::ContainerExited, 0, 1),
        ]);
        assert!(plan_all(&p, &exited, at(5)).steps.is_empty());
        // nor is it run again in a new sandbox, and it does not keep the pod from finishing
        let fresh = plan(
            &p,
            Observed {
                runs: &exited,
                in_sandbox: &HashSet::new(),
                startup_passed: &HashSet::new(),
            },
            at(5),
        );
        assert_eq!(fresh.steps, [("a".to_string(), Step::Start { attempt: 1 })]);
        let mut never = pod("Never", &[]);
        never.spec.as_mut().unwrap().ephemeral_containers = p.spec.unwrap().ephemeral_containers;
        let app_done = runs(vec![
            run("app", ContainerState::ContainerExited, 0, 0),
            run("debugger", ContainerState::ContainerRunning, 0, 0),
        ]);
        assert!(plan_all(&never, &app_done, at(5)).finished);
    }

    #[test]
    fn the_next_init_container_waits_for_a_sidecars_startup_probe() {
        let mut p = pod("Always", &["side", "b"]);
        p.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].startup_probe =
            Some(serde_json::from_value(json!({"exec": {"command": ["up"]}})).unwrap());
        let side_running = runs(vec![run("side", ContainerState::ContainerRunning, 0, 0)]);
        let in_sandbox = HashSet::from(["side-0".to_string()]);
        let observed = |startup_passed| Observed {
            runs: &side_running,
            in_sandbox: &in_sandbox,
            startup_passed,
        };
        let none = HashSet::new();
        let waiting = plan(&p, observed(&none), at(5));
        assert_eq!((waiting.init, waiting.steps.len()), (Init::InProgress, 0));
        let started = plan(&p, observed(&in_sandbox), at(5));
        assert_eq!(
            started.steps,
            [("b".to_string(), Step::Start { attempt: 0 })]
        );
    }
}
