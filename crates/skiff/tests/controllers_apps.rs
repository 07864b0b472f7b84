//! The `endpoints`, `endpointslice`, `daemonset` and `statefulset` controllers of `skiff
//! controller-manager` against a real `skiff apiserver`, with the scheduler and hollow nodes
//! running the pods (seed 001: Service traffic follows pod readiness through Endpoints and
//! EndpointSlices; a StatefulSet adopts an orphan pod and its pods mount their claims on hollow
//! nodes). The garbage collector runs only for the StatefulSet claim retention test, which is
//! about what it deletes.

mod support;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Endpoints, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::cluster::{controller_manager, hollow_nodes, scheduler};
use support::{ApiServer, Backend, KUBECTL_133, eventually, kube_client, run};

const CONTROLLERS: &[&str] = &[
    "--controllers",
    "endpoints,endpointslice,daemonset,statefulset,persistentvolume-binder",
];

/// The StatefulSet's and what deletes its claims: the garbage collector, and the claim protection
/// that lets a claim go once no pod uses it.
const RETENTION_CONTROLLERS: &[&str] = &[
    "--controllers",
    "statefulset,persistentvolume-binder,garbagecollector,pvc-protection",
];

/// A pod labelled `app: web` whose container names `port_name` 8080; with `gated`, it stays
/// unready until its `example.com/gate` condition is set True.
fn web_pod(name: &str, port_name: &str, gated: bool) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.10",
            "ports": [{"name": port_name, "containerPort": 8080}]}]},
    });
    if gated {
        pod["spec"]["readinessGates"] = json!([{"conditionType": "example.com/gate"}]);
    }
    serde_json::from_value(pod).unwrap()
}

fn web_service(name: &str, publish_not_ready: bool) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": "web"}, "publishNotReadyAddresses": publish_not_ready,
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .unwrap()
}

/// The ready and not-ready address IPs of an Endpoints object, each sorted.
fn addresses(e: &Endpoints) -> (Vec<String>, Vec<String>) {
    let mut ready = vec![];
    let mut not_ready = vec![];
    for s in e.subsets.iter().flatten() {
        ready.extend(s.addresses.iter().flatten().map(|a| a.ip.clone()));
        not_ready.extend(s.not_ready_addresses.iter().flatten().map(|a| a.ip.clone()));
    }
    ready.sort();
    not_ready.sort();
    (ready, not_ready)
}

/// Each endpoint of the Service's slices that have ports as (pod, ready, serving, zone),
/// sorted. (A pod that resolves none of the Service's ports is listed in a slice without
/// ports, as upstream does.)
async fn slice_endpoints(
    slices: &Api<EndpointSlice>,
    service: &str,
) -> Option<Vec<(String, bool, bool, Option<String>)>> {
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let list = slices.list(&lp).await.ok()?;
    let mut out = vec![];
    for s in &list.items {
        assert_eq!(
            s.metadata.labels.as_ref()?["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert!(
            s.metadata
                .name
                .as_ref()?
                .starts_with(&format!("{service}-"))
        );
        assert_eq!(s.metadata.owner_references.as_ref()?[0].name, service);
        if s.ports.as_ref().is_none_or(|p| p.is_empty()) {
            continue;
        }
        for e in &s.endpoints {
            let c = e.conditions.clone()?;
            out.push((
                e.target_ref.as_ref()?.name.clone()?,
                c.ready?,
                c.serving?,
                e.zone.clone(),
            ));
        }
    }
    out.sort();
    Some(out)
}

async fn pod_ip(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("pod {name} has an IP"), || async {
        pods.get(name).await.ok()?.status?.pod_ip
    })
    .await
}

