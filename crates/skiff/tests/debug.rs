//! `kubectl debug` against a real `skiff apiserver`, scheduler, controller manager (service
//! accounts) and `skiff kubelet` with the containerd it manages, with the oldest and the newest
//! kubectl installed: an ephemeral container with `--target` runs `ps` in the target's process
//! namespace and sees its process (read back with `kubectl logs`, and through `kubectl debug
//! -i`'s attached shell), `kubectl exec` and `kubectl attach` reach a running one, and ephemeral
//! containers are not restarted; `kubectl debug node/N` runs a pod on the node with the host's
//! root at /host and the host's network; `--copy-to` makes a running copy of a pod whose
//! containers share one process namespace. Only users allowed to patch
//! `pods/ephemeralcontainers` add ephemeral containers. Bad input: removing or changing an
//! ephemeral container, and a target that is no container of the pod, are 422s with upstream's
//! messages. Needs root (containerd, CNI); skips otherwise (fails under `CI=true`).

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::cluster::{controller_manager, identity, scheduler};
use support::node::{KubeletProcess, in_phase, unsupported};
use support::{
    ApiServer, Backend, HANG_GUARD, KUBECTL_127, KUBECTL_133, eventually, expect_line, kube_client,
    line_reader, run,
};

const NODE: &str = "debug-e2e";

/// The target's process, which a debugger sharing its process namespace sees in `ps`.
const TARGET_PROCESS: &str = "sleep 31337";

async fn pods(api: &ApiServer) -> Api<Pod> {
    Api::namespaced(kube_client(api).await, "default")
}

/// A running pod `name` on the node whose container `c` runs [`TARGET_PROCESS`].
async fn create_target(pods: &Api<Pod>, name: &str) {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "target"}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox",
                            "command": TARGET_PROCESS.split(' ').collect::<Vec<_>>()}],
        },
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create the target pod");
    in_running(pods, name).await;
}

async fn in_running(pods: &Api<Pod>, name: &str) {
    eventually(&format!("{name} running"), || {
        in_phase(pods, name, "Running")
    })
    .await;
}

/// The state of the pod's ephemeral container `container` once `done` accepts it.
async fn ephemeral_state(
    pods: &Api<Pod>,
    pod: &str,
    container: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let what = format!("ephemeral container {container} of {pod}");
    eventually(&what, || async {
        let pod = pods.get(pod).await.ok()?;
        let statuses = pod.status?.ephemeral_container_statuses?;
        let status = statuses.into_iter().find(|s| s.name == container)?;
        let state = serde_json::to_value(status.state?).ok()?;
        done(&state).then_some(state)
    })
    .await
}

