//! One container's way to running, around [`SyncContext::sync_pod`]: its image made present as
//! `imagePullPolicy` says (with the pod's `imagePullSecrets` and upstream's `Pulling`, `Pulled`,
//! `Failed` and `BackOff` events), then created and started with its config, env, security
//! context (`runAsNonRoot` checked against the image's user first; an ephemeral container's
//! process namespace its target's) and hooks; a failure at any step becomes the container's
//! waiting reason.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod};

use crate::api::PodEvent;
use crate::config::{PodRuntimeFields, container_config};
use crate::credentials::{self, Keyring};
use crate::cri::PodSandboxConfig;
use crate::hooks::{self, Hook};
use crate::pod_sync::{Result, SyncContext, pod_key, waiting_reason_of};
use crate::qos;
use crate::security_context::{self, ImageUser};
use crate::status::Waiting;
use crate::{ephemeral, expansion};

impl SyncContext {
    /// Makes the image present as imagePullPolicy says, returning its reference or why the
    /// container has to wait, with upstream's events. `Always` falls back to a present image
    /// when the pull fails: there is no registry on an offline machine, and Skiff's built-in
    /// busybox is tagged `latest`. A pull that failed before shows as `ImagePullBackOff`.
    async fn ensure_image(
        &self,
        pod: &Pod,
        container: &ApiContainer,
    ) -> Result<std::result::Result<String, Waiting>> {
        let name = &container.name;
        let image = container.image.clone().unwrap_or_default();
        let policy = container
            .image_pull_policy
            .as_deref()
            .unwrap_or("IfNotPresent");
        let failed = |message: String| {
            let backoff = matches!(
                waiting_reason_of(pod, name).as_deref(),
                Some("ErrImagePull" | "ImagePullBackOff")
            );
            Waiting {
                reason: if backoff {
                    "ImagePullBackOff"
                } else {
                    "ErrImagePull"
                }
                .into(),
                message,
            }
        };
        let present = match self.runtime.image_status(&image).await {
            Ok(found) => found.map(|i| i.id),
            Err(e) => return Ok(Err(failed(e.to_string()))),
        };
        if policy == "Never" || (policy == "IfNotPresent" && present.is_some()) {
            return Ok(match present {
                Some(id) => {
                    let message = format!("Container image \"{image}\" already present on machine");
                    self.api
                        .event(pod, PodEvent::normal("Pulled", name, message))
                        .await;
                    Ok(id)
                }
                None => {
                    let message = format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    );
                    let event = PodEvent::warning("ErrImageNeverPull", name, message.clone());
                    self.api.event(pod, event).await;
                    Err(Waiting {
                        reason: "ErrImageNeverPull".into(),
                        message,
                    })
                }
            });
        }
        let keyring = self.pull_secrets(pod).await;
        let pulling = format!("Pulling image \"{image}\"");
        self.api
            .event(pod, PodEvent::normal("Pulling", name, pulling))
            .await;
        let started = std::time::Instant::now();
        match self.pull_image(&keyring, &image).await {
            Ok(image_ref) => {
                let message = format!(
                    "Successfully pulled image \"{image}\" in {:.3}s",
                    started.elapsed().as_secs_f64()
                );
                self.api
                    .event(pod, PodEvent::normal("Pulled", name, message))
                    .await;
                Ok(Ok(image_ref))
            }
            Err(e) => match present.filter(|_| !credentials::refused(&e.to_string())) {
                Some(id) => {
                    tracing::info!(image, error = %e, "pull failed; using the image present");
                    let message = format!(
                        "Container image \"{image}\" already present on machine (pull failed: {e})"
                    );
                    self.api
                        .event(pod, PodEvent::normal("Pulled", name, message))
                        .await;
                    Ok(Ok(id))
                }
                None => {
                    let message = format!("Failed to pull image \"{image}\": {e}");
                    let event = PodEvent::warning("Failed", name, message.clone());
                    self.api.event(pod, event).await;
                    Ok(Err(failed(message)))
                }
            },
        }
    }

    /// The registry credentials of the pod's `imagePullSecrets`; secrets that cannot be read
    /// are reported in an event, as upstream's kubelet does before it pulls.
    async fn pull_secrets(&self, pod: &Pod) -> Keyring {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut keyring = Keyring::default();
        let mut missing = Vec::new();
        let secrets = pod
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref());
        for secret in secrets.into_iter().flatten() {
            match self.api.secret(namespace, &secret.name).await {
                Ok(Some(data)) => keyring.add_secret(&data),
                _ => missing.push(secret.name.clone()),
            }
        }
        if !missing.is_empty() {
            let message = format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            );
            let event = PodEvent {
                field_path: None,
                ..PodEvent::warning("FailedToRetrieveImagePullSecret", "", message)
            };
            self.api.event(pod, event).await;
        }
        keyring
    }

    /// Pulls `image` with each matching credential in turn until one works, or anonymously
    /// when none match, as upstream's kubelet does.
    async fn pull_image(
        &self,
        keyring: &Keyring,
        image: &str,
    ) -> std::result::Result<String, crate::cri::Error> {
        let mut last = None;
        for auth in keyring.lookup(image) {
            match self.runtime.pull_image(image, Some(auth)).await {
                Ok(image_ref) => return Ok(image_ref),
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e),
            None => self.runtime.pull_image(image, None).await,
        }
    }

    /// A container whose config cannot be made (upstream's `ErrCreateContainerConfig`): a
    /// `Failed` event, and the waiting reason `CreateContainerConfigError`.
    pub(crate) async fn config_error(
        &self,
        pod: &Pod,
        container: &str,
        problem: String,
    ) -> Waiting {
        let message = format!("Error: {problem}");
        self.api
            .event(pod, PodEvent::warning("Failed", container, message))
            .await;
        Waiting {
            reason: "CreateContainerConfigError".into(),
            message: problem,
        }
    }

    /// Pulls, creates and starts one container; a failure becomes a waiting reason. `target`
    /// is the runtime id of the container whose process namespace an ephemeral container
    /// joins.
    pub(crate) async fn start_container(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        sandbox: &PodSandboxConfig,
        container: &ApiContainer,
        attempt: u32,
        target: Option<&str>,
    ) -> Result<Option<Waiting>> {
        let name = &container.name;
        let image_ref = match self.ensure_image(pod, container).await? {
            Ok(r) => r,
            Err(waiting) => return Ok(Some(waiting)),
        };
        let _ = std::fs::create_dir_all(self.pod_log_dir(pod).join(name));
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network) == Some(true);
        let pod_ip = if host_network {
            self.host_ip.clone()
        } else {
            match self.runtime.pod_sandbox_status(sandbox_id).await {
                Ok(s) => s.network.map(|n| n.ip).unwrap_or_default(),
                Err(_) => String::new(),
            }
        };
        let fields = PodRuntimeFields {
            pod_ip,
            host_ip: self.host_ip.clone(),
            allocatable: self.allocatable.clone(),
        };
        let resolved = async {
            // raw block devices need block volumes, which Skiff does not map
            if let Some(device) = container.volume_devices.iter().flatten().next() {
                return Err(format!(
                    "skiff does not support block volumes (volumeDevices {:?})",
                    device.name
                ));
            }
            // the image's user, as upstream's getImageUser: runAsNonRoot is checked against it
            let image = self.runtime.image_status(&image_ref).await;
            let user = ImageUser::of(image.map_err(|e| e.rpc_message())?.as_ref());
            security_context::verify_run_as_non_root(pod, container, &user)?;
            let volume_groups = self.volumes.extra_supplemental_groups(pod);
            let security =
                security_context::container(pod, container, &user, &self.security, &volume_groups)?;
            let envs = crate::env::resolve(self.api.as_ref(), pod, container, &fields).await?;
            let hosts = self.write_hosts_file(pod, &fields.pod_ip)?;
            let mounts = self
                .volumes
                .container_mounts(pod, container, &envs, Some(&hosts))?;
            Ok::<_, String>((envs, mounts, security))
        };
        let (envs, mounts, security) = match resolved.await {
            Ok(resolved) => resolved,
            Err(problem) => return Ok(Some(self.config_error(pod, name, problem).await)),
        };
        let mut config =
            container_config(pod, container, &image_ref, attempt, envs, mounts, security);
        if let Some(target) = target
            && let Some(namespaces) = config
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
                .and_then(|s| s.namespace_options.as_mut())
        {
            ephemeral::share_target_pid(namespaces, target);
        }
        config.command = expansion::expand_all(&config.command, &config.envs);
        config.args = expansion::expand_all(&config.args, &config.envs);
        if let Some(resources) = config.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            resources.oom_score_adj = qos::oom_score_adj(pod, container, self.memory_capacity);
        }
        let id = match self
            .runtime
            .create_container(sandbox_id, config, sandbox.clone())
            .await
        {
            Ok(id) => id,
            Err(e) => {
                let message = format!("Error: {e}");
                self.api
                    .event(pod, PodEvent::warning("Failed", name, message))
                    .await;
                return Ok(Some(Waiting {
                    reason: "CreateContainerError".into(),
                    message: e.to_string(),
                }));
            }
        };
        // what it runs with, which an in-place resize starts from
        if crate::allocation::resizable(pod).any(|c| &c.name == name) {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            if let Err(e) = self.allocations.set_actuated(uid, container) {
                tracing::warn!(pod = %pod_key(pod), error = %e, "recording resources");
            }
        }
        let created = format!("Created container: {name}");
        self.api
            .event(pod, PodEvent::normal("Created", name, created))
            .await;
        if let Err(e) = self.runtime.start_container(&id).await {
            let message = format!("Error: {e}");
            self.api
                .event(pod, PodEvent::warning("Failed", name, message))
                .await;
            return Ok(Some(Waiting {
                reason: "RunContainerError".into(),
                message: e.to_string(),
            }));
        }
        let started = format!("Started container {name}");
        self.api
            .event(pod, PodEvent::normal("Started", name, started))
            .await;
        if let Some(handler) = Hook::PostStart.of(container) {
            let budget = Duration::from_secs(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30)
                    .max(1) as u64,
            );
            let hook = hooks::run(
                self.runtime.as_ref(),
                handler,
                container,
                &id,
                &fields.pod_ip,
                budget,
            );
            if let Err(why) = hook.await {
                let message = format!("PostStartHook failed: {why}");
                let event = PodEvent::warning(Hook::PostStart.failed_reason(), name, message);
                self.api.event(pod, event).await;
                let _ = self.runtime.stop_container(&id, 2).await;
                return Ok(None);
            }
        }
        tracing::info!(pod = %pod_key(pod), container = %name, attempt, "started");
        Ok(None)
    }
}
