//! Pods a Permit plugin asked to wait (upstream's `waitingPodsMap` and `waitingPod`): the pod
//! stays assumed on its node while its binding cycle waits until every plugin that said Wait
//! allows it, one rejects it, or a plugin's timeout passes. Plugins (gang scheduling, quotas)
//! find waiting pods by uid through [`Framework::waiting_pods`](super::Framework::waiting_pods).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::status::Status;

/// Upstream's cap on a Permit plugin's timeout (`maxTimeout`).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The profile's waiting pods, by uid.
#[derive(Debug, Default)]
pub struct WaitingPods {
    pods: Mutex<HashMap<String, Arc<WaitingPod>>>,
}

impl WaitingPods {
    pub fn get(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.pods.lock().get(uid).cloned()
    }

    /// Every waiting pod (a snapshot).
    pub fn all(&self) -> Vec<Arc<WaitingPod>> {
        self.pods.lock().values().cloned().collect()
    }

    pub(crate) fn insert(&self, pod: Arc<WaitingPod>) {
        self.pods.lock().insert(pod.uid.clone(), pod);
    }

    pub(crate) fn remove(&self, uid: &str) -> Option<Arc<WaitingPod>> {
        self.pods.lock().remove(uid)
    }
}

/// One pod waiting at Permit.
#[derive(Debug)]
pub struct WaitingPod {
    pub uid: String,
    /// `namespace/name`.
    pub key: String,
    /// The node it is assumed on.
    pub node: String,
    state: Mutex<WaitState>,
    decided: Notify,
}

#[derive(Debug)]
struct WaitState {
    /// Plugins still to allow the pod, with when each gives up.
    pending: Vec<(&'static str, Instant, Duration)>,
    outcome: Option<Status>,
}

impl WaitingPod {
    /// A pod waiting for `plugins`, each for its own timeout (capped at [`MAX_TIMEOUT`]).
    pub fn new(
        uid: String,
        key: String,
        node: String,
        plugins: Vec<(&'static str, Duration)>,
    ) -> WaitingPod {
        let now = Instant::now();
        WaitingPod {
            uid,
            key,
            node,
            state: Mutex::new(WaitState {
                pending: plugins
                    .into_iter()
                    .map(|(p, t)| {
                        let t = t.min(MAX_TIMEOUT);
                        (p, now + t, t)
                    })
                    .collect(),
                outcome: None,
            }),
            decided: Notify::new(),
        }
    }

    /// The plugins that have not allowed the pod yet.
    pub fn pending_plugins(&self) -> Vec<&'static str> {
        self.state
            .lock()
            .pending
            .iter()
            .map(|(p, _, _)| *p)
            .collect()
    }

    /// `plugin` lets the pod go on; once every waiting plugin has, it binds.
    pub fn allow(&self, plugin: &str) {
        let mut s = self.state.lock();
        s.pending.retain(|(p, _, _)| *p != plugin);
        if s.pending.is_empty() && s.outcome.is_none() {
            s.outcome = Some(Status::success());
            self.decided.notify_one();
        }
    }

    /// `plugin` turns the pod away: it is unreserved and requeued.
    pub fn reject(&self, plugin: &'static str, message: &str) {
        let mut s = self.state.lock();
        if s.outcome.is_none() {
            s.outcome = Some(Status::unschedulable(message).with_plugin(plugin));
            self.decided.notify_one();
        }
    }

    /// Waits for the outcome; a plugin whose timeout passes first rejects the pod, as
    /// upstream ("rejected due to timeout after waiting 10s at plugin Gang").
    pub async fn wait(&self) -> Status {
        loop {
            let next = {
                let s = self.state.lock();
                if let Some(outcome) = &s.outcome {
                    return outcome.clone();
                }
                s.pending.iter().min_by_key(|(_, at, _)| *at).copied()
            };
            let Some((plugin, at, timeout)) = next else {
                return Status::success();
            };
            tokio::select! {
                _ = self.decided.notified() => {}
                _ = tokio::time::sleep_until(at) => {
                    let msg = format!(
                        "rejected due to timeout after waiting {timeout:?} at plugin {plugin}"
                    );
                    self.reject(plugin, &msg);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;

    fn waiting(plugins: Vec<(&'static str, Duration)>) -> Arc<WaitingPod> {
        Arc::new(WaitingPod::new(
            "uid-1".into(),
            "default/p".into(),
            "n1".into(),
            plugins,
        ))
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_goes_on_once_every_waiting_plugin_allows_it() {
        let pod = waiting(vec![
            ("A", Duration::from_secs(10)),
            ("B", Duration::from_secs(10)),
        ]);
        let waiter = tokio::spawn({
            let pod = pod.clone();
            async move { pod.wait().await }
        });
        pod.allow("A");
        assert_eq!(pod.pending_plugins(), vec!["B"]);
        pod.allow("B");
        assert!(waiter.await.unwrap().is_success());
    }

    #[tokio::test(start_paused = true)]
    async fn a_rejection_or_a_timeout_turns_it_away() {
        let pod = waiting(vec![("A", Duration::from_secs(10))]);
        pod.reject("A", "quota exhausted");
        let s = pod.wait().await;
        assert_eq!(
            (s.code(), s.message()),
            (Code::Unschedulable, "quota exhausted".into())
        );

        let pod = waiting(vec![
            ("Slow", Duration::from_secs(30)),
            ("Gang", Duration::from_secs(10)),
        ]);
        let s = pod.wait().await;
        assert_eq!(s.plugin(), "Gang");
        assert_eq!(
            s.message(),
            "rejected due to timeout after waiting 10s at plugin Gang"
        );
    }
}
