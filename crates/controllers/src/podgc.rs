//! `podgc` (upstream's PodGCController), every 20 s: terminated pods beyond
//! `--terminated-pod-gc-threshold` are deleted oldest first; pods bound to a Node that has been
//! absent for the 40 s quarantine are marked Failed with `DisruptionTarget`
//! (`DeletionByPodGC`) and force-deleted; terminating pods never scheduled are force-deleted.
//! Upstream's pass over terminating pods on `out-of-service` tainted nodes is not done.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::{Context, podutil};

/// Upstream's `gcCheckPeriod`.
pub const CHECK_PERIOD: Duration = Duration::from_secs(20);
/// Upstream's `quarantineTime`: how long a node must be missing before its pods go.
pub const QUARANTINE: SignedDuration = SignedDuration::from_secs(40);

/// Why a pod is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Over the terminated-pod threshold.
    Terminated,
    /// Its node no longer exists.
    Orphaned,
    /// Terminating and never scheduled.
    UnscheduledTerminating,
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The pods to delete this pass. `absent_since` remembers when each missing node was first
/// noticed: its pods are planned only after the quarantine (and [`pass`] confirms the node is
/// still missing with a fresh read before deleting them).
pub fn plan<P: Borrow<Pod>>(
    pods: &[P],
    nodes: &HashSet<String>,
    absent_since: &mut HashMap<String, Timestamp>,
    threshold: i64,
    now: Timestamp,
) -> Vec<(Pod, Reason)> {
    let mut out = Vec::new();
    let mut terminated: Vec<&Pod> = pods
        .iter()
        .map(Borrow::borrow)
        .filter(|p| matches!(phase(p), "Succeeded" | "Failed"))
        .collect();
    if threshold > 0 && terminated.len() as i64 > threshold {
        terminated.sort_by_key(|p| {
            (
                p.metadata.creation_timestamp.clone().map(|t| t.0),
                p.name_any(),
            )
        });
        let excess = terminated.len() - threshold as usize;
        out.extend(
            terminated
                .into_iter()
                .take(excess)
                .map(|p| (p.clone(), Reason::Terminated)),
        );
    }
    absent_since.retain(|n, _| !nodes.contains(n));
    for p in pods.iter().map(Borrow::borrow) {
        if out.iter().any(|(o, _)| o.uid() == p.uid()) {
            continue;
        }
        match node_of(p) {
            Some(node) if !nodes.contains(node) => {
                let since = *absent_since.entry(node.to_string()).or_insert(now);
                if now.duration_since(since) >= QUARANTINE {
                    out.push((p.clone(), Reason::Orphaned));
                }
            }
            None if p.metadata.deletion_timestamp.is_some() => {
                out.push((p.clone(), Reason::UnscheduledTerminating));
            }
            _ => {}
        }
    }
    out
}

#[async_trait]
pub trait PodGc: Send + Sync {
    /// Whether the node exists now (read from the server, not a cache).
    async fn node_exists(&self, node: &str) -> kube::Result<bool>;
    /// Deletes the pod; orphaned ones are first marked Failed with `DisruptionTarget`.
    async fn delete(&self, pod: &Pod, reason: Reason, now: Timestamp) -> kube::Result<()>;
}

/// One pass: plans, confirms missing nodes, deletes.
pub async fn pass<P: Borrow<Pod>>(
    pods: &[P],
    nodes: &HashSet<String>,
    absent_since: &mut HashMap<String, Timestamp>,
    threshold: i64,
    now: Timestamp,
    api: &dyn PodGc,
) -> kube::Result<Vec<(String, Reason)>> {
    let mut confirmed: HashMap<String, bool> = HashMap::new();
    let mut done = Vec::new();
    for (pod, reason) in plan(pods, nodes, absent_since, threshold, now) {
        if reason == Reason::Orphaned {
            let node = node_of(&pod).unwrap_or_default().to_string();
            let absent = match confirmed.get(&node) {
                Some(a) => *a,
                None => {
                    let a = !api.node_exists(&node).await?;
                    confirmed.insert(node.clone(), a);
                    a
                }
            };
            if !absent {
                absent_since.remove(&node);
                continue;
            }
        }
        api.delete(&pod, reason, now).await?;
        done.push((pod.name_any(), reason));
    }
    Ok(done)
}

struct KubePodGc(kube::Client);

#[async_trait]
impl PodGc for KubePodGc {
    async fn node_exists(&self, node: &str) -> kube::Result<bool> {
        let nodes: Api<Node> = Api::all(self.0.clone());
        Ok(nodes.get_metadata_opt(node).await?.is_some())
    }

