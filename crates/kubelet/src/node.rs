//! The kubelet's Node: the object it registers (capacity and allocatable from the host, addresses,
//! nodeInfo, conditions), its status posted on change or every 5 minutes, and the Lease in
//! `kube-node-lease` renewed every 10 seconds (upstream's split between the cheap heartbeat and
//! the full status).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::host::HostInfo;
use crate::kubelet_config::{self, KubeletConfiguration, Signal, Threshold};

/// Upstream's kubelet version string for this API level.
pub const KUBELET_VERSION: &str = "v1.33.0-skiff";
/// How often the Lease is renewed (upstream: 10 s, a quarter of its 40 s duration).
pub const LEASE_RENEW: Duration = Duration::from_secs(10);
/// The Lease duration (upstream's `nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: i32 = 40;
/// How often the full status is posted when nothing changed (upstream's
/// `nodeStatusReportFrequency`).
pub const STATUS_REPORT: Duration = Duration::from_secs(300);
/// How often the host is re-read to notice a change (upstream's `nodeStatusUpdateFrequency`).
pub const STATUS_CHECK: Duration = Duration::from_secs(10);

/// What the node keeps back from pods, as upstream's `GetNodeAllocatableReservation`:
/// `kubeReserved` and `systemReserved`, and the hard eviction thresholds of
/// `memory.available` (from memory) and `nodefs.available` (from ephemeral storage); and how
/// many pods it takes (`maxPods`, its `pods` capacity).
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub max_pods: u32,
    /// `kubeReserved` plus `systemReserved`, by resource.
    pub reserved: BTreeMap<String, skiff_apimachinery::quantity::Quantity>,
    pub hard_eviction: Vec<Threshold>,
}

impl Reservation {
    /// The reservation the kubelet's settings make.
    pub fn of(settings: &KubeletConfiguration) -> Result<Reservation, kubelet_config::Error> {
        Ok(Reservation {
            max_pods: settings.max_pods,
            reserved: settings.reserved()?,
            hard_eviction: settings
                .eviction_thresholds()?
                .into_iter()
                .filter(Threshold::is_hard)
                .collect(),
        })
    }

    /// What is kept back of `resource` from `capacity` (in its units; CPU in millicores).
    fn of_resource(&self, resource: &str, capacity: i64) -> i64 {
        let reserved = self.reserved.get(resource).map_or(0, |q| {
            if resource == "cpu" {
                q.milli_value()
            } else {
                q.value()
            }
        });
        let signal = match resource {
            "memory" => Some(Signal::MemoryAvailable),
            "ephemeral-storage" => Some(Signal::NodeFsAvailable),
            _ => None,
        };
        let eviction: i64 = self
            .hard_eviction
            .iter()
            .filter(|t| Some(t.signal) == signal)
            .map(|t| t.value.amount(capacity))
            .sum();
        reserved + eviction
    }
}

impl Default for Reservation {
    /// Upstream's defaults: 110 pods, nothing reserved, the default hard thresholds.
    fn default() -> Self {
        Reservation::of(&KubeletConfiguration::default()).expect("upstream's defaults are valid")
    }
}

