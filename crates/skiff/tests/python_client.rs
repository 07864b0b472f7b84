//! The unmodified Python `kubernetes` client (installed by `scripts/install-deps`) against a real
//! `skiff apiserver` process: core CRUD with selectors and both patch flavours it sends, a
//! Deployment round trip, and a watch that sees an object created while it runs. Each test runs
//! one script and asserts on what it prints.

mod support;

use std::process::Command;

use support::{ApiServer, Backend, run_guarded};

/// Runs `script` with `python3`, the kubeconfig path as its argument, and returns its stdout.
fn python(api: &ApiServer, script: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("script.py");
    std::fs::write(&path, script).expect("write the script");
    let out = run_guarded(
        Command::new("python3")
            .arg(&path)
            .arg(api.kubeconfig())
            .env("HOME", dir.path()),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'kubernetes'"),
        "the Python kubernetes client is missing: run scripts/install-deps"
    );
    assert!(
        out.status.success(),
        "the script failed: {stderr}\nstdout:\n{stdout}\nserver log:\n{}",
        api.log()
    );
    stdout
}

/// Imports and the client, configured from the kubeconfig given as the first argument.
const PRELUDE: &str = r#"
import json, sys, threading
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
apps = client.AppsV1Api()
meta = client.V1ObjectMeta

def failure(call):
    try:
        call()
        return "succeeded"
    except ApiException as e:
        body = json.loads(e.body)
        return f"{e.status} {body['reason']} {body['message']}"
"#;

const CORE: &str = r#"
v1.create_namespace(client.V1Namespace(metadata=meta(name="py")))
cm = client.V1ConfigMap(metadata=meta(name="settings", labels={"app": "web"}), data={"color": "blue"})
made = v1.create_namespaced_config_map("py", cm)
print("created", made.metadata.namespace, made.metadata.name, bool(made.metadata.uid))
print("again:", failure(lambda: v1.create_namespaced_config_map("py", cm)))
got = v1.read_namespaced_config_map("settings", "py")
print("read", got.data, got.metadata.uid == made.metadata.uid)

# A dict is sent as a strategic merge patch, a list as a JSON patch.
patched = v1.patch_namespaced_config_map("settings", "py",
    {"metadata": {"labels": {"tier": "front"}}, "data": {"size": "L"}})
print("merged", patched.data, patched.metadata.labels,
      patched.metadata.resource_version != made.metadata.resource_version)
patched = v1.patch_namespaced_config_map("settings", "py",
    [{"op": "replace", "path": "/data/color", "value": "red"}])
print("json-patched", patched.data)
failed = failure(lambda: v1.patch_namespaced_config_map("settings", "py",
    [{"op": "test", "path": "/data/color", "value": "green"}]))
print("failed test op:", " ".join(failed.split()[:2]))

for name, labels in [("web", {"app": "web"}), ("db", {"app": "db"})]:
    pod = client.V1Pod(metadata=meta(name=name, labels=labels),
                       spec=client.V1PodSpec(containers=[client.V1Container(name="main", image="nginx:1.25")]))
    v1.create_namespaced_pod("py", pod)
pods = v1.list_namespaced_pod("py", label_selector="app=web")
print("pods app=web", [p.metadata.name for p in pods.items], pods.items[0].status.phase,
      pods.items[0].spec.restart_policy)
pods = v1.list_namespaced_pod("py", label_selector="app in (web,db)")
print("pods app in (web,db)", sorted(p.metadata.name for p in pods.items))
pods = v1.list_namespaced_pod("py", label_selector="app", field_selector="metadata.name=db")
print("pods name=db", [p.metadata.name for p in pods.items])
cms = v1.list_namespaced_config_map("py", label_selector="tier=front")
print("configmaps tier=front", [c.metadata.name for c in cms.items], bool(cms.metadata.resource_version))

v1.delete_namespaced_config_map("settings", "py")
print("read after delete:", failure(lambda: v1.read_namespaced_config_map("settings", "py")))
print("delete again:", failure(lambda: v1.delete_namespaced_config_map("settings", "py")))
v1.delete_namespaced_pod("web", "py")
print("pods left", [p.metadata.name for p in v1.list_namespaced_pod("py").items])
"#;

#[test]
fn the_python_client_creates_reads_patches_lists_and_deletes() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{CORE}"));
    let want = [
        "created py settings True",
        "again: 409 AlreadyExists configmaps \"settings\" already exists",
        "read {'color': 'blue'} True",
        "merged {'color': 'blue', 'size': 'L'} {'app': 'web', 'tier': 'front'} True",
        "json-patched {'color': 'red', 'size': 'L'}",
        "failed test op: 422 Invalid",
        "pods app=web ['web'] Pending Always",
        "pods app in (web,db) ['db', 'web']",
        "pods name=db ['db']",
        "configmaps tier=front ['settings'] True",
        "read after delete: 404 NotFound configmaps \"settings\" not found",
        "delete again: 404 NotFound configmaps \"settings\" not found",
        "pods left ['db']",
    ];
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        want,
        "the script printed:\n{out}"
    );
}

