//! The batch and policy controllers of `skiff controller-manager` (`job`, `cronjob`,
//! `ttl-after-finished`, `disruption`; `resourcequota` is in resourcequota.rs) against a real
//! `skiff apiserver`, with
//! the scheduler and hollow nodes running the pods (containers running `true` succeed, `false`
//! fail). Each test has its own cluster; results are read through the API and real kubectl.

mod support;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use support::cluster::{Process, controller_manager, hollow_nodes, scheduler};
use support::{
    ApiServer, Backend, KUBECTL_133, eventually, kube_client as client,
    kube_client_without_retries, run,
};

const CONTROLLERS: &str =
    "serviceaccount,root-ca-cert-publisher,job,cronjob,ttl-after-finished,disruption";

/// An API server with two hollow nodes, the scheduler and the controllers under test.
fn cluster() -> (ApiServer, Vec<Process>) {
    let api = ApiServer::start(Backend::Embedded);
    let nodes = hollow_nodes(&api, "node", 2);
    let sched = scheduler(&api);
    let cm = controller_manager(&api, &["--controllers", CONTROLLERS]);
    (api, vec![nodes, sched, cm])
}

fn job(name: &str, command: &str, spec: Value) -> Job {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "command": [command]}]
        }}}
    });
    for (k, v) in spec.as_object().unwrap() {
        job["spec"][k] = v.clone();
    }
    serde_json::from_value(job).unwrap()
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[test]
fn jobs_complete_fail_at_their_backoff_limit_and_run_indexed_pods() {
    run(async {
        let (api, _cluster) = cluster();
        let client = client(&api).await;
        let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();
        jobs.create(
            &pp,
            &job("ok", "true", json!({"completions": 3, "parallelism": 2})),
        )
        .await
        .unwrap();
        jobs.create(&pp, &job("bad", "false", json!({"backoffLimit": 1})))
            .await
            .unwrap();
        jobs.create(
            &pp,
            &job(
                "idx",
                "true",
                json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}),
            ),
        )
        .await
        .unwrap();

        // completions 3 with parallelism 2 completes, as kubectl wait sees it
        let out = api.kubectl(
            KUBECTL_133,
            &[
                "wait",
                "--for=condition=complete",
                "job/ok",
                "--timeout=50s",
            ],
        );
        assert!(out.contains("job.batch/ok condition met"), "{out}");
        let ok = jobs.get("ok").await.unwrap();
        let status = ok.status.clone().unwrap();
        assert_eq!(status.succeeded, Some(3));
        assert_eq!(status.active.unwrap_or(0), 0);
        assert!(status.completion_time.is_some());
        assert_eq!(
            condition(&ok, "SuccessCriteriaMet"),
            Some(("True".into(), "CompletionsReached".into()))
        );
        let selector = ListParams::default().labels("batch.kubernetes.io/job-name=ok");
        let ok_pods = pods.list(&selector).await.unwrap().items;
        assert_eq!(ok_pods.len(), 3, "one pod per completion");
        for p in &ok_pods {
            assert!(
                p.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()),
                "{p:?}"
            );
            assert_eq!(p.metadata.owner_references.as_ref().unwrap()[0].kind, "Job");
        }
        let events = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=ok",
            ],
        );
        assert!(events.contains("SuccessfulCreate"), "{events}");
        assert!(events.contains("Completed"), "{events}");

        // the Indexed Job ran indexes 0, 1 and 2 once each
        api.kubectl(
            KUBECTL_133,
            &[
                "wait",
                "--for=condition=complete",
                "job/idx",
                "--timeout=50s",
            ],
        );
        let idx = jobs.get("idx").await.unwrap().status.unwrap();
        assert_eq!(idx.completed_indexes.as_deref(), Some("0-2"));
        let selector = ListParams::default().labels("batch.kubernetes.io/job-name=idx");
        let mut hosts: Vec<String> = pods
            .list(&selector)
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|p| p.spec.unwrap().hostname.unwrap_or_default())
            .collect();
        hosts.sort();
        assert_eq!(hosts, vec!["idx-0", "idx-1", "idx-2"]);

        // the failing Job retries once (after the 10 s backoff) and then fails
        let bad = eventually("job/bad failed", || async {
            let job = jobs.get("bad").await.ok()?;
            condition(&job, "Failed").map(|c| (c, job))
        })
        .await;
        assert_eq!(bad.0, ("True".into(), "BackoffLimitExceeded".into()));
        assert_eq!(bad.1.status.as_ref().unwrap().failed, Some(2));
        let out = api.kubectl(
            KUBECTL_133,
            &["wait", "--for=condition=failed", "job/bad", "--timeout=5s"],
        );
        assert!(out.contains("condition met"), "{out}");
        let events = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=bad",
            ],
        );
        assert!(events.contains("BackoffLimitExceeded"), "{events}");
    });
}

