//! Tests of the bootstrap RBAC policy: the data itself, and its reconciliation against a real
//! embedded store.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::json;
use skiff_store::{DeleteRequest, EmbeddedConfig, EmbeddedStore, KeyRange, PutRequest};

use super::*;
use crate::bootstrap::reconcile::{rules_of, uncovered};
use crate::storage;
use skiff_store::StoreExt;

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap()
}

fn cluster_role<'a>(policy: &'a Policy, wanted: &str) -> &'a Value {
    (policy.cluster_roles.iter())
        .find(|r| name(r) == wanted)
        .unwrap_or_else(|| panic!("no cluster role {wanted}"))
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Rule {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
    Rule {
        verbs: v(verbs),
        api_groups: v(groups),
        resources: v(resources),
        ..Rule::default()
    }
}

#[test]
fn the_policy_has_upstreams_object_counts() {
    let policy = policy();
    // upstream's policy, system:controller:local-path-provisioner (Skiff's provisioner) and
    // system:skiff-network-policy and system:skiff-ingress (Skiff's node controllers)
    assert_eq!(policy.cluster_roles.len(), 69);
    // upstream's 47, skiff:kubelet-bootstrap (kubeadm's, for bootstrap tokens), the
    // local-path provisioner's and the two node controllers'
    assert_eq!(policy.cluster_role_bindings.len(), 51);
    assert_eq!(policy.roles.len(), 7);
    assert_eq!(policy.role_bindings.len(), 7);
}

#[test]
fn names_are_unique_within_each_kind_and_namespace() {
    let policy = policy();
    for objects in [
        &policy.cluster_roles,
        &policy.cluster_role_bindings,
        &policy.roles,
        &policy.role_bindings,
    ] {
        let mut seen = HashSet::new();
        for o in objects {
            let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
            assert!(seen.insert((ns, name(o))), "duplicate {ns}/{}", name(o));
        }
    }
}

#[test]
fn every_cluster_role_binding_refers_to_a_cluster_role_that_exists() {
    let policy = policy();
    let roles: HashSet<_> = policy.cluster_roles.iter().map(name).collect();
    for b in &policy.cluster_role_bindings {
        assert_eq!(b["roleRef"]["kind"], "ClusterRole");
        let role = b["roleRef"]["name"].as_str().unwrap();
        assert!(roles.contains(role), "{} binds missing {role}", name(b));
    }
}

#[test]
fn every_role_binding_refers_to_a_role_in_its_namespace() {
    let policy = policy();
    let roles: HashSet<_> = (policy.roles.iter())
        .map(|r| (r["metadata"]["namespace"].as_str().unwrap(), name(r)))
        .collect();
    for b in &policy.role_bindings {
        let ns = b["metadata"]["namespace"].as_str().unwrap();
        let role = b["roleRef"]["name"].as_str().unwrap();
        assert!(
            roles.contains(&(ns, role)),
            "{ns}/{} binds missing {role}",
            name(b)
        );
    }
}

#[test]
fn every_object_is_labelled_bootstrapping_and_annotated_autoupdate() {
    let policy = policy();
    let all = (policy.cluster_roles.iter())
        .chain(&policy.cluster_role_bindings)
        .chain(&policy.roles)
        .chain(&policy.role_bindings);
    for o in all {
        assert_eq!(
            o["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        assert_eq!(
            o["metadata"]["annotations"][AUTOUPDATE],
            "true",
            "{}",
            name(o)
        );
        assert_eq!(o["apiVersion"], API_VERSION);
    }
}

#[test]
fn cluster_admin_may_do_anything_to_any_resource_and_url() {
    let policy = policy();
    let rules = rules_of(cluster_role(&policy, "cluster-admin"));
    let star = vec!["*".to_string()];
    assert!(rules.contains(&Rule {
        verbs: star.clone(),
        api_groups: star.clone(),
        resources: star.clone(),
        ..Rule::default()
    }));
    assert!(rules.contains(&Rule {
        verbs: star.clone(),
        non_resource_urls: star,
        ..Rule::default()
    }));
    let binding = (policy.cluster_role_bindings.iter())
        .find(|b| name(b) == "cluster-admin")
        .unwrap();
    assert_eq!(
        binding["subjects"],
        json!([{"apiGroup": GROUP, "kind": "Group", "name": "system:masters"}])
    );
}

#[test]
fn view_cannot_read_secrets_but_edit_can() {
    let policy = policy();
    let read_secrets = [rule(&[""], &["secrets"], &["get"])];
    let view = rules_of(cluster_role(&policy, "view"));
    assert_eq!(uncovered(&view, &read_secrets).len(), 1);
    let edit = rules_of(cluster_role(&policy, "edit"));
    assert!(uncovered(&edit, &read_secrets).is_empty());
}

#[test]
fn the_scheduler_reads_the_storage_kinds_through_its_two_roles() {
    let policy = policy();
    let bound: Vec<&Value> = (policy.cluster_role_bindings.iter())
        .filter(|b| {
            b["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["kind"] == "User" && s["name"] == "system:kube-scheduler")
        })
        .collect();
    let mut rules = Vec::new();
    for b in bound {
        rules.extend(rules_of(cluster_role(
            &policy,
            b["roleRef"]["name"].as_str().unwrap(),
        )));
    }
    let wanted = [
        rule(
            &[""],
            &["persistentvolumeclaims", "persistentvolumes"],
            &["get", "list", "watch"],
        ),
        rule(
            &["storage.k8s.io"],
            &[
                "storageclasses",
                "csinodes",
                "csidrivers",
                "csistoragecapacities",
            ],
            &["get", "list", "watch"],
        ),
    ];
    assert!(uncovered(&rules, &wanted).is_empty());
    let edit = rules_of(cluster_role(&policy, "edit"));
    let write_claims = [rule(
        &[""],
        &["persistentvolumeclaims"],
        &["create", "delete"],
    )];
    assert!(uncovered(&edit, &write_claims).is_empty());
    let view = rules_of(cluster_role(&policy, "view"));
    let read_new_kinds = [
        rule(
            &[""],
            &["persistentvolumeclaims", "replicationcontrollers"],
            &["list"],
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], &["list"]),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            &["list"],
        ),
    ];
    assert!(uncovered(&view, &read_new_kinds).is_empty());
}

