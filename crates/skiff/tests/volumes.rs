//! Pod volumes, /etc/hosts and DNS on a real `skiff kubelet` with its managed containerd, against
//! a real `skiff apiserver`: a pod whose two containers share configMap, secret, downwardAPI,
//! projected (with a service account token from TokenRequest) and emptyDir volumes checks its
//! files, its /etc/hosts and its resolv.conf itself and succeeds; a running pod sees its
//! ConfigMap's update; a pod whose ConfigMap is missing reports FailedMount and stays Pending
//! until the ConfigMap is created, then runs; a deleted pod's volumes are torn down. Needs root
//! (containerd, CNI); skips otherwise.

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::node::{KubeletProcess, finished, in_phase, unsupported};

const NODE: &str = "kubelet-e2e";
use support::{ApiServer, Backend, create, eventually, kube_client, run};

/// Checks run in the containers: each prints what failed before exiting 1.
const READER: &str = r##"
check() { if ! sh -c "$1"; then echo "FAIL: $1"; exit 1; fi; }
check 'test "$(cat /etc/cfg/k)" = v'
check 'test "$(cat /etc/sec/password)" = pw'
check 'test "$(od -An -tx1 /etc/sec/bin | tr -d " \n")" = ff0001'
check 'test "$(stat -L -c %a /etc/sec/password)" = 400'
check 'test -L /etc/cfg/k && test -L /etc/cfg/..data'
check 'test "$(cat /etc/info/name)" = files'
check 'grep -qx "app=\"demo\"" /etc/info/labels'
check 'test "$(cat /etc/info/mem)" = 64'
check 'test "$(awk -F. "{print NF}" /var/run/secrets/tokens/token)" = 3'
check 'test "$(cat /var/run/secrets/tokens/namespace)" = default'
check 'test "$(cat /var/run/secrets/tokens/cfg-k)" = v'
check 'touch /etc/cfg/x 2>/dev/null && exit 1 || true'
for i in $(seq 1 300); do test -f /scratch/ready && break; sleep 0.1; done
check 'test "$(cat /scratch/ready)" = from-writer'
check 'head -1 /etc/hosts | grep -qx "# Kubernetes-managed hosts file."'
check 'grep -q "files.sub.default.svc.cluster.local	files$" /etc/hosts'
check 'grep -qx "10.9.9.9	extra.example" /etc/hosts'
check 'grep -qx "nameserver 10.43.0.10" /etc/resolv.conf'
check 'grep -q "^search default.svc.cluster.local svc.cluster.local cluster.local" /etc/resolv.conf'
check 'grep -qx "options ndots:5" /etc/resolv.conf'
check 'test "$(hostname)" = files'
echo all checks passed
"##;

/// A hostNetwork pod's /etc/hosts: upstream's header, the node's entries, the aliases.
const HOST_NETWORK_CHECK: &str = r##"
head -1 /etc/hosts | grep -qx "# Kubernetes-managed hosts file (host network)." &&
  grep -q localhost /etc/hosts && grep -qx "10.9.9.9	extra.example" /etc/hosts
"##;

/// Waits (up to a minute) for its ConfigMap's new value.
const FOLLOWER: &str =
    r#"for i in $(seq 1 600); do test "$(cat /etc/cfg/k)" = v2 && exit 0; sleep 0.1; done; exit 1"#;

/// The claims of a service account token, verified with the API server's public key.
fn decode_token(api: &ApiServer, token: &str, audience: &str) -> serde_json::Value {
    let public = support::read(&api.data_dir.join("tls/service-account.pub"));
    let key = jsonwebtoken::DecodingKey::from_ec_pem(public.as_bytes()).expect("the public key");
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[audience]);
    jsonwebtoken::decode::<serde_json::Value>(token.trim(), &key, &validation)
        .expect("the token verifies")
        .claims
}

/// The message of the pod's first FailedMount event.
async fn failed_mount(api: &ApiServer, pod: &str) -> String {
    api.first_event_message(pod, "FailedMount").await
}

