//! The lifecycle controllers of `skiff controller-manager` against a real `skiff apiserver`:
//! namespace deletion, the garbage collector's cascades, node lifecycle and taint eviction,
//! node-ipam, root-ca-cert-publisher and pod-garbage-collector, each seen through the API
//! (and kubectl where users drive it); custom resources among them (collected with and as
//! owners, deleted with their namespace).

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::cluster::controller_manager;
use support::{ApiServer, Backend, eventually, kube_client as client, run};

/// Prints the controller manager's log if the test fails, for diagnosis.
struct LogOnPanic<'a>(&'a ApiServer);

impl Drop for LogOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.0.data_dir.join("controller-manager.log");
            eprintln!("--- controller-manager log ---\n{}", support::read(&log));
        }
    }
}

/// The message of namespace `name`'s `NamespaceFinalizersRemaining` condition, once it is true.
async fn finalizers_remaining(namespaces: &Api<Namespace>, name: &str) -> String {
    eventually("the finalizers-remaining condition", || async {
        let ns = namespaces.get_opt(name).await.ok()??;
        let conditions = ns.status?.conditions?;
        let c = conditions
            .iter()
            .find(|c| c.type_ == "NamespaceFinalizersRemaining" && c.status == "True")?;
        c.message.clone()
    })
    .await
}

fn from<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

async fn create<T>(api: &Api<T>, v: Value) -> T
where
    T: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &from::<T>(v))
        .await
        .expect("create")
}

async fn namespace(client: &kube::Client, name: &str) -> Api<Namespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(&namespaces, json!({"metadata": {"name": name}})).await;
    namespaces
}

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
}

/// The API server's part: `namespaces/{name}/finalize` changes spec.finalizers (and nothing
/// else), and a terminating namespace without finalizers is deleted.
#[test]
fn the_finalize_subresource_lets_a_terminating_namespace_go() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        let namespaces = namespace(&client, "fin").await;
        let mut ns = namespaces.get("fin").await.unwrap();
        ns.spec.as_mut().unwrap().finalizers = Some(vec!["example.com/x".into()]);
        ns.metadata.labels = None;
        let written = namespaces
            .replace_subresource("finalize", "fin", &PostParams::default(), &ns)
            .await
            .unwrap();
        assert_eq!(
            written.spec.unwrap().finalizers,
            Some(vec!["example.com/x".to_string()])
        );
        assert!(
            written
                .metadata
                .labels
                .unwrap()
                .contains_key("kubernetes.io/metadata.name")
        );
        namespaces
            .delete("fin", &DeleteParams::default())
            .await
            .unwrap();
        let mut ns = namespaces.get("fin").await.unwrap();
        ns.spec.as_mut().unwrap().finalizers = Some(vec![]);
        namespaces
            .replace_subresource("finalize", "fin", &PostParams::default(), &ns)
            .await
            .unwrap();
        assert!(namespaces.get_opt("fin").await.unwrap().is_none());
    });
}

#[test]
fn deleting_a_namespace_empties_it_and_it_goes_away() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "namespace"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        let namespaces = namespace(&client, "doomed").await;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
        let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
        create(&configmaps, held).await;
        create(&configmaps, json!({"metadata": {"name": "plain"}})).await;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "doomed");
        create(
            &secrets,
            json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
        )
        .await;
        let services: Api<Service> = Api::namespaced(client.clone(), "doomed");
        create(
            &services,
            json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
        create(&pods, pod("p")).await;

        namespaces
            .delete("doomed", &DeleteParams::default())
            .await
            .unwrap();
        // Everything without a finalizer goes; the held configmap keeps the namespace, and the
        // status says why.
        let message = finalizers_remaining(&namespaces, "doomed").await;
        assert!(
            message.contains("example.com/hold in 1 resource instances"),
            "{message}"
        );
        assert!(pods.get_opt("p").await.unwrap().is_none());
        assert!(secrets.get_opt("s").await.unwrap().is_none());
        assert!(services.get_opt("svc").await.unwrap().is_none());
        assert!(configmaps.get_opt("plain").await.unwrap().is_none());
        let ns = namespaces.get("doomed").await.unwrap();
        assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));

        configmaps
            .patch(
                "held",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        eventually("the namespace is gone", || async {
            namespaces
                .get_opt("doomed")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    });
}