/// The node's allocatable: each resource of `capacity` less what `reservation` keeps back of
/// it, never below zero, in the capacity's format (upstream's node status setter).
pub fn allocatable(
    capacity: &BTreeMap<String, Quantity>,
    reservation: &Reservation,
) -> BTreeMap<String, Quantity> {
    use skiff_apimachinery::quantity::{Quantity as Parsed, format_canonical};
    capacity
        .iter()
        .map(|(resource, q)| {
            let Ok(parsed) = Parsed::parse(&q.0) else {
                return (resource.clone(), q.clone());
            };
            let (have, unit) = if resource == "cpu" {
                (parsed.milli_value(), 1_000_000)
            } else {
                (parsed.value(), 1_000_000_000)
            };
            let kept = reservation.of_resource(resource, have);
            if kept == 0 {
                return (resource.clone(), q.clone());
            }
            let left = i128::from((have - kept).max(0)) * unit;
            let text = format_canonical(left, parsed.format());
            (resource.clone(), Quantity(text))
        })
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading node {node}: {source}")]
    Read {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("waiting for node {node} to be given spec.podCIDR: {source}")]
    AwaitPodCidr {
        node: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
    #[error("registering node {node}: {source}")]
    Register {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("updating the status of node {node}: {source}")]
    Status {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("renewing lease kube-node-lease/{node}: {source}")]
    Lease {
        node: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `spec.podCIDR` the Node already has (set by node-ipam or an earlier run), if it exists.
pub async fn assigned_pod_cidr(nodes: &Api<Node>, name: &str) -> Result<Option<String>> {
    let existing = nodes.get_opt(name).await.map_err(|source| Error::Read {
        node: name.to_string(),
        source,
    })?;
    Ok(existing.and_then(|n| n.spec).and_then(|s| s.pod_cidr))
}

/// Creates the Node, without a pod range, if it does not exist, then waits until node-ipam gives
/// it `spec.podCIDR` (as upstream's kubelet and k3s's agent wait before pods get a network); the
/// full registration with the node's status follows once the runtime is up.
pub async fn await_pod_cidr(nodes: &Api<Node>, name: &str) -> Result<String> {
    let placeholder = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), name.to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
            ])),
            ..Default::default()
        },
        ..Default::default()
    };
    match nodes.create(&PostParams::default(), &placeholder).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(source) => {
            return Err(Error::Register {
                node: name.into(),
                source,
            });
        }
    }
    tracing::info!(
        node = name,
        "waiting for node-ipam to give the node spec.podCIDR"
    );
    let has_cidr = |node: Option<&Node>| {
        node.and_then(|n| n.spec.as_ref())
            .and_then(|s| s.pod_cidr.as_ref())
            .is_some()
    };
    let node = kube::runtime::wait::await_condition(nodes.clone(), name, has_cidr)
        .await
        .map_err(|source| Error::AwaitPodCidr {
            node: name.into(),
            source,
        })?;
    Ok(node
        .and_then(|n| n.spec)
        .and_then(|s| s.pod_cidr)
        .unwrap_or_default())
}

/// The node's status from what the host and the runtime report (its allocatable what
/// `reservation` leaves of the capacity), with the port the kubelet server listens on
/// (`daemonEndpoints`, where the API server reaches it). Conditions carry `now` as their
/// heartbeat and transition time.
pub fn node_status(
    host: &HostInfo,
    reservation: &Reservation,
    runtime_version: &str,
    kubelet_port: u16,
    now: Timestamp,
) -> NodeStatus {
    let capacity = BTreeMap::from([
        ("cpu".to_string(), Quantity(host.cpus.to_string())),
        (
            "memory".to_string(),
            Quantity(format!("{}Ki", host.memory_bytes / 1024)),
        ),
        (
            "pods".to_string(),
            Quantity(reservation.max_pods.to_string()),
        ),
        (
            "ephemeral-storage".to_string(),
            Quantity(format!("{}Ki", host.ephemeral_storage_bytes / 1024)),
        ),
    ]);
    let allocatable = allocatable(&capacity, reservation);
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    NodeStatus {
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: host.ip.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: host.hostname.clone(),
            },
        ]),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(kubelet_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: match std::env::consts::ARCH {
                "x86_64" => "amd64".into(),
                "aarch64" => "arm64".into(),
                other => other.into(),
            },
            boot_id: host.boot_id.clone(),
            container_runtime_version: runtime_version.into(),
            kernel_version: host.kernel_version.clone(),
            kube_proxy_version: String::new(),
            kubelet_version: KUBELET_VERSION.into(),
            machine_id: host.machine_id.clone(),
            operating_system: "linux".into(),
            os_image: host.os_image.clone(),
            system_uuid: host.system_uuid.clone(),
            swap: None,
        }),
        ..Default::default()
    }
}

