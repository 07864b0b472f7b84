//! `taint-eviction-controller` (upstream's taint manager, split from node lifecycle in 1.29):
//! a pod on a node with a `NoExecute` taint it does not tolerate is deleted at once; one that
//! tolerates every such taint for a bounded `tolerationSeconds` is deleted when the shortest of
//! them has passed. Before deleting, the pod gets the `DisruptionTarget` condition
//! (`DeletionByTaintManager`) and a `TaintManagerEviction` event. Unlike upstream, which counts
//! from when it observed the taint, the time counts from the taint's `timeAdded` (so that a
//! restarted controller keeps the same deadline). Which toleration tolerates a taint is
//! upstream's `ToleratesTaint`, shared through the component helpers; the deadline from
//! `tolerationSeconds` is this controller's.

use std::sync::Arc;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use skiff_component_helpers::tolerations::tolerates;
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::events::{Event, Recorder};

use crate::{Context, podutil, triggers};

/// What to do with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No NoExecute taint applies, or it is tolerated forever.
    Keep,
    /// A NoExecute taint is not tolerated, or its toleration has run out.
    EvictNow,
    /// Tolerated until then.
    EvictAt(Timestamp),
}

/// When, if ever, the NoExecute taints `taints` evict `pod`.
pub fn decide(pod: &Pod, taints: &[Taint], now: Timestamp) -> Decision {
    if pod.metadata.deletion_timestamp.is_some() {
        return Decision::Keep;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut deadline: Option<Timestamp> = None;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        let Some(t) = tolerations.iter().find(|t| tolerates(t, taint)) else {
            return Decision::EvictNow;
        };
        let Some(seconds) = t.toleration_seconds else {
            continue;
        };
        let from = taint.time_added.as_ref().map_or(now, |t| t.0);
        let at = from
            .checked_add(SignedDuration::from_secs(seconds.max(0)))
            .unwrap_or(from);
        deadline = Some(deadline.map_or(at, |d| d.min(at)));
    }
    match deadline {
        None => Decision::Keep,
        Some(at) if at <= now => Decision::EvictNow,
        Some(at) => Decision::EvictAt(at),
    }
}

/// The writes this controller makes.
#[async_trait]
pub trait Evictions: Send + Sync {
    /// The node's taints (empty when it does not exist).
    async fn node_taints(&self, node: &str) -> kube::Result<Vec<Taint>>;
    /// Marks the pod with `DisruptionTarget`, records the event and deletes it.
    async fn evict(&self, pod: &Pod, now: Timestamp) -> kube::Result<()>;
}

/// Handles one pod; returns when to look at it again, if on a timer.
pub async fn reconcile(
    pod: &Pod,
    api: &dyn Evictions,
    now: Timestamp,
) -> kube::Result<Option<SignedDuration>> {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
        return Ok(None);
    };
    let taints = api.node_taints(node).await?;
    match decide(pod, &taints, now) {
        Decision::Keep => Ok(None),
        Decision::EvictNow => {
            api.evict(pod, now).await?;
            Ok(None)
        }
        Decision::EvictAt(at) => Ok(Some(at.duration_since(now))),
    }
}

struct KubeEvictions {
    client: kube::Client,
    recorder: Recorder,
    /// The shared Node informer's cache: a node's change is queued only once it shows it.
    nodes: Cache<Node>,
}

#[async_trait]
impl Evictions for KubeEvictions {
    async fn node_taints(&self, node: &str) -> kube::Result<Vec<Taint>> {
        Ok(self
            .nodes
            .get(&ObjectRef::new(node))
            .and_then(|n| n.spec.as_ref()?.taints.clone())
            .unwrap_or_default())
    }

