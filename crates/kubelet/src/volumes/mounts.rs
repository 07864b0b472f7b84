//! A container's CRI mounts, as upstream's `makeMounts`: each `volumeMount` at its `mountPath`
//! from the volume's host path (or its `subPath`/expanded `subPathExpr`, created when missing),
//! read-only when asked (by the mount, or by a claim volume's source) and always for configMap,
//! secret, downwardAPI and projected volumes;
//! `mountPropagation`; and the pod's managed /etc/hosts unless a volume is mounted there.

use std::path::{Component, Path, PathBuf};

use k8s_cri::v1::{Mount, MountPropagation};
use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod};

use super::{VolumeManager, claim};
use crate::cri::KeyValue;

/// Expands `$(VAR)` from the container's environment as upstream's `subPathExpr` does
/// (`$$` is a literal `$`, an unknown variable is left as written).
pub fn expand(expr: &str, envs: &[KeyValue]) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match envs.iter().find(|kv| kv.key == name) {
                Some(kv) => out.push_str(&kv.value),
                None => out.push_str(&rest[i..i + end + 3]),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn check_sub_path(sub: &str) -> Result<(), String> {
    let p = Path::new(sub);
    if p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(format!(
            "subPath {sub:?} must be a relative path that does not contain '..'"
        ));
    }
    Ok(())
}

impl VolumeManager {
    /// The container's mounts; `hosts_file` is the pod's managed /etc/hosts, if it has one.
    pub fn container_mounts(
        &self,
        pod: &Pod,
        container: &ApiContainer,
        envs: &[KeyValue],
        hosts_file: Option<&Path>,
    ) -> Result<Vec<Mount>, String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
        let mut out = Vec::new();
        for vm in container.volume_mounts.iter().flatten() {
            let Some(volume) = volumes.clone().find(|v| v.name == vm.name) else {
                return Err(format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    vm.name, container.name
                ));
            };
            let Some(mut host_path) = self.host_path(uid, volume) else {
                return Err(format!(
                    "volume {:?} has a type skiff does not support",
                    vm.name
                ));
            };
            let sub_path = match (&vm.sub_path, &vm.sub_path_expr) {
                (Some(s), _) if !s.is_empty() => s.clone(),
                (_, Some(e)) if !e.is_empty() => expand(e, envs),
                _ => String::new(),
            };
            if !sub_path.is_empty() {
                check_sub_path(&sub_path)?;
                host_path = host_path.join(&sub_path);
                if std::fs::symlink_metadata(&host_path).is_err() {
                    let on_host =
                        volume.host_path.is_some() || claim::claim_use(pod, volume).is_some();
                    self.create_sub_path(&host_path, on_host)?;
                }
            }
            let api_data = volume.config_map.is_some()
                || volume.secret.is_some()
                || volume.downward_api.is_some()
                || volume.projected.is_some();
            let propagation = match vm.mount_propagation.as_deref() {
                Some("HostToContainer") => MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => MountPropagation::PropagationBidirectional,
                _ => MountPropagation::PropagationPrivate,
            };
            out.push(Mount {
                container_path: vm.mount_path.clone(),
                host_path: host_path.display().to_string(),
                readonly: vm.read_only == Some(true)
                    || api_data
                    || (claim::claim_use(pod, volume).is_some()
                        && self.claim_read_only(uid, &volume.name)),
                propagation: propagation as i32,
                ..Default::default()
            });
        }
        if let Some(hosts) = hosts_file
            && !out.iter().any(|m| m.container_path == "/etc/hosts")
        {
            out.push(Mount {
                container_path: "/etc/hosts".into(),
                host_path: hosts.display().to_string(),
                ..Default::default()
            });
        }
        Ok(out)
    }

    fn create_sub_path(&self, path: &PathBuf, on_host: bool) -> Result<(), String> {
        let made = if on_host {
            self.host.create_dir_all(path, 0o755)
        } else {
            std::fs::create_dir_all(path)
        };
        made.map_err(|e| format!("creating subPath {}: {e}", path.display()))
    }
}
