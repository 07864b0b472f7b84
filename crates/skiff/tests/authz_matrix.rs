//! The authorization matrix of a real `skiff apiserver` (Node,RBAC over upstream's bootstrap
//! policy): for each identity a cluster has — the admin, users bound to `view` and `edit` in one
//! namespace, the scheduler, the controller manager, a controller's ServiceAccount, a kubelet,
//! kube-proxy, cluster DNS and anonymous — the verbs it may use on each resource in namespaces
//! `a`, `b` and `kube-system`, as upstream's roles grant them. Every cell is asked through
//! SubjectAccessReview; a subset (get, list, create, delete on namespaced resources) is also
//! made as a real request under that identity. The Node authorizer's limits are checked with
//! real requests by name: a kubelet reads its own pods and the secrets they use, not another
//! node's.

mod support;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use support::{ApiServer, Backend, eventually, kube_client as admin_client, run};

const VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const NAMESPACES: [&str; 3] = ["a", "b", "kube-system"];
const ALL: &str = "get,list,watch,create,update,patch,delete";
const READ: &str = "get,list,watch";

/// One resource of the matrix: its group, version, kind, plural, subresource and scope.
struct Resource {
    name: &'static str,
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    subresource: &'static str,
    namespaced: bool,
}

const fn res(
    name: &'static str,
    (group, version, kind): (&'static str, &'static str, &'static str),
    plural: &'static str,
    subresource: &'static str,
    namespaced: bool,
) -> Resource {
    Resource {
        name,
        group,
        version,
        kind,
        plural,
        subresource,
        namespaced,
    }
}

const RESOURCES: [Resource; 11] = [
    res("pods", ("", "v1", "Pod"), "pods", "", true),
    res("pods/binding", ("", "v1", "Pod"), "pods", "binding", true),
    res("pods/status", ("", "v1", "Pod"), "pods", "status", true),
    res("secrets", ("", "v1", "Secret"), "secrets", "", true),
    res(
        "configmaps",
        ("", "v1", "ConfigMap"),
        "configmaps",
        "",
        true,
    ),
    res("nodes", ("", "v1", "Node"), "nodes", "", false),
    res("nodes/status", ("", "v1", "Node"), "nodes", "status", false),
    res("services", ("", "v1", "Service"), "services", "", true),
    res(
        "endpointslices",
        ("discovery.k8s.io", "v1", "EndpointSlice"),
        "endpointslices",
        "",
        true,
    ),
    res(
        "deployments",
        ("apps", "v1", "Deployment"),
        "deployments",
        "",
        true,
    ),
    res(
        "leases",
        ("coordination.k8s.io", "v1", "Lease"),
        "leases",
        "",
        true,
    ),
];

/// Who asks: the user name and groups the API server authenticates it as.
struct Identity {
    name: &'static str,
    user: &'static str,
    groups: &'static [&'static str],
}

const SA_GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:kube-system",
    "system:authenticated",
];

const IDENTITIES: [Identity; 10] = [
    Identity {
        name: "admin",
        user: "kubernetes-admin",
        groups: &["system:masters", "system:authenticated"],
    },
    Identity {
        name: "viewer",
        user: "viewer",
        groups: &["system:authenticated"],
    },
    Identity {
        name: "editor",
        user: "editor",
        groups: &["system:authenticated"],
    },
    Identity {
        name: "scheduler",
        user: "system:kube-scheduler",
        groups: &["system:authenticated"],
    },
    Identity {
        name: "controller-manager",
        user: "system:kube-controller-manager",
        groups: &["system:authenticated"],
    },
    Identity {
        name: "deployment-controller",
        user: "system:serviceaccount:kube-system:deployment-controller",
        groups: SA_GROUPS,
    },
    Identity {
        name: "node",
        user: "system:node:n1",
        groups: &["system:nodes", "system:authenticated"],
    },
    Identity {
        name: "proxy",
        user: "system:kube-proxy",
        groups: &["system:authenticated"],
    },
    Identity {
        name: "dns",
        user: "system:serviceaccount:kube-system:kube-dns",
        groups: SA_GROUPS,
    },
    Identity {
        name: "anonymous",
        user: "system:anonymous",
        groups: &["system:unauthenticated"],
    },
];