    async fn delete(&self, pod: &Pod, reason: Reason, now: Timestamp) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.0.clone(), &pod.namespace().unwrap_or_default());
        let name = pod.name_any();
        if reason == Reason::Orphaned && !matches!(phase(pod), "Succeeded" | "Failed") {
            let conditions = podutil::with_disruption_target(
                pod,
                "DeletionByPodGC",
                "PodGC: node no longer exists",
                now,
            );
            let patch = json!({"status": {"phase": "Failed", "conditions": conditions}});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                other => other.map(|_| ())?,
            }
        }
        let dp = DeleteParams {
            grace_period_seconds: (reason != Reason::Terminated).then_some(0),
            preconditions: Some(Preconditions {
                uid: pod.uid(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&name, &dp).await {
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Runs a pass every [`CHECK_PERIOD`] until the process stops, over what the shared Pod and
/// Node informers hold.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let api = KubePodGc(ctx.client.clone());
    let pods = ctx.informers.get::<Pod>();
    let nodes = ctx.informers.get::<Node>();
    let (pods, nodes) = (pods.cache(), nodes.cache());
    pods.wait_until_ready().await;
    nodes.wait_until_ready().await;
    let mut absent_since = HashMap::new();
    let mut tick = tokio::time::interval(CHECK_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let names: HashSet<String> = nodes.state().iter().map(|n| n.name_any()).collect();
        let threshold = ctx.config.terminated_pod_gc_threshold;
        let now = Timestamp::now();
        match pass(
            &pods.state(),
            &names,
            &mut absent_since,
            threshold,
            now,
            &api,
        )
        .await
        {
            Ok(done) => {
                for (pod, reason) in done {
                    tracing::info!(%pod, ?reason, "podgc: deleted");
                }
            }
            Err(error) => tracing::warn!(%error, "podgc: will retry next period"),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};
    use parking_lot::Mutex;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, created: i64) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.creation_timestamp = Some(Time(at(created)));
        p.spec = Some(PodSpec {
            node_name: node.map(str::to_string),
            ..Default::default()
        });
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        p
    }

    struct Fake {
        nodes: Vec<&'static str>,
        deleted: Mutex<Vec<(String, Reason)>>,
    }

    #[async_trait]
    impl PodGc for Fake {
        async fn node_exists(&self, node: &str) -> kube::Result<bool> {
            Ok(self.nodes.contains(&node))
        }
        async fn delete(&self, pod: &Pod, reason: Reason, _: Timestamp) -> kube::Result<()> {
            self.deleted.lock().push((pod.name_any(), reason));
            Ok(())
        }
    }

    fn names(plan: &[(Pod, Reason)]) -> Vec<(String, Reason)> {
        plan.iter().map(|(p, r)| (p.name_any(), *r)).collect()
    }

    #[test]
    fn terminated_pods_over_the_threshold_go_oldest_first() {
        let pods = vec![
            pod("new", Some("n"), "Succeeded", 30),
            pod("old", Some("n"), "Failed", 10),
            pod("mid", Some("n"), "Succeeded", 20),
            pod("running", Some("n"), "Running", 0),
        ];
        let nodes = HashSet::from(["n".to_string()]);
        let mut absent = HashMap::new();
        let plan = plan(&pods, &nodes, &mut absent, 1, at(100));
        assert_eq!(
            names(&plan),
            vec![
                ("old".to_string(), Reason::Terminated),
                ("mid".to_string(), Reason::Terminated)
            ]
        );
        assert!(
            super::plan(&pods, &nodes, &mut absent, 0, at(100)).is_empty(),
            "0 disables"
        );
    }

    #[tokio::test]
    async fn pods_of_a_missing_node_go_after_the_quarantine_if_it_is_still_missing() {
        let pods = vec![
            pod("p", Some("ghost"), "Running", 0),
            pod("q", Some("back"), "Running", 0),
        ];
        let nodes = HashSet::new();
        let mut absent = HashMap::new();
        let api = Fake {
            nodes: vec!["back"],
            deleted: Mutex::default(),
        };
        assert!(
            pass(&pods, &nodes, &mut absent, 10, at(0), &api)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            pass(&pods, &nodes, &mut absent, 10, at(39), &api)
                .await
                .unwrap()
                .is_empty()
        );
        let done = pass(&pods, &nodes, &mut absent, 10, at(40), &api)
            .await
            .unwrap();
        assert_eq!(
            done,
            vec![("p".to_string(), Reason::Orphaned)],
            "back exists after all"
        );
    }

    #[test]
    fn unscheduled_terminating_pods_go() {
        let mut p = pod("p", None, "Pending", 0);
        p.metadata.deletion_timestamp = Some(Time(at(1)));
        let pending = pod("q", None, "Pending", 0);
        let mut absent = HashMap::new();
        let plan = plan(&[p, pending], &HashSet::new(), &mut absent, 10, at(2));
        assert_eq!(
            names(&plan),
            vec![("p".to_string(), Reason::UnscheduledTerminating)]
        );
    }
}
