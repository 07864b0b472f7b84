//! Pods' securityContext on a real `skiff kubelet` with its managed containerd, against a real
//! `skiff apiserver`, checked from inside the containers with `kubectl exec`: users, groups
//! (with the `pv.beta.kubernetes.io/gid` of a mounted PersistentVolume), a host PID namespace
//! and the kubelet's `--seccomp-default` under an unset profile but not an `Unconfined` one
//! (`users`); a projected service account token owned by the containers' one user, readable
//! by it and the fsGroup only (`token-owner`); dropped and added capabilities, a read-only root filesystem,
//! `NoNewPrivs`, the runtime's seccomp profile, safe and allowed unsafe sysctls, a shared
//! process namespace and an image's non-root user (`caps`); `runAsNonRoot` refused on a root
//! image and on a named user with upstream's messages; an unsafe sysctl refused at admission
//! (`SysctlForbidden`); an AppArmor profile on this host without AppArmor (Pending, `AppArmor`);
//! a RuntimeClass whose handler containerd does not know (`FailedCreatePodSandBox`). Needs root
//! (containerd, CNI); skips otherwise.

mod support;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use skiff_kubelet::images::{ImageConfig, applets, build_images};
use support::node::{KubeletProcess, in_phase, unsupported};
use support::{ApiServer, Backend, KUBECTL_133, create, eventually, kube_client, run};

const NODE: &str = "seccontext-e2e";
/// The test images: busybox whose config's `User` is a uid, and one whose `User` is a name.
const UID_IMAGE: &str = "localhost/busybox-uid1000:test";
const NAMED_IMAGE: &str = "localhost/busybox-nobody:test";
const SLEEP: [&str; 2] = ["sleep", "3600"];

/// A claim `name` bound to a hostPath volume of the same name under the kubelet's data
/// directory whose `pv.beta.kubernetes.io/gid` is `gid`, bound by hand (no volume controller
/// runs here).
async fn bound_claim(client: &kube::Client, kubelet: &KubeletProcess, name: &str, gid: &str) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = create(
        &claims,
        json!({"metadata": {"name": name}, "spec": {
            "accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": name,
            "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let bound = json!({"status": {"phase": "Bound"}});
    claims
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&bound))
        .await
        .expect("claim bound");
    let path = kubelet.data().join(name).display().to_string();
    create(
        &Api::<PersistentVolume>::all(client.clone()),
        json!({"metadata": {"name": name, "annotations": {"pv.beta.kubernetes.io/gid": gid}},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "",
                        "hostPath": {"path": path, "type": "DirectoryOrCreate"},
                        "claimRef": {"namespace": "default", "name": name,
                                     "uid": claim.metadata.uid}}}),
    )
    .await;
}

/// Imports the test images into the kubelet's containerd.
fn import_test_images(kubelet: &KubeletProcess) {
    let busybox = std::path::Path::new("/bin/busybox");
    let images = [(UID_IMAGE, "1000"), (NAMED_IMAGE, "nobody")].map(|(name, user)| ImageConfig {
        name: name.into(),
        cmd: vec!["sh".into()],
        user: user.into(),
        ..Default::default()
    });
    let archive = build_images(busybox, &applets(busybox).unwrap(), &images).unwrap();
    let path = kubelet.data().join("test-images.tar");
    std::fs::write(&path, archive).unwrap();
    kubelet.ctr(&["images", "import", path.to_str().unwrap()]);
}

/// `kubectl exec` in a container; its stdout, trimmed.
fn exec(api: &ApiServer, pod: &str, container: &str, script: &str) -> String {
    let args = ["exec", pod, "-c", container, "--", "sh", "-c", script];
    api.kubectl(KUBECTL_133, &args).trim().to_string()
}

/// Whether capability `bit` is in the `CapEff` mask of `/proc/self/status`.
fn has_capability(status: &str, bit: u32) -> bool {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no CapEff in {status}"));
    mask & (1 << bit) != 0
}

fn status_field<'a>(status: &'a str, field: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// The waiting reason and message of the pod's first container, once it has one.
async fn waiting(pods: &Api<Pod>, name: &str) -> (String, String) {
    eventually(&format!("{name} waiting with a reason"), || async {
        let pod = pods.get(name).await.ok()?;
        let statuses = pod.status?.container_statuses?;
        let w = statuses.first()?.state.clone()?.waiting?;
        let reason = w.reason.filter(|r| r != "ContainerCreating")?;
        Some((reason, w.message.unwrap_or_default()))
    })
    .await
}

