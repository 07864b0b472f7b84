//! Authorization against a real `skiff apiserver` (default modes Node,RBAC) with real kubectl,
//! the newest and the oldest: a user certificate with a Role reads pods in its namespace and is
//! refused elsewhere with upstream's message; `kubectl auth can-i` (also `--list` and `--as`)
//! and `kubectl auth whoami` answer as upstream; `kubectl --as` runs as the impersonated user;
//! a kubelet identity reads its own pods and their secrets, never another node's; aggregated
//! ClusterRoles gather the rules of the roles they select; custom resources are authorized as
//! built-in ones (a Role on their group and plural, `resources: ["*"]`, aggregation into `view`).

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use support::{ApiServer, Backend, KUBECTL_127, KUBECTL_133};

/// A kubeconfig for a client certificate CN=`user`, O=`group`, signed by the cluster's CA.
fn kubeconfig_for(api: &ApiServer, user: &str, group: Option<&str>) -> PathBuf {
    support::cluster::identity(api, user, group)
}

fn kubectl_as(api: &ApiServer, kubectl: &str, kubeconfig: &PathBuf, args: &[&str]) -> Output {
    support::run_guarded(
        Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("HOME", api.data_dir.join("home")),
    )
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: dev}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: dev}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-reads-pods, namespace: dev}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
---
apiVersion: v1
kind: Secret
metadata: {name: s1, namespace: dev}
stringData: {k: one}
---
apiVersion: v1
kind: Secret
metadata: {name: s2, namespace: dev}
stringData: {k: two}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: dev}
spec:
  nodeName: n1
  containers: [{name: c, image: busybox, envFrom: [{secretRef: {name: s1}}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: other, namespace: dev}
spec:
  nodeName: n2
  containers: [{name: c, image: busybox, envFrom: [{secretRef: {name: s2}}]}]
"#;

/// Runs `args` as `kubeconfig` until it succeeds: a binding reaches the authorizer through the
/// watch cache, a moment after the write that made it returned.
fn until_allowed(api: &ApiServer, kubeconfig: &PathBuf, args: &[&str]) -> String {
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    loop {
        let out = kubectl_as(api, KUBECTL_133, kubeconfig, args);
        if out.status.success() {
            return text(&out).0;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl {args:?} never succeeded: {}",
            text(&out).1
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_role_allows_its_namespace_and_nothing_else() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(OBJECTS));
    let alice = kubeconfig_for(&api, "alice", None);
    let listed = until_allowed(&api, &alice, &["get", "pods", "-n", "dev", "-o", "name"]);
    assert!(listed.contains("pod/web"), "{listed}");

    for kubectl in [KUBECTL_133, KUBECTL_127] {
        let out = kubectl_as(&api, kubectl, &alice, &["get", "pods", "-n", "default"]);
        assert!(!out.status.success());
        assert!(
            text(&out).1.contains(
                r#"Error from server (Forbidden): pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
            ),
            "{kubectl}: {}",
            text(&out).1
        );
        let out = kubectl_as(
            &api,
            kubectl,
            &alice,
            &["delete", "pod", "web", "-n", "dev"],
        );
        assert!(
            text(&out).1.contains(
                r#"pods "web" is forbidden: User "alice" cannot delete resource "pods" in API group "" in the namespace "dev""#
            ),
            "{kubectl}: {}",
            text(&out).1
        );
        let out = kubectl_as(&api, kubectl, &alice, &["get", "nodes"]);
        assert!(
            text(&out).1.contains(
                r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#
            ),
            "{kubectl}: {}",
            text(&out).1
        );
    }
}

#[test]
fn can_i_whoami_and_impersonation_answer_as_upstream() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(OBJECTS));
    let alice = kubeconfig_for(&api, "alice", Some("devs"));
    until_allowed(&api, &alice, &["get", "pods", "-n", "dev"]);

    for kubectl in [KUBECTL_133, KUBECTL_127] {
        let yes = kubectl_as(
            &api,
            kubectl,
            &alice,
            &["auth", "can-i", "list", "pods", "-n", "dev"],
        );
        assert!(yes.status.success(), "{kubectl}: {:?}", text(&yes));
        assert_eq!(text(&yes).0.trim(), "yes");
        let no = kubectl_as(
            &api,
            kubectl,
            &alice,
            &["auth", "can-i", "delete", "pods", "-n", "dev"],
        );
        assert_eq!(no.status.code(), Some(1), "{kubectl}: {:?}", text(&no));
        assert_eq!(text(&no).0.trim(), "no");
        let no = kubectl_as(
            &api,
            kubectl,
            &alice,
            &["auth", "can-i", "get", "pods", "-n", "default"],
        );
        assert_eq!(text(&no).0.trim(), "no");

        let list = kubectl_as(
            &api,
            kubectl,
            &alice,
            &["auth", "can-i", "--list", "-n", "dev"],
        );
        let (out, err) = text(&list);
        assert!(list.status.success(), "{kubectl}: {err}");
        assert!(out.starts_with("Resources"), "{out}");
        let pods = out
            .lines()
            .find(|l| l.starts_with("pods "))
            .unwrap_or_else(|| panic!("no pods row: {out}"));
        assert!(pods.contains("[get list watch]"), "{pods}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("selfsubjectaccessreviews.authorization.k8s.io")),
            "{out}"
        );

        // the admin asks about alice, and acts as her
        assert_eq!(
            api.kubectl(
                kubectl,
                &[
                    "auth", "can-i", "watch", "pods", "-n", "dev", "--as", "alice"
                ]
            )
            .trim(),
            "yes"
        );
        let no = api.kubectl_output(
            kubectl,
            &[
                "auth", "can-i", "list", "secrets", "-n", "dev", "--as", "alice",
            ],
            None,
        );
        assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
        assert_eq!(
            api.kubectl(kubectl, &["auth", "can-i", "*", "*"]).trim(),
            "yes"
        );
        let listed = api.kubectl(
            kubectl,
            &["--as", "alice", "get", "pods", "-n", "dev", "-o", "name"],
        );
        assert!(listed.contains("pod/web"), "{listed}");
        let err = api.kubectl_fails(
            kubectl,
            &["--as", "alice", "get", "secrets", "-n", "dev"],
            None,
        );
        assert!(
            err.contains(r#"secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "dev""#),
            "{err}"
        );

        // alice may not impersonate anyone
        let out = kubectl_as(
            &api,
            kubectl,
            &alice,
            &["--as", "bob", "get", "pods", "-n", "dev"],
        );
        assert!(
            text(&out).1.contains(r#"users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#),
            "{kubectl}: {}",
            text(&out).1
        );

        let who = kubectl_as(&api, kubectl, &alice, &["auth", "whoami"]);
        let (out, err) = text(&who);
        assert!(who.status.success(), "{kubectl}: {err}");
        let username = out
            .lines()
            .find(|l| l.starts_with("Username"))
            .unwrap_or_default();
        assert!(username.ends_with(" alice"), "{out}");
        let groups = out
            .lines()
            .find(|l| l.starts_with("Groups"))
            .unwrap_or_default();
        assert!(groups.contains("[devs system:authenticated]"), "{out}");
        let who = api.kubectl(
            kubectl,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
        );
        assert_eq!(who, "admin");
        let who = api.kubectl(
            kubectl,
            &[
                "auth",
                "whoami",
                "--as",
                "jane",
                "--as-group",
                "qa",
                "-o",
                "jsonpath={.status.userInfo.groups}",
            ],
        );
        assert_eq!(who, r#"["qa","system:authenticated"]"#);
    }
}

#[test]
fn a_kubelet_reads_only_its_own_pods_and_their_secrets() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(OBJECTS));
    let n1 = kubeconfig_for(&api, "system:node:n1", Some("system:nodes"));
    let got = until_allowed(&api, &n1, &["get", "pod", "web", "-n", "dev", "-o", "name"]);
    assert_eq!(got.trim(), "pod/web");
    let secret = until_allowed(
        &api,
        &n1,
        &[
            "get",
            "secret",
            "s1",
            "-n",
            "dev",
            "-o",
            "jsonpath={.data.k}",
        ],
    );
    assert_eq!(secret, "b25l");

    for kubectl in [KUBECTL_133, KUBECTL_127] {
        let out = kubectl_as(&api, kubectl, &n1, &["get", "pod", "other", "-n", "dev"]);
        assert!(
            text(&out).1.contains(
                r#"pods "other" is forbidden: User "system:node:n1" cannot get resource "pods" in API group "" in the namespace "dev": no relationship found between node 'n1' and this object"#
            ),
            "{kubectl}: {}",
            text(&out).1
        );
        let out = kubectl_as(&api, kubectl, &n1, &["get", "secret", "s2", "-n", "dev"]);
        assert!(
            text(&out).1.contains(r#"secrets "s2" is forbidden: User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "dev""#),
            "{kubectl}: {}",
            text(&out).1
        );
        let out = kubectl_as(&api, kubectl, &n1, &["get", "pods", "-n", "dev"]);
        assert!(
            !out.status.success(),
            "a kubelet lists pods only by its node"
        );
        let mine = kubectl_as(
            &api,
            kubectl,
            &n1,
            &[
                "get",
                "pods",
                "-A",
                "--field-selector",
                "spec.nodeName=n1",
                "-o",
                "name",
            ],
        );
        assert_eq!(text(&mine).0.trim(), "pod/web", "{}", text(&mine).1);

        // NodeRestriction: its own node only, and not the restricted labels
        let out = kubectl_as(&api, kubectl, &n1, &["label", "node", "n2", "x=y"]);
        assert!(
            text(&out)
                .1
                .contains(r#"node "n1" is not allowed to modify node "n2""#),
            "{kubectl}: {}",
            text(&out).1
        );
        let out = kubectl_as(
            &api,
            kubectl,
            &n1,
            &[
                "label",
                "node",
                "n1",
                "node-restriction.kubernetes.io/trusted=yes",
            ],
        );
        assert!(
            text(&out).1.contains(
                "is not allowed to modify labels: node-restriction.kubernetes.io/trusted"
            ),
            "{kubectl}: {}",
            text(&out).1
        );
        assert_eq!(
            text(&kubectl_as(
                &api,
                kubectl,
                &n1,
                &["auth", "can-i", "get", "secret/s2", "-n", "dev"]
            ))
            .0
            .trim(),
            // kubectl prints the reason after the answer, as against upstream
            "no - no relationship found between node 'n1' and this object"
        );
        assert_eq!(
            text(&kubectl_as(
                &api,
                kubectl,
                &n1,
                &["auth", "can-i", "get", "secret/s1", "-n", "dev"]
            ))
            .0
            .trim(),
            "yes"
        );
    }
    let out = kubectl_as(&api, KUBECTL_133, &n1, &["label", "node", "n1", "role=web"]);
    assert!(out.status.success(), "{}", text(&out).1);
}

#[test]
fn an_aggregated_cluster_role_gathers_the_rules_of_the_roles_it_selects() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: monitoring}
aggregationRule:
  clusterRoleSelectors:
  - matchLabels: {rbac.example.com/aggregate-to-monitoring: "true"}
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: monitoring-endpoints
  labels: {rbac.example.com/aggregate-to-monitoring: "true"}
rules:
- {apiGroups: [""], resources: [services, endpoints, pods], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: carol-monitors}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: monitoring}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: carol}
"#,
        ),
    );
    let carol = kubeconfig_for(&api, "carol", None);
    let listed = until_allowed(&api, &carol, &["get", "endpoints", "-A", "-o", "name"]);
    assert!(listed.contains("endpoints/kubernetes"), "{listed}");
    let rules = api.kubectl(
        KUBECTL_133,
        &[
            "get",
            "clusterrole",
            "monitoring",
            "-o",
            "jsonpath={.rules[0].resources}",
        ],
    );
    assert_eq!(rules, r#"["services","endpoints","pods"]"#);
    // the label goes away: so does the rule
    api.kubectl(
        KUBECTL_133,
        &[
            "label",
            "clusterrole",
            "monitoring-endpoints",
            "rbac.example.com/aggregate-to-monitoring-",
        ],
    );
    let deadline = std::time::Instant::now() + support::HANG_GUARD;
    loop {
        let out = kubectl_as(&api, KUBECTL_133, &carol, &["get", "pods", "-A"]);
        if !out.status.success() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the rule stayed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

const WIDGET_ROLES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: widget-reader, namespace: shop}
rules:
- {apiGroups: [example.com], resources: [widgets], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: bob-reads-widgets, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: widget-reader}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: example-admin}
rules:
- {apiGroups: [example.com], resources: ["*"], verbs: [get, list, create, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: erin-administers-example}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: example-admin}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: erin}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widgets-view
  labels: {rbac.authorization.k8s.io/aggregate-to-view: "true"}
