//! The Node authorizer's matrix: a kubelet against its own and another node's objects.

use serde_json::json;

use super::*;

#[derive(Default)]
struct Graph {
    pods: Vec<Value>,
    claims: Vec<Value>,
    volumes: Vec<Value>,
}

impl NodeGraph for Graph {
    fn pods_on(&self, node: &str, namespace: &str) -> Vec<Value> {
        // only what the server's graph gives: the name, the namespace and the spec
        self.pods
            .iter()
            .filter(|p| p["spec"]["nodeName"] == node)
            .filter(|p| namespace.is_empty() || p["metadata"]["namespace"] == namespace)
            .map(|p| {
                json!({"metadata": {"name": p["metadata"]["name"],
                                    "namespace": p["metadata"]["namespace"]},
                       "spec": p["spec"]})
            })
            .collect()
    }
    fn service_accounts_on(&self, node: &str, namespace: &str) -> Vec<String> {
        self.pods_on(node, namespace)
            .iter()
            .map(|p| account(p["spec"]["serviceAccountName"].as_str()))
            .collect()
    }
    fn pod_node(&self, namespace: &str, name: &str) -> Option<String> {
        self.pods
            .iter()
            .find(|p| p["metadata"]["namespace"] == namespace && p["metadata"]["name"] == name)
            .map(|p| p["spec"]["nodeName"].as_str().unwrap_or("").to_string())
    }
    fn claim(&self, namespace: &str, name: &str) -> Option<Value> {
        self.claims
            .iter()
            .find(|c| c["metadata"]["namespace"] == namespace && c["metadata"]["name"] == name)
            .cloned()
    }
    fn volume(&self, name: &str) -> Option<Value> {
        self.volumes
            .iter()
            .find(|v| v["metadata"]["name"] == name)
            .cloned()
    }
}

fn authorizer() -> NodeAuthorizer {
    let pod = |name: &str, node: &str, secret: &str, config: &str, claim: &str| {
        json!({"metadata": {"namespace": "default", "name": name}, "spec": {
            "nodeName": node, "serviceAccountName": format!("sa-{name}"),
            "volumes": [
                {"name": "s", "secret": {"secretName": secret}},
                {"name": "c", "persistentVolumeClaim": {"claimName": claim}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            ],
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": config}}]}],
        }})
    };
    NodeAuthorizer::new(Box::new(Graph {
        pods: vec![
            pod("mine", "n1", "s1", "c1", "pvc1"),
            pod("theirs", "n2", "s2", "c2", "pvc2"),
        ],
        claims: vec![
            json!({"metadata": {"namespace": "default", "name": "pvc1"}, "spec": {"volumeName": "pv1"}}),
            json!({"metadata": {"namespace": "default", "name": "pvc2"}, "spec": {"volumeName": "pv2"}}),
        ],
        volumes: vec![
            local_path_volume("lp-released", "n1", "Released"),
            local_path_volume("lp-bound", "n1", "Bound"),
            local_path_volume("lp-theirs", "n2", "Released"),
            json!({"metadata": {"name": "static", "labels": {LABEL_NODE: "n1"}},
                   "status": {"phase": "Released"}}),
        ],
    }))
}

fn local_path_volume(name: &str, node: &str, phase: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {LABEL_NODE: node},
                        "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
           "status": {"phase": phase}})
}

fn req(verb: &str, group: &str, resource: &str, ns: &str, name: &str) -> RequestInfo {
    RequestInfo::resource_request(verb, group, resource, ns, name)
}

fn kubelet(node: &str) -> UserInfo {
    UserInfo {
        name: format!("system:node:{node}"),
        uid: String::new(),
        groups: vec!["system:nodes".into(), "system:authenticated".into()],
        extra: Default::default(),
    }
}

