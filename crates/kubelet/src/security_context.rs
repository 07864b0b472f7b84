//! A pod's `securityContext` as the CRI asks for it, without I/O, as upstream's kubelet builds
//! it (`pkg/securitycontext`, `kuberuntime/security_context.go`, `helpers.go`,
//! `generatePodSandboxLinuxConfig`):
//! - the container's *effective* context: its own fields over the pod's (`runAsUser`,
//!   `runAsGroup`, `runAsNonRoot`, `seLinuxOptions`), as `DetermineEffectiveSecurityContext`;
//! - the user: `runAsUser`, else the image's uid or user name;
//! - groups: the pod's `fsGroup` then `supplementalGroups`, and the groups of the persistent
//!   volumes it mounts (`pv.beta.kubernetes.io/gid`, which the volume manager knows), with
//!   `supplementalGroupsPolicy`;
//! - `capabilities` (passed as written: containerd adds the `CAP_` prefix and knows `ALL`),
//!   `privileged`, `readOnlyRootFilesystem`, `allowPrivilegeEscalation: false` as
//!   `no_new_privs`, `procMount` (`Default`: the runtime's masked and read-only /proc paths);
//! - seccomp (container, then pod, else `Unconfined`, or `RuntimeDefault` with the kubelet's
//!   `seccompDefault`; `Localhost` profiles under the kubelet's `<data-dir>/seccomp`; the
//!   deprecated seccomp annotations are ignored, as by upstream's kubelet since v1.25) and
//!   AppArmor (container, pod, then the deprecated annotation);
//! - the namespaces (`hostNetwork`, `hostPID`, `hostIPC`, `shareProcessNamespace`);
//! - the sandbox's user, groups, namespaces, privilege (any privileged container), sysctls and
//!   its `RuntimeDefault` seccomp profile;
//! - `runAsNonRoot` checked against the image's user (`verifyRunAsNonRoot`).
//!
//! [`NodeSecurity`] holds what of this depends on the node: the seccomp profile directory and
//! default, whether the host enforces AppArmor, the sysctls pods may set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1::security_profile::ProfileType;
use k8s_cri::v1::{
    Capability, Int64Value, LinuxContainerSecurityContext, LinuxSandboxSecurityContext,
    NamespaceMode, NamespaceOption, SeLinuxOption, SecurityProfile, SupplementalGroupsPolicy,
};
use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, PodSecurityContext, SELinuxOptions, SeccompProfile,
    SecurityContext,
};

use crate::cri::Image;

/// The deprecated per-container AppArmor annotation (`<prefix><container>`), which upstream's
/// kubelet still reads after the fields.
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The /proc paths a container does not see unless its `procMount` is `Unmasked` (upstream's
/// `defaultMaskedPaths`).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The /proc paths a container sees read-only unless its `procMount` is `Unmasked` (upstream's
/// `defaultReadonlyPaths`).
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// What of a pod's security context depends on the node.
#[derive(Debug, Clone)]
pub struct NodeSecurity {
    /// Where `Localhost` seccomp profiles are (upstream's `<root-dir>/seccomp`).
    pub seccomp_profile_root: PathBuf,
    /// The kubelet's `seccompDefault`: a container that sets no seccomp profile runs under
    /// `RuntimeDefault` rather than `Unconfined`.
    pub seccomp_default: bool,
    /// Whether this host enforces AppArmor: pods asking for a profile are refused when not.
    pub apparmor_enabled: bool,
    /// The sysctls pods may set: the safe ones and `--allowed-unsafe-sysctls`.
    pub sysctls: crate::sysctl::Allowlist,
}

impl NodeSecurity {
    /// This host's: profiles under `<data_dir>/seccomp`, the configuration's `seccompDefault`,
    /// AppArmor as the kernel says, the safe sysctls of this kernel plus the configuration's
    /// `allowedUnsafeSysctls`.
    pub fn for_host(
        data_dir: &Path,
        settings: &crate::kubelet_config::KubeletConfiguration,
    ) -> crate::sysctl::Result<NodeSecurity> {
        Ok(NodeSecurity {
            seccomp_profile_root: data_dir.join("seccomp"),
            seccomp_default: settings.seccomp_default,
            apparmor_enabled: apparmor_enabled(),
            sysctls: crate::sysctl::Allowlist::new(
                crate::sysctl::kernel_version(),
                &settings.allowed_unsafe_sysctls,
            )?,
        })
    }
}

impl Default for NodeSecurity {
    /// Profiles under the default data dir, unconfined by default (upstream's `seccompDefault`
    /// is false), no AppArmor, only the sysctls every kernel namespaces.
    fn default() -> Self {
        NodeSecurity {
            seccomp_profile_root: PathBuf::from("/var/lib/skiff/seccomp"),
            seccomp_default: false,
            apparmor_enabled: false,
            sysctls: crate::sysctl::Allowlist::default(),
        }
    }
}

/// Whether the kernel enforces AppArmor (as runc checks: the module is enabled and its
/// securityfs is there).
fn apparmor_enabled() -> bool {
    Path::new("/sys/kernel/security/apparmor").is_dir()
        && std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|v| v.starts_with('Y'))
}

