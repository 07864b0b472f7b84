//! The batch and policy controllers of `skiff controller-manager` (`job`, `cronjob`,
//! `ttl-after-finished`, `disruption`, `resourcequota`) against a real `skiff apiserver`, with
//! the scheduler and hollow nodes running the pods (containers running `true` succeed, `false`
//! fail). Each test has its own cluster; results are read through the API and real kubectl.

mod support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use support::cluster::{Process, controller_manager, hollow_nodes, scheduler};
use support::{ApiServer, Backend, KUBECTL_133, eventually, kube_client as client, run};

const CONTROLLERS: &str = "serviceaccount,job";

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