/// What each identity may do: (identity, resource, namespaces, verbs). `*` as the resource is
/// every resource, `*` as the namespaces is `a`, `b` and `kube-system` (and cluster-scoped
/// resources, which have none). A cell not listed is denied. From upstream's bootstrap roles
/// (and, for the kubelet, the Node authorizer: no secret, configmap, lease or unnamed pod read
/// without a relationship; pods created and deleted, their status written).
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    ("admin", "*", "*", ALL),
    // `view` bound in a
    ("viewer", "pods", "a", READ),
    ("viewer", "pods/status", "a", READ),
    ("viewer", "configmaps", "a", READ),
    ("viewer", "services", "a", READ),
    ("viewer", "endpointslices", "a", READ),
    ("viewer", "deployments", "a", READ),
    // `edit` bound in a: writes all but status and endpointslices, reads secrets
    ("editor", "pods", "a", ALL),
    ("editor", "pods/status", "a", READ),
    ("editor", "secrets", "a", ALL),
    ("editor", "configmaps", "a", ALL),
    ("editor", "services", "a", ALL),
    ("editor", "endpointslices", "a", READ),
    ("editor", "deployments", "a", ALL),
    ("editor", "leases", "a", ALL),
    // system:kube-scheduler (its lease only by name) and its leader-locking role
    ("scheduler", "pods", "*", "get,list,watch,delete"),
    ("scheduler", "pods/binding", "*", "create"),
    ("scheduler", "pods/status", "*", "update,patch"),
    ("scheduler", "nodes", "*", READ),
    ("scheduler", "services", "*", READ),
    ("scheduler", "leases", "*", "create"),
    ("scheduler", "configmaps", "kube-system", "watch"),
    // system:kube-controller-manager: list and watch everything for its informers
    ("controller-manager", "pods", "*", "list,watch"),
    ("controller-manager", "pods/binding", "*", "list,watch"),
    ("controller-manager", "pods/status", "*", "list,watch"),
    (
        "controller-manager",
        "secrets",
        "*",
        "get,list,watch,create,update,delete",
    ),
    ("controller-manager", "configmaps", "*", READ),
    ("controller-manager", "nodes", "*", "list,watch"),
    ("controller-manager", "nodes/status", "*", "list,watch"),
    ("controller-manager", "services", "*", "list,watch"),
    ("controller-manager", "endpointslices", "*", "list,watch"),
    ("controller-manager", "deployments", "*", "list,watch"),
    ("controller-manager", "leases", "*", "list,watch,create"),
    // system:controller:deployment-controller
    (
        "deployment-controller",
        "pods",
        "*",
        "get,list,watch,update",
    ),
    (
        "deployment-controller",
        "deployments",
        "*",
        "get,list,watch,update",
    ),
    // the Node authorizer with system:node's rules
    ("node", "pods", "*", "create,delete"),
    ("node", "pods/status", "*", "update,patch"),
    ("node", "nodes", "*", "get,list,watch,create,update,patch"),
    ("node", "nodes/status", "*", "update,patch"),
    ("node", "services", "*", READ),
    // system:node-proxier
    ("proxy", "nodes", "*", READ),
    ("proxy", "services", "*", "list,watch"),
    ("proxy", "endpointslices", "*", "list,watch"),
    // system:kube-dns
    ("dns", "services", "*", "list,watch"),
];

fn expected(identity: &str, resource: &str, namespace: &str, verb: &str) -> bool {
    EXPECTED.iter().any(|(i, r, ns, verbs)| {
        *i == identity
            && (*r == "*" || *r == resource)
            && (*ns == "*" || *ns == namespace)
            && verbs.split(',').any(|v| v == verb)
    })
}

/// The cells of the matrix: (resource, namespace), cluster-scoped resources once with `""`.
fn cells() -> Vec<(&'static Resource, &'static str)> {
    let mut out = Vec::new();
    for r in &RESOURCES {
        if r.namespaced {
            out.extend(NAMESPACES.iter().map(|ns| (r, *ns)));
        } else {
            out.push((r, ""));
        }
    }
    out
}

async fn review(admin: &kube::Client, who: &Identity, r: &Resource, ns: &str, verb: &str) -> bool {
    let sar = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(who.user.into()),
            groups: Some(who.groups.iter().map(|g| g.to_string()).collect()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(r.group.into()),
                version: Some(r.version.into()),
                resource: Some(r.plural.into()),
                subresource: Some(r.subresource.into()),
                namespace: Some(ns.into()),
                verb: Some(verb.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &sar)
        .await
        .expect("a SubjectAccessReview");
    answer.status.expect("a status").allowed
}

/// A client for `kubeconfig`'s server with these credentials instead of its own.
async fn client_with(api: &ApiServer, token: Option<&str>) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(api.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: token.map(|t| t.to_string().into()),
        ..Default::default()
    };
    kube::Client::try_from(config).unwrap()
}