#[test]
fn aggregated_roles_carry_the_rules_of_the_roles_they_select() {
    let policy = policy();
    let rules = |n: &str| rules_of(cluster_role(&policy, n));
    assert_eq!(rules("view"), rules("system:aggregate-to-view"));
    let edit = rules("edit");
    assert_eq!(edit[..13], rules("system:aggregate-to-edit")[..]);
    assert!(uncovered(&edit, &rules("view")).is_empty());
    let admin = rules("admin");
    assert_eq!(admin[..edit.len()], edit[..]);
    assert!(uncovered(&admin, &rules("system:aggregate-to-admin")).is_empty());
    let view = cluster_role(&policy, "view");
    assert_eq!(
        view["metadata"]["labels"][format!("{LABEL_PREFIX}aggregate-to-edit")],
        "true"
    );
    assert_eq!(
        view["aggregationRule"],
        json!({"clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]})
    );
}

#[test]
fn controller_roles_are_bound_to_their_kube_system_service_accounts() {
    let policy = policy();
    let binding = (policy.cluster_role_bindings.iter())
        .find(|b| name(b) == "system:controller:deployment-controller")
        .unwrap();
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "deployment-controller", "namespace": "kube-system"}])
    );
    assert_eq!(
        binding["roleRef"]["name"],
        "system:controller:deployment-controller"
    );
}

#[test]
fn public_info_is_open_to_everyone_and_discovery_to_the_authenticated() {
    let policy = policy();
    let groups = |n: &str| -> Vec<String> {
        let b = (policy.cluster_role_bindings.iter())
            .find(|b| name(b) == n)
            .unwrap();
        (b["subjects"].as_array().unwrap().iter())
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        groups("system:public-info-viewer"),
        ["system:authenticated", "system:unauthenticated"]
    );
    assert_eq!(groups("system:discovery"), ["system:authenticated"]);
    assert_eq!(groups("system:basic-user"), ["system:authenticated"]);
}

// --- reconciliation against a real store ---

async fn open_store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(
        EmbeddedStore::open(EmbeddedConfig::new(dir.path()))
            .await
            .unwrap(),
    )
}

fn rt(plural: &str) -> &'static ResourceType {
    lookup(GROUP, "v1", plural).unwrap()
}

async fn read(store: &Arc<dyn Store>, plural: &str, ns: &str, name: &str) -> Value {
    let kv = store
        .get(storage::key(rt(plural), ns, name).as_bytes())
        .await
        .unwrap();
    storage::decode(&kv.expect("object exists")).unwrap()
}

async fn write(store: &Arc<dyn Store>, plural: &str, object: &Value) {
    let ns = object["metadata"]["namespace"].as_str().unwrap_or("");
    let key = storage::key(rt(plural), ns, name(object));
    store
        .put(PutRequest {
            key: Bytes::from(key),
            value: storage::encode(object),
            lease: 0,
            prev_kv: false,
        })
        .await
        .unwrap();
}

async fn revision(store: &Arc<dyn Store>) -> i64 {
    store.status().await.unwrap().revision
}