/// A Deployment owning a ReplicaSet owning pods, all created here (no deployment controller):
/// `(name, blockOwnerDeletion, finalizer)` per pod.
async fn deployment_tree(client: &kube::Client, ns: &str, pods: &[(&str, bool, Option<&str>)]) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    let labels = json!({"app": "web"});
    let template = json!({"metadata": {"labels": labels},
                          "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}});
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d = create(
        &deployments,
        json!({"metadata": {"name": "web"},
               "spec": {"selector": {"matchLabels": labels}, "template": template}}),
    )
    .await;
    let owner = |kind: &str, name: &str, uid: &str, block: bool| {
        json!([{"apiVersion": if kind == "Deployment" || kind == "ReplicaSet" { "apps/v1" } else { "v1" },
                "kind": kind, "name": name, "uid": uid, "controller": true,
                "blockOwnerDeletion": block}])
    };
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let rs = create(
        &replicasets,
        json!({"metadata": {"name": "web-1", "ownerReferences":
                              owner("Deployment", "web", &d.metadata.uid.unwrap(), true)},
               "spec": {"selector": {"matchLabels": labels}, "template": template}}),
    )
    .await;
    let rs_uid = rs.metadata.uid.unwrap();
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (name, block, finalizer) in pods {
        let mut p = pod(name);
        p["metadata"]["ownerReferences"] = owner("ReplicaSet", "web-1", &rs_uid, *block);
        p["metadata"]["labels"] = labels.clone();
        if let Some(f) = finalizer {
            p["metadata"]["finalizers"] = json!([f]);
        }
        create(&pod_api, p).await;
    }
}

async fn gone<T>(api: &Api<T>, name: &str) -> Option<()>
where
    T: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.ok()?.is_none().then_some(())
}

async fn drop_finalizers(pods: &Api<Pod>, name: &str) {
    pods.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
}

#[test]
fn kubectl_delete_cascades_in_the_background_and_orphans_on_request() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "garbagecollector"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        namespace(&client, "bg").await;
        deployment_tree(&client, "bg", &[("p-0", true, None), ("p-1", true, None)]).await;
        namespace(&client, "orphan").await;
        deployment_tree(&client, "orphan", &[("p-0", true, None)]).await;

        // background (kubectl's default): the deployment goes at once, then what it owned
        api.kubectl(
            support::KUBECTL_133,
            &["delete", "deployment", "web", "-n", "bg"],
        );
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "bg");
        assert!(deployments.get_opt("web").await.unwrap().is_none());
        let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "bg");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "bg");
        eventually("the replicaset collected", || gone(&replicasets, "web-1")).await;
        eventually("p-0 collected", || gone(&pods, "p-0")).await;
        eventually("p-1 collected", || gone(&pods, "p-1")).await;

        // orphan: the replicaset stays, without its owner reference, and keeps its pods
        let out = api.kubectl(
            support::KUBECTL_133,
            &[
                "delete",
                "deployment",
                "web",
                "-n",
                "orphan",
                "--cascade=orphan",
            ],
        );
        assert!(out.contains("deleted"), "{out}");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "orphan");
        eventually("the orphaning deployment gone", || {
            gone(&deployments, "web")
        })
        .await;
        let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "orphan");
        let rs = replicasets.get("web-1").await.unwrap();
        assert_eq!(rs.metadata.owner_references, None);
        assert!(rs.metadata.deletion_timestamp.is_none());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "orphan");
        let p = pods.get("p-0").await.unwrap();
        assert_eq!(p.metadata.owner_references.unwrap()[0].name, "web-1");
    });
}

#[test]
fn foreground_deletion_keeps_the_owner_until_blocking_dependents_are_gone() {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "garbagecollector"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        namespace(&client, "fg").await;
        let hold = Some("example.com/hold");
        deployment_tree(
            &client,
            "fg",
            &[("blocking", true, hold), ("loose", false, hold)],
        )
        .await;
        api.kubectl(
            support::KUBECTL_133,
            &[
                "delete",
                "deployment",
                "web",
                "-n",
                "fg",
                "--cascade=foreground",
                "--wait=false",
            ],
        );
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), "fg");
        let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "fg");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "fg");
        for name in ["blocking", "loose"] {
            eventually("the pods deleted (held by their finalizer)", || async {
                pods.get(name).await.ok()?.metadata.deletion_timestamp
            })
            .await;
        }
        // Both owners wait, marked for deletion, for the blocking pod.
        let d = deployments.get("web").await.unwrap();
        assert!(d.metadata.deletion_timestamp.is_some());
        assert_eq!(
            d.metadata.finalizers,
            Some(vec!["foregroundDeletion".to_string()])
        );
        let rs = replicasets.get("web-1").await.unwrap();
        assert!(rs.metadata.deletion_timestamp.is_some());

        drop_finalizers(&pods, "blocking").await;
        eventually("the replicaset gone", || gone(&replicasets, "web-1")).await;
        eventually("the deployment gone", || gone(&deployments, "web")).await;
        // The pod without blockOwnerDeletion did not hold its owners.
        assert!(
            pods.get("loose")
                .await
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        );
        drop_finalizers(&pods, "loose").await;
        eventually("the loose pod gone", || gone(&pods, "loose")).await;
    });
}