const DEPLOYMENT: &str = r#"
container = client.V1Container(name="web", image="nginx:1.25",
                               ports=[client.V1ContainerPort(container_port=80)])
deployment = client.V1Deployment(
    metadata=meta(name="web", labels={"app": "web"}),
    spec=client.V1DeploymentSpec(
        replicas=3,
        selector=client.V1LabelSelector(match_labels={"app": "web"}),
        template=client.V1PodTemplateSpec(metadata=meta(labels={"app": "web"}),
                                          spec=client.V1PodSpec(containers=[container]))))
made = apps.create_namespaced_deployment("default", deployment)
print("created", made.metadata.name, made.metadata.generation)
got = apps.read_namespaced_deployment("web", "default")
c = got.spec.template.spec.containers[0]
print("read", got.metadata.uid == made.metadata.uid, got.spec.replicas, got.spec.selector.match_labels,
      got.spec.template.metadata.labels, c.image, c.ports[0].container_port)
print("listed", [d.metadata.name for d in apps.list_namespaced_deployment("default", label_selector="app=web").items])
scale = apps.read_namespaced_deployment_scale("web", "default")
print("scale", scale.spec.replicas)
"#;

#[test]
fn the_python_client_creates_a_deployment_and_reads_it_back() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{DEPLOYMENT}"));
    let want = [
        "created web 1",
        "read True 3 {'app': 'web'} {'app': 'web'} nginx:1.25 80",
        "listed ['web']",
        "scale 3",
    ];
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        want,
        "the script printed:\n{out}"
    );
}

/// What upstream's defaulting adds to the Deployment above (`SetDefaults_Deployment` and the pod
/// template's defaults).
const DEPLOYMENT_DEFAULTS: &str = r#"
c = got.spec.template.spec.containers[0]
print("strategy", got.spec.strategy.type, got.spec.strategy.rolling_update.max_surge,
      got.spec.strategy.rolling_update.max_unavailable)
print("limits", got.spec.revision_history_limit, got.spec.progress_deadline_seconds)
print("template", got.spec.template.spec.restart_policy, got.spec.template.spec.dns_policy,
      got.spec.template.spec.termination_grace_period_seconds)
print("container", c.image_pull_policy, c.termination_message_path, c.ports[0].protocol)
"#;

#[test]
fn the_python_client_reads_back_a_deployment_with_upstreams_defaults() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{DEPLOYMENT}{DEPLOYMENT_DEFAULTS}"));
    let want = [
        "strategy RollingUpdate 25% 25%",
        "limits 10 600",
        "template Always ClusterFirst 30",
        "container IfNotPresent /dev/termination-log TCP",
    ];
    assert_eq!(
        out.lines().skip(4).collect::<Vec<_>>(),
        want,
        "the script printed:\n{out}"
    );
}

/// Upstream answers a JSON patch whose `test` operation fails with 422 Invalid and a fixed
/// message (`NewGenericServerResponse(422, …)` in the patcher), not the patch library's error.
const FAILED_TEST_OP: &str = r#"
v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=meta(name="c"), data={"color": "blue"}))
print(failure(lambda: v1.patch_namespaced_config_map("c", "default",
    [{"op": "test", "path": "/data/color", "value": "green"}])))
"#;

#[test]
fn a_failed_json_patch_test_op_answers_upstreams_message() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{FAILED_TEST_OP}"));
    assert_eq!(
        out.trim(),
        "422 Invalid the server rejected our request due to an error in our request"
    );
}

/// The create runs on a thread started with the watch; whether it lands before the watch request
/// (and arrives among the initial ADDED events) or after it, the watch reports it as ADDED.
const WATCH: &str = r#"
def create():
    v1.create_namespaced_config_map("default", client.V1ConfigMap(metadata=meta(name="fresh")))

w = watch.Watch()
writer = threading.Thread(target=create)
writer.start()
for event in w.stream(v1.list_namespaced_config_map, "default", timeout_seconds=30):
    print(event["type"], event["object"].metadata.name)
    if event["type"] == "ADDED" and event["object"].metadata.name == "fresh":
        w.stop()
        break
writer.join()
"#;

#[test]
fn the_python_client_watch_sees_an_object_created_concurrently() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{WATCH}"));
    assert_eq!(
        out.lines().last(),
        Some("ADDED fresh"),
        "the script printed:\n{out}"
    );
}