/// How many images the node reports, largest first (upstream's `nodeStatusMaxImages`).
pub const MAX_IMAGES: usize = 50;

/// The node's `status.images` from the runtime's images: names are repo tags and digests.
pub fn node_images(images: &[crate::cri::Image]) -> Vec<ContainerImage> {
    let mut sorted: Vec<&crate::cri::Image> = images.iter().collect();
    sorted.sort_by_key(|i| std::cmp::Reverse(i.size));
    sorted
        .into_iter()
        .take(MAX_IMAGES)
        .map(|i| ContainerImage {
            names: Some(i.repo_tags.iter().chain(&i.repo_digests).cloned().collect()),
            size_bytes: i64::try_from(i.size).ok(),
        })
        .collect()
}

/// Whether two statuses differ in anything but heartbeat and transition times.
pub fn status_changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
            c.last_transition_time = None;
        }
        s
    };
    strip(old) != strip(new)
}

/// Carries each condition's transition time over from `old` when its status did not change.
pub fn keep_transition_times(old: &NodeStatus, new: &mut NodeStatus) {
    for c in new.conditions.iter_mut().flatten() {
        if let Some(prev) = old
            .conditions
            .iter()
            .flatten()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
        {
            c.last_transition_time = prev.last_transition_time.clone();
        }
    }
}

/// The Node object registered when none exists.
pub fn node_object(name: &str, host: &HostInfo, pod_cidr: &str, status: NodeStatus) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), name.to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                (
                    "kubernetes.io/arch".to_string(),
                    status
                        .node_info
                        .as_ref()
                        .map(|i| i.architecture.clone())
                        .unwrap_or_default(),
                ),
            ])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(pod_cidr.into()),
            pod_cidrs: Some(vec![pod_cidr.into()]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            addresses: status.addresses.clone().or_else(|| {
                Some(vec![NodeAddress {
                    type_: "Hostname".into(),
                    address: host.hostname.clone(),
                }])
            }),
            ..status
        }),
    }
}

/// Creates the Node, or posts a fresh status if it exists (a restarted kubelet); returns the
/// Node as stored.
pub async fn register(nodes: &Api<Node>, node: Node) -> Result<Node> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let err = |source| Error::Register {
        node: name.clone(),
        source,
    };
    match nodes.get_opt(&name).await.map_err(err)? {
        None => nodes
            .create(&PostParams::default(), &node)
            .await
            .map_err(err),
        Some(existing) => {
            ensure_annotations(nodes, &existing, node.metadata.annotations.as_ref()).await?;
            let mut status = node.status.unwrap_or_default();
            if let Some(old) = &existing.status {
                keep_transition_times(old, &mut status);
            }
            post_status(nodes, &name, &status).await
        }
    }
}

/// Sets the annotations the kubelet owns (`wanted`) on an existing Node where they differ,
/// as upstream's kubelet reconciles its Node on restart (a new data dir moves the local-path
/// directory).
async fn ensure_annotations(
    nodes: &Api<Node>,
    existing: &Node,
    wanted: Option<&BTreeMap<String, String>>,
) -> Result<()> {
    let name = existing.metadata.name.clone().unwrap_or_default();
    let have = existing.metadata.annotations.clone().unwrap_or_default();
    let differ: BTreeMap<&String, &String> = wanted
        .into_iter()
        .flatten()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .collect();
    if differ.is_empty() {
        return Ok(());
    }
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": differ}})),
        )
        .await
        .map_err(|source| Error::Register {
            node: name.clone(),
            source,
        })?;
    Ok(())
}

/// Writes the node's status (merge patch on `nodes/{name}/status`).
pub async fn post_status(nodes: &Api<Node>, name: &str, status: &NodeStatus) -> Result<Node> {
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map_err(|source| Error::Status {
            node: name.into(),
            source,
        })
}