#[test]
fn endpoints_follow_pod_readiness_named_ports_and_deletion() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "ep", 2);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, CONTROLLERS);
        let client = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let services: Api<Service> = Api::namespaced(client.clone(), "default");
        let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), "default");
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();

        // every node in zone-a: endpoints carry their node's zone
        let nodes: Api<Node> = Api::all(client.clone());
        for name in ["ep-0", "ep-1"] {
            eventually(&format!("node {name}"), || async {
                nodes.get_opt(name).await.ok()?
            })
            .await;
            let zone = json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "zone-a"}}});
            nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&zone))
                .await
                .unwrap();
        }
        let zone = Some("zone-a".to_string());

        services
            .create(&pp, &web_service("web", false))
            .await
            .unwrap();
        services
            .create(&pp, &web_service("web-all", true))
            .await
            .unwrap();
        pods.create(&pp, &web_pod("gated", "http", true))
            .await
            .unwrap();
        pods.create(&pp, &web_pod("plain", "http", false))
            .await
            .unwrap();
        // its container has no port named `http`: no endpoint for the `http` port
        pods.create(&pp, &web_pod("unnamed", "other", false))
            .await
            .unwrap();
        let gated = pod_ip(&pods, "gated").await;
        let plain = pod_ip(&pods, "plain").await;
        pod_ip(&pods, "unnamed").await;

        eventually("web: plain ready, gated not ready", || async {
            let e = endpoints.get_opt("web").await.ok()??;
            (addresses(&e) == (vec![plain.clone()], vec![gated.clone()])).then_some(())
        })
        .await;
        let e = endpoints.get("web").await.unwrap();
        let subset = &e.subsets.as_ref().unwrap()[0];
        let port = &subset.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), 8080));
        let address = &subset.addresses.as_ref().unwrap()[0];
        assert_eq!(
            address.target_ref.as_ref().unwrap().name.as_deref(),
            Some("plain")
        );
        assert!(address.node_name.as_deref().unwrap().starts_with("ep-"));
        assert!(
            e.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key("endpoints.kubernetes.io/last-change-trigger-time"),
            "{e:?}"
        );
        eventually("web's slice: plain ready, gated not", || async {
            let got = slice_endpoints(&slices, "web").await?;
            let want = vec![
                ("gated".to_string(), false, false, zone.clone()),
                ("plain".to_string(), true, true, zone.clone()),
            ];
            (got == want).then_some(())
        })
        .await;
        // the pod without an `http` port is listed in a slice without ports, as upstream does
        eventually("web's portless slice lists unnamed", || async {
            let lp = ListParams::default().labels("kubernetes.io/service-name=web");
            let list = slices.list(&lp).await.ok()?.items;
            let portless: Vec<&EndpointSlice> = list
                .iter()
                .filter(|s| s.ports.as_ref().is_none_or(|p| p.is_empty()))
                .collect();
            let names: Vec<String> = portless
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .filter_map(|e| e.target_ref.as_ref()?.name.clone())
                .collect();
            (portless.len() == 1 && names == ["unnamed"]).then_some(())
        })
        .await;
        // publishNotReadyAddresses: both in addresses
        let mut both = vec![gated.clone(), plain.clone()];
        both.sort();
        eventually("web-all: both pods as addresses", || async {
            let e = endpoints.get_opt("web-all").await.ok()??;
            (addresses(&e) == (both.clone(), vec![])).then_some(())
        })
        .await;

        // the readiness gate opens: the kubelet makes the pod Ready, the endpoints follow
        let gate = json!({"status": {"conditions": [
            {"type": "example.com/gate", "status": "True"}]}});
        pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(&gate))
            .await
            .unwrap();
        eventually("web: both ready", || async {
            let e = endpoints.get_opt("web").await.ok()??;
            (addresses(&e) == (both.clone(), vec![])).then_some(())
        })
        .await;

        eventually("web's slice: both ready", || async {
            let got = slice_endpoints(&slices, "web").await?;
            (got.iter().filter(|e| e.1 && e.2).count() == 2).then_some(())
        })
        .await;
        let table = api.kubectl(KUBECTL_133, &["get", "endpoints", "web"]);
        assert!(table.contains(&format!("{gated}:8080")), "{table}");
        // kubectl 1.33 describes a Service's endpoints from its EndpointSlices
        let described = api.kubectl(KUBECTL_133, &["describe", "service", "web"]);
        assert!(described.contains(&format!("{plain}:8080")), "{described}");
        assert!(described.contains(&format!("{gated}:8080")), "{described}");

        // a deleted pod leaves at once (terminating pods are skipped)
        pods.delete("plain", &DeleteParams::default())
            .await
            .unwrap();
        eventually("web: only gated", || async {
            let e = endpoints.get_opt("web").await.ok()??;
            (addresses(&e) == (vec![gated.clone()], vec![])).then_some(())
        })
        .await;

        eventually("web's slice: only gated", || async {
            let got = slice_endpoints(&slices, "web").await?;
            (got == vec![("gated".to_string(), true, true, zone.clone())]).then_some(())
        })
        .await;

        // a Service without selector keeps the Endpoints its owner writes
        let manual: Service = serde_json::from_value(json!({
            "metadata": {"name": "manual"}, "spec": {"ports": [{"port": 80}]}}))
        .unwrap();
        services.create(&pp, &manual).await.unwrap();
        let mine: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "manual"},
            "subsets": [{"addresses": [{"ip": "192.0.2.1"}], "ports": [{"port": 80}]}]}))
        .unwrap();
        endpoints.create(&pp, &mine).await.unwrap();

        // the Endpoints of a deleted Service go
        services
            .delete("web", &DeleteParams::default())
            .await
            .unwrap();
        eventually("web's endpoints deleted", || async {
            endpoints.get_opt("web").await.ok()?.is_none().then_some(())
        })
        .await;
        let kept = endpoints.get("manual").await.unwrap();
        assert_eq!(addresses(&kept).0, vec!["192.0.2.1"]);
    });
}

