//! The workload controllers (`replicaset`, `deployment`) in a real `skiff controller-manager`
//! against a real `skiff apiserver`, with the scheduler and hollow nodes running the pods: what
//! users see through the API and through kubectl.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use serde_json::json;
use support::cluster::{controller_manager, hollow_nodes, scheduler};
use support::{ApiServer, Backend, KUBECTL_133, eventually, kube_client, run};

/// Active (not being deleted, not finished) pods with `app=<app>`.
async fn active_pods(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .expect("list pods");
    list.items
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .collect()
}

fn owner_uid(p: &Pod) -> Option<String> {
    p.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

#[test]
fn a_replicaset_adopts_an_orphan_keeps_its_count_when_a_pod_is_deleted_and_scales() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "rs", 2);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, &["--controllers", "replicaset"]);
        let client = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");

        let orphan: Pod = serde_json::from_value(json!({
            "metadata": {"name": "orphan", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &orphan).await.unwrap();
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c",
                                           "image": "registry.k8s.io/pause:3.10"}]}}},
        }))
        .unwrap();
        let rs = sets.create(&PostParams::default(), &rs).await.unwrap();
        let uid = rs.metadata.uid.clone();

        eventually("3 ready replicas", || async {
            let rs = sets.get("web").await.ok()?;
            let s = rs.status?;
            (s.ready_replicas == Some(3) && s.available_replicas == Some(3) && s.replicas == 3)
                .then_some(())
        })
        .await;
        let active = active_pods(&pods, "web").await;
        assert_eq!(active.len(), 3, "no extra pods");
        assert!(active.iter().all(|p| owner_uid(p) == uid), "all owned");
        assert!(
            active
                .iter()
                .any(|p| p.metadata.name.as_deref() == Some("orphan")),
            "the orphan was adopted, not replaced"
        );
        for p in &active {
            let name = p.metadata.name.clone().unwrap();
            assert!(name == "orphan" || name.len() == "web-".len() + 5, "{name}");
        }

        // a deleted pod is replaced, and the count stays 3
        pods.delete("orphan", &DeleteParams::default())
            .await
            .unwrap();
        eventually("a replacement for the deleted pod", || async {
            let active = active_pods(&pods, "web").await;
            let replaced = active.len() == 3
                && active
                    .iter()
                    .all(|p| p.metadata.name.as_deref() != Some("orphan"));
            replaced.then_some(())
        })
        .await;

        // scaled down to 1
        sets.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
        eventually("scaled down to one pod", || async {
            let rs = sets.get("web").await.ok()?;
            let s = rs.status?;
            let observed = s.observed_generation == rs.metadata.generation;
            (observed && s.replicas == 1 && active_pods(&pods, "web").await.len() == 1)
                .then_some(())
        })
        .await;

        let out = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=web",
                "-o",
                "custom-columns=REASON:.reason",
                "--no-headers",
            ],
        );
        assert!(out.contains("SuccessfulCreate"), "{out}");
        assert!(out.contains("SuccessfulDelete"), "{out}");
    });
}

/// A Deployment of `replicas` pause pods labelled `app=<name>`, with the given strategy.
fn deployment_yaml(name: &str, replicas: usize, strategy: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  strategy:
{strategy}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: c
        image: registry.k8s.io/pause:3.10
"#
    )
}

const ROLLING_25: &str =
    "    type: RollingUpdate\n    rollingUpdate:\n      maxSurge: 25%\n      maxUnavailable: 25%";

/// Whether a pod is Ready and not being deleted.
fn ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn deployment_done(deployments: &Api<Deployment>, name: &str, replicas: i32) -> Option<()> {
    let d = deployments.get(name).await.ok()?;
    let s = d.status?;
    let done = s.observed_generation >= d.metadata.generation
        && s.replicas == Some(replicas)
        && s.updated_replicas == Some(replicas)
        && s.available_replicas == Some(replicas)
        && s.ready_replicas == Some(replicas);
    done.then_some(())
}