/// Polls like [`eventually`] but for up to twice its guard: a `* * * * *` CronJob may wait
/// almost a minute for its first start time.
async fn within_two_minutes<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + support::HANG_GUARD * 2;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[test]
fn a_cronjob_starts_jobs_on_schedule_and_finished_jobs_expire_after_their_ttl() {
    run(async {
        let (api, _cluster) = cluster();
        let client = client(&api).await;
        let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
        let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();
        let cj: CronJob = serde_json::from_value(json!({
            "metadata": {"name": "tick"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
            }}}}}
        }))
        .unwrap();
        cronjobs.create(&pp, &cj).await.unwrap();

        // a Job with a TTL is deleted (foreground) once it has finished
        jobs.create(
            &pp,
            &job("short", "true", json!({"ttlSecondsAfterFinished": 1})),
        )
        .await
        .unwrap();
        eventually("job/short deleted after its ttl", || async {
            match jobs.get_opt("short").await.ok()? {
                None => Some(()),
                // no garbage collector runs here: foreground deletion waits on it
                Some(j) => j.metadata.deletion_timestamp.map(|_| ()),
            }
        })
        .await;

        // kubectl create job --from=cronjob (client side) works against the server
        let out = api.kubectl(
            KUBECTL_133,
            &["create", "job", "by-hand", "--from=cronjob/tick"],
        );
        assert!(out.contains("job.batch/by-hand created"), "{out}");
        let by_hand = jobs.get("by-hand").await.unwrap();
        assert_eq!(
            by_hand
                .annotations()
                .get("cronjob.kubernetes.io/instantiate")
                .map(String::as_str),
            Some("manual")
        );
        api.kubectl(
            KUBECTL_133,
            &[
                "wait",
                "--for=condition=complete",
                "job/by-hand",
                "--timeout=50s",
            ],
        );

        // the scheduled Job, named after its start minute, runs and completes
        let (name, scheduled) = within_two_minutes("a scheduled job of cronjob/tick", || async {
            let cj = cronjobs.get("tick").await.ok()?;
            let last = cj.status?.last_schedule_time?;
            Some((format!("tick-{}", last.0.as_second() / 60), last))
        })
        .await;
        let job = eventually("the scheduled job", || async {
            jobs.get_opt(&name).await.ok()?
        })
        .await;
        let owner = &job.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("CronJob", "tick")
        );
        assert_eq!(scheduled.0.as_second() % 60, 0);
        // once it completes it leaves status.active and sets lastSuccessfulTime
        within_two_minutes(
            "the scheduled job done in cronjob/tick's status",
            || async {
                let status = cronjobs.get("tick").await.ok()?.status?;
                status.last_successful_time.as_ref()?;
                let active = status.active.unwrap_or_default();
                active
                    .iter()
                    .all(|r| r.name.as_deref() != Some(name.as_str()))
                    .then_some(())
            },
        )
        .await;
        let events = api.kubectl(
            KUBECTL_133,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=tick",
            ],
        );
        assert!(events.contains("SuccessfulCreate"), "{events}");
        assert!(events.contains("SawCompletedJob"), "{events}");
    });
}

#[test]
fn a_pdb_reports_healthy_pods_and_refuses_an_eviction_it_cannot_afford() {
    run(async {
        let (api, _cluster) = cluster();
        // the refused eviction must come back as the 429 it is, not be retried for minutes
        let client = kube_client_without_retries(&api).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();
        for name in ["web-0", "web-1"] {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                                         "command": ["sleep", "3600"]}]}
            }))
            .unwrap();
            pods.create(&pp, &pod).await.unwrap();
        }
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        pdbs.create(&pp, &pdb).await.unwrap();

        let status = eventually("pdb/web sees two healthy pods", || async {
            let s = pdbs.get("web").await.ok()?.status?;
            (s.current_healthy == 2).then_some(s)
        })
        .await;
        assert_eq!(
            (
                status.desired_healthy,
                status.disruptions_allowed,
                status.expected_pods
            ),
            (2, 0, 2)
        );
        assert_eq!(status.observed_generation, Some(1));
        let c = &status.conditions.unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("DisruptionAllowed", "False", "InsufficientPods")
        );

        // no disruption allowed: the eviction is refused with 429 and the budget named
        let err = pods
            .evict("web-0", &EvictParams::default())
            .await
            .unwrap_err();
        let kube::Error::Api(status) = err else {
            panic!("expected an API error, got {err:?}");
        };
        assert_eq!(
            (status.code, status.reason.as_str()),
            (429, "TooManyRequests")
        );
        assert_eq!(
            status.message,
            "Cannot evict pod as it would violate the pod's disruption budget."
        );
        assert!(
            pods.get("web-0")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_none()
        );

        // one disruption allowed: the eviction takes it and deletes the pod
        pdbs.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 1}})),
        )
        .await
        .unwrap();
        eventually("pdb/web allows one disruption", || async {
            let s = pdbs.get("web").await.ok()?.status?;
            (s.disruptions_allowed == 1 && s.observed_generation == Some(2)).then_some(())
        })
        .await;
        pods.evict("web-0", &EvictParams::default()).await.unwrap();
        eventually("web-0 deleted by its eviction", || async {
            match pods.get_opt("web-0").await.ok()? {
                None => Some(()),
                Some(p) => p.metadata.deletion_timestamp.map(|_| ()),
            }
        })
        .await;
        let status = eventually("pdb/web back to no disruptions", || async {
            let s = pdbs.get("web").await.ok()?.status?;
            (s.current_healthy == 1 && s.disruptions_allowed == 0).then_some(s)
        })
        .await;
        assert_eq!(status.desired_healthy, 1);
        let out = api.kubectl(KUBECTL_133, &["get", "pdb", "web"]);
        assert!(out.contains("ALLOWED DISRUPTIONS"), "{out}");
    });
}
