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
            let lease = leases.get_opt("skiff-controller-manager").await.ok()??;
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