#[test]
fn a_100_replica_deployment_rolls_out_and_kubectl_rollout_status_succeeds() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "big", 4);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, &["--controllers", "replicaset,deployment"]);
        let client = kube_client(&api).await;
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&deployment_yaml("big", 100, ROLLING_25)),
        );
        let out = api.kubectl(
            KUBECTL_133,
            &["rollout", "status", "deployment/big", "--timeout=60s"],
        );
        assert!(out.contains("successfully rolled out"), "{out}");

        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let d = deployments.get("big").await.unwrap();
        let s = d.status.clone().unwrap();
        assert_eq!(
            (
                s.replicas,
                s.updated_replicas,
                s.ready_replicas,
                s.available_replicas
            ),
            (Some(100), Some(100), Some(100), Some(100))
        );
        assert_eq!(s.unavailable_replicas.unwrap_or(0), 0);
        assert_eq!(s.observed_generation, d.metadata.generation);
        let reasons: Vec<(String, String)> = s
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| (c.type_, c.reason.unwrap_or_default()))
            .collect();
        assert!(reasons.contains(&("Available".into(), "MinimumReplicasAvailable".into())));
        assert!(reasons.contains(&("Progressing".into(), "NewReplicaSetAvailable".into())));
        assert_eq!(
            d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
            "1"
        );

        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let active = active_pods(&pods, "big").await;
        assert_eq!(active.len(), 100);
        assert!(active.iter().all(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && ready(p)
        }));
        let sets: Api<ReplicaSet> = Api::namespaced(client, "default");
        let list = sets.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(list.len(), 1);
        let hash = list[0].metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
        assert_eq!(
            list[0].metadata.name.as_deref(),
            Some(format!("big-{hash}").as_str())
        );
        assert!(active.iter().all(|p| {
            p.metadata.labels.as_ref().unwrap()["pod-template-hash"] == hash
                && p.metadata
                    .name
                    .as_ref()
                    .unwrap()
                    .starts_with(&format!("big-{hash}-"))
        }));

        let out = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=big",
                "-o",
                "custom-columns=REASON:.reason,MESSAGE:.message",
                "--no-headers",
            ],
        );
        assert!(
            out.contains(&format!("Scaled up replica set big-{hash} from 0 to 100")),
            "{out}"
        );
    });
}

/// Violations seen, events seen, and the watching tasks.
type Bounds = (
    Arc<Mutex<Vec<String>>>,
    Arc<Mutex<usize>>,
    Vec<tokio::task::JoinHandle<()>>,
);

/// Watches the pods and ReplicaSets labelled `app=<app>` and records every moment at which
/// fewer than `min_ready` pods are ready or the ReplicaSets ask for more than `max_total`.
fn watch_bounds(client: kube::Client, app: &str, min_ready: usize, max_total: i32) -> Bounds {
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let events: Arc<Mutex<usize>> = Arc::default();
    let config = watcher::Config::default().labels(&format!("app={app}"));
    let pods_task = {
        let (violations, events) = (violations.clone(), events.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let config = config.clone();
        tokio::spawn(async move {
            let mut seen: BTreeMap<String, Pod> = BTreeMap::new();
            let mut listed = false;
            let stream = watcher::watcher(pods, config);
            futures::pin_mut!(stream);
            while let Some(Ok(event)) = stream.next().await {
                match event {
                    watcher::Event::Init => {
                        (listed, seen) = (false, BTreeMap::new());
                        continue;
                    }
                    watcher::Event::InitApply(p) => {
                        seen.insert(p.metadata.name.clone().unwrap(), p);
                        continue;
                    }
                    watcher::Event::InitDone => listed = true,
                    watcher::Event::Apply(p) => {
                        seen.insert(p.metadata.name.clone().unwrap(), p);
                    }
                    watcher::Event::Delete(p) => {
                        seen.remove(p.metadata.name.as_deref().unwrap());
                    }
                }
                if !listed {
                    continue;
                }
                *events.lock() += 1;
                let n = seen.values().filter(|p| ready(p)).count();
                if n < min_ready {
                    violations.lock().push(format!("only {n} ready pods"));
                }
            }
        })
    };
    let sets_task = {
        let (violations, events) = (violations.clone(), events.clone());
        let sets: Api<ReplicaSet> = Api::namespaced(client, "default");
        tokio::spawn(async move {
            let mut seen: BTreeMap<String, i32> = BTreeMap::new();
            let mut listed = false;
            let stream = watcher::watcher(sets, config);
            futures::pin_mut!(stream);
            let size = |rs: &ReplicaSet| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
            while let Some(Ok(event)) = stream.next().await {
                match event {
                    watcher::Event::Init => {
                        (listed, seen) = (false, BTreeMap::new());
                        continue;
                    }
                    watcher::Event::InitApply(rs) => {
                        seen.insert(rs.metadata.name.clone().unwrap(), size(&rs));
                        continue;
                    }
                    watcher::Event::InitDone => listed = true,
                    watcher::Event::Apply(rs) => {
                        seen.insert(rs.metadata.name.clone().unwrap(), size(&rs));
                    }
                    watcher::Event::Delete(rs) => {
                        seen.remove(rs.metadata.name.as_deref().unwrap());
                    }
                }
                if !listed {
                    continue;
                }
                *events.lock() += 1;
                let total: i32 = seen.values().sum();
                if total > max_total {
                    violations
                        .lock()
                        .push(format!("replica sets ask for {total} pods: {seen:?}"));
                }
            }
        })
    };
    (violations, events, vec![pods_task, sets_task])
}

#[test]
fn a_rolling_update_stays_within_max_surge_and_max_unavailable_at_every_moment() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "roll", 2);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, &["--controllers", "replicaset,deployment"]);
        let client = kube_client(&api).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&deployment_yaml("roll", 20, ROLLING_25)),
        );
        eventually("20 available", || deployment_done(&deployments, "roll", 20)).await;

        // 25% of 20: surge 5 (rounded up), unavailable 5 (rounded down)
        let (violations, events, tasks) = watch_bounds(client.clone(), "roll", 15, 25);
        eventually("the watches' first lists", || async {
            (*events.lock() >= 2).then_some(())
        })
        .await;
        api.kubectl(
            KUBECTL_133,
            &[
                "set",
                "image",
                "deployment/roll",
                "c=registry.k8s.io/pause:3.9",
            ],
        );
        let out = api.kubectl(
            KUBECTL_133,
            &["rollout", "status", "deployment/roll", "--timeout=60s"],
        );
        assert!(out.contains("successfully rolled out"), "{out}");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        eventually("only new pods are left", || async {
            let active = active_pods(&pods, "roll").await;
            let new = active.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref()
                    == Some("registry.k8s.io/pause:3.9")
            });
            (active.len() == 20 && new).then_some(())
        })
        .await;
        for t in tasks {
            t.abort();
        }
        let violations = violations.lock().clone();
        assert!(violations.is_empty(), "bounds broken: {violations:?}");
        assert!(*events.lock() > 60, "the watches saw the rollout");
        let d = deployments.get("roll").await.unwrap();
        assert_eq!(
            d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
            "2"
        );
    });
}

