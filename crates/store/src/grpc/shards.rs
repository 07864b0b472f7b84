//! Where the facade's connections are served: each accepted connection goes, round robin, to one
//! of a few threads, and each thread runs a single-threaded Tokio runtime of its own with the
//! gRPC services (hyper's HTTP/2 server, tonic's generated services) for the connections it
//! was given.
//!
//! # Why not the caller's multi-threaded runtime
//! Under many concurrent puts, the cost of the facade was mostly HTTP/2 and TCP work per request,
//! and above all one socket write per response. hyper runs every request in a task of its own,
//! which hands its response to the connection's task; on a multi-threaded runtime the task just
//! woken runs next on the same worker (Tokio's LIFO slot), so the connection task wrote each
//! response alone the moment it was ready, even when a whole group commit of responses became
//! ready at once: one `writev` per put on the server and one read and wake-up per put on the
//! client. A single-threaded runtime queues woken tasks first in, first out, so the requests of
//! one group commit all hand over their responses before their connection's task runs, and it
//! writes them in one `writev` (the put handler yields once after its commit to let that happen,
//! see `kv.rs`). Keeping a connection and its requests on one thread also avoids cross-thread
//! wake-ups and frees memory on the thread that allocated it. Several threads, not one, so the
//! facade can still use more than one core.
//!
//! The listener stays on the caller's runtime, which only accepts; the store (its writer thread
//! and background tasks) is untouched by this.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Facade, ServeError, Services};
use crate::store::Store;

/// One serving thread: where to send it connections, and how it ended.
pub(crate) struct Shard {
    connections: mpsc::UnboundedSender<std::net::TcpStream>,
    done: oneshot::Receiver<Result<(), ServeError>>,
}

impl Shard {
    /// Start a thread serving `facade` on the connections it is handed, until `stop` turns true
    /// (or its sender is dropped) and its connections have closed.
    pub(crate) fn start<S: Store>(
        index: usize,
        facade: Arc<Facade<S>>,
        addr: SocketAddr,
        stop: watch::Receiver<bool>,
    ) -> Result<Shard, ServeError> {
        let (connections, rx) = mpsc::unbounded_channel::<std::net::TcpStream>();
        let (done_tx, done) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("skiff-grpc-{index}"))
            .spawn(move || {
                let result = run(facade, addr, rx, stop);
                let _ = done_tx.send(result);
            })
            .map_err(|source| ServeError::Thread { addr, source })?;
        Ok(Shard { connections, done })
    }

    /// Hand the shard an accepted connection; gives it back if the shard has stopped.
    pub(crate) fn serve(&self, stream: std::net::TcpStream) -> Result<(), std::net::TcpStream> {
        self.connections.send(stream).map_err(|e| e.0)
    }

    /// Stop handing out connections and wait until the shard's server has returned.
    pub(crate) async fn finish(self) -> Result<(), ServeError> {
        let Shard { connections, done } = self;
        drop(connections);
        done.await.unwrap_or(Ok(()))
    }
}

fn run<S: Store>(
    facade: Arc<Facade<S>>,
    addr: SocketAddr,
    mut connections: mpsc::UnboundedReceiver<std::net::TcpStream>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ServeError::Runtime { addr, source })?;
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.max_concurrent_streams(facade.config.max_concurrent_streams);
    let services = Services::new(facade);
    runtime.block_on(async move {
        let graceful = GracefulShutdown::new();
        loop {
            let stream = tokio::select! {
                stream = connections.recv() => match stream {
                    Some(stream) => stream,
                    None => break,
                },
                _ = stop.wait_for(|&stopped| stopped) => break,
            };
            // registered with this thread's runtime here, as the connection is served on it
            let stream = match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(err) => {
                    tracing::warn!(%addr, error = %err, "dropping a connection the runtime refused");
                    continue;
                }
            };
            let service = TowerToHyperService::new(services.clone());
            let connection = graceful.watch(http2.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::debug!(%addr, error = %err, "gRPC connection ended");
                }
            });
        }
        // GOAWAY to every connection; unary requests in flight finish, streams end with the
        // facade's shutdown signal
        graceful.shutdown().await;
    });
    Ok(())
}