#[test]
fn containers_run_with_their_security_context_and_what_the_node_cannot_honour_is_refused() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let kubelet = KubeletProcess::start_with(
        &api,
        NODE,
        &[
            "--allowed-unsafe-sysctls",
            "kernel.msg*",
            "--seccomp-default",
        ],
    );
    import_test_images(&kubelet);
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let classes: Api<RuntimeClass> = Api::all(c.clone());
        let container = |name: &str, image: &str, sc: serde_json::Value| json!({"name": name, "image": image, "command": SLEEP, "securityContext": sc});
        bound_claim(&c, &kubelet, "grouped", "5555").await;
        create(
            &pods,
            json!({"metadata": {"name": "users"}, "spec": {
                "nodeName": NODE, "terminationGracePeriodSeconds": 1, "hostPID": true,
                "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                    "supplementalGroups": [4000]},
                "volumes": [{"name": "grouped",
                             "persistentVolumeClaim": {"claimName": "grouped"}}],
                "containers": [container("main", "busybox", json!(null)),
                               container("override", "busybox", json!({"runAsUser": 2000,
                                   "seccompProfile": {"type": "Unconfined"}}))]}}),
        )
        .await;
        create(
            &Api::<ServiceAccount>::namespaced(c.clone(), "default"),
            json!({"metadata": {"name": "robot"}}),
        )
        .await;
        create(
            &pods,
            json!({"metadata": {"name": "token-owner"}, "spec": {
                "nodeName": NODE, "terminationGracePeriodSeconds": 1,
                "serviceAccountName": "robot", "automountServiceAccountToken": false,
                "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
                "volumes": [{"name": "token", "projected": {"sources": [
                    {"serviceAccountToken": {"path": "token"}}]}}],
                "containers": [{"name": "c", "image": "busybox", "command": SLEEP,
                                "volumeMounts": [{"name": "token", "mountPath": "/tokens"}]}]}}),
        )
        .await;
        create(
            &pods,
            json!({"metadata": {"name": "caps"}, "spec": {
                "nodeName": NODE, "terminationGracePeriodSeconds": 1,
                "shareProcessNamespace": true,
                "securityContext": {"sysctls": [
                    {"name": "net.ipv4.ip_unprivileged_port_start", "value": "1000"},
                    {"name": "kernel.msgmax", "value": "12345"}]},
                "containers": [
                    container("main", "busybox", json!({
                        "capabilities": {"add": ["NET_ADMIN"], "drop": ["CHOWN"]},
                        "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                        "seccompProfile": {"type": "RuntimeDefault"}})),
                    {"name": "sibling", "image": "busybox", "command": ["sleep", "7777"]},
                    container("image-user", UID_IMAGE, json!({"runAsNonRoot": true}))]}}),
        )
        .await;
        for (name, image) in [("nonroot-root", "busybox"), ("nonroot-named", NAMED_IMAGE)] {
            create(
                &pods,
                json!({"metadata": {"name": name}, "spec": {
                    "nodeName": NODE, "securityContext": {"runAsNonRoot": true},
                    "containers": [container("c", image, json!(null))]}}),
            )
            .await;
        }
        create(
            &pods,
            json!({"metadata": {"name": "unsafe-sysctl"}, "spec": {
                "nodeName": NODE,
                "securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]},
                "containers": [container("c", "busybox", json!(null))]}}),
        )
        .await;
        create(
            &pods,
            json!({"metadata": {"name": "apparmor"}, "spec": {
                "nodeName": NODE,
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                "containers": [container("c", "busybox", json!(null))]}}),
        )
        .await;
        create(
            &classes,
            json!({"metadata": {"name": "elsewhere"}, "handler": "nosuch"}),
        )
        .await;
        create(
            &pods,
            json!({"metadata": {"name": "runtime-class"}, "spec": {
                "nodeName": NODE, "runtimeClassName": "elsewhere",
                "containers": [container("c", "busybox", json!(null))]}}),
        )
        .await;

        // users, groups, and the host's processes
        eventually("users running", || in_phase(&pods, "users", "Running")).await;
        assert_eq!(exec(&api, "users", "main", "id -u; id -g"), "1000\n3000");
        let groups = exec(&api, "users", "main", "id -G");
        let groups: Vec<&str> = groups.split_whitespace().collect();
        assert!(
            groups.contains(&"2000") && groups.contains(&"4000") && groups.contains(&"5555"),
            "fsGroup, supplementalGroups and the volume's group: {groups:?}"
        );
        assert_eq!(exec(&api, "users", "override", "id -u"), "2000");
        // seccomp mode 2 is a filter (the runtime's default profile), 0 none
        let seccomp = |container| {
            let status = exec(&api, "users", container, "cat /proc/self/status");
            status_field(&status, "Seccomp:").to_string()
        };
        assert_eq!(
            seccomp("main"),
            "2",
            "--seccomp-default confines an unset profile"
        );
        assert_eq!(
            seccomp("override"),
            "0",
            "an Unconfined profile stays unconfined"
        );
        let test_pid = std::process::id();
        assert_eq!(
            exec(
                &api,
                "users",
                "main",
                &format!("test -d /proc/{test_pid} && echo host")
            ),
            "host",
            "hostPID sees the host's processes"
        );

        // the token belongs to the containers' user, and its fsGroup may read it
        eventually("token-owner running", || {
            in_phase(&pods, "token-owner", "Running")
        })
        .await;
        assert_eq!(
            exec(
                &api,
                "token-owner",
                "c",
                "stat -L -c '%u %g %a' /tokens/token; test -s /tokens/token && echo readable"
            ),
            "1000 2000 640\nreadable"
        );

        // capabilities, read-only root, no_new_privs, seccomp, sysctls, a shared PID namespace
        eventually("caps running", || in_phase(&pods, "caps", "Running")).await;
        let status = exec(&api, "caps", "main", "cat /proc/self/status");
        assert!(has_capability(&status, 12), "NET_ADMIN added: {status}");
        assert!(!has_capability(&status, 0), "CHOWN dropped: {status}");
        assert!(has_capability(&status, 1), "DAC_OVERRIDE kept: {status}");
        assert_eq!(status_field(&status, "NoNewPrivs:"), "1");
        assert_eq!(status_field(&status, "Seccomp:"), "2");
        assert_eq!(
            exec(&api, "caps", "main", "touch /x 2>&1; echo $?")
                .lines()
                .last(),
            Some("1"),
            "the root filesystem is read-only"
        );
        assert_eq!(
            exec(
                &api,
                "caps",
                "main",
                "cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/kernel/msgmax"
            ),
            "1000\n12345"
        );
        assert!(
            exec(&api, "caps", "main", "ps -o args").contains("sleep 7777"),
            "shareProcessNamespace shows the sibling's processes"
        );
        assert_eq!(exec(&api, "caps", "image-user", "id -u"), "1000");

        // runAsNonRoot on a root image and on a named user
        let uid = |name: &'static str| {
            let pods = pods.clone();
            async move { pods.get(name).await.unwrap().metadata.uid.unwrap() }
        };
        let root_uid = uid("nonroot-root").await;
        assert_eq!(
            waiting(&pods, "nonroot-root").await,
            (
                "CreateContainerConfigError".into(),
                format!(
                    "container has runAsNonRoot and image will run as root (pod: \
                     \"nonroot-root_default({root_uid})\", container: c)"
                )
            )
        );
        assert!(
            api.first_event_message("nonroot-root", "Failed")
                .await
                .starts_with("Error: container has runAsNonRoot and image will run as root")
        );
        let named_uid = uid("nonroot-named").await;
        assert_eq!(
            waiting(&pods, "nonroot-named").await.1,
            format!(
                "container has runAsNonRoot and image has non-numeric user (nobody), cannot \
                 verify user is non-root (pod: \"nonroot-named_default({named_uid})\", \
                 container: c)"
            )
        );

        // an unsafe sysctl is refused at admission
        let rejected = eventually("unsafe-sysctl failed", || {
            in_phase(&pods, "unsafe-sysctl", "Failed")
        })
        .await
        .status
        .unwrap();
        assert_eq!(rejected.reason.as_deref(), Some("SysctlForbidden"));
        assert_eq!(
            rejected.message.as_deref(),
            Some("Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted")
        );

        // an AppArmor profile on a host without AppArmor
        let blocked = eventually("apparmor blocked", || async {
            let status = pods.get("apparmor").await.ok()?.status?;
            (status.reason.as_deref() == Some("AppArmor")).then_some(status)
        })
        .await;
        assert_eq!(blocked.phase.as_deref(), Some("Pending"));
        assert_eq!(
            blocked.message.as_deref(),
            Some("Cannot enforce AppArmor: AppArmor is not enabled on the host")
        );

        // a runtime handler containerd does not know
        let message = api
            .first_event_message("runtime-class", "FailedCreatePodSandBox")
            .await;
        assert!(
            message.starts_with("Failed to create pod sandbox: rpc error:")
                && message.contains(r#"no runtime for "nosuch" is configured"#),
            "{message}"
        );
    });
    drop(kubelet);
}