#[test]
fn pods_read_their_volumes_hosts_file_and_dns_config_and_wait_for_missing_sources() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let kubelet = KubeletProcess::start_with(
        &api,
        NODE,
        &["--cluster-dns", "10.43.0.10", "--sync-frequency", "1s"],
    );
    run(async {
        let c = kube_client(&api).await;
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
        let config_maps: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
        let secrets: Api<Secret> = Api::namespaced(c.clone(), "default");
        let accounts: Api<ServiceAccount> = Api::namespaced(c.clone(), "default");
        create(&accounts, json!({"metadata": {"name": "robot"}})).await;
        create(
            &config_maps,
            json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}}),
        )
        .await;
        create(
            &secrets,
            json!({"metadata": {"name": "sec"}, "stringData": {"password": "pw"},
                   "data": {"bin": "/wAB"}}),
        )
        .await;

        let mounts = json!([
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "sec", "mountPath": "/etc/sec"},
            {"name": "info", "mountPath": "/etc/info"},
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "token", "mountPath": "/var/run/secrets/tokens"},
        ]);
        let files = create(
            &pods,
            json!({
                "metadata": {"name": "files", "labels": {"app": "demo"}},
                "spec": {
                    "nodeName": NODE, "restartPolicy": "Never", "serviceAccountName": "robot",
                    // its own token volume only (the kube-api-access one needs kube-root-ca.crt)
                    "automountServiceAccountToken": false,
                    "hostname": "files", "subdomain": "sub",
                    "hostAliases": [{"ip": "10.9.9.9", "hostnames": ["extra.example"]}],
                    "volumes": [
                        {"name": "cfg", "configMap": {"name": "cfg"}},
                        {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o400}},
                        {"name": "info", "downwardAPI": {"items": [
                            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                            {"path": "mem", "resourceFieldRef": {"containerName": "reader",
                                "resource": "limits.memory", "divisor": "1Mi"}}]}},
                        {"name": "scratch", "emptyDir": {}},
                        {"name": "token", "projected": {"sources": [
                            {"serviceAccountToken": {"path": "token", "audience": "vault",
                                                     "expirationSeconds": 600}},
                            {"configMap": {"name": "cfg",
                                           "items": [{"key": "k", "path": "cfg-k"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace",
                                "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                    ],
                    "containers": [
                        {"name": "writer", "image": "busybox", "volumeMounts": mounts,
                         "command": ["sh", "-c", "echo from-writer > /scratch/ready"]},
                        {"name": "reader", "image": "busybox", "volumeMounts": mounts,
                         "resources": {"limits": {"memory": "64Mi"}},
                         "command": ["sh", "-c", READER]},
                    ],
                },
            }),
        )
        .await;
        let uid = files.metadata.uid.clone().unwrap();
        let log = kubelet
            .data()
            .join(format!("logs/pods/default_files_{uid}/reader/0.log"));
        let done = eventually("files to finish", || finished(&pods, "files")).await;
        assert_eq!(done, "Succeeded", "reader's log:\n{}", support::read(&log));
        assert!(support::read(&log).contains("all checks passed"));

        // the projected token came from TokenRequest, bound to the pod, for its audience
        let pod_dir = kubelet.data().join("pods").join(&uid);
        let token = support::read(&pod_dir.join("volumes/kubernetes.io~projected/token/token"));
        let claims = decode_token(&api, &token, "vault");
        assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
        assert_eq!(claims["kubernetes.io"]["pod"]["uid"], uid.as_str());
        let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
        assert_eq!(lifetime, 600);

        // a hostNetwork pod sees the node's hosts file under upstream's header, with its aliases
        create(
            &pods,
            json!({
                "metadata": {"name": "hostnet"},
                "spec": {"nodeName": NODE, "restartPolicy": "Never", "hostNetwork": true,
                    "hostAliases": [{"ip": "10.9.9.9", "hostnames": ["extra.example"]}],
                    "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c",
                        HOST_NETWORK_CHECK]}]},
            }),
        )
        .await;
        let phase = eventually("hostnet to finish", || finished(&pods, "hostnet")).await;
        assert_eq!(phase, "Succeeded");

        // a running pod's configMap volume follows the ConfigMap
        create(
            &pods,
            json!({
                "metadata": {"name": "follows"},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                    "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}],
                    "containers": [{"name": "c", "image": "busybox",
                        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                        "command": ["sh", "-c", FOLLOWER]}]},
            }),
        )
        .await;
        eventually("follows to run", || in_phase(&pods, "follows", "Running")).await;
        let mut cfg = config_maps.get("cfg").await.unwrap();
        cfg.data = Some([("k".to_string(), "v2".to_string())].into());
        config_maps
            .replace("cfg", &PostParams::default(), &cfg)
            .await
            .expect("update the configmap");
        let phase = eventually("follows to finish", || finished(&pods, "follows")).await;
        assert_eq!(phase, "Succeeded");

        // a missing ConfigMap: FailedMount with upstream's message, Pending, until it exists
        create(
            &pods,
            json!({
                "metadata": {"name": "waits"},
                "spec": {"nodeName": NODE, "restartPolicy": "Never",
                    "volumes": [{"name": "later", "configMap": {"name": "later"}}],
                    "containers": [{"name": "c", "image": "busybox",
                        "volumeMounts": [{"name": "later", "mountPath": "/etc/later"}],
                        "command": ["sh", "-c", "test \"$(cat /etc/later/k)\" = ok"]}]},
            }),
        )
        .await;
        let message = failed_mount(&api, "waits").await;
        assert_eq!(
            message,
            "MountVolume.SetUp failed for volume \"later\" : configmap \"later\" not found"
        );
        let waiting = eventually("waits to report ContainerCreating", || async {
            let status = pods.get("waits").await.ok()?.status?;
            let state = status.container_statuses?.first()?.state.clone()?;
            Some((status.phase?, state.waiting?.reason?))
        })
        .await;
        assert_eq!(waiting, ("Pending".into(), "ContainerCreating".into()));
        create(
            &config_maps,
            json!({"metadata": {"name": "later"}, "data": {"k": "ok"}}),
        )
        .await;
        // a token for a ServiceAccount that does not exist: FailedMount with TokenRequest's 404
        // (admission refuses pods naming a missing account, so the account goes away after the
        // pod is admitted and before the pod is bound to the node)
        create(&accounts, json!({"metadata": {"name": "ghost"}})).await;
        create(
            &pods,
            json!({
                "metadata": {"name": "nosa"},
                "spec": {"serviceAccountName": "ghost", "automountServiceAccountToken": false,
                    "volumes": [{"name": "token", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token"}}]}}],
                    "containers": [{"name": "c", "image": "busybox"}]},
            }),
        )
        .await;
        accounts
            .delete("ghost", &DeleteParams::default())
            .await
            .expect("delete ghost");
        let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "nosa"},
                             "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}});
        pods.create_subresource::<serde_json::Value, serde_json::Value>(
            "binding",
            "nosa",
            &PostParams::default(),
            &binding,
        )
        .await
        .expect("bind nosa");
        assert_eq!(
            failed_mount(&api, "nosa").await,
            "MountVolume.SetUp failed for volume \"token\" : failed to fetch token: serviceaccounts \"ghost\" not found"
        );
        eventually("waits to run once its ConfigMap exists", || {
            in_phase(&pods, "waits", "Succeeded")
        })
        .await;

        // deletion tears the volumes down: the secret's tmpfs unmounted, the pod dir removed
        assert!(pod_dir.join("volumes/kubernetes.io~secret/sec").exists());
        pods.delete("files", &DeleteParams::default())
            .await
            .expect("delete");
        eventually("files' volumes to be torn down", || async {
            let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
            (!pod_dir.exists() && !mounts.contains(&uid)).then_some(())
        })
        .await;
        for name in ["waits", "follows", "nosa", "hostnet"] {
            pods.delete(name, &DeleteParams::default())
                .await
                .expect("delete");
        }
    });
}