/// The `deployment.kubernetes.io/revision` of the ReplicaSet running `image`.
async fn revision_of(sets: &Api<ReplicaSet>, image: &str) -> Option<String> {
    let list = sets
        .list(&ListParams::default().labels("app=hist"))
        .await
        .ok()?;
    list.items.into_iter().find_map(|rs| {
        let spec = rs.spec.as_ref()?;
        let template = spec.template.as_ref()?.spec.as_ref()?;
        (template.containers[0].image.as_deref() == Some(image)).then(|| {
            rs.metadata
                .annotations?
                .remove("deployment.kubernetes.io/revision")
        })?
    })
}

fn image_of(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap()
}

#[test]
fn kubectl_rollout_history_undo_pause_resume_and_restart() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "hist", 2);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, &["--controllers", "replicaset,deployment"]);
        let client = kube_client(&api).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
        let k = |args: &[&str]| api.kubectl(KUBECTL_133, args);
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&deployment_yaml("hist", 4, ROLLING_25)),
        );
        k(&["rollout", "status", "deployment/hist", "--timeout=60s"]);
        k(&[
            "set",
            "image",
            "deployment/hist",
            "c=registry.k8s.io/pause:3.9",
        ]);
        k(&[
            "annotate",
            "deployment/hist",
            "kubernetes.io/change-cause=to 3.9",
        ]);
        k(&["rollout", "status", "deployment/hist", "--timeout=60s"]);
        assert_eq!(
            revision_of(&sets, "registry.k8s.io/pause:3.9")
                .await
                .as_deref(),
            Some("2")
        );

        let history = k(&["rollout", "history", "deployment/hist"]);
        let lines: Vec<&str> = history.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines[0].contains("deployment.apps/hist"), "{history}");
        assert!(lines.iter().any(|l| l.starts_with("1 ")), "{history}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("2 ") && l.contains("to 3.9")),
            "{history}"
        );
        let two = k(&["rollout", "history", "deployment/hist", "--revision=2"]);
        assert!(two.contains("registry.k8s.io/pause:3.9"), "{two}");

        // undo: back to the first template, in its old ReplicaSet, as revision 3
        let out = k(&["rollout", "undo", "deployment/hist"]);
        assert!(out.contains("rolled back"), "{out}");
        k(&["rollout", "status", "deployment/hist", "--timeout=60s"]);
        let d = deployments.get("hist").await.unwrap();
        assert_eq!(image_of(&d), "registry.k8s.io/pause:3.10");
        assert_eq!(
            revision_of(&sets, "registry.k8s.io/pause:3.10")
                .await
                .as_deref(),
            Some("3")
        );
        assert_eq!(
            sets.list(&ListParams::default()).await.unwrap().items.len(),
            2
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        eventually("only pods of the restored template", || async {
            let active = active_pods(&pods, "hist").await;
            let old = active.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref()
                    == Some("registry.k8s.io/pause:3.10")
            });
            (active.len() == 4 && old).then_some(())
        })
        .await;

        // paused: a template change makes no new ReplicaSet; resumed, it rolls out
        k(&["rollout", "pause", "deployment/hist"]);
        eventually("the paused condition", || async {
            let d = deployments.get("hist").await.ok()?;
            let c = d
                .status?
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Progressing")?;
            (c.reason.as_deref() == Some("DeploymentPaused") && c.status == "Unknown").then_some(())
        })
        .await;
        k(&[
            "set",
            "image",
            "deployment/hist",
            "c=registry.k8s.io/pause:3.8",
        ]);
        eventually("the paused change observed", || async {
            let d = deployments.get("hist").await.ok()?;
            (d.status?.observed_generation >= d.metadata.generation).then_some(())
        })
        .await;
        assert_eq!(
            sets.list(&ListParams::default()).await.unwrap().items.len(),
            2
        );
        assert_eq!(revision_of(&sets, "registry.k8s.io/pause:3.8").await, None);
        k(&["rollout", "resume", "deployment/hist"]);
        k(&["rollout", "status", "deployment/hist", "--timeout=60s"]);
        assert_eq!(
            revision_of(&sets, "registry.k8s.io/pause:3.8")
                .await
                .as_deref(),
            Some("4")
        );

        // restart: a new template annotation, a new ReplicaSet
        k(&["rollout", "restart", "deployment/hist"]);
        k(&["rollout", "status", "deployment/hist", "--timeout=60s"]);
        let list = sets.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(
            list.len(),
            4,
            "{:?}",
            list.iter().map(|r| &r.metadata.name).collect::<Vec<_>>()
        );
        let d = deployments.get("hist").await.unwrap();
        assert_eq!(
            d.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
            "5"
        );
        let restarted = d
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap();
        assert!(restarted.contains_key("kubectl.kubernetes.io/restartedAt"));
    });
}

