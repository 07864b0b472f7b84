//! Unit tests of the deployment controller against an in-memory API that also plays the
//! ReplicaSet controller (every replica it asks for becomes available at once, or not).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use parking_lot::Mutex;
use serde_json::json;
use skiff_runtime::events::EventType;

use super::util::{self, replicas};
use super::*;

#[derive(Default)]
struct Fake {
    sets: Mutex<BTreeMap<String, ReplicaSet>>,
    deployment: Mutex<Option<Deployment>>,
    events: Mutex<Vec<(String, String)>>,
    deleted: Mutex<Vec<String>>,
    /// Every size written, per ReplicaSet, in order.
    sizes: Mutex<BTreeMap<String, Vec<i32>>>,
    clock: Mutex<i64>,
}

impl Fake {
    fn tick(&self) -> i64 {
        let mut c = self.clock.lock();
        *c += 1;
        *c
    }

    /// The ReplicaSet controller: status follows spec, all available when `ready`.
    fn settle(&self, ready: bool) {
        self.settle_where(ready, |_| true);
    }

    fn settle_where(&self, ready: bool, which: impl Fn(&ReplicaSet) -> bool) {
        for rs in self.sets.lock().values_mut().filter(|rs| which(rs)) {
            let n = replicas(rs);
            let old = rs.status.clone().unwrap_or_default();
            let avail = if ready {
                n
            } else {
                old.available_replicas.unwrap_or(0).min(n)
            };
            rs.status = Some(ReplicaSetStatus {
                replicas: n,
                ready_replicas: Some(avail),
                available_replicas: Some(avail),
                observed_generation: rs.metadata.generation,
                ..Default::default()
            });
        }
    }

    fn list(&self) -> Vec<Arc<ReplicaSet>> {
        self.sets.lock().values().cloned().map(Arc::new).collect()
    }

    fn d(&self) -> Deployment {
        self.deployment.lock().clone().unwrap()
    }
}

#[async_trait]
impl DeploymentApi for Fake {
    async fn create_replica_set(&self, rs: &ReplicaSet) -> kube::Result<ReplicaSet> {
        let mut rs = rs.clone();
        let t = self.tick();
        rs.metadata.uid = Some(format!("uid-{}", rs.name_any()));
        rs.metadata.generation = Some(1);
        rs.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(1_700_000_000 + t).unwrap(),
        ));
        self.sets.lock().insert(rs.name_any(), rs.clone());
        Ok(rs)
    }

    async fn get_replica_set(&self, _: &str, name: &str) -> kube::Result<ReplicaSet> {
        Ok(self.sets.lock()[name].clone())
    }

    async fn update_replica_set(&self, rs: &ReplicaSet) -> kube::Result<ReplicaSet> {
        let mut rs = rs.clone();
        rs.metadata.generation = Some(rs.metadata.generation.unwrap_or(0) + 1);
        self.sizes
            .lock()
            .entry(rs.name_any())
            .or_default()
            .push(replicas(&rs));
        self.sets.lock().insert(rs.name_any(), rs.clone());
        Ok(rs)
    }

    async fn delete_replica_set(&self, rs: &ReplicaSet) -> kube::Result<()> {
        self.sets.lock().remove(&rs.name_any());
        self.deleted.lock().push(rs.name_any());
        Ok(())
    }

    async fn patch_replica_set(&self, _: &str, _: &str, _: serde_json::Value) -> kube::Result<()> {
        Ok(())
    }

    async fn update_deployment(&self, d: &Deployment) -> kube::Result<Deployment> {
        let mut d = d.clone();
        d.metadata.generation = Some(d.metadata.generation.unwrap_or(0) + 1);
        *self.deployment.lock() = Some(d.clone());
        Ok(d)
    }

    async fn update_status(&self, d: &Deployment) -> kube::Result<Deployment> {
        *self.deployment.lock() = Some(d.clone());
        Ok(d.clone())
    }

    fn event(&self, _: &Deployment, _: EventType, reason: &str, note: String) {
        self.events.lock().push((reason.into(), note));
    }
}

fn deployment(replicas: i32, image: &str, strategy: serde_json::Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "d-uid", "generation": 1},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": strategy, "revisionHistoryLimit": 10,
                 "progressDeadlineSeconds": 600,
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": image}]}}},
    }))
    .unwrap()
}

