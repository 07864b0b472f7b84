//! What a pod needs before its containers, around [`SyncContext::sync_pod`]: its cgroup, its
//! volumes set up (with a `FailedMount` event per volume that fails, and the volumes' other
//! warnings), its sandbox config with the DNS config of its `dnsPolicy`, its cgroup as
//! parent and its volumes' groups, and its managed /etc/hosts.

use std::path::PathBuf;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use crate::api::PodEvent;
use crate::config::sandbox_config;
use crate::cri::PodSandboxConfig;
use crate::dns::pod_dns;
use crate::pod_sync::SyncContext;

impl SyncContext {
    /// Sets up (or refreshes) the pod's volumes when due, with their events; Err(how long until
    /// they are tried again) while the pod's containers may not start.
    pub(crate) async fn set_up_volumes(
        &self,
        pod: &Pod,
        now: Timestamp,
    ) -> std::result::Result<(), std::time::Duration> {
        let set_up = self
            .volumes
            .set_up(self.api.as_ref(), pod, &self.allocatable, now)
            .await;
        for failure in &set_up.failures {
            let event = PodEvent::pod_warning("FailedMount", failure.to_string());
            self.api.event(pod, event).await;
        }
        for warning in set_up.warnings {
            let event = PodEvent::pod_warning(warning.reason, warning.message);
            self.api.event(pod, event).await;
        }
        // a set-up that is not ready always says when it is tried again
        set_up.retry_in.map_or(Ok(()), Err)
    }

    /// Makes the pod's cgroup (or sets its limits again) before its sandbox, as upstream's
    /// `SyncPod` does; a failure is a `FailedCreatePodContainer` warning and fails the sync.
    pub(crate) async fn ensure_cgroup(&self, pod: &Pod) -> crate::pod_sync::Result<()> {
        let Some(cgroups) = &self.cgroups else {
            return Ok(());
        };
        if let Err(source) = cgroups.ensure_pod(pod) {
            let message = format!("unable to ensure pod container exists: {source}");
            let event = PodEvent::pod_warning("FailedCreatePodContainer", message);
            self.api.event(pod, event).await;
            return Err(crate::pod_sync::Error::Cgroups {
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                source,
            });
        }
        Ok(())
    }

    /// The pod's sandbox config with its DNS config, its cgroup as the sandbox's parent and
    /// the groups of its persistent volumes, and the MissingClusterDNS warning if ClusterFirst
    /// had to fall back to the host's resolv.conf.
    pub(crate) fn sandbox_for(
        &self,
        pod: &Pod,
        attempt: u32,
    ) -> (PodSandboxConfig, Option<String>) {
        let volume_groups = self.volumes.extra_supplemental_groups(pod);
        let mut config = sandbox_config(pod, attempt, &self.pod_log_dir(pod), &volume_groups);
        let (dns, warning) = pod_dns(pod, &self.dns);
        config.dns_config = Some(dns);
        if let Some(cgroups) = &self.cgroups {
            config.linux.get_or_insert_default().cgroup_parent = cgroups.cgroup_parent(pod);
        }
        (config, warning)
    }

    /// Writes the pod's managed /etc/hosts; returns its path.
    pub(crate) fn write_hosts_file(&self, pod: &Pod, pod_ip: &str) -> Result<PathBuf, String> {
        let dir = self
            .volumes
            .pod_dir(pod.metadata.uid.as_deref().unwrap_or_default());
        let path = dir.join("etc-hosts");
        let content = if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
            let node_hosts = std::fs::read_to_string(&self.dns.hosts_file)
                .map_err(|e| format!("reading {}: {e}", self.dns.hosts_file.display()))?;
            crate::etc_hosts::host_network_content(pod, &node_hosts)
        } else {
            crate::etc_hosts::content(pod, &[pod_ip.to_string()], &self.dns.cluster_domain)
        };
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, content))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(path)
    }
}
