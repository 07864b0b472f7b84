//! The pod lifecycle event generator, in the role of upstream's generic PLEG: once a second the
//! runtime's sandboxes and containers are read for the whole node (each one's pod, id and state:
//! [`ContainerRuntime::pod_states`], the two list calls by default) and the pods
//! whose sandboxes or containers appeared, went away or changed state since the last relist are
//! reported, so that a pod's worker syncs when something happened to it rather than on a timer.
//! A runtime that tells a generation ([`ContainerRuntime::generation`], the hollow one) is read
//! only when it moved: 5,000 hollow nodes relisting ~60 objects each a second were a third of
//! their process's CPU.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::cri::{self, ContainerRuntime};

/// How often the runtime is relisted (upstream's `relistPeriod`).
pub const RELIST: Duration = Duration::from_secs(1);

/// What a pod has in the runtime: each sandbox's and container's id and state, sorted.
type Digest = Vec<(String, i32)>;

/// The runtime's pods as the last relist saw them.
pub struct Pleg {
    runtime: Arc<dyn ContainerRuntime>,
    /// None before the first relist.
    last: Option<HashMap<String, Digest>>,
    /// The runtime's generation when `last` was listed, if it tells one.
    listed_at: Option<u64>,
}

impl Pleg {
    pub fn new(runtime: Arc<dyn ContainerRuntime>) -> Pleg {
        Pleg {
            runtime,
            last: None,
            listed_at: None,
        }
    }

    /// Lists the runtime once; returns the uids of the pods whose sandboxes or containers
    /// differ from the previous relist (none on the first).
    pub async fn relist(&mut self) -> Result<HashSet<String>, cri::Error> {
        // read before listing: a change while listing makes the next relist list again
        let generation = self.runtime.generation();
        if generation.is_some() && generation == self.listed_at && self.last.is_some() {
            return Ok(HashSet::new());
        }
        let mut now: HashMap<String, Digest> = HashMap::new();
        for s in self.runtime.pod_states().await? {
            now.entry(s.pod_uid).or_default().push((s.id, s.state));
        }
        now.values_mut().for_each(|d| d.sort_unstable());
        let changed = match &self.last {
            None => HashSet::new(),
            Some(last) => {
                let gone = last.keys().filter(|uid| !now.contains_key(*uid));
                let new_or_different = now
                    .iter()
                    .filter(|(uid, d)| last.get(*uid) != Some(d))
                    .map(|(uid, _)| uid);
                gone.chain(new_or_different).cloned().collect()
            }
        };
        self.last = Some(now);
        self.listed_at = generation;
        Ok(changed)
    }

    /// Relists every [`RELIST`] and sends each non-empty set of changed pods to `changes`,
    /// until its receiver is gone.
    pub async fn run(mut self, changes: mpsc::UnboundedSender<HashSet<String>>) {
        let mut tick = tokio::time::interval(RELIST);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !changes.is_closed() {
            tick.tick().await;
            match self.relist().await {
                Ok(changed) if !changed.is_empty() => {
                    let _ = changes.send(changed);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "relisting the runtime's pods"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::{ContainerConfig, ContainerMetadata, PodSandboxConfig};
    use crate::fake::FakeRuntime;
    use crate::pod_sync::uid_labels;

    async fn sandbox(runtime: &FakeRuntime, uid: &str) -> (String, PodSandboxConfig) {
        let config = PodSandboxConfig {
            labels: uid_labels(uid),
            ..Default::default()
        };
        let id = runtime.run_pod_sandbox(config.clone(), "").await.unwrap();
        (id, config)
    }

    async fn container(
        runtime: &FakeRuntime,
        (id, sandbox): &(String, PodSandboxConfig),
    ) -> String {
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            labels: sandbox.labels.clone(),
            ..Default::default()
        };
        let c = runtime
            .create_container(id, config, sandbox.clone())
            .await
            .unwrap();
        runtime.start_container(&c).await.unwrap();
        c
    }

    fn uids(changed: HashSet<String>) -> Vec<String> {
        let mut uids: Vec<String> = changed.into_iter().collect();
        uids.sort();
        uids
    }

    #[tokio::test]
    async fn a_runtime_that_tells_its_generation_is_listed_only_when_it_moved() {
        let runtime = Arc::new(FakeRuntime::new());
        runtime.tell_generation(Some(1));
        let mut pleg = Pleg::new(runtime.clone());
        sandbox(&runtime, "a").await;
        assert!(pleg.relist().await.unwrap().is_empty(), "the baseline");
        let listed = runtime.calls().len();

        sandbox(&runtime, "b").await;
        let calls = runtime.calls().len();
        assert!(
            pleg.relist().await.unwrap().is_empty(),
            "generation 1 again"
        );
        assert_eq!(runtime.calls().len(), calls, "not listed");
        assert!(calls > listed);

        runtime.tell_generation(Some(2));
        assert_eq!(uids(pleg.relist().await.unwrap()), ["b"]);
        assert!(runtime.calls().len() > calls, "listed");
    }

    #[tokio::test]
    async fn a_relist_reports_the_pods_whose_containers_appeared_changed_or_went_away() {
        let runtime = Arc::new(FakeRuntime::new());
        runtime.add_image("busybox");
        let mut pleg = Pleg::new(runtime.clone());
        let a = sandbox(&runtime, "a").await;
        assert!(
            pleg.relist().await.unwrap().is_empty(),
            "the first relist is the baseline"
        );

        let b = sandbox(&runtime, "b").await;
        assert_eq!(uids(pleg.relist().await.unwrap()), ["b"], "a new sandbox");
        assert!(pleg.relist().await.unwrap().is_empty(), "nothing happened");

        let in_a = container(&runtime, &a).await;
        let in_b = container(&runtime, &b).await;
        assert_eq!(uids(pleg.relist().await.unwrap()), ["a", "b"]);

        runtime.exit_container(&in_a, 1);
        assert_eq!(uids(pleg.relist().await.unwrap()), ["a"], "an exit");

        runtime.remove_pod_sandbox(&b.0).await.unwrap();
        assert_eq!(uids(pleg.relist().await.unwrap()), ["b"], "all gone");
        assert!(runtime.container_status(&in_b).await.is_err());
        assert!(pleg.relist().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_node_without_pods_at_the_first_relist_reports_its_first_pod() {
        let runtime = Arc::new(FakeRuntime::new());
        let mut pleg = Pleg::new(runtime.clone());
        assert!(pleg.relist().await.unwrap().is_empty());
        sandbox(&runtime, "a").await;
        assert_eq!(uids(pleg.relist().await.unwrap()), ["a"]);
    }
}
