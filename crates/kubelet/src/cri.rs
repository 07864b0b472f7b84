//! The container runtime as the kubelet sees it: the [`ContainerRuntime`] trait (the subset of
//! CRI `runtime.v1` RuntimeService and ImageService the pod workers use) and [`CriClient`], its
//! real implementation over containerd's unix socket with tonic. The recording fake lives in
//! [`crate::fake`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

/// The CRI types, re-exported for callers that build configs and read statuses.
pub use k8s_cri::v1::{
    AttachRequest, AuthConfig, Container, ContainerConfig, ContainerMetadata, ContainerResources,
    ContainerState, ContainerStatus, ExecRequest, FilesystemIdentifier, FilesystemUsage, Image,
    ImageSpec, KeyValue, LinuxContainerResources, PodSandbox, PodSandboxConfig, PodSandboxMetadata,
    PodSandboxState, PodSandboxStatus, PortForwardRequest, UInt64Value, VersionResponse,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cri endpoint {endpoint}: not a unix:// endpoint")]
    Endpoint { endpoint: String },
    #[error("cri {method}: {status}")]
    Call {
        method: &'static str,
        #[source]
        status: tonic::Status,
    },
    #[error("cri {method}: the response has no {field}")]
    MissingField {
        method: &'static str,
        field: &'static str,
    },
}

impl Error {
    /// Whether the runtime answered that the object does not exist (already removed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Call { status, .. } if status.code() == tonic::Code::NotFound)
    }

    /// The error as upstream's kubelet words a runtime's gRPC error in events and statuses
    /// (`rpc error: code = Unknown desc = …`).
    pub fn rpc_message(&self) -> String {
        match self {
            Error::Call { status, .. } => format!(
                "rpc error: code = {:?} desc = {}",
                status.code(),
                status.message()
            ),
            other => other.to_string(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A sandbox or container as the PLEG sees it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodState {
    /// Its pod's uid (the kubelet's label on it).
    pub pod_uid: String,
    pub id: String,
    /// `PodSandboxState` or `ContainerState`.
    pub state: i32,
}

/// The runtime's sandboxes and containers from its two lists, those without a pod uid label
/// left out.
pub async fn states_from_lists<R: ContainerRuntime + ?Sized>(runtime: &R) -> Result<Vec<PodState>> {
    let sandboxes = runtime.list_pod_sandboxes(HashMap::new()).await?;
    let containers = runtime.list_containers(HashMap::new()).await?;
    let owned = sandboxes
        .into_iter()
        .map(|s| (s.labels, s.id, s.state))
        .chain(containers.into_iter().map(|c| (c.labels, c.id, c.state)));
    Ok(owned
        .filter_map(|(mut labels, id, state)| {
            Some(PodState {
                pod_uid: labels.remove(crate::config::LABEL_POD_UID)?,
                id,
                state,
            })
        })
        .collect())
}

/// What the pod workers ask of a container runtime. Objects are found again by the labels the
/// kubelet put on them (as upstream does), so a restarted kubelet adopts what is running.
#[async_trait]
pub trait ContainerRuntime: Send + Sync {
    /// The runtime's name and version (`containerd`, `1.6.20`).
    async fn version(&self) -> Result<VersionResponse>;
    /// Creates and starts a sandbox (its network namespace held by the pause container) under
    /// `runtime_handler` (a RuntimeClass's handler; empty: the runtime's default) and returns
    /// its id.
    async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String>;
    async fn stop_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn remove_pod_sandbox(&self, id: &str) -> Result<()>;
    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus>;
    /// Sandboxes whose labels include all of `labels`.
    async fn list_pod_sandboxes(&self, labels: HashMap<String, String>) -> Result<Vec<PodSandbox>>;
    /// Creates a container in a sandbox and returns its id.
    async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox: PodSandboxConfig,
    ) -> Result<String>;
    async fn start_container(&self, id: &str) -> Result<()>;
    /// SIGTERM, then SIGKILL after `timeout_seconds`.
    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()>;
    async fn remove_container(&self, id: &str) -> Result<()>;
    /// Containers whose labels include all of `labels`.
    async fn list_containers(&self, labels: HashMap<String, String>) -> Result<Vec<Container>>;
    /// Every sandbox and container of a pod (labelled with its uid), as the PLEG compares them
    /// at each relist: [`states_from_lists`] by default. A runtime that can answer without
    /// copying each object's labels and annotations does.
    async fn pod_states(&self) -> Result<Vec<PodState>> {
        states_from_lists(self).await
    }
    /// A number that changes whenever a sandbox or container comes, goes or changes state, for
    /// a runtime that can tell (as a runtime with CRI container events tells the evented PLEG):
    /// the PLEG then lists only when it changed. `None` (the default): relist every period.
    fn generation(&self) -> Option<u64> {
        None
    }
    async fn container_status(&self, id: &str) -> Result<ContainerStatus>;
    /// Sets a running container's CPU and memory resources in place (CRI
    /// `UpdateContainerResources`): in-place pod resize.
    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()>;
    /// Runs a command in a running container and waits for it (at most `timeout_seconds`,
    /// 0 for no limit): exec probes and hooks.
    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<ExecResult>;
    /// A one-use URL on the runtime's streaming server that runs `request.cmd` in a container
    /// with the streams asked for (CRI `Exec`); the kubelet proxies the client's upgraded
    /// connection to it.
    async fn exec(&self, request: cri::ExecRequest) -> Result<String>;
    /// A one-use streaming URL attached to a container's main process (CRI `Attach`).
    async fn attach(&self, request: cri::AttachRequest) -> Result<String>;
    /// A one-use streaming URL forwarding to ports of a sandbox's network namespace (CRI
    /// `PortForward`).
    async fn port_forward(&self, request: cri::PortForwardRequest) -> Result<String>;
    /// Every image the runtime has.
    async fn list_images(&self) -> Result<Vec<Image>>;
    /// The image if the runtime has it.
    async fn image_status(&self, image: &str) -> Result<Option<Image>>;
    /// Pulls an image, with registry credentials if given, and returns its reference (the
    /// image id).
    async fn pull_image(&self, image: &str, auth: Option<AuthConfig>) -> Result<String>;
    /// Removes an image (by id or reference): image garbage collection. An image already
    /// gone is success, as CRI says.
    async fn remove_image(&self, image: &str) -> Result<()>;
    /// The filesystems holding the runtime's images, with the bytes and inodes the images use
    /// on each (CRI `ImageFsInfo`).
    async fn image_fs_info(&self) -> Result<Vec<FilesystemUsage>>;
    /// Makes the runtime reopen a running container's log file at its log path (CRI
    /// `ReopenContainerLog`), once the kubelet has renamed the old one away: log rotation.
    async fn reopen_container_log(&self, id: &str) -> Result<()>;
}

/// What a command run with [`ContainerRuntime::exec_sync`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecResult {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// CRI over a unix socket. The channel is lazy and reconnects by itself, so a containerd
/// restart shows up as failed calls until the socket answers again.
#[derive(Clone)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

impl CriClient {
    /// A client for `unix:///path` (or a bare path).
    pub fn connect(endpoint: &str) -> Result<CriClient> {
        let path = socket_path(endpoint).ok_or_else(|| Error::Endpoint {
            endpoint: endpoint.into(),
        })?;
        // the URI is ignored: every connection dials the socket
        let channel = Endpoint::from_static("http://[::]:50051").connect_with_connector_lazy(
            tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(
                        tokio::net::UnixStream::connect(path).await?,
                    ))
                }
            }),
        );
        Ok(CriClient {
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
        })
    }

    /// The usage of every container the runtime has (CRI `ListContainerStats`): memory working
    /// set and writable layer, with the container's labels, for the eviction manager.
    pub async fn list_container_stats(&self) -> Result<Vec<cri::ContainerStats>> {
        let req = cri::ListContainerStatsRequest { filter: None };
        let r = self.runtime.clone().list_container_stats(req).await;
        Ok(r.map_err(call("ListContainerStats"))?.into_inner().stats)
    }
}