/// The user an image runs as (upstream's `getImageUser`): a uid, or a user name, or neither
/// (root).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    /// From the runtime's ImageStatus; an image it does not know runs as root.
    pub fn of(image: Option<&Image>) -> ImageUser {
        match image {
            Some(i) if i.uid.is_some() => ImageUser {
                uid: i.uid.as_ref().map(|u| u.value),
                username: String::new(),
            },
            Some(i) if !i.username.is_empty() => ImageUser {
                uid: None,
                username: i.username.clone(),
            },
            _ => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

fn pod_context(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref()?.security_context.as_ref()
}

/// The container's security context with the pod's user, group, non-root and SELinux settings
/// under its own (upstream's `DetermineEffectiveSecurityContext`).
pub fn effective(pod: &Pod, container: &Container) -> SecurityContext {
    let mut out = match pod_context(pod) {
        Some(p) => SecurityContext {
            run_as_user: p.run_as_user,
            run_as_group: p.run_as_group,
            run_as_non_root: p.run_as_non_root,
            se_linux_options: p.se_linux_options.clone(),
            ..Default::default()
        },
        None => SecurityContext::default(),
    };
    let Some(c) = container.security_context.clone() else {
        return out;
    };
    macro_rules! over {
        ($($field:ident),*) => { $( if c.$field.is_some() { out.$field = c.$field; } )* };
    }
    over!(
        se_linux_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount
    );
    out
}

/// The pod's namespaces (upstream's `NamespacesForPod`): the node's network, PID and IPC
/// namespaces when it asks for them; otherwise the pod's, except PID, which is each
/// container's own unless `shareProcessNamespace`.
pub fn namespace_options(pod: &Pod) -> NamespaceOption {
    let spec = pod.spec.as_ref();
    let set = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let node_or = |host: bool, otherwise: NamespaceMode| {
        (if host { NamespaceMode::Node } else { otherwise }) as i32
    };
    NamespaceOption {
        network: node_or(set(|s| s.host_network), NamespaceMode::Pod),
        pid: node_or(
            set(|s| s.host_pid),
            if set(|s| s.share_process_namespace) {
                NamespaceMode::Pod
            } else {
                NamespaceMode::Container
            },
        ),
        ipc: node_or(set(|s| s.host_ipc), NamespaceMode::Pod),
        ..Default::default()
    }
}

/// The groups every container of the pod has besides its own: the pod's `fsGroup` (so that
/// it can use the volumes given that group), its `supplementalGroups`, then `volume_groups`,
/// those of its persistent volumes that it does not ask for already (upstream's
/// `determineEffectiveSecurityContext`).
fn supplemental_groups(pod: &Pod, volume_groups: &[i64]) -> Vec<i64> {
    let sc = pod_context(pod);
    sc.and_then(|s| s.fs_group)
        .into_iter()
        .chain(
            sc.and_then(|s| s.supplemental_groups.clone())
                .into_iter()
                .flatten(),
        )
        .chain(volume_groups.iter().copied())
        .collect()
}

/// The sandbox's groups: none without a pod securityContext, else its `fsGroup`,
/// `volume_groups`, then its `supplementalGroups` (upstream's `generatePodSandboxLinuxConfig`,
/// whose order differs from the containers').
fn sandbox_groups(pod: &Pod, volume_groups: &[i64]) -> Vec<i64> {
    let Some(sc) = pod_context(pod) else {
        return Vec::new();
    };
    sc.fs_group
        .into_iter()
        .chain(volume_groups.iter().copied())
        .chain(sc.supplemental_groups.iter().flatten().copied())
        .collect()
}

/// `supplementalGroupsPolicy`: `Merge` (the default) adds the groups of the image's
/// `/etc/group`, `Strict` only those of the spec (admitted only where the runtime supports it).
fn supplemental_groups_policy(pod: &Pod) -> i32 {
    match pod_context(pod).and_then(|s| s.supplemental_groups_policy.as_deref()) {
        Some("Strict") => SupplementalGroupsPolicy::Strict,
        _ => SupplementalGroupsPolicy::Merge,
    }
    .into()
}

fn selinux(options: Option<&SELinuxOptions>) -> Option<SeLinuxOption> {
    options.map(|o| SeLinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        r#type: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
    })
}

/// Whether any container of the pod is privileged (the sandbox must be then).
pub fn has_privileged_container(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let privileged = |sc: Option<&SecurityContext>| sc.and_then(|s| s.privileged) == Some(true);
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

/// The sandbox's security context and sysctls; `volume_groups` are the groups of the pod's
/// persistent volumes ([`crate::volumes::VolumeManager::extra_supplemental_groups`]).
pub fn sandbox(
    pod: &Pod,
    volume_groups: &[i64],
) -> (LinuxSandboxSecurityContext, HashMap<String, String>) {
    let sc = pod_context(pod);
    let sysctls = sc
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (crate::sysctl::normalize(&s.name), s.value.clone()))
        .collect();
    let context = LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options(pod)),
        selinux_options: selinux(sc.and_then(|s| s.se_linux_options.as_ref())),
        run_as_user: sc
            .and_then(|s| s.run_as_user)
            .map(|value| Int64Value { value }),
        run_as_group: sc
            .and_then(|s| s.run_as_group)
            .map(|value| Int64Value { value }),
        supplemental_groups: sandbox_groups(pod, volume_groups),
        supplemental_groups_policy: supplemental_groups_policy(pod),
        privileged: has_privileged_container(pod),
        // upstream runs every sandbox under the runtime's default profile
        seccomp: Some(profile(ProfileType::RuntimeDefault, String::new())),
        ..Default::default()
    };
    (context, sysctls)
}