const STORAGE_AND_AUTOSCALING: &str = r#"
storage = client.StorageV1Api()
autoscaling = client.AutoscalingV2Api()
sc = storage.create_storage_class(client.V1StorageClass(metadata=meta(name="fast"), provisioner="example.com/ssd"))
print("class", sc.reclaim_policy, sc.volume_binding_mode)
spec = client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"], storage_class_name="fast",
    resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}))
pvc = v1.create_namespaced_persistent_volume_claim("default",
    client.V1PersistentVolumeClaim(metadata=meta(name="data"), spec=spec))
print("claim", pvc.status.phase, pvc.spec.volume_mode, pvc.metadata.finalizers)
print("listed", [c.metadata.name for c in v1.list_namespaced_persistent_volume_claim("default").items])
bad = client.V1PersistentVolumeClaim(metadata=meta(name="bad"),
    spec=client.V1PersistentVolumeClaimSpec(access_modes=["ReadWriteOnce"],
        resources=client.V1VolumeResourceRequirements(requests={})))
print("bad", failure(lambda: v1.create_namespaced_persistent_volume_claim("default", bad)))
target = client.V2CrossVersionObjectReference(api_version="apps/v1", kind="Deployment", name="web")
hpa = autoscaling.create_namespaced_horizontal_pod_autoscaler("default", client.V2HorizontalPodAutoscaler(
    metadata=meta(name="web"), spec=client.V2HorizontalPodAutoscalerSpec(scale_target_ref=target, max_replicas=4)))
print("hpa", hpa.spec.min_replicas, hpa.spec.metrics[0].resource.name, hpa.spec.metrics[0].resource.target.average_utilization)
"#;

#[test]
fn the_python_client_writes_claims_classes_and_autoscalers() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{STORAGE_AND_AUTOSCALING}"));
    let want = [
        "class Delete Immediate",
        "claim Pending Filesystem ['kubernetes.io/pvc-protection']",
        "listed ['data']",
        "bad 422 Invalid PersistentVolumeClaim \"bad\" is invalid: spec.resources[storage]: Required value",
        "hpa 1 cpu 80",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
}

const CUSTOM_OBJECTS: &str = r#"
import time
ext = client.ApiextensionsV1Api()
custom = client.CustomObjectsApi()
schema = {"type": "object", "properties": {"spec": {"type": "object",
    "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}],
    "properties": {"min": {"type": "integer", "default": 1}, "max": {"type": "integer"}}}}}
version = lambda name, storage: {"name": name, "served": True, "storage": storage,
    "schema": {"openAPIV3Schema": schema}}
ext.create_custom_resource_definition({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "ranges.example.com"},
    "spec": {"group": "example.com", "scope": "Cluster",
             "names": {"plural": "ranges", "singular": "range", "kind": "Range"},
             "versions": [version("v1beta1", False), version("v1", True)]}})
for _ in range(100):
    crd = ext.read_custom_resource_definition("ranges.example.com")
    if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
        break
    time.sleep(0.1)
print("stored", crd.status.stored_versions)
made = custom.create_cluster_custom_object("example.com", "v1beta1", "ranges",
    {"apiVersion": "example.com/v1beta1", "kind": "Range", "metadata": {"name": "r"}, "spec": {"max": 5}})
print("made", made["apiVersion"], made["spec"])
got = custom.get_cluster_custom_object("example.com", "v1", "ranges", "r")
print("read", got["apiVersion"], got["spec"])
patched = custom.patch_cluster_custom_object("example.com", "v1", "ranges", "r", {"spec": {"max": 7}})
print("patched", patched["spec"], patched["metadata"]["generation"])
bad = {"apiVersion": "example.com/v1", "kind": "Range", "metadata": {"name": "bad"}, "spec": {"min": 9, "max": 2}}
print("bad", failure(lambda: custom.create_cluster_custom_object("example.com", "v1", "ranges", bad)))
print("listed", [r["metadata"]["name"] for r in custom.list_cluster_custom_object("example.com", "v1beta1", "ranges")["items"]])
custom.delete_cluster_custom_object("example.com", "v1", "ranges", "r")
print("left", len(custom.list_cluster_custom_object("example.com", "v1", "ranges")["items"]))
"#;

#[test]
fn the_python_client_defines_and_uses_a_custom_resource_in_two_versions() {
    let api = ApiServer::start(Backend::Embedded);
    let out = python(&api, &format!("{PRELUDE}{CUSTOM_OBJECTS}"));
    let want = [
        "stored ['v1']",
        "made example.com/v1beta1 {'max': 5, 'min': 1}",
        "read example.com/v1 {'max': 5, 'min': 1}",
        "patched {'max': 7, 'min': 1} 2",
        "bad 422 Invalid Range.example.com \"bad\" is invalid: spec: Invalid value: \"object\": min must not exceed max",
        "listed ['r']",
        "left 0",
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
}