fn bound_pod(name: &str, node: &str, toleration_seconds: Option<i64>) -> Value {
    let mut toleration = json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                                "effect": "NoExecute"});
    if let Some(s) = toleration_seconds {
        toleration["tolerationSeconds"] = json!(s);
    }
    json!({"metadata": {"name": name},
           "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                    "tolerations": [toleration],
                    "containers": [{"name": "c", "image": "busybox:1.36"}]}})
}

fn pod_ready(p: &Pod) -> Option<String> {
    let conditions = p.status.as_ref()?.conditions.as_ref()?;
    Some(
        conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .status
            .clone(),
    )
}

#[test]
fn an_expired_node_lease_taints_the_node_and_evicts_its_pods() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::events::v1::Event;
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let mut hollow = support::cluster::hollow_nodes(&api, "edge", 1);
        // A node that stays Ready: with every node down the controller would take the outage
        // for its own and taint none (upstream's full disruption).
        let _calm = support::cluster::hollow_nodes(&api, "calm", 1);
        let cm = controller_manager(
            &api,
            &[
                "--controllers",
                "nodelifecycle,taint-eviction-controller",
                "--node-monitor-grace-period",
                "15s",
                "--node-monitor-period",
                "1s",
            ],
        );
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        create(&pods, bound_pod("quick", "edge-0", Some(2))).await;
        create(&pods, bound_pod("stays", "edge-0", None)).await;
        for name in ["quick", "stays"] {
            eventually("the pod ready on the hollow node", || async {
                let p = pods.get(name).await.ok()?;
                (pod_ready(&p)? == "True").then_some(())
            })
            .await;
        }
        // DefaultTolerationSeconds added the not-ready toleration the pods lacked.
        let stays = pods.get("stays").await.unwrap();
        let tolerations = stays.spec.unwrap().tolerations.unwrap();
        let not_ready = tolerations
            .iter()
            .find(|t| t.key.as_deref() == Some("node.kubernetes.io/not-ready"))
            .expect("the default not-ready toleration");
        assert_eq!(not_ready.toleration_seconds, Some(300));
        let node = nodes.get("edge-0").await.unwrap();
        assert!(node.spec.unwrap().taints.unwrap_or_default().is_empty());

        hollow.kill();
        let taints = eventually("the unreachable taints", || async {
            let node = nodes.get("edge-0").await.ok()?;
            let taints = node.spec?.taints?;
            let keys: Vec<String> = taints
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect();
            (keys.len() == 2).then_some(keys)
        })
        .await;
        assert!(taints.contains(&"node.kubernetes.io/unreachable:NoExecute".to_string()));
        assert!(taints.contains(&"node.kubernetes.io/unreachable:NoSchedule".to_string()));
        let node = nodes.get("edge-0").await.unwrap();
        let conditions = node.status.unwrap().conditions.unwrap();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            ready.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );

        // one of two nodes down: the zone is normal, and the taint was its one eviction
        let metrics_addr = cm.address_after("metrics http://");
        let text = support::http_get(&metrics_addr, "/metrics");
        for series in [
            "node_collector_evictions_total{zone=\"\"} 1",
            "node_collector_zone_size{zone=\"\"} 2",
            "node_collector_unhealthy_nodes_in_zone{zone=\"\"} 1",
            "node_collector_zone_health{zone=\"\"} 50.0",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
        eventually("the pod tolerating 2 s evicted", || gone(&pods, "quick")).await;
        let node_events: Api<Event> = Api::all(client.clone());
        eventually("the NodeNotReady event", || async {
            let list = node_events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("NodeNotReady")
                        && e.reporting_controller.as_deref() == Some("node-controller")
                        && e.note.as_deref() == Some("Node edge-0 status is now: NodeNotReady")
                })
                .map(|_| ())
        })
        .await;
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually("the TaintManagerEviction event", || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("TaintManagerEviction")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("quick")
                })
                .map(|_| ())
        })
        .await;
        // The pod tolerating the taint forever stays, marked not Ready.
        let stays = eventually("the remaining pod marked not ready", || async {
            let p = pods.get("stays").await.ok()?;
            (pod_ready(&p)? == "False").then_some(p)
        })
        .await;
        assert!(stays.metadata.deletion_timestamp.is_none());
    });
}