#[test]
fn a_controller_manager_killed_mid_rollout_is_replaced_without_extra_pods() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "crash", 2);
        let _scheduler = scheduler(&api);
        let mut cm = controller_manager(&api, &["--controllers", "replicaset,deployment"]);
        let client = kube_client(&api).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
        api.kubectl_stdin(
            KUBECTL_133,
            &["apply", "-f", "-"],
            Some(&deployment_yaml("crash", 30, ROLLING_25)),
        );
        eventually("30 available", || {
            deployment_done(&deployments, "crash", 30)
        })
        .await;

        // every pod name ever seen
        let names: Arc<Mutex<std::collections::BTreeSet<String>>> = Arc::default();
        let watch = {
            let names = names.clone();
            let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
            tokio::spawn(async move {
                let stream = watcher::watcher(pods, watcher::Config::default().labels("app=crash"));
                futures::pin_mut!(stream);
                while let Some(Ok(event)) = stream.next().await {
                    if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = event {
                        names.lock().insert(p.metadata.name.unwrap());
                    }
                }
            })
        };
        eventually("the watch's first list", || async {
            (names.lock().len() >= 30).then_some(())
        })
        .await;
        api.kubectl(
            KUBECTL_133,
            &[
                "set",
                "image",
                "deployment/crash",
                "c=registry.k8s.io/pause:3.9",
            ],
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        eventually("the rollout under way", || async {
            let n = active_pods(&pods, "crash")
                .await
                .iter()
                .filter(|p| {
                    p.spec.as_ref().unwrap().containers[0].image.as_deref()
                        == Some("registry.k8s.io/pause:3.9")
                })
                .count();
            (n > 0).then_some(())
        })
        .await;
        cm.kill();
        let _cm = controller_manager(&api, &["--controllers", "replicaset,deployment"]);
        // the new controller manager first waits for the dead one's lease to expire
        eventually("30 updated and available", || {
            deployment_done(&deployments, "crash", 30)
        })
        .await;
        let out = api.kubectl(KUBECTL_133, &["rollout", "status", "deployment/crash"]);
        assert!(out.contains("successfully rolled out"), "{out}");
        eventually("30 new pods and no old ones", || async {
            let active = active_pods(&pods, "crash").await;
            let new = active.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref()
                    == Some("registry.k8s.io/pause:3.9")
            });
            (active.len() == 30 && new).then_some(())
        })
        .await;
        watch.abort();
        // 30 old pods and 30 new ones: nothing was created twice
        assert_eq!(names.lock().len(), 60, "{:?}", names.lock());
        let sets: Api<ReplicaSet> = Api::namespaced(client, "default");
        let list = sets.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(list.len(), 2);
    });
}