/// `kubectl debug --target` of a running pod with one kubectl: a `ps` that sees the target's
/// process, then a debugger that stays, reached with `exec` and `attach`.
fn debug_with_target(api: &ApiServer, kubectl: &str, suffix: &str) {
    let [ps, shell, stays, talks] =
        ["ps", "shell", "stays", "talks"].map(|n| format!("{n}-{suffix}"));
    api.kubectl(
        kubectl,
        &[
            "debug",
            "target",
            "--image=busybox",
            "--target=c",
            "-c",
            &ps,
            "--",
            "ps",
        ],
    );
    run(async {
        let pods = pods(api).await;
        let exited = ephemeral_state(&pods, "target", &ps, |s| s["terminated"].is_object()).await;
        assert_eq!(exited["terminated"]["exitCode"], 0, "{exited}");
    });
    let out = api.kubectl(kubectl, &["logs", "target", "-c", &ps]);
    assert!(
        out.contains(TARGET_PROCESS),
        "ps in the target's namespace:\n{out}"
    );

    // -i: kubectl waits for the shell to run and attaches to it
    let seen = debug_interactively(api, kubectl, &shell);
    assert!(seen.contains(TARGET_PROCESS), "{seen}");

    api.kubectl(
        kubectl,
        &[
            "debug",
            "target",
            "--image=busybox",
            "--target=c",
            "-c",
            &stays,
            "--",
            "sleep",
            "3600",
        ],
    );
    let script = "while true; do echo tick; sleep 0.2; done";
    api.kubectl(
        kubectl,
        &[
            "debug",
            "target",
            "--image=busybox",
            "-c",
            &talks,
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    run(async {
        let pods = pods(api).await;
        for name in [&stays, &talks] {
            ephemeral_state(&pods, "target", name, |s| s["running"].is_object()).await;
        }
    });
    let out = api.kubectl(kubectl, &["exec", "target", "-c", &stays, "--", "ps"]);
    assert!(out.contains(TARGET_PROCESS), "exec in the debugger:\n{out}");
    let (mut attach, lines) = api.kubectl_stream(kubectl, &["attach", "target", "-c", &talks]);
    expect_line(&lines, |l| l == "tick");
    let _ = attach.kill();
    let _ = attach.wait();
}

/// `kubectl debug -i target --target=c` as a person types into it: `ps`, then, once its output
/// has come back, `exit`. Its stdin stays open until then: for a container without `stdinOnce`
/// (kubectl debug sets none) containerd detaches a client's output once its stdin closes.
/// Returns the line of `ps` that shows the target's process.
fn debug_interactively(api: &ApiServer, kubectl: &str, container: &str) -> String {
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(api.kubeconfig())
        .args([
            "debug",
            "-i",
            "target",
            "--image=busybox",
            "--target=c",
            "-c",
        ])
        .args([container, "--", "sh"])
        .env("HOME", api.data_dir.join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run kubectl");
    let lines = line_reader(child.stdout.take().expect("stdout"));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"ps\n").expect("type ps");
    let seen = expect_line(&lines, |l| l.contains(TARGET_PROCESS));
    stdin.write_all(b"exit\n").expect("type exit");
    drop(stdin);
    let deadline = Instant::now() + HANG_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().expect("kubectl's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kubectl debug -i did not end after exit");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "kubectl debug -i: {status}");
    seen
}

/// `kubectl debug node/N`: a pod on the node with the host's root at /host, in the host's
/// network and process namespaces; returns its name.
fn debug_node(api: &ApiServer, kubectl: &str, marker: &std::path::Path) -> String {
    let read = format!("cat /host{}", marker.display());
    let out = api.kubectl_output(
        kubectl,
        &[
            "debug",
            &format!("node/{NODE}"),
            "--image=busybox",
            "--",
            "sh",
            "-c",
            &read,
        ],
        None,
    );
    let (stdout, stderr) = support::output_text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // "Creating debugging pod node-debugger-<node>-xxxxx with container debugger on node <node>."
    let all = format!("{stdout}{stderr}");
    let name = all
        .split_whitespace()
        .find(|w| w.starts_with("node-debugger-"))
        .unwrap_or_else(|| panic!("no pod name in {all:?}"))
        .to_string();
    run(async {
        let pods = pods(api).await;
        let what = format!("{name} succeeded");
        eventually(&what, || in_phase(&pods, &name, "Succeeded")).await;
        let pod = pods.get(&name).await.unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!((spec.host_pid, spec.host_network), (Some(true), Some(true)));
        assert_eq!(pod.status.unwrap().pod_ip.as_deref(), Some("127.0.0.1"));
    });
    name
}

/// Patches the pod's `ephemeralcontainers` subresource; the error's code and message.
async fn patch_ephemeral(pods: &Api<Pod>, name: &str, patch: Value) -> (u16, String) {
    let err = pods
        .patch_subresource(
            "ephemeralcontainers",
            name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(patch).unwrap()),
        )
        .await
        .expect_err("refused");
    match err {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("{other}"),
    }
}

