//! Builders for the pods and nodes that plugin tables and scheduler tests are written with:
//! `PodBuilder::new("web").container("c", &[("cpu", "100m")]).label("app", "web").build()`,
//! `node("n1").cpu("4").memory("8Gi").label("zone", "a").build()`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerImage, ContainerPort, Node, NodeSpec, NodeStatus,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, ResourceRequirements, Taint, Toleration,
    Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::types::{NodeInfo, PodInfo, Snapshot};

fn quantities(list: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn container(name: &str, requests: &[(&str, &str)]) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        resources: (!requests.is_empty()).then(|| ResourceRequirements {
            requests: Some(quantities(requests)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Builds a pod in namespace `default` unless told otherwise.
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    pub fn new(name: &str) -> PodBuilder {
        PodBuilder {
            pod: Pod {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("default".into()),
                    uid: Some(format!("uid-{name}")),
                    ..Default::default()
                },
                spec: Some(PodSpec::default()),
                status: None,
            },
        }
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn container(mut self, name: &str, requests: &[(&str, &str)]) -> Self {
        self.spec().containers.push(container(name, requests));
        self
    }

    pub fn init_container(mut self, name: &str, requests: &[(&str, &str)]) -> Self {
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(container(name, requests));
        self
    }

    /// An init container with `restartPolicy: Always`.
    pub fn sidecar(mut self, name: &str, requests: &[(&str, &str)]) -> Self {
        let mut c = container(name, requests);
        c.restart_policy = Some("Always".into());
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(c);
        self
    }

    /// A TCP host port on the first container (added if there is none).
    pub fn host_port(mut self, port: i32) -> Self {
        let spec = self.spec();
        if spec.containers.is_empty() {
            spec.containers.push(container("c", &[]));
        }
        spec.containers[0]
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                protocol: Some("TCP".into()),
                ..Default::default()
            });
        self
    }

    pub fn image(mut self, image: &str) -> Self {
        let spec = self.spec();
        if spec.containers.is_empty() {
            spec.containers.push(container("c", &[]));
        }
        spec.containers[0].image = Some(image.into());
        self
    }

    pub fn node_name(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    pub fn scheduler_name(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.into());
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.spec().priority = Some(priority);
        self
    }

    /// `status.startTime`, `seconds` after the epoch.
    pub fn started_at(mut self, seconds: i64) -> Self {
        let start = jiff::Timestamp::from_second(seconds).expect("a valid time");
        self.pod
            .status
            .get_or_insert_with(Default::default)
            .start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(start));
        self
    }

    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn toleration(mut self, t: Toleration) -> Self {
        self.spec().tolerations.get_or_insert_with(Vec::new).push(t);
        self
    }

    pub fn affinity(mut self, affinity: Affinity) -> Self {
        self.spec().affinity = Some(affinity);
        self
    }

    /// `spec.schedulingGates` with these names.
    pub fn scheduling_gates(mut self, names: &[&str]) -> Self {
        self.spec().scheduling_gates = Some(
            names
                .iter()
                .map(|n| k8s_openapi::api::core::v1::PodSchedulingGate {
                    name: n.to_string(),
                })
                .collect(),
        );
        self
    }

    /// Any other change to the spec.
    /// A `persistentVolumeClaim` volume per claim, each named after its claim.
    pub fn claims(mut self, claims: &[&str]) -> Self {
        let volumes = self.spec().volumes.get_or_insert_with(Vec::new);
        volumes.extend(claims.iter().map(|c| Volume {
            name: c.to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: c.to_string(),
                read_only: None,
            }),
            ..Default::default()
        }));
        self
    }

    pub fn with_spec(mut self, f: impl FnOnce(&mut PodSpec)) -> Self {
        f(self.spec());
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }

    pub fn info(self) -> Arc<PodInfo> {
        Arc::new(PodInfo::new(Arc::new(self.pod)))
    }
}

/// Starts a node with 110 allocatable pods and nothing else.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder {
        node: Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some(quantities(&[("pods", "110")])),
                ..Default::default()
            }),
        },
    }
}

/// Builds a node (see [`node`]).
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    fn allocatable(mut self, name: &str, q: &str) -> Self {
        self.node
            .status
            .get_or_insert_with(Default::default)
            .allocatable
            .get_or_insert_with(Default::default)
            .insert(name.into(), Quantity(q.into()));
        self
    }

    pub fn cpu(self, q: &str) -> Self {
        self.allocatable("cpu", q)
    }

    pub fn memory(self, q: &str) -> Self {
        self.allocatable("memory", q)
    }

    pub fn pods(self, q: &str) -> Self {
        self.allocatable("pods", q)
    }

    /// Any allocatable resource (`ephemeral-storage`, `example.com/gpu`).
    pub fn resource(self, name: &str, q: &str) -> Self {
        self.allocatable(name, q)
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.into(), value.into());
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(Taint {
                key: key.into(),
                value: (!value.is_empty()).then(|| value.into()),
                effect: effect.into(),
                time_added: None,
            });
        self
    }

    pub fn unschedulable(mut self) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }

    /// An image the node holds, with its size in bytes.
    pub fn image(mut self, name: &str, size: i64) -> Self {
        self.node
            .status
            .get_or_insert_with(Default::default)
            .images
            .get_or_insert_with(Vec::new)
            .push(ContainerImage {
                names: Some(vec![name.into()]),
                size_bytes: Some(size),
            });
        self
    }

    pub fn build(self) -> Node {
        self.node
    }

    /// A [`NodeInfo`] holding these pods.
    pub fn info(self, pods: &[Arc<PodInfo>]) -> NodeInfo {
        let mut info = NodeInfo::new(Arc::new(self.node));
        for p in pods {
            info.add_pod(p.clone());
        }
        info
    }
}

/// A snapshot of these nodes.
pub fn snapshot(nodes: Vec<NodeInfo>) -> Snapshot {
    Snapshot::new(nodes.into_iter().map(Arc::new).collect())
}
