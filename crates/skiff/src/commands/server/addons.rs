//! What `skiff server` keeps in the cluster on every start (server-side apply, so a restart or
//! a second server re-applies the same objects): the cluster DNS's `system:coredns` role bound
//! to the `kube-system/kube-dns` ServiceAccount it runs as (upstream's bootstrap
//! `system:kube-dns` role has no EndpointSlices), the `kube-dns` Service at the cluster DNS
//! address, selecting nothing, and, where this server runs the DNS, an EndpointSlice naming
//! this node's address, where `skiff dns` listens; and, unless `--disable local-storage`, the
//! default StorageClass `local-path` of Skiff's built-in provisioner (k3s's `local-storage`
//! manifest, which k3s likewise re-applies on every start); and, unless `--disable ingress`,
//! the default IngressClass `skiff` of Skiff's ingress controller (k3s's Traefik chart makes
//! its `traefik` class the default the same way); unless `--disable metrics-server`, what
//! metrics-server's manifests declare, pointing at this server's `skiff metrics-server`; and
//! the settings agents follow ([`node_config`]).

use std::net::IpAddr;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::IngressClass;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use skiff_controllers::localpath::{CLASS, PROVISIONER};

use crate::commands::node_config;

/// The field manager of everything the server applies.
const MANAGER: &str = "skiff-server";

/// The DNS ports, as CoreDNS's Service names them.
fn ports() -> Value {
    json!([
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
        {"name": "metrics", "port": 9153, "protocol": "TCP"},
    ])
}

async fn apply<K>(api: Api<K>, name: &str, object: Value) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {} {name}", K::kind(&())))?;
    Ok(())
}

/// The role, its binding and the `kube-dns` Service at `cluster_dns`.
pub async fn ensure_dns_service(client: &kube::Client, cluster_dns: IpAddr) -> anyhow::Result<()> {
    apply(
        Api::<ClusterRole>::all(client.clone()),
        "system:coredns",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                 "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": ["list", "watch"]},
            ],
        }),
    )
    .await?;
    apply(
        Api::<ClusterRoleBinding>::all(client.clone()),
        "system:coredns",
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "kube-dns",
                          "namespace": "kube-system"}],
        }),
    )
    .await?;
    apply(
        Api::<Service>::namespaced(client.clone(), "kube-system"),
        "kube-dns",
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system",
                         "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
            "spec": {"clusterIP": cluster_dns.to_string(), "ports": ports()},
        }),
    )
    .await
}

/// The EndpointSlice `kube-dns-<node>`: the `kube-dns` Service served at `node_ip` (where this
/// server's `skiff dns` listens).
pub async fn ensure_dns_endpoints(
    client: &kube::Client,
    node: &str,
    node_ip: IpAddr,
) -> anyhow::Result<()> {
    let name = format!("kube-dns-{node}");
    let family = if node_ip.is_ipv4() { "IPv4" } else { "IPv6" };
    apply(
        Api::<EndpointSlice>::namespaced(client.clone(), "kube-system"),
        &name,
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "kube-system",
                         "labels": {"kubernetes.io/service-name": "kube-dns",
                                    "endpointslice.kubernetes.io/managed-by": MANAGER}},
            "addressType": family,
            "endpoints": [{"addresses": [node_ip.to_string()], "nodeName": node,
                           "conditions": {"ready": true}}],
            "ports": ports(),
        }),
    )
    .await
}

/// The annotation that makes a StorageClass the default one.
const ANN_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// The default StorageClass `local-path`, as k3s's `local-storage` manifest declares it (with
/// Skiff's provisioner): volumes on the node the scheduler picks, deleted with their claim.
pub fn local_storage_class() -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": CLASS, "annotations": {ANN_DEFAULT_CLASS: "true"}},
        "provisioner": PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    })
}

/// Applies [`local_storage_class`]. A class of that name that cannot take it (another
/// provisioner's: a StorageClass's provisioner, reclaim policy and binding mode are immutable)
/// is left as it is, with a warning: the server starts anyway.
pub async fn ensure_local_storage(client: &kube::Client) -> anyhow::Result<()> {
    let applied = apply(
        Api::<StorageClass>::all(client.clone()),
        CLASS,
        local_storage_class(),
    )
    .await;
    if let Err(e) = applied {
        eprintln!("skiff server: warning: leaving storageclass {CLASS} as it is: {e:#}");
    }
    Ok(())
}

