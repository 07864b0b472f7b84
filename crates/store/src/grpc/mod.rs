//! An etcd v3 gRPC facade over any [`Store`], so that `etcdctl` and other etcd clients work
//! against Skiff's store unchanged.
//!
//! The wire types come from our own trimmed copies of etcd's protos (`proto/`), compiled with
//! etcd's package, service, method and message names and field numbers. Methods we do not serve
//! (auth, member changes, snapshots, hashes) answer `UNIMPLEMENTED`.
//!
//! # Layout
//! - [`pb`]: the generated protobuf messages, servers and clients.
//! - `convert`: store types ⇄ protobuf messages, and store errors → gRPC statuses with etcd's
//!   exact messages (clients recognise some errors by their message text).
//! - `kv`: Range (with sorting and revision filters done here), Put, DeleteRange, Txn, Compact.
//! - `watch`: one bidi stream carrying many watches, progress requests, cancellation.
//! - `lease`: grant, revoke, keep-alive stream, time-to-live, list.
//! - `maintenance`: Status, Alarm, Defragment, and the Cluster service's MemberList.
//! - `shards`: the threads that serve connections, each a single-threaded runtime (why: there).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use tokio::net::TcpListener;

use crate::store::Store;

mod convert;
mod kv;
mod lease;
mod maintenance;
mod shards;
mod watch;

#[cfg(test)]
mod tests;

pub use convert::status_from_error;

/// Protobuf messages and gRPC stubs generated from `proto/` (etcd's packages `mvccpb` and
/// `etcdserverpb`).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod pb {
    pub mod mvccpb {
        tonic::include_proto!("mvccpb");
    }
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }
}

/// The cluster ID in every response header: "skiff" in ASCII, then 1.
pub const DEFAULT_CLUSTER_ID: u64 = 0x736b_6966_6600_0001;
/// The member ID in every response header (and the leader in `Status`): "skiff" in ASCII, then 2.
pub const DEFAULT_MEMBER_ID: u64 = 0x736b_6966_6600_0002;
/// The etcd version the facade reports in `Status`: the etcd v3 API level it speaks (etcd 3.4's,
/// which the Debian `etcdctl` on our machines is), marked as Skiff's.
pub const DEFAULT_ETCD_VERSION: &str = "3.4.0-skiff";

/// Settings of the facade. Defaults follow etcd 3.4's server defaults where etcd has one.
#[derive(Debug, Clone)]
pub struct FacadeConfig {
    /// `cluster_id` of every response header (non-zero, as etcd's).
    pub cluster_id: u64,
    /// `member_id` of every response header; also the leader reported by `Status`.
    pub member_id: u64,
    /// The member's name in `MemberList` (etcd's `--name`, default "default").
    pub member_name: String,
    /// Version string in `Status` responses.
    pub version: String,
    /// Most operations in one branch of a txn (etcd's `--max-txn-ops`, default 128).
    pub max_txn_ops: usize,
    /// Largest request the server decodes, in bytes: etcd's `--max-request-bytes` (1.5 MiB) plus
    /// the 512 KiB gRPC overhead etcd allows on top of it.
    pub max_request_bytes: usize,
    /// Concurrent gRPC streams (requests and watch/keep-alive streams) per client connection
    /// (etcd's `--max-concurrent-streams`, default unlimited: `u32::MAX`).
    pub max_concurrent_streams: u32,
    /// Client URLs reported by `MemberList`; empty means `http://` + the listener's address.
    pub client_urls: Vec<String>,
    /// Threads serving connections, each a single-threaded runtime given every `threads`-th
    /// connection (see `shards`); at least one. Default: one per core.
    pub threads: usize,
}