/// `role=worker` on a node (or off, with `None`).
async fn set_role(nodes: &Api<Node>, name: &str, role: Option<&str>) {
    let patch = json!({"metadata": {"labels": {"role": role}}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The daemon pods (not terminating) by node, with their revision hash.
async fn daemon_pods(pods: &Api<Pod>) -> Option<Vec<(String, String)>> {
    let list = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .ok()?;
    let mut out: Vec<(String, String)> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let hash = p.metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone();
            (node, hash)
        })
        .collect();
    out.sort();
    Some(out)
}

#[test]
fn a_daemonset_runs_one_pod_per_matching_node_follows_nodes_and_rolls_out() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "ds", 3);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, CONTROLLERS);
        let client = kube_client(&api).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "default");
        for name in ["ds-0", "ds-1", "ds-2"] {
            eventually(&format!("node {name}"), || async {
                nodes.get_opt(name).await.ok()?
            })
            .await;
        }
        set_role(&nodes, "ds-0", Some("worker")).await;
        set_role(&nodes, "ds-1", Some("worker")).await;

        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {
                    "nodeSelector": {"role": "worker"}, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}]}}}}))
        .unwrap();
        daemonsets
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();

        let first = eventually("a pod on ds-0 and ds-1", || async {
            let got = daemon_pods(&pods).await?;
            let nodes: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
            (nodes == ["ds-0", "ds-1"]).then(|| got[0].1.clone())
        })
        .await;
        let out = api.kubectl(
            KUBECTL_133,
            &["rollout", "status", "daemonset/agent", "--timeout=60s"],
        );
        assert!(out.contains("successfully rolled out"), "{out}");
        let status = daemonsets.get("agent").await.unwrap().status.unwrap();
        assert_eq!(
            (
                status.desired_number_scheduled,
                status.current_number_scheduled,
                status.number_ready
            ),
            (2, 2, 2)
        );
        assert_eq!(status.observed_generation, Some(1));
        // the pod is pinned by node affinity on metadata.name and tolerates what daemons do
        let pod = &pods
            .list(&ListParams::default().labels("app=agent"))
            .await
            .unwrap()
            .items[0];
        let spec = pod.spec.as_ref().unwrap();
        let terms = &spec
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()
            .node_selector_terms;
        assert_eq!(
            terms[0].match_fields.as_ref().unwrap()[0].key,
            "metadata.name"
        );
        assert!(
            spec.tolerations
                .as_ref()
                .unwrap()
                .iter()
                .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"))
        );

        // a node that starts matching gets a pod; one that stops matching loses it
        set_role(&nodes, "ds-2", Some("worker")).await;
        set_role(&nodes, "ds-0", None).await;
        eventually("pods on ds-1 and ds-2 only", || async {
            let got = daemon_pods(&pods).await?;
            let nodes: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
            (nodes == ["ds-1", "ds-2"]).then_some(())
        })
        .await;

        // a new template rolls out to every pod, one node at a time
        let image = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "agent", "image": "registry.k8s.io/pause:3.9"}]}}}});
        daemonsets
            .patch("agent", &PatchParams::default(), &Patch::Strategic(&image))
            .await
            .unwrap();
        let out = api.kubectl(
            KUBECTL_133,
            &["rollout", "status", "daemonset/agent", "--timeout=60s"],
        );
        assert!(out.contains("successfully rolled out"), "{out}");
        let got = eventually("every pod at the new revision", || async {
            let got = daemon_pods(&pods).await?;
            (got.len() == 2 && got.iter().all(|(_, h)| *h != first)).then_some(got)
        })
        .await;
        let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), "default");
        let list = revisions.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(list.len(), 2, "{list:?}");
        let newest = list.iter().max_by_key(|r| r.revision).unwrap();
        assert_eq!(
            newest.metadata.labels.as_ref().unwrap()["controller-revision-hash"],
            got[0].1
        );
        eventually("status: 2 updated, generation 2 observed", || async {
            let status = daemonsets.get("agent").await.ok()?.status?;
            (status.updated_number_scheduled == Some(2)
                && status.number_available == Some(2)
                && status.observed_generation == Some(2))
            .then_some(())
        })
        .await;
    });
}

