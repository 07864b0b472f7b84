//! The CRI configs the kubelet asks for, from the pod's spec without I/O: the sandbox (metadata,
//! hostname, log directory, host ports, labels by which the kubelet finds it again, namespaces)
//! and each container (image, command, args, env, log path, labels, attempt).

use std::collections::HashMap;
use std::path::Path;

use k8s_cri::v1::{
    LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PortMapping, Protocol,
};
use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod};

use crate::cri::{
    ContainerConfig, ContainerMetadata, ImageSpec, KeyValue, PodSandboxConfig, PodSandboxMetadata,
};

/// Labels the kubelet puts on sandboxes and containers (upstream's names), by which it finds
/// them again.
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// The sandbox config of a pod; the same every time, as CreateContainer needs it too. Logs go
/// under `log_directory`.
pub fn sandbox_config(pod: &Pod, attempt: u32, log_directory: &Path) -> PodSandboxConfig {
    let m = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = m.namespace.clone().unwrap_or_else(|| "default".into());
    let name = m.name.clone().unwrap_or_default();
    let uid = m.uid.clone().unwrap_or_default();
    let mut labels: HashMap<String, String> =
        m.labels.clone().unwrap_or_default().into_iter().collect();
    labels.insert(LABEL_POD_UID.into(), uid.clone());
    labels.insert(LABEL_POD_NAME.into(), name.clone());
    labels.insert(LABEL_POD_NAMESPACE.into(), namespace.clone());
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => Protocol::Udp,
                Some("SCTP") => Protocol::Sctp,
                _ => Protocol::Tcp,
            } as i32,
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid,
            namespace,
            attempt,
        }),
        hostname: spec.hostname.clone().unwrap_or(name),
        log_directory: log_directory.display().to_string(),
        port_mappings,
        labels,
        annotations: m
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn container_config(
    pod: &Pod,
    container: &ApiContainer,
    image_ref: &str,
    attempt: u32,
) -> ContainerConfig {
    let m = &pod.metadata;
    let labels = HashMap::from([
        (LABEL_POD_UID.to_string(), m.uid.clone().unwrap_or_default()),
        (
            LABEL_POD_NAME.to_string(),
            m.name.clone().unwrap_or_default(),
        ),
        (
            LABEL_POD_NAMESPACE.to_string(),
            m.namespace.clone().unwrap_or_else(|| "default".into()),
        ),
        (LABEL_CONTAINER_NAME.to_string(), container.name.clone()),
    ]);
    let envs = container
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            e.value.as_ref().map(|v| KeyValue {
                key: e.name.clone(),
                value: v.clone(),
            })
        })
        .collect();
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: container.name.clone(),
            attempt,
        }),
        image: Some(ImageSpec {
            image: image_ref.into(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: container.command.clone().unwrap_or_default(),
        args: container.args.clone().unwrap_or_default(),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs,
        labels,
        annotations: HashMap::from([(
            "io.kubernetes.container.restartCount".to_string(),
            attempt.to_string(),
        )]),
        log_path: format!("{}/{attempt}.log", container.name),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(LinuxContainerConfig {
            resources: None,
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                privileged: container
                    .security_context
                    .as_ref()
                    .and_then(|s| s.privileged)
                    .unwrap_or(false),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

fn namespace_options(pod: &Pod) -> NamespaceOption {
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    NamespaceOption {
        network: if host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        } as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}