/// The socket path of a `unix://` endpoint (a bare absolute path is accepted too).
pub fn socket_path(endpoint: &str) -> Option<PathBuf> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    Path::new(path).is_absolute().then(|| PathBuf::from(path))
}

fn call(method: &'static str) -> impl FnOnce(tonic::Status) -> Error {
    move |status| Error::Call { method, status }
}

#[async_trait]
impl ContainerRuntime for CriClient {
    async fn version(&self) -> Result<VersionResponse> {
        let r = self
            .runtime
            .clone()
            .version(cri::VersionRequest::default())
            .await;
        Ok(r.map_err(call("Version"))?.into_inner())
    }

    async fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: runtime_handler.into(),
        };
        let r = self.runtime.clone().run_pod_sandbox(req).await;
        Ok(r.map_err(call("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id)
    }

    async fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .stop_pod_sandbox(req)
            .await
            .map_err(call("StopPodSandbox"))?;
        Ok(())
    }

    async fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        let req = cri::RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_pod_sandbox(req)
            .await
            .map_err(call("RemovePodSandbox"))?;
        Ok(())
    }

    async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus> {
        let req = cri::PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: false,
        };
        let r = self.runtime.clone().pod_sandbox_status(req).await;
        r.map_err(call("PodSandboxStatus"))?
            .into_inner()
            .status
            .ok_or(Error::MissingField {
                method: "PodSandboxStatus",
                field: "status",
            })
    }

    async fn list_pod_sandboxes(&self, labels: HashMap<String, String>) -> Result<Vec<PodSandbox>> {
        let req = cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: labels,
                ..Default::default()
            }),
        };
        let r = self.runtime.clone().list_pod_sandbox(req).await;
        Ok(r.map_err(call("ListPodSandbox"))?.into_inner().items)
    }

    async fn create_container(
        &self,
        sandbox_id: &str,
        config: ContainerConfig,
        sandbox: PodSandboxConfig,
    ) -> Result<String> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: sandbox_id.into(),
            config: Some(config),
            sandbox_config: Some(sandbox),
        };
        let r = self.runtime.clone().create_container(req).await;
        Ok(r.map_err(call("CreateContainer"))?
            .into_inner()
            .container_id)
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let req = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .start_container(req)
            .await
            .map_err(call("StartContainer"))?;
        Ok(())
    }

    async fn stop_container(&self, id: &str, timeout_seconds: i64) -> Result<()> {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_seconds,
        };
        self.runtime
            .clone()
            .stop_container(req)
            .await
            .map_err(call("StopContainer"))?;
        Ok(())
    }

    async fn remove_container(&self, id: &str) -> Result<()> {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .remove_container(req)
            .await
            .map_err(call("RemoveContainer"))?;
        Ok(())
    }

    async fn list_containers(&self, labels: HashMap<String, String>) -> Result<Vec<Container>> {
        let req = cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: labels,
                ..Default::default()
            }),
        };
        let r = self.runtime.clone().list_containers(req).await;
        Ok(r.map_err(call("ListContainers"))?.into_inner().containers)
    }

    async fn container_status(&self, id: &str) -> Result<ContainerStatus> {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        let r = self.runtime.clone().container_status(req).await;
        r.map_err(call("ContainerStatus"))?
            .into_inner()
            .status
            .ok_or(Error::MissingField {
                method: "ContainerStatus",
                field: "status",
            })
    }

    async fn update_container_resources(
        &self,
        id: &str,
        resources: LinuxContainerResources,
    ) -> Result<()> {
        let req = cri::UpdateContainerResourcesRequest {
            container_id: id.into(),
            linux: Some(resources),
            ..Default::default()
        };
        self.runtime
            .clone()
            .update_container_resources(req)
            .await
            .map_err(call("UpdateContainerResources"))?;
        Ok(())
    }

    async fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout_seconds: i64,
    ) -> Result<ExecResult> {
        let req = cri::ExecSyncRequest {
            container_id: id.into(),
            cmd,
            timeout: timeout_seconds,
        };
        let r = self.runtime.clone().exec_sync(req).await;
        let r = r.map_err(call("ExecSync"))?.into_inner();
        Ok(ExecResult {
            exit_code: r.exit_code,
            stdout: r.stdout,
            stderr: r.stderr,
        })
    }

    async fn exec(&self, request: cri::ExecRequest) -> Result<String> {
        let r = self.runtime.clone().exec(request).await;
        Ok(r.map_err(call("Exec"))?.into_inner().url)
    }

    async fn attach(&self, request: cri::AttachRequest) -> Result<String> {
        let r = self.runtime.clone().attach(request).await;
        Ok(r.map_err(call("Attach"))?.into_inner().url)
    }

    async fn port_forward(&self, request: cri::PortForwardRequest) -> Result<String> {
        let r = self.runtime.clone().port_forward(request).await;
        Ok(r.map_err(call("PortForward"))?.into_inner().url)
    }

    async fn list_images(&self) -> Result<Vec<Image>> {
        let req = cri::ListImagesRequest { filter: None };
        let r = self.images.clone().list_images(req).await;
        Ok(r.map_err(call("ListImages"))?.into_inner().images)
    }

    async fn image_status(&self, image: &str) -> Result<Option<Image>> {
        let req = cri::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        let r = self.images.clone().image_status(req).await;
        Ok(r.map_err(call("ImageStatus"))?.into_inner().image)
    }

    async fn pull_image(&self, image: &str, auth: Option<AuthConfig>) -> Result<String> {
        let req = cri::PullImageRequest {
            image: Some(image_spec(image)),
            auth,
            sandbox_config: None,
        };
        let r = self.images.clone().pull_image(req).await;
        Ok(r.map_err(call("PullImage"))?.into_inner().image_ref)
    }

    async fn remove_image(&self, image: &str) -> Result<()> {
        let req = cri::RemoveImageRequest {
            image: Some(image_spec(image)),
        };
        self.images
            .clone()
            .remove_image(req)
            .await
            .map_err(call("RemoveImage"))?;
        Ok(())
    }

    async fn image_fs_info(&self) -> Result<Vec<FilesystemUsage>> {
        let r = self
            .images
            .clone()
            .image_fs_info(cri::ImageFsInfoRequest {})
            .await;
        Ok(r.map_err(call("ImageFsInfo"))?
            .into_inner()
            .image_filesystems)
    }

    async fn reopen_container_log(&self, id: &str) -> Result<()> {
        let req = cri::ReopenContainerLogRequest {
            container_id: id.into(),
        };
        self.runtime
            .clone()
            .reopen_container_log(req)
            .await
            .map_err(call("ReopenContainerLog"))?;
        Ok(())
    }
}

pub fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets_or_absolute_paths() {
        assert_eq!(
            socket_path("unix:///run/x.sock"),
            Some(PathBuf::from("/run/x.sock"))
        );
        assert_eq!(
            socket_path("/run/x.sock"),
            Some(PathBuf::from("/run/x.sock"))
        );
        assert_eq!(socket_path("tcp://1.2.3.4:5"), None);
    }
}
