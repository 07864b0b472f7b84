//! The workload controllers (`replicaset`, `deployment`) in a real `skiff controller-manager`
//! against a real `skiff apiserver`, with the scheduler and hollow nodes running the pods: what
//! users see through the API and through kubectl.

mod support;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::cluster::{controller_manager, hollow_nodes, scheduler};
use support::{ApiServer, Backend, eventually, kube_client, run};

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
            support::KUBECTL_133,
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