rules:
- {apiGroups: [example.com], resources: [widgets], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: frank-views, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: frank}
"#;

/// Runs `kubectl --kubeconfig <kubeconfig> args` with `stdin`.
fn kubectl_as_stdin(api: &ApiServer, kubeconfig: &PathBuf, args: &[&str], stdin: &str) -> Output {
    support::run_guarded_with(
        Command::new(KUBECTL_133)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("HOME", api.data_dir.join("home")),
        Some(stdin),
    )
}

#[test]
fn custom_resources_are_authorized_as_built_in_resources_are() {
    use support::crd::{install_widgets, widget};

    let api = ApiServer::start(Backend::Embedded);
    install_widgets(&api);
    api.kubectl_stdin(KUBECTL_133, &["apply", "-f", "-"], Some(WIDGET_ROLES));
    api.kubectl_stdin(
        KUBECTL_133,
        &["create", "-f", "-"],
        Some(&widget("shop", "w1", "")),
    );

    // A Role naming the resource and its group: bob reads, and may neither create nor read
    // elsewhere, refused with upstream's message.
    let bob = kubeconfig_for(&api, "bob", None);
    let listed = until_allowed(&api, &bob, &["get", "widgets", "-n", "shop", "-o", "name"]);
    assert_eq!(listed.trim(), "widget.example.com/w1");
    let got = kubectl_as(
        &api,
        KUBECTL_133,
        &bob,
        &["get", "widget", "w1", "-n", "shop"],
    );
    assert!(got.status.success(), "{}", text(&got).1);
    let out = kubectl_as_stdin(
        &api,
        &bob,
        &["create", "-f", "-"],
        &widget("shop", "w2", ""),
    );
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains(
            "Error from server (Forbidden): error when creating \"STDIN\": widgets.example.com is \
             forbidden: User \"bob\" cannot create resource \"widgets\" in API group \
             \"example.com\" in the namespace \"shop\""
        ),
        "{}",
        text(&out).1
    );
    let out = kubectl_as(
        &api,
        KUBECTL_133,
        &bob,
        &["get", "widgets", "-n", "default"],
    );
    assert!(
        text(&out).1.contains(
            "widgets.example.com is forbidden: User \"bob\" cannot list resource \"widgets\" in \
             API group \"example.com\" in the namespace \"default\""
        ),
        "{}",
        text(&out).1
    );

    // A ClusterRole with `resources: ["*"]` in the group covers the custom resource everywhere
    // (and nothing outside its group).
    let erin = kubeconfig_for(&api, "erin", None);
    until_allowed(&api, &erin, &["get", "widgets", "-A"]);
    let out = kubectl_as_stdin(
        &api,
        &erin,
        &["create", "-f", "-"],
        &widget("default", "w3", ""),
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let out = kubectl_as(&api, KUBECTL_133, &erin, &["get", "configmaps"]);
    assert!(!out.status.success());

    // A ClusterRole labelled to aggregate into `view` (as cert-manager's are): `view` gains its
    // rule, and a user bound to `view` reads the custom resource.
    let frank = kubeconfig_for(&api, "frank", None);
    let listed = until_allowed(
        &api,
        &frank,
        &["get", "widgets", "-n", "shop", "-o", "name"],
    );
    assert_eq!(listed.trim(), "widget.example.com/w1");
    let view = api.kubectl(KUBECTL_133, &["get", "clusterrole", "view", "-o", "json"]);
    let view: serde_json::Value = serde_json::from_str(&view).unwrap();
    assert!(
        view["rules"].as_array().unwrap().iter().any(|r| {
            r["apiGroups"] == serde_json::json!(["example.com"])
                && r["resources"] == serde_json::json!(["widgets"])
        }),
        "{view:#}"
    );
    let out = kubectl_as_stdin(
        &api,
        &frank,
        &["create", "-f", "-"],
        &widget("shop", "w4", ""),
    );
    assert!(!out.status.success(), "view does not create");
}
