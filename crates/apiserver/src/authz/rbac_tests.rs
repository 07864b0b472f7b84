//! The RBAC authorizer's matrix: identities × verbs × resources × namespaces.

use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::json;

use super::*;

/// Policy objects in memory; `bump` moves the generation as a cache change would.
#[derive(Default)]
struct Objects {
    generation: AtomicI64,
    lists: parking_lot::Mutex<HashMap<String, Vec<Value>>>,
}

impl PolicySource for Arc<Objects> {
    fn generation(&self) -> i64 {
        self.generation.load(Ordering::SeqCst)
    }
    fn objects(&self, resource: &str) -> Vec<Value> {
        self.lists.lock().get(resource).cloned().unwrap_or_default()
    }
}

impl Objects {
    fn add(&self, resource: &str, o: Value) {
        self.lists
            .lock()
            .entry(resource.into())
            .or_default()
            .push(o);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

fn policy() -> (Arc<Objects>, Rbac) {
    let o = Arc::new(Objects::default());
    o.add(
        "roles",
        json!({"metadata": {"namespace": "dev", "name": "pod-reader"}, "rules": [
            {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods", "pods/log"]},
            {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["settings"]},
        ]}),
    );
    o.add(
        "clusterroles",
        json!({"metadata": {"name": "deployer"}, "rules": [
            {"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments", "*/scale"]},
        ]}),
    );
    o.add(
        "clusterroles",
        json!({"metadata": {"name": "metrics"}, "rules": [
            {"verbs": ["get"], "nonResourceURLs": ["/metrics", "/logs/*"]},
        ]}),
    );
    o.add(
        "rolebindings",
        json!({"metadata": {"namespace": "dev", "name": "alice-reads"},
            "roleRef": {"kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "ci"}]}),
    );
    o.add(
        "rolebindings",
        json!({"metadata": {"namespace": "prod", "name": "ops-deploy"},
            "roleRef": {"kind": "ClusterRole", "name": "deployer"},
            "subjects": [{"kind": "Group", "name": "ops"}]}),
    );
    o.add(
        "clusterrolebindings",
        json!({"metadata": {"name": "monitoring"},
            "roleRef": {"kind": "ClusterRole", "name": "metrics"},
            "subjects": [{"kind": "Group", "name": "monitors"}]}),
    );
    let rbac = Rbac::new(Box::new(o.clone()));
    (o, rbac)
}

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.into(),
        uid: String::new(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        extra: Default::default(),
    }
}

/// `verb group/resource[/sub] ns/name` or `verb /path`.
fn req(verb: &str, what: &str) -> RequestInfo {
    if what.starts_with('/') {
        return RequestInfo {
            verb: verb.into(),
            path: what.into(),
            ..Default::default()
        };
    }
    let (target, object) = what.split_once(' ').unwrap_or((what, ""));
    let (group, resource) = target.split_once(':').unwrap_or(("", target));
    let (namespace, name) = object.split_once('/').unwrap_or((object, ""));
    RequestInfo::resource_request(verb, group, resource, namespace, name)
}

#[test]
fn the_matrix_of_identities_verbs_resources_and_namespaces() {
    let (_, rbac) = policy();
    let alice = user("alice", &["system:authenticated"]);
    let ci = user("system:serviceaccount:dev:ci", &["system:serviceaccounts"]);
    let other_ci = user("system:serviceaccount:prod:ci", &[]);
    let ops = user("bob", &["ops"]);
    let monitor = user("prom", &["monitors"]);
    let cases: &[(&UserInfo, &str, &str, bool)] = &[
        (&alice, "list", "pods dev", true),
        (&alice, "get", "pods dev/web", true),
        (&alice, "watch", "pods dev", true),
        (&alice, "delete", "pods dev/web", false),
        (&alice, "list", "pods prod", false),
        (&alice, "list", "pods", false),
        (&alice, "get", "pods/log dev/web", true),
        (&alice, "create", "pods/exec dev/web", false),
        (&alice, "get", "configmaps dev/settings", true),
        (&alice, "get", "configmaps dev/other", false),
        (&alice, "list", "configmaps dev", false),
        (&alice, "get", "apps:deployments dev/web", false),
        (&ci, "list", "pods dev", true),
        (&other_ci, "list", "pods dev", false),
        (&ops, "delete", "apps:deployments prod/web", true),
        (&ops, "update", "apps:deployments/scale prod/web", true),
        (&ops, "update", "apps:replicasets/scale prod/web", true),
        (&ops, "get", "apps:replicasets prod/web", false),
        (&ops, "get", "deployments prod/web", false),
        (&ops, "get", "apps:deployments dev/web", false),
        (&monitor, "get", "/metrics", true),
        (&monitor, "get", "/logs/kubelet.log", true),
        (&monitor, "post", "/metrics", false),
        (&monitor, "get", "/healthz", false),
        (&alice, "get", "/metrics", false),
    ];
    for (who, verb, what, allowed) in cases {
        let got = rbac.authorize(who, &req(verb, what));
        assert_eq!(
            got == Decision::Allow,
            *allowed,
            "{} {verb} {what}: {got:?}",
            who.name
        );
    }
}

#[test]
fn a_new_binding_takes_effect_without_a_restart() {
    let (o, rbac) = policy();
    let carol = user("carol", &[]);
    assert_ne!(
        rbac.authorize(&carol, &req("list", "pods dev")),
        Decision::Allow
    );
    o.add(
        "rolebindings",
        json!({"metadata": {"namespace": "dev", "name": "carol"},
            "roleRef": {"kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "carol"}]}),
    );
    assert_eq!(
        rbac.authorize(&carol, &req("list", "pods dev")),
        Decision::Allow
    );
}

#[test]
fn a_binding_to_a_missing_role_is_named_in_the_reason() {
    let (o, rbac) = policy();
    o.add(
        "clusterrolebindings",
        json!({"metadata": {"name": "dangling"},
            "roleRef": {"kind": "ClusterRole", "name": "ghost"},
            "subjects": [{"kind": "User", "name": "dave"}]}),
    );
    assert_eq!(
        rbac.authorize(&user("dave", &[]), &req("list", "pods dev")),
        Decision::NoOpinion(
            "RBAC: clusterrole.rbac.authorization.k8s.io \"ghost\" not found".into()
        )
    );
    assert_eq!(
        rbac.authorize(&user("erin", &[]), &req("list", "pods dev")),
        Decision::pass()
    );
}

#[test]
fn rules_for_a_user_are_the_cluster_ones_then_the_namespace_ones() {
    let (_, rbac) = policy();
    let both = user("alice", &["monitors"]);
    let rules = rbac.rules_for(&both, "dev");
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert_eq!(rules[0].non_resource_urls, vec!["/metrics", "/logs/*"]);
    assert_eq!(rbac.rules_for(&both, "prod").len(), 1);
}

#[test]
fn the_bootstrap_policy_gives_upstreams_defaults() {
    let o = Arc::new(Objects::default());
    let p = crate::bootstrap::rbac::policy();
    for (r, list) in [
        ("clusterroles", &p.cluster_roles),
        ("clusterrolebindings", &p.cluster_role_bindings),
        ("roles", &p.roles),
        ("rolebindings", &p.role_bindings),
    ] {
        for x in list.iter() {
            o.add(r, x.clone());
        }
    }
    let rbac = Rbac::new(Box::new(o));
    let someone = user("someone", &["system:authenticated"]);
    let anonymous = UserInfo::anonymous();
    let scheduler = user("system:kube-scheduler", &["system:authenticated"]);
    let cases: &[(&UserInfo, &str, &str, bool)] = &[
        (&someone, "get", "/api", true),
        (&someone, "get", "/apis/apps/v1", true),
        (&someone, "get", "/version", true),
        (
            &someone,
            "create",
            "authorization.k8s.io:selfsubjectaccessreviews",
            true,
        ),
        (
            &someone,
            "create",
            "authentication.k8s.io:selfsubjectreviews",
            true,
        ),
        (&someone, "list", "pods default", false),
        (&anonymous, "get", "/healthz", true),
        (&anonymous, "get", "/api", false),
        (&scheduler, "create", "pods/binding default/web", true),
        (&scheduler, "list", "nodes", true),
        (&scheduler, "delete", "nodes /n1", false),
    ];
    for (who, verb, what, allowed) in cases {
        let got = rbac.authorize(who, &req(verb, what));
        assert_eq!(
            got == Decision::Allow,
            *allowed,
            "{} {verb} {what}: {got:?}",
            who.name
        );
    }
}
