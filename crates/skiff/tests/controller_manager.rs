//! `skiff controller-manager` as a separate process against a real `skiff apiserver` (seeds
//! 001–003: controllers are only API clients): the process, its `--controllers` selection and
//! leader Lease, and each controller's effect seen through the API.

mod support;

use std::process::Command;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::cluster::controller_manager;
use support::{ApiServer, Backend, eventually, kube_client as client, run};

#[test]
fn an_unknown_controller_is_a_usage_error() {
    let out = support::run_guarded(Command::new(env!("CARGO_BIN_EXE_skiff")).args([
        "controller-manager",
        "--kubeconfig",
        "/nonexistent",
        "--controllers",
        "*,nosuch",
    ]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"nosuch\""), "{stderr}");
}

#[test]
fn the_leader_holds_its_lease_and_every_namespace_gets_a_default_service_account() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let cm = controller_manager(&api, &[]);
        assert!(cm.ready.contains("serviceaccount"), "{}", cm.ready);
        let client = client(&api).await;

        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        let holder = eventually("the controller manager's lease", || async {
            let lease = leases.get_opt("kube-controller-manager").await.ok()??;
            lease.spec?.holder_identity
        })
        .await;
        assert!(holder.contains('_'), "host_pid identity: {holder}");

        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team-a");
        eventually("team-a/default", || async {
            accounts.get_opt("default").await.ok()?
        })
        .await;
        // the bootstrap namespaces get theirs too
        let system: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
        eventually("kube-system/default", || async {
            system.get_opt("default").await.ok()?
        })
        .await;

        // deleted, it comes back (a new object)
        let uid = accounts.get("default").await.unwrap().metadata.uid;
        accounts
            .delete("default", &DeleteParams::default())
            .await
            .unwrap();
        eventually("team-a/default recreated", || async {
            let sa = accounts.get_opt("default").await.ok()??;
            (sa.metadata.uid != uid).then_some(())
        })
        .await;
    });
}

/// The audit log's complete lines.
fn audit_events(log: &std::path::Path) -> Vec<serde_json::Value> {
    let text = support::read(log);
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn with_service_account_credentials_each_controller_writes_as_its_own_account() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
             rules:\n- level: Metadata\n  verbs: [create, update]\n",
        )
        .unwrap();
        let log = dir.path().join("audit.log");
        let api = ApiServer::start_with(
            Backend::Embedded,
            &[
                "--audit-policy-file",
                policy.to_str().unwrap(),
                "--audit-log-path",
                log.to_str().unwrap(),
            ],
        );
        // the harness runs it as system:kube-controller-manager with the flag on
        let _cm = controller_manager(&api, &["--controllers", "serviceaccount"]);
        let client = client(&api).await;

        // its account exists, made by the controller manager
        let system: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
        eventually("kube-system/service-account-controller", || async {
            system.get_opt("service-account-controller").await.ok()?
        })
        .await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": "team-b"}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let user_of = |verb: &str, resource: &str, namespace: &str, sub: Option<&str>| {
            let (verb, resource, namespace) = (
                verb.to_string(),
                resource.to_string(),
                namespace.to_string(),
            );
            let sub = sub.map(str::to_string);
            let log = log.clone();
            async move {
                audit_events(&log).into_iter().find_map(|e| {
                    let r = &e["objectRef"];
                    (e["stage"] == "ResponseComplete"
                        && e["verb"] == verb.as_str()
                        && r["resource"] == resource.as_str()
                        && r["namespace"] == namespace.as_str()
                        && r["subresource"].as_str() == sub.as_deref()
                        && e["responseStatus"]["code"]
                            .as_i64()
                            .is_some_and(|c| c < 300))
                    .then(|| e["user"]["username"].as_str().unwrap_or("").to_string())
                })
            }
        };
        let writer = eventually("team-b/default created", || {
            user_of("create", "serviceaccounts", "team-b", None)
        })
        .await;
        assert_eq!(
            writer,
            "system:serviceaccount:kube-system:service-account-controller"
        );
        let issuer = eventually("a token for the controller", || {
            user_of("create", "serviceaccounts", "kube-system", Some("token"))
        })
        .await;
        assert_eq!(issuer, "system:kube-controller-manager");
        let leader = eventually("the lease taken", || {
            user_of("create", "leases", "kube-system", None)
        })
        .await;
        assert_eq!(leader, "system:kube-controller-manager");
    });
}