#[tokio::test]
async fn the_first_run_creates_every_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    let summary = run(&store).await.unwrap();
    assert_eq!(
        summary,
        Summary {
            created: 134,
            updated: 0,
            protected: 0
        }
    );
    let view = read(&store, "clusterroles", "", "view").await;
    assert!(view["metadata"]["uid"].is_string());
    assert_eq!(view["rules"], cluster_role(&policy(), "view")["rules"]);
    let reader = read(
        &store,
        "rolebindings",
        "kube-system",
        "system::extension-apiserver-authentication-reader",
    )
    .await;
    assert_eq!(
        reader["roleRef"]["name"],
        "extension-apiserver-authentication-reader"
    );
}

#[tokio::test]
async fn a_second_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    run(&store).await.unwrap();
    let before = revision(&store).await;
    assert_eq!(run(&store).await.unwrap(), Summary::default());
    assert_eq!(revision(&store).await, before);
}

#[tokio::test]
async fn a_role_edited_to_drop_a_rule_gets_its_permissions_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    run(&store).await.unwrap();
    let mut edited = read(&store, "clusterroles", "", "system:node-proxier").await;
    let dropped: Vec<Rule> = serde_json::from_value(json!([edited["rules"][0].clone()])).unwrap();
    edited["rules"].as_array_mut().unwrap().remove(0);
    edited["metadata"]["labels"]["team"] = json!("net");
    write(&store, "clusterroles", &edited).await;
    assert_eq!(uncovered(&rules_of(&edited), &dropped).len(), 4);

    assert_eq!(run(&store).await.unwrap().updated, 1);
    let role = read(&store, "clusterroles", "", "system:node-proxier").await;
    assert!(uncovered(&rules_of(&role), &dropped).is_empty());
    assert_eq!(
        role["metadata"]["labels"]["team"], "net",
        "what the owner added stays"
    );
    assert_eq!(role["metadata"]["uid"], edited["metadata"]["uid"]);
}

#[tokio::test]
async fn a_role_annotated_autoupdate_false_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    run(&store).await.unwrap();
    let mut edited = read(&store, "clusterroles", "", "edit").await;
    edited["rules"] = json!([]);
    edited["metadata"]["annotations"][AUTOUPDATE] = json!("false");
    write(&store, "clusterroles", &edited).await;
    let before = revision(&store).await;

    let summary = run(&store).await.unwrap();
    assert_eq!(
        summary,
        Summary {
            created: 0,
            updated: 0,
            protected: 1
        }
    );
    assert_eq!(revision(&store).await, before);
    assert_eq!(
        read(&store, "clusterroles", "", "edit").await["rules"],
        json!([])
    );
}

#[tokio::test]
async fn a_binding_gets_missing_subjects_back_and_keeps_extra_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    run(&store).await.unwrap();
    let mut edited = read(
        &store,
        "clusterrolebindings",
        "",
        "system:public-info-viewer",
    )
    .await;
    edited["subjects"] = json!([{"apiGroup": GROUP, "kind": "User", "name": "alice"}]);
    write(&store, "clusterrolebindings", &edited).await;

    assert_eq!(run(&store).await.unwrap().updated, 1);
    let binding = read(
        &store,
        "clusterrolebindings",
        "",
        "system:public-info-viewer",
    )
    .await;
    let names: Vec<_> = (binding["subjects"].as_array().unwrap().iter())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["alice", "system:authenticated", "system:unauthenticated"]
    );
}

#[tokio::test]
async fn a_binding_whose_role_ref_changed_is_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    run(&store).await.unwrap();
    let mut edited = read(&store, "clusterrolebindings", "", "system:kube-dns").await;
    edited["roleRef"]["name"] = json!("view");
    write(&store, "clusterrolebindings", &edited).await;

    let summary = run(&store).await.unwrap();
    assert_eq!(summary.created, 1);
    let binding = read(&store, "clusterrolebindings", "", "system:kube-dns").await;
    assert_eq!(binding["roleRef"]["name"], "system:kube-dns");
    assert_ne!(binding["metadata"]["uid"], edited["metadata"]["uid"]);
}

#[tokio::test]
async fn a_deleted_object_is_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir).await;
    run(&store).await.unwrap();
    let key = storage::key(
        rt("roles"),
        "kube-system",
        "system:controller:token-cleaner",
    );
    store
        .delete(DeleteRequest {
            range: KeyRange::key(Bytes::from(key)),
            prev_kv: false,
        })
        .await
        .unwrap();

    assert_eq!(run(&store).await.unwrap().created, 1);
    let role = read(
        &store,
        "roles",
        "kube-system",
        "system:controller:token-cleaner",
    )
    .await;
    assert_eq!(role["rules"][0]["resources"], json!(["secrets"]));
}