    async fn evict(&self, pod: &Pod, now: Timestamp) -> kube::Result<()> {
        let ns = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let conditions = podutil::with_disruption_target(
            pod,
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
            now,
        );
        let patch = json!({"status": {"conditions": conditions}});
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            other => other.map(|_| ())?,
        }
        let note = format!("Marking for deletion Pod {ns}/{name}");
        let event = Event::normal(pod.object_ref(&()), "TaintManagerEviction", note);
        self.recorder.record(event.with_action("Deleting"));
        let dp = DeleteParams {
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

/// Runs the controller (upstream's 8 update workers): pods are the keys; a node's change
/// requeues the pods bound to it.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let pods = ctx.informers.get::<Pod>();
    let nodes = ctx.informers.get::<Node>();
    triggers::index_pods_by_node(pods.cache());
    let controller = Controller::new("taint-eviction-controller").workers(8);
    let cache = pods.cache().clone();
    triggers::queue_mapped_keys(&nodes, controller.queue(), move |node: &Node| {
        let on_node = triggers::pods_on(&cache, &node.name_any());
        on_node.into_iter().map(|p| ObjectRef::from_obj(p.as_ref()))
    });
    nodes.cache().wait_until_ready().await;
    let api = Arc::new(KubeEvictions {
        client: ctx.client.clone(),
        recorder: ctx.recorder("taint-eviction-controller"),
        nodes: nodes.cache().clone(),
    });
    triggers::run_each(controller, &pods, move |pod| {
        let api = api.clone();
        async move {
            let wait = reconcile(&pod, api.as_ref(), Timestamp::now()).await?;
            Ok::<_, kube::Error>(match wait {
                Some(d) => Action::RequeueAfter(d.unsigned_abs()),
                None => Action::AwaitChange,
            })
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, Toleration};
    use parking_lot::Mutex;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn unreachable(added: i64) -> Taint {
        Taint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoExecute".into(),
            time_added: Some(Time(at(added))),
            value: None,
        }
    }

    fn pod(tolerations: Vec<Toleration>) -> Pod {
        Pod {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                tolerations: Some(tolerations),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            value: None,
        }
    }

    #[test]
    fn an_untolerated_no_execute_taint_evicts_at_once() {
        assert_eq!(
            decide(&pod(vec![]), &[unreachable(0)], at(0)),
            Decision::EvictNow
        );
        let mut no_schedule = unreachable(0);
        no_schedule.effect = "NoSchedule".into();
        assert_eq!(decide(&pod(vec![]), &[no_schedule], at(0)), Decision::Keep);
    }

    #[test]
    fn a_bounded_toleration_evicts_after_its_seconds_from_the_taint() {
        let p = pod(vec![toleration(
            "node.kubernetes.io/unreachable",
            Some(300),
        )]);
        assert_eq!(
            decide(&p, &[unreachable(10)], at(20)),
            Decision::EvictAt(at(310))
        );
        assert_eq!(decide(&p, &[unreachable(10)], at(310)), Decision::EvictNow);
        let forever = pod(vec![toleration("", None)]);
        assert_eq!(
            decide(&forever, &[unreachable(0)], at(9999)),
            Decision::Keep
        );
    }

    #[test]
    fn equal_tolerations_match_key_and_value() {
        let t = Toleration {
            key: Some("k".into()),
            value: Some("v".into()),
            ..Default::default()
        };
        let mut taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoExecute".into(),
            time_added: None,
        };
        assert!(tolerates(&t, &taint));
        taint.value = Some("w".into());
        assert!(!tolerates(&t, &taint));
    }

    struct Fake {
        taints: Vec<Taint>,
        evicted: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Evictions for Fake {
        async fn node_taints(&self, _: &str) -> kube::Result<Vec<Taint>> {
            Ok(self.taints.clone())
        }
        async fn evict(&self, pod: &Pod, _: Timestamp) -> kube::Result<()> {
            self.evicted.lock().push(pod.name_any());
            Ok(())
        }
    }

    #[tokio::test]
    async fn reconcile_evicts_or_asks_to_come_back_later() {
        let api = Fake {
            taints: vec![unreachable(0)],
            evicted: Mutex::default(),
        };
        let p = pod(vec![toleration("node.kubernetes.io/unreachable", Some(5))]);
        assert_eq!(
            reconcile(&p, &api, at(2)).await.unwrap(),
            Some(SignedDuration::from_secs(3))
        );
        assert!(api.evicted.lock().is_empty());
        assert_eq!(reconcile(&p, &api, at(5)).await.unwrap(), None);
        assert_eq!(*api.evicted.lock(), vec!["p"]);
    }
}