/// The IngressClass `skiff`, the cluster's default, served by `skiff ingress`.
fn ingress_class() -> Value {
    use skiff_ingress::config::{CLASS, CONTROLLER, DEFAULT_CLASS_ANNOTATION};
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "spec": {"controller": CONTROLLER},
    })
}

/// Applies [`ingress_class`]. A class of that name with another controller (immutable) is left
/// as it is, with a warning: the server starts anyway.
pub async fn ensure_ingress_class(client: &kube::Client) -> anyhow::Result<()> {
    let name = skiff_ingress::config::CLASS;
    let applied = apply(
        Api::<IngressClass>::all(client.clone()),
        name,
        ingress_class(),
    )
    .await;
    if let Err(e) = applied {
        eprintln!("skiff server: warning: leaving ingressclass {name} as it is: {e:#}");
    }
    Ok(())
}

/// The metrics server's ServiceAccount name in `kube-system`, and so its user.
pub const METRICS_SERVER_USER: &str = "system:serviceaccount:kube-system:metrics-server";

/// What metrics-server's manifests declare (k3s's `metrics-server` addon): its RBAC (scrape
/// kubelets, read the front proxy's trust, delegate authorization; the aggregated reader role
/// for `view`, `edit` and `admin`), the `kube-system/metrics-server` Service with an
/// EndpointSlice naming where this server's `skiff metrics-server` listens, and the
/// `v1beta1.metrics.k8s.io` APIService (its certificate is self-signed, so not verified, as
/// k3s's).
pub fn metrics_server_objects(node: &str, node_ip: IpAddr, port: u16) -> Vec<Value> {
    let rbac = "rbac.authorization.k8s.io/v1";
    let sa =
        json!([{"kind": "ServiceAccount", "name": "metrics-server", "namespace": "kube-system"}]);
    let role_ref = |kind: &str, name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name});
    let family = if node_ip.is_ipv4() { "IPv4" } else { "IPv6" };
    vec![
        json!({"apiVersion": rbac, "kind": "ClusterRole",
               "metadata": {"name": "system:metrics-server"},
               "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                         {"apiGroups": [""], "resources": ["pods", "nodes"],
                          "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": rbac, "kind": "ClusterRoleBinding",
               "metadata": {"name": "system:metrics-server"},
               "roleRef": role_ref("ClusterRole", "system:metrics-server"), "subjects": sa}),
        json!({"apiVersion": rbac, "kind": "ClusterRoleBinding",
               "metadata": {"name": "metrics-server:system:auth-delegator"},
               "roleRef": role_ref("ClusterRole", "system:auth-delegator"), "subjects": sa}),
        json!({"apiVersion": rbac, "kind": "RoleBinding",
               "metadata": {"name": "metrics-server-auth-reader", "namespace": "kube-system"},
               "roleRef": role_ref("Role", "extension-apiserver-authentication-reader"),
               "subjects": sa}),
        json!({"apiVersion": rbac, "kind": "ClusterRole",
               "metadata": {"name": "system:aggregated-metrics-reader",
                            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true",
                                       "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                                       "rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
               "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"],
                          "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "metrics-server", "namespace": "kube-system",
                            "labels": {"k8s-app": "metrics-server"}},
               "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                   "targetPort": port}]}}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
               "metadata": {"name": format!("metrics-server-{node}"), "namespace": "kube-system",
                            "labels": {"kubernetes.io/service-name": "metrics-server",
                                       "endpointslice.kubernetes.io/managed-by": MANAGER}},
               "addressType": family,
               "endpoints": [{"addresses": [node_ip.to_string()], "nodeName": node,
                              "conditions": {"ready": true}}],
               "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": "v1beta1.metrics.k8s.io",
                            "labels": {"k8s-app": "metrics-server"}},
               "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                        "service": {"namespace": "kube-system", "name": "metrics-server",
                                    "port": 443},
                        "insecureSkipTLSVerify": true,
                        "groupPriorityMinimum": 100, "versionPriority": 100}}),
    ]
}