fn profile(kind: ProfileType, localhost_ref: String) -> SecurityProfile {
    SecurityProfile {
        profile_type: kind.into(),
        localhost_ref,
    }
}

/// The seccomp profile of a container: its own field, else the pod's, else `RuntimeDefault`
/// under the node's `seccompDefault` and `Unconfined` otherwise (upstream's
/// `getSeccompProfile`).
fn seccomp(
    pod: &Pod,
    container: &Container,
    node: &NodeSecurity,
) -> Result<SecurityProfile, String> {
    let field: Option<SeccompProfile> = container
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.clone())
        .or_else(|| pod_context(pod).and_then(|s| s.seccomp_profile.clone()));
    Ok(
        match field
            .as_ref()
            .map(|f| (f.type_.as_str(), f.localhost_profile.as_deref()))
        {
            Some(("RuntimeDefault", _)) => profile(ProfileType::RuntimeDefault, String::new()),
            Some(("Localhost", Some(name))) if !name.is_empty() => profile(
                ProfileType::Localhost,
                node.seccomp_profile_root.join(name).display().to_string(),
            ),
            Some(("Localhost", _)) => {
                return Err(
                    "localhostProfile must be set if seccompProfile type is Localhost.".into(),
                );
            }
            None if node.seccomp_default => profile(ProfileType::RuntimeDefault, String::new()),
            _ => profile(ProfileType::Unconfined, String::new()),
        },
    )
}

