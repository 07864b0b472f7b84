//! The CRI configs the kubelet asks for, from the pod's spec without I/O: the sandbox (metadata,
//! hostname, log directory, host ports, labels by which the kubelet finds it again, its
//! security context and sysctls from [`crate::security_context`]) and each container (image,
//! command, args, env, mounts and security context as resolved by the caller, cgroup resources
//! from requests and limits, log path, labels, attempt); the downward API's field references.

use std::collections::HashMap;
use std::path::Path;

use k8s_cri::v1::{
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, Mount, PortMapping, Protocol,
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
/// under `log_directory`; `volume_groups` are the groups of the pod's persistent volumes.
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    log_directory: &Path,
    volume_groups: &[i64],
) -> PodSandboxConfig {
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
    let (security_context, sysctls) = crate::security_context::sandbox(pod, volume_groups);
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.clone(),
            uid,
            namespace,
            attempt,
        }),
        // a hostNetwork pod shares the node's UTS namespace, so it keeps the node's hostname
        // (runc refuses to set one without a private UTS namespace)
        hostname: if spec.host_network == Some(true) {
            String::new()
        } else {
            // upstream's: `hostname`, else the pod's name cut to 63 characters
            crate::etc_hosts::hostname_and_domain(pod, "").0
        },
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
            security_context: Some(security_context),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the downward API reads from the running pod rather than its spec.
#[derive(Debug, Clone, Default)]
pub struct PodRuntimeFields {
    /// `status.podIP`: the sandbox's IP (the host's for hostNetwork pods).
    pub pod_ip: String,
    /// `status.hostIP`.
    pub host_ip: String,
    /// The node's allocatable resources: the limits of containers that set none.
    pub allocatable:
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
}

/// The value of an env `fieldRef` (upstream's supported paths), or None for an unknown path.
pub fn field_ref(pod: &Pod, path: &str, runtime: &PodRuntimeFields) -> Option<String> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let key_in = |map: &Option<std::collections::BTreeMap<String, String>>, rest: &str| {
        let key = rest.strip_prefix("['")?.strip_suffix("']")?;
        Some(map.as_ref()?.get(key).cloned().unwrap_or_default())
    };
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_else(|| "default".into()),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec?.node_name.clone().unwrap_or_default(),
        "spec.serviceAccountName" => spec?.service_account_name.clone().unwrap_or_default(),
        "status.podIP" | "status.podIPs" => runtime.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => runtime.host_ip.clone(),
        _ => {
            if let Some(rest) = path.strip_prefix("metadata.labels") {
                return key_in(&m.labels, rest);
            }
            if let Some(rest) = path.strip_prefix("metadata.annotations") {
                return key_in(&m.annotations, rest);
            }
            return None;
        }
    })
}

/// CPU shares, CFS quota and the memory limit from the container's requests and limits, as
/// upstream's kubelet computes them (a CPU request of 1 is 1024 shares, at least 2; a CPU limit
/// of 1 is a 100 ms quota per 100 ms period, at least 1 ms).
pub fn linux_resources(container: &ApiContainer) -> LinuxContainerResources {
    use skiff_apimachinery::quantity::Quantity;
    let res = container.resources.clone().unwrap_or_default();
    let get = |map: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
               key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .and_then(|q| Quantity::parse(&q.0).ok())
    };
    const PERIOD: i64 = 100_000;
    let cpu_limit = get(&res.limits, "cpu").map(|q| q.milli_value());
    // a limit without a request requests the limit (upstream's defaulting)
    let cpu_request = get(&res.requests, "cpu")
        .map(|q| q.milli_value())
        .or(cpu_limit);
    let mut out = LinuxContainerResources {
        cpu_shares: cpu_request.map(|m| (m * 1024 / 1000).max(2)).unwrap_or(2),
        ..Default::default()
    };
    if let Some(milli) = cpu_limit {
        out.cpu_period = PERIOD;
        out.cpu_quota = (milli * PERIOD / 1000).max(1000);
    }
    if let Some(memory) = get(&res.limits, "memory") {
        out.memory_limit_in_bytes = memory.value();
    }
    out
}

/// A container's config; `security` is its security context as
/// [`crate::security_context::container`] makes it.
pub fn container_config(
    pod: &Pod,
    container: &ApiContainer,
    image_ref: &str,
    attempt: u32,
    envs: Vec<KeyValue>,
    mounts: Vec<Mount>,
    security: LinuxContainerSecurityContext,
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
        mounts,
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
            resources: Some(linux_resources(container)),
            security_context: Some(security),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(container: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1",
                         "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [container]},
        }))
        .unwrap()
    }

    #[test]
    fn a_host_network_sandbox_shares_the_node_network_and_hostname() {
        let mut p = pod(json!({"name": "c"}));
        let sandbox = sandbox_config(&p, 0, Path::new("/logs"), &[]);
        assert_eq!(sandbox.hostname, "web");
        p.spec.as_mut().unwrap().host_network = Some(true);
        let sandbox = sandbox_config(&p, 0, Path::new("/logs"), &[]);
        assert_eq!(sandbox.hostname, "");
        let ns = sandbox
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, k8s_cri::v1::NamespaceMode::Node as i32);
    }

    #[test]
    fn requests_and_limits_become_shares_quota_and_a_memory_limit() {
        let p = pod(json!({"name": "c", "resources": {
            "requests": {"cpu": "250m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "128Mi"}}}));
        let r = linux_resources(&p.spec.unwrap().containers[0]);
        assert_eq!(
            (r.cpu_shares, r.cpu_period, r.cpu_quota),
            (256, 100_000, 50_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 128 * 1024 * 1024);

        let best_effort = pod(json!({"name": "c"}));
        let r = linux_resources(&best_effort.spec.unwrap().containers[0]);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2, 0, 0)
        );
    }

    #[test]
    fn field_refs_read_the_pod_and_its_runtime_addresses() {
        let p = pod(json!({"name": "c"}));
        let rt = PodRuntimeFields {
            pod_ip: "10.42.0.9".into(),
            host_ip: "192.168.1.5".into(),
            ..Default::default()
        };
        let get = |path| field_ref(&p, path, &rt);
        assert_eq!(get("metadata.name").as_deref(), Some("web"));
        assert_eq!(get("metadata.namespace").as_deref(), Some("prod"));
        assert_eq!(get("spec.nodeName").as_deref(), Some("n1"));
        assert_eq!(get("status.podIP").as_deref(), Some("10.42.0.9"));
        assert_eq!(get("status.hostIP").as_deref(), Some("192.168.1.5"));
        assert_eq!(get("metadata.labels['app']").as_deref(), Some("web"));
        assert_eq!(get("metadata.labels['none']").as_deref(), Some(""));
        assert_eq!(get("spec.bogus"), None);
    }

    #[test]
    fn the_container_gets_its_env_and_resources() {
        let p = pod(json!({"name": "c", "command": ["sh"]}));
        let env = vec![KeyValue {
            key: "A".into(),
            value: "1".into(),
        }];
        let c = container_config(
            &p,
            &p.spec.clone().unwrap().containers[0],
            "sha256:x",
            0,
            env,
            Vec::new(),
            LinuxContainerSecurityContext {
                run_as_user: Some(k8s_cri::v1::Int64Value { value: 7 }),
                ..Default::default()
            },
        );
        assert_eq!(c.envs[0].key, "A");
        assert_eq!(c.command, ["sh"]);
        let linux = c.linux.unwrap();
        assert!(linux.resources.is_some());
        assert_eq!(
            linux.security_context.unwrap().run_as_user.unwrap().value,
            7
        );
    }
}