fn rolling(surge: serde_json::Value, unavailable: serde_json::Value) -> serde_json::Value {
    json!({"type": "RollingUpdate",
           "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}})
}

fn now() -> jiff::Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

async fn sync(fake: &Fake) -> Action {
    let d = fake.d();
    reconcile(&d, fake.list(), Vec::new(), fake, now())
        .await
        .unwrap()
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    util::condition(d.status.as_ref()?, type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test]
async fn a_new_deployment_gets_a_hash_named_replica_set_at_revision_one_and_completes() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(3, "a", rolling(json!(1), json!(0))));
    sync(&fake).await;
    let sets = fake.list();
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = rs.labels()["pod-template-hash"].clone();
    assert_eq!(rs.name_any(), format!("web-{hash}"));
    let spec = rs.spec.as_ref().unwrap();
    assert_eq!(
        spec.selector.match_labels.as_ref().unwrap()["pod-template-hash"],
        hash
    );
    let template_labels = spec
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone();
    assert_eq!(template_labels.unwrap()["pod-template-hash"], hash);
    assert_eq!(replicas(rs), 3, "a new deployment starts at full size");
    let owner = crate::podutil::controller_of(&rs.metadata).unwrap();
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Deployment", "d-uid")
    );
    assert_eq!(rs.annotations()[util::REVISION], "1");
    assert_eq!(rs.annotations()[util::DESIRED_REPLICAS], "3");
    assert_eq!(rs.annotations()[util::MAX_REPLICAS], "4");
    assert_eq!(
        fake.events.lock()[0],
        (
            "ScalingReplicaSet".into(),
            format!("Scaled up replica set web-{hash} from 0 to 3")
        )
    );
    let d = fake.d();
    assert_eq!(d.annotations()[util::REVISION], "1");
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("True".into(), "NewReplicaSetCreated".into()))
    );
    fake.settle(true);
    sync(&fake).await;
    let d = fake.d();
    let s = d.status.clone().unwrap();
    assert_eq!(
        (
            s.replicas,
            s.updated_replicas,
            s.available_replicas,
            s.unavailable_replicas
        ),
        (Some(3), Some(3), Some(3), Some(0))
    );
    assert_eq!(s.observed_generation, d.metadata.generation);
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
}

/// Drives a rollout to the end, checking the bounds on the ReplicaSets' sizes and availability
/// after every sync.
async fn roll_out(fake: &Fake, max_total: i32, min_available: i32) -> usize {
    let mut steps = 0;
    loop {
        sync(fake).await;
        let sets = fake.list();
        let total: i32 = sets.iter().map(|rs| replicas(rs)).sum();
        assert!(total <= max_total, "{total} replicas exceed {max_total}");
        let available: i32 = sets.iter().map(|rs| util::available(rs)).sum();
        assert!(
            available >= min_available,
            "{available} available < {min_available}"
        );
        fake.settle(true);
        let d = fake.d();
        if super::status::deployment_complete(&d, d.status.as_ref().unwrap())
            && sets.iter().filter(|rs| replicas(rs) > 0).count() == 1
        {
            return steps;
        }
        steps += 1;
        assert!(steps < 100, "the rollout does not finish");
    }
}

#[tokio::test]
async fn a_rolling_update_stays_within_max_surge_and_max_unavailable_and_bumps_the_revision() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(10, "a", rolling(json!("25%"), json!("25%"))));
    roll_out(&fake, 10, 0).await;
    let mut d = fake.d();
    d.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("b".into());
    d.metadata.generation = Some(d.metadata.generation.unwrap() + 1);
    *fake.deployment.lock() = Some(d);
    // 25% of 10: surge 3 (rounded up), unavailable 2 (rounded down)
    let steps = roll_out(&fake, 13, 8).await;
    assert!(steps >= 2, "a rolling update takes several steps: {steps}");
    let sets = fake.list();
    assert_eq!(sets.len(), 2);
    let new = sets.iter().find(|rs| replicas(rs) == 10).unwrap();
    assert_eq!(new.annotations()[util::REVISION], "2");
    assert_eq!(fake.d().annotations()[util::REVISION], "2");
    let events = fake.events.lock().clone();
    assert!(
        events.iter().any(|(r, n)| r == "ScalingReplicaSet" && n.starts_with("Scaled down replica set web-")),
        "{events:?}"
    );
}

#[tokio::test]
async fn recreate_scales_old_replica_sets_to_zero_before_creating_the_new_one() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(4, "a", json!({"type": "Recreate"})));
    sync(&fake).await;
    fake.settle(true);
    sync(&fake).await;
    let mut d = fake.d();
    d.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("b".into());
    *fake.deployment.lock() = Some(d);
    sync(&fake).await;
    assert_eq!(
        fake.list().len(),
        1,
        "no new replica set while old pods run"
    );
    assert_eq!(replicas(&fake.list()[0]), 0);
    fake.settle(true);
    sync(&fake).await;
    let sets = fake.list();
    assert_eq!(sets.len(), 2);
    assert_eq!(sets.iter().map(|rs| replicas(rs)).sum::<i32>(), 4);
}