/// Opens the `example.com/gate` readiness gate of a pod.
async fn open_gate(pods: &Api<Pod>, name: &str) {
    let gate = json!({"status": {"conditions": [{"type": "example.com/gate", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&gate))
        .await
        .unwrap();
}

/// The pod, once it exists, is not terminating, runs and (with `hash`) is at that revision.
async fn running_pod(pods: &Api<Pod>, name: &str, hash: Option<&str>) -> Pod {
    eventually(&format!("{name} running at {hash:?}"), || async {
        let p = pods.get_opt(name).await.ok()??;
        let running = p.status.as_ref()?.phase.as_deref() == Some("Running");
        let at = hash
            .is_none_or(|h| p.metadata.labels.as_ref().unwrap()["controller-revision-hash"] == h);
        (running && at && p.metadata.deletion_timestamp.is_none()).then_some(p)
    })
    .await
}

#[test]
fn a_statefulset_creates_in_order_rolls_out_from_the_top_and_scales_down_from_the_top() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "sts", 2);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, CONTROLLERS);
        let client = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
        // an orphan with the set's labels and its first pod's name: adopted, not created again
        let orphan: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db-0", "labels": {"app": "db"}},
            "spec": {"terminationGracePeriodSeconds": 0,
                "readinessGates": [{"conditionType": "example.com/gate"}],
                "containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10"}]}}))
        .unwrap();
        let orphan = pods.create(&PostParams::default(), &orphan).await.unwrap();
        // pods stay unready until the test opens their readiness gate
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "db"},
            "spec": {"replicas": 3, "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "readinessGates": [{"conditionType": "example.com/gate"}],
                    "containers": [{"name": "db", "image": "registry.k8s.io/pause:3.10",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data",
                        "labels": {"tier": "storage"}},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}]}}))
        .unwrap();
        // a volume for each claim: a pod whose claim is unbound is not scheduled (VolumeBinding)
        let volumes: Api<PersistentVolume> = Api::all(client.clone());
        for n in 0..3 {
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": format!("sts-pv-{n}")},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "hostPath": {"path": format!("/tmp/skiff-sts-pv-{n}")}}}))
            .unwrap();
            volumes.create(&PostParams::default(), &pv).await.unwrap();
        }
        let set = sets.create(&PostParams::default(), &set).await.unwrap();
        let set_uid = set.metadata.uid.clone().unwrap();
        let adopted = eventually("db-0 adopted", || async {
            let p = pods.get_opt("db-0").await.ok()??;
            let owners = p.metadata.owner_references.clone()?;
            owners
                .iter()
                .any(|o| o.uid == set_uid && o.controller == Some(true))
                .then_some(p)
        })
        .await;
        assert_eq!(
            adopted.metadata.uid, orphan.metadata.uid,
            "db-0 was replaced"
        );

        for n in 0..3 {
            let name = format!("db-{n}");
            let pod = running_pod(&pods, &name, None).await;
            // OrderedReady: the next one waits for this one to be Ready
            let next = format!("db-{}", n + 1);
            assert!(
                pods.get_opt(&next).await.unwrap().is_none(),
                "{next} before {name} was Ready"
            );
            if n == 0 {
                // the adopted orphan keeps its own spec (and has no claim volume)
                assert_eq!(pod.metadata.uid, orphan.metadata.uid);
                open_gate(&pods, &name).await;
                continue;
            }
            // its claim exists, labelled from the template and the selector, and is mounted
            let claim = claims.get(&format!("data-{name}")).await.unwrap();
            let labels = claim.metadata.labels.clone().unwrap();
            assert_eq!(
                (labels["app"].as_str(), labels["tier"].as_str()),
                ("db", "storage")
            );
            let volumes = pod.spec.as_ref().unwrap().volumes.clone().unwrap();
            let volume = volumes.iter().find(|v| v.name == "data").unwrap();
            assert_eq!(
                volume.persistent_volume_claim.as_ref().unwrap().claim_name,
                format!("data-{name}")
            );
            let labels = pod.metadata.labels.as_ref().unwrap();
            assert_eq!(labels["statefulset.kubernetes.io/pod-name"], name);
            assert_eq!(labels["apps.kubernetes.io/pod-index"], n.to_string());
            let spec = pod.spec.as_ref().unwrap();
            assert_eq!(spec.hostname.as_deref(), Some(name.as_str()));
            assert_eq!(spec.subdomain.as_deref(), Some("db"));
            open_gate(&pods, &name).await;
        }
        // the adopted db-0 is not at the set's revision: once all are Ready it is replaced
        // (from the template, with its claim)
        let replaced = eventually("db-0 replaced at the set's revision", || async {
            let p = pods.get_opt("db-0").await.ok()??;
            let labels = p.metadata.labels.clone()?;
            (p.metadata.uid != orphan.metadata.uid
                && labels.contains_key("controller-revision-hash")
                && p.status.as_ref()?.phase.as_deref() == Some("Running"))
            .then_some(p)
        })
        .await;
        let volumes = replaced.spec.unwrap().volumes.unwrap();
        assert!(volumes.iter().any(|v| v.name == "data"), "{volumes:?}");
        open_gate(&pods, "db-0").await;
        let out = api.kubectl(
            KUBECTL_133,
            &["rollout", "status", "statefulset/db", "--timeout=60s"],
        );
        assert!(out.contains("complete"), "{out}");
        // one claim per pod, none owned by the set (retention policy Retain by default)
        for n in 0..3 {
            let claim = claims.get(&format!("data-db-{n}")).await.unwrap();
            assert_eq!(claim.metadata.owner_references, None, "data-db-{n}");
        }
        let status = sets.get("db").await.unwrap().status.unwrap();
        assert_eq!((status.replicas, status.ready_replicas), (3, Some(3)));
        let first = status.update_revision.clone().unwrap();
        assert_eq!(status.current_revision.as_deref(), Some(first.as_str()));

        // a new template: replaced from db-2 down, each waiting for the one above to be Ready
        let image = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "db", "image": "registry.k8s.io/pause:3.9"}]}}}});
        sets.patch("db", &PatchParams::default(), &Patch::Strategic(&image))
            .await
            .unwrap();
        let update = eventually("a new update revision", || async {
            let s = sets.get("db").await.ok()?.status?;
            s.update_revision.filter(|r| *r != first)
        })
        .await;
        // pods are labelled with their revision's name, as the status names it (upstream's)
        assert!(update.starts_with("db-"), "{update}");
        for n in (0..3).rev() {
            let name = format!("db-{n}");
            running_pod(&pods, &name, Some(&update)).await;
            if n > 0 {
                let below = pods.get(&format!("db-{}", n - 1)).await.unwrap();
                let labels = below.metadata.labels.unwrap();
                assert_eq!(labels["controller-revision-hash"], first);
            }
            open_gate(&pods, &name).await;
        }
        let out = api.kubectl(
            KUBECTL_133,
            &["rollout", "status", "statefulset/db", "--timeout=60s"],
        );
        assert!(out.contains("complete"), "{out}");
        eventually("current revision is the update", || async {
            let s = sets.get("db").await.ok()?.status?;
            (s.current_revision == Some(update.clone()) && s.updated_replicas == Some(3))
                .then_some(())
        })
        .await;

        // scale down: db-2 goes first, then db-1
        let scale = json!({"spec": {"replicas": 1}});
        sets.patch("db", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .unwrap();
        eventually("db-2 gone", || async {
            pods.get_opt("db-2").await.ok()?.is_none().then_some(())
        })
        .await;
        eventually("only db-0 left", || async {
            let list = pods
                .list(&ListParams::default().labels("app=db"))
                .await
                .ok()?;
            let names: Vec<String> = list
                .items
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            (names == ["db-0"]).then_some(())
        })
        .await;
        eventually("status replicas 1", || async {
            let s = sets.get("db").await.ok()?.status?;
            (s.replicas == 1).then_some(())
        })
        .await;
    });
}

