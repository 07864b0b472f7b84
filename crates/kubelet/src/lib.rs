//! Skiff's kubelet: the last hop of the seeds' chain. It registers its Node, keeps a Lease,
//! watches only its own pods through the API server and runs them through containerd's CRI,
//! writing their status back.
//!
//! # Layout
//! - [`kubelet`]: the main loop: runtime start, node registration, heartbeats, the pod watch
//!   and one worker per pod.
//! - [`kubelet_config`]: upstream's `KubeletConfiguration` (the `--config` file), its
//!   defaults and checks, and the eviction thresholds it sets.
//! - [`pod_workers`]: the pod watch, admission, and one worker per pod.
//! - [`pleg`]: the runtime relisted once a second; the pods whose containers changed are
//!   synced.
//! - [`pod_sync`]: one sync of one pod (sandbox, images, containers, restarts, deletion).
//! - [`pod_setup`]: what a pod needs before its containers (volumes, DNS, /etc/hosts).
//! - [`pod_containers`]: one container's image pull, create and start.
//! - [`pod_probes`]: running a pod's due probes and acting on failures.
//! - [`pod_resize`]: in-place pod resize during a sync: judging a resize, carrying it out on
//!   the running containers and the pod cgroup, its conditions and event.
//! - [`pod_kill`]: stopping and removing a pod's containers and sandboxes.
//! - [`container_gc`]: dead container and sandbox garbage collection, and the removal of
//!   containers, sandboxes and their logs.
//! - [`admission`]: whether a pod bound to this node can run here (pressure, resources,
//!   affinity, ports, NoExecute taints), and rejecting it as upstream does.
//! - [`eviction`]: the eviction manager: the node's signals against the eviction thresholds,
//!   the pressure conditions, and pods evicted one at a time.
//! - [`actions`]: what a sync should do, without I/O (init order, restarts, back-off).
//! - [`ephemeral`]: ephemeral containers (`kubectl debug`): run once as containers, in their
//!   target's process namespace.
//! - [`allocation`]: what was allocated to each pod (the resources its containers run with),
//!   checkpointed in the data dir, and the pods' resize conditions.
//! - [`resize`]: in-place pod resize without I/O: whether a resize fits, the order of its
//!   steps, the resources a container status reports.
//! - [`config`]: the CRI sandbox and container configs from the pod's spec.
//! - [`security_context`]: the pod's and containers' securityContext as CRI security contexts
//!   (users, groups, capabilities, seccomp, AppArmor, namespaces), and `runAsNonRoot`.
//! - [`sysctl`]: the sysctls a pod may set (safe ones, `--allowed-unsafe-sysctls`) at
//!   admission.
//! - [`env`]: a container's environment (values, field refs, ConfigMaps, Secrets, resources).
//! - [`expansion`]: `$(VAR)` references in env values, commands and args.
//! - [`resource_field`]: the downward API's `resourceFieldRef` (requests, limits, divisors).
//! - [`volumes`]: pod volumes (emptyDir, hostPath, configMap, secret, downwardAPI, projected,
//!   persistentVolumeClaim),
//!   their atomic writer, the pod's fsGroup on them, service account tokens and the
//!   containers' mounts.
//! - [`etc_hosts`]: the pod's managed /etc/hosts.
//! - [`dns`]: the sandbox's DNS config from dnsPolicy, dnsConfig and `--cluster-dns`.
//! - [`hooks`]: postStart and preStop hooks.
//! - [`probe`]: startup, liveness and readiness probes (exec, tcpSocket, httpGet).
//! - [`static_pods`]: pods from a manifest directory, kept as mirror pods in the API.
//! - [`status`]: pod status from CRI state, without I/O.
//! - [`qos`]: containers' `oom_score_adj` from their pod's QoS class.
//! - [`cgroups`]: pod cgroups in upstream's QoS hierarchy (`kubepods`, `burstable`,
//!   `besteffort`, `pod<uid>`) with the cgroupfs driver, on cgroup v1 or v2.
//! - [`node`]: the Node object, its status and its Lease.
//! - [`heartbeat`]: the Lease renewal and status posting loop, jittered.
//! - [`host`]: facts about this machine for the Node.
//! - [`fs_stats`]: a filesystem's size, free space and inodes (`statvfs`).
//! - [`log_rotation`]: container log rotation (rename, reopen, compress, prune) and a
//!   container's log files in order.
//! - [`image_gc`]: image garbage collection (thresholds, ages, least recently used first),
//!   and freeing disk for the eviction manager.
//! - [`cri`]: the [`cri::ContainerRuntime`] trait and its CRI client over a unix socket.
//! - [`fake`]: a recording fake runtime for tests.
//! - [`hollow`]: hollow kubelets: many simulated nodes in one process, the real node and
//!   pod code against the hollow runtime.
//! - [`hollow_ipam`]: hollow nodes' pod CIDRs and pod IPs.
//! - [`hollow_runtime`]: the in-memory runtime of hollow nodes (pod IPs from the node's
//!   CIDR, startup delay, failure mix).
//! - [`server`]: the HTTPS server on port 10250: health, pods, metrics, container logs, and
//!   exec, attach and port-forward proxied to the runtime's streaming server; clients
//!   authenticated and authorized through the API server's TokenReview and SubjectAccessReview.
//! - [`stats`]: the Summary API (`/stats/summary`) and resource metrics (`/metrics/resource`):
//!   the node's and pods' CPU, memory, network and filesystems from cgroups, `/proc` and CRI.
//! - [`api`]: pod writes through the API server behind a trait, with a recording fake.
//! - [`credentials`]: registry credentials from a pod's `imagePullSecrets`.
//! - [`containerd`]: managed containerd (config, supervision).
//! - [`cleanup`]: what a node leaves on the host once its agent is gone (pods' processes,
//!   network state, mounts), removed (`skiff killall`).
//! - [`podnet`]: the pod network across nodes (flannel's vxlan and host-gw backends) and
//!   masquerading out of the cluster.
//! - [`podnet_runner`]: the `ip`/`iptables` commands the pod network runs, with a recording fake.
//! - [`images`]: the built-in pause and busybox images and image import.
//! - [`local_path`]: this node's local-path directory (published on its Node) and the deletion
//!   of its released local-path volumes.

pub mod actions;
pub mod admission;
pub mod allocation;
pub mod api;
pub mod cgroups;
pub mod cleanup;
pub mod config;
pub mod container_gc;
pub mod containerd;
pub mod credentials;
pub mod cri;
pub mod dns;
pub mod env;
pub mod ephemeral;
pub mod etc_hosts;
pub mod eviction;
pub mod expansion;
pub mod fake;
pub mod fs_stats;
pub mod heartbeat;
pub mod hollow;
pub mod hollow_ipam;
pub mod hollow_runtime;
pub mod hooks;
pub mod host;
pub mod image_gc;
pub mod images;
pub mod kubelet;
pub mod kubelet_config;
pub mod local_path;
pub mod log_rotation;
pub mod node;
pub mod pleg;
pub mod pod_containers;
pub mod pod_kill;
pub mod pod_probes;
pub mod pod_resize;
pub mod pod_setup;
pub mod pod_sync;
pub mod pod_workers;
pub mod podnet;
pub mod podnet_runner;
pub mod probe;
pub mod qos;
pub mod resize;
pub mod resource_field;
pub mod security_context;
pub mod server;
pub mod static_pods;
pub mod stats;
pub mod status;
pub mod sysctl;
pub mod volumes;
pub mod watched;

pub use kubelet::{Config, FlannelBackend, Kubelet, Ready};
pub use kubelet_config::KubeletConfiguration;