async fn cert_client(api: &ApiServer, user: &str, group: Option<&str>) -> kube::Client {
    let path = support::cluster::identity(api, user, group);
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// A ServiceAccount's client: the account in kube-system and a token from its TokenRequest.
async fn account_client(api: &ApiServer, admin: &kube::Client, name: &str) -> kube::Client {
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(admin.clone(), "kube-system");
    let sa = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match accounts.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating kube-system/{name}: {e}"),
    }
    let token = accounts
        .create_token_request(name, &PostParams::default(), &Default::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    client_with(api, Some(&token)).await
}

async fn client_of(api: &ApiServer, admin: &kube::Client, name: &str) -> kube::Client {
    match name {
        "admin" => admin.clone(),
        "viewer" => cert_client(api, "viewer", None).await,
        "editor" => cert_client(api, "editor", None).await,
        "scheduler" => cert_client(api, "system:kube-scheduler", None).await,
        "controller-manager" => cert_client(api, "system:kube-controller-manager", None).await,
        "deployment-controller" => account_client(api, admin, "deployment-controller").await,
        "node" => cert_client(api, "system:node:n1", Some("system:nodes")).await,
        "proxy" => cert_client(api, "system:kube-proxy", None).await,
        "dns" => account_client(api, admin, "kube-dns").await,
        "anonymous" => client_with(api, None).await,
        other => panic!("no identity {other}"),
    }
}

/// A valid object of the resource named `name` (a pod is bound to n2, away from the kubelet).
fn object(r: &Resource, name: &str) -> DynamicObject {
    let api_version = if r.group.is_empty() {
        r.version.to_string()
    } else {
        format!("{}/{}", r.group, r.version)
    };
    let labels = json!({"app": "m"});
    let pod_spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    let body: Value = match r.kind {
        "Pod" => json!({"spec": pod_spec}),
        "Secret" => json!({"stringData": {"k": "v"}}),
        "ConfigMap" => json!({"data": {"k": "v"}}),
        "Service" => json!({"spec": {"ports": [{"port": 80}]}}),
        "Deployment" => json!({"spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec}}}),
        other => panic!("no fixture for {other}"),
    };
    let mut obj = body;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(r.kind);
    obj["metadata"] = json!({"name": name});
    serde_json::from_value(obj).unwrap()
}

fn dynamic(client: &kube::Client, r: &Resource, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(r.group, r.version, r.kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, r.plural);
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Whether a real request was allowed: any answer but 401 and 403 (a NotFound or a conflict
/// got past the authorizers).
fn allowed<T>(r: kube::Result<T>, what: &str) -> bool {
    match r {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 401 => false,
        Err(e) => panic!("{what}: {e}"),
    }
}

#[test]
fn every_identity_gets_exactly_what_upstreams_roles_grant() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let admin = admin_client(&api).await;
        api.kubectl_stdin(
            support::KUBECTL_133,
            &["apply", "-f", "-"],
            Some(
                r#"
apiVersion: v1
kind: Namespace
metadata: {name: a}
---
apiVersion: v1
kind: Namespace
metadata: {name: b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: viewer, namespace: a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: viewer}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: editor, namespace: a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: editor}]
"#,
            ),
        );
        for ns in ["a", "b"] {
            // pods need their namespace's default account (no controller manager runs here)
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(admin.clone(), ns);
            let sa = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
            let _ = accounts.create(&PostParams::default(), &sa).await;
        }
        // the bindings are in effect once the authorizer's cache has them
        let editor = &IDENTITIES[2];
        eventually("the editor's binding", || async {
            review(&admin, editor, &RESOURCES[9], "a", "create")
                .await
                .then_some(())
        })
        .await;

        // every cell through SubjectAccessReview
        let mut wrong = Vec::new();
        for who in &IDENTITIES {
            for (r, ns) in cells() {
                for verb in VERBS {
                    let want = expected(who.name, r.name, ns, verb);
                    if review(&admin, who, r, ns, verb).await != want {
                        wrong.push(format!(
                            "{} {verb} {} in {ns:?}: expected {}",
                            who.name,
                            r.name,
                            if want { "allow" } else { "deny" }
                        ));
                    }
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "SubjectAccessReview:\n{}",
            wrong.join("\n")
        );

        // get, list, create and delete for real on the namespaced resources that have them;
        // the kubelet's are name-dependent and checked below
        let real: Vec<&Resource> = RESOURCES
            .iter()
            .filter(|r| r.subresource.is_empty())
            .filter(|r| {
                matches!(
                    r.kind,
                    "Pod" | "Secret" | "ConfigMap" | "Service" | "Deployment"
                )
            })
            .collect();
        for ns in ["a", "b"] {
            for r in &real {
                dynamic(&admin, r, ns)
                    .create(&PostParams::default(), &object(r, "fixture"))
                    .await
                    .unwrap();
            }
        }
        for who in IDENTITIES.iter().filter(|i| i.name != "node") {
            let client = client_of(&api, &admin, who.name).await;
            for ns in ["a", "b"] {
                for r in &real {
                    let theirs = dynamic(&client, r, ns);
                    let ours = dynamic(&admin, r, ns);
                    let what = |verb: &str| format!("{} {verb} {} in {ns}", who.name, r.name);
                    let mut check = |verb: &str, got: bool| {
                        if got != expected(who.name, r.name, ns, verb) {
                            wrong.push(format!("{}: got {}", what(verb), got));
                        }
                    };
                    check("get", allowed(theirs.get("fixture").await, &what("get")));
                    check(
                        "list",
                        allowed(theirs.list(&ListParams::default()).await, &what("list")),
                    );
                    let created = format!("made-by-{}", who.name);
                    check(
                        "create",
                        allowed(
                            theirs
                                .create(&PostParams::default(), &object(r, &created))
                                .await,
                            &what("create"),
                        ),
                    );
                    let doomed = format!("doomed-for-{}", who.name);
                    ours.create(&PostParams::default(), &object(r, &doomed))
                        .await
                        .unwrap();
                    check(
                        "delete",
                        allowed(
                            theirs.delete(&doomed, &DeleteParams::default()).await,
                            &what("delete"),
                        ),
                    );
                }
            }
        }
        assert!(wrong.is_empty(), "real requests:\n{}", wrong.join("\n"));
    });
}

#[test]
fn a_kubelet_reads_its_own_pods_and_their_secrets_but_not_another_nodes() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let admin = admin_client(&api).await;
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(admin.clone(), "default");
        let sa = serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        let _ = accounts.create(&PostParams::default(), &sa).await;
        let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
        for (node, secret, pod) in [("n1", "s1", "p1"), ("n2", "s2", "p2")] {
            let s = serde_json::from_value(
                json!({"metadata": {"name": secret}, "stringData": {"k": "v"}}),
            )
            .unwrap();
            secrets.create(&PostParams::default(), &s).await.unwrap();
            let p = serde_json::from_value(json!({
                "metadata": {"name": pod},
                "spec": {"nodeName": node,
                         "containers": [{"name": "c", "image": "busybox"}],
                         "volumes": [{"name": "s", "secret": {"secretName": secret}}]}}))
            .unwrap();
            pods.create(&PostParams::default(), &p).await.unwrap();
        }
        let kubelet = cert_client(&api, "system:node:n1", Some("system:nodes")).await;
        let its_pods: Api<Pod> = Api::namespaced(kubelet.clone(), "default");
        let its_secrets: Api<Secret> = Api::namespaced(kubelet.clone(), "default");
        // its own, once the authorizer's graph has the pod
        eventually("n1 reads p1", || async { its_pods.get("p1").await.ok() }).await;
        eventually("n1 reads s1", || async { its_secrets.get("s1").await.ok() }).await;
        let code = |r: kube::Result<_>| match r {
            Ok(_) => 200,
            Err(kube::Error::Api(s)) => s.code,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(code(its_pods.get("p2").await.map(|_| ())), 403);
        assert_eq!(code(its_secrets.get("s2").await.map(|_| ())), 403);
        // lists only of its own pods, by field selector
        let mine = ListParams::default().fields("spec.nodeName=n1");
        let listed = its_pods.list(&mine).await.unwrap();
        assert_eq!(listed.items.len(), 1);
        assert_eq!(
            code(its_pods.list(&ListParams::default()).await.map(|_| ())),
            403
        );
        let theirs = ListParams::default().fields("spec.nodeName=n2");
        assert_eq!(code(its_pods.list(&theirs).await.map(|_| ())), 403);
        // and never a secret list
        assert_eq!(
            code(its_secrets.list(&ListParams::default()).await.map(|_| ())),
            403
        );
    });
}
