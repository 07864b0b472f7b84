//! The facade's tests: served on `127.0.0.1:0` over a real [`EmbeddedStore`] in a temporary
//! directory, driven by the generated gRPC clients (exact wire fields) and by the `etcd-client`
//! crate (an independent client).
//!
//! # Layout
//! - `kv`: Range (limits, sorting, revision filters), Put, DeleteRange, Txn (and what it refuses).
//! - `errors`: store and request errors as etcd's gRPC codes and exact messages.
//! - `watch`: watch IDs, history replay, cancel, progress requests, compacted and lagging watches.
//! - `lease`: grant, keep-alive, time-to-live, list and revoke.
//! - `maintenance`: Status, Alarm, Defragment, MemberList, and the methods not served.
//! - `server`: shutdown, and interoperation with the `etcd-client` crate.

use std::net::SocketAddr;
use std::time::Duration;

use tempfile::TempDir;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use super::pb::etcdserverpb as rpc;
use super::pb::mvccpb;
use super::*;
use crate::types::KeyRange;
use crate::{CompactionPolicy, EmbeddedConfig, EmbeddedStore};

mod errors;
mod kv;
mod lease;
mod maintenance;
mod server;
mod watch;

/// Guards every wait on the server so a broken facade fails the test instead of hanging it.
const HANG_GUARD: Duration = Duration::from_secs(10);

/// The facade serving a fresh store of its own, until [`Server::stop`] or the end of the test.
struct Server {
    addr: SocketAddr,
    store: EmbeddedStore,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
    /// Holds the store's data directory; removed when the server is dropped.
    _dir: TempDir,
}

/// Serve a fresh store (at revision 1, as a fresh etcd) with the default settings.
async fn start() -> Server {
    start_with(|_| {}).await
}

/// Serve a fresh store whose settings `configure` adjusts. Automatic compaction is off, so only
/// the test's own `Compact` calls discard history.
async fn start_with(configure: impl FnOnce(&mut EmbeddedConfig)) -> Server {
    start_serving(configure, FacadeConfig::default()).await
}

/// Serve a fresh store whose settings `configure` adjusts, with the facade settings `facade`.
async fn start_serving(
    configure: impl FnOnce(&mut EmbeddedConfig),
    facade: FacadeConfig,
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EmbeddedConfig::new(dir.path());
    config.compaction = CompactionPolicy::Disabled;
    configure(&mut config);
    let store = EmbeddedStore::open(config).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_with_config(
        store.clone(),
        listener,
        facade,
        async move {
            let _ = stopped.await;
        },
    ));
    Server {
        addr,
        store,
        stop: Some(stop),
        task,
        _dir: dir,
    }
}

impl Server {
    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }
    async fn kv(&self) -> rpc::kv_client::KvClient<Channel> {
        rpc::kv_client::KvClient::new(self.channel().await)
    }
    async fn lease(&self) -> rpc::lease_client::LeaseClient<Channel> {
        rpc::lease_client::LeaseClient::new(self.channel().await)
    }
    async fn maintenance(&self) -> rpc::maintenance_client::MaintenanceClient<Channel> {
        rpc::maintenance_client::MaintenanceClient::new(self.channel().await)
    }
    async fn watch(&self) -> Watch {
        Watch::open(self.channel().await).await
    }
    /// Stop serving (which must succeed) and keep the data directory.
    async fn stop_keeping_dir(self) -> TempDir {
        let Server {
            stop, task, _dir, ..
        } = self;
        let _ = stop.unwrap().send(());
        tokio::time::timeout(HANG_GUARD, task)
            .await
            .expect("serve returns")
            .unwrap()
            .unwrap();
        _dir
    }
    async fn stop(mut self) -> Result<(), ServeError> {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(HANG_GUARD, self.task)
            .await
            .expect("serve returns")
            .unwrap()
    }
}

/// One Watch bidi stream.
struct Watch {
    tx: mpsc::Sender<rpc::WatchRequest>,
    responses: Streaming<rpc::WatchResponse>,
}

impl Watch {
    async fn open(channel: Channel) -> Watch {
        let mut client = rpc::watch_client::WatchClient::new(channel);
        let (tx, rx) = mpsc::channel(16);
        let responses = client
            .watch(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Watch { tx, responses }
    }
    async fn send(&self, req: rpc::watch_request::RequestUnion) {
        self.tx
            .send(rpc::WatchRequest {
                request_union: Some(req),
            })
            .await
            .unwrap();
    }
    async fn create(&self, create: rpc::WatchCreateRequest) {
        self.send(rpc::watch_request::RequestUnion::CreateRequest(create))
            .await;
    }
    async fn next(&mut self) -> rpc::WatchResponse {
        tokio::time::timeout(HANG_GUARD, self.responses.message())
            .await
            .expect("a watch response")
            .unwrap()
            .expect("the stream is open")
    }
}

fn range(key: &str) -> rpc::RangeRequest {
    rpc::RangeRequest {
        key: key.to_string().into(),
        ..Default::default()
    }
}

fn prefix(p: &str) -> rpc::RangeRequest {
    let r = KeyRange::prefix(p.to_string());
    rpc::RangeRequest {
        key: r.key,
        range_end: r.range_end,
        ..Default::default()
    }
}

fn put(key: &str, value: &str) -> rpc::PutRequest {
    rpc::PutRequest {
        key: key.to_string().into(),
        value: value.to_string().into(),
        ..Default::default()
    }
}

fn keys(resp: &rpc::RangeResponse) -> Vec<String> {
    resp.kvs
        .iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

fn watch_prefix(p: &str, start_revision: i64) -> rpc::WatchCreateRequest {
    let r = KeyRange::prefix(p.to_string());
    rpc::WatchCreateRequest {
        key: r.key,
        range_end: r.range_end,
        start_revision,
        ..Default::default()
    }
}