/// Applies [`metrics_server_objects`].
pub async fn ensure_metrics_server(
    client: &kube::Client,
    node: &str,
    node_ip: IpAddr,
    port: u16,
) -> anyhow::Result<()> {
    apply_manifests(
        client,
        MANAGER,
        &metrics_server_objects(node, node_ip, port),
    )
    .await
}

/// Applies `objects` (manifests of any kind, each naming its `apiVersion` and `kind`)
/// server-side as field manager `manager`, in order.
pub async fn apply_manifests(
    client: &kube::Client,
    manager: &str,
    objects: &[Value],
) -> anyhow::Result<()> {
    for object in objects {
        let (api_version, kind) = (object["apiVersion"].as_str(), object["kind"].as_str());
        let (Some(api_version), Some(kind)) = (api_version, kind) else {
            anyhow::bail!("a manifest without apiVersion or kind");
        };
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
        let resource = kube::core::ApiResource::from_gvk(&gvk);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<kube::core::DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.patch(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(object),
        )
        .await
        .with_context(|| format!("applying {kind} {name}"))?;
    }
    Ok(())
}

/// Publishes what agents take from the server ([`node_config`]): the ConfigMap, and the Role and
/// RoleBinding that let `system:nodes` read it (and only it).
pub async fn publish_node_config(
    client: &kube::Client,
    config: node_config::NodeConfig,
) -> anyhow::Result<()> {
    use node_config::{NAME, NAMESPACE};
    let configmap = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "data": config.to_data(),
    });
    apply(
        Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE),
        NAME,
        configmap,
    )
    .await?;
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NAME],
                   "verbs": ["get"]}],
    });
    apply(
        Api::<Role>::namespaced(client.clone(), NAMESPACE),
        NAME,
        role,
    )
    .await?;
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                      "name": "system:nodes"}],
    });
    apply(
        Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE),
        NAME,
        binding,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_server_is_registered_at_this_nodes_address() {
        let objects = metrics_server_objects("n1", "10.0.0.5".parse().unwrap(), 10251);
        let of = |kind: &str| objects.iter().find(|o| o["kind"] == kind).unwrap();
        let api_service = of("APIService");
        assert_eq!(api_service["metadata"]["name"], "v1beta1.metrics.k8s.io");
        assert_eq!(
            api_service["spec"]["service"],
            json!({"namespace": "kube-system", "name": "metrics-server", "port": 443})
        );
        let slice = of("EndpointSlice");
        assert_eq!(slice["endpoints"][0]["addresses"], json!(["10.0.0.5"]));
        assert_eq!(
            slice["ports"][0],
            json!({"name": "https", "port": 10251, "protocol": "TCP"})
        );
        assert_eq!(of("Service")["spec"]["ports"][0]["targetPort"], 10251);
        // every object parses as its kind
        for o in &objects {
            let _: kube::core::DynamicObject = serde_json::from_value(o.clone()).unwrap();
        }
    }

    #[test]
    fn the_default_ingress_class_is_skiffs() {
        let class: IngressClass = serde_json::from_value(ingress_class()).unwrap();
        assert_eq!(class.metadata.name.as_deref(), Some("skiff"));
        assert_eq!(
            class.spec.unwrap().controller.as_deref(),
            Some("skiff.io/ingress-controller")
        );
        assert_eq!(
            class.metadata.annotations.unwrap()["ingressclass.kubernetes.io/is-default-class"],
            "true"
        );
    }

    #[test]
    fn the_default_class_is_k3s_local_path_with_skiffs_provisioner() {
        let class: StorageClass = serde_json::from_value(local_storage_class()).unwrap();
        assert_eq!(class.metadata.name.as_deref(), Some("local-path"));
        assert_eq!(class.provisioner, "skiff.dev/local-path");
        assert_eq!(
            class.metadata.annotations.unwrap()[ANN_DEFAULT_CLASS],
            "true"
        );
        assert_eq!(
            class.volume_binding_mode.as_deref(),
            Some("WaitForFirstConsumer")
        );
        assert_eq!(class.reclaim_policy.as_deref(), Some("Delete"));
    }
}