#[test]
fn node_ipam_gives_each_node_its_own_range_and_every_namespace_gets_the_root_ca() {
    use k8s_openapi::api::core::v1::Node;
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        let nodes: Api<Node> = Api::all(client.clone());
        // one node already has a range: it is kept and never handed out again
        create(
            &nodes,
            json!({"metadata": {"name": "n-old"},
                   "spec": {"podCIDR": "10.42.0.0/24", "podCIDRs": ["10.42.0.0/24"]}}),
        )
        .await;
        let _cm = controller_manager(&api, &["--controllers", "nodeipam,root-ca-cert-publisher"]);
        let _log = LogOnPanic(&api);
        for name in ["n-a", "n-b", "n-c"] {
            create(&nodes, json!({"metadata": {"name": name}})).await;
        }
        let mut seen = Vec::new();
        for name in ["n-old", "n-a", "n-b", "n-c"] {
            let spec = eventually("a pod range", || async {
                let spec = nodes.get(name).await.ok()?.spec?;
                spec.pod_cidr.is_some().then_some(spec)
            })
            .await;
            let cidr = spec.pod_cidr.unwrap();
            assert_eq!(spec.pod_cidrs, Some(vec![cidr.clone()]));
            assert!(
                cidr.starts_with("10.42.") && cidr.ends_with(".0/24"),
                "{cidr}"
            );
            assert!(!seen.contains(&cidr), "{cidr} handed out twice");
            seen.push(cidr);
        }
        assert_eq!(seen[0], "10.42.0.0/24");

        // kube-root-ca.crt: in a new namespace, with the kubeconfig's CA; restored when edited
        let kubeconfig = support::read(&api.kubeconfig());
        namespace(&client, "fresh").await;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "fresh");
        let ca = eventually("kube-root-ca.crt", || async {
            let cm = configmaps.get_opt("kube-root-ca.crt").await.ok()??;
            cm.data?.get("ca.crt").cloned()
        })
        .await;
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
        assert!(kubeconfig.contains("certificate-authority-data"));
        configmaps
            .patch(
                "kube-root-ca.crt",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"ca.crt": "junk"}})),
            )
            .await
            .unwrap();
        eventually("kube-root-ca.crt restored", || async {
            let cm = configmaps.get("kube-root-ca.crt").await.ok()?;
            (cm.data?.get("ca.crt")? == &ca).then_some(())
        })
        .await;
    });
}

#[test]
fn terminated_pods_over_the_threshold_are_collected_oldest_first() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        for name in ["t-0", "t-1", "t-2"] {
            create(&pods, pod(name)).await;
            pods.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
            )
            .await
            .unwrap();
        }
        create(&pods, pod("running")).await;
        let _cm = controller_manager(
            &api,
            &[
                "--controllers",
                "podgc",
                "--terminated-pod-gc-threshold",
                "1",
            ],
        );
        let _log = LogOnPanic(&api);
        eventually("t-0 collected", || gone(&pods, "t-0")).await;
        eventually("t-1 collected", || gone(&pods, "t-1")).await;
        assert!(
            pods.get_opt("t-2").await.unwrap().is_some(),
            "the newest is kept"
        );
        assert!(pods.get_opt("running").await.unwrap().is_some());
    });
}

/// Widgets in `ns` (a dynamic client: the type is a custom resource).
fn widgets(client: &kube::Client, ns: &str) -> Api<kube::api::DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &support::crd::widget_resource())
}

fn widget(name: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name},
           "spec": {"color": "blue"}})
}

/// An ownerReferences list naming one owner.
fn owned_by(api_version: &str, kind: &str, name: &str, uid: Option<String>) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid.unwrap(),
            "blockOwnerDeletion": true}])
}