/// The AppArmor profile a container asks for: its field, the pod's, or the deprecated
/// annotation (upstream's `apparmor.GetProfile`).
pub fn apparmor_profile(pod: &Pod, container: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = container
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
        .or_else(|| pod_context(pod).and_then(|s| s.app_armor_profile.clone()))
    {
        return Some(p);
    }
    let annotation = pod
        .metadata
        .annotations
        .as_ref()?
        .get(&format!("{APPARMOR_ANNOTATION_PREFIX}{}", container.name))?;
    let (type_, localhost_profile) = match annotation.as_str() {
        "runtime/default" => ("RuntimeDefault", None),
        "unconfined" => ("Unconfined", None),
        other => match other.strip_prefix("localhost/") {
            Some(name) => ("Localhost", Some(name.to_string())),
            // upstream passes an unknown value on, and the runtime refuses it
            None => (other, None),
        },
    };
    Some(AppArmorProfile {
        type_: type_.into(),
        localhost_profile,
    })
}

/// The CRI form of a container's AppArmor profile (upstream's `getAppArmorProfile`).
fn apparmor(pod: &Pod, container: &Container) -> Result<Option<SecurityProfile>, String> {
    let Some(p) = apparmor_profile(pod, container) else {
        return Ok(None);
    };
    Ok(Some(match (p.type_.as_str(), p.localhost_profile) {
        ("RuntimeDefault", _) => profile(ProfileType::RuntimeDefault, String::new()),
        ("Unconfined", _) => profile(ProfileType::Unconfined, String::new()),
        ("Localhost", Some(name)) => profile(ProfileType::Localhost, name),
        ("Localhost", None) => return Err("missing localhost apparmor profile name".into()),
        (other, _) => return Err(format!("unknown apparmor profile type: {other:?}")),
    }))
}

/// The container's security context (upstream's `determineEffectiveSecurityContext`), with
/// `volume_groups`, the groups of the pod's persistent volumes; an error is a config the
/// kubelet cannot build (`CreateContainerConfigError`).
pub fn container(
    pod: &Pod,
    container: &Container,
    image: &ImageUser,
    node: &NodeSecurity,
    volume_groups: &[i64],
) -> Result<LinuxContainerSecurityContext, String> {
    let sc = effective(pod, container);
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let paths = |defaults: &[&str]| {
        if unmasked {
            Vec::new()
        } else {
            defaults.iter().map(|p| p.to_string()).collect()
        }
    };
    let (run_as_user, run_as_username) = match sc.run_as_user {
        Some(uid) => (Some(uid), String::new()),
        None => (image.uid, image.username.clone()),
    };
    Ok(LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(|c| Capability {
            add_capabilities: c.add.clone().unwrap_or_default(),
            drop_capabilities: c.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(pod)),
        selinux_options: selinux(sc.se_linux_options.as_ref()),
        run_as_user: run_as_user.map(|value| Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| Int64Value { value }),
        run_as_username,
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: supplemental_groups(pod, volume_groups),
        supplemental_groups_policy: supplemental_groups_policy(pod),
        // upstream's AddNoNewPrivileges: only an explicit `allowPrivilegeEscalation: false`
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths: paths(DEFAULT_MASKED_PATHS),
        readonly_paths: paths(DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp(pod, container, node)?),
        apparmor: apparmor(pod, container)?,
        ..Default::default()
    })
}

/// Refuses a container whose effective `runAsNonRoot` its user breaks, with upstream's messages
/// (`verifyRunAsNonRoot`).
pub fn verify_run_as_non_root(
    pod: &Pod,
    container: &Container,
    image: &ImageUser,
) -> Result<(), String> {
    let sc = effective(pod, container);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let who = format!(
        "(pod: {:?}, container: {})",
        crate::pod_sync::format_pod(pod),
        container.name
    );
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy {who}"
            ));
        }
        return Ok(());
    }
    match image.uid {
        None if !image.username.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user \
             is non-root {who}",
            image.username
        )),
        Some(0) => Err(format!(
            "container has runAsNonRoot and image will run as root {who}"
        )),
        Some(uid) if !(1..=i64::from(i32::MAX)).contains(&uid) => Err(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be \
             1-({})): must be between 0 and 2147483647, inclusive {who}",
            i32::MAX
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[path = "security_context_tests.rs"]
mod tests;
