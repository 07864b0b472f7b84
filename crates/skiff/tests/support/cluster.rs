//! The rest of a cluster around a test's [`ApiServer`], each a real `skiff` child process killed
//! when dropped: the controller manager, the scheduler, and hollow kubelets (nodes that run pods
//! in memory, so that controllers see pods become Running without containerd). Each runs with
//! upstream's identity for it ([`identity`] makes the kubeconfigs) except the hollow nodes, which
//! share one admin client.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;

use super::{ApiServer, spawn_until_ready};

/// A `skiff` child process, killed on drop.
pub struct Process {
    child: Child,
    /// Its first stdout line (containing `ready`).
    pub ready: String,
    _lines: mpsc::Receiver<String>,
}

impl Process {
    /// Starts `skiff <args…> --kubeconfig <api's>` with its stderr in `<data dir>/<log>.log`.
    pub fn start(api: &ApiServer, log: &str, args: &[&str]) -> Process {
        Process::start_as(api, &api.kubeconfig(), log, args)
    }

    /// Starts `skiff <args…> --kubeconfig <kubeconfig>` (another identity than the admin's).
    pub fn start_as(api: &ApiServer, kubeconfig: &Path, log: &str, args: &[&str]) -> Process {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_skiff"));
        cmd.args(args).arg("--kubeconfig").arg(kubeconfig);
        Process::spawn(&mut cmd, &api.data_dir.join(format!("{log}.log")))
    }

    /// Starts `cmd` (which runs a `skiff` command) with its stderr in `log`, once it is ready.
    pub fn spawn(cmd: &mut Command, log: &Path) -> Process {
        let (child, ready, lines) = spawn_until_ready(cmd, log);
        Process {
            child,
            ready,
            _lines: lines,
        }
    }

    /// The `host:port` its ready line gives after `marker` (`"metrics http://"`).
    pub fn address_after(&self, marker: &str) -> String {
        self.ready
            .split(marker)
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no {marker} address in {:?}", self.ready))
            .to_string()
    }

    /// Kills it (SIGKILL) as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A busybox shell script: httpd on 8080 whose CGI `/cgi-bin/name` answers with the pod's name.
pub const NAME_SERVER: &str = r#"mkdir -p /www/cgi-bin && printf '#!/bin/sh\necho Content-Type: text/plain\necho\nhostname\n' > /www/cgi-bin/name && chmod +x /www/cgi-bin/name && exec httpd -f -p 8080 -h /www"#;

/// The default StorageClass `local-path` as `skiff server` applies it (k3s's `local-storage`
/// manifest with Skiff's provisioner).
pub fn local_path_class() -> serde_json::Value {
    use skiff_controllers::localpath::{CLASS, PROVISIONER};
    serde_json::json!({
        "metadata": {"name": CLASS,
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    })
}

/// The default IngressClass `skiff` as `skiff server` applies it.
pub fn ingress_class() -> serde_json::Value {
    use skiff_ingress::config::{CLASS, CONTROLLER, DEFAULT_CLASS_ANNOTATION};
    serde_json::json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "spec": {"controller": CONTROLLER},
    })
}

/// `skiff controller-manager` with extra flags (e.g. `--controllers`), as
/// `system:kube-controller-manager` with `--use-service-account-credentials`: each controller
/// acts as its ServiceAccount under upstream's `system:controller:*` role. Its metrics are on a
/// free port, named in its ready line (`metrics http://<addr>/metrics`).
pub fn controller_manager(api: &ApiServer, args: &[&str]) -> Process {
    let mut all = vec![
        "controller-manager",
        "--use-service-account-credentials=true",
        "--metrics-bind-address",
        "127.0.0.1:0",
    ];
    all.extend_from_slice(args);
    Process::start_as(
        api,
        &identity(api, "system:kube-controller-manager", None),
        "controller-manager",
        &all,
    )
}

/// `skiff scheduler` as `system:kube-scheduler`, its metrics on a free port.
pub fn scheduler(api: &ApiServer) -> Process {
    Process::start_as(
        api,
        &identity(api, "system:kube-scheduler", None),
        "scheduler",
        &["scheduler", "--metrics-bind-address", "127.0.0.1:0"],
    )
}

/// `count` hollow nodes named `<prefix>-0…`, their data under the API server's data dir. They
/// share one client and so one identity, the admin's: a `system:node:<name>` certificate each
/// would need a client (and connection pool) per node.
pub fn hollow_nodes(api: &ApiServer, prefix: &str, count: usize) -> Process {
    hollow_nodes_with(api, prefix, count, &[])
}

/// [`hollow_nodes`] with more `skiff kubelet --hollow` arguments.
pub fn hollow_nodes_with(api: &ApiServer, prefix: &str, count: usize, args: &[&str]) -> Process {
    let dir = api.data_dir.join(format!("hollow-{prefix}"));
    let count = count.to_string();
    let mut all = vec![
        "kubelet",
        "--data-dir",
        dir.to_str().expect("utf-8 path"),
        "--hollow",
        "--count",
        &count,
        "--node-name-prefix",
        prefix,
    ];
    all.extend_from_slice(args);
    Process::start(api, &format!("hollow-{prefix}"), &all)
}

/// A kubeconfig for a client certificate CN=`user`, O=`group` from the cluster's CA.
pub fn identity(api: &ApiServer, user: &str, group: Option<&str>) -> PathBuf {
    identity_at(api, user, group, "127.0.0.1", "")
}

/// [`identity`] reaching the API server's port at `server`, written as
/// `<user><suffix>.kubeconfig`.
pub fn identity_at(
    api: &ApiServer,
    user: &str,
    group: Option<&str>,
    server: &str,
    suffix: &str,
) -> PathBuf {
    let pki = skiff_apiserver::pki::Pki::load(&api.data_dir.join("tls")).expect("the cluster CA");
    let path = api
        .data_dir
        .join(format!("{}{suffix}.kubeconfig", user.replace(':', "-")));
    pki.write_kubeconfig(
        &path,
        &format!("https://{server}:{}", api.port),
        user,
        group,
    )
    .expect("write the kubeconfig");
    path
}

/// CoreDNS's ClusterRole (its deployment manifest's `system:coredns`) bound to the
/// `kube-system/kube-dns` ServiceAccount, which `skiff dns` runs as: upstream's bootstrap
/// `system:kube-dns` role has no EndpointSlices.
pub fn grant_coredns_role(api: &ApiServer) {
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "system:coredns"},
             "rules": [
                {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                 "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                 "verbs": ["list", "watch"]},
             ]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "system:coredns"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "system:coredns"},
             "subjects": [{"kind": "ServiceAccount", "name": "kube-dns",
                           "namespace": "kube-system"}]},
        ],
    });
    api.kubectl_stdin(
        super::KUBECTL_133,
        &["create", "-f", "-"],
        Some(&manifest.to_string()),
    );
}