#[test]
fn the_garbage_collector_follows_owners_to_and_from_custom_resources() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "garbagecollector"]);
        let _log = LogOnPanic(&api);
        // the type is defined after the collector started: its rediscovery must find it
        support::crd::install_widgets(&api);
        let client = client(&api).await;
        namespace(&client, "gc").await;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "gc");
        let widgets = widgets(&client, "gc");

        // A custom resource owned by a ConfigMap goes with it (background).
        let owner = create(&configmaps, json!({"metadata": {"name": "owner"}})).await;
        let mut owned = widget("owned");
        owned["metadata"]["ownerReferences"] =
            owned_by("v1", "ConfigMap", "owner", owner.metadata.uid);
        create(&widgets, owned).await;
        configmaps
            .delete("owner", &DeleteParams::background())
            .await
            .unwrap();
        eventually("the owned widget collected", || gone(&widgets, "owned")).await;

        // A ConfigMap owned by a custom resource goes with it (background).
        let parent = create(&widgets, widget("parent")).await;
        let mut child = json!({"metadata": {"name": "child"}});
        child["metadata"]["ownerReferences"] =
            owned_by("example.com/v1", "Widget", "parent", parent.metadata.uid);
        create(&configmaps, child).await;
        widgets
            .delete("parent", &DeleteParams::background())
            .await
            .unwrap();
        eventually("the child configmap collected", || {
            gone(&configmaps, "child")
        })
        .await;

        // Foreground: the custom resource waits, marked for deletion with the
        // `foregroundDeletion` finalizer, until its blocking dependent is gone.
        let held = create(&widgets, widget("held")).await;
        let mut blocking = json!({"metadata": {"name": "blocking",
                                               "finalizers": ["example.com/hold"]}});
        blocking["metadata"]["ownerReferences"] =
            owned_by("example.com/v1", "Widget", "held", held.metadata.uid);
        create(&configmaps, blocking).await;
        widgets
            .delete("held", &DeleteParams::foreground())
            .await
            .unwrap();
        let w = widgets.get("held").await.unwrap();
        assert!(w.metadata.deletion_timestamp.is_some());
        assert_eq!(
            w.metadata.finalizers,
            Some(vec!["foregroundDeletion".to_string()])
        );
        eventually("the blocking configmap deleted", || async {
            configmaps
                .get("blocking")
                .await
                .ok()?
                .metadata
                .deletion_timestamp
        })
        .await;
        assert!(widgets.get_opt("held").await.unwrap().is_some());
        configmaps
            .patch(
                "blocking",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        eventually("the blocking configmap gone", || {
            gone(&configmaps, "blocking")
        })
        .await;
        eventually("the foreground widget gone", || gone(&widgets, "held")).await;

        // Orphan: the custom resource goes, its dependent stays without the reference.
        let keeper = create(&widgets, widget("keeper")).await;
        let mut kept = json!({"metadata": {"name": "kept"}});
        kept["metadata"]["ownerReferences"] =
            owned_by("example.com/v1", "Widget", "keeper", keeper.metadata.uid);
        create(&configmaps, kept).await;
        widgets
            .delete("keeper", &DeleteParams::orphan())
            .await
            .unwrap();
        eventually("the orphaning widget gone", || gone(&widgets, "keeper")).await;
        let kept = configmaps.get("kept").await.unwrap();
        assert_eq!(kept.metadata.owner_references, None);
        assert!(kept.metadata.deletion_timestamp.is_none());
    });
}

#[test]
fn deleting_a_namespace_deletes_its_custom_resources() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "namespace"]);
        let _log = LogOnPanic(&api);
        support::crd::install_widgets(&api);
        let client = client(&api).await;
        let namespaces = namespace(&client, "crs").await;
        let widgets = widgets(&client, "crs");
        create(&widgets, widget("plain")).await;
        let mut held = widget("held");
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        create(&widgets, held).await;

        namespaces
            .delete("crs", &DeleteParams::default())
            .await
            .unwrap();
        let message = finalizers_remaining(&namespaces, "crs").await;
        assert!(
            message.contains("example.com/hold in 1 resource instances"),
            "{message}"
        );
        assert!(widgets.get_opt("plain").await.unwrap().is_none());
        let w = widgets.get("held").await.unwrap();
        assert!(w.metadata.deletion_timestamp.is_some());

        widgets
            .patch(
                "held",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        eventually("the namespace is gone", || gone(&namespaces, "crs")).await;
    });
}