#[tokio::test]
async fn a_paused_deployment_scales_but_does_not_roll_out() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(2, "a", rolling(json!(1), json!(0))));
    sync(&fake).await;
    fake.settle(true);
    let mut d = fake.d();
    let spec = d.spec.as_mut().unwrap();
    spec.paused = Some(true);
    spec.replicas = Some(5);
    spec.template.spec.as_mut().unwrap().containers[0].image = Some("b".into());
    *fake.deployment.lock() = Some(d);
    sync(&fake).await;
    let sets = fake.list();
    assert_eq!(sets.len(), 1, "no new template while paused");
    assert_eq!(replicas(&sets[0]), 5, "but it scales");
    assert_eq!(
        condition(&fake.d(), "Progressing"),
        Some(("Unknown".into(), "DeploymentPaused".into()))
    );
    let mut d = fake.d();
    d.spec.as_mut().unwrap().paused = Some(false);
    *fake.deployment.lock() = Some(d);
    sync(&fake).await;
    assert_eq!(fake.list().len(), 2, "resumed: the rollout starts");
}

#[tokio::test]
async fn a_stuck_rollout_times_out_after_its_progress_deadline() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(2, "a", rolling(json!(1), json!(0))));
    let action = sync(&fake).await;
    assert_ne!(action, Action::AwaitChange, "requeued for its deadline");
    let d = fake.d();
    let later = now() + jiff::SignedDuration::from_secs(601);
    reconcile(&d, fake.list(), Vec::new(), &fake, later)
        .await
        .unwrap();
    assert_eq!(
        condition(&fake.d(), "Progressing"),
        Some(("False".into(), "ProgressDeadlineExceeded".into()))
    );
    assert_eq!(
        condition(&fake.d(), "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );
}

#[tokio::test]
async fn old_replica_sets_beyond_the_revision_history_limit_are_deleted() {
    let fake = Fake::default();
    let mut d = deployment(1, "v0", rolling(json!(1), json!(0)));
    d.spec.as_mut().unwrap().revision_history_limit = Some(2);
    *fake.deployment.lock() = Some(d);
    roll_out(&fake, 2, 0).await;
    for i in 1..=4 {
        let mut d = fake.d();
        d.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some(format!("v{i}"));
        *fake.deployment.lock() = Some(d);
        roll_out(&fake, 2, 1).await;
    }
    sync(&fake).await;
    let mut revisions: Vec<i64> = fake.list().iter().map(|rs| util::revision(rs)).collect();
    revisions.sort();
    assert_eq!(revisions, vec![3, 4, 5], "the newest plus two old ones");
}

#[tokio::test]
async fn rolling_back_to_an_old_template_reuses_its_replica_set_with_a_new_revision() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(2, "a", rolling(json!(1), json!(0))));
    roll_out(&fake, 3, 0).await;
    let set_image = |image: &str| {
        let mut d = fake.d();
        d.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some(image.into());
        *fake.deployment.lock() = Some(d);
    };
    set_image("b");
    roll_out(&fake, 3, 2).await;
    set_image("a");
    roll_out(&fake, 3, 2).await;
    let sets = fake.list();
    assert_eq!(sets.len(), 2, "no third replica set");
    let back = sets.iter().find(|rs| replicas(rs) == 2).unwrap();
    assert_eq!(back.annotations()[util::REVISION], "3");
    assert_eq!(back.annotations()[util::REVISION_HISTORY], "1");
}

#[tokio::test]
async fn an_old_replica_set_still_reporting_its_deleted_pods_as_available_is_never_scaled_up() {
    let fake = Fake::default();
    *fake.deployment.lock() = Some(deployment(20, "a", rolling(json!("25%"), json!("25%"))));
    roll_out(&fake, 20, 0).await;
    let old_name = fake.list()[0].name_any();
    let mut d = fake.d();
    d.spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = Some("b".into());
    *fake.deployment.lock() = Some(d);
    let mut last = 20;
    for _ in 0..30 {
        sync(&fake).await;
        // the ReplicaSet controller keeps up with the new ReplicaSet only: the old one still
        // reports all 20 pods available
        fake.settle_where(true, |rs| rs.name_any() != old_name);
        let sets = fake.list();
        let old = sets.iter().find(|rs| rs.name_any() == old_name).unwrap();
        assert!(
            replicas(old) <= last,
            "scaled up from {last} to {}",
            replicas(old)
        );
        last = replicas(old);
        let total: i32 = sets.iter().map(|rs| replicas(rs)).sum();
        assert!(total <= 25, "{total} replicas");
        let new_available: i32 = sets
            .iter()
            .filter(|rs| rs.name_any() != old_name)
            .map(|rs| util::available(rs))
            .sum();
        assert!(
            last + new_available >= 15,
            "{last} old + {new_available} new available"
        );
    }
    assert_eq!(
        last, 0,
        "the rollout still finishes scaling the old one down"
    );
    let written = fake.sizes.lock()[&old_name].clone();
    assert!(
        written.windows(2).all(|w| w[1] <= w[0]),
        "old sizes written: {written:?}"
    );
}