/// Hostpath volumes `<prefix>-0 … <prefix>-(n-1)` of class "" for a set's claims to bind to.
async fn claim_volumes(client: &kube::Client, prefix: &str, n: usize) {
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for i in 0..n {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": format!("{prefix}-{i}")},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "hostPath": {"path": format!("/tmp/skiff-{prefix}-{i}")}}}))
        .unwrap();
        volumes.create(&PostParams::default(), &pv).await.unwrap();
    }
}

#[test]
fn a_statefulset_waits_for_available_pods_and_its_claims_follow_the_retention_policy() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _nodes = hollow_nodes(&api, "kv", 2);
        let _scheduler = scheduler(&api);
        let _cm = controller_manager(&api, RETENTION_CONTROLLERS);
        let client = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
        // one volume more than the pods: the claim made again after a scale-down needs one
        claim_volumes(&client, "kv-pv", 4).await;
        // Parallel, two pods at a time in a rollout, each available a second after Ready;
        // claims of scaled-away pods go, claims outlive the set
        let set: StatefulSet = serde_json::from_value(json!({
            "metadata": {"name": "kv"},
            "spec": {"replicas": 3, "serviceName": "kv", "minReadySeconds": 1,
                "podManagementPolicy": "Parallel",
                "updateStrategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 2}},
                "persistentVolumeClaimRetentionPolicy":
                    {"whenDeleted": "Retain", "whenScaled": "Delete"},
                "selector": {"matchLabels": {"app": "kv"}},
                "template": {"metadata": {"labels": {"app": "kv"}}, "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "kv", "image": "registry.k8s.io/pause:3.10",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}]}}))
        .unwrap();
        sets.create(&PostParams::default(), &set).await.unwrap();
        // nothing but the passing of minReadySeconds changes once the pods are Ready: the
        // controller looks again by itself
        let status = eventually("three available replicas", || async {
            let s = sets.get("kv").await.ok()?.status?;
            (s.available_replicas == Some(3)).then_some(s)
        })
        .await;
        assert_eq!(status.ready_replicas, Some(3));
        for n in 0..3 {
            let claim = claims.get(&format!("data-kv-{n}")).await.unwrap();
            assert_eq!(claim.metadata.owner_references, None, "data-kv-{n}");
        }
        // each claim's creation is an event of the set, in upstream's words
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually("the claim creation event", || async {
            let list = events.list(&Default::default()).await.ok()?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("SuccessfulCreate")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("kv")
                        && e.note.as_deref()
                            == Some("create Claim data-kv-0 Pod kv-0 in StatefulSet kv success")
                })
                .map(|_| ())
        })
        .await;

        // a rollout with maxUnavailable 2 completes, waiting for availability
        let image = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "kv", "image": "registry.k8s.io/pause:3.9"}]}}}});
        sets.patch("kv", &PatchParams::default(), &Patch::Strategic(&image))
            .await
            .unwrap();
        eventually("the rollout complete and available", || async {
            let s = sets.get("kv").await.ok()?.status?;
            let done = s.update_revision.is_some()
                && s.current_revision == s.update_revision
                && s.updated_replicas == Some(3)
                && s.available_replicas == Some(3)
                && s.current_revision != status.current_revision;
            done.then_some(())
        })
        .await;
        let list = pods
            .list(&ListParams::default().labels("app=kv"))
            .await
            .unwrap();
        for p in &list.items {
            let image = &p.spec.as_ref().unwrap().containers[0].image;
            assert_eq!(image.as_deref(), Some("registry.k8s.io/pause:3.9"));
        }

        // scale down: the claims of kv-1 and kv-2 are handed to their pods and collected
        let scale = json!({"spec": {"replicas": 1}});
        sets.patch("kv", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .unwrap();
        eventually("the scaled-away claims collected", || async {
            let list = claims.list(&ListParams::default()).await.ok()?;
            let names: Vec<String> = list.items.iter().map(|c| c.name_any()).collect();
            (names == ["data-kv-0"]).then_some(())
        })
        .await;
        let kept = claims.get("data-kv-0").await.unwrap();
        assert_eq!(kept.metadata.owner_references, None);
        assert!(pods.get_opt("kv-1").await.unwrap().is_none());

        // scale up again: kv-1 comes back with a new claim
        let scale = json!({"spec": {"replicas": 2}});
        sets.patch("kv", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .unwrap();
        running_pod(&pods, "kv-1", None).await;
        let again = claims.get("data-kv-1").await.unwrap();
        assert_eq!(again.metadata.owner_references, None);

        // the set deleted (its pods with it): whenDeleted Retain keeps every claim
        sets.delete("kv", &DeleteParams::background())
            .await
            .unwrap();
        eventually("the set's pods gone", || async {
            let list = pods
                .list(&ListParams::default().labels("app=kv"))
                .await
                .ok()?;
            list.items.is_empty().then_some(())
        })
        .await;
        for name in ["data-kv-0", "data-kv-1"] {
            let claim = claims.get(name).await.unwrap();
            assert!(claim.metadata.deletion_timestamp.is_none(), "{name}");
        }
    });
}