#[test]
fn a_kubelet_reaches_only_what_its_pods_use() {
    let a = authorizer();
    let n1 = kubelet("n1");
    let cases: &[(RequestInfo, bool)] = &[
        (req("get", "", "pods", "default", "mine"), true),
        (req("get", "", "pods", "default", "theirs"), false),
        (req("get", "", "secrets", "default", "s1"), true),
        (req("get", "", "secrets", "default", "s2"), false),
        (req("list", "", "secrets", "default", ""), false),
        (req("delete", "", "secrets", "default", "s1"), false),
        (req("get", "", "configmaps", "default", "c1"), true),
        (req("get", "", "configmaps", "default", "c2"), false),
        (
            req("get", "", "persistentvolumeclaims", "default", "pvc1"),
            true,
        ),
        (
            req("get", "", "persistentvolumeclaims", "default", "pvc2"),
            false,
        ),
        // a generic ephemeral volume's claim is named `<pod>-<volume>`
        (
            req(
                "get",
                "",
                "persistentvolumeclaims",
                "default",
                "mine-scratch",
            ),
            true,
        ),
        (
            req(
                "get",
                "",
                "persistentvolumeclaims",
                "default",
                "theirs-scratch",
            ),
            false,
        ),
        (req("get", "", "persistentvolumes", "", "pv1"), true),
        (req("get", "", "persistentvolumes", "", "pv2"), false),
        (req("update", "", "pods/status", "default", "mine"), true),
        (req("create", "", "events", "default", ""), true),
        (
            req("create", "events.k8s.io", "events", "default", ""),
            true,
        ),
        (req("list", "events.k8s.io", "events", "default", ""), false),
        (req("get", "", "nodes", "", "n1"), true),
        (req("update", "", "nodes/status", "", "n1"), true),
        (req("delete", "", "namespaces", "", "default"), false),
        (
            req(
                "get",
                "coordination.k8s.io",
                "leases",
                "kube-node-lease",
                "n1",
            ),
            true,
        ),
        (
            req(
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-node-lease",
                "n1",
            ),
            true,
        ),
        (
            req(
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-node-lease",
                "n2",
            ),
            false,
        ),
        (
            req("get", "coordination.k8s.io", "leases", "default", "n1"),
            false,
        ),
        (
            req("create", "", "serviceaccounts/token", "default", "sa-mine"),
            true,
        ),
        (
            req(
                "create",
                "",
                "serviceaccounts/token",
                "default",
                "sa-theirs",
            ),
            false,
        ),
        (req("list", "apps", "deployments", "default", ""), false),
    ];
    for (r, allowed) in cases {
        let got = a.authorize(&n1, r);
        assert_eq!(
            got == Decision::Allow,
            *allowed,
            "{} {}/{} {}/{}: {got:?}",
            r.verb,
            r.resource,
            r.subresource,
            r.namespace,
            r.name
        );
    }
}

#[test]
fn a_kubelet_lists_pods_only_through_its_node_field_selector() {
    let a = authorizer();
    let mut list = req("list", "", "pods", "", "");
    assert!(matches!(
        a.authorize(&kubelet("n1"), &list),
        Decision::NoOpinion(_)
    ));
    list.field_selector = "spec.nodeName=n1".into();
    assert_eq!(a.authorize(&kubelet("n1"), &list), Decision::Allow);
    list.field_selector = "spec.nodeName=n2".into();
    assert!(matches!(
        a.authorize(&kubelet("n1"), &list),
        Decision::NoOpinion(_)
    ));
    let mut watch = req("watch", "", "secrets", "default", "");
    watch.field_selector = "metadata.name=s1".into();
    assert_eq!(a.authorize(&kubelet("n1"), &watch), Decision::Allow);
}

#[test]
fn another_nodes_pod_is_refused_with_upstreams_reason() {
    assert_eq!(
        authorizer().authorize(&kubelet("n1"), &req("get", "", "pods", "default", "theirs")),
        Decision::NoOpinion("no relationship found between node 'n1' and this object".into())
    );
}

#[test]
fn users_that_are_not_kubelets_are_left_to_the_next_authorizer() {
    let a = authorizer();
    let not_in_group = UserInfo {
        name: "system:node:n1".into(),
        uid: String::new(),
        groups: vec![],
        extra: Default::default(),
    };
    for u in [not_in_group, UserInfo::anonymous()] {
        assert_eq!(
            a.authorize(&u, &req("get", "", "pods", "default", "mine")),
            Decision::pass()
        );
    }
}

#[test]
fn a_kubelet_watches_and_deletes_only_its_own_released_local_path_volumes() {
    let a = authorizer();
    let n1 = kubelet("n1");
    let selecting = |verb: &str, selector: &str| {
        let mut r = req(verb, "", "persistentvolumes", "", "");
        r.label_selector = selector.into();
        r
    };
    let cases: &[(RequestInfo, bool)] = &[
        (selecting("list", "skiff.dev/local-path-node=n1"), true),
        (selecting("watch", "skiff.dev/local-path-node==n1"), true),
        (selecting("watch", "skiff.dev/local-path-node=n2"), false),
        (selecting("list", ""), false),
        (selecting("list", "skiff.dev/local-path-node!=n2"), false),
        (req("get", "", "persistentvolumes", "", "lp-bound"), true),
        (req("get", "", "persistentvolumes", "", "lp-theirs"), false),
        (
            req("delete", "", "persistentvolumes", "", "lp-released"),
            true,
        ),
        // bound, another node's, or not the provisioner's: not the kubelet's to delete
        (
            req("delete", "", "persistentvolumes", "", "lp-bound"),
            false,
        ),
        (
            req("delete", "", "persistentvolumes", "", "lp-theirs"),
            false,
        ),
        (req("delete", "", "persistentvolumes", "", "static"), false),
        (req("delete", "", "persistentvolumes", "", "pv1"), false),
        (
            req("update", "", "persistentvolumes", "", "lp-bound"),
            false,
        ),
        (req("create", "", "persistentvolumes", "", ""), false),
    ];
    for (r, allowed) in cases {
        let d = a.authorize(&n1, r);
        assert_eq!(
            matches!(d, Decision::Allow),
            *allowed,
            "{} {} {:?}: {d:?}",
            r.verb,
            r.name,
            r.label_selector
        );
    }
}