impl Default for FacadeConfig {
    fn default() -> Self {
        FacadeConfig {
            cluster_id: DEFAULT_CLUSTER_ID,
            member_id: DEFAULT_MEMBER_ID,
            member_name: "skiff".to_string(),
            version: DEFAULT_ETCD_VERSION.to_string(),
            max_txn_ops: 128,
            max_request_bytes: 1536 * 1024 + 512 * 1024,
            max_concurrent_streams: u32::MAX,
            client_urls: Vec::new(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Why serving the facade failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener's local address could not be read.
    #[error("reading the listener's local address failed: {0}")]
    LocalAddr(#[source] std::io::Error),

    /// The store could not report its status (and so its revision) before serving.
    #[error("reading the store's status before serving on {addr} failed: {source}")]
    StoreStatus {
        addr: SocketAddr,
        #[source]
        source: crate::Error,
    },

    /// A serving thread could not be started.
    #[error("starting a serving thread for {addr} failed: {source}")]
    Thread {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// A serving thread's Tokio runtime could not be built.
    #[error("building the runtime of a serving thread for {addr} failed: {source}")]
    Runtime {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Serve the etcd v3 API for `store` on `listener` with [`FacadeConfig::default`], until
/// `shutdown` completes. See [`serve_with_config`].
pub async fn serve<S: Store>(
    store: S,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    serve_with_config(store, listener, FacadeConfig::default(), shutdown).await
}

/// Serve the etcd v3 API (KV, Watch, Lease, Maintenance, Cluster.MemberList) for `store` on
/// `listener` until `shutdown` completes.
///
/// On shutdown the server stops accepting connections, ends every open watch and lease
/// keep-alive stream (which would otherwise hold their connections open forever), lets unary
/// requests in flight finish, and returns.
///
/// Connections are served on `config.threads` threads of their own, each with a single-threaded
/// Tokio runtime (see `shards` for why); the caller's runtime only accepts them. The call returns
/// once every serving thread has finished, so no clone of `store` is left behind.
pub async fn serve_with_config<S: Store>(
    store: S,
    listener: TcpListener,
    mut config: FacadeConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    if config.client_urls.is_empty() {
        config.client_urls = vec![format!("http://{addr}")];
    }
    let revision = store
        .status()
        .await
        .map_err(|source| ServeError::StoreStatus { addr, source })?
        .revision;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let threads = config.threads.max(1);
    let facade = Arc::new(Facade {
        store,
        config,
        revision: AtomicI64::new(revision),
        shutdown: stop_rx.clone(),
    });
    let mut shards = Vec::with_capacity(threads);
    for index in 0..threads {
        shards.push(shards::Shard::start(
            index,
            facade.clone(),
            addr,
            stop_rx.clone(),
        )?);
    }
    drop(facade);

    // Accept here and hand each connection to the next shard. If a shard has stopped (its
    // server failed), stop everything and report why.
    let mut shutdown = std::pin::pin!(shutdown);
    let mut next = 0;
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => {
                tracing::info!(%addr, "etcd v3 gRPC facade shutting down");
                break;
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // As tonic's own listener: a failed accept (say, out of file descriptors)
                    // drops that connection, not the server.
                    // Pause a moment so a lasting failure does not spin.
                    tracing::warn!(%addr, error = %err, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(%addr, error = %err, "setting TCP_NODELAY failed");
        }
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => {
                tracing::warn!(%addr, error = %err, "detaching an accepted connection failed");
                continue;
            }
        };
        if shards[next % threads].serve(stream).is_err() {
            tracing::error!(%addr, shard = next % threads, "a serving thread stopped");
            break;
        }
        next += 1;
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let mut result = Ok(());
    for shard in shards {
        let finished = shard.finish().await;
        if result.is_ok() {
            result = finished;
        }
    }
    result
}

/// The gRPC services of the facade behind one `Service`, dispatched on the method path's
/// service name.
///
/// tonic's own `transport::Server` puts a stack around its router for every request (connect
/// info, timeout, load shedding, error recovery) and routes through axum; the serving threads
/// (`shards`) hand requests straight to the generated services instead, which is what those
/// layers end in. What is left out: tonic's server-side `grpc-timeout` (the client's own
/// deadline still applies) and its concurrency limit and load shedding, which the facade never
/// configured.
pub(crate) struct Services<S: Store> {
    kv: pb::etcdserverpb::kv_server::KvServer<kv::KvService<S>>,
    watch: pb::etcdserverpb::watch_server::WatchServer<watch::WatchService<S>>,
    lease: pb::etcdserverpb::lease_server::LeaseServer<lease::LeaseService<S>>,
    maintenance:
        pb::etcdserverpb::maintenance_server::MaintenanceServer<maintenance::MaintenanceService<S>>,
    cluster: pb::etcdserverpb::cluster_server::ClusterServer<maintenance::ClusterService<S>>,
}

impl<S: Store> Clone for Services<S> {
    fn clone(&self) -> Self {
        Services {
            kv: self.kv.clone(),
            watch: self.watch.clone(),
            lease: self.lease.clone(),
            maintenance: self.maintenance.clone(),
            cluster: self.cluster.clone(),
        }
    }
}

impl<S: Store> Services<S> {
    pub(crate) fn new(facade: Arc<Facade<S>>) -> Services<S> {
        use pb::etcdserverpb::{
            cluster_server::ClusterServer, kv_server::KvServer, lease_server::LeaseServer,
            maintenance_server::MaintenanceServer, watch_server::WatchServer,
        };
        let max_request_bytes = facade.config.max_request_bytes;
        Services {
            // The KV service checks etcd's limit itself, to answer as etcd does (see kv.rs).
            kv: KvServer::new(kv::KvService::new(facade.clone()))
                .max_decoding_message_size(max_request_bytes.saturating_mul(4)),
            watch: WatchServer::new(watch::WatchService::new(facade.clone()))
                .max_decoding_message_size(max_request_bytes),
            lease: LeaseServer::new(lease::LeaseService::new(facade.clone())),
            maintenance: MaintenanceServer::new(maintenance::MaintenanceService::new(
                facade.clone(),
            )),
            cluster: ClusterServer::new(maintenance::ClusterService::new(facade)),
        }
    }
}

type GrpcResponse = http::Response<tonic::body::Body>;

impl<S: Store> tonic::codegen::Service<http::Request<hyper::body::Incoming>> for Services<S> {
    type Response = GrpcResponse;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<GrpcResponse, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        // the generated services are always ready
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<hyper::body::Incoming>) -> Self::Future {
        let service = request
            .uri()
            .path()
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .map_or("", |(service, _)| service);
        match service {
            "etcdserverpb.KV" => self.kv.call(request),
            "etcdserverpb.Watch" => self.watch.call(request),
            "etcdserverpb.Lease" => self.lease.call(request),
            "etcdserverpb.Maintenance" => self.maintenance.call(request),
            "etcdserverpb.Cluster" => self.cluster.call(request),
            _ => Box::pin(async { Ok(tonic::Status::unimplemented("").into_http()) }),
        }
    }
}

/// What every service shares: the store, the settings, and the highest store revision seen.
pub(crate) struct Facade<S> {
    pub(crate) store: S,
    pub(crate) config: FacadeConfig,
    /// The highest store revision any response has carried (only ever raised), for headers of
    /// responses whose store call reports no revision (lease calls, cancels). A cache, not a lock:
    /// it may trail the store by the writes in flight.
    revision: AtomicI64,
    /// Becomes `true` when the server shuts down; long-lived streams end then.
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
}

impl<S: Store> Facade<S> {
    /// A response header carrying `revision` (which also raises the cached revision).
    pub(crate) fn header(&self, revision: i64) -> pb::etcdserverpb::ResponseHeader {
        self.revision.fetch_max(revision, Ordering::Relaxed);
        pb::etcdserverpb::ResponseHeader {
            cluster_id: self.config.cluster_id,
            member_id: self.config.member_id,
            revision,
            raft_term: 1,
        }
    }

    /// A response header with the highest revision seen so far.
    pub(crate) fn cached_header(&self) -> pb::etcdserverpb::ResponseHeader {
        self.header(self.revision.load(Ordering::Relaxed))
    }

    /// The store's current revision, asked of the store (falls back to the cached revision if
    /// the store cannot answer).
    pub(crate) async fn current_revision(&self) -> i64 {
        match self.store.revision().await {
            Ok(revision) => {
                self.revision.fetch_max(revision, Ordering::Relaxed);
                revision
            }
            Err(err) => {
                tracing::warn!(error = %err, "store status failed; using the last revision seen");
                self.revision.load(Ordering::Relaxed)
            }
        }
    }

    /// Let the other requests whose writes went into the same group commit run first, so that
    /// their responses leave together, in one socket write per connection (see `shards`). On a
    /// single-threaded runtime the yielded task runs again once the ready tasks have run and
    /// the socket events have been polled.
    pub(crate) async fn after_commit(&self) {
        tokio::task::yield_now().await;
    }

    /// Resolves when the server is shutting down.
    pub(crate) async fn stopped(&self) {
        let mut rx = self.shutdown.clone();
        let _ = rx.wait_for(|&stopped| stopped).await;
    }
}