#[test]
fn kubectl_debug_runs_ephemeral_containers_node_debuggers_and_copies() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let _kubelet = KubeletProcess::start(&api, NODE);
    let _scheduler = scheduler(&api);
    // a copy names the service account its original was given, whose token it then mounts
    let _cm = controller_manager(
        &api,
        &["--controllers", "serviceaccount,root-ca-cert-publisher"],
    );
    run(async {
        let client = kube_client(&api).await;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        eventually("the default service account", || async {
            accounts.get_opt("default").await.ok().flatten()
        })
        .await;
        let config_maps: Api<ConfigMap> = Api::namespaced(client, "default");
        eventually("the cluster's CA bundle", || async {
            config_maps.get_opt("kube-root-ca.crt").await.ok().flatten()
        })
        .await;
        create_target(&pods(&api).await, "target").await;
    });
    for (kubectl, suffix) in [(KUBECTL_127, "127"), (KUBECTL_133, "133")] {
        debug_with_target(&api, kubectl, suffix);
    }
    run(async {
        // ephemeral containers are not restarted: the exited `ps` ran once
        let pod = pods(&api).await.get("target").await.unwrap();
        let status = pod.status.unwrap();
        let ps = status
            .ephemeral_container_statuses
            .iter()
            .flatten()
            .find(|s| s.name == "ps-127")
            .expect("ps-127's status");
        assert_eq!(ps.restart_count, 0);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        // the writes through the subresource own the ephemeral containers, as upstream records
        let owners: Vec<_> = pod
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|f| f.subresource.as_deref() == Some("ephemeralcontainers"))
            .collect();
        assert!(!owners.is_empty(), "{:?}", pod.metadata.managed_fields);
        for entry in owners {
            let fields = serde_json::to_string(&entry.fields_v1).unwrap();
            assert!(fields.contains("f:ephemeralContainers"), "{fields}");
            assert!(!fields.contains("f:containers"), "{fields}");
        }
    });

    // the host's root at /host
    let marker_dir = tempfile::tempdir().expect("temp dir");
    let marker = marker_dir.path().join("marker");
    std::fs::write(&marker, "seen from the node debugger\n").unwrap();
    for kubectl in [KUBECTL_127, KUBECTL_133] {
        let name = debug_node(&api, kubectl, &marker);
        let logs = api.kubectl(kubectl, &["logs", &name]);
        assert_eq!(logs, "seen from the node debugger\n");
    }

    // a copy whose debugger shares the copied container's process namespace
    for (kubectl, copy) in [(KUBECTL_127, "copy-127"), (KUBECTL_133, "copy-133")] {
        api.kubectl(
            kubectl,
            &[
                "debug",
                "target",
                &format!("--copy-to={copy}"),
                "--image=busybox",
                "--share-processes",
                "-c",
                "debugger",
                "--",
                "sleep",
                "3600",
            ],
        );
        run(async { in_running(&pods(&api).await, copy).await });
        let out = api.kubectl(kubectl, &["exec", copy, "-c", "debugger", "--", "ps"]);
        assert!(out.contains(TARGET_PROCESS), "ps in the copy:\n{out}");
        let node = api.jsonpath(&["get", "pod", copy], "{.spec.nodeName}");
        assert_eq!(node, NODE, "the scheduler placed the copy");
    }

    // bad input: 422s, the pod unchanged
    run(async {
        let pods = pods(&api).await;
        let (code, message) = patch_ephemeral(
            &pods,
            "target",
            json!([{"op": "remove", "path": "/spec/ephemeralContainers/0"}]),
        )
        .await;
        assert_eq!(code, 422, "{message}");
        assert!(
            message.contains("existing ephemeral containers \"ps-127\" may not be removed"),
            "{message}"
        );
        let (code, message) = patch_ephemeral(
            &pods,
            "target",
            json!([{"op": "replace", "path": "/spec/ephemeralContainers/0/image",
                    "value": "busybox:1.36"}]),
        )
        .await;
        assert_eq!(code, 422, "{message}");
        assert!(
            message.contains("existing ephemeral containers \"ps-127\" may not be changed"),
            "{message}"
        );
        let (code, message) = patch_ephemeral(
            &pods,
            "target",
            json!([{"op": "add", "path": "/spec/ephemeralContainers/-",
                    "value": {"name": "lost", "image": "busybox",
                              "targetContainerName": "nope"}}]),
        )
        .await;
        assert_eq!(code, 422, "{message}");
        assert!(
            message
                .contains("spec.ephemeralContainers[8].targetContainerName: Not found: \"nope\""),
            "{message}"
        );
        let pod = pods.get("target").await.unwrap();
        let names: Vec<String> = pod
            .spec
            .unwrap()
            .ephemeral_containers
            .into_iter()
            .flatten()
            .map(|c| c.name)
            .collect();
        assert_eq!(
            names,
            [
                "ps-127",
                "shell-127",
                "stays-127",
                "talks-127",
                "ps-133",
                "shell-133",
                "stays-133",
                "talks-133"
            ]
        );
    });
    // authorized as upstream: patching pods/ephemeralcontainers, which viewing pods is not
    api.apply(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-debugger", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
                   "verbs": ["patch"]}],
    }));
    for (user, role) in [
        ("debugger", ("Role", "pod-debugger")),
        ("viewer", ("ClusterRole", "view")),
    ] {
        api.apply(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": user, "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role.0, "name": role.1},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }));
    }
    let debug_as = |user: &str| {
        let kubeconfig = identity(&api, user, None);
        let container = format!("by-{user}");
        support::run_guarded(
            Command::new(KUBECTL_133)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args([
                    "debug",
                    "target",
                    "--image=busybox",
                    "-c",
                    &container,
                    "--",
                    "true",
                ])
                .env("HOME", api.data_dir.join("home")),
        )
    };
    let allowed = debug_as("debugger");
    assert!(
        allowed.status.success(),
        "{:?}",
        support::output_text(&allowed)
    );
    let refused = debug_as("viewer");
    let (_, stderr) = support::output_text(&refused);
    assert!(
        stderr.contains(
            "User \"viewer\" cannot patch resource \"pods/ephemeralcontainers\" in API group \"\" \
             in the namespace \"default\""
        ),
        "{stderr}"
    );

    // kubectl says so too
    let err = api.kubectl_fails(
        KUBECTL_133,
        &[
            "debug",
            "target",
            "--image=busybox",
            "--target=nope",
            "-c",
            "lost",
            "--",
            "ps",
        ],
        None,
    );
    assert!(
        err.contains("targetContainerName: Not found: \"nope\""),
        "{err}"
    );
}