/// The node's Lease as it should be after a renewal at `now`.
pub fn lease_object(node: &Node, now: Timestamp) -> Lease {
    let name = node.metadata.name.clone().unwrap_or_default();
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some("kube-node-lease".into()),
            owner_references: node.metadata.uid.as_ref().map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.clone(),
                    uid: uid.clone(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Creates the Lease, or renews it: a replace of `latest` (the Lease as last written, kept
/// between renewals), falling back to a read when there is none or it is stale, as upstream's
/// lease controller does, so a renewal is one request, not two.
pub async fn renew_lease(
    leases: &Api<Lease>,
    node: &Node,
    latest: &mut Option<Lease>,
    now: Timestamp,
) -> Result<()> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let err = |source| Error::Lease {
        node: name.clone(),
        source,
    };
    // the renewed Lease over the metadata (resourceVersion) of the one it replaces
    let renewed = |meta: ObjectMeta| {
        let mut lease = lease_object(node, now);
        lease.metadata = ObjectMeta {
            owner_references: lease.metadata.owner_references.take(),
            ..meta
        };
        lease
    };
    let params = PostParams::default();
    if let Some(previous) = latest.take() {
        match leases
            .replace(&name, &params, &renewed(previous.metadata))
            .await
        {
            Ok(written) => {
                *latest = Some(written);
                return Ok(());
            }
            Err(e) => tracing::debug!(error = %e, "renewing the lease as last written; reading it"),
        }
    }
    let written = match leases.get_opt(&name).await.map_err(err)? {
        None => leases.create(&params, &lease_object(node, now)).await,
        Some(existing) => {
            leases
                .replace(&name, &params, &renewed(existing.metadata))
                .await
        }
    };
    *latest = Some(written.map_err(err)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostInfo {
        HostInfo {
            hostname: "h1".into(),
            ip: "10.0.0.5".parse().unwrap(),
            cpus: 2,
            memory_bytes: 4 * 1024 * 1024 * 1024,
            ephemeral_storage_bytes: 100 * 1024 * 1024 * 1024,
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            machine_id: "m".into(),
            system_uuid: "u".into(),
            boot_id: "b".into(),
        }
    }

    #[test]
    fn capacity_comes_from_the_host_and_allocatable_keeps_back_the_default_eviction_thresholds() {
        let status = node_status(
            &host(),
            &Reservation::default(),
            "containerd://1.6.20",
            10250,
            Timestamp::UNIX_EPOCH,
        );
        let cap = status.capacity.unwrap();
        let alloc = status.allocatable.unwrap();
        assert_eq!(cap["cpu"].0, "2");
        assert_eq!(cap["memory"].0, "4194304Ki");
        // less the default hard eviction threshold memory.available<100Mi
        assert_eq!(alloc["memory"].0, "3996Mi");
        assert_eq!(cap["pods"].0, "110");
        let info = status.node_info.unwrap();
        assert_eq!(info.container_runtime_version, "containerd://1.6.20");
        assert_eq!(info.kubelet_version, KUBELET_VERSION);
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        assert_eq!(status.addresses.unwrap()[0].address, "10.0.0.5");
        let endpoint = status.daemon_endpoints.unwrap().kubelet_endpoint.unwrap();
        assert_eq!(endpoint.port, 10250);
    }

    #[test]
    fn allocatable_is_capacity_less_reserved_and_hard_eviction_thresholds_with_max_pods() {
        let mut settings = KubeletConfiguration {
            max_pods: 20,
            kube_reserved: kubelet_config::parse_pairs_flag("cpu=100m,memory=100Mi").unwrap(),
            system_reserved: kubelet_config::parse_pairs_flag(
                "cpu=200m,memory=156Mi,ephemeral-storage=1Gi",
            )
            .unwrap(),
            ..Default::default()
        };
        settings.eviction_hard =
            kubelet_config::parse_threshold_flag("memory.available<500Mi,nodefs.available<10%")
                .unwrap();
        // a soft threshold keeps nothing back
        settings.eviction_soft =
            kubelet_config::parse_threshold_flag("memory.available<1Gi").unwrap();
        settings.eviction_soft_grace_period =
            kubelet_config::parse_pairs_flag("memory.available=1m").unwrap();
        let reservation = Reservation::of(&settings).unwrap();
        let status = node_status(
            &host(),
            &reservation,
            "containerd://1.6.20",
            10250,
            Timestamp::UNIX_EPOCH,
        );
        let cap = status.capacity.unwrap();
        let alloc = status.allocatable.unwrap();
        assert_eq!(cap["pods"].0, "20");
        assert_eq!(alloc["pods"].0, "20");
        assert_eq!(alloc["cpu"].0, "1700m");
        // 4Gi - 100Mi - 156Mi - 500Mi
        assert_eq!(alloc["memory"].0, "3340Mi");
        // 100Gi - 1Gi - 10% of 100Gi, as upstream's float32 percentage truncates it
        let expected =
            (100i64 << 30) - (1 << 30) - ((100i64 << 30) as f64 * f64::from(0.1f32)) as i64;
        assert_eq!(alloc["ephemeral-storage"].0, expected.to_string());

        // more reserved than there is: none left
        settings.system_reserved = kubelet_config::parse_pairs_flag("cpu=3").unwrap();
        let reservation = Reservation::of(&settings).unwrap();
        let alloc = allocatable(
            &BTreeMap::from([("cpu".to_string(), Quantity("2".into()))]),
            &reservation,
        );
        assert_eq!(alloc["cpu"].0, "0");
    }

    #[test]
    fn a_heartbeat_alone_is_not_a_change_but_new_capacity_is() {
        let old = node_status(
            &host(),
            &Reservation::default(),
            "containerd://1.6.20",
            10250,
            Timestamp::UNIX_EPOCH,
        );
        let later = Timestamp::from_second(60).unwrap();
        let mut new = node_status(
            &host(),
            &Reservation::default(),
            "containerd://1.6.20",
            10250,
            later,
        );
        assert!(!status_changed(&old, &new));
        keep_transition_times(&old, &mut new);
        let ready = new.conditions.as_ref().unwrap().last().unwrap();
        assert_eq!(
            ready.last_transition_time,
            Some(Time(Timestamp::UNIX_EPOCH))
        );
        assert_eq!(ready.last_heartbeat_time, Some(Time(later)));
        let bigger = HostInfo { cpus: 4, ..host() };
        assert!(status_changed(
            &old,
            &node_status(
                &bigger,
                &Reservation::default(),
                "containerd://1.6.20",
                10250,
                later
            )
        ));
    }

    #[test]
    fn images_are_reported_largest_first_with_tags_and_digests() {
        let image = |tag: &str, size| crate::cri::Image {
            repo_tags: vec![tag.into()],
            repo_digests: vec![format!("{tag}@sha256:0")],
            size,
            ..Default::default()
        };
        let images = node_images(&[image("small", 10), image("big", 1000)]);
        assert_eq!(
            images[0].names.as_deref().unwrap(),
            ["big".to_string(), "big@sha256:0".to_string()]
        );
        assert_eq!(images[1].size_bytes, Some(10));
    }

    #[test]
    fn the_lease_is_held_by_the_node_and_owned_by_it() {
        let mut node = node_object("n1", &host(), "10.42.0.0/24", NodeStatus::default());
        node.metadata.uid = Some("uid-1".into());
        let lease = lease_object(&node, Timestamp::UNIX_EPOCH);
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("n1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(lease.metadata.owner_references.unwrap()[0].uid, "uid-1");
        assert_eq!(node.spec.unwrap().pod_cidr.as_deref(), Some("10.42.0.0/24"));
    }
}
